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
//! disk cover that length too. The record only grows.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use redis_module::{Context, ContextFlags};

use crate::config::{self, MAX_TTL_LIMIT};
use crate::error::CommandError;
use crate::info::stats;
use crate::lock::MonoMillis;

/// File name of the longest-lease record, in the server's directory.
pub const RECORD_FILE: &str = "redlock-longest-lease-ms";

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
/// Test builds: the promotion guard can be switched off (mutation check).
static PROMOTION_GUARD: AtomicBool = AtomicBool::new(true);
static RECORD_PATH: OnceLock<PathBuf> = OnceLock::new();
static RECORD_WRITE: Mutex<()> = Mutex::new(());

/// Opens the window that follows a load: reads the longest-lease record
/// from the server's directory (the working directory at load time).
pub fn on_load(ctx: &Context, now: MonoMillis) {
    let path = std::env::current_dir()
        .unwrap_or_default()
        .join(RECORD_FILE);
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
    LONGEST_LEASE.store(recorded.max(config::max_ttl() as u64), Relaxed);
    open_window(Reason::Restart, now);
}

/// Opens a window after the server became a master.
pub fn on_promotion(now: MonoMillis) {
    if PROMOTION_GUARD.load(Relaxed) {
        open_window(Reason::Promotion, now);
    }
}

fn open_window(reason: Reason, now: MonoMillis) {
    let longest = LONGEST_LEASE
        .load(Relaxed)
        .max(config::max_ttl().max(0) as u64);
    WINDOW_DEFAULT_LEN.store(longest, Relaxed);
    WINDOW_REASON.store(reason as u8, Relaxed);
    WINDOW_START.store(now.max(1), Relaxed);
}

/// What opened the current (or last) window.
pub fn reason() -> Reason {
    if WINDOW_REASON.load(Relaxed) == Reason::Promotion as u8 {
        Reason::Promotion
    } else {
        Reason::Restart
    }
}

/// The length of the window in ms, as configured now.
pub fn window_len() -> u64 {
    let configured = config::restart_grace();
    if configured >= 0 {
        return configured as u64;
    }
    WINDOW_DEFAULT_LEN.load(Relaxed)
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

/// The guard for ACQUIRE. After a restart, a durable node (`appendonly yes`
/// with `appendfsync always`) lost nothing it acknowledged and is exempt. A
/// promoted replica never is: replication is asynchronous, so it may never
/// have received its old master's last grants, whatever its own fsync
/// policy.
pub fn check(ctx: &Context, now: MonoMillis) -> Result<(), CommandError> {
    let Some((elapsed_ms, remaining_ms)) = state(now) else {
        return Ok(());
    };
    let reason = reason();
    if reason == Reason::Restart && is_durable(ctx) {
        return Ok(());
    }
    stats::bump(&stats::GRACE_REFUSED);
    Err(CommandError::Grace {
        reason: reason.describe(),
        elapsed_ms,
        remaining_ms,
    })
}

fn is_durable(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::AOF)
        && config::config_get(ctx, "appendfsync").is_some_and(|v| v.eq_ignore_ascii_case("always"))
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
/// every earlier value, so the hot path is one atomic load.
pub fn record_lease(ttl_ms: u64) -> Result<(), CommandError> {
    if ttl_ms <= LONGEST_LEASE.load(Relaxed) {
        return Ok(());
    }
    let _serial = RECORD_WRITE.lock().unwrap_or_else(|p| p.into_inner());
    if ttl_ms <= LONGEST_LEASE.load(Relaxed) {
        return Ok(());
    }
    let Some(path) = RECORD_PATH.get() else {
        return Err(CommandError::GuardRecord(
            "the module has not loaded".into(),
        ));
    };
    write_record(path, ttl_ms)
        .map_err(|e| CommandError::GuardRecord(format!("{}: {e}", path.display())))?;
    LONGEST_LEASE.store(ttl_ms, Relaxed);
    Ok(())
}

fn write_record(path: &std::path::Path, ttl_ms: u64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    writeln!(file, "{ttl_ms}")?;
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
