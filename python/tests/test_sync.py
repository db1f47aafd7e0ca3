"""The blocking API against five local module nodes."""

from __future__ import annotations

import pickle
import threading
import time
from datetime import timedelta

import pytest

import redlock_fenced as rf
from nodes import Node


def held_by_any(redlock: rf.Redlock, key: str) -> bool:
    return any(v.held for v in redlock.inspect(key))


def test_acquire_gives_increasing_tokens_and_release_frees(redlock: rf.Redlock, key: str) -> None:
    first = redlock.acquire(key, 5)
    assert first.key == key
    assert 0 < first.validity <= 5
    assert held_by_any(redlock, key)
    assert first.release() is True
    assert not held_by_any(redlock, key)
    second = redlock.acquire(key, timedelta(seconds=5))
    assert second.token > first.token
    assert second.release() is True
    assert second.validity == 0.0
    assert redlock.quorum == 3
    assert len(redlock.nodes) == 5


def test_busy_lock_raises_and_try_acquire_gives_none(urls: list[str], key: str) -> None:
    with rf.Redlock.connect(urls, retry=rf.RetryPolicy.no_retry()) as redlock:
        lock = redlock.acquire(key, 5)
        with pytest.raises(rf.LockBusyError) as caught:
            redlock.acquire(key, 5)
        err = caught.value
        assert isinstance(err, rf.TransientError) and err.transient
        assert err.nodes == 5 and err.holders >= 3
        assert redlock.try_acquire(key, 5) is None
        lock.release()
        again = redlock.try_acquire(key, 5)
        assert again is not None and again.token > lock.token
        again.release()


def test_wait_is_woken_by_the_release(redlock: rf.Redlock, key: str) -> None:
    holder = redlock.acquire(key, 10)
    timer = threading.Timer(0.3, holder.release)
    timer.start()
    started = time.monotonic()
    waiter = redlock.acquire(key, 5, wait=5)
    waited = time.monotonic() - started
    timer.join()
    assert waiter.token > holder.token
    assert waited < 4, waited
    waiter.release()


def test_wait_runs_out_with_busy(redlock: rf.Redlock, key: str) -> None:
    holder = redlock.acquire(key, 10)
    with pytest.raises(rf.LockBusyError):
        redlock.acquire(key, 5, wait=0.2)
    holder.release()


def test_extend_moves_the_validity_and_lost_fires_at_the_end(redlock: rf.Redlock, key: str) -> None:
    lock = redlock.acquire(key, 0.5)
    assert lock.validity <= 0.5
    lock.extend(3)
    assert lock.validity > 1.0
    assert not lock.lost.is_set()
    lock.raise_if_lost()
    lock.release()
    short = redlock.acquire(key, 0.3)
    assert short.lost.wait(2.0) is True
    assert short.validity == 0.0
    with pytest.raises(rf.LockLostError) as caught:
        short.raise_if_lost()
    assert caught.value.key == key and caught.value.token == short.token
    time.sleep(0.1)  # the nodes' lease ends a drift margin after the local validity
    # The lease ran out on the nodes too: extending cannot revive it.
    with pytest.raises(rf.LockLostError):
        short.extend(1)
    assert short.release() is False


def test_with_lock_releases_and_reports_a_lost_lock(redlock: rf.Redlock, key: str) -> None:
    with redlock.acquire(key, 5) as lock:
        assert held_by_any(redlock, key)
    assert not held_by_any(redlock, key)
    assert lock.validity == 0.0
    with pytest.raises(rf.LockLostError):
        with redlock.acquire(key, 0.2):
            time.sleep(0.5)
    # A body's own exception goes on, with the release problem as a note.
    with pytest.raises(ZeroDivisionError) as caught:
        with redlock.acquire(key, 0.2):
            time.sleep(0.5)
            1 / 0  # noqa: B018
    assert any("already lost" in n for n in getattr(caught.value, "__notes__", []))


def test_released_lock_cannot_be_used_again(redlock: rf.Redlock, key: str) -> None:
    lock = redlock.acquire(key, 5)
    lock.release()
    with pytest.raises(rf.LockStateError):
        lock.release()
    with pytest.raises(rf.LockStateError):
        lock.extend(5)


def test_owner_stays_out_of_repr_and_pickle_is_refused(redlock: rf.Redlock, key: str) -> None:
    lock = redlock.acquire(key, 5)
    assert len(lock.owner) == 36
    assert lock.owner not in repr(lock)
    assert str(lock.token) in repr(lock)
    with pytest.raises(TypeError):
        pickle.dumps(lock)
    lock.release()


def test_detach_and_release_owner(redlock: rf.Redlock, key: str) -> None:
    lock = redlock.acquire(key, 10)
    owner = lock.detach()
    assert owner == lock.owner
    with pytest.raises(rf.LockStateError):
        lock.release()
    assert held_by_any(redlock, key)
    assert redlock.release_owner(key, "someone-else") is False
    assert held_by_any(redlock, key)
    assert redlock.release_owner(key, owner) is True
    assert not held_by_any(redlock, key)
    assert redlock.release_owner(key, owner) is False


def test_inspect_reports_every_node(redlock: rf.Redlock, nodes: list[Node], key: str) -> None:
    views = redlock.inspect(key)
    assert [v.node for v in views] == [n.addr for n in nodes]
    assert all(v.state == "missing" for v in views)
    lock = redlock.acquire(key, 5)
    views = redlock.inspect(key)
    assert all(v.state == "present" and v.held and v.token == lock.token for v in views)
    assert all(v.ttl is not None and 0 < v.ttl <= 5 for v in views)
    nodes[0].pause()
    try:
        views = redlock.inspect(key)
    finally:
        nodes[0].resume()
    assert views[0].state == "error" and views[0].error
    lock.release()


def test_hold_extends_in_the_background_and_releases(redlock: rf.Redlock, key: str) -> None:
    assert rf.current_guard() is None
    with redlock.hold(key, 0.6) as guard:
        assert rf.current_guard() is guard
        assert guard.key == key and guard.owner not in repr(guard)
        time.sleep(1.5)  # more than twice the ttl: kept alive by extensions
        assert not guard.lost.is_set()
        assert guard.validity > 0
        assert held_by_any(redlock, key)
        assert redlock.try_acquire(key, 1) is None
    assert rf.current_guard() is None
    assert not held_by_any(redlock, key)
    nxt = redlock.acquire(key, 1)
    assert nxt.token > guard.token
    nxt.release()


def test_hold_raises_lost_when_the_nodes_stop(
    redlock: rf.Redlock, nodes: list[Node], key: str
) -> None:
    with pytest.raises(rf.LockLostError):
        with redlock.hold(key, 0.4) as guard:
            for n in nodes[:3]:
                n.pause()
            assert guard.lost.wait(2.0)
            assert guard.validity == 0.0
    for n in nodes[:3]:
        n.resume()
    with redlock.hold(key, 0.4, raise_on_lost=False) as guard:
        for n in nodes[:3]:
            n.pause()
        assert guard.lost.wait(2.0)
        with pytest.raises(rf.LockLostError):
            guard.raise_if_lost()


def test_synchronized_runs_each_call_under_the_lock(redlock: rf.Redlock, key: str) -> None:
    tokens: list[int] = []

    @redlock.synchronized(key, 2, wait=5)
    def work(x: int) -> int:
        guard = rf.current_guard()
        assert guard is not None
        assert redlock.try_acquire(key, 1) is None
        tokens.append(guard.token)
        return x * 2

    assert work(21) == 42
    assert work(1) == 2
    assert work.__name__ == "work"
    assert tokens[1] > tokens[0]
    assert not held_by_any(redlock, key)

    async def coro() -> None:
        pass

    with pytest.raises(TypeError):
        redlock.synchronized(key, 1)(coro)


def test_closed_client_raises_lock_state_error(urls: list[str], key: str) -> None:
    redlock = rf.Redlock.connect(urls)
    lock = redlock.acquire(key, 5)
    redlock.close()
    with pytest.raises(rf.LockStateError):
        redlock.acquire(key, 5)
    # A lock taken before keeps what it needs to be released.
    assert lock.release() is True


def test_as_async_shares_the_client(redlock: rf.Redlock, key: str) -> None:
    import asyncio

    async def run() -> int:
        a = redlock.as_async()
        lock = await a.acquire(key, 5)
        assert redlock.try_acquire(key, 5) is None
        assert await lock.release()
        return lock.token

    token = asyncio.run(run())
    lock = redlock.as_async().as_sync().acquire(key, 5)
    assert lock.token > token
    lock.release()
