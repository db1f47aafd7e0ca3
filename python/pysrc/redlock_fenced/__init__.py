"""redlock_fenced: Redlock with fencing tokens, over the redlock Redis module.

One quorum implementation: this package binds the Rust client
(`redlock_client`) and adds the Python surface only. See the README for
examples; every token must be passed to the protected resource, which
refuses tokens lower than the highest it has seen.
"""

from __future__ import annotations

import atexit
from importlib.metadata import PackageNotFoundError, version

from . import _native
from ._client import Redlock
from ._election import Election, Leader, Leadership, Observer
from ._lock import Lock
from ._lock_set import AsyncLockSet, LockSet
from ._metrics import MetricSeries, PrometheusCollector, metrics
from ._shared import LockGuard, LostSignal, current_guard
from ._types import Arg, Cluster, Member, NodeView, Resource, RetryPolicy, Seconds, Sentinel
from .asyncio import (
    AcquireContext,
    AsyncElection,
    AsyncLeadership,
    AsyncLock,
    AsyncObserver,
    AsyncRedlock,
)
from .errors import (
    ExpiredBeforeUseError,
    InvalidArgumentError,
    LockBusyError,
    LockError,
    LockLostError,
    LockStateError,
    ModuleNotLoadedError,
    NoQuorumError,
    PermissionDeniedError,
    ResourceError,
    RestartGuardError,
    StaleTokenError,
    TransientError,
)

try:
    __version__: str = version("redlock-fenced")
    """The project's version (the workspace's, as `MODULE LIST` and `redlock --version`)."""
except PackageNotFoundError:  # pragma: no cover - only without an installed distribution
    __version__ = "0+unknown"

__all__ = [
    "AcquireContext",
    "Arg",
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLock",
    "AsyncLockSet",
    "AsyncObserver",
    "AsyncRedlock",
    "Cluster",
    "Election",
    "ExpiredBeforeUseError",
    "InvalidArgumentError",
    "Leader",
    "Leadership",
    "Lock",
    "LockBusyError",
    "LockError",
    "LockGuard",
    "LockLostError",
    "LockSet",
    "LockStateError",
    "LostSignal",
    "Member",
    "MetricSeries",
    "ModuleNotLoadedError",
    "NoQuorumError",
    "NodeView",
    "Observer",
    "PermissionDeniedError",
    "PrometheusCollector",
    "Redlock",
    "ResourceError",
    "Resource",
    "RestartGuardError",
    "RetryPolicy",
    "Seconds",
    "Sentinel",
    "StaleTokenError",
    "TransientError",
    "current_guard",
    "metrics",
    "set_log_level",
]


def set_log_level(level: str) -> None:
    """Sets the most verbose level of the Rust client's records forwarded to
    the `redlock_client.*` loggers: "error", "warning" (the default),
    "info", "debug" or "trace" (or set `REDLOCK_FENCED_LOG` before import).
    Owner ids never appear in them."""
    _native.set_log_level(level)


# Background releases of garbage-collected locks get up to 1 s at exit.
atexit.register(_native.flush_background, 1.0)
