"""What the blocking and the asyncio surfaces share: `LostSignal`, `LockGuard`
(both `hold()`s give it), `current_guard()`, and the helpers both clients and
both lock classes use. It imports neither surface."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Generator, Sequence
from typing import Any

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
    command_args,
    seconds,
    transaction_args,
)
from .errors import InvalidArgumentError, LockLostError

__all__ = [
    "LockGuard",
    "LostSignal",
    "StrPath",
    "connect_args",
    "current",
    "current_guard",
    "lost_error",
    "views",
]

StrPath = str | os.PathLike[str]

current: contextvars.ContextVar[LockGuard | None] = contextvars.ContextVar(
    "redlock_fenced_guard", default=None
)


def current_guard() -> LockGuard | None:
    """The guard of the innermost `hold()` or `synchronized` block running in
    this context (thread or asyncio task), or None."""
    return current.get()


class LostSignal:
    """Set when the lock is lost (its validity ran out, an extension failed,
    or a fenced command met a newer holder: `StaleTokenError`); once set it
    stays set. `wait()` blocks (GIL released, Ctrl-C works); `await signal`
    waits in asyncio."""

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
        yield from self._native.wait_async().__await__()

    def __repr__(self) -> str:
        return f"<LostSignal is_set={self.is_set()}>"


def lost_error(key: str, token: int) -> LockLostError:
    return LockLostError(
        f"the lock on {key!r} (token {token}) is lost: its validity ran out, an "
        "extension failed or a fenced command met a newer holder; stop using its token",
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


def connect_args(
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


def views(rows: list[Any]) -> list[NodeView]:
    return [NodeView(*row) for row in rows]


class LockGuard:
    """What `hold()` gives: the lock, kept alive in the background while the
    block runs. `lost` is set when an extension fails, the validity runs out
    or a fenced command meets a newer holder (`StaleTokenError`); stop using
    the token then. Under `AsyncRedlock.hold`, that cancels the block."""

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
            raise lost_error(self.key, self.token)

    def fenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """Runs `command` on the resource server, fenced by this lock's token
        on `guard` (blocking; in `AsyncRedlock.hold` use `afenced`). As
        `Lock.fenced`."""
        r, g = check_fenced(resource, guard)
        return self._native.fenced(r, g, command_args(command))

    async def afenced(self, resource: Resource, guard: str, *command: Arg) -> Any:
        """`fenced` as a coroutine (for `AsyncRedlock.hold`)."""
        r, g = check_fenced(resource, guard)
        args = command_args(command)
        return await self._native.fenced_async(r, g, args)

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
        r, g = check_fenced(resource, guard)
        cmds = transaction_args(commands)
        replies: list[Any] = await self._native.fenced_transaction_async(r, g, cmds)
        return replies

    def announce(self, resource: Resource, guard: str) -> int:
        """Shows this lock's token to `guard` (blocking); returns the guard's
        highest token. As `Lock.announce`."""
        r, g = check_fenced(resource, guard)
        return self._native.announce(r, g)

    async def aannounce(self, resource: Resource, guard: str) -> int:
        """`announce` as a coroutine (for `AsyncRedlock.hold`)."""
        r, g = check_fenced(resource, guard)
        highest: int = await self._native.announce_async(r, g)
        return highest

    def __repr__(self) -> str:
        return (
            f"<LockGuard key={self.key!r} token={self.token} validity={self.validity:.3f} "
            f"lost={self._lost.is_set()}>"
        )
