// Local redis-server nodes loading the redlock module, for the tests, the
// fault test and the benchmark. Started like the Rust test kit's (and
// python/tests/nodes.py): a free loopback port picked at run time, `--bind
// 127.0.0.1`, no snapshots, the restart guard off, debug commands on;
// stopped by their own pid.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const START_DEADLINE_MS = 15_000;

/** `REDLOCK_MODULE`, or the test build in target/debug. */
export function modulePath() {
  const p = process.env.REDLOCK_MODULE
    ? path.resolve(process.env.REDLOCK_MODULE)
    : path.join(ROOT, "target", "debug", "libredlock.so");
  if (!existsSync(p)) {
    throw new Error(`${p} is missing: build it with \`cargo build -p redlock-module --features test-hooks\``);
  }
  return p;
}

/** The server binary: `REDLOCK_SERVER_BIN` when set, else `redis-server`. */
export function serverBin() {
  return process.env.REDLOCK_SERVER_BIN || "redis-server";
}

/** A loopback port that was free a moment ago. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function encode(args) {
  let out = `*${args.length}\r\n`;
  for (const a of args) {
    const s = String(a);
    out += `$${Buffer.byteLength(s)}\r\n${s}\r\n`;
  }
  return out;
}

/**
 * Sends one command (RESP) to a port and resolves with the raw reply text
 * (one reply: enough for the status, integer and short bulk replies the
 * tests read).
 */
export function command(port, args, timeoutMs = 2000) {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ host: "127.0.0.1", port });
    let data = "";
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no reply from ${port} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on("connect", () => socket.write(encode(args)));
    socket.on("data", (chunk) => {
      data += chunk.toString("latin1");
      if (complete(data)) {
        clearTimeout(timer);
        socket.destroy();
        resolve(data);
      }
    });
    socket.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    socket.on("close", () => {
      clearTimeout(timer);
      if (!complete(data)) reject(new Error(`connection to ${port} closed`));
    });
  });
}

/** Whether `text` holds one whole RESP2 reply. */
function complete(text) {
  return parse(text, 0) !== null;
}

function parse(text, at) {
  const end = text.indexOf("\r\n", at);
  if (end < 0) return null;
  const type = text[at];
  const head = text.slice(at + 1, end);
  if (type === "+" || type === "-" || type === ":") return end + 2;
  if (type === "$") {
    const n = Number(head);
    if (n < 0) return end + 2;
    return text.length >= end + 2 + n + 2 ? end + 2 + n + 2 : null;
  }
  if (type === "*") {
    let pos = end + 2;
    const n = Number(head);
    for (let i = 0; i < n; i++) {
      const next = parse(text, pos);
      if (next === null) return null;
      pos = next;
    }
    return pos;
  }
  return end + 2;
}

/** One redis-server process in its own temporary folder. */
export class Node {
  constructor({ module = true, extra = [] } = {}) {
    this.module = module;
    this.extra = extra;
    this.dir = mkdtempSync(path.join(tmpdir(), "redlock-node-test-"));
    this.proc = null;
    this.paused = false;
    this.port = 0;
  }

  /** Starts a node (a free port is picked once; a restart keeps it). */
  static async start(options) {
    const node = new Node(options);
    node.port = await freePort();
    await node.start();
    return node;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  get addr() {
    return `127.0.0.1:${this.port}`;
  }

  async start() {
    const args = [
      "--port", String(this.port), "--bind", "127.0.0.1", "--dir", this.dir,
      "--logfile", path.join(this.dir, "redis.log"), "--daemonize", "no", "--save", "",
      "--enable-debug-command", "yes",
    ];
    if (this.module) {
      args.push("--loadmodule", modulePath(), "--redlock.restart-grace-ms", "0");
    }
    args.push(...this.extra);
    const proc = spawn(serverBin(), args, { stdio: "ignore" });
    this.proc = proc;
    let exited = false;
    proc.on("exit", () => {
      exited = true;
    });
    const deadline = Date.now() + START_DEADLINE_MS;
    for (;;) {
      if (exited) throw new Error(`redis-server on ${this.port} exited: ${this.logTail()}`);
      try {
        if ((await command(this.port, ["PING"], 200)).startsWith("+PONG")) return;
      } catch {
        // Not up yet.
      }
      if (Date.now() > deadline) throw new Error(`redis-server on ${this.port}: no PING reply`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  logTail() {
    try {
      return readFileSync(path.join(this.dir, "redis.log"), "utf8").split("\n").slice(-10).join("\n");
    } catch {
      return "";
    }
  }

  /** SIGSTOP: the node freezes (its sockets stay open, nothing answers). */
  pause() {
    if (this.proc) {
      process.kill(this.proc.pid, "SIGSTOP");
      this.paused = true;
    }
  }

  /** SIGCONT. */
  resume() {
    if (this.proc) {
      process.kill(this.proc.pid, "SIGCONT");
      this.paused = false;
    }
  }

  /** SIGKILL: no shutdown, no save; resolves once the process is gone. */
  async kill() {
    const proc = this.proc;
    if (!proc) return;
    if (this.paused) this.resume();
    const gone = new Promise((r) => (proc.exitCode !== null || proc.signalCode !== null ? r() : proc.once("exit", r)));
    proc.kill("SIGKILL");
    await gone;
    this.proc = null;
  }

  async stop() {
    const proc = this.proc;
    if (!proc) return;
    if (this.paused) this.resume();
    const gone = new Promise((r) => (proc.exitCode !== null || proc.signalCode !== null ? r() : proc.once("exit", r)));
    try {
      await command(this.port, ["SHUTDOWN", "NOSAVE"], 500);
    } catch {
      // The connection closes as the server exits.
    }
    const timer = setTimeout(() => proc.kill("SIGKILL"), 5000);
    await gone;
    clearTimeout(timer);
    this.proc = null;
  }

  async close() {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** `count` module nodes, started in parallel. */
export async function startNodes(count, options) {
  const started = await Promise.allSettled(Array.from({ length: count }, () => Node.start(options)));
  const nodes = started.filter((s) => s.status === "fulfilled").map((s) => s.value);
  const failed = started.find((s) => s.status === "rejected");
  if (failed) {
    await Promise.all(nodes.map((n) => n.close()));
    throw failed.reason;
  }
  return nodes;
}

/**
 * A Redis Cluster of `masters` module nodes (no replicas), the slots split
 * evenly in order, each node with its own free bus port; resolves once every
 * node reports `cluster_state:ok`. The caller closes the nodes.
 */
export async function startCluster(masters) {
  const nodes = [];
  try {
    for (let i = 0; i < masters; i++) {
      const bus = await freePort();
      nodes.push(await Node.start({ extra: ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-port", String(bus), "--cluster-node-timeout", "1000"] }));
      nodes[i].bus = bus;
    }
    const per = Math.floor(16384 / masters);
    for (const [i, node] of nodes.entries()) {
      const last = i === masters - 1 ? 16383 : (i + 1) * per - 1;
      const reply = await command(node.port, ["CLUSTER", "ADDSLOTSRANGE", String(i * per), String(last)]);
      if (!reply.startsWith("+OK")) throw new Error(`ADDSLOTSRANGE: ${reply}`);
    }
    for (const node of nodes.slice(1)) {
      const reply = await command(nodes[0].port, ["CLUSTER", "MEET", "127.0.0.1", String(node.port), String(node.bus)]);
      if (!reply.startsWith("+OK")) throw new Error(`MEET: ${reply}`);
    }
    const deadline = Date.now() + START_DEADLINE_MS;
    for (;;) {
      const infos = await Promise.all(nodes.map((n) => command(n.port, ["CLUSTER", "INFO"])));
      if (infos.every((i) => i.includes("cluster_state:ok"))) return nodes;
      if (Date.now() > deadline) throw new Error("the cluster did not reach cluster_state:ok");
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (error) {
    await Promise.all(nodes.map((n) => n.close()));
    throw error;
  }
}

/** One `redis-server --sentinel` watching `name` (stopped by its pid). */
export class SentinelProc {
  static async start(name, masterPort, quorum) {
    const s = new SentinelProc();
    s.dir = mkdtempSync(path.join(tmpdir(), "redlock-node-sentinel-"));
    s.port = await freePort();
    const conf = path.join(s.dir, "sentinel.conf");
    writeFileSync(conf, `port ${s.port}\nbind 127.0.0.1\ndaemonize no\n`
      + `logfile ${path.join(s.dir, "sentinel.log")}\ndir ${s.dir}\n`
      + `sentinel monitor ${name} 127.0.0.1 ${masterPort} ${quorum}\n`
      + `sentinel down-after-milliseconds ${name} 1000\nsentinel failover-timeout ${name} 4000\n`);
    s.proc = spawn(serverBin(), [conf, "--sentinel"], { stdio: "ignore" });
    const deadline = Date.now() + START_DEADLINE_MS;
    for (;;) {
      try {
        if ((await command(s.port, ["PING"], 200)).startsWith("+PONG")) return s;
      } catch {
        // not up yet
      }
      if (Date.now() > deadline) throw new Error(`sentinel on ${s.port}: no PING reply`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  async close() {
    if (this.proc) {
      this.proc.kill("SIGKILL");
      this.proc = null;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * A master with `replicas` replicas and `sentinels` sentinels watching it
 * (`redlock.sync-replicas` at `r`), like the Rust test kit's SentinelGroup.
 * Resolves once the replicas are online and the sentinels know each other.
 */
export async function startSentinelGroup({ replicas = 2, sentinels = 3, r = 2, name = "redlock" } = {}) {
  const group = { name, nodes: [], sentinels: [] };
  group.close = async () => {
    await Promise.all([...group.sentinels, ...group.nodes].map((p) => p.close()));
  };
  const waitFor = async (check, what) => {
    const deadline = Date.now() + 45_000;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`waited 45 s for ${what}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  };
  try {
    const check = ["--redlock.sync-replicas", String(r)];
    group.nodes.push(await Node.start({ extra: check }));
    const master = group.nodes[0].port;
    for (let i = 0; i < replicas; i++) {
      group.nodes.push(await Node.start({ extra: [...check, "--replicaof", "127.0.0.1", String(master)] }));
    }
    await waitFor(async () => (await command(master, ["INFO", "replication"])).split("state=online").length - 1
      >= replicas, "the replicas online");
    for (let i = 0; i < sentinels; i++) {
      group.sentinels.push(await SentinelProc.start(name, master, Math.floor(sentinels / 2) + 1));
    }
    for (const s of group.sentinels) {
      await waitFor(async () => (await command(s.port, ["SENTINEL", "SENTINELS", name]))
        .startsWith(`*${sentinels - 1}\r\n`), "the sentinels to meet");
    }
    return group;
  } catch (error) {
    await group.close();
    throw error;
  }
}
