"""Leader election (`campaign` / `leader` / `observe`) on five real nodes,
sync and asyncio: one leader at a time with strictly increasing epochs on a
fenced resource, a resign hands over, observers see the changes in order, a
lost term sets its `lost` event, a cancelled campaign leaves no grant."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import redlock_fenced as rf
from nodes import Node, command

# Generous bounds: the machine is shared and loaded.
HANDOFF = 10.0


def test_one_leader_at_a_time_with_increasing_epochs(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, log = f"{{{key}}}:fence", f"{{{key}}}:epochs"
    leading = 0
    most = 0
    epochs: list[int] = []
    errors: list[BaseException] = []
    state = threading.Lock()

    def candidate(index: int) -> None:
        try:
            for _ in range(3):
                with redlock.campaign(key, 5, value=f"candidate-{index}") as term:
                    nonlocal leading, most
                    with state:
                        leading += 1
                        most = max(most, leading)
                        epochs.append(term.epoch)
                    # Every leader writes its epoch through the fence.
                    assert term.fenced(resource, guard, "RPUSH", log, term.epoch) >= 1
                    leader = redlock.leader(key)
                    assert leader is not None
                    assert (leader.epoch, leader.value) == (term.epoch, f"candidate-{index}")
                    time.sleep(0.02)
                    with state:
                        leading -= 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=candidate, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a candidate never finished"
    assert not errors, errors
    assert most == 1
    assert len(epochs) == 12
    assert epochs == sorted(epochs) and len(set(epochs)) == 12
    # The resource accepted every term, in epoch order.
    reply = command(resource_node.port, "LRANGE", log, "0", "-1").decode()
    values = [int(line) for line in reply.split("\r\n")[2::2] if line]
    assert values == epochs


def test_a_resign_hands_over_to_a_waiting_candidate(redlock: rf.Redlock, key: str) -> None:
    first = redlock.campaign(key, 5)
    assert first.state == "leading"
    assert first.validity > 4
    elected: list[rf.Leadership] = []
    waiter = threading.Thread(target=lambda: elected.append(redlock.campaign(key, 5)))
    waiter.start()
    # The waiting candidate blocks in Rust; this thread keeps running.
    time.sleep(0.3)
    assert not elected
    leader = redlock.leader(key)
    assert leader is not None and leader.epoch == first.epoch
    first.resign()
    assert first.state == "resigned"
    assert first.validity == 0.0
    first.resign()  # a second resign does nothing
    waiter.join(timeout=HANDOFF)
    assert elected, "the waiting candidate was not elected after the resign"
    second = elected[0]
    assert second.epoch > first.epoch
    leader = redlock.leader(key)
    assert leader is not None and leader.epoch == second.epoch and leader.value is None
    with pytest.raises(rf.LockStateError, match="resigned"):
        first.proclaim("late")
    second.resign()
    assert redlock.leader(key) is None


def test_observe_sees_every_change_in_order(redlock: rf.Redlock, key: str) -> None:
    observer = redlock.observe(key)
    assert observer.wait(timeout=0.2) is None  # nobody leads: nothing to report
    first = redlock.campaign(key, 5, value="10.0.0.1:80")
    change = observer.wait(timeout=HANDOFF)
    assert change is not None
    assert (change.epoch, change.value, change.revision) == (first.epoch, "10.0.0.1:80", 1)
    assert 0 < change.time_left <= 5
    first.proclaim("10.0.0.1:81")
    change = next(observer)
    assert (change.epoch, change.value, change.revision) == (first.epoch, "10.0.0.1:81", 2)
    first.resign()
    second = redlock.campaign(key, 5)
    change = next(observer)
    assert (change.epoch, change.value, change.revision) == (second.epoch, None, 0)
    assert second.epoch > first.epoch
    second.resign()


def test_a_lost_leadership_sets_its_lost_event(
    redlock: rf.Redlock, nodes: list[Node], key: str
) -> None:
    term = redlock.campaign(key, 1)
    assert not term.lost.is_set()
    # A majority stops answering: no renewal can be confirmed, and the lease
    # runs out.
    for node in nodes[:3]:
        node.pause()
    assert term.lost.wait(timeout=HANDOFF)
    assert term.state == "lost"
    assert term.validity == 0.0
    with pytest.raises(rf.LockLostError):
        term.raise_if_lost()
    for node in nodes[:3]:
        node.resume()
    with pytest.raises(rf.LockLostError):
        term.proclaim("too late")
    # Leaving the block of a lost term says so.
    with pytest.raises(rf.LockLostError):
        with term:
            pass
    # The next leader's epoch is higher.
    with redlock.campaign(key, 5) as after:
        assert after.epoch > term.epoch


def test_bad_arguments(redlock: rf.Redlock, key: str) -> None:
    with pytest.raises(rf.InvalidArgumentError):
        redlock.campaign(key, 0)
    with pytest.raises(TypeError):
        redlock.campaign(key, 5, value=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        redlock.leader(3)  # type: ignore[arg-type]
    with redlock.campaign(key, 5) as term:
        with pytest.raises(TypeError):
            term.proclaim(b"bytes")  # type: ignore[arg-type]
        assert repr(term) == f"<Leadership name={key!r} epoch={term.epoch} state='leading'>"


async def test_async_campaign_observe_and_handover(aredlock: rf.AsyncRedlock, key: str) -> None:
    election = aredlock.election(key)
    assert await election.leader() is None
    observer = election.observe()
    seen: list[tuple[int, int]] = []

    async def watch() -> None:
        async for change in observer:
            seen.append((change.epoch, change.revision))

    watcher = asyncio.create_task(watch())
    first = await election.campaign(5, value="a")
    assert isinstance(first, rf.AsyncLeadership)
    waiting = asyncio.create_task(election.campaign(5))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await first.proclaim("b")
    await first.resign()
    second = await asyncio.wait_for(waiting, HANDOFF)
    assert second.epoch > first.epoch
    leader = await election.leader()
    assert leader is not None and leader.epoch == second.epoch
    deadline = time.monotonic() + HANDOFF
    while (second.epoch, 0) not in seen and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    # In increasing (epoch, revision) order, ending with the second term.
    assert seen == sorted(set(seen)) and seen[-1] == (second.epoch, 0)
    assert seen[0][0] == first.epoch
    async with second:
        pass
    assert second.state == "resigned"
    assert await election.leader() is None


async def test_async_lost_event_is_awaitable(
    aredlock: rf.AsyncRedlock, nodes: list[Node], key: str
) -> None:
    term = await aredlock.campaign(key, 1)
    for node in nodes[:3]:
        node.pause()
    try:
        await asyncio.wait_for(_lost(term), HANDOFF)
    finally:
        for node in nodes[:3]:
            node.resume()
    assert term.lost.is_set()
    await term.resign()


async def _lost(term: rf.AsyncLeadership) -> None:
    await term.lost


async def test_a_cancelled_campaign_leaves_no_grant(aredlock: rf.AsyncRedlock, key: str) -> None:
    first = await aredlock.campaign(key, 5)
    waiting = asyncio.create_task(aredlock.campaign(key, 5))
    await asyncio.sleep(0.2)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await first.resign()
    # Nobody was handed the lock: no node holds it (a node may still keep
    # it reserved for the cancelled waiter for its short hand-off window,
    # when the waiter's disconnect reached it after the release).
    deadline = time.monotonic() + HANDOFF
    while any(v.held for v in await aredlock.inspect(key)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not any(v.held for v in await aredlock.inspect(key))
    assert await aredlock.leader(key) is None
    lock = await aredlock.acquire(key, 5, wait=HANDOFF)
    assert lock.token > first.epoch
    await lock.release()
