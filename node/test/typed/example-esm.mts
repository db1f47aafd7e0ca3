// The ES module entry's declarations (index.d.mts), checked like example.ts.

import { type Lock, Redlock, RedlockError } from "redlock-fenced";

export async function acquireBriefly(nodes: string[]): Promise<bigint> {
  const redlock: Redlock = await Redlock.connect(nodes, { ttl: 1000 });
  try {
    const lock: Lock = await redlock.acquire("typed-esm");
    await lock.release();
    return lock.token;
  } catch (err) {
    if (err instanceof RedlockError && err.transient) return 0n;
    throw err;
  } finally {
    redlock.close();
  }
}
