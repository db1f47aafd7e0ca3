/**
 * `Redlock`: the client. Every call is a Promise whose I/O runs on the
 * addon's Rust runtime; the event loop never waits on a node, and nothing
 * keeps the process alive once no call is pending.
 */

import { ABORTED, ConfigError, fromNative, LockLostError } from "./errors.js";
import { call, HeldLock, Lock } from "./lock.js";
import { native, type Native } from "./native.js";
import {
  checkKeys, connectOptions, credentials, DAY, lockName, type Member, members, millis, optionsObject,
  type RedlockOptions, signalOption,
} from "./options.js";

/** Options of {@link Redlock.acquire}. */
export interface AcquireOptions {
  /** Lease, ms (default: the client's `ttl`). */
  ttl?: number;
  /**
   * Wait up to this many ms for a busy lock, woken by the nodes when it
   * frees (no polling); without it, the client's retry policy applies.
   */
  wait?: number;
  /** Aborts the call; an aborted acquisition leaves no grant on any node. */
  signal?: AbortSignal;
}

/** Options of {@link Redlock.tryAcquire}. */
export interface TryAcquireOptions {
  /** Lease, ms (default: the client's `ttl`). */
  ttl?: number;
  /** Aborts the call; an aborted attempt leaves no grant on any node. */
  signal?: AbortSignal;
}

/** Options of {@link Redlock.using}. */
export interface UsingOptions {
  /** Lease, ms, renewed every ttl / 3 while the routine runs (default: the client's `ttl`). */
  ttl?: number;
  /** Wait up to this many ms for a busy lock (as in `acquire`). */
  wait?: number;
  /**
   * Aborts a waiting acquisition (no grant is left behind) and, once the
   * routine runs, the routine's own signal.
   */
  signal?: AbortSignal;
}

/** One member's view of a lock, from {@link Redlock.inspect}. */
export interface NodeView {
  /** `host:port`, or `cluster(host:port,…)` for a cluster member. */
  readonly node: string;
  /** `"missing"` (never locked there), `"present"` or `"error"`. */
  readonly state: "missing" | "present" | "error";
  /** Whether a live lease exists there. */
  readonly held: boolean;
  /** Ms left on the lease, when held. */
  readonly ttl: number | null;
  /** The member's fencing counter for the lock. */
  readonly token: bigint | null;
  /** Why the member did not answer usably. */
  readonly error: string | null;
  /** For a cluster member: the shard master that holds the key. */
  readonly shard: string | null;
}

/**
 * Runs an addon call that takes a cancel handle, with `signal`: an abort
 * cancels it and rejects with the signal's reason. A result that arrives
 * after the abort is given to `discard` (a lock is released) and the call
 * rejects all the same.
 */
function abortable<T>(signal: AbortSignal | undefined,
  run: (cancel: Native.CancelHandle | undefined) => Promise<T>,
  discard: (value: T) => Promise<unknown>): Promise<T> {
  return signal === undefined ? call(() => run(undefined)) : withSignal(signal, run, discard);
}

/**
 * `abortable` with a signal. Without one, `abortable` hands on the promise
 * of `call` as it is (an `async` return of it would add two turns of the
 * microtask queue to every call).
 */
async function withSignal<T>(signal: AbortSignal,
  run: (cancel: Native.CancelHandle | undefined) => Promise<T>,
  discard: (value: T) => Promise<unknown>): Promise<T> {
  signal.throwIfAborted();
  const handle = new native.CancelHandle();
  const onAbort = () => handle.cancel();
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    let value: T;
    try {
      value = await run(handle);
    } catch (error) {
      const mapped = fromNative(error);
      throw mapped === ABORTED ? signal.reason : mapped;
    }
    if (signal.aborted) {
      await discard(value).catch(() => undefined);
      throw signal.reason;
    }
    return value;
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

/**
 * A Redlock client over N independent Redis masters that run the redlock
 * module (five is the usual setup). Every acquisition gets a fencing token
 * higher than every token handed out before for that name.
 */
export class Redlock implements AsyncDisposable {
  readonly #native: Native.NativeRedlock;
  readonly #ttl: number | undefined;

  private constructor(client: Native.NativeRedlock, ttl: number | undefined) {
    this.#native = client;
    this.#ttl = ttl;
  }

  /**
   * Checks the options and connects to every member in parallel. Members
   * that are down (a minority) are connected in the background.
   *
   * Rejects with `ConfigError` (naming the option) for a bad option, URL or
   * TLS file; `ModuleNotLoadedError` when a node runs without the module;
   * `NoQuorumError` when fewer than a majority could be reached.
   */
  static async connect(members_: readonly Member[], options?: RedlockOptions): Promise<Redlock> {
    const { native: nativeOptions, ttl } = connectOptions(options);
    const { username, password } = credentials(options);
    const list = members(members_, username, password);
    const client = await call(() => native.connect(list, nativeOptions));
    return new Redlock(client, ttl);
  }

  /** The members' addresses, in the order given (`host:port`, `cluster(…)`). */
  get nodes(): string[] {
    return this.#native.nodes;
  }

  /** How many members must agree: N / 2 + 1. */
  get quorum(): number {
    return this.#native.quorum;
  }

  #ttlOf(value: unknown): number {
    if (value === undefined) {
      if (this.#ttl === undefined) {
        throw new ConfigError("ttl is required: pass { ttl } to the call or to Redlock.connect's options", "ttl");
      }
      return this.#ttl;
    }
    return millis(value, "ttl", 1, DAY);
  }

  /**
   * Takes the lock. Without `wait`, retries per the client's retry policy
   * and rejects with `LockBusyError` when it stays busy; with `wait`, waits
   * up to that many ms, woken by the nodes when the lock frees.
   */
  async acquire(name: string, options?: AcquireOptions): Promise<Lock> {
    const key = lockName(name);
    const o = optionsObject(options, "options");
    checkKeys(o, ["ttl", "wait", "signal"], "");
    const ttl = this.#ttlOf(o.ttl);
    const wait = o.wait === undefined ? undefined : millis(o.wait, "wait", 0, DAY);
    const signal = signalOption(o.signal);
    const lock = await abortable(signal, (cancel) => this.#native.acquire(key, ttl, wait, cancel),
      (l) => l.release());
    return new Lock(lock);
  }

  /** One attempt, no retry: `null` when another owner holds the lock. */
  async tryAcquire(name: string, options?: TryAcquireOptions): Promise<Lock | null> {
    const key = lockName(name);
    const o = optionsObject(options, "options");
    checkKeys(o, ["ttl", "signal"], "");
    const ttl = this.#ttlOf(o.ttl);
    const signal = signalOption(o.signal);
    const lock = await abortable(signal, (cancel) => this.#native.tryAcquire(key, ttl, cancel),
      async (l) => l?.release());
    return lock === null ? null : new Lock(lock);
  }

  /**
   * Takes the lock, runs `routine(lock, signal)` while a background task
   * extends it every ttl / 3, and releases it when the routine settles.
   * Resolves with the routine's value.
   *
   * When the lock is lost (an extension fails or its validity runs out
   * first), `signal` aborts with a `LockLostError` as its reason and the
   * call rejects with that error at once, even if the routine ignores the
   * signal (its later outcome is then ignored). The caller's `signal`
   * aborts a waiting acquisition, and later the routine's signal.
   */
  async using<T>(name: string, options: UsingOptions,
    routine: (lock: HeldLock, signal: AbortSignal) => Promise<T> | T): Promise<T> {
    const key = lockName(name);
    const o = optionsObject(options, "options");
    checkKeys(o, ["ttl", "wait", "signal"], "");
    const ttl = this.#ttlOf(o.ttl);
    const wait = o.wait === undefined ? undefined : millis(o.wait, "wait", 0, DAY);
    const signal = signalOption(o.signal);
    if (typeof routine !== "function") {
      throw new ConfigError("routine must be a function (lock, signal) => Promise", "routine");
    }
    const guard = await abortable(signal, (cancel) => this.#native.hold(key, ttl, wait, cancel),
      (g) => g.exit());
    const lock = new HeldLock(guard);
    const controller = new AbortController();
    const onCallerAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onCallerAbort, { once: true });
    const lostError = () => new LockLostError(
      `the lock on ${JSON.stringify(key)} was lost (an extension failed or its validity ran out): stop using its token`,
      key, lock.token);
    let lost: LockLostError | undefined;
    const lostWatch = guard.lost().then((isLost) => {
      if (isLost) {
        lost = lostError();
        controller.abort(lost);
      }
      return isLost;
    }, () => false);
    try {
      const work = Promise.resolve().then(() => routine(lock, controller.signal));
      const never = new Promise<never>(() => undefined);
      const outcome = await Promise.race([
        work.then((value) => ({ value })),
        lostWatch.then((isLost) => (isLost ? null : never)),
      ]);
      if (outcome === null || lost !== undefined || lock.lost) {
        // The routine may still run: its outcome no longer matters.
        work.catch(() => undefined);
        throw lost ?? lostError();
      }
      return outcome.value;
    } finally {
      signal?.removeEventListener("abort", onCallerAbort);
      await guard.exit();
    }
  }

  /**
   * Releases `name` for an owner id from `Lock.detach()` (e.g. in another
   * process): true when that owner held it and it is now free.
   */
  async releaseOwner(name: string, owner: string): Promise<boolean> {
    const key = lockName(name);
    if (typeof owner !== "string" || owner.length === 0) {
      throw new ConfigError("owner must be the non-empty owner id from Lock.detach()", "owner");
    }
    return call(() => this.#native.releaseOwner(key, owner));
  }

  /** Every member's view of `name` (held, ms left, counter), read-only. */
  async inspect(name: string): Promise<NodeView[]> {
    const key = lockName(name);
    const views = await call(() => this.#native.inspect(key));
    return views.map((v) => Object.freeze({
      node: v.node,
      state: v.state as NodeView["state"],
      held: v.held,
      ttl: v.ttl ?? null,
      token: v.token ?? null,
      error: v.error ?? null,
      shard: v.shard ?? null,
    }));
  }

  /** Drops the connections; later calls reject with `LockStateError`. Locks taken keep working. */
  close(): void {
    this.#native.close();
  }

  /** Whether `close()` was called. */
  get closed(): boolean {
    return this.#native.closed;
  }

  /** `close()`, for `await using redlock = await Redlock.connect(…)`. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
