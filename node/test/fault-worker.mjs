// One worker process of the fault test (fault.mjs): `loops` concurrent
// loops acquire one of the names (waiting up to a second), sometimes stall
// past the lease, then append the token to the name's log on the resource
// through the name's guard (REDLOCK.FENCED), and release. Sends its
// acquisitions and counts to the parent.

import { Redlock, RedlockError, StaleTokenError } from "../index.mjs";
import { rng } from "./fault.mjs";

const cfg = JSON.parse(process.argv[2]);
const random = rng(cfg.seed);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** Milliseconds on CLOCK_MONOTONIC, which every process of the machine shares. */
const now = () => Number(process.hrtime.bigint()) / 1e6;
const wall = () => Date.now();

const acqs = [];
const stats = { accepted: 0, refused: 0, failed: 0 };

async function loop(redlock, id) {
  while (wall() < cfg.until) {
    const name = cfg.names[Math.floor(random() * cfg.names.length)];
    const started = now();
    let lock;
    try {
      lock = await redlock.acquire(name, { ttl: cfg.ttl, wait: 1000 });
    } catch (err) {
      if (!(err instanceof RedlockError)) throw err;
      stats.failed++;
      continue;
    }
    const acquired = now();
    try {
      if (random() < 0.1) await sleep(cfg.ttl * 1.5); // a stalled holder: a stale write must be refused
      try {
        await lock.fenced(cfg.resource, `{${name}}:fence`, "RPUSH", `{${name}}:log`, lock.token);
        stats.accepted++;
      } catch (err) {
        if (err instanceof StaleTokenError) stats.refused++;
        else if (!(err instanceof RedlockError)) throw err;
      }
    } finally {
      const ended = now();
      await lock.release().catch(() => undefined);
      acqs.push([name, lock.token.toString(), `${cfg.worker}.${id}`, started, acquired, ended]);
    }
  }
}

const redlock = await Redlock.connect(cfg.urls, { retry: { attempts: 2, baseDelay: 20, jitter: 20 } });
await sleep(Math.max(0, cfg.startAt - wall()));
await Promise.all(Array.from({ length: cfg.loops }, (_, i) => loop(redlock, i)));
redlock.close();
process.send({ acqs, stats }, () => process.disconnect());
