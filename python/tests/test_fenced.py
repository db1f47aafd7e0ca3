"""Fenced writes from held locks to a resource server (REDLOCK.FENCED and
REDLOCK.GUARD on a module node that is not a lock member)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import redlock_fenced as rf
from nodes import Node, cluster_slot, command, free_port, start_cluster


def value(node: Node, key: str) -> bytes:
    """`GET key` on a plain connection, as the raw RESP reply."""
    return command(node.port, "GET", key)


def connections_received(node: Node) -> int:
    """`total_connections_received` (the INFO call's own connection included)."""
    for line in command(node.port, "INFO", "stats").decode().splitlines():
        if line.startswith("total_connections_received:"):
            return int(line.split(":")[1])
    raise AssertionError("no total_connections_received in INFO stats")


def names(key: str) -> tuple[str, str]:
    """A guard and a resource key sharing a hash tag."""
    return f"{{{key}}}:fence", f"{{{key}}}:state"


def take_over(redlock: rf.Redlock, old: rf.Lock) -> rf.Lock:
    """Frees `old` on the nodes (it still believes it holds the lock) and
    acquires again: the new holder's token is higher."""
    assert redlock.release_owner(old.key, old.owner)
    new = redlock.acquire(old.key, 5)
    assert new.token > old.token
    return new


def test_fresh_write_returns_the_inner_reply(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    with redlock.acquire(key, 5) as lock:
        assert lock.fenced(resource, guard, "SET", state, "v1") == "OK"
        assert lock.fenced(resource, guard, "GET", state) == b"v1"
        assert lock.fenced(resource, guard, "GET", f"{{{key}}}:missing") is None
        assert lock.fenced(resource, guard, "INCRBY", f"{{{key}}}:n", 41) == 41
        assert lock.fenced(resource, guard, "RPUSH", f"{{{key}}}:l", b"a", 2, 2.5) == 3
        assert lock.fenced(resource, guard, "LRANGE", f"{{{key}}}:l", 0, -1) == [
            b"a", b"2", b"2.5",
        ]
        # The guard has seen exactly this token: equal tokens pass.
        assert lock.announce(resource, guard) == lock.token
        assert lock.fenced(resource, guard, "SET", state, "v2") == "OK"
    assert value(resource_node, state) == b"$2\r\nv2\r\n"


def test_stale_holder_is_refused_and_changes_nothing(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    old = redlock.acquire(key, 5)
    assert old.fenced(resource, guard, "SET", state, "old") == "OK"
    new = take_over(redlock, old)
    assert new.announce(resource, guard) == new.token
    with pytest.raises(rf.StaleTokenError) as caught:
        old.fenced(resource, guard, "SET", state, "stale")
    err = caught.value
    assert isinstance(err, rf.LockLostError) and not err.transient
    assert (err.key, err.guard, err.token, err.highest) == (key, guard, old.token, new.token)
    assert str(new.token) in str(err)
    with pytest.raises(rf.StaleTokenError) as again:
        old.announce(resource, guard)
    assert again.value.highest == new.token
    assert value(resource_node, state) == b"$3\r\nold\r\n"
    assert new.fenced(resource, guard, "SET", state, "new") == "OK"
    assert value(resource_node, state) == b"$3\r\nnew\r\n"
    new.release()
    old.release()


def test_guard_of_another_lock_is_refused(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    with redlock.acquire(key, 5) as lock, redlock.acquire(f"{key}-other", 5) as other:
        lock.fenced(resource, guard, "SET", state, "mine")
        with pytest.raises(rf.ResourceError) as caught:
            other.fenced(resource, guard, "SET", state, "theirs")
        assert "serves lock" in caught.value.detail
        assert not isinstance(caught.value, rf.StaleTokenError)
    assert value(resource_node, state) == b"$4\r\nmine\r\n"


def test_refused_inner_commands_raise(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    with redlock.acquire(key, 5) as lock:
        lock.fenced(resource, guard, "SET", state, "text")
        with pytest.raises(rf.ResourceError) as keyless:
            lock.fenced(resource, guard, "FLUSHALL")
        assert "FLUSHALL" in keyless.value.detail
        with pytest.raises(rf.ResourceError) as own_error:
            lock.fenced(resource, guard, "INCR", state)
        assert "not an integer" in own_error.value.detail
    assert value(resource_node, state) == b"$4\r\ntext\r\n"


def test_bad_arguments_are_refused_before_sending(redlock: rf.Redlock, key: str) -> None:
    with redlock.acquire(key, 5) as lock:
        with pytest.raises(rf.InvalidArgumentError):
            lock.fenced("redis://127.0.0.1:1/", "g")
        with pytest.raises(TypeError):
            lock.fenced("redis://127.0.0.1:1/", "g", "SET", "k", True)
        with pytest.raises(TypeError):
            lock.fenced(b"redis://127.0.0.1:1/", "g", "GET", "k")  # type: ignore[arg-type]
        with pytest.raises(rf.InvalidArgumentError):
            lock.fenced("not-a-url", "g", "GET", "k")
        with pytest.raises(rf.ResourceError) as refused:
            lock.fenced(f"redis://127.0.0.1:{free_port()}/", "g", "GET", "k")
        assert "cannot connect" in refused.value.detail
    with pytest.raises(rf.LockStateError):
        lock.fenced("redis://127.0.0.1:1/", "g", "GET", "k")


def test_one_connection_per_resource_and_reconnect_after_a_restart(
    urls: list[str], key: str
) -> None:
    node = Node()
    try:
        guard, state = names(key)
        with rf.Redlock.connect(urls) as redlock, redlock.acquire(key, 5) as lock:
            before = connections_received(node)
            for i in range(5):
                assert lock.fenced(node.url, guard, "SET", state, i) == "OK"
            with redlock.acquire(f"{key}-2", 5) as second:
                second.fenced(node.url, f"{{{key}-2}}:fence", "GET", f"{{{key}-2}}:x")
            # One connection for all six calls, plus the second INFO's own.
            assert connections_received(node) - before == 2
            node.restart()
            # The cached connection is dead: at most one call fails, then the
            # client connects again.
            with contextlib.suppress(rf.ResourceError):
                lock.fenced(node.url, guard, "SET", state, "x")
            assert lock.fenced(node.url, guard, "SET", state, "after") == "OK"
            assert value(node, state) == b"$5\r\nafter\r\n"
    finally:
        node.close()


def test_hold_guard_fences_and_resp3_gives_a_map(
    redlock: rf.Redlock, resource: str, key: str
) -> None:
    guard, state = names(key)
    with redlock.hold(key, 5) as held:
        assert held.announce(resource, guard) == held.token
        assert held.fenced(resource, guard, "HSET", state, "f", "1") == 1
        resp3 = f"{resource}/?protocol=resp3"
        assert held.fenced(resp3, guard, "HGETALL", state) == {b"f": b"1"}
    with pytest.raises(rf.LockStateError):
        held.fenced(resource, guard, "GET", state)


async def test_async_lock_fenced(
    aredlock: rf.AsyncRedlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    old = await aredlock.acquire(key, 5)
    assert await old.fenced(resource, guard, "SET", state, "old") == "OK"
    assert await old.fenced(resource, guard, "GET", state) == b"old"
    assert await old.fenced(resource, guard, "GET", f"{{{key}}}:missing") is None
    assert await old.fenced(resource, guard, "SADD", f"{{{key}}}:s", "a") == 1
    assert await old.fenced(resource, guard, "SMEMBERS", f"{{{key}}}:s") == [b"a"]
    assert await old.announce(resource, guard) == old.token
    with pytest.raises(rf.ResourceError):
        await old.fenced(resource, guard, "FLUSHALL")
    assert await aredlock.release_owner(key, old.owner)
    async with aredlock.acquire(key, 5) as new:
        assert await new.announce(resource, guard) == new.token
        with pytest.raises(rf.StaleTokenError) as caught:
            await old.fenced(resource, guard, "SET", state, "stale")
        assert (caught.value.token, caught.value.highest) == (old.token, new.token)
        async with aredlock.acquire(f"{key}-other", 5) as other:
            with pytest.raises(rf.ResourceError) as wrong:
                await other.fenced(resource, guard, "SET", state, "theirs")
            assert "serves lock" in wrong.value.detail
    assert value(resource_node, state) == b"$3\r\nold\r\n"
    await old.release()


async def test_async_hold_guard_fenced(
    aredlock: rf.AsyncRedlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    async with aredlock.hold(key, 5) as held:
        assert await held.aannounce(resource, guard) == held.token
        assert await held.afenced(resource, guard, "INCR", state) == 1
        assert await held.afenced(resource, guard, "INCR", state) == 2
        with pytest.raises(rf.ResourceError):
            await held.afenced(resource, guard, "PUBLISH", "chan", "m")
    old_token = held.token
    async with aredlock.hold(key, 5) as newer:
        assert await newer.aannounce(resource, guard) == newer.token > old_token
    assert value(resource_node, state) == b"$1\r\n2\r\n"


def test_transaction_applies_every_command(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    count = f"{{{key}}}:n"
    with redlock.acquire(key, 5) as lock:
        replies = lock.fenced_transaction(
            resource, guard, [("SET", state, "both"), ["INCRBY", count, 7], ("GET", state)]
        )
        assert replies == ["OK", 7, b"both"]
        assert lock.announce(resource, guard) == lock.token
    assert value(resource_node, state) == b"$4\r\nboth\r\n"
    assert value(resource_node, count) == b"$1\r\n7\r\n"


def test_stale_transaction_applies_nothing(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    count = f"{{{key}}}:n"
    old = redlock.acquire(key, 5)
    assert old.fenced_transaction(resource, guard, [("SET", state, "old")]) == ["OK"]
    new = take_over(redlock, old)
    assert new.announce(resource, guard) == new.token
    with pytest.raises(rf.StaleTokenError) as caught:
        old.fenced_transaction(resource, guard, [("SET", state, "stale"), ("INCR", count)])
    assert (caught.value.key, caught.value.guard) == (key, guard)
    assert (caught.value.token, caught.value.highest) == (old.token, new.token)
    assert value(resource_node, state) == b"$3\r\nold\r\n"
    assert value(resource_node, count) == b"$-1\r\n"
    new.release()
    old.release()


def test_transaction_with_a_failing_command_runs_the_others(
    redlock: rf.Redlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    count = f"{{{key}}}:n"
    with redlock.acquire(key, 5) as lock:
        lock.fenced(resource, guard, "SET", state, "text")
        with pytest.raises(rf.ResourceError) as caught:
            lock.fenced_transaction(resource, guard, [("INCR", state), ("INCR", count)])
        assert not isinstance(caught.value, rf.StaleTokenError)
        assert "not an integer" in caught.value.detail
        with pytest.raises(rf.InvalidArgumentError):
            lock.fenced_transaction(resource, guard, [])
        with pytest.raises(TypeError):
            lock.fenced_transaction(resource, guard, ["SET", state, "x"])
        with pytest.raises(rf.InvalidArgumentError):
            lock.fenced_transaction(resource, guard, [("SET", state, "x"), ()])
    # EXEC does not roll back: the second INCR took effect.
    assert value(resource_node, count) == b"$1\r\n1\r\n"
    assert value(resource_node, state) == b"$4\r\ntext\r\n"


async def test_async_transactions(
    aredlock: rf.AsyncRedlock, resource: str, resource_node: Node, key: str
) -> None:
    guard, state = names(key)
    count = f"{{{key}}}:n"
    old = await aredlock.acquire(key, 5)
    assert await old.fenced_transaction(
        resource, guard, [("SET", state, "a"), ("INCR", count)]
    ) == ["OK", 1]
    assert await aredlock.release_owner(key, old.owner)
    async with aredlock.hold(key, 5) as held:
        assert await held.afenced_transaction(
            resource, guard, [("SET", state, "b"), ("INCR", count)]
        ) == ["OK", 2]
        with pytest.raises(rf.StaleTokenError):
            await old.fenced_transaction(resource, guard, [("SET", state, "c"), ("INCR", count)])
    assert value(resource_node, state) == b"$1\r\nb\r\n"
    assert value(resource_node, count) == b"$1\r\n2\r\n"
    await old.release()


def test_hold_guard_transaction(redlock: rf.Redlock, resource: str, key: str) -> None:
    guard, state = names(key)
    with redlock.hold(key, 5) as held:
        assert held.fenced_transaction(resource, guard, [("HSET", state, "f", 1)]) == [1]
    with pytest.raises(rf.LockStateError):
        held.fenced_transaction(resource, guard, [("GET", state)])


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[Node]]:
    """A two-master Redis Cluster of module nodes (not lock members)."""
    nodes = start_cluster(2)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.close()


def test_cluster_resource_routes_to_the_slot_master(
    redlock: rf.Redlock, cluster: list[Node], key: str
) -> None:
    seed, other = cluster
    # A hash tag whose slot the second master serves: the one seed given
    # must route the command there.
    tag = next(
        f"{key}-{i}" for i in range(1000) if cluster_slot(seed.port, f"{{{key}-{i}}}") >= 8192
    )
    guard, state = names(tag)
    resource = rf.Cluster(seed.url)
    old = redlock.acquire(tag, 5)
    assert old.fenced(resource, guard, "SET", state, "old") == "OK"
    assert old.fenced_transaction(
        resource, guard, [("SET", state, "older"), ("GET", state)]
    ) == ["OK", b"older"]
    assert value(other, state) == b"$5\r\nolder\r\n"
    assert value(seed, state).startswith(b"-MOVED")
    new = take_over(redlock, old)
    assert new.announce(resource, guard) == new.token
    with pytest.raises(rf.StaleTokenError) as caught:
        old.fenced(resource, guard, "SET", state, "stale")
    assert (caught.value.token, caught.value.highest) == (old.token, new.token)
    with pytest.raises(rf.StaleTokenError):
        old.fenced_transaction(resource, guard, [("SET", state, "stale")])
    # Keys of another slot than the guard's are refused by the cluster.
    with pytest.raises(rf.ResourceError) as crossslot:
        new.fenced(resource, guard, "SET", f"{key}-untagged", "x")
    assert "crossslot" in str(crossslot.value).lower()
    assert value(other, state) == b"$5\r\nolder\r\n"
    new.release()
    old.release()


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(folder: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate
    (EC keys, a day long), as PEM files in `folder`."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", str(folder / "ca.key"), "-out",
            str(folder / "ca.crt"), "-days", "1", "-subj", "/CN=redlock-py-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, usage in (("server", "serverAuth"), ("client", "clientAuth")):
        ext = folder / f"{name}.ext"
        ext.write_text(f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")
        openssl("req", *ec, "-keyout", str(folder / f"{name}.key"), "-out",
                str(folder / f"{name}.csr"), "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", str(folder / f"{name}.csr"), "-CA",
                str(folder / "ca.crt"), "-CAkey", str(folder / "ca.key"), "-CAcreateserial",
                "-out", str(folder / f"{name}.crt"), "-days", "1", "-extfile", str(ext))


def test_tls_resource_uses_the_client_tls_files(tmp_path: Path, key: str) -> None:
    make_pki(tmp_path)
    tls_port = free_port()
    node = Node(extra=(
        "--tls-port", str(tls_port), "--tls-cert-file", str(tmp_path / "server.crt"),
        "--tls-key-file", str(tmp_path / "server.key"),
        "--tls-ca-cert-file", str(tmp_path / "ca.crt"),
    ))
    try:
        url = f"rediss://127.0.0.1:{tls_port}"
        guard, state = names(key)
        ca, cert = tmp_path / "ca.crt", (tmp_path / "client.crt", tmp_path / "client.key")
        # The node is both the one lock member and the resource: with TLS
        # files every member must be rediss://.
        with rf.Redlock.connect([url], tls_ca_file=ca, tls_client_cert=cert) as redlock:
            with redlock.acquire(key, 5) as lock:
                assert lock.fenced(url, guard, "SET", state, "tls") == "OK"
                assert lock.fenced_transaction(url, guard, [("GET", state)]) == [b"tls"]
                with pytest.raises(rf.InvalidArgumentError):
                    lock.fenced(f"{url}/#insecure", guard, "GET", state)
                # A plain resource of a client with TLS files stays plain.
                assert lock.fenced(node.url, guard, "GET", state) == b"tls"
        assert value(node, state) == b"$3\r\ntls\r\n"
    finally:
        node.close()


STALE_CALLS = ["fenced", "fenced_transaction", "announce"]


def stale_call(lock: rf.Lock | rf.LockGuard, kind: str, resource: str, key: str) -> None:
    """One fenced call of `kind` that a newer holder's token makes stale."""
    guard, state = names(key)
    if kind == "fenced":
        lock.fenced(resource, guard, "SET", state, "stale")
    elif kind == "fenced_transaction":
        lock.fenced_transaction(resource, guard, [("SET", state, "stale")])
    else:
        lock.announce(resource, guard)


async def astale_call(
    lock: rf.AsyncLock | rf.LockGuard, kind: str, resource: str, key: str
) -> None:
    """`stale_call` on the asyncio surface (`LockGuard`'s `a…` methods)."""
    guard, state = names(key)
    if isinstance(lock, rf.AsyncLock):
        if kind == "fenced":
            await lock.fenced(resource, guard, "SET", state, "stale")
        elif kind == "fenced_transaction":
            await lock.fenced_transaction(resource, guard, [("SET", state, "stale")])
        else:
            await lock.announce(resource, guard)
    elif kind == "fenced":
        await lock.afenced(resource, guard, "SET", state, "stale")
    elif kind == "fenced_transaction":
        await lock.afenced_transaction(resource, guard, [("SET", state, "stale")])
    else:
        await lock.aannounce(resource, guard)


@pytest.mark.parametrize("kind", STALE_CALLS)
def test_a_stale_token_sets_the_lock_lost(
    redlock: rf.Redlock, resource: str, key: str, kind: str
) -> None:
    guard, _ = names(key)
    old = redlock.acquire(key, 30)
    new = take_over(redlock, old)
    assert new.announce(resource, guard) == new.token
    assert not old.lost.is_set() and old.validity > 20
    with pytest.raises(rf.StaleTokenError):
        stale_call(old, kind, resource, key)
    # Lost at once, long before its validity would have run out.
    assert old.lost.is_set()
    assert old.lost.wait(0)
    assert old.validity == 0.0
    with pytest.raises(rf.LockLostError):
        old.raise_if_lost()
    new.release()
    old.release()


@pytest.mark.parametrize("kind", STALE_CALLS)
def test_a_stale_token_sets_the_hold_guard_lost(
    redlock: rf.Redlock, resource: str, key: str, kind: str
) -> None:
    guard, _ = names(key)
    with pytest.raises(rf.LockLostError) as exited:
        with redlock.hold(key, 30) as held:
            assert held.announce(resource, guard) == held.token
            assert redlock.release_owner(key, held.owner)
            with redlock.acquire(key, 5) as new:
                assert new.announce(resource, guard) == new.token
                assert not held.lost.is_set()
                with pytest.raises(rf.StaleTokenError):
                    stale_call(held, kind, resource, key)
                # Set by the refusal, not by the keeper (its first extension
                # is 10 s away).
                assert held.lost.is_set()
                assert held.validity == 0.0
    # The block caught the refusal and ended normally: the exit reports the loss.
    assert not isinstance(exited.value, rf.StaleTokenError)
    assert exited.value.token == held.token


@pytest.mark.parametrize("kind", STALE_CALLS)
async def test_a_stale_token_sets_the_async_lock_lost(
    aredlock: rf.AsyncRedlock, resource: str, key: str, kind: str
) -> None:
    guard, _ = names(key)
    old = await aredlock.acquire(key, 30)
    assert await aredlock.release_owner(key, old.owner)
    async with aredlock.acquire(key, 5) as new:
        assert await new.announce(resource, guard) == new.token
        assert not old.lost.is_set()
        with pytest.raises(rf.StaleTokenError):
            await astale_call(old, kind, resource, key)
        assert old.lost.is_set()
        await asyncio.wait_for(old.lost, 1)
        assert old.validity == 0.0
    await old.release()


@pytest.mark.parametrize("kind", STALE_CALLS)
async def test_a_stale_token_cancels_the_async_hold_block(
    aredlock: rf.AsyncRedlock, resource: str, key: str, kind: str
) -> None:
    guard, _ = names(key)
    reached_the_end = False
    started = time.monotonic()
    with pytest.raises(rf.LockLostError) as exited:
        # The outer bound only keeps a broken build from hanging the run.
        async with asyncio.timeout(20):
            async with aredlock.hold(key, 30) as held:
                assert await held.aannounce(resource, guard) == held.token
                assert await aredlock.release_owner(key, held.owner)
                async with aredlock.acquire(key, 5) as new:
                    assert await new.announce(resource, guard) == new.token
                    try:
                        await astale_call(held, kind, resource, key)
                    except rf.StaleTokenError:
                        pass  # a careless block goes on working...
                    assert held.lost.is_set()
                    await asyncio.sleep(15)  # ...and is cancelled here
                    reached_the_end = True
    assert not reached_the_end
    assert not isinstance(exited.value, rf.StaleTokenError)
    # Cancelled by the refusal, not by the keeper's first extension (10 s).
    assert time.monotonic() - started < 8
    assert exited.value.token == held.token
