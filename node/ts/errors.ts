/**
 * The package's error classes, and `fromNative`, the one place where an
 * error from the addon (a JSON description made by `src/errors.rs` from the
 * Rust client's error) becomes an instance of one of them. No message or
 * field ever holds a lock's owner id.
 */

/** Every error of this package. `transient` says whether trying again later may help. */
export class RedlockError extends Error {
  /** Whether trying again later may succeed (busy, no quorum, restart guard). */
  get transient(): boolean {
    return false;
  }

  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Another owner holds the lock: enough nodes said so that no quorum was possible. */
export class LockBusyError extends RedlockError {
  /** How many nodes answered "held by another owner". */
  readonly holders: number;
  /** How many nodes the client talks to. */
  readonly nodes: number;

  constructor(message: string, holders: number, nodes: number) {
    super(message);
    this.holders = holders;
    this.nodes = nodes;
  }

  override get transient(): boolean {
    return true;
  }
}

/** One node's own error in a {@link NoQuorumError}. */
export interface NodeFailure {
  /** The node's `host:port` (never its URL, which may hold a password). */
  readonly node: string;
  /** What that node answered or why it did not. */
  readonly error: string;
}

/** Too few nodes gave a usable answer to reach a quorum. */
export class NoQuorumError extends RedlockError {
  /** How many nodes the client talks to. */
  readonly nodes: number;
  /** The majority needed. */
  readonly quorum: number;
  /** How many nodes gave a usable answer. */
  readonly answered: number;
  /** Every failing node with its own error, in the order the nodes were given. */
  readonly failures: readonly NodeFailure[];

  constructor(message: string, nodes: number, quorum: number, answered: number, failures: readonly NodeFailure[]) {
    super(message);
    this.nodes = nodes;
    this.quorum = quorum;
    this.answered = answered;
    this.failures = failures;
  }

  override get transient(): boolean {
    return true;
  }
}

/** Nodes refuse new locks for a while after a restart without durable persistence. */
export class RestartGuardError extends RedlockError {
  /** The nodes in their grace window. */
  readonly nodes: readonly string[];
  /** Milliseconds until the first of them accepts locks again, when they said so. */
  readonly retryAfter: number | null;

  constructor(message: string, nodes: readonly string[], retryAfter: number | null) {
    super(message);
    this.nodes = nodes;
    this.retryAfter = retryAfter;
  }

  override get transient(): boolean {
    return true;
  }
}

/** The lock is no longer held: stop using its token. */
export class LockLostError extends RedlockError {
  /** The lock's name. */
  readonly lock: string;
  /** The lock's token, when known. */
  readonly token: bigint | null;

  constructor(message: string, lock: string, token: bigint | null) {
    super(message);
    this.lock = lock;
    this.token = token;
  }
}

/**
 * A fenced command was refused: the guard has seen a newer token of this
 * lock, so another holder took over. Nothing ran. Never retry with the same token.
 */
export class StaleTokenError extends LockLostError {
  /** The guard key on the resource. */
  readonly guard: string;
  /** The highest token the guard has seen. */
  readonly highest: bigint;

  constructor(message: string, lock: string, token: bigint, guard: string, highest: bigint) {
    super(message, lock, token);
    this.guard = guard;
    this.highest = highest;
  }
}

/** The resource server refused a fenced command otherwise, or could not be reached. */
export class ResourceError extends RedlockError {
  /** The server's reply or the connection problem. */
  readonly detail: string;

  constructor(message: string, detail: string) {
    super(message);
    this.detail = detail;
  }
}

/** A bad option or argument; `option` names it when it is one of `connect`'s or a call's. */
export class ConfigError extends RedlockError {
  /** The option that was refused (`ttl`, `retry.attempts`, `members[2]` …), or null. */
  readonly option: string | null;

  constructor(message: string, option: string | null = null) {
    super(message);
    this.option = option;
  }
}

/** The acquisition (or extension) took the whole lease: the lock was released. */
export class ExpiredBeforeUseError extends RedlockError {
  /** The lease asked for, ms. */
  readonly ttl: number;
  /** How long the round took, ms. */
  readonly elapsed: number;

  constructor(message: string, ttl: number, elapsed: number) {
    super(message);
    this.ttl = ttl;
    this.elapsed = elapsed;
  }
}

/**
 * A server runs without the redlock module: one of the lock's nodes, or
 * (`resource` is true) the resource server of a fenced command.
 */
export class ModuleNotLoadedError extends RedlockError {
  /** The server's `host:port` (empty when the call does not know it). */
  readonly node: string;
  /** True for the resource server of a fenced command. */
  readonly resource: boolean;

  constructor(message: string, node: string, resource = false) {
    super(message);
    this.node = node;
    this.resource = resource;
  }
}

/** The nodes' ACL refused the command or key. */
export class PermissionDeniedError extends RedlockError {
  /** The nodes that refused. */
  readonly nodes: readonly string[];
  /** The server's reply. */
  readonly detail: string;

  constructor(message: string, nodes: readonly string[], detail: string) {
    super(message);
    this.nodes = nodes;
    this.detail = detail;
  }
}

/** A released or detached lock, a finished `using()` routine's lock, a closed client. */
export class LockStateError extends RedlockError {}

/** The marker of an aborted native call (the caller rejects with the signal's reason). */
export const ABORTED = Symbol("aborted");

type Description = { name: string; message: string; [field: string]: unknown };

function parse(error: unknown): Description | null {
  if (!(error instanceof Error) || !error.message.startsWith("{")) {
    return null;
  }
  try {
    const parsed: unknown = JSON.parse(error.message);
    if (typeof parsed === "object" && parsed !== null && "name" in parsed && "message" in parsed) {
      return parsed as Description;
    }
  } catch {
    // Not a description: passed on unchanged.
  }
  return null;
}

const bigintOrNull = (v: unknown): bigint | null => (typeof v === "string" ? BigInt(v) : null);

/**
 * The error class instance for an error from the addon; `ABORTED` for an
 * aborted call; anything else unchanged.
 */
export function fromNative(error: unknown): unknown {
  const d = parse(error);
  if (d === null) {
    return error;
  }
  const m = d.message;
  switch (d.name) {
    case "LockBusyError":
      return new LockBusyError(m, d.holders as number, d.nodes as number);
    case "NoQuorumError":
      return new NoQuorumError(m, d.nodes as number, d.quorum as number, d.answered as number,
        Object.freeze((d.failures as NodeFailure[]).map((f) => Object.freeze({ node: f.node, error: f.error }))));
    case "RestartGuardError":
      return new RestartGuardError(m, Object.freeze(d.nodes as string[]), (d.retryAfter as number | null) ?? null);
    case "LockLostError":
      return new LockLostError(m, d.lock as string, bigintOrNull(d.token));
    case "StaleTokenError":
      return new StaleTokenError(m, d.lock as string, BigInt(d.token as string), d.guard as string,
        BigInt(d.highest as string));
    case "ResourceError":
      return new ResourceError(m, d.detail as string);
    case "ConfigError":
      return new ConfigError(m, (d.option as string | undefined) ?? null);
    case "ExpiredBeforeUseError":
      return new ExpiredBeforeUseError(m, d.ttl as number, d.elapsed as number);
    case "ModuleNotLoadedError":
      return new ModuleNotLoadedError(m, d.node as string, d.resource === true);
    case "PermissionDeniedError":
      return new PermissionDeniedError(m, Object.freeze(d.nodes as string[]), d.detail as string);
    case "LockStateError":
      return new LockStateError(m);
    case "AbortError":
      return ABORTED;
    default:
      return new RedlockError(m);
  }
}
