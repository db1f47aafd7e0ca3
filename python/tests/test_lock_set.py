"""Lock sets (`acquire_many`): one token per name, all or none on each node,
extend / release over the set, sync and asyncio."""

from __future__ import annotations

import pytest

import redlock_fenced as rf
from nodes import Node, command


def held_on(redlock: rf.Redlock, key: str) -> int:
    return sum(1 for v in redlock.inspect(key) if v.held)


def test_acquire_many_gives_a_token_per_name(redlock: rf.Redlock, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    with redlock.acquire_many([b, a], 5) as first:
        assert isinstance(first, rf.LockSet)
        assert first.names == [a, b]
        assert set(first.tokens) == {a, b}
        assert first.validity > 4
        assert held_on(redlock, a) == 5 and held_on(redlock, b) == 5
        # Held: a single lock on a name of the set is busy.
        assert redlock.try_acquire(b, 5) is None
        assert redlock.try_acquire_many([a, f"{key}:c"], 5) is None
        first.extend(10)
        assert first.validity > 9
    assert held_on(redlock, a) == 0 and held_on(redlock, b) == 0
    second = redlock.acquire_many([a, b], 5)
    assert second.token(a) > first.token(a)
    assert second.token(b) > first.token(b)
    assert second.release() is True
    assert second.validity == 0.0


def test_sets_are_refused_by_name(redlock: rf.Redlock, key: str) -> None:
    with pytest.raises(rf.InvalidArgumentError, match="at least one name"):
        redlock.acquire_many([], 5)
    with pytest.raises(rf.InvalidArgumentError, match="more than once"):
        redlock.try_acquire_many([key, key], 5)
    with pytest.raises(TypeError):
        redlock.acquire_many(key, 5)


def test_a_set_partly_held_on_a_node_leaves_nothing_there(
    redlock: rf.Redlock, nodes: list[Node], key: str
) -> None:
    a, b = f"{key}:a", f"{key}:b"
    reply = command(nodes[0].port, "REDLOCK.ACQUIRE", b, "someone-else", "10000")
    assert reply.startswith(b":"), reply
    lock_set = redlock.try_acquire_many([a, b], 5)
    assert lock_set is not None
    views = redlock.inspect(a)
    assert not views[0].held
    assert all(v.held for v in views[1:])
    lock_set.release()


def test_a_lost_set_says_so(redlock: rf.Redlock, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    lock_set = redlock.acquire_many([a, b], 5)
    assert redlock.release_owner(b, lock_set.owner)
    with pytest.raises(rf.LockLostError):
        lock_set.extend(5)
    assert lock_set.lost
    assert lock_set.validity == 0.0
    lock_set.release()


async def test_async_acquire_many(aredlock: rf.AsyncRedlock, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    async with await aredlock.acquire_many([a, b], 5) as lock_set:
        assert isinstance(lock_set, rf.AsyncLockSet)
        assert await aredlock.try_acquire_many([b], 5) is None
        await lock_set.extend(5)
        tokens = lock_set.tokens
    again = await aredlock.try_acquire_many([b, a], 5)
    assert again is not None
    assert again.token(a) > tokens[a] and again.token(b) > tokens[b]
    assert await again.release() is True
