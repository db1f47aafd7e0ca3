// A small typed program over the package's declarations, checked with
// `tsc --noEmit --strict` by types.test.mjs, then compiled and run: it
// exercises `await using` (downlevelled by TypeScript for Node 20).

import {
  Cluster, ConfigError, type HeldLock, type Lock, LockBusyError, type LockInfo, NoQuorumError, type NodeView,
  type RedisReply, Redlock, type RedlockOptions, StaleTokenError,
} from "redlock-fenced";

const options: RedlockOptions = {
  ttl: 5000,
  retry: { attempts: 2, baseDelay: 50, jitter: 50 },
  nodeTimeout: 100,
  driftFactor: 0.01,
  clockFloor: true,
};

function describeToken(lock: LockInfo): string {
  const token: bigint = lock.token;
  const ms: number = lock.validity;
  return `${lock.name}#${token} (${Math.round(ms)} ms)`;
}

async function main(nodes: string[]): Promise<void> {
  await using redlock = await Redlock.connect(nodes, options);
  const quorum: number = redlock.quorum;
  {
    await using lock = await redlock.acquire("typed-example", { wait: 1000 });
    const held: Lock = lock;
    console.log(describeToken(held), quorum);
    const again: Lock | null = await redlock.tryAcquire("typed-example");
    if (again !== null) throw new Error("two holders");
  }
  // Released by `await using` at the end of the block above.
  const views: NodeView[] = await redlock.inspect("typed-example");
  if (views.some((v) => v.held)) throw new Error("await using did not release");

  const result: number = await redlock.using("typed-example", { ttl: 1000, signal: AbortSignal.timeout(5000) },
    async (lock: HeldLock, signal: AbortSignal): Promise<number> => {
      signal.throwIfAborted();
      return lock.lost ? 0 : 1;
    });

  try {
    await redlock.acquire("typed-example", { ttl: -1 });
  } catch (err) {
    if (err instanceof ConfigError) console.log("refused option", err.option);
    else if (err instanceof LockBusyError) console.log(err.holders);
    else if (err instanceof NoQuorumError) console.log(err.failures.map((f) => `${f.node}: ${f.error}`));
    else if (err instanceof StaleTokenError) console.log(err.guard, err.highest);
    else throw err;
  }
  const reply: RedisReply | undefined = undefined;
  void reply;
  void Cluster(["redis://127.0.0.1:7000"]);
  console.log("ok", result);
}

main(JSON.parse(process.env.NODES ?? "[]") as string[]).catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
