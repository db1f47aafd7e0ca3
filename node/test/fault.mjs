// Fault test: worker processes contend through redlock-fenced for a few
// names while nodes are SIGSTOPped, kill -9'd and restarted (without their
// data: tokens then rest on the clock floor); every token is used on a
// fenced Redis resource (a sixth node, `REDLOCK.FENCED`): each holder
// appends its token to the name's log through the name's guard.
//
// Checked afterwards:
// - no token was handed out twice for one name;
// - tokens never go backwards: an acquisition that started after another
//   one of the same name had completed got a higher token;
// - the resource accepted no stale write: each name's log holds
//   non-decreasing tokens, each from a real acquisition of that name.
//
// `node test/fault.mjs --duration 60 --seed 7` (`make node-fault`);
// fault.test.mjs runs a short form.

import { fork } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { command, Node, startNodes } from "./nodes.mjs";

export const NAMES = ["fault-a", "fault-b"];
export const TTL = 500;
const HERE = path.dirname(fileURLToPath(import.meta.url));

/** A small seeded generator (mulberry32), so one seed gives one fault schedule. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The items of a RESP array of bulk strings (LRANGE's reply). */
function bulkItems(reply) {
  const lines = reply.split("\r\n");
  const items = [];
  for (let i = 1; i < lines.length; i++) {
    if (lines[i].startsWith("$") && lines[i] !== "$-1") {
      items.push(lines[i + 1]);
      i++;
    }
  }
  return items;
}

/** The guard and log keys of a name on the resource (one hash tag: one slot). */
export const guardOf = (name) => `{${name}}:fence`;
export const logOf = (name) => `{${name}}:log`;

/**
 * The checks. `acqs` are [name, token, worker, started, acquired, ended]
 * (ms on the shared monotonic clock; tokens as strings); `logs` maps a name
 * to its accepted tokens in the resource's order.
 */
export function check(acqs, logs) {
  const violations = [];
  for (const name of NAMES) {
    const mine = acqs.filter((a) => a[0] === name).map((a) => ({ ...a, token: BigInt(a[1]) }));
    const seen = new Map();
    for (const a of mine) seen.set(a.token, (seen.get(a.token) ?? 0) + 1);
    const dups = [...seen].filter(([, n]) => n > 1).map(([t]) => t);
    if (dups.length > 0) violations.push(`${name}: duplicate tokens ${dups.slice(0, 5).join(", ")}`);
    // Real-time order: B started after A had its lock => B.token > A.token.
    const byDone = [...mine].sort((x, y) => x[4] - y[4]);
    let best = -1n;
    const prefix = byDone.map((a) => (best = a.token > best ? a.token : best));
    for (const b of mine) {
      let lo = 0;
      let hi = byDone.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (byDone[mid][4] < b[3]) lo = mid + 1;
        else hi = mid;
      }
      if (lo > 0 && prefix[lo - 1] >= b.token) {
        violations.push(`${name}: token ${b.token} of ${b[2]} is not above ${prefix[lo - 1]}, handed out before it started`);
      }
    }
    const issued = new Set(mine.map((a) => a.token));
    let last = -1n;
    for (const text of logs[name] ?? []) {
      const token = BigInt(text);
      if (token < last) violations.push(`${name}: stale write accepted (token ${token} after ${last})`);
      if (token > last) last = token;
      if (!issued.has(token)) violations.push(`${name}: accepted write with unknown token ${token}`);
    }
  }
  return violations;
}

/** SIGSTOP/SIGCONT and kill -9/restart, at most two nodes down at a time. */
async function chaos(nodes, until, random, faults) {
  while (Date.now() < until - 500) {
    await sleep(100 + random() * 300);
    const count = random() < 0.67 ? 1 : 2;
    const victims = [...nodes].sort(() => random() - 0.5).slice(0, count);
    const action = random() < 0.5 ? "pause" : "kill";
    for (const node of victims) {
      if (action === "pause") node.pause();
      else await node.kill();
      faults[action] = (faults[action] ?? 0) + 1;
    }
    await sleep(200 + random() * 600);
    for (const node of victims) {
      if (action === "pause") node.resume();
      else await node.start();
    }
  }
}

/** One run: `processes` workers of `loops` concurrent loops each, for `duration` seconds. */
export async function run({ duration, seed = 7, processes = 3, loops = 3 }) {
  const random = rng(seed);
  const nodes = await startNodes(5);
  const resource = await Node.start({ extra: ["--appendonly", "yes", "--appendfsync", "always"] });
  const report = { acquisitions: 0, accepted: 0, refused: 0, failed: 0, faults: {}, violations: [] };
  const workers = [];
  try {
    const startAt = Date.now() + 1500; // time for the workers to start
    const until = startAt + duration * 1000;
    const results = [];
    for (let i = 0; i < processes; i++) {
      const child = fork(path.join(HERE, "fault-worker.mjs"), [JSON.stringify({
        urls: nodes.map((n) => n.url), resource: resource.url, names: NAMES, ttl: TTL,
        startAt, until, seed: seed * 100 + i, loops, worker: `w${i}`,
      })], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
      workers.push(child);
      results.push(new Promise((resolve, reject) => {
        child.once("message", resolve);
        child.once("exit", (code) => (code === 0 ? undefined : reject(new Error(`worker ${i} exited with ${code}`))));
      }));
    }
    await sleep(Math.max(0, startAt - Date.now()));
    await chaos(nodes, until, random, report.faults);
    const hang = setTimeout(() => workers.forEach((w) => w.kill("SIGKILL")), duration * 1000 + 60_000);
    const outs = await Promise.all(results);
    clearTimeout(hang);
    const acqs = outs.flatMap((o) => o.acqs);
    for (const o of outs) {
      report.accepted += o.stats.accepted;
      report.refused += o.stats.refused;
      report.failed += o.stats.failed;
    }
    report.acquisitions = acqs.length;
    const logs = {};
    for (const name of NAMES) {
      logs[name] = bulkItems(await command(resource.port, ["LRANGE", logOf(name), "0", "-1"], 5000));
    }
    report.violations = check(acqs, logs);
    report.logged = Object.values(logs).reduce((n, l) => n + l.length, 0);
  } finally {
    for (const w of workers) if (w.exitCode === null) w.kill("SIGKILL");
    await Promise.all([...nodes, resource].map((n) => n.close()));
  }
  return report;
}

async function main() {
  const args = process.argv.slice(2);
  const option = (name, fallback) => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 ? Number(args[i + 1]) : fallback;
  };
  const report = await run({ duration: option("duration", 60), seed: option("seed", 7) });
  console.log(`acquisitions ${report.acquisitions}, writes accepted ${report.accepted} (logged ${report.logged}), `
    + `stale writes refused ${report.refused}, failed attempts ${report.failed}, `
    + `faults ${JSON.stringify(report.faults)}, violations ${report.violations.length}`);
  for (const v of report.violations.slice(0, 20)) console.log("VIOLATION:", v);
  process.exitCode = report.violations.length > 0 ? 1 : 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await main();
}
