"""Hands the results of the Rust runtime to asyncio event loops.

Each loop gets one `_native.Bridge`: finished calls queue up in Rust and one
byte on a socket pair wakes the loop (`loop.add_reader`), which completes
the futures in its own thread. No runtime thread ever waits for the GIL.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from . import _native

__all__ = ["call"]


class _LoopBridge:
    __slots__ = ("__weakref__", "futures", "native", "next_id")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.native = _native.Bridge()
        self.futures: dict[int, tuple[asyncio.Future[Any], Callable[[Any], Any] | None]] = {}
        self.next_id = 0
        loop.add_reader(self.native.fileno(), self.drain)

    def drain(self) -> None:
        for ident, ok, value in self.native.drain():
            entry = self.futures.pop(ident, None)
            if entry is None:
                continue
            future, wrap = entry
            # A cancelled caller: the value is dropped here (a lock in it
            # releases itself in the background).
            if future.done():
                continue
            if ok:
                future.set_result(value if wrap is None else wrap(value))
            elif isinstance(value, BaseException):
                future.set_exception(value)


_bridges: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBridge] = (
    weakref.WeakKeyDictionary()
)


def _cancel_if_cancelled(pending: _native.Pending, future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        pending.cancel()


def call(
    start: Callable[[_native.Bridge, int], _native.Pending],
    *,
    wrap: Callable[[Any], Any] | None = None,
    cancellable: bool = True,
) -> asyncio.Future[Any]:
    """Starts a native asyncio call on the running loop and returns its
    future, whose result is `wrap(value)` when `wrap` is given. Cancelling
    the future cancels the call when `cancellable` (and the native side
    agrees: an acquisition round is never cut)."""
    loop = asyncio.get_running_loop()
    bridge = _bridges.get(loop)
    if bridge is None:
        bridge = _bridges[loop] = _LoopBridge(loop)
    bridge.next_id += 1
    ident = bridge.next_id
    future: asyncio.Future[Any] = loop.create_future()
    bridge.futures[ident] = (future, wrap)
    try:
        pending = start(bridge.native, ident)
    except BaseException:
        del bridge.futures[ident]
        raise
    if cancellable:
        future.add_done_callback(lambda f: _cancel_if_cancelled(pending, f))
    return future
