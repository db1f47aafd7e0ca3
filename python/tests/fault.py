"""Fault test: worker processes contend through redlock_fenced (sync and
asyncio) for a few keys while nodes are SIGSTOPped, kill -9'd and restarted;
every token is used on a fenced sqlite3 resource (the README's rule,
`UPDATE ... WHERE fence_token <= ?`).

Checked afterwards:
- no token was handed out twice for one key;
- tokens never go backwards: an acquisition that started after another one
  of the same key had completed got a higher token;
- the resource accepted no stale write: its accepted writes carry
  non-decreasing tokens per key, each from a real acquisition of that key.

Run it alone with `python tests/fault.py --duration 60` (`make python-fault`);
`test_fault.py` runs a short form.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import multiprocessing as mp
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nodes import Node  # noqa: E402

KEYS = ("fault-a", "fault-b")
TTL = 0.5
WAIT = 1.0

# One acquisition: (key, token, worker, started, acquired, ended), monotonic seconds.
Acq = tuple[str, int, str, float, float, float]


def open_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def init_db(path: str) -> None:
    db = open_db(path)
    db.execute("CREATE TABLE resource (key TEXT PRIMARY KEY, value INTEGER NOT NULL,"
               " fence_token INTEGER NOT NULL DEFAULT 0)")
    db.execute("CREATE TABLE accepted (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT,"
               " token INTEGER, worker TEXT)")
    for key in KEYS:
        db.execute("INSERT INTO resource (key, value) VALUES (?, 0)", (key,))
    db.close()


def fenced_write(db: sqlite3.Connection, key: str, token: int, worker: str) -> bool:
    """The resource's rule: refuse a token lower than the highest seen. The
    check and the log entry are one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        cur = db.execute(
            "UPDATE resource SET value = value + 1, fence_token = ? WHERE key = ? AND fence_token <= ?",
            (token, key, token),
        )
        ok = cur.rowcount == 1
        if ok:
            db.execute("INSERT INTO accepted (key, token, worker) VALUES (?, ?, ?)",
                       (key, token, worker))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return ok


def sync_worker(name: str, urls: list[str], db_path: str, until: float, seed: int,
                out: list[Acq], stats: dict[str, int]) -> None:
    import redlock_fenced as rf

    rng = random.Random(seed)
    db = open_db(db_path)
    redlock = rf.Redlock.connect(urls, retry=rf.RetryPolicy(attempts=2, base_delay=0.02, jitter=0.02))
    while time.monotonic() < until:
        key = rng.choice(KEYS)
        started = time.monotonic()
        try:
            lock = redlock.acquire(key, TTL, wait=WAIT)
        except rf.LockError:
            stats["failed"] = stats.get("failed", 0) + 1
            continue
        acquired = time.monotonic()
        try:
            if rng.random() < 0.1:
                time.sleep(TTL * 1.5)  # a stalled holder: its write must be refused if stale
            ok = fenced_write(db, key, lock.token, name)
            stats["accepted" if ok else "refused"] = stats.get("accepted" if ok else "refused", 0) + 1
            if ok and rng.random() < 0.3:
                try:
                    lock.extend(TTL)
                except rf.LockError:
                    pass
                else:
                    ok = fenced_write(db, key, lock.token, name)
                    stats["accepted" if ok else "refused"] = (
                        stats.get("accepted" if ok else "refused", 0) + 1
                    )
        finally:
            ended = time.monotonic()
            try:
                lock.release()
            except rf.LockError:
                pass
            out.append((key, lock.token, name, started, acquired, ended))
    redlock.close()


async def async_worker(name: str, redlock: object, db_path: str, until: float, seed: int,
                       out: list[Acq], stats: dict[str, int]) -> None:
    import redlock_fenced as rf

    assert isinstance(redlock, rf.AsyncRedlock)
    rng = random.Random(seed)
    db = open_db(db_path)
    while time.monotonic() < until:
        key = rng.choice(KEYS)
        started = time.monotonic()
        try:
            lock = await redlock.acquire(key, TTL, wait=WAIT)
        except rf.LockError:
            stats["failed"] = stats.get("failed", 0) + 1
            continue
        acquired = time.monotonic()
        try:
            if rng.random() < 0.1:
                await asyncio.sleep(TTL * 1.5)
            ok = fenced_write(db, key, lock.token, name)
            stats["accepted" if ok else "refused"] = stats.get("accepted" if ok else "refused", 0) + 1
        finally:
            ended = time.monotonic()
            try:
                await lock.release()
            except rf.LockError:
                pass
            out.append((key, lock.token, name, started, acquired, ended))


def process_main(kind: str, index: int, urls: list[str], db_path: str, until: float,
                 seed: int, queue: mp.Queue[tuple[list[Acq], dict[str, int]]]) -> None:
    out: list[Acq] = []
    stats: dict[str, int] = {}
    if kind == "sync":
        threads = [
            threading.Thread(target=sync_worker, args=(
                f"sync{index}.{t}", urls, db_path, until, seed * 100 + t, out, stats))
            for t in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        import redlock_fenced as rf

        async def main() -> None:
            async with await rf.AsyncRedlock.connect(
                urls, retry=rf.RetryPolicy(attempts=2, base_delay=0.02, jitter=0.02)
            ) as redlock:
                await asyncio.gather(*[
                    async_worker(f"async{index}.{t}", redlock, db_path, until,
                                 seed * 100 + t, out, stats)
                    for t in range(3)
                ])

        asyncio.run(main())
    queue.put((out, stats))


@dataclass
class Report:
    acquisitions: int = 0
    accepted: int = 0
    refused: int = 0
    failed: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def check(acqs: list[Acq], db_path: str, report: Report) -> None:
    for key in KEYS:
        mine = [a for a in acqs if a[0] == key]
        tokens = [a[1] for a in mine]
        dups = {t for t in tokens if tokens.count(t) > 1}
        if dups:
            report.violations.append(f"{key}: duplicate tokens {sorted(dups)[:5]}")
        # Real-time order: B started after A completed => B.token > A.token.
        by_done = sorted(mine, key=lambda a: a[4])
        done_times = [a[4] for a in by_done]
        prefix_max: list[int] = []
        best = 0
        for a in by_done:
            best = max(best, a[1])
            prefix_max.append(best)
        for b in mine:
            i = bisect.bisect_left(done_times, b[3])
            if i > 0 and prefix_max[i - 1] >= b[1]:
                report.violations.append(
                    f"{key}: token {b[1]} of {b[2]} is not above {prefix_max[i - 1]}, "
                    "handed out before it started")
    db = open_db(db_path)
    issued = {(a[0], a[1]) for a in acqs}
    last: dict[str, int] = {}
    for key, token, worker in db.execute("SELECT key, token, worker FROM accepted ORDER BY seq"):
        if token < last.get(key, 0):
            report.violations.append(f"{key}: stale write accepted (token {token} after {last[key]})")
        last[key] = max(last.get(key, 0), token)
        if (key, token) not in issued:
            report.violations.append(f"{key}: accepted write with unknown token {token} ({worker})")
    db.close()


def chaos(nodes: list[Node], until: float, rng: random.Random, report: Report) -> None:
    """SIGSTOP/SIGCONT and kill -9/restart, at most two nodes down at a time."""
    while time.monotonic() < until - 0.5:
        time.sleep(rng.uniform(0.1, 0.4))
        victims = rng.sample(nodes, rng.choice((1, 1, 2)))
        action = rng.choice(("pause", "kill"))
        for node in victims:
            if action == "pause":
                node.pause()
            else:
                node.kill()
            report.faults[action] = report.faults.get(action, 0) + 1
        time.sleep(rng.uniform(0.2, 0.8))
        for node in victims:
            if action == "pause":
                node.resume()
            else:
                node.start()


def run(duration: float, seed: int = 7, sync_procs: int = 2, async_procs: int = 2) -> Report:
    report = Report()
    rng = random.Random(seed)
    nodes = [Node() for _ in range(5)]
    tmp = tempfile.TemporaryDirectory(prefix="redlock-py-fault-")
    try:
        db_path = os.path.join(tmp.name, "resource.db")
        init_db(db_path)
        urls = [n.url for n in nodes]
        ctx = mp.get_context("spawn")
        queue: mp.Queue[tuple[list[Acq], dict[str, int]]] = ctx.Queue()
        start_at = time.monotonic() + 2.0  # time for the spawned interpreters to start
        until = start_at + duration
        procs = [
            ctx.Process(target=process_main, args=(kind, i, urls, db_path, until, seed + i, queue))
            for i, kind in enumerate(["sync"] * sync_procs + ["async"] * async_procs)
        ]
        for p in procs:
            p.start()
        time.sleep(max(0.0, start_at - time.monotonic()))
        chaos(nodes, until, rng, report)
        acqs: list[Acq] = []
        for _ in procs:
            out, stats = queue.get(timeout=duration + 60)
            acqs.extend(out)
            report.accepted += stats.get("accepted", 0)
            report.refused += stats.get("refused", 0)
            report.failed += stats.get("failed", 0)
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                report.violations.append("a worker process hung")
        report.acquisitions = len(acqs)
        check(acqs, db_path, report)
    finally:
        for n in nodes:
            n.close()
        tmp.cleanup()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    report = run(args.duration, args.seed)
    print(f"acquisitions {report.acquisitions}, writes accepted {report.accepted}, "
          f"stale writes refused {report.refused}, failed attempts {report.failed}, "
          f"faults {report.faults}, violations {len(report.violations)}")
    for v in report.violations[:20]:
        print("VIOLATION:", v)
    return 1 if report.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
