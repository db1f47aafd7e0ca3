// Members beyond plain nodes: TLS nodes (CA and client certificate files),
// a Redis Cluster as one member (Cluster([...seeds])), and a Sentinel member
// (Sentinel(name, [...sentinels])).

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";

import { Cluster, ConfigError, Redlock, Sentinel } from "../index.mjs";
import { command, freePort, Node, startCluster, startNodes, startSentinelGroup } from "./nodes.mjs";
import { heldOn, makePki, uniqueKey } from "./helpers.mjs";

test("TLS: rediss:// nodes with the CA and the client certificate files", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "redlock-node-tls-"));
  const nodes = [];
  try {
    makePki(dir);
    const f = (n) => path.join(dir, n);
    for (let i = 0; i < 3; i++) {
      const tlsPort = await freePort();
      const node = await Node.start({ extra: ["--tls-port", String(tlsPort), "--tls-cert-file", f("server.crt"),
        "--tls-key-file", f("server.key"), "--tls-ca-cert-file", f("ca.crt")] });
      node.tlsUrl = `rediss://127.0.0.1:${tlsPort}`;
      nodes.push(node);
    }
    const urls = nodes.map((n) => n.tlsUrl);
    const tls = { ca: f("ca.crt"), cert: f("client.crt"), key: f("client.key") };
    const redlock = await Redlock.connect(urls, { tls, ttl: 5000 });
    const name = uniqueKey();
    const lock = await redlock.acquire(name);
    assert.equal(await heldOn(redlock, name), 3);
    // The TLS files also serve a rediss:// resource.
    assert.equal(await lock.fenced(urls[0], `{${name}}:g`, "SET", `{${name}}`, "tls"), "OK");
    assert.equal(await lock.release(), true);
    redlock.close();
    // Without the client certificate, the servers refuse the handshake.
    await assert.rejects(Redlock.connect(urls, { tls: { ca: f("ca.crt") }, connectTimeout: 500 }));
    // A missing file is a ConfigError that names it.
    const missing = await Redlock.connect(urls, { tls: { ca: f("nope.crt") } }).then(() => null, (e) => e);
    assert.ok(missing instanceof ConfigError, String(missing));
    assert.match(missing.message, /nope\.crt/);
  } finally {
    await Promise.all(nodes.map((n) => n.close()));
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a Redis Cluster member has one vote next to plain nodes", async () => {
  const cluster = await startCluster(3);
  const plain = await startNodes(2);
  try {
    const members = [Cluster(cluster.slice(0, 2).map((n) => n.url)), ...plain.map((n) => n.url)];
    const redlock = await Redlock.connect(members, { ttl: 5000 });
    assert.equal(redlock.quorum, 2);
    assert.match(redlock.nodes[0], /^cluster\(/);
    const name = uniqueKey();
    const lock = await redlock.acquire(name);
    const views = await redlock.inspect(name);
    assert.equal(views.length, 3);
    assert.ok(views.every((v) => v.held), JSON.stringify(views, (_k, v) => (typeof v === "bigint" ? String(v) : v)));
    assert.ok(views[0].shard !== null);
    assert.equal(views[1].shard, null);
    assert.equal(await lock.release(), true);
    redlock.close();
  } finally {
    await Promise.all([...cluster, ...plain].map((n) => n.close()));
  }
});

test("a Sentinel member: the master found through the sentinels, grants on every replica", async () => {
  const group = await startSentinelGroup();
  try {
    const member = Sentinel(group.name, group.sentinels.map((s) => s.url));
    const redlock = await Redlock.connect([member], { ttl: 5000, syncTimeout: 500 });
    assert.match(redlock.nodes[0], /^sentinel\(redlock@/);
    const name = uniqueKey();
    const lock = await redlock.acquire(name);
    for (const node of group.nodes) {
      const reply = await command(node.port, ["REDLOCK.INSPECT", name]);
      assert.match(reply, /held\r\n:1\r\n/, `node ${node.port}: ${JSON.stringify(reply)}`);
    }
    assert.equal(await lock.release(), true);
    redlock.close();
    assert.throws(() => Sentinel("", ["redis://127.0.0.1:1"]), ConfigError);
    assert.throws(() => Sentinel("x", ["redis://127.0.0.1:1"], { nope: 1 }), ConfigError);
  } finally {
    await group.close();
  }
});
