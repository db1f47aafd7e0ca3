/**
 * The options of `Redlock.connect` and of each call, checked here before
 * anything reaches the addon: a bad value is a `ConfigError` that names the
 * option. Durations are milliseconds.
 */

import { ConfigError } from "./errors.js";

/** One day, ms: the longest ttl or wait (the module's ceiling for `redlock.max-ttl-ms`). */
export const DAY = 86_400_000;

/** A member of the quorum that is a Redis Cluster, given by some of its nodes' URLs. */
export interface ClusterMember {
  /** The seed URLs. */
  readonly cluster: readonly string[];
}

/**
 * A Redis Cluster member (one vote, whichever shard holds the key), given by
 * the URLs of one or more of its nodes: `Cluster(["redis://10.0.1.1:7000", …])`.
 */
export function Cluster(seeds: readonly string[]): ClusterMember {
  if (!Array.isArray(seeds)) {
    throw new ConfigError("Cluster(seeds) takes an array of seed URLs", "members");
  }
  return Object.freeze({ cluster: Object.freeze([...seeds]) });
}

/** The data nodes' settings of a {@link Sentinel} member. */
export interface SentinelOptions {
  /** ACL user of the data nodes (the sentinels keep the credentials of their URLs). */
  dataUser?: string;
  /** Password of the data nodes. */
  dataPassword?: string;
  /** The data nodes serve TLS (`rediss://`; the client's `tls` files apply). */
  dataTls?: boolean;
}

/** A member of the quorum that is one master with replicas behind Redis Sentinel. */
export interface SentinelMember {
  /** The master's name in Sentinel. */
  readonly sentinel: string;
  /** The sentinels' URLs. */
  readonly sentinels: readonly string[];
  /** The data nodes' settings. */
  readonly data: Readonly<SentinelOptions>;
}

/**
 * A Sentinel member (one vote, like a node): the master's name in Sentinel
 * and the URLs of some of the sentinels, `Sentinel("locks", ["redis://10.0.0.1:26379", …])`.
 * The client asks the sentinels for the master and follows failovers. With
 * `redlock.sync-replicas` set on its nodes, every grant is confirmed by every
 * replica before it counts, and a failover keeps the locks.
 */
export function Sentinel(name: string, sentinels: readonly string[], options?: SentinelOptions): SentinelMember {
  if (typeof name !== "string" || name.length === 0) {
    throw new ConfigError("Sentinel(name, sentinels) needs the master's name as in `sentinel monitor NAME …`", "members");
  }
  if (!Array.isArray(sentinels) || sentinels.length === 0) {
    throw new ConfigError("Sentinel(name, sentinels) takes a non-empty array of sentinel URLs", "members");
  }
  const o = optionsObject(options, "Sentinel options");
  checkKeys(o, ["dataUser", "dataPassword", "dataTls"], "Sentinel options");
  const dataUser = stringOption(o.dataUser, "dataUser");
  const dataPassword = stringOption(o.dataPassword, "dataPassword");
  const dataTls = o.dataTls ?? false;
  if (typeof dataTls !== "boolean") {
    throw new ConfigError(`dataTls must be a boolean, got ${describe(dataTls)}`, "dataTls");
  }
  return Object.freeze({
    sentinel: name,
    sentinels: Object.freeze([...sentinels]),
    data: Object.freeze({ dataUser, dataPassword, dataTls }),
  });
}

/** A node URL (`redis://host:port`, `rediss://…`), a {@link Cluster} or a {@link Sentinel}. */
export type Member = string | ClusterMember | SentinelMember;

/** How `acquire` without `wait` retries a busy lock (or no quorum, or a restart guard). */
export interface RetryOptions {
  /** Total attempts, at least 1 (default 3). */
  attempts?: number;
  /** Pause between attempts, ms (default 100). */
  baseDelay?: number;
  /** Upper bound of a random extra pause, ms (default 100). */
  jitter?: number;
}

/** PEM files for `rediss://` nodes (and `rediss://` resources of fenced commands). */
export interface TlsOptions {
  /** The CA that signed the nodes' certificates (else the system's trust store). */
  ca?: string;
  /** Client certificate for mutual TLS (with `key`). */
  cert?: string;
  /** Client private key for mutual TLS (with `cert`). */
  key?: string;
}

/** The options of {@link Redlock.connect}; all optional. */
export interface RedlockOptions {
  /** Default lease of `acquire`, `tryAcquire` and `using` when a call names none, ms. */
  ttl?: number;
  /** How `acquire` without `wait` retries. */
  retry?: RetryOptions;
  /** Bound on one node's reply, ms (default 100); keep it well below your ttls. */
  nodeTimeout?: number;
  /** Bound on opening a connection and checking for the module, ms (default 1000). */
  connectTimeout?: number;
  /**
   * Bound on the replica-sync check's `WAIT` on a master with
   * `redlock.sync-replicas` set, on top of `nodeTimeout`, ms (default 250).
   */
  syncTimeout?: number;
  /** Share of the ttl kept as margin for clock drift, plus 2 ms (default 0.01). */
  driftFactor?: number;
  /** Send the client's clock as a floor, so tokens keep increasing when a node loses its counter (default true). */
  clockFloor?: boolean;
  /** PEM files for TLS. */
  tls?: TlsOptions;
  /** ACL user for every node URL that names none. */
  username?: string;
  /** Password for every node URL that names none (with `username`, or the default user). */
  password?: string;
}

/** What the addon's `connect` takes. */
export interface NativeOptions {
  nodeTimeout: number;
  connectTimeout: number;
  retryAttempts: number;
  retryBaseDelay: number;
  retryJitter: number;
  driftFactor: number;
  clockFloor: boolean;
  tlsCaFile?: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  syncTimeout: number;
}

/** A Sentinel member as the addon takes it. */
export interface NativeSentinel {
  name: string;
  sentinels: string[];
  dataUser?: string;
  dataPassword?: string;
  dataTls: boolean;
}

/** node-redlock's settings, named in the error when one is passed by habit. */
const NODE_REDLOCK: Record<string, string> = {
  retryCount: "retry.attempts (attempts = retryCount + 1)",
  retryDelay: "retry.baseDelay",
  retryJitter: "retry.jitter",
  automaticExtensionThreshold: "nothing: using() extends every ttl / 3",
};

/** Refuses keys of `object` not in `known`, naming the first one. */
export function checkKeys(object: object, known: readonly string[], where: string): void {
  for (const key of Object.keys(object)) {
    if (!known.includes(key)) {
      const hint = NODE_REDLOCK[key] ? ` (node-redlock's ${key} is ${NODE_REDLOCK[key]} here)` : "";
      const name = where ? `${where}.${key}` : key;
      throw new ConfigError(`unknown option ${name}${hint}; known: ${known.join(", ")}`, name);
    }
  }
}

/** `value` as an object of options (`undefined` is `{}`). */
export function optionsObject<T extends object>(value: T | undefined, what: string): T {
  if (value === undefined) {
    return {} as T;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ConfigError(`${what} must be an object, got ${describe(value)}`, what);
  }
  return value;
}

/** A short, secret-free description of a bad value for a message. */
export function describe(value: unknown): string {
  if (typeof value === "string") {
    return `a string of ${value.length} characters`;
  }
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") {
    return `${typeof value} ${String(value)}`;
  }
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

/** A duration in ms: a finite number from `min` to `max`. */
export function millis(value: unknown, option: string, min: number, max = DAY): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max) {
    throw new ConfigError(
      `${option} must be a number of milliseconds from ${min} to ${max}, got ${describe(value)}`, option);
  }
  return value;
}

/** A lock name: a non-empty string. */
export function lockName(value: unknown, option = "name"): string {
  if (typeof value !== "string" || value.length === 0) {
    throw new ConfigError(`${option} must be a non-empty string, got ${describe(value)}`, option);
  }
  return value;
}

/** An `AbortSignal` or nothing. */
export function signalOption(value: unknown, option = "signal"): AbortSignal | undefined {
  if (value === undefined) {
    return undefined;
  }
  if (!(value instanceof AbortSignal)) {
    throw new ConfigError(`${option} must be an AbortSignal, got ${describe(value)}`, option);
  }
  return value;
}

function stringOption(value: unknown, option: string): string | undefined {
  if (value === undefined) {
    return undefined;
  }
  if (typeof value !== "string" || value.length === 0) {
    throw new ConfigError(`${option} must be a non-empty string, got ${describe(value)}`, option);
  }
  return value;
}

/** A node URL with the client-wide credentials added when it names none. */
function withCredentials(url: string, option: string, username?: string, password?: string): string {
  if (!/^rediss?:\/\//i.test(url)) {
    throw new ConfigError(`${option} must be a redis:// or rediss:// URL`, option);
  }
  if (username === undefined && password === undefined) {
    return url;
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`${option} is not a valid URL`, option);
  }
  if (parsed.username !== "" || parsed.password !== "") {
    return url; // The URL's own credentials win.
  }
  parsed.username = username === undefined ? "" : encodeURIComponent(username);
  parsed.password = password === undefined ? "" : encodeURIComponent(password);
  return parsed.toString();
}

/** The members as the addon takes them: URLs, arrays of a cluster's seed URLs, or Sentinel members. */
export function members(
  value: unknown, username?: string, password?: string,
): (string | string[] | NativeSentinel)[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new ConfigError(
      "members must be a non-empty array of node URLs or Cluster([...]) members (5 independent nodes is the usual setup)",
      "members");
  }
  return value.map((member: unknown, i) => {
    const option = `members[${i}]`;
    if (typeof member === "string") {
      return withCredentials(member, option, username, password);
    }
    if (typeof member === "object" && member !== null && Array.isArray((member as ClusterMember).cluster)) {
      const seeds = (member as ClusterMember).cluster;
      if (seeds.length === 0) {
        throw new ConfigError(`${option}: a cluster member needs at least one seed URL`, option);
      }
      return seeds.map((seed, j) => {
        if (typeof seed !== "string") {
          throw new ConfigError(`${option}.cluster[${j}] must be a URL string`, option);
        }
        return withCredentials(seed, `${option}.cluster[${j}]`, username, password);
      });
    }
    if (typeof member === "object" && member !== null && typeof (member as SentinelMember).sentinel === "string") {
      const m = member as SentinelMember;
      return {
        name: m.sentinel,
        sentinels: m.sentinels.map((url, j) => {
          if (typeof url !== "string" || !/^rediss?:\/\//i.test(url)) {
            throw new ConfigError(`${option}.sentinels[${j}] must be a redis:// or rediss:// URL`, option);
          }
          return url;
        }),
        dataUser: m.data.dataUser,
        dataPassword: m.data.dataPassword,
        dataTls: m.data.dataTls ?? false,
      };
    }
    throw new ConfigError(`${option} must be a URL string, Cluster([...]) or Sentinel(...), got ${describe(member)}`,
      option);
  });
}

/** The checked options of `connect`, and its default ttl. */
export function connectOptions(value: RedlockOptions | undefined): { native: NativeOptions; ttl?: number } {
  const o = optionsObject(value, "options");
  checkKeys(o, ["ttl", "retry", "nodeTimeout", "connectTimeout", "syncTimeout", "driftFactor", "clockFloor",
    "tls", "username", "password"], "");
  const retry = optionsObject(o.retry, "retry");
  checkKeys(retry, ["attempts", "baseDelay", "jitter"], "retry");
  const attempts = retry.attempts ?? 3;
  if (typeof attempts !== "number" || !Number.isInteger(attempts) || attempts < 1 || attempts > 1_000_000) {
    throw new ConfigError(`retry.attempts must be a whole number from 1 to 1000000, got ${describe(attempts)}`,
      "retry.attempts");
  }
  const drift = o.driftFactor ?? 0.01;
  if (typeof drift !== "number" || !Number.isFinite(drift) || drift < 0 || drift >= 1) {
    throw new ConfigError(`driftFactor must be a number in 0 ≤ x < 1, got ${describe(drift)}`, "driftFactor");
  }
  const clockFloor = o.clockFloor ?? true;
  if (typeof clockFloor !== "boolean") {
    throw new ConfigError(`clockFloor must be a boolean, got ${describe(clockFloor)}`, "clockFloor");
  }
  const tls = optionsObject(o.tls, "tls");
  checkKeys(tls, ["ca", "cert", "key"], "tls");
  const native: NativeOptions = {
    nodeTimeout: millis(o.nodeTimeout ?? 100, "nodeTimeout", 1),
    syncTimeout: millis(o.syncTimeout ?? 250, "syncTimeout", 1),
    connectTimeout: millis(o.connectTimeout ?? 1000, "connectTimeout", 1),
    retryAttempts: attempts,
    retryBaseDelay: millis(retry.baseDelay ?? 100, "retry.baseDelay", 0),
    retryJitter: millis(retry.jitter ?? 100, "retry.jitter", 0),
    driftFactor: drift,
    clockFloor,
  };
  const ca = stringOption(tls.ca, "tls.ca");
  const cert = stringOption(tls.cert, "tls.cert");
  const key = stringOption(tls.key, "tls.key");
  if ((cert === undefined) !== (key === undefined)) {
    throw new ConfigError("tls.cert and tls.key go together: give both or neither", cert ? "tls.key" : "tls.cert");
  }
  if (ca !== undefined) native.tlsCaFile = ca;
  if (cert !== undefined) native.tlsCertFile = cert;
  if (key !== undefined) native.tlsKeyFile = key;
  const ttl = o.ttl === undefined ? undefined : millis(o.ttl, "ttl", 1);
  return ttl === undefined ? { native } : { native, ttl };
}

/** The credentials of `connect`'s options, checked. */
export function credentials(value: RedlockOptions | undefined): { username?: string; password?: string } {
  const o = optionsObject(value, "options");
  const out: { username?: string; password?: string } = {};
  const username = stringOption(o.username, "username");
  if (o.password !== undefined && typeof o.password !== "string") {
    throw new ConfigError(`password must be a string, got ${typeof o.password}`, "password");
  }
  if (username !== undefined) out.username = username;
  if (o.password !== undefined) out.password = o.password;
  return out;
}
