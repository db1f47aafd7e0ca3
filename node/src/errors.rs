//! The one place where Rust errors become JavaScript errors. A rejected
//! call carries a JSON description (`{"name": "LockBusyError", "message":
//! …, …fields}`) that the TypeScript layer turns into an instance of the
//! named class (`ts/errors.ts`, `fromNative`); no other code builds an error
//! message for JavaScript. Tokens travel as decimal strings (they become
//! `bigint`s), durations as milliseconds. The owner id never appears in
//! any of them.

use std::time::Duration;

use redlock_client::Error;
use serde_json::{json, Value};

/// The JSON description of an error, as a napi error to reject with.
fn reject(description: Value) -> napi::Error {
    napi::Error::new(napi::Status::GenericFailure, description.to_string())
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Maps a client error. `lock` is the lock's name and token when the error
/// is about a held lock (for `LockLostError.name` and `.token`).
pub(crate) fn lock_error(e: Error, lock: Option<(&str, u64)>) -> napi::Error {
    let message = e.to_string();
    reject(match e {
        Error::Busy { holders, nodes } => json!({
            "name": "LockBusyError", "message": message, "holders": holders, "nodes": nodes,
        }),
        Error::NoQuorum {
            nodes,
            quorum,
            answered,
            errors,
        } => json!({
            "name": "NoQuorumError", "message": message, "nodes": nodes, "quorum": quorum,
            "answered": answered,
            "failures": errors.into_iter().map(|(node, error)| json!({"node": node, "error": error})).collect::<Vec<_>>(),
        }),
        Error::RestartGuard { nodes, retry_after } => json!({
            "name": "RestartGuardError", "message": message, "nodes": nodes,
            "retryAfter": retry_after.map(millis),
        }),
        Error::Lost { key, .. } | Error::Lapsed { key, .. } => json!({
            "name": "LockLostError", "message": message, "lock": key,
            "token": lock.map(|(_, token)| token.to_string()),
        }),
        Error::ExpiredBeforeUse { ttl, elapsed } => json!({
            "name": "ExpiredBeforeUseError", "message": message, "ttl": millis(ttl),
            "elapsed": millis(elapsed),
        }),
        Error::ModuleNotLoaded { node } => json!({
            "name": "ModuleNotLoadedError", "message": message, "node": node, "resource": false,
        }),
        Error::ResourceModuleNotLoaded { resource, .. } => json!({
            "name": "ModuleNotLoadedError", "message": message,
            "node": resource.clone().unwrap_or_default(), "resource": true,
        }),
        Error::PermissionDenied { nodes, detail } => json!({
            "name": "PermissionDeniedError", "message": message, "nodes": nodes, "detail": detail,
        }),
        Error::InvalidArgument(_) => json!({"name": "ConfigError", "message": message}),
        Error::Stale {
            guard,
            token,
            highest,
        } => json!({
            "name": "StaleTokenError", "message": message, "lock": lock.map(|(name, _)| name),
            "token": token.to_string(), "guard": guard, "highest": highest.to_string(),
        }),
        Error::Resource(detail) => json!({
            "name": "ResourceError", "message": message, "detail": detail,
        }),
        // `Error` is non-exhaustive: a future variant is still a RedlockError.
        _ => json!({"name": "RedlockError", "message": message}),
    })
}

/// `ConfigError` naming the option (or argument) that was refused. The
/// TypeScript layer checks every option first; this keeps a bad value from
/// ever reaching a conversion that could panic.
pub(crate) fn config(option: &str, message: String) -> napi::Error {
    reject(json!({"name": "ConfigError", "message": message, "option": option}))
}

/// `LockStateError`: a released or detached lock, a closed client.
pub(crate) fn state(message: &str) -> napi::Error {
    reject(json!({"name": "LockStateError", "message": message}))
}

/// The caller's `AbortSignal` fired: the TypeScript layer rejects with the
/// signal's reason instead.
pub(crate) fn aborted() -> napi::Error {
    reject(json!({"name": "AbortError", "message": "the operation was aborted"}))
}

/// A task of the binding ended without a result (it panicked): reported as
/// a `RedlockError`, never as a crash.
pub(crate) fn internal(detail: &str) -> napi::Error {
    reject(json!({
        "name": "RedlockError",
        "message": format!("internal error in redlock-fenced: {detail}"),
    }))
}

/// One day: the longest ttl or wait a call accepts (the module's own ceiling
/// for `redlock.max-ttl-ms`).
pub(crate) const DAY_MS: f64 = 86_400_000.0;

/// A duration given in milliseconds, checked: finite, from `min` to `max`.
pub(crate) fn duration(option: &str, ms: f64, min: f64, max: f64) -> napi::Result<Duration> {
    if !ms.is_finite() || ms < min || ms > max {
        return Err(config(
            option,
            format!("{option} must be a number of milliseconds from {min} to {max}, got {ms}"),
        ));
    }
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|e| config(option, format!("{option}: {e}")))
}
