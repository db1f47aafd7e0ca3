//! The restart guard: antirez's "delayed restart", built in.
//!
//! A node that lost grants it acknowledged (a crash without `appendfsync
//! always`, a replica promoted before its master's last grants reached it)
//! must not hand the same lock to someone else while a lease it granted may
//! still run. So for a window after the module loads, and again after the
//! node is promoted from replica to master, ACQUIRE is refused with `GRACE`;
//! RELEASE, EXTEND, FENCE and INSPECT keep working.
//!
//! The window is as long as the longest lease the node may have granted.
//! `redlock.max-ttl-ms` alone is not enough: it can be raised with `CONFIG
//! SET` at run time and come back smaller from redis.conf after a crash. So
//! a grant longer than every lease recorded so far is first written to a
//! small file in the server's directory (`redlock-longest-lease-ms`, fsynced
//! before the reply), and the window and the clamp of leases loaded from
//! disk cover that length too. The record only grows. A replica learns
//! the longest lease of its master from what it receives (the node record
//! of a full sync, `REDLOCK.APPLY … node`, and every lease it is sent), and
//! records it the same way, so its promotion window and its clamp cover
//! its master's leases.
//!
//! Whether a restart may skip the window is decided once, at load, from the
//! record the previous run left ([`crate::core::run_state`]): today's
//! configuration alone says nothing about what the previous run may have
//! lost. The window of a promotion survives a restart the same way: the
//! record says a window was open, so the restart is not exempt and opens a
//! window of the full length.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use redis_module::{Context, ContextFlags};

use crate::core::error::CommandError;
use crate::core::lock::MonoMillis;
use crate::core::run_state::{self, RunState};
use crate::core::sync_rule::Promotion;
use crate::host::config::{self, MAX_TTL_LIMIT};
use crate::host::mutant::{self, Mutant};

/// File name of the longest-lease record, in the server's directory.
pub const RECORD_FILE: &str = "redlock-longest-lease-ms";
/// The guard's counter, shown by `INFO redlock` ([`crate::host::info`] reads it).
pub mod stats {
    use std::sync::atomic::AtomicU64;

    /// ACQUIREs refused by the restart guard.
    pub static GRACE_REFUSED: AtomicU64 = AtomicU64::new(0);
}

/// File name of the run record ([`crate::core::run_state`]), in the server's
/// directory.
pub const RUN_STATE_FILE: &str = "redlock-run-state";

/// What opened the current window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The module loaded (a start or restart of the server).
    Restart,
    /// The server became a master after being a replica.
    Promotion,
}

impl Reason {
    /// The words of the `GRACE` error.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::Restart => "restarted",
            Reason::Promotion => "was promoted to master",
        }
    }
}

/// Start of the current window on the monotonic clock; 0 before the load.
static WINDOW_START: AtomicU64 = AtomicU64::new(0);
/// The window length when `redlock.restart-grace-ms` is -1, fixed when the
/// window opens.
static WINDOW_DEFAULT_LEN: AtomicU64 = AtomicU64::new(0);
static WINDOW_REASON: AtomicU8 = AtomicU8::new(0);
/// The longest lease this node may have granted, as recorded durably.
static LONGEST_LEASE: AtomicU64 = AtomicU64::new(0);
/// The most a window may last, set by a promotion that only guards for the
/// rest of its master's hold (DESIGN §13); `u64::MAX` otherwise.
static WINDOW_CAP: AtomicU64 = AtomicU64::new(u64::MAX);
/// Bumped whenever a window opens, closes early or lengthens: what a master
/// announces to its replicas about its window ([`crate::host::sync`]) is
/// then out of date.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Test builds: the promotion guard can be switched off (mutation check).
static PROMOTION_GUARD: AtomicBool = AtomicBool::new(true);
static RECORD_PATH: OnceLock<PathBuf> = OnceLock::new();
static RECORD_WRITE: Mutex<()> = Mutex::new(());
/// This start may skip the restart window (decided at load).
static EXEMPT_RESTART: AtomicBool = AtomicBool::new(false);
/// This run has been durable since it started.
static DURABLE_RUN: AtomicBool = AtomicBool::new(false);
/// The run record says a window is open: the first guard check after the
/// window ends writes that it is over.
static WINDOW_MARKED_OPEN: AtomicBool = AtomicBool::new(false);
static RUN_STATE_PATH: OnceLock<PathBuf> = OnceLock::new();
static RUN_STATE_WRITE: Mutex<()> = Mutex::new(());

/// Opens the window that follows a load: reads the longest-lease record
/// and the previous run's record from the server's directory (the working
/// directory at load time), decides whether this start is exempt, and
/// writes this run's record.
pub fn on_load(ctx: &Context, now: MonoMillis) {
    let dir = std::env::current_dir().unwrap_or_default();
    let path = dir.join(RECORD_FILE);
    let recorded = match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(ms) => ms.min(MAX_TTL_LIMIT as u64),
            Err(_) => {
                ctx.log_warning(&format!(
                    "{} does not hold a number of milliseconds; ignoring it",
                    path.display()
                ));
                0
            }
        },
        Err(_) => 0,
    };
    let _ = RECORD_PATH.set(path);
    // The startup max-ttl-ms is recorded too: a restart that brings a
    // smaller one back from redis.conf must still cover this run's leases.
    // When the record cannot be written, the longest lease stays at what
    // is recorded: a grant of the startup length then tries again and is
    // refused if it still fails, never granted unrecorded.
    LONGEST_LEASE.fetch_max(recorded, Relaxed);
    let startup = config::max_ttl().max(0) as u64;
    if let Err(e) = record_lease(startup) {
        ctx.log_warning(&format!("{e}"));
    }

    // The record vouches for one AOF, so it lives in that AOF's directory:
    // a node that comes back with another (or no) AOF directory has no
    // record and waits, and two instances sharing `dir` (which must use
    // different AOF directories) do not share it.
    let aof_dir =
        config::config_get(ctx, "appenddirname").unwrap_or_else(|| "appendonlydir".into());
    let run_path = dir.join(aof_dir).join(RUN_STATE_FILE);
    let previous = std::fs::read_to_string(&run_path)
        .ok()
        .and_then(|text| RunState::parse(&text));
    let durable = is_durable(ctx);
    // A replica's data may lack its master's last grants: if it later
    // starts as a master (its config changed), that start must wait.
    let replica = ctx.get_flags().contains(ContextFlags::SLAVE);
    let exempt = run_state::restart_exempt(previous, durable) && !replica;
    let _ = RUN_STATE_PATH.set(run_path);
    DURABLE_RUN.store(durable, Relaxed);
    EXEMPT_RESTART.store(exempt, Relaxed);
    open_window(Reason::Restart, now);
    let window_open = replica || (!exempt && window_len() > 0);
    WINDOW_MARKED_OPEN.store(window_open, Relaxed);
    save_run_state(ctx, window_open);
    if previous.is_some_and(|p| p.window_open) && durable {
        ctx.log_notice(
            "the previous run stopped inside a guard window: this restart waits for a full window",
        );
    }
}

/// Writes this run's record (fsynced). When it cannot be written, the old
/// record is removed, so that no stale "durable" record exempts the next
/// start.
fn save_run_state(ctx: &Context, window_open: bool) {
    let Some(path) = RUN_STATE_PATH.get() else {
        return;
    };
    let state = RunState {
        durable: DURABLE_RUN.load(Relaxed),
        window_open,
    };
    let _serial = RUN_STATE_WRITE.lock().unwrap_or_else(|p| p.into_inner());
    let written = match path.parent() {
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| write_file(path, &state.render())),
        None => write_file(path, &state.render()),
    };
    if let Err(e) = written {
        let _ = std::fs::remove_file(path);
        if let Some(dir) = path.parent() {
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        ctx.log_warning(&format!(
            "cannot write {}: {e}; the next start will wait for the restart guard",
            path.display()
        ));
    }
}

/// Whether this start was exempt from the restart window (the previous
/// run was durable all its life and outside any window).
pub fn restart_exempt() -> bool {
    EXEMPT_RESTART.load(Relaxed)
}

/// Whether this run has been durable since it started.
pub fn durable_run() -> bool {
    DURABLE_RUN.load(Relaxed)
}

/// The server became a master: opens the window the promotion rule asks
/// for ([`crate::core::sync_rule::promotion`]), and records that it is open
/// so that a restart inside it waits for a full window. A replica that
/// every condition of the replica-sync check vouches for holds every lock
/// write a client relied on: it starts without a window (also without what
/// is left of the window of its own last start as a replica, which covered
/// nothing it lacks); one whose master was still inside a hold guards for
/// the rest of it; any other guards for the longest lease (DESIGN §7).
pub fn on_promotion(ctx: &Context, now: MonoMillis, promotion: Promotion) {
    if !PROMOTION_GUARD.load(Relaxed) {
        return;
    }
    match promotion {
        Promotion::AtOnce => {
            WINDOW_START.store(0, Relaxed);
            WINDOW_CAP.store(u64::MAX, Relaxed);
            EPOCH.fetch_add(1, Relaxed);
            return;
        }
        Promotion::Rest(ms) => {
            open_window(Reason::Promotion, now);
            WINDOW_CAP.store(ms, Relaxed);
        }
        Promotion::Guard => open_window(Reason::Promotion, now),
    }
    if window_len() > 0 {
        WINDOW_MARKED_OPEN.store(true, Relaxed);
        save_run_state(ctx, true);
    }
}

/// Changes whenever the window opens, closes early or lengthens.
pub fn epoch() -> u64 {
    EPOCH.load(Relaxed)
}

/// The node became a replica: its data may from now on lack grants its
/// master made, so the run record says a window is open until, as a master
/// again, it has passed a whole guard window.
pub fn on_demotion(ctx: &Context) {
    WINDOW_MARKED_OPEN.store(true, Relaxed);
    save_run_state(ctx, true);
}

/// After a configuration change: a run that stops being durable says so in
/// its record at once (before any later grant is acknowledged), so the next
/// start is not exempt. Becoming durable later changes nothing.
pub fn on_config_change(ctx: &Context) {
    if DURABLE_RUN.load(Relaxed) && !is_durable(ctx) {
        DURABLE_RUN.store(false, Relaxed);
        save_run_state(ctx, WINDOW_MARKED_OPEN.load(Relaxed));
    }
}

fn open_window(reason: Reason, now: MonoMillis) {
    let longest = LONGEST_LEASE
        .load(Relaxed)
        .max(config::max_ttl().max(0) as u64);
    WINDOW_DEFAULT_LEN.store(longest, Relaxed);
    WINDOW_CAP.store(u64::MAX, Relaxed);
    WINDOW_REASON.store(reason as u8, Relaxed);
    WINDOW_START.store(now.max(1), Relaxed);
    EPOCH.fetch_add(1, Relaxed);
}

/// What opened the current (or last) window.
pub fn reason() -> Reason {
    if WINDOW_REASON.load(Relaxed) == Reason::Promotion as u8 {
        Reason::Promotion
    } else {
        Reason::Restart
    }
}

/// The length of the window in ms, as configured now. By default, as long
/// as the longest lease known now: one learned after the window opened
/// (from the data loaded, from a master) lengthens it.
pub fn window_len() -> u64 {
    let configured = config::restart_grace();
    let len = if configured >= 0 {
        configured as u64
    } else {
        WINDOW_DEFAULT_LEN.load(Relaxed)
    };
    len.min(WINDOW_CAP.load(Relaxed))
}

/// A longer lease became known (recorded, learned from the data or a
/// master): a window still open covers it too; one already over does not
/// open again.
fn lengthen_open_window(ms: u64) {
    if state(crate::host::clock::mono_now()).is_some()
        && WINDOW_DEFAULT_LEN.fetch_max(ms, Relaxed) < ms
    {
        EPOCH.fetch_add(1, Relaxed);
    }
}

/// `(elapsed, remaining)` ms when `now` is inside the window.
pub fn state(now: MonoMillis) -> Option<(u64, u64)> {
    let start = WINDOW_START.load(Relaxed);
    if start == 0 {
        return None;
    }
    let elapsed = now.saturating_sub(start);
    let window = window_len();
    (elapsed < window).then(|| (elapsed, window - elapsed))
}

/// The guard for ACQUIRE. A restart whose previous run was durable for
/// its whole life (see [`crate::core::run_state`]) lost nothing it acknowledged
/// and is exempt. A promoted replica never is: replication is asynchronous,
/// so it may never have received its old master's last grants, whatever its
/// own fsync policy.
pub fn check(ctx: &Context, now: MonoMillis) -> Result<(), CommandError> {
    let Some((elapsed_ms, remaining_ms)) = state(now) else {
        if WINDOW_MARKED_OPEN.load(Relaxed)
            && !ctx.get_flags().contains(ContextFlags::SLAVE)
            && WINDOW_MARKED_OPEN.swap(false, Relaxed)
        {
            save_run_state(ctx, false);
        }
        return Ok(());
    };
    let reason = reason();
    let exempt = if mutant::on(Mutant::ConfigExemption) {
        is_durable(ctx)
    } else {
        EXEMPT_RESTART.load(Relaxed)
    };
    if reason == Reason::Restart && exempt {
        return Ok(());
    }
    stats::GRACE_REFUSED.fetch_add(1, Relaxed);
    Err(CommandError::Grace {
        reason: reason.describe(),
        elapsed_ms,
        remaining_ms,
    })
}

/// `appendonly yes`, `appendfsync always` and `no-appendfsync-on-rewrite
/// no`: with the last one set, Redis skips the fsync of acknowledged writes
/// while a child process runs (BGSAVE, a rewrite, a full sync).
fn is_durable(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::AOF)
        && config::config_get(ctx, "appendfsync").is_some_and(|v| v.eq_ignore_ascii_case("always"))
        && config::config_get(ctx, "no-appendfsync-on-rewrite")
            .is_some_and(|v| v.eq_ignore_ascii_case("no"))
}

/// The longest lease this node may have granted: what a lease loaded from
/// disk is clamped to.
pub fn longest_lease() -> u64 {
    LONGEST_LEASE
        .load(Relaxed)
        .max(config::max_ttl().max(0) as u64)
}

/// Makes sure a lease of `ttl_ms` is covered by the durable record before
/// it is granted: a lease longer than any recorded so far is written (and
/// fsynced) first. Only happens after `redlock.max-ttl-ms` was raised above
/// every earlier value, so the hot path is one atomic load. `Ok(true)` when
/// the record grew: replicas are then told (`REDLOCK.APPLY … node`).
pub fn record_lease(ttl_ms: u64) -> Result<bool, CommandError> {
    if ttl_ms <= LONGEST_LEASE.load(Relaxed) {
        return Ok(false);
    }
    let _serial = RECORD_WRITE.lock().unwrap_or_else(|p| p.into_inner());
    if ttl_ms <= LONGEST_LEASE.load(Relaxed) {
        return Ok(false);
    }
    let Some(path) = RECORD_PATH.get() else {
        return Err(CommandError::GuardRecord(
            "the module has not loaded".into(),
        ));
    };
    write_file(path, &format!("{ttl_ms}\n"))
        .map_err(|e| CommandError::GuardRecord(format!("{}: {e}", path.display())))?;
    LONGEST_LEASE.store(ttl_ms, Relaxed);
    lengthen_open_window(ttl_ms);
    Ok(true)
}

/// A lease length received from the master (or a file from one): raises
/// the longest lease, in memory at once and in the durable record as well
/// as it can (a replica must not stop applying its stream because a file
/// cannot be written; the failure is logged).
pub fn learn_lease(ctx: &Context, ms: u64) {
    if mutant::on(Mutant::ReplicaOwnLease) || ms <= LONGEST_LEASE.load(Relaxed) {
        return;
    }
    let ms = ms.min(MAX_TTL_LIMIT as u64);
    if let Err(e) = record_lease(ms) {
        LONGEST_LEASE.fetch_max(ms, Relaxed);
        lengthen_open_window(ms);
        ctx.log_warning(&format!("{e}"));
    }
}

/// Writes `text` to `path` durably: a temporary file, fsynced, renamed over
/// it, and the directory fsynced.
pub fn write_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Test builds: switches the promotion guard (a deliberately broken variant
/// for the safety suite's mutation checks).
#[cfg(feature = "test-hooks")]
pub fn set_promotion_guard(on: bool) {
    PROMOTION_GUARD.store(on, Relaxed);
}
