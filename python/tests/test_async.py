"""The asyncio API, cancellation, and a loop that never blocks."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import time
import warnings

import pytest

import redlock_fenced as rf
from nodes import Node


async def held_by_any(redlock: rf.AsyncRedlock, key: str) -> bool:
    return any(v.held for v in await redlock.inspect(key))


async def test_acquire_await_and_async_with(aredlock: rf.AsyncRedlock, key: str) -> None:
    lock = await aredlock.acquire(key, 5)
    assert isinstance(lock, rf.AsyncLock)
    assert await held_by_any(aredlock, key)
    assert await lock.release() is True
    async with aredlock.acquire(key, 5) as second:
        assert second.token > lock.token
        assert await held_by_any(aredlock, key)
    assert not await held_by_any(aredlock, key)
    assert aredlock.quorum == 3 and len(aredlock.nodes) == 5


async def test_try_acquire_extend_release_owner(aredlock: rf.AsyncRedlock, key: str) -> None:
    lock = await aredlock.try_acquire(key, 0.5)
    assert lock is not None
    assert await aredlock.try_acquire(key, 5) is None
    await lock.extend(5)
    assert lock.validity > 1
    owner = lock.detach()
    assert await aredlock.release_owner(key, owner) is True
    assert not await held_by_any(aredlock, key)


async def test_lost_is_awaitable(aredlock: rf.AsyncRedlock, key: str) -> None:
    lock = await aredlock.acquire(key, 0.3)
    await asyncio.wait_for(lock.lost, 2.0)
    assert lock.lost.is_set() and lock.validity == 0.0
    with pytest.raises(rf.LockLostError):
        lock.raise_if_lost()
    await asyncio.sleep(0.1)  # the nodes' lease ends a drift margin later
    assert await lock.release() is False


async def test_the_loop_keeps_running_while_a_call_waits(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    holder = await aredlock.acquire(key, 10)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    with pytest.raises(rf.LockBusyError):
        await aredlock.acquire(key, 5, wait=0.5)
    elapsed = time.monotonic() - started
    task.cancel()
    # A blocked loop would not have ticked at all during the wait.
    assert ticks >= 10, (ticks, elapsed)
    await holder.release()


async def test_cancelled_waiting_acquire_leaves_no_grant(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    holder = await aredlock.acquire(key, 10)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(aredlock.acquire(key, 5, wait=5), 0.05)
    assert await holder.release() is True
    await asyncio.sleep(0.3)
    assert not await held_by_any(aredlock, key)


async def test_a_cancelled_waiting_acquire_stops_waiting(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    # A waiter that went on after its caller's cancellation would take the
    # lock once the holder lets go (its result then dropped and released in
    # the background): the nodes' token counters would move on.
    holder = await aredlock.acquire(key, 10)
    waiter = asyncio.ensure_future(aredlock.acquire(key, 5, wait=5))
    await asyncio.sleep(0.1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    counters = [v.token for v in await aredlock.inspect(key)]
    assert await holder.release() is True
    await asyncio.sleep(0.5)
    assert [v.token for v in await aredlock.inspect(key)] == counters


async def test_calls_of_one_turn_start_together_and_cancel_alone(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    # Calls made in one turn of the loop start as one batch of work: a
    # cancelled waiting call in the batch is dropped alone.
    holder = await aredlock.acquire(f"{key}-held", 10)
    plain = [asyncio.ensure_future(aredlock.acquire(f"{key}-{i}", 5)) for i in range(12)]
    waiter = asyncio.ensure_future(aredlock.acquire(f"{key}-held", 5, wait=5))
    more = [asyncio.ensure_future(aredlock.try_acquire(f"{key}-t{i}", 5)) for i in range(4)]
    await asyncio.sleep(0.05)
    waiter.cancel()
    locks = await asyncio.gather(*plain, *more)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    keys = [f"{key}-{i}" for i in range(12)] + [f"{key}-t{i}" for i in range(4)]
    assert [lock.key if lock is not None else None for lock in locks] == keys
    released = await asyncio.gather(*(lock.release() for lock in locks if lock is not None))
    assert all(released)
    counters = [v.token for v in await aredlock.inspect(f"{key}-held")]
    assert await holder.release() is True
    await asyncio.sleep(0.5)
    assert [v.token for v in await aredlock.inspect(f"{key}-held")] == counters


async def test_cancelled_plain_acquire_finishes_and_releases(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    # Cancel at many points of the round: whatever got granted is released,
    # without a ResourceWarning (no caller ever held that lock).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for delay in (0.0, 0.0005, 0.001, 0.002, 0.004):
            task = asyncio.ensure_future(aredlock.acquire(key, 10))
            await asyncio.sleep(delay)
            task.cancel()
            try:
                lock = await task
            except asyncio.CancelledError:
                pass
            else:
                await lock.release()
        deadline = time.monotonic() + 2
        while await held_by_any(aredlock, key):
            assert time.monotonic() < deadline, await aredlock.inspect(key)
            await asyncio.sleep(0.05)
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], caught


async def test_hold_and_synchronized(aredlock: rf.AsyncRedlock, key: str) -> None:
    async with aredlock.hold(key, 0.6) as guard:
        assert rf.current_guard() is guard
        await asyncio.sleep(1.5)
        assert not guard.lost.is_set()
        assert await aredlock.try_acquire(key, 1) is None
    assert not await held_by_any(aredlock, key)

    @aredlock.synchronized(key, 2)
    async def work(x: int) -> int:
        assert await aredlock.try_acquire(key, 1) is None
        return x + 1

    assert await work(1) == 2
    assert not await held_by_any(aredlock, key)

    def plain() -> None:
        pass

    with pytest.raises(TypeError):
        aredlock.synchronized(key, 1)(plain)  # type: ignore[arg-type]


async def test_cancel_on_lost_turns_into_lock_lost(
    aredlock: rf.AsyncRedlock, nodes: list[Node], key: str
) -> None:
    reached_end = False
    with pytest.raises(rf.LockLostError):
        async with aredlock.hold(key, 0.3):
            for n in nodes[:3]:
                n.pause()
            await asyncio.sleep(5)
            reached_end = True
    assert not reached_end
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0


async def test_outside_cancellation_stays_a_cancellation(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    async def body() -> None:
        async with aredlock.hold(key, 5):
            await asyncio.sleep(10)

    task = asyncio.create_task(body())
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not await held_by_any(aredlock, key)


async def test_async_connect_errors(nodes: list[Node]) -> None:
    with pytest.raises(rf.InvalidArgumentError):
        await rf.AsyncRedlock.connect(["not a url"])
    with pytest.raises(TypeError):
        await rf.AsyncRedlock.connect("redis://127.0.0.1:1")


async def test_a_garbage_collected_async_lock_is_released_with_a_warning(
    aredlock: rf.AsyncRedlock, key: str
) -> None:
    import gc
    import warnings

    lock = await aredlock.acquire(key, 30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lock
        # The step that received the lock still holds the finished future
        # (the loop's wake-up handle): the next step runs without it.
        await asyncio.sleep(0)
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught), caught
    deadline = time.monotonic() + 1.0
    while await held_by_any(aredlock, key):
        assert time.monotonic() < deadline, "the lock was not released within 1 s"
        await asyncio.sleep(0.02)


LOOPS_IN_THREADS = """
import asyncio, sys, threading
import redlock_fenced as rf

client = rf.Redlock.connect(sys.argv[1:]).as_async()
done = []

async def cycle(thread, round_):
    lock = await client.acquire(f"loops-{thread}-{round_}", 5)
    assert await lock.release()

def run(thread):
    for round_ in range(150):
        asyncio.run(cycle(thread, round_))  # a new event loop each time
    done.append(thread)

sys.setswitchinterval(1e-6)
threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert len(done) == 8, done
print("ok")
"""


def test_event_loops_in_several_threads(urls: list[str]) -> None:
    # Threads run event loops one after another, each loop's first call
    # registering its bridge (which runs Python code, `loop.add_reader`);
    # with a tiny switch interval the threads switch there as anywhere. A
    # lock held across that code deadlocked the whole process, hence the
    # separate process with a deadline.
    result = subprocess.run(
        [sys.executable, "-c", LOOPS_IN_THREADS, *urls[:3]],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


async def test_a_cancelled_shorter_extend_cuts_the_validity(
    aredlock: rf.AsyncRedlock, nodes: list[Node], key: str
) -> None:
    """The nodes may apply a shorter lease whatever the call returns, also
    when it is cancelled: the validity and the lost event follow the short
    lease from the moment the extension starts (found by an adversarial
    read: the lock reported 28 s left while another owner took it)."""
    lock = await aredlock.acquire(key, ttl=10)
    assert lock.validity > 9
    for node in nodes:
        node.pause()
    task = asyncio.ensure_future(lock.extend(1.0))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for node in nodes:
        node.resume()
    assert lock.validity <= 1.0, lock.validity
    await asyncio.sleep(1.2)
    assert lock.validity == 0.0
    assert lock.lost.is_set()
