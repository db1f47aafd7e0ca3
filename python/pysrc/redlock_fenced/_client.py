"""The clients: `Redlock` (blocking) and `AsyncRedlock` (asyncio). Both wrap
one native client, and each converts into the other on the same connections
(`as_async()`, `as_sync()`), so they live in one module."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from . import _native
from ._election import (
    AsyncElection,
    AsyncLeadership,
    AsyncObserver,
    Election,
    Leader,
    Leadership,
    Observer,
)
from ._lock import AcquireContext, AsyncLock, Lock
from ._lock_set import AsyncLockSet, LockSet, check_names
from ._shared import LockGuard, StrPath, connect_args, current, lost_error, views
from ._types import (
    Member,
    NodeView,
    RetryPolicy,
    Seconds,
    check_key,
    ttl_seconds,
    wait_seconds,
)

if TYPE_CHECKING:
    from typing import Self

__all__ = ["AsyncRedlock", "Redlock"]

P = ParamSpec("P")
R = TypeVar("R")

_LOST_MESSAGE = "redlock: lock lost"


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
        args = connect_args(
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

    def acquire_many(
        self, names: Sequence[str], ttl: Seconds, *, wait: Seconds | None = None
    ) -> LockSet:
        """Takes every name of `names` at once for `ttl` seconds (all or none
        on each node, in byte order: overlapping sets never deadlock),
        retrying per the `RetryPolicy`; `LockBusyError` when it stays busy,
        `InvalidArgumentError` for an empty set or a name given twice. With
        `wait`, waits up to that many seconds for the whole set, woken by
        the nodes (no polling; waiters served in the order they came);
        Ctrl-C while it waits leaves no grant."""
        native = _native.acquire_many(
            self._client, check_names(names), ttl_seconds(ttl), wait_seconds(wait)
        )
        assert native is not None
        return LockSet(native)

    def try_acquire_many(self, names: Sequence[str], ttl: Seconds) -> LockSet | None:
        """One attempt at the set: None when another owner holds any name."""
        native = _native.try_acquire_many(self._client, check_names(names), ttl_seconds(ttl))
        return None if native is None else LockSet(native)

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
        reset = current.set(guard)
        try:
            yield guard
        finally:
            current.reset(reset)
            native.exit()
        if raise_on_lost and guard.lost.is_set():
            raise lost_error(guard.key, guard.token)

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
        return views(self._client.inspect(check_key(key)))

    def election(self, name: str) -> Election:
        """The leader election over `name` (its lock is the key `name`):
        `campaign`, `leader`, `observe`."""
        return Election(self._client, name)

    def campaign(self, name: str, ttl: Seconds, value: str | None = None) -> Leadership:
        """Waits until this candidate leads `name` and returns its term
        (epoch, `lost`, `proclaim`, `resign`); `value` is proclaimed at once
        when given. Same as `election(name).campaign(ttl, value)`."""
        return Election(self._client, name).campaign(ttl, value)

    def leader(self, name: str) -> Leader | None:
        """Who leads `name` now (epoch, time left, value), or None."""
        return Election(self._client, name).leader()

    def observe(self, name: str) -> Observer:
        """The leadership changes of `name`, in order: an iterator of
        `Leader`."""
        return Election(self._client, name).observe()

    def as_async(self) -> AsyncRedlock:
        """An `AsyncRedlock` on the same connections."""
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
        """Connects to every member and checks for the module (see
        `Redlock.connect`)."""
        args = connect_args(
            members, node_timeout, connect_timeout, retry, drift_factor, clock_floor,
            tls_ca_file, tls_client_cert, sync_timeout,
        )
        client: _native.Client = await _native.Client.connect_async(*args)
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
        `Redlock.acquire`. Without a wait the round is never cut when the
        caller is cancelled: it finishes and its lock is released at once."""
        return AcquireContext(
            self._client,
            key if type(key) is str else check_key(key),
            ttl_seconds(ttl),
            None if wait is None else wait_seconds(wait),
        )

    async def try_acquire(self, key: str, ttl: Seconds) -> AsyncLock | None:
        """One attempt: the lock, or None when another owner holds it."""
        k, t = check_key(key), ttl_seconds(ttl)
        native: _native.NativeLock | None = await self._client.try_acquire_async(k, t)
        return None if native is None else AsyncLock(native)

    async def acquire_many(
        self, names: Sequence[str], ttl: Seconds, *, wait: Seconds | None = None
    ) -> AsyncLockSet:
        """As `Redlock.acquire_many`, as a coroutine; cancelling a waiting
        call leaves no grant."""
        n, t, w = check_names(names), ttl_seconds(ttl), wait_seconds(wait)
        native: _native.NativeLockSet | None = await _native.acquire_many_async(
            self._client, n, t, w
        )
        assert native is not None
        return AsyncLockSet(native)

    async def try_acquire_many(self, names: Sequence[str], ttl: Seconds) -> AsyncLockSet | None:
        """As `Redlock.try_acquire_many`, as a coroutine."""
        n, t = check_names(names), ttl_seconds(ttl)
        native: _native.NativeLockSet | None = await _native.try_acquire_many_async(
            self._client, n, t
        )
        return None if native is None else AsyncLockSet(native)

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
        native: _native.NativeGuard = await self._client.hold_async(key, ttl, wait)
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
        reset = current.set(guard)
        try:
            yield guard
        except asyncio.CancelledError as cancelled:
            if cancelled_by_us and task is not None and task.uncancel() == 0:
                raise lost_error(guard.key, guard.token) from cancelled
            raise
        finally:
            current.reset(reset)
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            await native.exit_async()
        if raise_on_lost and guard.lost.is_set():
            if cancelled_by_us and task is not None:
                task.uncancel()
            raise lost_error(guard.key, guard.token)

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
        freed: bool = await self._client.release_owner_async(k, owner)
        return freed

    async def inspect(self, key: str) -> list[NodeView]:
        """Every member's view of `key` (read-only)."""
        k = check_key(key)
        rows: list[Any] = await self._client.inspect_async(k)
        return views(rows)

    def election(self, name: str) -> AsyncElection:
        """The leader election over `name` (asyncio): `campaign`, `leader`,
        `observe`."""
        return AsyncElection(self._client, name)

    async def campaign(
        self, name: str, ttl: Seconds, value: str | None = None
    ) -> AsyncLeadership:
        """As `Redlock.campaign`, as a coroutine."""
        return await AsyncElection(self._client, name).campaign(ttl, value)

    async def leader(self, name: str) -> Leader | None:
        """As `Redlock.leader`, as a coroutine."""
        return await AsyncElection(self._client, name).leader()

    def observe(self, name: str) -> AsyncObserver:
        """The leadership changes of `name`, in order: an async iterator of
        `Leader`."""
        return AsyncElection(self._client, name).observe()

    def as_sync(self) -> Redlock:
        """A `Redlock` on the same connections (for threads, not coroutines)."""
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
