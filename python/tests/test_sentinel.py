"""Sentinel members and the replica-sync check from Python: the master found
through the sentinels, grants confirmed by every replica (`redlock.sync-replicas
2`), and a frozen replica failing the check."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import redlock_fenced as rf
from nodes import SentinelGroup, command


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    g = SentinelGroup()
    try:
        yield g
    finally:
        g.close()


def held_on(port: int, key: str) -> bool:
    """`REDLOCK.INSPECT key` says held (`held` is the first field)."""
    reply = command(port, "REDLOCK.INSPECT", key)
    return b"held" in reply and reply.split(b"held", 1)[1].startswith(b"\r\n:1\r\n")


def held_everywhere(group: SentinelGroup, key: str) -> bool:
    return all(held_on(n.port, key) for n in group.nodes)


def test_a_lock_through_the_sentinels_reaches_every_replica(group: SentinelGroup) -> None:
    member = rf.Sentinel(group.name, *group.sentinel_urls)
    redlock = rf.Redlock.connect([member], sync_timeout=0.5)
    assert redlock.nodes == [
        f"sentinel({group.name}@{','.join(u.removeprefix('redis://') for u in group.sentinel_urls)})"
    ]
    with redlock.acquire("py:sentinel", 10) as lock:
        assert lock.token > 0
        assert held_everywhere(group, "py:sentinel")


def test_a_frozen_replica_fails_the_check(group: SentinelGroup) -> None:
    redlock = rf.Redlock.connect(
        [rf.Sentinel(group.name, *group.sentinel_urls)],
        sync_timeout=0.3,
        # Room for WAIT's answer after its 0.3 s on a loaded machine: the
        # check's failure, not a node timeout, is what this test reads.
        node_timeout=2.0,
        retry=rf.RetryPolicy.no_retry(),
    )
    replica = group.nodes[1]
    replica.pause()
    try:
        with pytest.raises(rf.TransientError) as caught:
            redlock.acquire("py:frozen", 10)
    finally:
        replica.resume()
    assert "replica-sync check failed: 1 of the 2 replicas" in str(caught.value)
    assert not held_on(group.nodes[0].port, "py:frozen"), "the grant that failed the check stayed"


async def test_the_asyncio_client_takes_sentinel_members(group: SentinelGroup) -> None:
    redlock = await rf.AsyncRedlock.connect([rf.Sentinel(group.name, *group.sentinel_urls)])
    lock = await redlock.acquire("py:async-sentinel", 10)
    assert lock.token > 0
    assert await lock.release()


def test_sentinel_members_keep_their_data_password_out_of_repr() -> None:
    member = rf.Sentinel("locks", "redis://10.0.0.1:26379", data_user="u", data_password="secret")
    assert "secret" not in repr(member)
    with pytest.raises(rf.InvalidArgumentError):
        rf.Sentinel("locks")
    with pytest.raises(rf.InvalidArgumentError):
        rf.Sentinel("", "redis://10.0.0.1:26379")
