// using(): the lock is extended in the background while the routine runs,
// released when it settles; when the lock is lost (a node pair of three
// SIGSTOPped past the lease), the routine's signal aborts with a
// LockLostError and the call rejects with it even if the routine ignores
// the signal.

import assert from "node:assert/strict";
import { test } from "node:test";

import { HeldLock, LockLostError, LockStateError, Redlock } from "../index.mjs";
import { heldOn, uniqueKey, useNodes } from "./helpers.mjs";

const env = useNodes(3);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("the routine outlives its ttl: the lock stays held, then is released", async () => {
  const redlock = await Redlock.connect(env.urls);
  const name = uniqueKey();
  const value = await redlock.using(name, { ttl: 300 }, async (lock, signal) => {
    assert.ok(lock instanceof HeldLock);
    assert.equal(lock.name, name);
    assert.equal(typeof lock.token, "bigint");
    await sleep(900);
    assert.equal(signal.aborted, false);
    assert.equal(lock.lost, false);
    assert.ok(lock.validity > 0);
    assert.equal(await heldOn(redlock, name), 3);
    // Nobody else gets it meanwhile.
    assert.equal(await redlock.tryAcquire(name, { ttl: 300 }), null);
    return "done";
  });
  assert.equal(value, "done");
  assert.equal(await heldOn(redlock, name), 0);
  redlock.close();
});

test("the routine's error rejects the call, and the lock is released", async () => {
  const redlock = await Redlock.connect(env.urls);
  const name = uniqueKey();
  const boom = new Error("routine failed");
  let kept;
  await assert.rejects(redlock.using(name, { ttl: 5000 }, async (lock) => {
    kept = lock;
    throw boom;
  }), (e) => e === boom);
  assert.equal(await heldOn(redlock, name), 0);
  // The routine's lock is unusable afterwards.
  await assert.rejects(kept.fenced("redis://127.0.0.1:1", "g", "GET", "k"), LockStateError);
  redlock.close();
});

test("a lost lock aborts the routine's signal and rejects the call even if the routine ignores it", async () => {
  const redlock = await Redlock.connect(env.urls, { nodeTimeout: 50 });
  const name = uniqueKey();
  let seen;
  let finished = false;
  const started = Date.now();
  const call = redlock.using(name, { ttl: 600 }, async (lock, signal) => {
    seen = { lock, signal };
    env.nodes[0].pause();
    env.nodes[1].pause();
    await sleep(3000); // ignores the signal
    finished = true;
    return "too late";
  });
  const err = await call.then(() => null, (e) => e);
  const after = Date.now() - started;
  assert.ok(err instanceof LockLostError, String(err));
  assert.equal(err.lock, name);
  assert.equal(err.token, seen.lock.token);
  assert.equal(seen.signal.aborted, true);
  assert.equal(seen.signal.reason, err);
  assert.equal(seen.lock.lost, true);
  assert.equal(seen.lock.validity, 0);
  // Rejected at the loss (within about the lease), not when the routine ended.
  assert.equal(finished, false);
  assert.ok(after < 2500, `rejected after ${after} ms`);
  env.nodes[0].resume();
  env.nodes[1].resume();
  redlock.close();
});

test("a routine that watches its signal stops on the loss; the call rejects with LockLostError", async () => {
  const redlock = await Redlock.connect(env.urls, { nodeTimeout: 50 });
  const name = uniqueKey();
  const steps = [];
  const call = redlock.using(name, { ttl: 600 }, async (_lock, signal) => {
    env.nodes[1].pause();
    env.nodes[2].pause();
    while (!signal.aborted) {
      steps.push(Date.now());
      await sleep(50);
    }
    throw signal.reason;
  });
  await assert.rejects(call, LockLostError);
  assert.ok(steps.length > 0);
  env.nodes[1].resume();
  env.nodes[2].resume();
  redlock.close();
});
