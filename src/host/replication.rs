//! When the effect of a command must be replicated, and when it provably
//! cannot matter.
//!
//! Every change is sent to replicas and the AOF as `REDLOCK.APPLY`
//! (`RM_Replicate`), which costs Redis a command lookup by name on every
//! call. An effect that nobody will ever read can be skipped. That is the
//! case while nothing below has happened since the module loaded:
//! - a fork. A full sync forks before the replica takes the stream, and so
//!   does the rewrite that `CONFIG SET appendonly yes` starts: the fork's
//!   snapshot has every lock as it is, and effects after it must go to the
//!   replica's buffer or the new AOF.
//! - a replica change or a role change.
//! - the AOF being on, or the server being a replica or having a
//!   replication backlog, when the module loaded or its data finished
//!   loading. A partial resync needs a backlog, which only exists after a
//!   full sync (a fork), or because the server was a replica, or was loaded
//!   with one (a master restarted from its RDB may accept its old replicas'
//!   partial resyncs).
//!
//! So the skip ends for good at the first of these. "No replica is
//! connected now" is not enough: a backlog outlives a disconnected replica,
//! which comes back with a partial resync and would miss what was skipped
//! meanwhile.
//!
//! The AOF needs no check per command. After the load-time check, the AOF
//! can only be turned on by `CONFIG SET appendonly yes` (Redis's
//! `startAppendOnly`), which either forks its rewrite at once (the fork ends
//! the skip before the next command), or, inside `MULTI` or while another
//! child runs, schedules it. While it is scheduled the server writes
//! effects to no file (it appends to the AOF only when the AOF is on, or
//! while its own rewrite child runs), and the rewrite's later fork has them
//! in its snapshot. A replica that finishes a sync restarts its AOF, but a
//! replica never skips.
//!
//! `tests/replication_skip.rs` shows each case, also with two loosened
//! rules (test builds) under which the replica or the AOF then lacks locks:
//! "replicate only while a replica is online", and the module's rule
//! without the fork.

#[cfg(feature = "test-hooks")]
use std::sync::atomic::AtomicU8;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use redis_module::{Context, ContextFlags, RedisValue};

/// No replica can have taken this node's stream since the module loaded.
static NOBODY_LISTENS: AtomicBool = AtomicBool::new(true);
/// Effects left unreplicated so far.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Whether the effect of the current command must be replicated.
pub fn needed(ctx: &Context) -> bool {
    #[cfg(feature = "test-hooks")]
    if rule() == Rule::Naive {
        return replicas_online_now(ctx) > 0;
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = ctx;
    if !NOBODY_LISTENS.load(Relaxed) {
        return true;
    }
    SKIPPED.fetch_add(1, Relaxed);
    false
}

/// Whether clients are paused now (`CLIENT PAUSE`, `FAILOVER`, a shutdown
/// waiting for its replicas). Nothing may be propagated then: Redis asserts
/// it (the dataset must hold still for a failover), so what the module
/// writes from a timer waits for the pause to end.
pub fn writes_paused() -> bool {
    // SAFETY: a plain module API call (on the main thread, from a timer or
    // an event).
    unsafe { redis_module::raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0) }
}

/// From now on, every effect is replicated.
pub fn someone_may_listen() {
    NOBODY_LISTENS.store(false, Relaxed);
}

/// The server forked (a full sync, an AOF rewrite, a save): from the
/// snapshot on, every effect is replicated.
pub fn forked() {
    #[cfg(feature = "test-hooks")]
    if rule() == Rule::NoForks {
        return;
    }
    someone_may_listen();
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

/// Checks the server's state (at load, and when loading data ends): with
/// the AOF on, every effect is written to it; a replica, or a master with a
/// replication backlog, may serve a partial resync. In each case nothing
/// may be skipped.
pub fn check_server(ctx: &Context) {
    if ctx.get_flags().contains(ContextFlags::AOF) {
        someone_may_listen();
    }
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

/// Test builds: which rule decides (see [`set_rule`]).
#[cfg(feature = "test-hooks")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The module's rule.
    Safe = 0,
    /// Replicate only while a replica is online (shown wrong by the tests).
    Naive = 1,
    /// The module's rule without the fork (shown wrong by the tests).
    NoForks = 2,
}

#[cfg(feature = "test-hooks")]
static RULE: AtomicU8 = AtomicU8::new(Rule::Safe as u8);

#[cfg(feature = "test-hooks")]
fn rule() -> Rule {
    match RULE.load(Relaxed) {
        1 => Rule::Naive,
        2 => Rule::NoForks,
        _ => Rule::Safe,
    }
}

/// Test builds: switches to one of the loosened rules, or back.
#[cfg(feature = "test-hooks")]
pub fn set_rule(rule: Rule) {
    RULE.store(rule as u8, Relaxed);
}
