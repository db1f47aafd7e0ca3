// The process and the event loop: every call is a Promise whose I/O runs on
// the Rust runtime (the loop keeps turning while a call waits), and nothing
// keeps the process alive once no call is pending, also when it exits while
// still holding a lock (no stray handles, no crash at exit).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Redlock } from "../index.mjs";
import { eventually, heldOn, uniqueKey, useNodes } from "./helpers.mjs";

const env = useNodes(5);
const ENTRY = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "index.mjs");

/** Runs `source` (an ES module that gets `Redlock`, `urls`, `name`) in a fresh node process. */
function run(source, name, args = []) {
  const program = `import { Redlock } from ${JSON.stringify(ENTRY)};\n`
    + `const urls = ${JSON.stringify(env.urls)}; const name = ${JSON.stringify(name)};\n${source}`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...args, "--input-type=module", "-e", program],
      { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the process did not exit within 20 s (a handle kept it alive); stdout: ${out}`));
    }, 20_000);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out, err });
    });
  });
}

test("the process exits by itself after its calls, with no lock held", async () => {
  const name = uniqueKey();
  const started = Date.now();
  const r = await run(`
    const redlock = await Redlock.connect(urls, { ttl: 5000 });
    const lock = await redlock.acquire(name);
    await lock.extend(5000);
    await redlock.using(name + "-using", {}, async () => {});
    console.log(await lock.release());
  `, name);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out.trim(), "true");
  // Far below the 5 s lease and the node timeouts: nothing waited for anything.
  assert.ok(Date.now() - started < 10_000);
});

test("a process that exits holding a lock exits cleanly; the lease then runs out", async () => {
  const name = uniqueKey();
  const r = await run(`
    const redlock = await Redlock.connect(urls, { ttl: 1000 });
    globalThis.kept = await redlock.acquire(name);
    console.log("held");
  `, name);
  assert.equal(r.signal, null, r.err);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out.trim(), "held");
  const redlock = await Redlock.connect(env.urls);
  await eventually(async () => (await heldOn(redlock, name)) === 0, 5000, "the lease to run out");
  redlock.close();
});

test("a Lock garbage-collected while held is released in the background", async () => {
  const name = uniqueKey();
  const r = await run(`
    const redlock = await Redlock.connect(urls, { ttl: 30000 });
    await (async () => { await redlock.acquire(name); })();
    const held = async () => (await redlock.inspect(name)).filter((v) => v.held).length;
    console.log("before", await held());
    const until = Date.now() + 10000;
    while (Date.now() < until && (await held()) > 0) {
      globalThis.gc();
      await new Promise((r) => setTimeout(r, 50));
    }
    console.log("after", await held());
  `, name, ["--expose-gc"]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.out.trim().split("\n"), ["before 5", "after 0"]);
});

test("the event loop keeps turning while a call waits for a busy lock", async () => {
  const redlock = await Redlock.connect(env.urls, { ttl: 5000 });
  const name = uniqueKey();
  const holder = await redlock.acquire(name);
  let ticks = 0;
  let last = performance.now();
  let longestGap = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longestGap = Math.max(longestGap, now - last);
    last = now;
    ticks++;
  }, 10);
  const started = performance.now();
  await assert.rejects(redlock.acquire(name, { wait: 1000 }), { name: "LockBusyError" });
  const waited = performance.now() - started;
  clearInterval(timer);
  await holder.release();
  redlock.close();
  assert.ok(waited >= 900, `waited ${waited} ms`);
  // A blocked loop would show one tick and a gap as long as the wait.
  assert.ok(ticks >= 20, `${ticks} ticks in ${waited} ms`);
  assert.ok(longestGap < waited / 2, `longest gap ${longestGap} ms of ${waited} ms`);
});
