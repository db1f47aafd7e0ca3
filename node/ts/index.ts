/**
 * redlock-fenced: Redlock with fencing tokens for Node.js, over the
 * project's Rust quorum client (one implementation of the algorithm; this
 * package adds the JavaScript API).
 */

export { Redlock } from "./redlock.js";
export type { AcquireOptions, NodeView, TryAcquireOptions, UsingOptions } from "./redlock.js";
export { HeldLock, Lock } from "./lock.js";
export type { CommandArg, LockInfo, RedisReply, Resource } from "./lock.js";
export { metrics } from "./metrics.js";
export type { MetricSeries } from "./metrics.js";
export { Cluster, Sentinel } from "./options.js";
export type {
  ClusterMember, Member, RedlockOptions, RetryOptions, SentinelMember, SentinelOptions, TlsOptions,
} from "./options.js";
export {
  ConfigError, ExpiredBeforeUseError, LockBusyError, LockLostError, LockStateError, ModuleNotLoadedError,
  NoQuorumError, PermissionDeniedError, RedlockError, ResourceError, RestartGuardError, StaleTokenError,
} from "./errors.js";
export type { NodeFailure } from "./errors.js";
