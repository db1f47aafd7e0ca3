// index.d.ts (and index.d.mts) checked with `tsc --noEmit --strict` on a
// small typed program, which must also compile and run (with `await using`);
// a program that misuses the types must be refused.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { rmSync } from "node:fs";
import path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { heldOn, useNodes } from "./helpers.mjs";
import { Redlock } from "../index.mjs";

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TSC = path.join(ROOT, "node_modules", "typescript", "bin", "tsc");
const OUT = path.join(ROOT, "test", ".typed-out");
const env = useNodes(5);

after(() => rmSync(OUT, { recursive: true, force: true }));

async function tsc(args) {
  try {
    const r = await run(process.execPath, [TSC, ...args], { cwd: ROOT });
    return { code: 0, out: r.stdout };
  } catch (e) {
    return { code: e.code, out: `${e.stdout}${e.stderr}` };
  }
}

test("the typed example passes tsc --noEmit --strict", async () => {
  const r = await tsc(["--noEmit", "--strict", "-p", "test/typed/tsconfig.json"]);
  assert.equal(r.code, 0, r.out);
});

test("misuses of the declarations are refused", async () => {
  const r = await tsc(["--noEmit", "--strict", "--target", "ES2022", "--module", "node16",
    "--moduleResolution", "node16", "--lib", "ES2022,ESNext.Disposable", "--types", "node",
    "test/typed/wrong.ts"]);
  assert.notEqual(r.code, 0);
  for (const line of [7, 8, 9, 10]) {
    assert.match(r.out, new RegExp(`wrong\\.ts\\(${line},\\d+\\): error TS`), r.out);
  }
});

test("the typed example compiles and runs (await using releases)", async () => {
  const built = await tsc(["-p", "test/typed/tsconfig.json", "--noEmit", "false", "--rootDir", "test/typed", "--outDir", OUT]);
  assert.equal(built.code, 0, built.out);
  const r = await run(process.execPath, [path.join(OUT, "example.js")],
    { env: { ...process.env, NODES: JSON.stringify(env.urls) }, timeout: 30_000 });
  assert.match(r.stdout, /^ok 1$/m, r.stdout);
  const redlock = await Redlock.connect(env.urls);
  assert.equal(await heldOn(redlock, "typed-example"), 0);
  redlock.close();
});
