"""The asyncio API: `AsyncRedlock`, `AsyncLock`, `AcquireContext`, and the
election's `AsyncElection`, `AsyncLeadership`, `AsyncObserver`.

Every call runs in the shared Rust runtime and never blocks the event loop.
Cancelling a call never leaves a grant behind: a plain acquisition finishes
in the background and is released at once; a waiting one is dropped.
"""

from __future__ import annotations

from ._client import AsyncRedlock
from ._election import AsyncElection, AsyncLeadership, AsyncObserver
from ._lock import AcquireContext, AsyncLock

__all__ = [
    "AcquireContext",
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLock",
    "AsyncObserver",
    "AsyncRedlock",
]
