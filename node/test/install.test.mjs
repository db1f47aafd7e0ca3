// `npm pack`, then `npm install` of the tarball in an empty folder (no
// registry needed: the package has no runtime dependencies), then both
// entries (ES module and CommonJS) load and take a lock.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { useNodes } from "./helpers.mjs";

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const env = useNodes(3);
const scratch = mkdtempSync(path.join(tmpdir(), "redlock-node-install-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

test("npm pack, then npm install of the tarball in an empty folder; ESM and CJS entries work", async () => {
  const pack = await run("npm", ["pack", "--json", "--pack-destination", scratch], { cwd: ROOT, maxBuffer: 1 << 24 });
  const [info] = JSON.parse(pack.stdout);
  const files = info.files.map((f) => f.path);
  for (const needed of ["dist/index.js", "dist/index.d.ts", "index.mjs", "index.d.mts", "native.js",
    "native.d.ts", "README.md", "package.json"]) {
    assert.ok(files.includes(needed), `${needed} is not in the tarball: ${files.join(", ")}`);
  }
  assert.ok(files.some((f) => f.endsWith(".node")), "the addon is not in the tarball");
  assert.ok(!files.some((f) => f.startsWith("src/") || f.startsWith("test/") || f.startsWith("ts/")));
  const app = path.join(scratch, "app");
  await run("mkdir", ["-p", app]);
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", private: true }));
  await run("npm", ["install", "--offline", "--no-audit", "--no-fund", path.join(scratch, info.filename)],
    { cwd: app });
  assert.ok(readdirSync(path.join(app, "node_modules")).includes("redlock-fenced"));
  const urls = JSON.stringify(env.urls);
  writeFileSync(path.join(app, "esm.mjs"), `import { Redlock } from "redlock-fenced";
    const redlock = await Redlock.connect(${urls}, { ttl: 2000 });
    const lock = await redlock.acquire("install-esm");
    console.log(typeof lock.token, await lock.release());
    redlock.close();`);
  writeFileSync(path.join(app, "cjs.cjs"), `const { Redlock, ConfigError } = require("redlock-fenced");
    (async () => {
      const redlock = await Redlock.connect(${urls}, { ttl: 2000 });
      const lock = await redlock.acquire("install-cjs");
      console.log(typeof lock.token, await lock.release(), typeof ConfigError);
      redlock.close();
    })();`);
  const esm = await run(process.execPath, ["esm.mjs"], { cwd: app, timeout: 20_000 });
  assert.equal(esm.stdout.trim(), "bigint true");
  const cjs = await run(process.execPath, ["cjs.cjs"], { cwd: app, timeout: 20_000 });
  assert.equal(cjs.stdout.trim(), "bigint true function");
});
