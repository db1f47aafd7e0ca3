"""Lock sets (`acquire_many`): one token per name, all or none on each node,
extend / release over the set, sync and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

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


def test_waiting_sets_in_opposite_orders_take_turns(redlock: rf.Redlock, key: str) -> None:
    """Two callers whose sets overlap, in opposite orders, both waiting
    (`wait=`, woken by the nodes): a bounded run, no deadlock, never a name
    held by both, and each gets its set in turn."""
    import threading

    a, b, c = f"{key}:a", f"{key}:b", f"{key}:c"
    sets = {0: [a, b, c], 1: [c, b]}
    rounds = 10
    holding: dict[str, int | None] = {}
    turns: list[int] = []
    errors: list[BaseException] = []
    state = threading.Lock()

    def caller(who: int) -> None:
        try:
            for _ in range(rounds):
                with redlock.acquire_many(sets[who], 10, wait=30) as lock_set:
                    with state:
                        for name in lock_set.names:
                            assert holding.get(name) is None, (name, holding)
                            holding[name] = who
                        turns.append(who)
                    time.sleep(0.02)
                    with state:
                        for name in lock_set.names:
                            holding[name] = None
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(who,)) for who in sets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a waiting caller never finished: deadlock"
    assert not errors, errors
    assert len(turns) == 2 * rounds
    changes = sum(1 for x, y in zip(turns, turns[1:]) if x != y)
    assert changes >= len(turns) * 3 // 4, turns


async def test_a_waiting_set_is_woken_and_cancelling_it_leaves_no_grant(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    a, b = f"{key}:a", f"{key}:b"
    holder = await aredlock.acquire(b, 10)
    with pytest.raises(rf.LockBusyError):
        await aredlock.acquire_many([a, b], 5, wait=0.3)
    task = asyncio.create_task(aredlock.acquire_many([a, b], 5, wait=30))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 2
    while any(v.held for v in await aredlock.inspect(a)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not any(v.held for v in await aredlock.inspect(a))
    waiter = asyncio.create_task(aredlock.acquire_many([b, a], 5, wait=30))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    released = time.monotonic()
    await holder.release()
    lock_set = await asyncio.wait_for(waiter, 5)
    # Woken by the release, long before the holder's 10 s lease would end.
    assert time.monotonic() - released < 5
    assert lock_set.token(b) > holder.token
    await lock_set.release()
