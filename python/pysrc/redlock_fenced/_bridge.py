"""Hands the results of the Rust runtime to asyncio event loops.

Each loop gets one `_native.Bridge`: an asyncio call of the native layer
returns a future of the running loop; finished calls queue up in Rust and
one byte on a socket pair wakes the loop, whose reader (`Bridge.drain`)
completes the futures in the loop's own thread. No runtime thread ever
waits for the GIL, and no Python code runs per call on this path.
"""

from __future__ import annotations

import asyncio
import weakref

from . import _native

__all__ = ["bridge"]

_bridges: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _native.Bridge] = (
    weakref.WeakKeyDictionary()
)

# The last loop asked for and its bridge, read as one tuple (atomic under the
# GIL, so two threads running two loops never mix them up); the weak
# reference's callback forgets it with the loop.
_last: tuple[weakref.ref[asyncio.AbstractEventLoop], _native.Bridge] | None = None


def _forget(ref: weakref.ref[asyncio.AbstractEventLoop]) -> None:
    global _last
    last = _last
    if last is not None and last[0] is ref:
        _last = None


def bridge() -> _native.Bridge:
    """The running loop's bridge, made and registered on first use. Raises
    RuntimeError outside a running loop."""
    global _last
    loop = asyncio.get_running_loop()
    last = _last
    if last is not None and last[0]() is loop:
        return last[1]
    native = _bridges.get(loop)
    if native is None:
        native = _native.Bridge(loop)
        loop.add_reader(native.fileno(), native.drain)
        _bridges[loop] = native
    _last = (weakref.ref(loop, _forget), native)
    return native
