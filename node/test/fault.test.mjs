// The fault test in its short form (`make node-fault` runs the long one),
// and a check that its checker finds each kind of violation.

import assert from "node:assert/strict";
import { test } from "node:test";

import { check, NAMES, run } from "./fault.mjs";

test("contention under faults keeps tokens unique, increasing and fenced", { timeout: 120_000 }, async () => {
  const duration = Number(process.env.REDLOCK_NODE_FAULT_SECONDS ?? "6");
  const report = await run({ duration, seed: 11 });
  assert.deepEqual(report.violations.slice(0, 10), []);
  // The run did something: acquisitions, faults, writes through the fence.
  assert.ok(report.acquisitions >= 20, JSON.stringify(report));
  assert.ok(report.accepted >= 20, JSON.stringify(report));
  assert.ok(report.logged >= report.accepted, JSON.stringify(report));
  assert.ok(Object.values(report.faults).reduce((a, b) => a + b, 0) >= 3, JSON.stringify(report));
});

test("the checker finds each kind of violation", () => {
  const name = NAMES[0];
  const acqs = [
    [name, "5", "w1", 0, 1, 2],
    [name, "3", "w2", 3, 4, 5], // started after token 5 was handed out
    [name, "3", "w3", 3.5, 4.5, 5.5], // a duplicate token
  ];
  const violations = check(acqs, { [name]: ["5", "3", "9"] }).join("\n");
  assert.match(violations, /duplicate tokens 3/);
  assert.match(violations, /is not above 5/);
  assert.match(violations, /stale write accepted \(token 3 after 5\)/);
  assert.match(violations, /unknown token 9/);
});
