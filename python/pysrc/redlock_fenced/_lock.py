"""One acquisition: `Lock` (blocking) and `AsyncLock` (asyncio), and
`AcquireContext`, what `AsyncRedlock.acquire` returns."""

from __future__ import annotations

from collections.abc import Awaitable, Generator, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import _native
from ._shared import LostSignal, lost_error
from ._types import (
    Arg,
    Resource,
    Seconds,
    check_fenced,
    command_args,
    transaction_args,
    ttl_seconds,
)

if TYPE_CHECKING:
    from typing import Self

__all__ = ["AcquireContext", "AsyncLock", "Lock"]


class _HeldLock:
    """What `Lock` and `AsyncLock` share: the read-only view of the lock. A
    lock garbage-collected while held is released in the background with a
    `ResourceWarning` (by the native lock)."""

    __slots__ = ("__weakref__", "_lost", "_native")

    def __init__(self, native: _native.NativeLock) -> None:
        self._native = native
        self._lost: LostSignal | None = None

    @property
    def key(self) -> str:
        """The lock's key."""
        return self._native.key

    @property
    def token(self) -> int:
        """The fencing token: higher than every earlier token of this key."""
        return self._native.token

    @property
    def owner(self) -> str:
        """The owner id (anyone who knows it can release the lock)."""
        return self._native.owner

    @property
    def validity(self) -> float:
        """Seconds of validity left; 0.0 once lost or released."""
        return self._native.validity()

    @property
    def lost(self) -> LostSignal:
        """Set when the validity runs out, an extension fails, or a fenced
        command meets a newer holder (`StaleTokenError`); `await lock.lost`
        in asyncio."""
        if self._lost is None:
            self._lost = LostSignal(self._native.lost)
        return self._lost

    def raise_if_lost(self) -> None:
        """Raises `LockLostError` when the lock was lost."""
        if self.lost.is_set():
            raise lost_error(self.key, self.token)

    def detach(self) -> str:
        """Stops tracking the lock without releasing it; returns the owner id
        for `release_owner`."""
        return self._native.detach()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} key={self.key!r} token={self.token} "
            f"validity={self.validity:.3f}>"
        )

    def __reduce__(self) -> Any:
        raise TypeError(
            f"{type(self).__name__} objects cannot be pickled: pass lock.detach()'s owner id "
            "instead"
        )


def _after_release(lock: _HeldLock, held: bool, exc: BaseException | None) -> None:
    """The end of a `with lock:` block whose release returned `held`."""
    if not held:
        if exc is None:
            raise lost_error(lock.key, lock.token)
        exc.add_note(f"redlock: the lock on {lock.key!r} was already lost at release")


def _release_failed(lock: _HeldLock, problem: Exception, exc: BaseException | None) -> None:
    """The end of a `with lock:` block whose release raised `problem`."""
    if exc is None:
        raise problem
    exc.add_note(f"redlock: releasing the lock on {lock.key!r} failed: {problem}")


class Lock(_HeldLock):
    """One acquisition: `key`, fencing `token`, `owner` id (a secret, left
    out of `repr`), `validity` (seconds left) and `lost`. Pass `token` to the
    protected resource with every operation. `with lock:` releases on exit.
    Thread-safe; not picklable (pass `detach()`'s owner id instead)."""

    __slots__ = ()

    def extend(self, ttl: Seconds) -> None:
        """Extends the lease to `ttl` seconds from now on a quorum. On any
        error `lost` is set: stop using the token."""
        self._native.extend(ttl_seconds(ttl))

    def release(self) -> bool:
        """Releases the lock: True when it was still held, False when its
        lease had already run out."""
        return self._native.release()

    def fenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """Runs `command` (its name and arguments, e.g. `"SET", "{job}:state",
        "done"`) on the resource server, fenced by this lock's token on the
        key `guard`.

        The command runs on the resource server at the URL `resource`
        (`redis://host:port/`; it loads the redlock module and is usually not
        one of the lock's nodes) as `REDLOCK.FENCED guard key token command…`:
        only when this lock's token is at least the highest `guard` has seen,
        which it then becomes. `resource` may also be a Redis Cluster,
        `Cluster("redis://host:7000", …)`: the command goes to the master of
        the guard's slot, so give the guard and the command's keys one hash
        tag (`{job}:fence`, `{job}:state`). A `rediss://` resource uses the
        client's TLS files (`tls_ca_file`, `tls_client_cert`).

        Returns the command's own reply: nil `None`, integer `int`, bulk
        string `bytes`, status `str` ("OK"), array `list` (RESP3 adds `dict`,
        `set`, `float`, `bool`). Raises `StaleTokenError` (`.highest`) when a
        newer holder has written: nothing ran, `lost` is set; stop using this
        lock. `ModuleNotLoadedError` when the resource server runs without
        the module. `ResourceError` for any other refusal (the command's own
        error, a command the module does not fence, a guard of another lock,
        a connection failure). Never retried: after a lost reply the outcome
        is unknown (in a cluster, a MOVED or ASK redirect during resharding
        is a `ResourceError` too: nothing ran). The client keeps one
        connection per resource."""
        r, g = check_fenced(resource, guard)
        return self._native.fenced(r, g, command_args(command))

    def fenced_transaction(
        self, resource: Resource, guard: str, commands: Sequence[Sequence[Arg]]
    ) -> list[Any]:
        """Runs `commands` (each a sequence of a command's name and
        arguments, e.g. `[("SET", "{job}:a", 1), ("SET", "{job}:b", 2)]`) in
        one `MULTI`/`EXEC` on `resource`, each fenced by this lock's token on
        `guard`; returns the list of their replies (converted as in `fenced`).

        Either every command runs, or (`StaleTokenError`: a newer holder has
        written; `lost` is set) none does: with one guard and one token, a
        stale first command makes every later one stale. `ResourceError` when
        one command fails on its own (a wrong type, a command the module does
        not fence): the transaction has run, **the other commands took
        effect** (EXEC does not roll back), and their replies are lost; the
        message names the first error. In a cluster, every key must share
        the guard's hash tag. Never retried."""
        r, g = check_fenced(resource, guard)
        replies: list[Any] = self._native.fenced_transaction(r, g, transaction_args(commands))
        return replies

    def announce(self, resource: Resource, guard: str) -> int:
        """Shows this lock's token to `guard` on the resource server
        (`REDLOCK.GUARD`) without running anything, so that older holders are
        refused from now on; returns the guard's highest token (this one).
        Do it first after acquiring. Raises `StaleTokenError` (and sets
        `lost`) when a newer token was seen."""
        r, g = check_fenced(resource, guard)
        return self._native.announce(r, g)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._native.state() in ("released", "detached"):
            return
        try:
            held = self._native.release()
        except Exception as problem:
            _release_failed(self, problem, exc)
            return
        _after_release(self, held, exc)


class AsyncLock(_HeldLock):
    """One acquisition (asyncio): as `Lock`, with coroutine `extend`,
    `release` and fenced commands; `async with lock:` releases on exit."""

    __slots__ = ()

    async def extend(self, ttl: Seconds) -> None:
        """Extends the lease to `ttl` seconds from now. When cancelled, the
        nodes' extensions finish in the background and the old (shorter)
        validity stays."""
        t = ttl_seconds(ttl)
        await self._native.extend_async(t)

    async def release(self) -> bool:
        """Releases the lock: True when it was still held. When cancelled, the
        release still goes on."""
        held: bool = await self._native.release_async()
        return held

    async def fenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """Runs `command` on the resource server, fenced by this lock's token
        on `guard`; as `Lock.fenced`. Cancelling stops waiting for the reply
        (the outcome is then unknown)."""
        r, g = check_fenced(resource, guard)
        args = command_args(command)
        return await self._native.fenced_async(r, g, args)

    async def fenced_transaction(
        self, resource: Resource, guard: str, commands: Sequence[Sequence[Arg]]
    ) -> list[Any]:
        """Runs `commands` in one MULTI/EXEC, each fenced by this lock's
        token on `guard`: the list of their replies. As
        `Lock.fenced_transaction` (all or, on `StaleTokenError`, none; on
        `ResourceError` the other commands took effect). Cancelling stops
        waiting for the reply (the outcome is then unknown)."""
        r, g = check_fenced(resource, guard)
        cmds = transaction_args(commands)
        replies: list[Any] = await self._native.fenced_transaction_async(r, g, cmds)
        return replies

    async def announce(self, resource: Resource, guard: str) -> int:
        """Shows this lock's token to `guard`; returns the guard's highest
        token. As `Lock.announce`."""
        r, g = check_fenced(resource, guard)
        highest: int = await self._native.announce_async(r, g)
        return highest

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._native.state() in ("released", "detached"):
            return
        try:
            held = await self._native.release_async()
        except Exception as problem:
            _release_failed(self, problem, exc)
            return
        _after_release(self, held, exc)


class AcquireContext(Awaitable[AsyncLock], AbstractAsyncContextManager[AsyncLock]):
    """What `AsyncRedlock.acquire` returns: `await` it for an `AsyncLock`, or
    use it with `async with` (released on exit). Nothing starts until it is
    awaited or entered."""

    __slots__ = ("_client", "_key", "_lock", "_ttl", "_wait")

    def __init__(self, client: _native.Client, key: str, ttl: float, wait: float | None) -> None:
        self._client = client
        self._key = key
        self._ttl = ttl
        self._wait = wait
        self._lock: AsyncLock | None = None

    def __await__(self) -> Generator[Any, None, AsyncLock]:
        future: _native.NativeFuture[AsyncLock] = self._client.acquire_async(
            self._key, self._ttl, self._wait, AsyncLock
        )
        return future.__await__()

    async def __aenter__(self) -> AsyncLock:
        self._lock = await self
        return self._lock

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            await lock.__aexit__(exc_type, exc, tb)
