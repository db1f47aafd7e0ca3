"""Each client error arrives as its exception class, with its detail."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

import redlock_fenced as rf
from nodes import Node, command


def test_no_quorum_names_each_failing_node(nodes: list[Node], urls: list[str], key: str) -> None:
    with rf.Redlock.connect(urls, retry=rf.RetryPolicy.no_retry()) as redlock:
        for n in nodes[:3]:
            n.pause()
        with pytest.raises(rf.NoQuorumError) as caught:
            redlock.acquire(key, 5)
    err = caught.value
    assert err.transient and isinstance(err, rf.TransientError)
    assert (err.nodes, err.quorum) == (5, 3)
    assert err.answered <= 2
    failing = {node for node, _ in err.failures}
    assert {n.addr for n in nodes[:3]} <= failing
    assert all(reason for _, reason in err.failures)
    assert nodes[0].addr in str(err)


def test_module_not_loaded() -> None:
    plain = Node(module=False)
    try:
        with pytest.raises(rf.ModuleNotLoadedError) as caught:
            rf.Redlock.connect([plain.url])
        assert caught.value.node == plain.addr
        assert not caught.value.resource
        assert not caught.value.transient
        assert plain.addr in str(caught.value) and "loadmodule" in str(caught.value)
    finally:
        plain.close()


def lose_the_module(node: Node) -> None:
    """Restarts `node` on its port as a plain server without the module."""
    node.stop()
    node.module = False
    node.start()


def test_lock_commands_on_nodes_that_lost_the_module() -> None:
    nodes = [Node() for _ in range(3)]
    try:
        with rf.Redlock.connect(
            [n.url for n in nodes], retry=rf.RetryPolicy.no_retry()
        ) as redlock:
            redlock.acquire("bare", 5).release()
            for n in nodes:
                lose_the_module(n)
            # The first calls may still meet the broken connections; the
            # client reconnects in the background.
            deadline = time.monotonic() + 10
            while True:
                try:
                    redlock.acquire("bare", 5)
                except rf.ModuleNotLoadedError as err:
                    caught = err
                    break
                except rf.NoQuorumError:
                    assert time.monotonic() < deadline, "no ModuleNotLoadedError in 10 s"
                    time.sleep(0.05)
                else:
                    pytest.fail("nodes without the module granted a lock")
            assert caught.node in {n.addr for n in nodes}
            assert not caught.resource
            assert caught.node in str(caught) and "loadmodule" in str(caught)
            with pytest.raises(rf.ModuleNotLoadedError):
                redlock.release_owner("bare", "someone")
            views = redlock.inspect("bare")
            assert all(v.state == "error" and "not loaded" in (v.error or "") for v in views)
            assert all(command(n.port, "DBSIZE") == b":0\r\n" for n in nodes)
    finally:
        for n in nodes:
            n.close()


@pytest.fixture(scope="module")
def plain_resource() -> Iterator[Node]:
    """A plain redis-server without the module, as a fenced resource."""
    node = Node(module=False)
    try:
        yield node
    finally:
        node.close()


def check_resource_error(err: rf.ModuleNotLoadedError, plain: Node, command_name: str) -> None:
    assert err.resource
    assert err.node == plain.addr
    assert not err.transient
    text = str(err)
    assert f"resource server {plain.addr}" in text
    assert command_name in text and "loadmodule" in text


def test_module_not_loaded_on_a_resource(
    redlock: rf.Redlock, plain_resource: Node, key: str
) -> None:
    url, guard, state = plain_resource.url, f"{{{key}}}:fence", f"{{{key}}}:state"
    with redlock.acquire(key, 5) as lock:
        with pytest.raises(rf.ModuleNotLoadedError) as fenced:
            lock.fenced(url, guard, "SET", state, "x")
        check_resource_error(fenced.value, plain_resource, "REDLOCK.FENCED")
        with pytest.raises(rf.ModuleNotLoadedError) as transaction:
            lock.fenced_transaction(url, guard, [("SET", state, "x"), ("INCR", state)])
        check_resource_error(transaction.value, plain_resource, "REDLOCK.FENCED")
        with pytest.raises(rf.ModuleNotLoadedError) as announced:
            lock.announce(url, guard)
        check_resource_error(announced.value, plain_resource, "REDLOCK.GUARD")
        # Not a stale token: the lock is not lost.
        assert not lock.lost.is_set()
    with redlock.hold(key, 5) as held:
        with pytest.raises(rf.ModuleNotLoadedError) as from_guard:
            held.fenced(url, guard, "SET", state, "x")
        check_resource_error(from_guard.value, plain_resource, "REDLOCK.FENCED")
    assert command(plain_resource.port, "DBSIZE") == b":0\r\n"


async def test_module_not_loaded_on_a_resource_async(
    aredlock: rf.AsyncRedlock, plain_resource: Node, key: str
) -> None:
    url, guard, state = plain_resource.url, f"{{{key}}}:fence", f"{{{key}}}:state"
    async with aredlock.acquire(key, 5) as lock:
        with pytest.raises(rf.ModuleNotLoadedError) as fenced:
            await lock.fenced(url, guard, "SET", state, "x")
        check_resource_error(fenced.value, plain_resource, "REDLOCK.FENCED")
        with pytest.raises(rf.ModuleNotLoadedError) as transaction:
            await lock.fenced_transaction(url, guard, [("SET", state, "x")])
        check_resource_error(transaction.value, plain_resource, "REDLOCK.FENCED")
        with pytest.raises(rf.ModuleNotLoadedError) as announced:
            await lock.announce(url, guard)
        check_resource_error(announced.value, plain_resource, "REDLOCK.GUARD")
    async with aredlock.hold(key, 5) as held:
        with pytest.raises(rf.ModuleNotLoadedError) as from_guard:
            await held.afenced(url, guard, "SET", state, "x")
        check_resource_error(from_guard.value, plain_resource, "REDLOCK.FENCED")
    assert command(plain_resource.port, "DBSIZE") == b":0\r\n"


@pytest.fixture
def acl_user(nodes: list[Node]) -> Iterator[str]:
    name = f"locker{uuid.uuid4().hex[:6]}"
    rules = (
        "on >s3cret-pw resetkeys ~locks:* resetchannels -@all +redlock.acquire +redlock.release "
        "+redlock.extend +redlock.fence +redlock.inspect +redlock.wait +info"
    ).split()
    for n in nodes:
        assert command(n.port, "ACL", "SETUSER", name, *rules).startswith(b"+OK")
    yield name
    for n in nodes:
        command(n.port, "ACL", "DELUSER", name)


def test_permission_denied_names_nodes_and_keeps_the_password_out(
    nodes: list[Node], acl_user: str
) -> None:
    urls = [f"redis://{acl_user}:s3cret-pw@127.0.0.1:{n.port}" for n in nodes]
    with rf.Redlock.connect(urls, retry=rf.RetryPolicy.no_retry()) as redlock:
        lock = redlock.acquire("locks:ok", 5)
        lock.release()
        with pytest.raises(rf.PermissionDeniedError) as caught:
            redlock.acquire("other:x", 5)
    err = caught.value
    assert len(err.nodes) >= 3
    assert "NOPERM" in err.detail
    assert "s3cret" not in str(err)


def test_ttl_refused_by_the_nodes_is_invalid_argument(redlock: rf.Redlock, key: str) -> None:
    # Above the nodes' redlock.max-ttl-ms (60 s by default), below a day.
    with pytest.raises(rf.InvalidArgumentError) as caught:
        redlock.acquire(key, 3600)
    assert isinstance(caught.value, ValueError)
    assert not any(v.held for v in redlock.inspect(key))


def test_restart_guard() -> None:
    guarded = [Node(extra=("--redlock.restart-grace-ms", "60000")) for _ in range(3)]
    try:
        with rf.Redlock.connect(
            [n.url for n in guarded], retry=rf.RetryPolicy.no_retry()
        ) as redlock:
            try:
                lock = redlock.acquire("guarded", 5)
            except rf.RestartGuardError as err:
                assert err.transient
                assert len(err.nodes) >= 2
                assert err.retry_after is None or 0 < err.retry_after <= 60
            else:
                lock.release()
                pytest.fail("nodes started with a restart grace window granted a lock")
    finally:
        for n in guarded:
            n.close()


def test_exception_hierarchy() -> None:
    assert issubclass(rf.InvalidArgumentError, ValueError)
    assert issubclass(rf.LockStateError, RuntimeError)
    for cls in (
        rf.LockBusyError, rf.NoQuorumError, rf.RestartGuardError, rf.LockLostError,
        rf.ExpiredBeforeUseError, rf.ModuleNotLoadedError, rf.PermissionDeniedError,
        rf.InvalidArgumentError, rf.LockStateError,
    ):
        assert issubclass(cls, rf.LockError)
    for cls in (rf.LockBusyError, rf.NoQuorumError, rf.RestartGuardError):
        assert issubclass(cls, rf.TransientError) and cls.transient
    assert not rf.LockLostError.transient


def test_tls_files_are_checked(urls: list[str], tmp_path: object) -> None:
    tls_urls = [u.replace("redis://", "rediss://") for u in urls]
    missing = f"{tmp_path}/no-such-ca.pem"
    with pytest.raises(rf.InvalidArgumentError) as caught:
        rf.Redlock.connect(tls_urls, tls_ca_file=missing)
    assert "no-such-ca.pem" in str(caught.value)
    with pytest.raises(TypeError):
        rf.Redlock.connect(tls_urls, tls_client_cert="cert.pem")  # type: ignore[arg-type]


def test_cluster_members_are_checked() -> None:
    assert rf.Cluster("redis://a:7000", "redis://b:7000").seeds == (
        "redis://a:7000",
        "redis://b:7000",
    )
    with pytest.raises(rf.InvalidArgumentError):
        rf.Cluster()
    with pytest.raises(TypeError):
        rf.Cluster(7000)  # type: ignore[arg-type]
    # A cluster member whose seeds mix plain and TLS URLs is refused by the client.
    with pytest.raises(rf.InvalidArgumentError):
        rf.Redlock.connect([rf.Cluster("redis://127.0.0.1:1", "rediss://127.0.0.1:2")])
