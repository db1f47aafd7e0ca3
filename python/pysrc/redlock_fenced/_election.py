"""Leader election with fencing epochs, over the Rust client's `Election`:
`Election` / `AsyncElection` (from `redlock.election(name)`), the terms
`Leadership` / `AsyncLeadership` that a campaign gives, `Leader` (who leads
now) and the iterators of changes `Observer` / `AsyncObserver`.

A candidate leads while it holds the lock `name`; its **epoch** is that
lock's fencing token, so it only grows from one leader to the next and a
resource that checks it refuses a deposed leader."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import _native
from ._shared import LostSignal, lost_error
from ._types import (
    Arg,
    Resource,
    Seconds,
    check_fenced,
    check_key,
    command_args,
    seconds,
    ttl_seconds,
)

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "AsyncElection",
    "AsyncLeadership",
    "AsyncObserver",
    "Election",
    "Leader",
    "Leadership",
    "Observer",
    "check_value",
]


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads an election (see `Election.leader`): the leader's `epoch`
    (its fencing token), `time_left` (seconds its lease still runs on a
    quorum; renewed while it lives), the `value` it proclaimed last (None
    before its first proclaim) and `revision` (how many values it proclaimed:
    with the epoch, the order of an observer's changes). Never the owner id."""

    epoch: int
    time_left: float
    value: str | None = None
    revision: int = 0


def _leader(row: tuple[int, float, str | None, int] | None) -> Leader | None:
    return None if row is None else Leader(*row)


def check_value(value: object) -> str:
    """A proclaimed value must be a str."""
    if not isinstance(value, str):
        raise TypeError(f"value must be a str, got {type(value).__name__}")
    return value


def _timeout(timeout: Seconds | None) -> float | None:
    return None if timeout is None else seconds("timeout", timeout, minimum=0.0, maximum=1e9)


class _Term:
    """What `Leadership` and `AsyncLeadership` share: the read-only view."""

    __slots__ = ("__weakref__", "_lost", "_native")

    def __init__(self, native: _native.NativeLeadership) -> None:
        self._native = native
        self._lost = LostSignal(native.lost)

    @property
    def name(self) -> str:
        """The election's name (the lock's key)."""
        return self._native.name

    @property
    def epoch(self) -> int:
        """The epoch: this term's fencing token, above every earlier
        leader's. Pass it to resources so that they refuse a deposed leader."""
        return self._native.epoch

    @property
    def lost(self) -> LostSignal:
        """Set when leadership is lost (a renewal found the lock gone, the
        validity ran out before a renewal was confirmed, or a fenced command
        met a newer epoch): stop acting as leader at once. `await
        leadership.lost` in asyncio."""
        return self._lost

    @property
    def validity(self) -> float:
        """Seconds of the term's lease left (follows the background
        renewals); 0.0 once lost or resigned."""
        return self._native.validity()

    @property
    def state(self) -> str:
        """"leading", "lost" or "resigned"."""
        return self._native.state()

    def raise_if_lost(self) -> None:
        """Raises `LockLostError` when leadership was lost."""
        if self._lost.is_set():
            raise lost_error(self.name, self.epoch)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} epoch={self.epoch} state={self.state!r}>"

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} objects cannot be pickled")


class Leadership(_Term):
    """This candidate's term as leader (blocking API), from
    `Redlock.campaign` / `Election.campaign`: renewed in the background until
    `resign()`, loss (`lost`), or garbage collection (which resigns in the
    background). `with leadership:` resigns on exit, and raises
    `LockLostError` there when leadership was lost and the block raised
    nothing."""

    __slots__ = ()

    def proclaim(self, value: str) -> None:
        """Publishes `value` (an address, a name) under this epoch; `leader()`
        and observers report it. `LockLostError` once leadership is lost,
        `StaleTokenError` when a newer leader has written, `NoQuorumError`
        when too few nodes accepted it, `LockStateError` after `resign()`."""
        self._native.proclaim(check_value(value))

    def resign(self) -> None:
        """Steps down: stops the renewals and releases the lock, so that the
        next candidate is woken at once. A second call does nothing."""
        self._native.resign()

    def fenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """Runs `command` on the resource server, fenced by the epoch on
        `guard`; as `Lock.fenced` (a `StaleTokenError` also sets `lost`)."""
        r, g = check_fenced(resource, guard)
        return self._native.fenced(r, g, command_args(command))

    def announce(self, resource: Resource, guard: str) -> int:
        """Shows the epoch to `guard` on the resource server, so that it
        refuses every earlier leader from now on; as `Lock.announce`."""
        r, g = check_fenced(resource, guard)
        return self._native.announce(r, g)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        lost = self._lost.is_set()
        self._native.resign()
        if lost and value is None:
            raise lost_error(self.name, self.epoch)


class AsyncLeadership(_Term):
    """This candidate's term as leader (asyncio API): as `Leadership`, with
    coroutine `proclaim`, `resign` and fenced commands; `async with
    leadership:` resigns on exit."""

    __slots__ = ()

    async def proclaim(self, value: str) -> None:
        """Publishes `value` under this epoch; as `Leadership.proclaim`.
        When cancelled, the append to the nodes still finishes."""
        await self._native.proclaim_async(check_value(value))

    async def resign(self) -> None:
        """Steps down; as `Leadership.resign`. When cancelled, the release
        still goes on."""
        await self._native.resign_async()

    async def fenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """Runs `command` fenced by the epoch on `guard`; as `Lock.fenced`."""
        r, g = check_fenced(resource, guard)
        args = command_args(command)
        return await self._native.fenced_async(r, g, args)

    async def announce(self, resource: Resource, guard: str) -> int:
        """Shows the epoch to `guard`; as `Lock.announce`."""
        r, g = check_fenced(resource, guard)
        highest: int = await self._native.announce_async(r, g)
        return highest

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        lost = self._lost.is_set()
        await self._native.resign_async()
        if lost and value is None:
            raise lost_error(self.name, self.epoch)


class Observer(Iterator[Leader]):
    """The leadership changes of an election (blocking API), from
    `Redlock.observe`: each step is the next `Leader` (a new epoch, or a new
    value under the same epoch) in increasing `(epoch, revision)` order. It
    blocks on the nodes between changes (nothing is polled) and never ends.
    A read that too few nodes answered raises `NoQuorumError`; iterating
    again tries again. A term shorter than one read can be skipped, never
    reported out of order; a vacancy is not reported (the next leader is)."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.NativeObserver) -> None:
        self._native = native

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Leader:
        row = self._native.next(None)
        assert row is not None
        return Leader(*row)

    def wait(self, timeout: Seconds | None = None) -> Leader | None:
        """The next change, or None when `timeout` seconds passed first
        (nothing is lost: the change comes with a later call)."""
        return _leader(self._native.next(_timeout(timeout)))


class AsyncObserver(AsyncIterator[Leader]):
    """The leadership changes of an election (asyncio API), from
    `AsyncRedlock.observe`: `async for leader in observer:`; as `Observer`.
    Cancelling a step loses nothing."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.NativeObserver) -> None:
        self._native = native

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Leader:
        row = await self._native.next_async(None)
        assert row is not None
        return Leader(*row)

    async def wait(self, timeout: Seconds | None = None) -> Leader | None:
        """The next change, or None when `timeout` seconds passed first."""
        row = await self._native.next_async(_timeout(timeout))
        return _leader(row)


class Election:
    """The election over one name (blocking API), from
    `Redlock.election(name)`: `campaign`, `leader`, `observe`."""

    __slots__ = ("_client", "_name")

    def __init__(self, client: _native.Client, name: str) -> None:
        self._client = client
        self._name = check_key(name)

    @property
    def name(self) -> str:
        """The election's name (the lock's key)."""
        return self._name

    def campaign(self, ttl: Seconds, value: str | None = None) -> Leadership:
        """Waits until this candidate leads (woken by the nodes, candidates
        served in the order they started waiting; no polling), proclaims
        `value` when given, and returns the term, renewed in the background
        about every ttl/3. Ctrl-C while waiting leaves no grant behind."""
        t = ttl_seconds(ttl)
        v = None if value is None else check_value(value)
        leadership = Leadership(_native.campaign(self._client, self._name, t))
        if v is not None:
            try:
                leadership.proclaim(v)
            except BaseException:
                leadership.resign()
                raise
        return leadership

    def leader(self) -> Leader | None:
        """Who leads now, read from every node: the epoch held on a quorum
        with its time left and last proclaimed value; None when no epoch is
        held on a quorum. `NoQuorumError` when too few nodes answered."""
        return _leader(_native.leader(self._client, self._name))

    def observe(self) -> Observer:
        """The leadership changes, in order (see `Observer`)."""
        return Observer(_native.observe(self._client, self._name))

    def __repr__(self) -> str:
        return f"<Election name={self._name!r}>"


class AsyncElection:
    """The election over one name (asyncio API), from
    `AsyncRedlock.election(name)`; as `Election`, with coroutines."""

    __slots__ = ("_client", "_name")

    def __init__(self, client: _native.Client, name: str) -> None:
        self._client = client
        self._name = check_key(name)

    @property
    def name(self) -> str:
        """The election's name (the lock's key)."""
        return self._name

    async def campaign(self, ttl: Seconds, value: str | None = None) -> AsyncLeadership:
        """As `Election.campaign`. Cancelling the task while it waits leaves
        no grant behind; once elected, the term resigns."""
        t = ttl_seconds(ttl)
        v = None if value is None else check_value(value)
        native: _native.NativeLeadership = await _native.campaign_async(
            self._client, self._name, t
        )
        leadership = AsyncLeadership(native)
        if v is not None:
            try:
                await leadership.proclaim(v)
            except BaseException:
                await leadership.resign()
                raise
        return leadership

    async def leader(self) -> Leader | None:
        """As `Election.leader`."""
        row = await _native.leader_async(self._client, self._name)
        return _leader(row)

    def observe(self) -> AsyncObserver:
        """The leadership changes, in order (see `AsyncObserver`)."""
        return AsyncObserver(_native.observe(self._client, self._name))

    def __repr__(self) -> str:
        return f"<AsyncElection name={self._name!r}>"
