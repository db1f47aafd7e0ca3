"""`LockSet` and `AsyncLockSet`: a lock over several names at once (one token
per name, one validity), from `Redlock.acquire_many` /
`AsyncRedlock.acquire_many`. Each node takes the whole set or nothing, in
byte order of the names, so overlapping sets never deadlock."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from . import _native
from ._types import Seconds, check_key, ttl_seconds

if TYPE_CHECKING:
    from typing import Self

__all__ = ["AsyncLockSet", "LockSet", "check_names"]


def check_names(names: Sequence[str]) -> list[str]:
    """The names as a list, each checked like a single lock's key (a bare
    `str` is refused: it would be a set of its characters)."""
    if isinstance(names, str):
        raise TypeError("names must be a sequence of str, not one str")
    return [check_key(name) for name in names]


class _HeldSet:
    __slots__ = ("_native",)

    def __init__(self, native: _native.NativeLockSet) -> None:
        self._native = native

    @property
    def tokens(self) -> dict[str, int]:
        """Each name's fencing token (each from that name's own counter), in
        byte order of the names."""
        return dict(self._native.tokens)

    @property
    def names(self) -> list[str]:
        """The names, in byte order (the order the nodes take them in)."""
        return [name for name, _ in self._native.tokens]

    def token(self, name: str) -> int:
        """The token of `name`; `KeyError` when it is not in the set."""
        return self.tokens[name]

    @property
    def owner(self) -> str:
        """The owner id shared by every name (a secret)."""
        return self._native.owner

    @property
    def validity(self) -> float:
        """Seconds of validity left for the whole set (the earliest of its
        names'); 0.0 once lost or released."""
        return self._native.validity()

    @property
    def lost(self) -> bool:
        """Whether an extension found any name of the set lost."""
        return self._native.is_lost()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} tokens={self.tokens!r} state={self._native.state()!r}>"


class LockSet(_HeldSet):
    """A held lock set (blocking API). `with lock_set:` releases on exit."""

    __slots__ = ()

    def extend(self, ttl: Seconds) -> None:
        """Extends every name to `ttl` seconds from now; raises
        `LockLostError` when any name was lost (then `lost` is True)."""
        self._native.extend(ttl_seconds(ttl))

    def release(self) -> bool:
        """Releases every name: True when every name was still held."""
        return self._native.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._native.state() == "held":
            self._native.release()


class AsyncLockSet(_HeldSet):
    """A held lock set (asyncio API). `async with lock_set:` releases on exit."""

    __slots__ = ()

    async def extend(self, ttl: Seconds) -> None:
        """Extends every name to `ttl` seconds from now; raises
        `LockLostError` when any name was lost (then `lost` is True)."""
        await self._native.extend_async(ttl_seconds(ttl))

    async def release(self) -> bool:
        """Releases every name: True when every name was still held."""
        released: bool = await self._native.release_async()
        return released

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._native.state() == "held":
            await self._native.release_async()
