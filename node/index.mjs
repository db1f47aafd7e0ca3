// The ES module entry: the same exports as the CommonJS entry (dist/index.js).
import cjs from "./dist/index.js";

export const {
  Redlock, Lock, HeldLock, Cluster, Sentinel,
  RedlockError, LockBusyError, NoQuorumError, RestartGuardError, LockLostError, StaleTokenError,
  ResourceError, ConfigError, ExpiredBeforeUseError, ModuleNotLoadedError, PermissionDeniedError,
  LockStateError, metrics,
} = cjs;
