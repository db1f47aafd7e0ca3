// Fenced writes to a Redis resource (a sixth node, not a lock member):
// lock.fenced, lock.fencedTransaction, announce, StaleTokenError with
// guard and highest, ResourceError.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { LockLostError, LockStateError, Redlock, ResourceError, StaleTokenError } from "../index.mjs";
import { command, Node } from "./nodes.mjs";
import { uniqueKey, useNodes } from "./helpers.mjs";

const env = useNodes(5);
let resource;
before(async () => {
  resource = await Node.start();
});
after(async () => {
  await resource.close();
});

const tagged = (name) => ({ guard: `{${name}}:fence`, state: `{${name}}` });

test("a fenced write runs with the current token and is refused with an older one", async () => {
  const redlock = await Redlock.connect(env.urls);
  const name = uniqueKey();
  const { guard, state } = tagged(name);
  const old = await redlock.acquire(name, { ttl: 200 });
  assert.equal(await old.fenced(resource.url, guard, "HSET", state, "status", "open"), 1);
  await new Promise((r) => setTimeout(r, 300)); // its holder stalls past the lease
  const fresh = await redlock.acquire(name, { ttl: 5000 });
  assert.equal(await fresh.announce(resource.url, guard), fresh.token);
  assert.equal(await fresh.fenced(resource.url, guard, "HSET", state, "status", "paid"), 0);
  const stale = await old.fenced(resource.url, guard, "HSET", state, "status", "cancelled").then(() => null, (e) => e);
  assert.ok(stale instanceof StaleTokenError, String(stale));
  assert.ok(stale instanceof LockLostError);
  assert.equal(stale.lock, name);
  assert.equal(stale.token, old.token);
  assert.equal(stale.guard, guard);
  assert.equal(stale.highest, fresh.token);
  assert.equal(await fresh.fenced(resource.url, guard, "HGET", state, "status"), "paid");
  assert.match(await command(resource.port, ["HGET", state, "status"]), /paid/);
  await fresh.release();
  assert.equal(await old.release(), false);
  await assert.rejects(fresh.fenced(resource.url, guard, "GET", state), LockStateError);
  redlock.close();
});

test("replies convert like ioredis's: numbers, strings, null, arrays, Buffers, bigints", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const { guard, state } = tagged(name);
  const lock = await redlock.acquire(name);
  const url = resource.url;
  assert.equal(await lock.fenced(url, guard, "SET", state, "v"), "OK");
  assert.equal(await lock.fenced(url, guard, "GET", state), "v");
  assert.equal(await lock.fenced(url, guard, "GET", `${state}:none`), null);
  assert.equal(await lock.fenced(url, guard, "INCRBY", `${state}:n`, 9007199254740993n), 9007199254740993n);
  assert.equal(await lock.fenced(url, guard, "INCRBY", `${state}:m`, 5), 5);
  assert.deepEqual(await lock.fenced(url, guard, "RPUSH", `${state}:l`, "a", Buffer.from("b")), 2);
  assert.deepEqual(await lock.fenced(url, guard, "LRANGE", `${state}:l`, 0, -1), ["a", "b"]);
  await lock.fenced(url, guard, "SET", `${state}:bin`, Buffer.from([0xff, 0x00, 0xfe]));
  assert.deepEqual(await lock.fenced(url, guard, "GET", `${state}:bin`), Buffer.from([0xff, 0x00, 0xfe]));
  await lock.release();
  redlock.close();
});

test("fencedTransaction runs every command in one MULTI/EXEC; a stale token runs none", async () => {
  const redlock = await Redlock.connect(env.urls);
  const name = uniqueKey();
  const { guard, state } = tagged(name);
  const old = await redlock.acquire(name, { ttl: 200 });
  await new Promise((r) => setTimeout(r, 300));
  const fresh = await redlock.acquire(name, { ttl: 5000 });
  const replies = await fresh.fencedTransaction(resource.url, guard, [
    ["HSET", state, "status", "paid"],
    ["RPUSH", `${state}:log`, "paid"],
  ]);
  assert.deepEqual(replies, [1, 1]);
  const stale = await old.fencedTransaction(resource.url, guard, [
    ["HSET", state, "status", "cancelled"],
    ["RPUSH", `${state}:log`, "cancelled"],
  ]).then(() => null, (e) => e);
  assert.ok(stale instanceof StaleTokenError, String(stale));
  assert.equal(stale.highest, fresh.token);
  assert.match(await command(resource.port, ["LLEN", `${state}:log`]), /:1/);
  // A command failing on its own is a ResourceError (the other ones ran).
  const wrong = await fresh.fencedTransaction(resource.url, guard, [["INCR", state]]).then(() => null, (e) => e);
  assert.ok(wrong instanceof ResourceError, String(wrong));
  assert.match(wrong.detail, /WRONGTYPE/);
  await fresh.release();
  redlock.close();
});

test("the routine of using() sends fenced commands with its token", async () => {
  const redlock = await Redlock.connect(env.urls);
  const name = uniqueKey();
  const { guard, state } = tagged(name);
  const token = await redlock.using(name, { ttl: 2000 }, async (lock) => {
    await lock.announce(resource.url, guard);
    assert.equal(await lock.fenced(resource.url, guard, "SET", state, "x"), "OK");
    assert.deepEqual(await lock.fencedTransaction(resource.url, guard, [["GET", state]]), ["x"]);
    return lock.token;
  });
  assert.match(await command(resource.port, ["REDLOCK.GUARDINFO", guard]), new RegExp(String(token)));
  redlock.close();
});
