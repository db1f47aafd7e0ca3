// Shared pieces of the Node suite: five nodes per test file, unique lock
// names, deadline-bound polling, and a throwaway PKI for the TLS tests.

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { after, afterEach, before } from "node:test";

import { startNodes } from "./nodes.mjs";

/**
 * Starts `count` module nodes before the file's tests and stops them after;
 * after every test, paused nodes are resumed and killed ones restarted.
 */
export function useNodes(count = 5, options) {
  const env = { nodes: [], urls: [] };
  before(async () => {
    env.nodes = await startNodes(count, options);
    env.urls = env.nodes.map((n) => n.url);
  });
  afterEach(async () => {
    for (const node of env.nodes) {
      if (node.paused) node.resume();
      if (!node.proc) await node.start();
    }
  });
  after(async () => {
    await Promise.all(env.nodes.map((n) => n.close()));
  });
  return env;
}

/** A lock name no other test uses. */
export function uniqueKey(prefix = "node-test") {
  return `${prefix}-${randomBytes(6).toString("hex")}`;
}

/** Resolves once `check()` is truthy; rejects after `deadlineMs`. */
export async function eventually(check, deadlineMs = 5000, what = "the condition") {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > until) throw new Error(`${what} did not hold within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** How many members report `name` held. */
export async function heldOn(redlock, name) {
  const views = await redlock.inspect(name);
  return views.filter((v) => v.held).length;
}

/**
 * A CA, a server certificate for 127.0.0.1 and a client certificate (EC
 * keys, a day long), as PEM files in `folder` (needs the openssl command,
 * which scripts/install-deps.sh installs).
 */
export function makePki(folder) {
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  const openssl = (...args) => execFileSync("openssl", args, { stdio: "ignore" });
  const f = (name) => path.join(folder, name);
  openssl("req", "-x509", ...ec, "-keyout", f("ca.key"), "-out", f("ca.crt"), "-days", "1",
    "-subj", "/CN=redlock-node-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
    "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  for (const [name, usage] of [["server", "serverAuth"], ["client", "clientAuth"]]) {
    writeFileSync(f(`${name}.ext`), `subjectAltName=IP:127.0.0.1\nextendedKeyUsage=${usage}\n`);
    openssl("req", ...ec, "-keyout", f(`${name}.key`), "-out", f(`${name}.csr`), "-subj", `/CN=${name}`);
    openssl("x509", "-req", "-in", f(`${name}.csr`), "-CA", f("ca.crt"), "-CAkey", f("ca.key"),
      "-CAcreateserial", "-out", f(`${name}.crt`), "-days", "1", "-extfile", f(`${name}.ext`));
  }
}
