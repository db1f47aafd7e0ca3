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
//!
//! The decisions are the pure [`crate::core::guard_rule::Guard`], the one
//! the simulator runs; this file keeps one of them, reads and writes the
//! files, reads the server's flags and settings, and passes the time in.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

use redis_module::{Context, ContextFlags};

use crate::core::error::CommandError;
use crate::core::guard_rule::{Guard, Settings};
use crate::core::lock::MonoMillis;
use crate::core::run_state::{self, RunState};
use crate::core::sync_rule::Promotion;
use crate::host::config::{self, MAX_TTL_LIMIT};
use crate::host::mutant::{self, Mutant};

pub use crate::core::guard_rule::Reason;

/// File name of the longest-lease record, in the server's directory.
pub const RECORD_FILE: &str = "redlock-longest-lease-ms";
/// The guard's counter, shown by `INFO redlock` ([`crate::host::info`] reads it).
pub mod stats {
    use std::sync::atomic::AtomicU64;

    /// ACQUIREs refused by the restart guard.
    pub static GRACE_REFUSED: AtomicU64 = AtomicU64::new(0);
}

/// File name of the marker that the window open is the promotion window of
/// a node that had learned nothing (it lasts the longest lease any node
/// grants, also across a restart), in the server's directory, followed by
/// `-PORT` ([`config::node_file`]).
pub const UNTAUGHT_FILE: &str = "redlock-untaught-window";
static UNTAUGHT_PATH: OnceLock<PathBuf> = OnceLock::new();

/// Makes the untaught-window marker say what the guard says.
fn save_untaught_window(ctx: &Context, marked: bool) {
    crate::host::config_file::keep_untaught(ctx, marked);
    let Some(path) = UNTAUGHT_PATH.get() else {
        return;
    };
    let result = if marked {
        write_file(path, "1\n")
    } else {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    };
    if let Err(e) = result {
        ctx.log_warning(&format!("cannot update {}: {e}", path.display()));
    }
}

/// The node's guard. The files it asks for are written while it is held,
/// so they are written in the order of its decisions.
static GUARD: Mutex<Guard> = Mutex::new(Guard::new());
static RECORD_PATH: OnceLock<PathBuf> = OnceLock::new();
/// Lease lengths learned that were longer than this node's own
/// `max-ttl-ms` (`INFO redlock`): the group's settings differ.
static LEARNED_ABOVE_OWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many lease lengths learned were longer than this node's own
/// `max-ttl-ms`.
pub fn learned_above_own() -> u64 {
    LEARNED_ABOVE_OWN.load(std::sync::atomic::Ordering::Relaxed)
}
static RUN_STATE_PATH: OnceLock<PathBuf> = OnceLock::new();

fn guard() -> MutexGuard<'static, Guard> {
    GUARD.lock().unwrap_or_else(|p| p.into_inner())
}

/// The settings the guard reads, as they are now.
fn settings() -> Settings {
    Settings {
        max_ttl_ms: config::max_ttl().max(0) as u64,
        restart_grace_ms: config::restart_grace(),
        mutants: mutant::current(),
    }
}

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
    // The marker of earlier versions had one name per directory: read when
    // this node has none of its own, moved to this node's name and
    // removed (else every later restart would read it again and wait a
    // day). Reading it is safe: it can only make this node's window
    // longer. Removing it is not quite: in a directory shared with a node
    // that has not restarted since the upgrade and is inside an untaught
    // promotion window, that node's next restart no longer knows its
    // window is a day long (it waits for its longest lease). Nodes that
    // share a directory are rare, and that window rarer.
    let untaught_path = config::node_file(ctx, UNTAUGHT_FILE);
    let old_path = dir.join(UNTAUGHT_FILE);
    let mut marked = untaught_path.exists();
    if !marked && old_path != untaught_path && old_path.exists() {
        marked = true;
        if write_file(&untaught_path, "1\n").is_ok() {
            let _ = std::fs::remove_file(&old_path);
        }
    }
    let configured = config::PROMOTED_UNTAUGHT.load(std::sync::atomic::Ordering::Relaxed) == 1;
    let marked = crate::core::guard_rule::untaught_at_load(marked, configured, mutant::current());
    guard().load_untaught_window(marked);
    // A window opened from the marker alone reaches the configuration file
    // too (a node promoted under a release without the copy, or whose write
    // of it failed), so that a new disk later inside it still waits the day.
    if crate::core::guard_rule::untaught_to_configure(marked, configured, mutant::current())
        .is_some()
    {
        config::PROMOTED_UNTAUGHT.store(1, std::sync::atomic::Ordering::Relaxed);
        crate::host::config_file::keep_after_start(ctx);
    }
    config::UNTAUGHT_KEPT.store(
        config::PROMOTED_UNTAUGHT.load(std::sync::atomic::Ordering::Relaxed),
        std::sync::atomic::Ordering::Relaxed,
    );
    let _ = UNTAUGHT_PATH.set(untaught_path);
    // The startup max-ttl-ms is recorded too: a restart that brings a
    // smaller one back from redis.conf must still cover this run's leases.
    // When the record cannot be written, the longest lease stays at what
    // is recorded: a grant of the startup length then tries again and is
    // refused if it still fails, never granted unrecorded.
    // The configuration file's copy of the record survives a new disk
    // (`guard_rule::recorded_at_load`); a record it lacks (written before
    // the copy existed, or after `max-ttl-ms` came back smaller from the
    // file or the command line) is copied to it once the load is over.
    let configured = config::longest_lease_configured();
    let startup = config::max_ttl().max(0) as u64;
    if let Some(ms) = crate::core::guard_rule::longest_to_configure(recorded, startup, configured) {
        if !mutant::on(mutant::Mutant::LoadedNotConfigured) {
            config::LONGEST_LEASE_MS.store(ms as i64, std::sync::atomic::Ordering::Relaxed);
            crate::host::config_file::keep_after_start(ctx);
        }
    }
    let recorded =
        crate::core::guard_rule::recorded_at_load(recorded, configured, mutant::current());
    guard().load_recorded(recorded);
    if let Err(e) = record_lease(startup) {
        ctx.log_warning(&format!("{e}"));
    }

    // The record vouches for one AOF, so it lives in that AOF's directory:
    // a node that comes back with another (or no) AOF directory has no
    // record and waits, and two instances sharing `dir` (which must use
    // different AOF directories) do not share it.
    // Named for that AOF's `appendfilename` ([`run_state::file_name`]):
    // nodes sharing an AOF directory with their own AOF names keep their
    // own records.
    let aof_dir =
        config::config_get(ctx, "appenddirname").unwrap_or_else(|| "appendonlydir".into());
    let aof_name =
        config::config_get(ctx, "appendfilename").unwrap_or_else(|| "appendonly.aof".into());
    let run_path = dir
        .join(aof_dir)
        .join(run_state::file_name(&aof_name, mutant::current()));
    let previous = std::fs::read_to_string(&run_path)
        .ok()
        .and_then(|text| RunState::parse(&text));
    let durable = is_durable(ctx);
    let replica = ctx.get_flags().contains(ContextFlags::SLAVE);
    let _ = RUN_STATE_PATH.set(run_path);
    let mut g = guard();
    let record = g.open_after_load(settings(), previous, durable, replica, now);
    save_run_state(ctx, record);
    drop(g);
    if previous.is_some_and(|p| p.window_open) && durable {
        ctx.log_notice(
            "the previous run stopped inside a guard window: this restart waits for a full window",
        );
    }
}

/// Writes this run's record (fsynced); called with the guard held. When it
/// cannot be written, the old record is removed, so that no stale "durable"
/// record exempts the next start.
fn save_run_state(ctx: &Context, state: RunState) {
    let Some(path) = RUN_STATE_PATH.get() else {
        return;
    };
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
    guard().restart_exempt()
}

/// Whether this run has been durable since it started.
pub fn durable_run() -> bool {
    guard().durable_run()
}

/// The server became a master: opens the window the promotion rule asks
/// for ([`crate::core::sync_rule::promotion`],
/// [`crate::core::guard_rule::Guard::on_promotion`]), and records that it
/// is open so that a restart inside it waits for a full window. `taught`:
/// the node learned its longest lease from the master it followed
/// ([`crate::host::teacher::on_promotion`]).
pub fn on_promotion(ctx: &Context, now: MonoMillis, promotion: Promotion, taught: bool) {
    let mut g = guard();
    let record = g.on_promotion(settings(), promotion, now, taught);
    // The marker first: a restart that reads the record's open window must
    // know how long it is. Also when no window opens (`restart-grace-ms
    // 0`): the day comes back with the guard, and the marker and its
    // configuration copy must say what the guard says (an operator's
    // change of the copy is told apart from the module's by that).
    save_untaught_window(ctx, g.untaught_window());
    if let Some(record) = record {
        save_run_state(ctx, record);
    }
}

/// Changes whenever the window opens, closes early or lengthens.
pub fn epoch() -> u64 {
    guard().epoch()
}

/// The node became a replica: its data may from now on lack grants its
/// master made, so the run record says a window is open until, as a master
/// again, it has passed a whole guard window.
pub fn on_demotion(ctx: &Context) {
    let mut g = guard();
    let record = g.on_demotion();
    save_run_state(ctx, record);
}

/// After a configuration change: a run that stops being durable says so in
/// its record at once (before any later grant is acknowledged), so the next
/// start is not exempt. Becoming durable later changes nothing.
pub fn on_config_change(ctx: &Context) {
    untaught_config_changed(ctx);
    let mut g = guard();
    if !g.durable_run() {
        return;
    }
    if let Some(record) = g.on_config_change(is_durable(ctx)) {
        save_run_state(ctx, record);
    }
}

/// `redlock.promoted-untaught` is the module's copy of the guard's
/// untaught window; an operator may set it to 0 to end that window (they
/// know no lease of the old master outlasts this node's own longest lease,
/// [`crate::core::guard_rule::Guard::end_untaught`]). The marker is removed
/// and the 0 written to the file. Any other change of it is put back.
fn untaught_config_changed(ctx: &Context) {
    use std::sync::atomic::Ordering::Relaxed;
    let configured = config::PROMOTED_UNTAUGHT.load(Relaxed);
    let kept = config::UNTAUGHT_KEPT.load(Relaxed);
    if configured == kept {
        // Not changed by this `CONFIG SET` (the event names no config).
        return;
    }
    let mut g = guard();
    if configured == 0 && g.end_untaught(settings()) {
        save_untaught_window(ctx, false);
        drop(g);
        ctx.log_notice(
            "redlock.promoted-untaught set to 0: the untaught promotion's window (a day) ends; \
             the window lasts this node's longest lease from the promotion",
        );
        crate::host::config_file::write_now(ctx, "redlock.promoted-untaught 0");
        return;
    }
    config::PROMOTED_UNTAUGHT.store(kept, Relaxed);
    drop(g);
    ctx.log_warning(
        "redlock.promoted-untaught is kept by the module: only 0, which ends an untaught \
         promotion's window, may be set; the value is put back",
    );
}

/// What opened the current (or last) window.
pub fn reason() -> Reason {
    guard().reason()
}

/// The length of the window in ms, as configured now. By default, as long
/// as the longest lease known now: one learned after the window opened
/// (from the data loaded, from a master) lengthens it.
pub fn window_len() -> u64 {
    guard().window_len(settings())
}

/// `(elapsed, remaining)` ms when `now` is inside the window.
pub fn state(now: MonoMillis) -> Option<(u64, u64)> {
    guard().state(settings(), now)
}

/// The guard for ACQUIRE. A restart whose previous run was durable for
/// its whole life (see [`crate::core::run_state`]) lost nothing it acknowledged
/// and is exempt. A promoted replica never is: replication is asynchronous,
/// so it may never have received its old master's last grants, whatever its
/// own fsync policy.
pub fn check(ctx: &Context, now: MonoMillis) -> Result<(), CommandError> {
    let s = settings();
    let mut g = guard();
    // The server's flags are read only when the rule looks at them: whether
    // this node is a replica when a window marked open has ended, and the
    // durability when the config-exemption mutant is on.
    let window_over = g.state(s, now).is_none();
    let replica =
        window_over && g.window_marked_open() && ctx.get_flags().contains(ContextFlags::SLAVE);
    let durable_now = !window_over && s.mutants.on(Mutant::ConfigExemption) && is_durable(ctx);
    let (checked, record) = g.check(s, now, replica, durable_now);
    if let Some(record) = record {
        save_run_state(ctx, record);
        save_untaught_window(ctx, g.untaught_window());
    }
    drop(g);
    checked.map_err(|refusal| {
        stats::GRACE_REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        CommandError::Grace {
            reason: refusal.reason.describe(),
            elapsed_ms: refusal.elapsed_ms,
            remaining_ms: refusal.remaining_ms,
        }
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
    guard().longest_lease(settings())
}

/// The longest lease recorded (the record file's, or learned; without the
/// configuration's `max-ttl-ms`).
pub fn recorded_longest() -> u64 {
    guard().recorded_longest()
}

/// Makes sure a lease of `ttl_ms` is covered by the durable record before
/// it is granted: a lease longer than any recorded so far is written (and
/// fsynced) first. Only happens after `redlock.max-ttl-ms` was raised above
/// every earlier value, so the hot path is one comparison. `Ok(true)` when
/// the record grew: replicas are then told (`REDLOCK.APPLY … node`).
pub fn record_lease(ttl_ms: u64) -> Result<bool, CommandError> {
    let mut g = guard();
    if !g.needs_record(ttl_ms) {
        return Ok(false);
    }
    let Some(path) = RECORD_PATH.get() else {
        return Err(CommandError::GuardRecord(
            "the module has not loaded".into(),
        ));
    };
    write_max_file(path, ttl_ms)
        .map_err(|e| CommandError::GuardRecord(format!("{}: {e}", path.display())))?;
    g.raise_longest(ttl_ms, settings(), crate::host::clock::mono_now());
    Ok(true)
}

/// A lease length received from the master (or a file from one): raises
/// the longest lease, in memory at once and in the durable record as well
/// as it can (a replica must not stop applying its stream because a file
/// cannot be written; the failure is logged), and this node's own
/// `max-ttl-ms` when it is shorter ([`crate::host::config_file`]).
pub fn learn_lease(ctx: &Context, ms: u64) {
    let own = config::max_ttl().max(0) as u64;
    if ms > own {
        LEARNED_ABOVE_OWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    // The guard's lock is let go before `record_lease` takes it again.
    let to_learn = guard().to_learn(ms, settings());
    if let Some(ms) = to_learn {
        if let Err(e) = record_lease(ms) {
            guard().raise_longest(ms, settings(), crate::host::clock::mono_now());
            ctx.log_warning(&format!("{e}"));
        }
    }
    crate::host::config_file::cover_learned(ctx, ms, recorded_longest());
}

/// Writes `value` to `path` durably ([`write_file`]) unless the file already
/// holds a larger number, which it keeps. For the records that only grow:
/// two instances may share `dir` (with their own `dbfilename` and
/// `appenddirname`), and one writing its own smaller value over the
/// other's would shrink the other's record (a restart window too short).
pub fn write_max_file(path: &std::path::Path, value: u64) -> std::io::Result<()> {
    let on_disk = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if on_disk >= value {
        return Ok(());
    }
    write_file(path, &format!("{value}\n"))
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
/// for the safety suite's mutation checks: the `no-promotion-guard` mutant).
#[cfg(feature = "test-hooks")]
pub fn set_promotion_guard(on: bool) {
    mutant::set(Mutant::NoPromotionGuard, !on);
}
