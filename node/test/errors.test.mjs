// Errors: every option checked on the JavaScript side with a ConfigError
// naming it; the client's errors as classes with their fields (each
// node's own error in NoQuorumError); no owner id or password in any message.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Cluster, ConfigError, LockBusyError, ModuleNotLoadedError, NoQuorumError, PermissionDeniedError, Redlock,
  RedlockError,
} from "../index.mjs";
import { command, Node } from "./nodes.mjs";
import { uniqueKey, useNodes } from "./helpers.mjs";

const env = useNodes(5);

/** The ConfigError of `promise` (it must reject with one). */
async function configError(promise) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${err}`);
  assert.ok(err instanceof RedlockError);
  assert.equal(err.transient, false);
  return err;
}

test("bad options of connect: a ConfigError naming each option", async () => {
  const cases = [
    [{ ttl: 0 }, "ttl"],
    [{ ttl: Number.NaN }, "ttl"],
    [{ ttl: "5s" }, "ttl"],
    [{ nodeTimeout: -1 }, "nodeTimeout"],
    [{ connectTimeout: Infinity }, "connectTimeout"],
    [{ driftFactor: 1 }, "driftFactor"],
    [{ clockFloor: "yes" }, "clockFloor"],
    [{ retry: { attempts: 0 } }, "retry.attempts"],
    [{ retry: { attempts: 1.5 } }, "retry.attempts"],
    [{ retry: { baseDelay: -5 } }, "retry.baseDelay"],
    [{ retry: { jitter: "x" } }, "retry.jitter"],
    [{ retry: { count: 3 } }, "retry.count"],
    [{ retry: 3 }, "retry"],
    [{ tls: { cert: "/c.pem" } }, "tls.key"],
    [{ tls: { ca: 7 } }, "tls.ca"],
    [{ tls: { cafile: "x" } }, "tls.cafile"],
    [{ username: "" }, "username"],
    [{ password: 12 }, "password"],
    [{ retryCount: 10 }, "retryCount"],
  ];
  for (const [options, option] of cases) {
    const err = await configError(Redlock.connect(env.urls, options));
    assert.equal(err.option, option, `${JSON.stringify(options)}: ${err.message}`);
    assert.ok(err.message.includes(option), err.message);
  }
  // node-redlock's names are pointed at ours.
  const hint = await configError(Redlock.connect(env.urls, { retryDelay: 200 }));
  assert.match(hint.message, /retry\.baseDelay/);
});

test("bad members and bad call arguments: ConfigError naming them", async () => {
  assert.equal((await configError(Redlock.connect([]))).option, "members");
  assert.equal((await configError(Redlock.connect("redis://127.0.0.1:1"))).option, "members");
  assert.equal((await configError(Redlock.connect([env.urls[0], 42]))).option, "members[1]");
  assert.equal((await configError(Redlock.connect(["http://127.0.0.1:1"]))).option, "members[0]");
  assert.equal((await configError(Redlock.connect([Cluster([])]))).option, "members[0]");
  // The same node twice: refused by the client, one server one vote.
  const twice = await configError(Redlock.connect([env.urls[0], env.urls[0], env.urls[1]]));
  assert.match(twice.message, /same node/);
  const redlock = await Redlock.connect(env.urls, { ttl: 1000 });
  assert.equal((await configError(redlock.acquire(""))).option, "name");
  assert.equal((await configError(redlock.acquire("k", { ttl: -1 }))).option, "ttl");
  assert.equal((await configError(redlock.acquire("k", { ttl: 86_400_001 }))).option, "ttl");
  assert.equal((await configError(redlock.acquire("k", { wait: -1 }))).option, "wait");
  assert.equal((await configError(redlock.acquire("k", { signal: {} }))).option, "signal");
  assert.equal((await configError(redlock.acquire("k", { duration: 5 }))).option, "duration");
  assert.equal((await configError(redlock.using("k", {}, "not a function"))).option, "routine");
  const lock = await redlock.acquire(uniqueKey());
  assert.equal((await configError(lock.extend(0))).option, "ttl");
  assert.equal((await configError(lock.fenced(42, "g", "GET", "x"))).option, "resource");
  assert.equal((await configError(lock.fenced(env.urls[0], "", "GET", "x"))).option, "guard");
  assert.equal((await configError(lock.fenced(env.urls[0], "g"))).option, "command");
  assert.equal((await configError(lock.fenced(env.urls[0], "g", "SET", "x", {}))).option, "command");
  await lock.release();
  // A ttl the nodes refuse (above redlock.max-ttl-ms) is a ConfigError too.
  const refused = await configError(redlock.acquire(uniqueKey(), { ttl: 3_600_000 }));
  assert.match(refused.message, /ttl/);
  redlock.close();
});

test("no quorum: NoQuorumError carries each failing node's own error", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000, nodeTimeout: 50, retry: { attempts: 1 } });
  const paused = env.nodes.slice(0, 3);
  for (const node of paused) node.pause();
  const err = await redlock.acquire(uniqueKey()).then(() => null, (e) => e);
  for (const node of paused) node.resume();
  assert.ok(err instanceof NoQuorumError, String(err));
  assert.equal(err.transient, true);
  assert.equal(err.nodes, 5);
  assert.equal(err.quorum, 3);
  assert.ok(err.answered <= 2);
  assert.deepEqual(err.failures.map((f) => f.node), paused.map((n) => n.addr));
  for (const f of err.failures) {
    assert.match(f.error, /no reply within 50 ms/);
  }
  redlock.close();
});

test("a node without the module: ModuleNotLoadedError naming it", async () => {
  const plain = await Node.start({ module: false });
  try {
    const err = await Redlock.connect([...env.urls.slice(0, 2), plain.url]).then(() => null, (e) => e);
    assert.ok(err instanceof ModuleNotLoadedError, String(err));
    assert.equal(err.node, plain.addr);
  } finally {
    await plain.close();
  }
});

test("a fenced call on a resource without the module: ModuleNotLoadedError with resource set", async () => {
  const plain = await Node.start({ module: false });
  const redlock = await Redlock.connect(env.urls);
  try {
    const lock = await redlock.acquire(uniqueKey("plain-resource"), { ttl: 10_000 });
    const err = await lock.fenced(plain.url, "guard", "SET", "k", "v").then(() => null, (e) => e);
    assert.ok(err instanceof ModuleNotLoadedError, String(err));
    assert.equal(err.resource, true);
    assert.match(err.message, /REDLOCK\.FENCED/);
    await lock.release();
  } finally {
    redlock.close();
    await plain.close();
  }
});

test("ACL: username/password options reach every node; NOPERM is PermissionDeniedError without the password", async () => {
  const user = `locker${Math.random().toString(16).slice(2, 8)}`;
  const rules = ("on >s3cret-pw resetkeys ~locks:* resetchannels -@all +redlock.acquire +redlock.release "
    + "+redlock.extend +redlock.fence +redlock.inspect +redlock.wait +info").split(" ");
  for (const n of env.nodes) {
    assert.match(await command(n.port, ["ACL", "SETUSER", user, ...rules]), /^\+OK/);
  }
  try {
    const wrong = await Redlock.connect(env.urls, { username: user, password: "nope", connectTimeout: 500 })
      .then(() => null, (e) => e);
    assert.ok(wrong instanceof RedlockError, String(wrong));
    assert.ok(!wrong.message.includes("nope"));
    const redlock = await Redlock.connect(env.urls, { username: user, password: "s3cret-pw", ttl: 5000,
      retry: { attempts: 1 } });
    const lock = await redlock.acquire("locks:ok");
    await lock.release();
    const err = await redlock.acquire("other:x").then(() => null, (e) => e);
    assert.ok(err instanceof PermissionDeniedError, String(err));
    assert.ok(err.nodes.length >= 3);
    assert.match(err.detail, /NOPERM/);
    assert.ok(!err.message.includes("s3cret"));
    assert.ok(!JSON.stringify(err.nodes).includes("s3cret"));
    redlock.close();
  } finally {
    for (const n of env.nodes) await command(n.port, ["ACL", "DELUSER", user]);
  }
});

test("no message names an owner id", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000, nodeTimeout: 50, retry: { attempts: 1 } });
  const name = uniqueKey();
  const lock = await redlock.acquire(name);
  const messages = [];
  const collect = (p) => p.then(() => undefined, (e) => messages.push(`${e.message} ${JSON.stringify(e)}`));
  const other = await redlock.acquire(uniqueKey());
  const owner = other.detach();
  await collect(redlock.acquire(name));
  await collect(lock.fenced(env.urls[0], "{g}", "GET", "{g}:x").then(() => redlock.releaseOwner(name, "x".repeat(300))));
  for (const node of env.nodes.slice(0, 3)) node.pause();
  await collect(lock.extend(5000));
  await collect(redlock.releaseOwner(name, owner));
  for (const node of env.nodes.slice(0, 3)) node.resume();
  assert.ok(messages.length >= 3, messages.join("\n"));
  for (const m of messages) {
    assert.ok(!m.includes(owner), m);
    assert.ok(!/[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-/.test(m), `an owner id in: ${m}`);
  }
  assert.ok(messages.some((m) => m.includes("LockBusyError") || m.includes("held by another owner")));
  redlock.close();
});

test("error classes form one hierarchy", () => {
  assert.ok(new LockBusyError("m", 3, 5) instanceof RedlockError);
  assert.ok(new LockBusyError("m", 3, 5) instanceof Error);
  assert.equal(new LockBusyError("m", 3, 5).name, "LockBusyError");
  assert.equal(new ConfigError("m", "ttl").name, "ConfigError");
});
