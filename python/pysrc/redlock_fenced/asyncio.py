"""The asyncio API: `AsyncRedlock`, `AsyncLock`, `AcquireContext`.

Every call runs in the shared Rust runtime and never blocks the event loop.
Cancelling a call never leaves a grant behind: a plain acquisition finishes
in the background and is released at once; a waiting one is dropped.
"""

from __future__ import annotations

from ._client import AsyncRedlock
from ._lock import AcquireContext, AsyncLock

__all__ = ["AcquireContext", "AsyncLock", "AsyncRedlock"]
