// The core API on five real nodes: acquire, tryAcquire, wait, extend,
// release, Symbol.asyncDispose, detach/releaseOwner, inspect, close.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ConfigError, Lock, LockBusyError, LockStateError, Redlock } from "../index.mjs";
import { eventually, heldOn, uniqueKey, useNodes } from "./helpers.mjs";

const env = useNodes(5);

test("acquire gives a bigint token, a validity in ms and the name; release frees every node", async () => {
  const redlock = await Redlock.connect(env.urls);
  assert.equal(redlock.quorum, 3);
  assert.deepEqual(redlock.nodes, env.nodes.map((n) => n.addr));
  const name = uniqueKey();
  const lock = await redlock.acquire(name, { ttl: 5000 });
  assert.ok(lock instanceof Lock);
  assert.equal(lock.name, name);
  assert.equal(typeof lock.token, "bigint");
  assert.ok(lock.validity > 4000 && lock.validity < 5000, `validity ${lock.validity}`);
  assert.equal(lock.state, "held");
  assert.equal(await heldOn(redlock, name), 5);
  assert.equal(await lock.release(), true);
  assert.equal(lock.state, "released");
  assert.equal(lock.validity, 0);
  assert.equal(await heldOn(redlock, name), 0);
  // Tokens only grow.
  const next = await redlock.acquire(name, { ttl: 5000 });
  assert.ok(next.token > lock.token);
  await next.release();
  redlock.close();
});

test("a busy lock: tryAcquire is null, acquire rejects with LockBusyError after its retries", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000, retry: { attempts: 2, baseDelay: 10, jitter: 10 } });
  const name = uniqueKey();
  const lock = await redlock.acquire(name);
  assert.equal(await redlock.tryAcquire(name), null);
  const busy = await redlock.acquire(name).then(() => null, (e) => e);
  assert.ok(busy instanceof LockBusyError, String(busy));
  assert.equal(busy.transient, true);
  assert.equal(busy.nodes, 5);
  assert.ok(busy.holders >= 3);
  await lock.release();
  const free = await redlock.tryAcquire(name);
  assert.ok(free instanceof Lock);
  await free.release();
  redlock.close();
});

test("a waiting acquire is handed the lock when the holder releases", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const first = await redlock.acquire(name);
  const started = Date.now();
  const waiting = redlock.acquire(name, { wait: 10_000 });
  setTimeout(() => void first.release(), 300);
  const second = await waiting;
  const waited = Date.now() - started;
  assert.ok(waited >= 250 && waited < 5000, `waited ${waited} ms`);
  assert.ok(second.token > first.token);
  await second.release();
  // A wait that runs out is LockBusyError.
  const holder = await redlock.acquire(name);
  await assert.rejects(redlock.acquire(name, { wait: 200 }), LockBusyError);
  await holder.release();
  redlock.close();
});

test("extend moves the lease; a lock whose lease ran out is not revived", async () => {
  const redlock = await Redlock.connect(env.urls);
  const name = uniqueKey();
  const lock = await redlock.acquire(name, { ttl: 300 });
  await lock.extend(5000);
  assert.ok(lock.validity > 4000, `validity ${lock.validity}`);
  await new Promise((r) => setTimeout(r, 400));
  assert.equal(await heldOn(redlock, name), 5, "still held past the first ttl");
  await lock.release();

  const short = await redlock.acquire(name, { ttl: 100 });
  await eventually(async () => (await heldOn(redlock, name)) === 0, 3000, "the lease to run out");
  const lost = await short.extend(1000).then(() => null, (e) => e);
  assert.equal(lost?.name, "LockLostError");
  assert.equal(lost.lock, name);
  assert.equal(lost.token, short.token);
  assert.equal(short.validity, 0);
  assert.equal(await short.release(), false);
  redlock.close();
});

test("Symbol.asyncDispose releases (what `await using` calls), and is a no-op once released", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const lock = await redlock.acquire(name);
  await lock[Symbol.asyncDispose]();
  assert.equal(lock.state, "released");
  assert.equal(await heldOn(redlock, name), 0);
  await lock[Symbol.asyncDispose]();
  await redlock[Symbol.asyncDispose]();
  assert.equal(redlock.closed, true);
});

test("detach hands over the owner id; releaseOwner frees the lock with it", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const lock = await redlock.acquire(name);
  const owner = lock.detach();
  assert.equal(owner.length, 36);
  assert.equal(lock.state, "detached");
  assert.ok(!JSON.stringify(lock).includes(owner));
  await assert.rejects(lock.release(), LockStateError);
  assert.equal(await heldOn(redlock, name), 5);
  assert.equal(await redlock.releaseOwner(name, owner), true);
  assert.equal(await heldOn(redlock, name), 0);
  assert.equal(await redlock.releaseOwner(name, owner), false);
  redlock.close();
});

test("a closed client refuses calls with LockStateError; its locks can still be released", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const lock = await redlock.acquire(uniqueKey());
  redlock.close();
  await assert.rejects(redlock.acquire(uniqueKey()), LockStateError);
  assert.equal(await lock.release(), true);
});

test("the ttl comes from the call or the client; none at all is a ConfigError naming ttl", async () => {
  const redlock = await Redlock.connect(env.urls);
  const err = await redlock.acquire(uniqueKey()).then(() => null, (e) => e);
  assert.ok(err instanceof ConfigError);
  assert.equal(err.option, "ttl");
  redlock.close();
});

test("concurrent acquisitions of one name: one winner at a time, tokens all distinct", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const tokens = [];
  let inside = 0;
  await Promise.all(Array.from({ length: 6 }, async () => {
    for (let i = 0; i < 3; i++) {
      const lock = await redlock.acquire(name, { wait: 10_000 });
      inside++;
      assert.equal(inside, 1, "two holders at once");
      tokens.push(lock.token);
      await new Promise((r) => setTimeout(r, 2));
      inside--;
      await lock.release();
    }
  }));
  assert.equal(new Set(tokens).size, 18);
  redlock.close();
});
