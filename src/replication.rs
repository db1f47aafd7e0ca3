//! When the effect of a command must be replicated, and when it provably
//! cannot matter.
//!
//! Every change is sent to replicas and the AOF as `REDLOCK.APPLY`
//! (`RM_Replicate`), which costs Redis a command lookup by name on every
//! call. An effect that nobody will ever read can be skipped. That is the
//! case while both hold:
//! - the AOF is off now (checked on every command: `CONFIG SET appendonly
//!   yes` starts a rewrite that writes every lock as it is, and every later
//!   effect is replicated);
//! - no replica has ever been able to take this node's stream since the
//!   module loaded. A replica gets the stream only after a full sync, which
//!   forks (the fork's snapshot has every lock as it is; effects after it
//!   must go to the replica's buffer); a partial resync needs a backlog,
//!   which only exists after such a sync, or because the server was a
//!   replica, or was loaded with one (a master restarted from its RDB may
//!   accept its old replicas' partial resyncs). So the skip ends for good at
//!   the first fork, replica change or role change, and is never allowed when
//!   the server was a replica or had a replication backlog when the module
//!   loaded or its data finished loading.
//!
//! "No replica is connected now" is not enough: a backlog outlives a
//! disconnected replica, which comes back with a partial resync and would
//! miss what was skipped meanwhile. `tests/replication_skip.rs` shows each
//! case, also with the naive rule (test builds), where the replica or the
//! AOF then lacks locks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use redis_module::{Context, ContextFlags, RedisValue};

/// No replica can have taken this node's stream since the module loaded.
static NOBODY_LISTENS: AtomicBool = AtomicBool::new(true);
/// Effects left unreplicated so far.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Whether the effect of the current command must be replicated.
pub fn needed(ctx: &Context) -> bool {
    #[cfg(feature = "test-hooks")]
    if NAIVE_RULE.load(Relaxed) {
        return replicas_online_now(ctx) > 0;
    }
    if !NOBODY_LISTENS.load(Relaxed) || ctx.get_flags().contains(ContextFlags::AOF) {
        return true;
    }
    SKIPPED.fetch_add(1, Relaxed);
    false
}

/// From now on, every effect is replicated.
pub fn someone_may_listen() {
    NOBODY_LISTENS.store(false, Relaxed);
}

/// Whether effects may still be skipped (`INFO`).
pub fn skipping_allowed() -> bool {
    NOBODY_LISTENS.load(Relaxed)
}

/// Effects left unreplicated so far (`INFO`).
pub fn skipped() -> u64 {
    SKIPPED.load(Relaxed)
}

fn replication_info(ctx: &Context) -> String {
    match ctx.call("INFO", &["replication"]) {
        Ok(RedisValue::SimpleString(s)) | Ok(RedisValue::BulkString(s)) => s,
        Ok(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(RedisValue::BulkRedisString(s)) => s.to_string_lossy(),
        // Unknown: read as "not a plain master", so nothing is skipped.
        _ => String::new(),
    }
}

/// Checks the server's replication state (at load, and when loading data
/// ends): a replica, or a master with a replication backlog, may serve a
/// partial resync, so nothing may be skipped.
pub fn check_server(ctx: &Context) {
    let info = replication_info(ctx);
    let is_master = info.lines().any(|l| l.trim() == "role:master");
    let backlog = info.lines().any(|l| l.trim() == "repl_backlog_active:1");
    if !is_master || backlog {
        someone_may_listen();
    }
}

/// Replicas in the `online` state now, from `INFO replication` (test builds:
/// the naive rule).
#[cfg(feature = "test-hooks")]
fn replicas_online_now(ctx: &Context) -> usize {
    replication_info(ctx)
        .lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}

/// Test builds: replicate only while a replica is online (the naive rule
/// that the tests show to be wrong).
#[cfg(feature = "test-hooks")]
static NAIVE_RULE: AtomicBool = AtomicBool::new(false);

/// Test builds: switches the naive rule on or off.
#[cfg(feature = "test-hooks")]
pub fn set_naive_rule(on: bool) {
    NAIVE_RULE.store(on, Relaxed);
}
