// metrics(): the Rust client's counters and histograms after real
// operations on five nodes. The counts are global to the process, so each
// test compares two snapshots.

import assert from "node:assert/strict";
import { test } from "node:test";

import { LockLostError, Redlock, metrics } from "../index.mjs";
import { eventually, uniqueKey, useNodes } from "./helpers.mjs";

const env = useNodes(5);

/** The value of the series of `name` with exactly `labels` (0 if none). */
function count(snapshot, name, labels = {}) {
  const want = JSON.stringify(Object.entries(labels).sort());
  const series = (snapshot[name] ?? []).find((s) => JSON.stringify(Object.entries(s.labels).sort()) === want);
  return series ? series.value : 0;
}

function delta(before, after, name, labels) {
  return count(after, name, labels) - count(before, name, labels);
}

test("metrics() counts acquisitions, extensions, holds and a lost lock", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const before = metrics();
  const lock = await redlock.acquire(name);
  assert.equal(await redlock.tryAcquire(name), null);
  await lock.extend(5000);
  assert.equal(await lock.release(), true);
  const short = await redlock.acquire(`${name}-short`, { ttl: 100 });
  await new Promise((resolve) => setTimeout(resolve, 250));
  const lost = await short.extend(5000).then(() => null, (e) => e);
  assert.ok(lost instanceof LockLostError, String(lost));
  const after = metrics();

  assert.equal(delta(before, after, "redlock_acquisitions_total", { outcome: "granted" }), 2);
  assert.equal(delta(before, after, "redlock_acquisitions_total", { outcome: "busy" }), 1);
  assert.equal(delta(before, after, "redlock_acquire_seconds", { outcome: "granted" }), 2);
  assert.equal(delta(before, after, "redlock_extensions_total", { outcome: "ok" }), 1);
  assert.equal(delta(before, after, "redlock_extensions_total", { outcome: "failed" }), 1);
  assert.equal(delta(before, after, "redlock_locks_lost_total"), 1);
  assert.equal(delta(before, after, "redlock_hold_seconds"), 1);

  const [hold] = after.redlock_hold_seconds;
  const bounds = hold.buckets.map(([le]) => le);
  assert.deepEqual(bounds, [...bounds].sort((a, b) => a - b));
  assert.equal(bounds.at(-1), Infinity);
  assert.equal(hold.buckets.at(-1)[1], hold.value);
  assert.ok(hold.sum > 0);
  for (const s of after.redlock_acquisitions_total) assert.equal(s.buckets, null);
  for (const series of Object.values(after)) {
    for (const s of series) assert.ok(!("lock" in s.labels), JSON.stringify(s));
  }
  redlock.close();
});

test("metrics() names a frozen node in redlock_node_errors_total", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000, nodeTimeout: 200 });
  const before = metrics();
  const frozen = env.nodes[4];
  frozen.pause();
  try {
    const lock = await redlock.acquire(uniqueKey());
    await lock.release();
    await eventually(
      () => delta(before, metrics(), "redlock_node_errors_total", { node: frozen.url, kind: "timeout" }) >= 1,
      10_000,
      "a timeout of the frozen node",
    );
  } finally {
    frozen.resume();
  }
  const after = metrics();
  for (const node of env.nodes.slice(0, 4)) {
    for (const kind of ["timeout", "connection", "not_connected"]) {
      assert.equal(delta(before, after, "redlock_node_errors_total", { node: node.url, kind }), 0);
    }
  }
  redlock.close();
});
