"""`make bench-python`: redlock_fenced against pottery (PyPI, Redlock over the
same five nodes with its own API) and against the Rust client it binds, all
measured in one run on the same local nodes (release module).

Prints one Markdown table with the ratios the package's issue asks for:
- sync, 1 thread: cycles/s (acquire + release) vs pottery and vs the Rust
  client at 1 task;
- asyncio, 16 tasks: cycles/s vs pottery's AIORedlock and vs the Rust client
  at 16 tasks;
- waiting: 8 workers, one key, hold 1 ms, `acquire(wait=...)`: share of
  acquisitions that went to another worker than the previous holder, and
  min/max acquisitions per worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tests"))

from nodes import Node  # noqa: E402

import redlock_fenced as rf  # noqa: E402


def timed(secs: float, cycle: Callable[[], None]) -> float:
    done = 0
    start = time.monotonic()
    until = start + secs
    while time.monotonic() < until:
        cycle()
        done += 1
    return done / (time.monotonic() - start)


def ours_sync(urls: list[str], secs: float) -> float:
    with rf.Redlock.connect(urls) as redlock:
        key = f"bench-py-{uuid.uuid4().hex[:8]}"
        redlock.acquire(key, 10).release()  # connections warm

        def cycle() -> None:
            redlock.acquire(key, 10).release()

        return timed(secs, cycle)


def pottery_sync(urls: list[str], secs: float) -> float:
    from pottery import Redlock as PRedlock
    from redis import Redis

    masters = {Redis.from_url(u) for u in urls}
    lock = PRedlock(key=f"bench-pottery-{uuid.uuid4().hex[:8]}", masters=masters,
                    auto_release_time=10)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    cycle()
    return timed(secs, cycle)


async def _ours_async(urls: list[str], secs: float, tasks: int) -> float:
    async with await rf.AsyncRedlock.connect(urls) as redlock:
        count = 0
        run = uuid.uuid4().hex[:8]

        async def worker(i: int) -> None:
            nonlocal count
            key = f"bench-pyaio-{run}-{i}"
            while time.monotonic() < until:
                lock = await redlock.acquire(key, 10)
                await lock.release()
                count += 1

        warm = await redlock.acquire(f"bench-pyaio-{run}-warm", 10)
        await warm.release()
        start = time.monotonic()
        until = start + secs
        await asyncio.gather(*(worker(i) for i in range(tasks)))
        return count / (time.monotonic() - start)


def ours_async(urls: list[str], secs: float, tasks: int) -> float:
    return asyncio.run(_ours_async(urls, secs, tasks))


async def _pottery_async(urls: list[str], secs: float, tasks: int) -> float:
    from pottery import AIORedlock
    from redis.asyncio import Redis as AIORedis

    masters = {AIORedis.from_url(u) for u in urls}
    count = 0
    run = uuid.uuid4().hex[:8]

    async def worker(i: int) -> None:
        nonlocal count
        lock = AIORedlock(key=f"bench-pottery-aio-{run}-{i}", masters=masters,
                          auto_release_time=10)
        while time.monotonic() < until:
            await lock.acquire()
            await lock.release()
            count += 1

    start = time.monotonic()
    until = start + secs
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    rate = count / (time.monotonic() - start)
    for m in masters:
        await m.aclose()
    return rate


def pottery_async(urls: list[str], secs: float, tasks: int) -> float:
    return asyncio.run(_pottery_async(urls, secs, tasks))


def rust(urls: list[str], secs: float, tasks: int) -> float:
    exe = ROOT / "target" / "release" / "examples" / "python_baseline"
    out = subprocess.run([str(exe), str(tasks), str(secs), *urls], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


def waiting(urls: list[str], secs: float, workers: int = 8) -> tuple[float, float, int]:
    """(share of hand-offs to another worker, min/max acquisitions, total)."""
    with rf.Redlock.connect(urls) as redlock:
        key = f"bench-wait-{uuid.uuid4().hex[:8]}"
        order: list[int] = []
        until = time.monotonic() + secs

        def worker(i: int) -> None:
            while time.monotonic() < until:
                try:
                    lock = redlock.acquire(key, 5, wait=5)
                except rf.LockError:
                    continue  # busy after the wait, or an overloaded machine
                order.append(i)  # under the lock: the list is the lock order
                time.sleep(0.001)
                try:
                    lock.release()
                except rf.LockError:
                    pass

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    handoffs = sum(1 for a, b in zip(order, order[1:]) if a != b)
    share = handoffs / max(1, len(order) - 1)
    counts = Counter(order)
    per_worker = [counts.get(i, 0) for i in range(workers)]
    fairness = min(per_worker) / max(1, max(per_worker))
    return share, fairness, len(order)


def main() -> int:
    parser = argparse.ArgumentParser(description="redlock_fenced vs pottery vs the Rust client")
    parser.add_argument("--secs", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (the median is shown)")
    args = parser.parse_args()
    nodes = [Node() for _ in range(5)]
    try:
        urls = [n.url for n in nodes]
        s, r = args.secs, args.rounds
        # Interleaved rounds: every figure of a ratio comes from the same
        # round; the table shows medians of the figures and of the ratios.
        names = ["sync_ours", "sync_pottery", "sync_rust", "aio_ours", "aio_pottery", "aio_rust"]
        figures: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(r):
            figures["sync_ours"].append(ours_sync(urls, s))
            figures["sync_pottery"].append(pottery_sync(urls, s))
            figures["sync_rust"].append(rust(urls, s, 1))
            figures["aio_ours"].append(ours_async(urls, s, 16))
            figures["aio_pottery"].append(pottery_async(urls, s, 16))
            figures["aio_rust"].append(rust(urls, s, 16))

        def ratio(a: str, b: str) -> float:
            return statistics.median(x / y for x, y in zip(figures[a], figures[b]))

        med = {n: statistics.median(v) for n, v in figures.items()}
        sync_ours, sync_pottery, sync_rust = med["sync_ours"], med["sync_pottery"], med["sync_rust"]
        aio_ours, aio_pottery, aio_rust = med["aio_ours"], med["aio_pottery"], med["aio_rust"]
        r_sync_pottery = ratio("sync_ours", "sync_pottery")
        r_sync_rust = ratio("sync_ours", "sync_rust")
        r_aio_pottery = ratio("aio_ours", "aio_pottery")
        r_aio_rust = ratio("aio_ours", "aio_rust")
        share, fairness, total = waiting(urls, max(s, 3.0))
    finally:
        for n in nodes:
            n.close()

    def row(name: str, value: str, target: str, ok: bool) -> str:
        return f"| {name} | {value} | {target} | {'met' if ok else 'missed'} |"

    print(f"Five local nodes (release module), {r} interleaved rounds of {s:g} s per figure; "
          f"medians of the figures and of the per-round ratios; cpus: {os.cpu_count()}")
    print()
    print("| measurement | cycles/s |")
    print("|---|---:|")
    for name, v in [
        ("redlock_fenced sync, 1 thread", sync_ours),
        ("pottery Redlock, 1 thread", sync_pottery),
        ("Rust client, 1 task", sync_rust),
        ("redlock_fenced asyncio, 16 tasks", aio_ours),
        ("pottery AIORedlock, 16 tasks", aio_pottery),
        ("Rust client, 16 tasks", aio_rust),
    ]:
        print(f"| {name} | {v:,.0f} |")
    print()
    print("| ratio | value | target | |")
    print("|---|---:|---|---|")
    print(row("sync 1 thread / pottery", f"{r_sync_pottery:.1f}x", ">= 10x",
              r_sync_pottery >= 10))
    print(row("sync 1 thread / Rust 1 task", f"{r_sync_rust:.2f}x", ">= 0.8x", r_sync_rust >= 0.8))
    print(row("asyncio 16 tasks / pottery", f"{r_aio_pottery:.1f}x", ">= 20x", r_aio_pottery >= 20))
    print(row("asyncio 16 tasks / Rust 16 tasks", f"{r_aio_rust:.2f}x", ">= 0.3x",
              r_aio_rust >= 0.3))
    print(row(f"waiting, 8 workers: hand-offs to another worker ({total} acquisitions)",
              f"{share:.1%}", "every hand-off", share >= 0.999))
    print(row("waiting, 8 workers: min/max acquisitions per worker", f"{fairness:.2f}",
              ">= 0.8", fairness >= 0.8))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
