// `make bench-node`: redlock-fenced against node-redlock 5 (npm `redlock`,
// SET NX PX scripts over ioredis, no fencing) and against the Rust client it
// binds, all measured in one run on the same five local nodes (release
// module, release addon).
//
// Prints the figures and the ratios the package's issue asks for:
// - 16 concurrent acquire + release loops (one name per loop, no
//   contention), cycles/s: ours / node-redlock (goal >= 5x) and ours / the
//   Rust client at 16 tasks (goal >= 0.7x);
// - waiting: 8 workers on one name, hold 1 ms, `acquire(name, { wait })`:
//   the share of acquisitions that went to another worker than the
//   previous holder (goal: every hand-off), and min/max acquisitions per
//   worker.
// Rounds are interleaved: the figures of one ratio come from the same
// round; medians of the figures and of the per-round ratios are shown.

import { execFileSync } from "node:child_process";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import Redis from "ioredis";
import NodeRedlock from "redlock";

import { Redlock } from "../index.mjs";
import { startNodes } from "../test/nodes.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const SECS = option("secs", 3);
const ROUNDS = option("rounds", 3);
const LOOPS = 16;
const run = Math.random().toString(16).slice(2, 8);

/** Cycles per second of `loops` concurrent `cycle(i)` loops for `secs`. */
async function timed(loops, secs, cycle) {
  let count = 0;
  const start = performance.now();
  const until = start + secs * 1000;
  await Promise.all(Array.from({ length: loops }, async (_, i) => {
    while (performance.now() < until) {
      await cycle(i);
      count++;
    }
  }));
  return count / ((performance.now() - start) / 1000);
}

async function ours(urls, secs, round) {
  const redlock = await Redlock.connect(urls, { ttl: 10_000 });
  await (await redlock.acquire(`bench-node-${run}-warm`)).release(); // connections warm
  const rate = await timed(LOOPS, secs, async (i) => {
    const lock = await redlock.acquire(`bench-node-${run}-${round}-${i}`);
    await lock.release();
  });
  redlock.close();
  return rate;
}

async function nodeRedlock(urls, secs, round) {
  const clients = urls.map((u) => new Redis(u, { lazyConnect: false }));
  await Promise.all(clients.map((c) => c.ping()));
  const redlock = new NodeRedlock(clients, { retryCount: 10, retryDelay: 200, retryJitter: 200 });
  const rate = await timed(LOOPS, secs, async (i) => {
    const lock = await redlock.acquire([`bench-noderedlock-${run}-${round}-${i}`], 10_000);
    await lock.release();
  });
  await Promise.all(clients.map((c) => c.quit()));
  return rate;
}

function rust(urls, secs) {
  const exe = path.join(ROOT, "target", "release", "examples", "python_baseline");
  const out = execFileSync(exe, [String(LOOPS), String(secs), ...urls], { encoding: "utf8" });
  return Number(out.trim().split(/\s+/).pop());
}

async function waiting(urls, secs, workers = 8) {
  const redlock = await Redlock.connect(urls);
  const name = `bench-wait-${run}`;
  const order = [];
  const until = performance.now() + secs * 1000;
  await Promise.all(Array.from({ length: workers }, async (_, i) => {
    while (performance.now() < until) {
      let lock;
      try {
        lock = await redlock.acquire(name, { ttl: 5000, wait: 5000 });
      } catch {
        continue; // busy after the wait, or an overloaded machine
      }
      order.push(i); // under the lock: the list is the lock order
      await new Promise((r) => setTimeout(r, 1));
      await lock.release().catch(() => undefined);
    }
  }));
  redlock.close();
  let handoffs = 0;
  for (let k = 1; k < order.length; k++) if (order[k] !== order[k - 1]) handoffs++;
  const per = Array.from({ length: workers }, (_, i) => order.filter((w) => w === i).length);
  return { share: handoffs / Math.max(1, order.length - 1), fairness: Math.min(...per) / Math.max(1, ...per),
    total: order.length };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const nodes = await startNodes(5);
try {
  const urls = nodes.map((n) => n.url);
  const figures = { ours: [], nodeRedlock: [], rust: [] };
  for (let r = 0; r < ROUNDS; r++) {
    figures.ours.push(await ours(urls, SECS, r));
    figures.nodeRedlock.push(await nodeRedlock(urls, SECS, r));
    figures.rust.push(rust(urls, SECS));
  }
  const ratio = (a, b) => median(figures[a].map((x, i) => x / figures[b][i]));
  const vsNodeRedlock = ratio("ours", "nodeRedlock");
  const vsRust = ratio("ours", "rust");
  const wait = await waiting(urls, Math.max(SECS, 3));
  const fmt = (x) => Math.round(x).toLocaleString("en-US");
  const row = (name, value, goal, ok) => `| ${name} | ${value} | ${goal} | ${ok ? "met" : "missed"} |`;
  console.log(`Five local nodes (release module), ${ROUNDS} interleaved rounds of ${SECS} s per figure; `
    + `medians of the figures and of the per-round ratios; cpus: ${os.cpus().length}; node ${process.version}`);
  console.log();
  console.log("| measurement (16 concurrent acquire + release loops, one name each) | cycles/s |");
  console.log("|---|---:|");
  console.log(`| redlock-fenced | ${fmt(median(figures.ours))} |`);
  console.log(`| node-redlock 5.0.0-beta.2 (ioredis 5) | ${fmt(median(figures.nodeRedlock))} |`);
  console.log(`| Rust client, 16 tasks | ${fmt(median(figures.rust))} |`);
  console.log();
  console.log("| ratio | value | goal | |");
  console.log("|---|---:|---|---|");
  console.log(row("redlock-fenced / node-redlock", `${vsNodeRedlock.toFixed(1)}x`, ">= 5x", vsNodeRedlock >= 5));
  console.log(row("redlock-fenced / Rust client", `${vsRust.toFixed(2)}x`, ">= 0.7x", vsRust >= 0.7));
  console.log(row(`waiting, 8 workers: hand-offs to another worker (${wait.total} acquisitions)`,
    `${(wait.share * 100).toFixed(1)}%`, "every hand-off", wait.share === 1));
  console.log(row("waiting, 8 workers: min/max acquisitions per worker", wait.fairness.toFixed(2), ">= 0.8",
    wait.fairness >= 0.8));
} finally {
  await Promise.all(nodes.map((n) => n.close()));
}
