//! The configuration file keeps `redlock.max-ttl-ms` at least as long as
//! the longest lease this node may hold or grant (finding L).
//!
//! A node restarted on a new disk knows nothing but its configuration: its
//! restart window is its `max-ttl-ms`. Two ways used to leave that shorter
//! than a lease the node held:
//! - a replica configured for less than its master learns (and the master
//!   grants, once the replica acknowledged knowing it) a longer lease; it is
//!   promoted, then loses its disk;
//! - `CONFIG SET redlock.max-ttl-ms` raises it at run time, and the file
//!   still says the old value when the disk is lost.
//!
//! So a replica that learns a longer lease raises its own `max-ttl-ms` to
//! that length ([`crate::core::guard_rule::max_ttl_to_cover`]), and every
//! raise (learned or set) is written with `CONFIG REWRITE` at once: from the
//! command that taught it (`REDLOCK.APPLY`, before the replica goes on with
//! its stream and acknowledges the offset its master waits for), or at the
//! end of the load that taught it (a full sync's snapshot: before the replica
//! acknowledges it). A server started without a configuration file cannot
//! keep it: the node says so in its log and in `INFO redlock`
//! (`max_ttl_unsaved_ms`), and its command line must name the group's
//! longest `max-ttl-ms`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

use redis_module::{Context, ContextFlags, RedisValue};

use crate::core::guard_rule::{longest_to_configure, max_ttl_to_cover};
use crate::host::config;
use crate::host::mutant;

/// The `max-ttl-ms` a restart would read: the value at load (from the file
/// or the command line), then each value `CONFIG REWRITE` wrote.
static SAVED_MAX_TTL: AtomicI64 = AtomicI64::new(0);
/// A raised `max-ttl-ms` that could not be written (0: none).
static UNSAVED_MAX_TTL: AtomicI64 = AtomicI64::new(0);
/// A raise waits for the end of the load in progress to be written.
static PENDING: AtomicBool = AtomicBool::new(false);

/// At load, after the configuration is read: what a restart would read.
pub fn on_load() {
    SAVED_MAX_TTL.store(config::max_ttl(), Relaxed);
}

/// The longest lease a start on a new disk reads from this node's
/// configuration: the larger of `max-ttl-ms` and `longest-lease-ms` read
/// at this start, raised by every `longest-lease-ms` this module wrote to
/// the file since ([`crate::core::sync_rule::new_disk_wait`]).
static NEW_DISK_LONGEST: AtomicU64 = AtomicU64::new(0);
/// The smallest explicit `restart-grace-ms` above 0 in force since this
/// start (`u64::MAX`: none).
static NEW_DISK_GRACE: AtomicU64 = AtomicU64::new(u64::MAX);

/// At load, before anything of this start is written or raised in memory
/// (`guard::on_load` may set `longest-lease-ms` for a later write): what
/// this start read, the base of the new-disk wait.
pub fn on_startup_configuration() {
    let longest = (config::max_ttl().max(0) as u64).max(config::longest_lease_configured());
    NEW_DISK_LONGEST.store(longest, Relaxed);
    NEW_DISK_GRACE.store(u64::MAX, Relaxed);
    on_grace_change();
}

/// `restart-grace-ms` may have changed: an explicit value may reach the
/// file with any `CONFIG REWRITE` (Sentinel's too), and a start on a new
/// disk then waits only that. 0 is not counted: it turns the guard off,
/// and such a master's restarts are not guarded at all (the operator's
/// choice, docs/replica-sync.md, Limits); counted, every promotion of its
/// replicas would keep the guard.
pub fn on_grace_change() {
    let grace = config::restart_grace();
    if grace > 0 {
        NEW_DISK_GRACE.fetch_min(grace as u64, Relaxed);
    }
}

/// This node's new-disk wait now, as its announcements carry it
/// ([`crate::core::sync_rule::new_disk_wait`]).
pub fn new_disk_wait() -> u64 {
    let grace = NEW_DISK_GRACE.load(Relaxed);
    crate::core::sync_rule::new_disk_wait(
        NEW_DISK_LONGEST.load(Relaxed),
        (grace != u64::MAX).then_some(grace),
    )
}

/// A raised `max-ttl-ms` this node could not write to a configuration file
/// (`INFO redlock` `max_ttl_unsaved_ms`; 0: none).
pub fn unsaved_max_ttl() -> u64 {
    UNSAVED_MAX_TTL.load(Relaxed).max(0) as u64
}

/// A lease length learned (from the master, or a file): raises this node's
/// `max-ttl-ms` to cover it and writes it to the file (now, or at the end of
/// the load in progress). `ctx` may be the dummy context of a load.
pub fn cover_learned(ctx: &Context, learned_ms: u64, recorded_ms: u64) {
    let own = config::max_ttl().max(0) as u64;
    let Some(ms) = max_ttl_to_cover(learned_ms, own, mutant::current()) else {
        return;
    };
    config::MAX_TTL_MS.fetch_max(ms as i64, Relaxed);
    // An explicit restart window set to cover the old `max-ttl-ms` (the
    // guide's `max-ttl-ms 30000 restart-grace-ms 30000`) covers the raise
    // too: it is what a restart on a new disk waits.
    let grace = config::RESTART_GRACE_MS.load(Relaxed);
    if grace >= 0 && grace as u64 >= own {
        config::RESTART_GRACE_MS.fetch_max(ms as i64, Relaxed);
    }
    redis_module::logging::log_notice(format!(
        "redlock.max-ttl-ms raised from {own} to {ms}: this node learned a lease that long \
         (from its master or its data); a restart on a new disk must wait that long"
    ));
    save_soon(ctx, recorded_ms);
}

/// After `CONFIG SET`: a raised `max-ttl-ms` is written to the file; a
/// lowered one below the longest lease recorded leaves that length in the
/// file as `redlock.longest-lease-ms` (written now: any later `CONFIG
/// REWRITE`, Sentinel's included, writes the lower `max-ttl-ms`).
pub fn on_config_change(ctx: &Context, recorded: u64) {
    let max_ttl = config::max_ttl().max(0) as u64;
    if let Some(ms) = longest_to_configure(recorded, max_ttl, config::longest_lease_configured()) {
        if !mutant::on(mutant::Mutant::LongestLostWithDisk) {
            config::LONGEST_LEASE_MS.store(ms as i64, Relaxed);
            write_now(ctx, &format!("redlock.longest-lease-ms {ms}"));
        }
    }
    save_soon(ctx, recorded);
}

/// A life as master begun by promotion (`REPLICAOF NO ONE`, before any
/// later command): `redlock.promoted-acked-ms` is set to what the life
/// starts held from (`LeaseAck::configured_hold`) and written with `CONFIG
/// REWRITE`, so that a restart on a new disk is held too
/// (`LeaseAck::held_by_configuration`, simulator seed 3,098,182). A write
/// that fails is logged: such a restart would grant a raised lease before
/// a replica of its own acknowledged knowing it.
pub fn keep_promoted_acked(ctx: &Context, held_from_ms: Option<u64>) {
    let Some(ms) = held_from_ms else {
        return;
    };
    let value = i64::try_from(ms)
        .unwrap_or(i64::MAX)
        .min(config::MAX_TTL_LIMIT);
    config::PROMOTED_ACKED_MS.store(value, Relaxed);
    if let Err(e) = rewrite(ctx) {
        ctx.log_warning(&format!(
            "redlock.promoted-acked-ms {value} is not in a configuration file (CONFIG REWRITE: {e}): \
             restarted on a new disk, this master would grant a raised max-ttl-ms before its \
             replicas acknowledged knowing it"
        ));
    }
}

/// The untaught-window marker changed (`host/guard.rs`): its copy in the
/// configuration file, `redlock.promoted-untaught`, follows it, so that a
/// restart on a new disk inside the window still waits a day
/// (`guard_rule::untaught_at_load`, simulator seed 3,508,262).
pub fn keep_untaught(ctx: &Context, marked: bool) {
    let value = i64::from(marked);
    config::UNTAUGHT_KEPT.store(value, Relaxed);
    if config::PROMOTED_UNTAUGHT.swap(value, Relaxed) == value {
        return;
    }
    if let Err(e) = rewrite(ctx) {
        ctx.log_warning(&format!(
            "redlock.promoted-untaught {value} is not in a configuration file ({e}): restarted on \
             a new disk inside the untaught promotion's window, this master would wait only its \
             max-ttl-ms"
        ));
    }
}

/// What a load put into the configuration values that the file must keep
/// (`redlock.promoted-untaught`, `redlock.promoted-acked-ms` copied from the
/// data directory's files, [`keep_after_start`]) and is not written yet.
static AFTER_START: AtomicBool = AtomicBool::new(false);

/// A configuration value set at load (in `OnLoad`, where no command runs)
/// must reach the file: it is written with `CONFIG REWRITE` from a timer
/// once the server runs its event loop, after the data loaded. Until then
/// nothing depends on it: the copies are of an untaught window (the node
/// grants nothing inside it) or of a hold (a longer lease waits for a
/// replica's acknowledgement, sent once a second), and only a new disk
/// before the write would miss them.
pub fn keep_after_start(ctx: &Context) {
    if AFTER_START.swap(true, Relaxed) {
        return;
    }
    arm_after_start(ctx.ctx, 0);
}

fn arm_after_start(ctx: *mut redis_module::raw::RedisModuleCtx, after_ms: i64) {
    // SAFETY: a plain module API call on the main thread with a live
    // context (OnLoad's or a timer's).
    unsafe {
        if let Some(create) = redis_module::raw::RedisModule_CreateTimer {
            create(ctx, after_ms, Some(after_start_timer), std::ptr::null_mut());
        }
    }
}

unsafe extern "C" fn after_start_timer(
    ctx: *mut redis_module::raw::RedisModuleCtx,
    _data: *mut std::os::raw::c_void,
) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let context = Context::new(ctx);
        if context.get_flags().contains(ContextFlags::LOADING) {
            arm_after_start(ctx, 20);
            return;
        }
        if !AFTER_START.swap(false, Relaxed) {
            return;
        }
        write_now(&context, "what this node loaded from its data directory");
    }));
}

/// `CONFIG REWRITE` now; a failure is logged with `what` the file lacks.
pub fn write_now(ctx: &Context, what: &str) {
    if let Err(e) = rewrite(ctx) {
        ctx.log_warning(&format!(
            "{what} is not in a configuration file ({e}): a restart on a new disk would not \
             know it"
        ));
    }
}

/// At the end of a load: writes a raise learned during it.
pub fn on_load_ended(ctx: &Context, recorded_ms: u64) {
    if PENDING.swap(false, Relaxed) {
        save_soon(ctx, recorded_ms);
    }
}

fn save_soon(ctx: &Context, recorded_ms: u64) {
    if config::max_ttl() <= SAVED_MAX_TTL.load(Relaxed) {
        return;
    }
    // No command runs from the dummy context of a load, nor while loading.
    if ctx.ctx.is_null() || ctx.get_flags().contains(ContextFlags::LOADING) {
        PENDING.store(true, Relaxed);
        return;
    }
    let max_ttl = config::max_ttl();
    // The raise's length goes to the file twice: as `max-ttl-ms`, which
    // may later be lowered or given again on the command line, and as the
    // copy of the longest lease, which only grows
    // (`guard_rule::recorded_at_load`).
    let longest = recorded_ms.max(max_ttl.max(0) as u64);
    config::LONGEST_LEASE_MS.fetch_max(longest as i64, Relaxed);
    let saved = rewrite(ctx);
    match saved {
        Ok(()) => {
            SAVED_MAX_TTL.fetch_max(max_ttl, Relaxed);
            UNSAVED_MAX_TTL.store(0, Relaxed);
        }
        Err(e) => {
            if UNSAVED_MAX_TTL.swap(max_ttl, Relaxed) != max_ttl {
                ctx.log_warning(&format!(
                    "redlock.max-ttl-ms {max_ttl} is not in a configuration file ({e}): \
                     restarted on a new disk, this node would wait only the max-ttl-ms it starts with; \
                     start it with redlock.max-ttl-ms {max_ttl} or more"
                ));
            }
        }
    }
}

/// `CONFIG REWRITE`, successful only when it answers `OK` (a renamed
/// `CONFIG` command answers nothing at all).
///
/// A successful rewrite wrote this node's `longest-lease-ms` to its file:
/// the new-disk wait may grow to it ([`new_disk_wait`]).
fn rewrite(ctx: &Context) -> Result<(), String> {
    let longest = config::longest_lease_configured();
    let written = match ctx.call("CONFIG", &["REWRITE"]) {
        Ok(RedisValue::SimpleStringStatic("OK")) => Ok(()),
        Ok(RedisValue::SimpleString(s)) if s == "OK" => Ok(()),
        Ok(other) => Err(format!("CONFIG REWRITE answered {other:?}")),
        Err(e) => Err(format!("CONFIG REWRITE: {e}")),
    };
    if written.is_ok() {
        // Announced with the next announcement (`host/sync.rs::due`): a
        // replica holding the shorter one cuts off sooner, never later.
        NEW_DISK_LONGEST.fetch_max(longest, Relaxed);
    }
    written
}
