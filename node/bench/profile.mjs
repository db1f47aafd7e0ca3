// Where the CPU of one acquire + release cycle goes, for the package and
// for the Rust client it binds (the benchmark's throughput workload: LOOPS
// concurrent loops, one name each, on five local nodes).
//
//   REDLOCK_MODULE=../target/release/libredlock.so node bench/profile.mjs \
//       [--secs S] [--loops N] [--rust] [--node-redlock] [--cycles N]
//
// Per cycle it prints the CPU time of the event loop's thread, of the
// addon's runtime threads (`redlock-fenced`), of the process's other
// threads (V8's, libuv's), of the five nodes, and the nodes' write system
// calls (how well commands are batched: the fewer writes per cycle, the more
// commands per write). `--rust` measures the Rust client alone the same way
// (`bench/examples/python_baseline.rs`, release build: its whole process),
// `--node-redlock` node-redlock 5 in this process. `--cycles N` stops the
// package's loops after about N cycles (a fixed amount of work, e.g. under
// `perf record -g`). The figures come from /proc (clock ticks of 10 ms): run
// a few seconds at least.

import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Redlock } from "../index.mjs";
import { startNodes } from "../test/nodes.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const TICK = 100; // USER_HZ: clock ticks per second in /proc/*/stat on Linux
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const flag = (name) => args.includes(`--${name}`);
const SECS = option("secs", 5);
const LOOPS = option("loops", 16);
const CYCLES = option("cycles", Infinity);
const run = Math.random().toString(16).slice(2, 8);

/** CPU seconds (user + system) of one thread or process from its stat file. */
function statCpu(file) {
  let stat;
  try {
    stat = readFileSync(file, "utf8");
  } catch {
    return { name: "", cpu: 0 };
  }
  const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { name, cpu: (Number(fields[11]) + Number(fields[12])) / TICK };
}

/** This process's CPU by group: the main thread, the runtime's, the rest. */
function ownCpu() {
  const out = { main: 0, runtime: 0, other: 0 };
  for (const tid of readdirSync("/proc/self/task")) {
    const { name, cpu } = statCpu(`/proc/self/task/${tid}/stat`);
    if (Number(tid) === process.pid) out.main += cpu;
    else if (name.startsWith("redlock-fenced")) out.runtime += cpu;
    else out.other += cpu;
  }
  return out;
}

/** Write-like system calls of a process so far (`syscw` of /proc/PID/io). */
function writes(pid) {
  const line = readFileSync(`/proc/${pid}/io`, "utf8").split("\n").find((l) => l.startsWith("syscw:"));
  return Number(line.split(":")[1]);
}

function nodesNow(pids) {
  return {
    cpu: pids.reduce((s, p) => s + statCpu(`/proc/${p}/stat`).cpu, 0),
    writes: pids.reduce((s, p) => s + writes(p), 0),
  };
}

async function loops(cycle) {
  let count = 0;
  const start = performance.now();
  const until = start + SECS * 1000;
  await Promise.all(Array.from({ length: LOOPS }, async (_, i) => {
    while (performance.now() < until && count < CYCLES) {
      await cycle(i);
      count++;
    }
  }));
  return { count, wall: (performance.now() - start) / 1000 };
}

const us = (seconds, count) => `${((seconds * 1e6) / Math.max(count, 1)).toFixed(1)} us`;

async function profile(label, pids, workload) {
  const cpu0 = ownCpu();
  const nodes0 = nodesNow(pids);
  const { count, wall } = await workload();
  const cpu1 = ownCpu();
  const nodes1 = nodesNow(pids);
  console.log(`${label}, ${LOOPS} loops: ${Math.round(count / wall).toLocaleString("en-US")} cycles/s; `
    + `CPU per cycle: event loop thread ${us(cpu1.main - cpu0.main, count)}, `
    + `runtime threads ${us(cpu1.runtime - cpu0.runtime, count)}, `
    + `other threads ${us(cpu1.other - cpu0.other, count)}, `
    + `five nodes ${us(nodes1.cpu - nodes0.cpu, count)}; `
    + `the nodes' writes per cycle ${((nodes1.writes - nodes0.writes) / Math.max(count, 1)).toFixed(2)}`);
}

function rust(urls, pids) {
  const exe = path.join(ROOT, "target", "release", "examples", "python_baseline");
  const nodes0 = nodesNow(pids);
  // `times` prints the shell's and then its children's user and system time.
  const out = execFileSync("sh", ["-c", '"$0" "$@"; times', exe, String(LOOPS), String(SECS), ...urls],
    { encoding: "utf8" });
  const nodes1 = nodesNow(pids);
  const rate = Number(out.match(/cycles_per_sec ([\d.]+)/)[1]);
  const [, um, us_, sm, ss] = out.trim().split("\n").pop().match(/(\d+)m([\d.]+)s (\d+)m([\d.]+)s/);
  const client = Number(um) * 60 + Number(us_) + Number(sm) * 60 + Number(ss);
  const count = rate * SECS;
  console.log(`Rust client, ${LOOPS} tasks: ${Math.round(rate).toLocaleString("en-US")} cycles/s; `
    + `CPU per cycle: client process ${us(client, count)}, five nodes ${us(nodes1.cpu - nodes0.cpu, count)}; `
    + `the nodes' writes per cycle ${((nodes1.writes - nodes0.writes) / Math.max(count, 1)).toFixed(2)}`);
}

const nodes = await startNodes(5);
try {
  const urls = nodes.map((n) => n.url);
  const pids = nodes.map((n) => n.proc.pid);
  const redlock = await Redlock.connect(urls, { ttl: 10_000 });
  await (await redlock.acquire(`profile-${run}-warm`)).release();
  await profile("redlock-fenced", pids, () => loops(async (i) => {
    const lock = await redlock.acquire(`profile-${run}-${i}`);
    await lock.release();
  }));
  redlock.close();
  if (flag("node-redlock")) {
    const { default: Redis } = await import("ioredis");
    const { default: NodeRedlock } = await import("redlock");
    const clients = urls.map((u) => new Redis(u));
    await Promise.all(clients.map((c) => c.ping()));
    const nr = new NodeRedlock(clients, { retryCount: 10, retryDelay: 200, retryJitter: 200 });
    await profile("node-redlock", pids, () => loops(async (i) => {
      const lock = await nr.acquire([`profile-nr-${run}-${i}`], 10_000);
      await lock.release();
    }));
    await Promise.all(clients.map((c) => c.quit()));
  }
  if (flag("rust")) rust(urls, pids);
  console.log(`(cpus: ${os.cpus().length}, load ${os.loadavg()[0].toFixed(1)}, node ${process.version})`);
} finally {
  await Promise.all(nodes.map((n) => n.close()));
}
