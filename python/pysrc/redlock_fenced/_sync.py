"""The synchronous API: `Redlock`, `Lock`, `LockGuard`, `LostSignal`."""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from . import _native
from ._types import (
    Arg,
    Cluster,
    Member,
    NodeView,
    Resource,
    RetryPolicy,
    Seconds,
    Sentinel,
    check_fenced,
    check_key,
    command_args,
    seconds,
    transaction_args,
    ttl_seconds,
    wait_seconds,
)
from .errors import InvalidArgumentError, LockLostError

if TYPE_CHECKING:
    from typing import Self

    from .asyncio import AsyncRedlock

__all__ = ["Lock", "LockGuard", "LostSignal", "Redlock", "current_guard"]

P = ParamSpec("P")
R = TypeVar("R")
StrPath = str | os.PathLike[str]

_current: contextvars.ContextVar[LockGuard | None] = contextvars.ContextVar(
    "redlock_fenced_guard", default=None
)


def current_guard() -> LockGuard | None:
    """The guard of the innermost `hold()` or `synchronized` block running in
    this context (thread or asyncio task), or None."""
    return _current.get()


class LostSignal:
    """Set when the lock is lost (its validity ran out or an extension
    failed); once set it stays set. `wait()` blocks (GIL released, Ctrl-C
    works); `await signal` waits in asyncio."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.Signal) -> None:
        self._native = native

    def is_set(self) -> bool:
        """Whether the lock was lost."""
        return self._native.is_set()

    def wait(self, timeout: Seconds | None = None) -> bool:
        """Waits until the lock is lost or `timeout` seconds passed; returns
        `is_set()`."""
        limit = None if timeout is None else seconds("timeout", timeout, minimum=0.0, maximum=1e9)
        return self._native.wait(limit)

    def __await__(self) -> Generator[Any, None, None]:
        from ._bridge import call

        yield from call(self._native.wait_async).__await__()

    def __repr__(self) -> str:
        return f"<LostSignal is_set={self.is_set()}>"


def _lost_error(key: str, token: int) -> LockLostError:
    return LockLostError(
        f"the lock on {key!r} (token {token}) is lost: its validity ran out or an "
        "extension failed; stop using its token",
        key,
        token,
    )


def _members(members: Sequence[Member]) -> list[_native._Member]:
    if isinstance(members, (str, bytes)):
        raise TypeError(
            "members must be a list of node URLs, Cluster(...) or Sentinel(...) members, not one string"
        )
    out: list[_native._Member] = []
    for member in members:
        if isinstance(member, str):
            out.append(member)
        elif isinstance(member, Cluster):
            out.append(list(member.seeds))
        elif isinstance(member, Sentinel):
            out.append(
                (
                    "sentinel",
                    member.name,
                    list(member.sentinels),
                    member.data_user,
                    member.data_password,
                    member.data_tls,
                )
            )
        else:
            raise TypeError(
                f"a member must be a URL str, a Cluster or a Sentinel, got {type(member).__name__}"
            )
    return out


def _connect_args(
    members: Sequence[Member],
    node_timeout: Seconds,
    connect_timeout: Seconds,
    retry: RetryPolicy,
    drift_factor: float,
    clock_floor: bool,
    tls_ca_file: StrPath | None,
    tls_client_cert: tuple[StrPath, StrPath] | None,
    sync_timeout: Seconds = 0.25,
) -> tuple[Any, ...]:
    if not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
    if isinstance(retry.attempts, bool) or not isinstance(retry.attempts, int):
        raise TypeError("retry.attempts must be an int")
    if not 1 <= retry.attempts <= 1_000_000:
        raise InvalidArgumentError(
            f"invalid argument: retry.attempts must be from 1 to 1000000, got {retry.attempts}"
        )
    if isinstance(drift_factor, bool) or not isinstance(drift_factor, (int, float)):
        raise TypeError("drift_factor must be a float")
    if not 0.0 <= float(drift_factor) < 1.0:
        raise InvalidArgumentError(
            f"invalid argument: drift_factor must be in 0..1, got {drift_factor!r}"
        )
    if not isinstance(clock_floor, bool):
        raise TypeError("clock_floor must be a bool")
    if tls_client_cert is not None and (
        not isinstance(tls_client_cert, tuple) or len(tls_client_cert) != 2
    ):
        raise TypeError("tls_client_cert must be a (cert_path, key_path) tuple")
    return (
        _members(members),
        seconds("node_timeout", node_timeout, minimum=0.0, allow_minimum=False),
        seconds("connect_timeout", connect_timeout, minimum=0.0, allow_minimum=False),
        retry.attempts,
        seconds("retry.base_delay", retry.base_delay, minimum=0.0),
        seconds("retry.jitter", retry.jitter, minimum=0.0),
        float(drift_factor),
        clock_floor,
        tls_ca_file,
        tls_client_cert,
        seconds("sync_timeout", sync_timeout, minimum=0.0, allow_minimum=False),
    )


def _views(rows: list[Any]) -> list[NodeView]:
    return [NodeView(*row) for row in rows]


class Lock:
    """One acquisition: `key`, fencing `token`, `owner` id (a secret, left
    out of `repr`), `validity` (seconds left) and `lost`. Pass `token` to the
    protected resource with every operation. `with lock:` releases on exit.
    Thread-safe; not picklable (pass `detach()`'s owner id instead)."""

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
        """Set when the validity runs out or an extension fails."""
        if self._lost is None:
            self._lost = LostSignal(self._native.lost)
        return self._lost

    def raise_if_lost(self) -> None:
        """Raises `LockLostError` when the lock was lost."""
        if self.lost.is_set():
            raise _lost_error(self.key, self.token)

    def extend(self, ttl: Seconds) -> None:
        """Extends the lease to `ttl` seconds from now on a quorum. On any
        error `lost` is set: stop using the token."""
        self._native.extend(ttl_seconds(ttl))

    def release(self) -> bool:
        """Releases the lock: True when it was still held, False when its
        lease had already run out."""
        return self._native.release()

    def detach(self) -> str:
        """Stops tracking the lock without releasing it; returns the owner id
        for `Redlock.release_owner`."""
        return self._native.detach()

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
        newer holder has written: nothing ran; stop using this lock.
        `ResourceError` for any other refusal (the command's own error, a
        command the module does not fence, a guard of another lock, a
        connection failure). Never retried: after a lost reply the outcome is
        unknown (in a cluster, a MOVED or ASK redirect during resharding is
        a `ResourceError` too: nothing ran). The client keeps one connection
        per resource."""
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
        written) none does: with one guard and one token, a stale first
        command makes every later one stale. `ResourceError` when one
        command fails on its own (a wrong type, a command the module does not
        fence): the transaction has run, **the other commands took effect**
        (EXEC does not roll back), and their replies are lost; the message
        names the first error. In a cluster, every key must share the
        guard's hash tag. Never retried."""
        r, g = check_fenced(resource, guard)
        replies: list[Any] = self._native.fenced_transaction(r, g, transaction_args(commands))
        return replies

    def announce(self, resource: Resource, guard: str) -> int:
        """Shows this lock's token to `guard` on the resource server
        (`REDLOCK.GUARD`) without running anything, so that older holders are
        refused from now on; returns the guard's highest token (this one).
        Do it first after acquiring. Raises `StaleTokenError` when a newer
        token was seen."""
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
        _exit_release(self, self._native.release, exc)

    def __repr__(self) -> str:
        return f"<Lock key={self.key!r} token={self.token} validity={self.validity:.3f}>"

    def __reduce__(self) -> Any:
        raise TypeError("a Lock cannot be pickled: pass lock.detach()'s owner id instead")

    def __del__(self) -> None:
        _release_forgotten(self._native, "Lock")


def _exit_release(
    lock: Lock, release: Callable[[], bool], exc: BaseException | None
) -> None:
    if lock._native.state() in ("released", "detached"):
        return
    try:
        held = release()
    except Exception as problem:
        if exc is None:
            raise
        exc.add_note(f"redlock: releasing the lock on {lock.key!r} failed: {problem}")
        return
    if not held:
        if exc is None:
            raise _lost_error(lock.key, lock.token)
        exc.add_note(f"redlock: the lock on {lock.key!r} was already lost at release")


def _release_forgotten(native: _native.NativeLock | None, kind: str) -> None:
    """For `__del__`: a lock nobody released is released in the background,
    with a ResourceWarning."""
    try:
        if native is not None and native.state() == "held" and native.release_background():
            warnings.warn(
                f"{kind} on {native.key!r} (token {native.token}) was garbage-collected while "
                "held: released in the background; release it explicitly or use `with`",
                ResourceWarning,
                stacklevel=2,
            )
    except Exception:
        pass


class LockGuard:
    """What `hold()` gives: the lock, kept alive in the background while the
    block runs. `lost` is set when an extension fails or the validity runs
    out; stop using the token then."""

    __slots__ = ("_lost", "_native")

    def __init__(self, native: _native.NativeGuard) -> None:
        self._native = native
        self._lost = LostSignal(native.lost)

    @property
    def key(self) -> str:
        """The lock's key."""
        return self._native.key

    @property
    def token(self) -> int:
        """The fencing token."""
        return self._native.token

    @property
    def owner(self) -> str:
        """The owner id (a secret)."""
        return self._native.owner

    @property
    def validity(self) -> float:
        """Seconds of validity left (follows the extensions); 0.0 once lost."""
        return self._native.validity()

    @property
    def lost(self) -> LostSignal:
        """Set when the lock is lost."""
        return self._lost

    def raise_if_lost(self) -> None:
        """Raises `LockLostError` when the lock was lost."""
        if self._lost.is_set():
            raise _lost_error(self.key, self.token)

    def fenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """Runs `command` on the resource server, fenced by this lock's token
        on `guard` (blocking; in `AsyncRedlock.hold` use `afenced`). As
        `Lock.fenced`."""
        r, g = check_fenced(resource, guard)
        return self._native.fenced(r, g, command_args(command))

    async def afenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """`fenced` as a coroutine (for `AsyncRedlock.hold`)."""
        from ._bridge import call

        r, g = check_fenced(resource, guard)
        args = command_args(command)
        return await call(lambda b, i: self._native.fenced_async(b, i, r, g, args))

    def fenced_transaction(
        self, resource: Resource, guard: str, commands: Sequence[Sequence[Arg]]
    ) -> list[Any]:
        """Runs `commands` in one MULTI/EXEC, each fenced by this lock's
        token on `guard` (blocking; in `AsyncRedlock.hold` use
        `afenced_transaction`): the list of their replies. As
        `Lock.fenced_transaction`."""
        r, g = check_fenced(resource, guard)
        replies: list[Any] = self._native.fenced_transaction(r, g, transaction_args(commands))
        return replies

    async def afenced_transaction(
        self, resource: Resource, guard: str, commands: Sequence[Sequence[Arg]]
    ) -> list[Any]:
        """`fenced_transaction` as a coroutine (for `AsyncRedlock.hold`)."""
        from ._bridge import call

        r, g = check_fenced(resource, guard)
        cmds = transaction_args(commands)
        replies: list[Any] = await call(
            lambda b, i: self._native.fenced_transaction_async(b, i, r, g, cmds)
        )
        return replies

    def announce(self, resource: Resource, guard: str) -> int:
        """Shows this lock's token to `guard` (blocking); returns the guard's
        highest token. As `Lock.announce`."""
        r, g = check_fenced(resource, guard)
        return self._native.announce(r, g)

    async def aannounce(self, resource: Resource, guard: str) -> int:
        """`announce` as a coroutine (for `AsyncRedlock.hold`)."""
        from ._bridge import call

        r, g = check_fenced(resource, guard)
        highest: int = await call(lambda b, i: self._native.announce_async(b, i, r, g))
        return highest

    def __repr__(self) -> str:
        return (
            f"<LockGuard key={self.key!r} token={self.token} validity={self.validity:.3f} "
            f"lost={self._lost.is_set()}>"
        )


class Redlock:
    """A Redlock client over independent Redis masters running the redlock
    module (blocking API; see `AsyncRedlock` for asyncio). Make it with
    `Redlock.connect(...)`. Thread-safe; share one per process. Do not call
    it from a coroutine (it would block the event loop): use `as_async()`."""

    __slots__ = ("_client",)

    def __init__(self, client: _native.Client) -> None:
        self._client = client

    @classmethod
    def connect(
        cls,
        members: Sequence[Member],
        *,
        node_timeout: Seconds = 0.1,
        connect_timeout: Seconds = 1.0,
        retry: RetryPolicy = RetryPolicy(),
        drift_factor: float = 0.01,
        clock_floor: bool = True,
        tls_ca_file: StrPath | None = None,
        tls_client_cert: tuple[StrPath, StrPath] | None = None,
        sync_timeout: Seconds = 0.25,
    ) -> Self:
        """Connects to every member (node URLs `redis://host:port`,
        `rediss://` for TLS, `Cluster(...)` or `Sentinel(...)`) and checks
        for the module. `sync_timeout`: how long a grant or extension on a
        master with `redlock.sync-replicas` set may wait for its replicas."""
        args = _connect_args(
            members, node_timeout, connect_timeout, retry, drift_factor, clock_floor,
            tls_ca_file, tls_client_cert, sync_timeout,
        )
        return cls(_native.Client.connect(*args))

    @property
    def nodes(self) -> list[str]:
        """The members' addresses, in the order given."""
        return list(self._client.nodes)

    @property
    def quorum(self) -> int:
        """How many members must agree: `len(nodes) // 2 + 1`."""
        return self._client.quorum

    def acquire(self, key: str, ttl: Seconds, *, wait: Seconds | None = None) -> Lock:
        """Takes the lock for `ttl` seconds. Without `wait`, retries per the
        `RetryPolicy` and raises `LockBusyError` when it stays busy; with
        `wait`, waits up to that many seconds, woken by the nodes when the
        lock frees (no polling)."""
        return Lock(self._client.acquire(check_key(key), ttl_seconds(ttl), wait_seconds(wait)))

    def try_acquire(self, key: str, ttl: Seconds) -> Lock | None:
        """One attempt: the lock, or None when another owner holds it."""
        native = self._client.try_acquire(check_key(key), ttl_seconds(ttl))
        return None if native is None else Lock(native)

    def hold(
        self,
        key: str,
        ttl: Seconds,
        *,
        wait: Seconds | None = None,
        raise_on_lost: bool = True,
    ) -> AbstractContextManager[LockGuard]:
        """A context manager that holds the lock while the block runs,
        extending it in the background about every ttl/3, and releases it on
        exit. When the lock was lost and the block raised nothing, the exit
        raises `LockLostError` (unless `raise_on_lost=False`)."""
        return self._hold(check_key(key), ttl_seconds(ttl), wait_seconds(wait), raise_on_lost)

    @contextmanager
    def _hold(
        self, key: str, ttl: float, wait: float | None, raise_on_lost: bool
    ) -> Iterator[LockGuard]:
        native = self._client.hold(key, ttl, wait)
        guard = LockGuard(native)
        reset = _current.set(guard)
        try:
            yield guard
        finally:
            _current.reset(reset)
            native.exit()
        if raise_on_lost and guard.lost.is_set():
            raise _lost_error(guard.key, guard.token)

    def synchronized(
        self, key: str, ttl: Seconds, *, wait: Seconds | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: each call of the function runs inside
        `hold(key, ttl, wait=wait)`; `current_guard()` gives the guard."""
        check_key(key)
        ttl_s = ttl_seconds(ttl)
        wait_s = wait_seconds(wait)

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(fn):
                raise TypeError("use AsyncRedlock.synchronized for an async def function")

            @functools.wraps(fn)
            def locked(*args: P.args, **kwargs: P.kwargs) -> R:
                with self._hold(key, ttl_s, wait_s, True):
                    return fn(*args, **kwargs)

            return locked

        return decorate

    def release_owner(self, key: str, owner: str) -> bool:
        """Releases `key` for the owner id `owner` (from `Lock.detach()`), e.g.
        from another process. True when that owner held it."""
        if not isinstance(owner, str):
            raise TypeError(f"owner must be a str, got {type(owner).__name__}")
        return self._client.release_owner(check_key(key), owner)

    def inspect(self, key: str) -> list[NodeView]:
        """Every member's view of `key` (read-only)."""
        return _views(self._client.inspect(check_key(key)))

    def as_async(self) -> AsyncRedlock:
        """An `AsyncRedlock` on the same connections."""
        from .asyncio import AsyncRedlock

        return AsyncRedlock(self._client)

    def close(self) -> None:
        """Drops the connections; later calls raise `LockStateError`."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Redlock nodes={self._client.nodes} quorum={self.quorum}>"
