// AbortSignal: a caller's signal cancels a waiting acquire (and a using()
// that waits) with the signal's reason, and leaves no grant on any node.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Redlock } from "../index.mjs";
import { eventually, heldOn, uniqueKey, useNodes } from "./helpers.mjs";

const env = useNodes(5);

/** The lock's counter on every node (what a grant would have moved). */
async function counters(redlock, name) {
  return (await redlock.inspect(name)).map((v) => v.token);
}

test("aborting a waiting acquire rejects with the signal's reason and leaves no grant", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 10_000 });
  const name = uniqueKey();
  const holder = await redlock.acquire(name);
  const controller = new AbortController();
  const waiting = redlock.acquire(name, { wait: 20_000, signal: controller.signal });
  await new Promise((r) => setTimeout(r, 200));
  const reason = new Error("caller gave up");
  const started = Date.now();
  controller.abort(reason);
  await assert.rejects(waiting, (e) => e === reason);
  assert.ok(Date.now() - started < 1000, "the abort took effect at once");
  const before = await counters(redlock, name);
  // The holder lets go: the aborted waiter must not take the lock then.
  assert.equal(await holder.release(), true);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await heldOn(redlock, name), 0, "a grant was left behind");
  assert.deepEqual(await counters(redlock, name), before, "an aborted waiter moved a counter");
  redlock.close();
});

test("an abort during an acquisition round releases what the round got", async () => {
  // Three frozen nodes keep the round open (two grants, no quorum yet); the
  // abort lands inside it. The frozen nodes get their ACQUIRE once they
  // thaw, with the RELEASE queued behind it: nothing stays held (well before
  // the 10 s lease would free it).
  const redlock = await Redlock.connect(env.urls, { ttl: 10_000, nodeTimeout: 2000 });
  const name = uniqueKey();
  for (const node of env.nodes.slice(0, 3)) node.pause();
  try {
    const controller = new AbortController();
    const attempt = redlock.acquire(name, { signal: controller.signal });
    await new Promise((r) => setTimeout(r, 100));
    controller.abort();
    await assert.rejects(attempt, { name: "AbortError" });
  } finally {
    for (const node of env.nodes.slice(0, 3)) node.resume();
  }
  await eventually(async () => (await heldOn(redlock, name)) === 0, 3000, "every grant to be released");
  redlock.close();
});

test("an already aborted signal rejects before anything is sent", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  await assert.rejects(redlock.acquire(name, { signal: AbortSignal.abort() }), { name: "AbortError" });
  await assert.rejects(redlock.tryAcquire(name, { signal: AbortSignal.abort() }), { name: "AbortError" });
  assert.deepEqual((await redlock.inspect(name)).map((v) => v.state), Array(5).fill("missing"));
  redlock.close();
});

test("AbortSignal.timeout bounds a wait; using() that waits is aborted the same way", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 10_000 });
  const name = uniqueKey();
  const holder = await redlock.acquire(name);
  await assert.rejects(redlock.acquire(name, { wait: 20_000, signal: AbortSignal.timeout(150) }),
    { name: "TimeoutError" });
  let ran = false;
  await assert.rejects(
    redlock.using(name, { wait: 20_000, signal: AbortSignal.timeout(150) }, async () => {
      ran = true;
    }),
    { name: "TimeoutError" });
  assert.equal(ran, false);
  await holder.release();
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await heldOn(redlock, name), 0, "an aborted waiter took the lock");
  redlock.close();
});

test("the caller's signal reaches the routine of using()", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const controller = new AbortController();
  const reason = new Error("shutting down");
  const result = redlock.using(name, { signal: controller.signal }, async (lock, signal) => {
    controller.abort(reason);
    assert.equal(signal.aborted, true);
    assert.equal(signal.reason, reason);
    return lock.token;
  });
  assert.equal(typeof (await result), "bigint");
  assert.equal(await heldOn(redlock, name), 0);
  redlock.close();
});
