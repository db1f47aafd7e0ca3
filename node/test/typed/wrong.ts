// Must NOT type-check: each line misuses the declarations (types.test.mjs
// expects tsc to report every one of them).

import { Redlock } from "redlock-fenced";

async function wrong(redlock: Redlock): Promise<void> {
  const lock = await redlock.acquire("x", { ttl: "5s" });               // ttl is a number
  const token: number = lock.token;                                      // token is a bigint
  await redlock.tryAcquire("x", { wait: 5 });                            // tryAcquire has no wait
  await Redlock.connect(["redis://a"], { retryCount: 3 });               // not an option
  void token;
}
void wrong;
