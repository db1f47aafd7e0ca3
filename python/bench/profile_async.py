"""Where the CPU of one asyncio acquire + release cycle goes.

One run of TASKS asyncio tasks (one key each, as `bench_python.py`'s asyncio
figure) on five local nodes; per cycle it prints the CPU time of the event
loop's thread (Python), of the Rust runtime's threads (`redlock-fenced`) and
of the five nodes, and the nodes' write system calls (how well commands are
batched: the fewer writes per cycle, the more commands per write).

    REDLOCK_MODULE=target/release/libredlock.so target/pyvenv/bin/python \\
        python/bench/profile_async.py [--secs S] [--tasks N] [--rust] [--uvloop] \\
        [--profile cprofile|pyinstrument] [--cycles N]

`--rust` measures the Rust client alone the same way
(`bench/examples/python_baseline.rs`, release build) on the same nodes.
`--profile` prints a profile of the event loop's thread (cProfile from the
standard library, or pyinstrument from PyPI). `--cycles N` stops after N
cycles: run under `valgrind --tool=callgrind --separate-threads=yes` twice
with two values of N, and the difference of the instruction counts divided
by the difference of N is the instructions per cycle of each thread, a
figure a loaded machine does not move (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tests"))

from nodes import Node  # noqa: E402

import redlock_fenced as rf  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def writes(pid: int) -> int:
    """Write-like system calls of a process so far (`syscw` of /proc/PID/io)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            name, value = line.split(":")
            if name == "syscw":
                return int(value)
    raise RuntimeError(f"no syscw in /proc/{pid}/io")


def thread_cpu(pid: int, name_prefix: str | None = None) -> float:
    """CPU seconds (user + system) of a process's threads, or of those whose
    name starts with `name_prefix`."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name_prefix is not None and not name.startswith(name_prefix):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


async def run(
    urls: list[str], secs: float, tasks: int, cycles: int | None
) -> tuple[int, float, float]:
    """(cycles, seconds, CPU seconds of this thread) of one run."""
    async with await rf.AsyncRedlock.connect(urls) as redlock:
        count = 0
        run_id = uuid.uuid4().hex[:8]

        async def worker(i: int) -> None:
            nonlocal count
            key = f"profile-{run_id}-{i}"
            while time.monotonic() < until and (cycles is None or count < cycles):
                lock = await redlock.acquire(key, 10)
                await lock.release()
                count += 1

        warm = await redlock.acquire(f"profile-{run_id}-warm", 10)
        await warm.release()
        loop_cpu = time.thread_time()
        start = time.monotonic()
        until = start + secs
        await asyncio.gather(*(worker(i) for i in range(tasks)))
        return count, time.monotonic() - start, time.thread_time() - loop_cpu


def rust_client(urls: list[str], pids: list[int], tasks: int, secs: float) -> None:
    """The Rust client alone on the same nodes: cycles/s and CPU per cycle."""
    exe = ROOT / "target" / "release" / "examples" / "python_baseline"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    nodes_cpu = sum(thread_cpu(p) for p in pids)
    nodes_writes = sum(writes(p) for p in pids)
    out = subprocess.run([str(exe), str(tasks), str(secs), *urls], check=True,
                         capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rate = float(out.split()[-1])
    per = 1e6 / max(rate * secs, 1)
    client = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    nodes_cpu = sum(thread_cpu(p) for p in pids) - nodes_cpu
    nodes_writes = sum(writes(p) for p in pids) - nodes_writes
    print(f"Rust client, {tasks} tasks: {rate:,.0f} cycles/s; CPU per cycle: client "
          f"{client * per:.1f} us, five nodes {nodes_cpu * per:.1f} us; the nodes' writes per "
          f"cycle {nodes_writes * per / 1e6:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--secs", type=float, default=5.0)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--cycles", type=int, default=None,
                        help="stop after this many cycles (instruction counts under callgrind)")
    parser.add_argument("--profile", choices=["none", "pyinstrument", "cprofile"], default="none")
    parser.add_argument("--rust", action="store_true", help="also measure the Rust client alone")
    parser.add_argument("--uvloop", action="store_true",
                        help="run on uvloop's event loop (PyPI uvloop) instead of asyncio's")
    args = parser.parse_args()
    nodes = [Node() for _ in range(5)]
    try:
        urls = [n.url for n in nodes]
        pids = [n.proc.pid for n in nodes if n.proc is not None]
        runtime_cpu = thread_cpu(os.getpid(), "redlock-fenced")
        nodes_cpu = sum(thread_cpu(p) for p in pids)
        nodes_writes = sum(writes(p) for p in pids)
        profiler: Any = None
        if args.profile == "pyinstrument":
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0002, async_mode="disabled")
            profiler.start()
        elif args.profile == "cprofile":
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        work = run(urls, args.secs, args.tasks, args.cycles)
        if args.uvloop:
            import uvloop

            count, wall, loop_cpu = uvloop.run(work)
        else:
            count, wall, loop_cpu = asyncio.run(work)
        if args.profile == "pyinstrument":
            profiler.stop()
        elif args.profile == "cprofile":
            profiler.disable()
        runtime_cpu = thread_cpu(os.getpid(), "redlock-fenced") - runtime_cpu
        nodes_cpu = sum(thread_cpu(p) for p in pids) - nodes_cpu
        nodes_writes = sum(writes(p) for p in pids) - nodes_writes
        if args.rust:
            rust_client(urls, pids, args.tasks, args.secs)
    finally:
        for n in nodes:
            n.close()
    per = 1e6 / max(count, 1)
    print(f"redlock_fenced asyncio{' (uvloop)' if args.uvloop else ''}, {args.tasks} tasks: "
          f"{count / wall:,.0f} cycles/s; CPU per cycle: event loop thread {loop_cpu * per:.1f} us, "
          f"Rust runtime threads {runtime_cpu * per:.1f} us, five nodes {nodes_cpu * per:.1f} us; "
          f"the nodes' writes per cycle {nodes_writes / max(count, 1):.2f} "
          f"(cpus: {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    if args.profile == "pyinstrument":
        print(profiler.output_text(unicode=False, color=False, show_all=True))
    elif args.profile == "cprofile":
        import pstats

        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
