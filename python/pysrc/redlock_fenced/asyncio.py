"""The asyncio API: `AsyncRedlock`, `AsyncLock`, `AcquireContext`.

Every call runs in the shared Rust runtime and never blocks the event loop.
Cancelling a call never leaves a grant behind: a plain acquisition finishes
in the background and is released at once; a waiting one is dropped.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from . import _native
from ._bridge import call
from ._sync import (
    LockGuard,
    LostSignal,
    StrPath,
    _connect_args,
    _current,
    _lost_error,
    _release_forgotten,
    _views,
)
from ._types import (
    Arg,
    Member,
    NodeView,
    Resource,
    RetryPolicy,
    Seconds,
    check_fenced,
    check_key,
    command_args,
    transaction_args,
    ttl_seconds,
    wait_seconds,
)

if TYPE_CHECKING:
    from typing import Self

    from ._sync import Redlock

__all__ = ["AcquireContext", "AsyncLock", "AsyncRedlock"]

P = ParamSpec("P")
R = TypeVar("R")

_LOST_MESSAGE = "redlock: lock lost"


class AsyncLock:
    """One acquisition (asyncio): as `Lock`, with coroutine `extend` and
    `release`; `async with lock:` releases on exit."""

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
        """Set when the validity runs out or an extension fails (`await lock.lost`)."""
        if self._lost is None:
            self._lost = LostSignal(self._native.lost)
        return self._lost

    def raise_if_lost(self) -> None:
        """Raises `LockLostError` when the lock was lost."""
        if self.lost.is_set():
            raise _lost_error(self.key, self.token)

    async def extend(self, ttl: Seconds) -> None:
        """Extends the lease to `ttl` seconds from now. When cancelled, the
        nodes' extensions finish in the background and the old (shorter)
        validity stays."""
        t = ttl_seconds(ttl)
        await call(lambda b, i: self._native.extend_async(b, i, t))

    async def release(self) -> bool:
        """Releases the lock: True when it was still held. When cancelled, the
        release still goes on."""
        held: bool = await call(self._native.release_async, cancellable=False)
        return held

    def detach(self) -> str:
        """Stops tracking the lock without releasing it; returns the owner id."""
        return self._native.detach()

    async def fenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """Runs `command` on the resource server, fenced by this lock's token
        on `guard`; as `Lock.fenced`. Cancelling stops waiting for the reply
        (the outcome is then unknown)."""
        r, g = check_fenced(resource, guard)
        args = command_args(command)
        return await call(lambda b, i: self._native.fenced_async(b, i, r, g, args))

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
        replies: list[Any] = await call(
            lambda b, i: self._native.fenced_transaction_async(b, i, r, g, cmds)
        )
        return replies

    async def announce(self, resource: Resource, guard: str) -> int:
        """Shows this lock's token to `guard`; returns the guard's highest
        token. As `Lock.announce`."""
        r, g = check_fenced(resource, guard)
        highest: int = await call(lambda b, i: self._native.announce_async(b, i, r, g))
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
            held = await call(self._native.release_async, cancellable=False)
        except Exception as problem:
            if exc is None:
                raise
            exc.add_note(f"redlock: releasing the lock on {self.key!r} failed: {problem}")
            return
        if not held:
            if exc is None:
                raise _lost_error(self.key, self.token)
            exc.add_note(f"redlock: the lock on {self.key!r} was already lost at release")

    def __repr__(self) -> str:
        return f"<AsyncLock key={self.key!r} token={self.token} validity={self.validity:.3f}>"

    def __reduce__(self) -> Any:
        raise TypeError("an AsyncLock cannot be pickled: pass lock.detach()'s owner id instead")

    def __del__(self) -> None:
        _release_forgotten(self._native, "AsyncLock")


class AcquireContext(Awaitable[AsyncLock], AbstractAsyncContextManager[AsyncLock]):
    """What `AsyncRedlock.acquire` returns: `await` it for an `AsyncLock`, or
    use it with `async with` (released on exit). Nothing starts until it is
    awaited or entered."""

    __slots__ = ("_lock", "_start")

    def __init__(self, start: Callable[[], asyncio.Future[AsyncLock]]) -> None:
        self._start = start
        self._lock: AsyncLock | None = None

    def __await__(self) -> Generator[Any, None, AsyncLock]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncLock:
        self._lock = await self._start()
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


class AsyncRedlock:
    """A Redlock client for asyncio: `await AsyncRedlock.connect(...)`. Same
    options and calls as `Redlock`, as coroutines; shares the Rust runtime
    (and, through `as_sync()`, the connections) with the sync API."""

    __slots__ = ("_client",)

    def __init__(self, client: _native.Client) -> None:
        self._client = client

    @classmethod
    async def connect(
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
        """Connects to every member and checks for the module."""
        args = _connect_args(
            members, node_timeout, connect_timeout, retry, drift_factor, clock_floor,
            tls_ca_file, tls_client_cert, sync_timeout,
        )
        client: _native.Client = await call(lambda b, i: _native.Client.connect_async(b, i, *args))
        return cls(client)

    @property
    def nodes(self) -> list[str]:
        """The members' addresses, in the order given."""
        return list(self._client.nodes)

    @property
    def quorum(self) -> int:
        """How many members must agree."""
        return self._client.quorum

    def acquire(self, key: str, ttl: Seconds, *, wait: Seconds | None = None) -> AcquireContext:
        """Takes the lock: `lock = await redlock.acquire(...)` or
        `async with redlock.acquire(...) as lock:`. `wait` as in
        `Redlock.acquire`."""
        k, t, w = check_key(key), ttl_seconds(ttl), wait_seconds(wait)
        client = self._client

        def start() -> asyncio.Future[AsyncLock]:
            # Without a wait the round is never cut (see the module docs).
            return call(
                lambda b, i: client.acquire_async(b, i, k, t, w),
                wrap=AsyncLock,
                cancellable=w is not None,
            )

        return AcquireContext(start)

    async def try_acquire(self, key: str, ttl: Seconds) -> AsyncLock | None:
        """One attempt: the lock, or None when another owner holds it."""
        k, t = check_key(key), ttl_seconds(ttl)
        native: _native.NativeLock | None = await call(
            lambda b, i: self._client.try_acquire_async(b, i, k, t), cancellable=False
        )
        return None if native is None else AsyncLock(native)

    def hold(
        self,
        key: str,
        ttl: Seconds,
        *,
        wait: Seconds | None = None,
        raise_on_lost: bool = True,
        cancel_on_lost: bool = True,
    ) -> AbstractAsyncContextManager[LockGuard]:
        """An async context manager that holds the lock while the block runs,
        extended in the background. With `cancel_on_lost` (the default), a
        lost lock cancels the task running the block, like `asyncio.timeout`,
        and the exit raises `LockLostError`; otherwise the exit raises it
        when the block raised nothing (unless `raise_on_lost=False`)."""
        return self._hold(
            check_key(key), ttl_seconds(ttl), wait_seconds(wait), raise_on_lost, cancel_on_lost
        )

    @asynccontextmanager
    async def _hold(
        self,
        key: str,
        ttl: float,
        wait: float | None,
        raise_on_lost: bool,
        cancel_on_lost: bool,
    ) -> AsyncIterator[LockGuard]:
        native: _native.NativeGuard = await call(
            lambda b, i: self._client.hold_async(b, i, key, ttl, wait),
            cancellable=wait is not None,
        )
        guard = LockGuard(native)
        task = asyncio.current_task()
        cancelled_by_us = False

        async def watch() -> None:
            nonlocal cancelled_by_us
            await guard.lost
            if task is not None:
                cancelled_by_us = True
                task.cancel(_LOST_MESSAGE)

        watcher = asyncio.ensure_future(watch()) if cancel_on_lost and task is not None else None
        reset = _current.set(guard)
        try:
            yield guard
        except asyncio.CancelledError as cancelled:
            if cancelled_by_us and task is not None and task.uncancel() == 0:
                raise _lost_error(guard.key, guard.token) from cancelled
            raise
        finally:
            _current.reset(reset)
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            await call(native.exit_async, cancellable=False)
        if raise_on_lost and guard.lost.is_set():
            if cancelled_by_us and task is not None:
                task.uncancel()
            raise _lost_error(guard.key, guard.token)

    def synchronized(
        self, key: str, ttl: Seconds, *, wait: Seconds | None = None
    ) -> Callable[
        [Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]
    ]:
        """A decorator for `async def` functions: each call runs inside
        `hold(key, ttl, wait=wait)`."""
        check_key(key)
        ttl_s = ttl_seconds(ttl)
        wait_s = wait_seconds(wait)

        def decorate(
            fn: Callable[P, Coroutine[Any, Any, R]],
        ) -> Callable[P, Coroutine[Any, Any, R]]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(
                    "AsyncRedlock.synchronized needs an async def function; use Redlock.synchronized"
                )

            @functools.wraps(fn)
            async def locked(*args: P.args, **kwargs: P.kwargs) -> R:
                async with self._hold(key, ttl_s, wait_s, True, True):
                    return await fn(*args, **kwargs)

            return locked

        return decorate

    async def release_owner(self, key: str, owner: str) -> bool:
        """Releases `key` for the owner id `owner`; True when that owner held it."""
        if not isinstance(owner, str):
            raise TypeError(f"owner must be a str, got {type(owner).__name__}")
        k = check_key(key)
        freed: bool = await call(
            lambda b, i: self._client.release_owner_async(b, i, k, owner), cancellable=False
        )
        return freed

    async def inspect(self, key: str) -> list[NodeView]:
        """Every member's view of `key` (read-only)."""
        k = check_key(key)
        rows: list[Any] = await call(lambda b, i: self._client.inspect_async(b, i, k))
        return _views(rows)

    def as_sync(self) -> Redlock:
        """A `Redlock` on the same connections (for threads, not coroutines)."""
        from ._sync import Redlock

        return Redlock(self._client)

    async def aclose(self) -> None:
        """Drops the connections; later calls raise `LockStateError`."""
        self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncRedlock nodes={self._client.nodes} quorum={self.quorum}>"

