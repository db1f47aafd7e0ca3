/**
 * `Lock` (one acquisition, released by `release()` or `await using`) and
 * `HeldLock` (what a `using()` routine gets), over the addon's objects.
 */

import { fromNative, ConfigError } from "./errors.js";
import { type ClusterMember, describe, DAY, millis } from "./options.js";
import type { Native } from "./native.js";

/** Where a fenced command goes: a server's URL, or a Redis Cluster (`Cluster([...seeds])`). */
export type Resource = string | ClusterMember;

/** One argument of a fenced command; numbers and bigints are sent as their decimal text. */
export type CommandArg = string | Buffer | Uint8Array | number | bigint;

/**
 * A reply of a fenced command, converted as ioredis does where it can: nil
 * `null`, integer `number` (a `bigint` beyond 2^53), bulk string `string`
 * (a `Buffer` when it is not UTF-8), status `string`, array; under RESP3
 * also a map (plain object), double and boolean. An error inside an array
 * is an `Error` in it.
 */
export type RedisReply =
  | null
  | number
  | bigint
  | string
  | Buffer
  | boolean
  | Error
  | RedisReply[]
  | { [key: string]: RedisReply };

/** What every held lock has: its name, token and validity, and fenced commands. */
export interface LockInfo {
  /** The lock's name. */
  readonly name: string;
  /** The fencing token: higher than every token handed out before for this name. */
  readonly token: bigint;
  /** Milliseconds of validity left (0 once lost or released). */
  readonly validity: number;
  /**
   * Runs `command` on `resource` (a server with the module loaded) fenced by
   * this lock's token on `guard` (`REDLOCK.FENCED`): the command's own reply.
   * Rejects with `StaleTokenError` when the guard has seen a newer token
   * (nothing ran), `ResourceError` otherwise. Never retried.
   */
  fenced(resource: Resource, guard: string, ...command: CommandArg[]): Promise<RedisReply>;
  /**
   * Runs every command, each fenced by this lock's token on `guard`, in one
   * `MULTI`/`EXEC`: their replies. A stale token: `StaleTokenError`, none ran.
   */
  fencedTransaction(resource: Resource, guard: string, commands: readonly (readonly CommandArg[])[]): Promise<RedisReply[]>;
  /** Shows this lock's token to `guard` (`REDLOCK.GUARD`) so that older holders are refused: the guard's highest token. */
  announce(resource: Resource, guard: string): Promise<bigint>;
}

/** The addon's side of a held lock. */
interface NativeHeld {
  readonly key: string;
  readonly token: bigint;
  validity(): number;
  fenced(target: string | string[], guard: string, args: (string | Buffer)[]): Promise<unknown>;
  fencedTransaction(target: string | string[], guard: string, commands: (string | Buffer)[][]): Promise<unknown>;
  announce(target: string | string[], guard: string): Promise<bigint>;
}

/** Runs an addon call, turning its errors into the package's classes. */
export async function call<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw fromNative(error);
  }
}

function target(resource: unknown): string | string[] {
  if (typeof resource === "string" && resource.length > 0) {
    return resource;
  }
  if (typeof resource === "object" && resource !== null && Array.isArray((resource as ClusterMember).cluster)) {
    const seeds = (resource as ClusterMember).cluster;
    if (seeds.length > 0 && seeds.every((s) => typeof s === "string")) {
      return [...seeds];
    }
  }
  throw new ConfigError(`resource must be a URL or Cluster([...seeds]), got ${describe(resource)}`, "resource");
}

function guardName(guard: unknown): string {
  if (typeof guard !== "string" || guard.length === 0) {
    throw new ConfigError(`guard must be a non-empty string (a key on the resource), got ${describe(guard)}`, "guard");
  }
  return guard;
}

function commandArgs(command: readonly unknown[], option: string): (string | Buffer)[] {
  if (!Array.isArray(command) || command.length === 0) {
    throw new ConfigError(`${option} needs a command name and its arguments`, option);
  }
  return command.map((arg: unknown, i) => {
    if (typeof arg === "string") return arg;
    if (typeof arg === "number" && Number.isFinite(arg)) return String(arg);
    if (typeof arg === "bigint") return arg.toString();
    if (Buffer.isBuffer(arg)) return arg;
    if (arg instanceof Uint8Array) return Buffer.from(arg.buffer, arg.byteOffset, arg.byteLength);
    throw new ConfigError(`${option}[${i}] must be a string, Buffer, finite number or bigint, got ${describe(arg)}`,
      option);
  });
}

/** The fenced commands of a held lock, over its addon object. */
abstract class Fenced implements LockInfo {
  abstract readonly name: string;
  abstract readonly token: bigint;
  abstract readonly validity: number;
  protected abstract held(): NativeHeld;

  async fenced(resource: Resource, guard: string, ...command: CommandArg[]): Promise<RedisReply> {
    const t = target(resource);
    const g = guardName(guard);
    const args = commandArgs(command, "command");
    return (await call(() => this.held().fenced(t, g, args))) as RedisReply;
  }

  async fencedTransaction(resource: Resource, guard: string,
    commands: readonly (readonly CommandArg[])[]): Promise<RedisReply[]> {
    const t = target(resource);
    const g = guardName(guard);
    if (!Array.isArray(commands) || commands.length === 0) {
      throw new ConfigError("commands must be a non-empty array of commands", "commands");
    }
    const list = commands.map((c, i) => commandArgs(c, `commands[${i}]`));
    return (await call(() => this.held().fencedTransaction(t, g, list))) as RedisReply[];
  }

  async announce(resource: Resource, guard: string): Promise<bigint> {
    const t = target(resource);
    const g = guardName(guard);
    return call(() => this.held().announce(t, g));
  }
}

/**
 * One acquisition: its name, fencing token and validity. Pass the token to
 * the protected resource with every operation (or use `fenced`). Release it
 * with `release()`, or declare it with `await using` to release it when the
 * scope ends. A `Lock` garbage-collected while held is released in the
 * background.
 */
export class Lock extends Fenced implements AsyncDisposable {
  readonly #native: Native.NativeLock;
  /** The lock's name. */
  readonly name: string;
  /** The fencing token. */
  readonly token: bigint;

  /** @internal Made by `Redlock.acquire` and `tryAcquire`. */
  constructor(native: Native.NativeLock) {
    super();
    this.#native = native;
    this.name = native.key;
    this.token = native.token;
  }

  protected held(): NativeHeld {
    return this.#native;
  }

  /** Milliseconds of validity left: 0 once it ran out, after a failed extension, and once released. */
  get validity(): number {
    return this.#native.validity();
  }

  /** `"held"`, `"busy"` (an extend or release is running), `"released"` or `"detached"`. */
  get state(): "held" | "busy" | "released" | "detached" {
    return this.#native.state() as "held" | "busy" | "released" | "detached";
  }

  /**
   * Extends the lease to `ttl` ms from now on a quorum of nodes. After any
   * error, stop using the token (`validity` is 0 then).
   */
  async extend(ttl: number): Promise<void> {
    const ms = millis(ttl, "ttl", 1, DAY);
    await call(() => this.#native.extend(ms));
  }

  /** Releases the lock on every node: true when it was still held, false when its lease had run out. */
  release(): Promise<boolean> {
    // Not `async`: the promise of `call` is handed on as it is (an `async`
    // return of it would add two turns of the microtask queue per call).
    return call(() => this.#native.release());
  }

  /**
   * Stops tracking the lock without releasing it and returns its owner id,
   * for `Redlock.releaseOwner` later. The owner id is a secret: anyone who
   * has it can release the lock.
   */
  detach(): string {
    try {
      return this.#native.detach();
    } catch (error) {
      throw fromNative(error);
    }
  }

  /** Releases the lock unless it was already released or detached (`await using`). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#native.state() === "held") {
      await this.release();
    }
  }

  /** Name and token only (the owner id is never shown). */
  toJSON(): { name: string; token: string } {
    return { name: this.name, token: this.token.toString() };
  }
}

/**
 * The lock a `using()` routine gets: kept extended in the background while
 * the routine runs, released when it ends. `lost` turns true when an
 * extension failed or the validity ran out; the routine's `AbortSignal`
 * aborts then.
 */
export class HeldLock extends Fenced {
  readonly #native: Native.NativeGuard;
  /** The lock's name. */
  readonly name: string;
  /** The fencing token. */
  readonly token: bigint;

  /** @internal Made by `Redlock.using`. */
  constructor(native: Native.NativeGuard) {
    super();
    this.#native = native;
    this.name = native.key;
    this.token = native.token;
  }

  protected held(): NativeHeld {
    return this.#native;
  }

  /** Milliseconds of validity left (follows the background extensions); 0 once lost. */
  get validity(): number {
    return this.#native.validity();
  }

  /** Whether the lock was lost. */
  get lost(): boolean {
    return this.#native.isLost;
  }

  /** Name and token only. */
  toJSON(): { name: string; token: string } {
    return { name: this.name, token: this.token.toString() };
  }
}
