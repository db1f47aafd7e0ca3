"""The exceptions of redlock_fenced.

Every error the Rust client reports becomes one of these classes, with the
error's detail as attributes. The owner id never appears in a message.

    LockError
    ├── TransientError            worth retrying later (.transient is True)
    │   ├── LockBusyError         another owner holds the lock
    │   ├── NoQuorumError         too few nodes answered
    │   └── RestartGuardError     nodes in their restart grace window
    ├── LockLostError             the lock is no longer held: stop using its token
    │   └── StaleTokenError       a fenced command was refused: a newer holder wrote first
    ├── ResourceError             the resource server refused a fenced command otherwise
    ├── ExpiredBeforeUseError     the acquisition ate the whole lease
    ├── ModuleNotLoadedError      a node or the resource server runs without the module
    ├── PermissionDeniedError     the nodes' ACL refused the command
    ├── InvalidArgumentError      bad input (also a ValueError)
    └── LockStateError            released lock, closed client, use after fork (also a RuntimeError)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

__all__ = [
    "ExpiredBeforeUseError",
    "InvalidArgumentError",
    "LockBusyError",
    "LockError",
    "LockLostError",
    "LockStateError",
    "ModuleNotLoadedError",
    "NoQuorumError",
    "PermissionDeniedError",
    "ResourceError",
    "RestartGuardError",
    "StaleTokenError",
    "TransientError",
]


class LockError(Exception):
    """Base class of every error of this package."""

    transient: ClassVar[bool] = False
    """Whether trying again later may succeed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransientError(LockError):
    """The lock is busy, too few nodes answered, or nodes just restarted:
    trying again later may succeed."""

    transient: ClassVar[bool] = True


class LockBusyError(TransientError):
    """Another owner holds the lock (`holders` of `nodes` nodes said so)."""

    def __init__(self, message: str, holders: int = 0, nodes: int = 0) -> None:
        super().__init__(message)
        self.holders = holders
        self.nodes = nodes


class NoQuorumError(TransientError):
    """Too few nodes gave a usable answer. `failures` names each failing node
    (`host:port`) and why."""

    def __init__(
        self,
        message: str,
        nodes: int = 0,
        quorum: int = 0,
        answered: int = 0,
        failures: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.nodes = nodes
        self.quorum = quorum
        self.answered = answered
        self.failures: tuple[tuple[str, str], ...] = tuple(
            (str(node), str(reason)) for node, reason in failures
        )


class RestartGuardError(TransientError):
    """Nodes refused new locks because they restarted recently without durable
    persistence; `retry_after` is in seconds when the nodes said."""

    def __init__(
        self,
        message: str,
        nodes: Sequence[str] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.nodes: tuple[str, ...] = tuple(nodes)
        self.retry_after = retry_after


class LockLostError(LockError):
    """The lock is no longer held (its validity ran out or an extension
    failed): stop using its token."""

    def __init__(self, message: str, key: str = "", token: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.token = token


class StaleTokenError(LockLostError):
    """A fenced command was refused: the resource's `guard` has seen
    `highest`, a newer token of the lock on `key` than this lock's `token`,
    so another holder took over. Nothing ran and nothing changed. The lock's
    `lost` signal is set (under `AsyncRedlock.hold` that cancels the block).
    Stop using this lock; never retry with the same token."""

    def __init__(
        self,
        message: str,
        key: str = "",
        token: int | None = None,
        guard: str = "",
        highest: int = 0,
    ) -> None:
        super().__init__(message, key, token)
        self.guard = guard
        self.highest = highest


class ResourceError(LockError):
    """The resource server refused a fenced command for another reason than a
    stale token: the inner command's own error (e.g. WRONGTYPE), a command
    the module does not fence (no key, MULTI, admin), a guard that serves
    another lock, an ACL refusal, or a connection failure. `detail` is the
    server's reply or the failure. When the reply was lost the outcome is
    unknown."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class ExpiredBeforeUseError(LockError):
    """The lock was granted but the round took the whole lease (`ttl` and
    `elapsed` in seconds); it was released."""

    def __init__(self, message: str, ttl: float = 0.0, elapsed: float = 0.0) -> None:
        super().__init__(message)
        self.ttl = ttl
        self.elapsed = elapsed


class ModuleNotLoadedError(LockError):
    """A server runs without the redlock module: one of the lock's nodes, or
    (`resource` is True) the resource server of a fenced command. `node` is
    its address (`host:port`; `cluster(a,b)` for a `Cluster` resource's
    seeds). The message says how to load the module."""

    def __init__(self, message: str, node: str = "", resource: bool = False) -> None:
        super().__init__(message)
        self.node = node
        self.resource = resource


class PermissionDeniedError(LockError):
    """The ACL of `nodes` refused the command or key (`detail` is the server's
    reply)."""

    def __init__(self, message: str, nodes: Sequence[str] = (), detail: str = "") -> None:
        super().__init__(message)
        self.nodes: tuple[str, ...] = tuple(nodes)
        self.detail = detail


class InvalidArgumentError(LockError, ValueError):
    """A bad argument: a duration that is not a finite number of seconds in
    range, a bad URL, a ttl the nodes refuse, and so on."""


class LockStateError(LockError, RuntimeError):
    """The object cannot do this now: the lock was released or detached, the
    client was closed, or the process was forked after the client started."""
