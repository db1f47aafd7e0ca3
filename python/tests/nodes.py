"""Local redis-server nodes loading the redlock module, for the tests.

Started like the Rust test kit's: a free loopback port picked at run time,
`--bind 127.0.0.1`, no snapshots, the restart guard off, debug commands on;
stopped by their own pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE = 15.0


def module_path() -> Path:
    """`REDLOCK_MODULE`, or the test build in target/debug."""
    env = os.environ.get("REDLOCK_MODULE")
    path = Path(env).resolve() if env else ROOT / "target" / "debug" / "libredlock.so"
    if not path.exists():
        raise RuntimeError(
            f"{path} is missing: build it with `cargo build -p redlock-module --features test-hooks`"
        )
    return path


def server_bin() -> str:
    """The server binary: ``REDLOCK_SERVER_BIN`` when set (a ``valkey-server``), else ``redis-server``."""
    return os.environ.get("REDLOCK_SERVER_BIN") or "redis-server"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def command(port: int, *args: str, timeout: float = 2.0) -> bytes:
    """Sends one command (RESP) and returns the raw reply."""
    parts = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"".join(parts))
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


class Node:
    """One redis-server process in its own temporary folder."""

    def __init__(self, *, module: bool = True, extra: tuple[str, ...] = ()) -> None:
        self.module = module
        self.extra = extra
        self.dir = tempfile.TemporaryDirectory(prefix="redlock-py-node-")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            server_bin(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", self.dir.name, "--logfile", str(Path(self.dir.name) / "redis.log"),
            "--daemonize", "no", "--save", "", "--enable-debug-command", "yes",
        ]
        if self.module:
            args += ["--loadmodule", str(module_path()), "--redlock.restart-grace-ms", "0"]
        args += list(self.extra)
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_DEADLINE
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on {self.port} exited: {self.log_tail()}")
            try:
                if command(self.port, "PING", timeout=0.2).startswith(b"+PONG"):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {self.port}: no PING reply")
            time.sleep(0.02)

    def log_tail(self) -> str:
        try:
            return "\n".join((Path(self.dir.name) / "redis.log").read_text().splitlines()[-10:])
        except OSError:
            return ""

    def pause(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def kill(self) -> None:
        """SIGKILL: no shutdown, no save."""
        if self.proc is not None:
            if self.paused:
                self.resume()
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        try:
            command(self.port, "SHUTDOWN", "NOSAVE", timeout=0.5)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        self.dir.cleanup()


def start_cluster(masters: int) -> list[Node]:
    """A Redis Cluster of `masters` module nodes (no replicas), the slots
    split evenly in order, each node with its own free bus port; returns
    once every node reports `cluster_state:ok`. The caller closes them."""
    nodes: list[Node] = []
    try:
        for _ in range(masters):
            nodes.append(Node(extra=(
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-port", str(free_port()), "--cluster-node-timeout", "1000",
            )))
        per = 16384 // masters
        for i, node in enumerate(nodes):
            last = 16383 if i == masters - 1 else (i + 1) * per - 1
            reply = command(node.port, "CLUSTER", "ADDSLOTSRANGE", str(i * per), str(last))
            assert reply.startswith(b"+OK"), reply
        for node in nodes[1:]:
            bus = command(node.port, "CONFIG", "GET", "cluster-port").split(b"\r\n")[-2]
            reply = command(nodes[0].port, "CLUSTER", "MEET", "127.0.0.1", str(node.port),
                            bus.decode())
            assert reply.startswith(b"+OK"), reply
        deadline = time.monotonic() + START_DEADLINE
        while not all(b"cluster_state:ok" in command(n.port, "CLUSTER", "INFO") for n in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.05)
        return nodes
    except BaseException:
        for node in nodes:
            node.close()
        raise


def cluster_slot(port: int, key: str) -> int:
    """`CLUSTER KEYSLOT key`."""
    return int(command(port, "CLUSTER", "KEYSLOT", key)[1:].strip())


class SentinelProc:
    """One `redis-server --sentinel` in its own folder, watching `name`."""

    def __init__(self, name: str, master_port: int, quorum: int) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="redlock-py-sentinel-")
        self.port = free_port()
        conf = Path(self.dir.name) / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndaemonize no\n"
            f"logfile {Path(self.dir.name) / 'sentinel.log'}\ndir {self.dir.name}\n"
            f"sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n"
            f"sentinel down-after-milliseconds {name} 1000\n"
            f"sentinel failover-timeout {name} 4000\n"
        )
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [server_bin(), str(conf), "--sentinel"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                if command(self.port, "PING", timeout=0.2).startswith(b"+PONG"):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sentinel on {self.port}: no PING reply")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        self.dir.cleanup()


class SentinelGroup:
    """A master with replicas and sentinels watching it (like the Rust test
    kit's `SentinelGroup`), `redlock.sync-replicas` at `r`."""

    name = "redlock"

    def __init__(self, replicas: int = 2, sentinels: int = 3, r: int = 2) -> None:
        self.nodes: list[Node] = []
        self.sentinels: list[SentinelProc] = []
        try:
            check = ("--redlock.sync-replicas", str(r))
            self.nodes.append(Node(extra=check))
            master = self.nodes[0].port
            for _ in range(replicas):
                self.nodes.append(Node(extra=(*check, "--replicaof", "127.0.0.1", str(master))))
            self._wait(lambda: command(master, "INFO", "replication").count(b"state=online")
                       >= replicas, "the replicas online")
            for _ in range(sentinels):
                self.sentinels.append(SentinelProc(self.name, master, sentinels // 2 + 1))
            for s in self.sentinels:
                self._wait(self._sees(s.port, sentinels - 1), "the sentinels to meet")
        except BaseException:
            self.close()
            raise

    def _sees(self, port: int, others: int) -> Callable[[], bool]:
        """Whether the sentinel on `port` knows `others` other sentinels."""
        return lambda: command(port, "SENTINEL", "SENTINELS", self.name).startswith(
            f"*{others}\r\n".encode()
        )

    @staticmethod
    def _wait(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 45.0
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"waited 45 s for {what}")
            time.sleep(0.05)

    @property
    def sentinel_urls(self) -> list[str]:
        return [s.url for s in self.sentinels]

    def close(self) -> None:
        for s in self.sentinels:
            s.close()
        for n in self.nodes:
            n.close()
