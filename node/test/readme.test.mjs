// Every JavaScript example of node/README.md and of the guide's Node page
// (docs/guide/client-node.md) runs, as an ES module in a
// fresh process, against the test nodes (NODES and RESOURCE replaced).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Node } from "./nodes.mjs";
import { useNodes } from "./helpers.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const README = readFileSync(path.join(HERE, "..", "README.md"), "utf8");
const GUIDE_PAGE = readFileSync(path.join(HERE, "..", "..", "docs", "guide", "client-node.md"), "utf8");
const jsBlocks = (text) => [...text.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
const BLOCKS = jsBlocks(README);
const GUIDE_BLOCKS = jsBlocks(GUIDE_PAGE);
const NODES = /^const NODES = \[[\s\S]*?\];$/m;
const RESOURCE = /^const RESOURCE = "[^"]*";/m;
// Inside the package, so that `import … from "redlock-fenced"` finds it by its own name.
const SCRATCH = path.join(HERE, ".readme");

const env = useNodes(5);
let resource;
before(async () => {
  resource = await Node.start();
  mkdirSync(SCRATCH, { recursive: true });
});
after(async () => {
  await resource.close();
  rmSync(SCRATCH, { recursive: true, force: true });
});

function runModule(file) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${file} did not exit within 30 s: ${out}`));
    }, 30_000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

test("the README has its examples", () => {
  assert.ok(BLOCKS.length >= 5);
  assert.ok(BLOCKS.some((b) => b.includes("StaleTokenError") && RESOURCE.test(b)));
  assert.ok(BLOCKS.some((b) => b.includes("redlock.using(")));
  assert.ok(BLOCKS.some((b) => b.includes("AbortSignal")));
  assert.ok(README.includes("## Migrating from node-redlock"));
});

test("the guide's Node page has its example", () => {
  assert.ok(GUIDE_BLOCKS.length >= 1);
  assert.ok(GUIDE_BLOCKS.some((b) => b.includes("redlock.using(")));
});

const EXAMPLES = [
  ...BLOCKS.map((block) => ["README", block]),
  ...GUIDE_BLOCKS.map((block) => ["docs/guide/client-node.md", block]),
];
for (const [index, [origin, block]] of EXAMPLES.entries()) {
  test(`${origin} example ${index} runs`, async () => {
    assert.ok(NODES.test(block), "each example defines NODES once");
    let source = block.replace(NODES, `const NODES = ${JSON.stringify(env.urls)};`);
    source = source.replace(RESOURCE, `const RESOURCE = ${JSON.stringify(resource.url)};`);
    const file = path.join(SCRATCH, `example-${index}.mjs`);
    writeFileSync(file, source);
    const r = await runModule(file);
    assert.equal(r.code, 0, `example ${index} failed:\n${r.err}\n${r.out}`);
  });
}
