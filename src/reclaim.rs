//! The background sweep that deletes idle lock records (DESIGN §8).
//!
//! A module timer runs a tick every [`TICK_MS`]. A tick walks the keyspace
//! with a `RedisModule_Scan` cursor kept across ticks (every database in
//! turn) and stops after [`TICK_BUDGET_US`] or [`TICK_MAX_KEYS`] keys, so
//! the work per tick is bounded whatever the number of records; when it ran
//! out of budget, the next tick comes after [`BUSY_TICK_MS`] instead.
//!
//! Only a master sweeps: a replica (checked at every tick) keeps what its
//! master sends, and the master's deletes reach it, and the AOF, as `DEL`.
//! A replica promoted to master starts sweeping at its next tick.
//!
//! Whether a record may go is [`LockState::reclaimable`], evaluated at the
//! tick's clock readings, and again on the key opened for writing just
//! before the delete.

use std::cell::RefCell;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};
use std::time::Instant;

use redis_module::{raw, Context};

use crate::clock::{mono_now, wall_now_us};
use crate::config;
use crate::datatype::LOCK_TYPE;
use crate::guard;
use crate::lock::{LockState, MonoMillis, ReclaimRule};
use crate::record;
use crate::store::LockKey;

/// Pause between ticks when the last one finished its work.
pub const TICK_MS: i64 = 100;
/// Pause between ticks when the last one ran out of budget.
pub const BUSY_TICK_MS: i64 = 10;
/// Time budget of one tick, checked after every scan step.
pub const TICK_BUDGET_US: u64 = 1_000;
/// Keys one tick visits at most.
pub const TICK_MAX_KEYS: u64 = 2_000;

/// Sweep statistics shown by `INFO redlock`.
pub mod stats {
    use std::sync::atomic::AtomicU64;

    /// Records deleted by the sweep.
    pub static RECLAIMED: AtomicU64 = AtomicU64::new(0);
    /// Complete passes over every database.
    pub static PASSES: AtomicU64 = AtomicU64::new(0);
    /// Keys visited (of any type).
    pub static SCANNED: AtomicU64 = AtomicU64::new(0);
    /// Ticks that did some work (on a master with reclamation on).
    pub static TICKS: AtomicU64 = AtomicU64::new(0);
    /// The longest tick so far, in µs.
    pub static LONGEST_TICK_US: AtomicU64 = AtomicU64::new(0);
    /// The last tick, in µs.
    pub static LAST_TICK_US: AtomicU64 = AtomicU64::new(0);
}

/// Number of databases (`databases`), read at load.
static DATABASES: AtomicI32 = AtomicI32::new(16);

/// The scan position: a cursor and the database it walks. Timers run on
/// Redis's main thread only.
struct Position {
    cursor: *mut raw::RedisModuleScanCursor,
    db: c_int,
}

thread_local! {
    static POSITION: RefCell<Option<Position>> = const { RefCell::new(None) };
}

/// Starts the sweep timer (from OnLoad).
pub fn start(ctx: &Context) {
    let databases = config::config_get(ctx, "databases")
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(16);
    DATABASES.store(databases, Relaxed);
    schedule(ctx.ctx, TICK_MS);
}

fn schedule(ctx: *mut raw::RedisModuleCtx, delay_ms: i64) {
    // SAFETY: ctx is the OnLoad or timer context, valid for this call.
    unsafe {
        if let Some(create) = raw::RedisModule_CreateTimer {
            create(ctx, delay_ms, Some(on_tick), std::ptr::null_mut());
        }
    }
}

/// The timer callback: one tick, then the next one is scheduled, also when
/// the tick panicked (a bug must not stop reclamation or crash the server).
unsafe extern "C" fn on_tick(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let delay = catch_unwind(AssertUnwindSafe(|| tick(ctx))).unwrap_or(TICK_MS);
    schedule(ctx, delay);
}

/// Candidates found by one scan step.
struct Step {
    rule: ReclaimRule,
    now: MonoMillis,
    wall_us: u64,
    visited: u64,
    found: Vec<*mut raw::RedisModuleString>,
}

/// One tick; returns the delay until the next one.
fn tick(ctx: *mut raw::RedisModuleCtx) -> i64 {
    let after_ms = config::reclaim_after();
    if after_ms == 0 || !may_sweep(ctx) {
        return TICK_MS;
    }
    let started = Instant::now();
    let mut step = Step {
        rule: ReclaimRule {
            after_ms,
            longest_lease_ms: guard::longest_lease(),
        },
        now: mono_now(),
        wall_us: wall_now_us(),
        visited: 0,
        found: Vec::new(),
    };
    let delay = POSITION.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            // SAFETY: plain allocation of a cursor.
            let cursor = unsafe {
                raw::RedisModule_ScanCursorCreate.map_or(std::ptr::null_mut(), |create| create())
            };
            if cursor.is_null() {
                return TICK_MS;
            }
            *slot = Some(Position { cursor, db: 0 });
        }
        match slot.as_mut() {
            Some(pos) => sweep(ctx, pos, &mut step, started),
            None => TICK_MS,
        }
    });
    stats::SCANNED.fetch_add(step.visited, Relaxed);
    stats::TICKS.fetch_add(1, Relaxed);
    let took = started.elapsed().as_micros() as u64;
    stats::LAST_TICK_US.store(took, Relaxed);
    stats::LONGEST_TICK_US.fetch_max(took, Relaxed);
    delay
}

/// Walks from `pos` until the pass ends or the tick's budget is spent;
/// returns the delay until the next tick.
fn sweep(
    ctx: *mut raw::RedisModuleCtx,
    pos: &mut Position,
    step: &mut Step,
    started: Instant,
) -> i64 {
    let databases = DATABASES.load(Relaxed).max(1);
    loop {
        // SAFETY: ctx is the timer's context and the cursor is ours; the
        // scan callback gets `step` for the duration of the call only.
        let more = unsafe {
            select_db(ctx, pos.db);
            let more = raw::RedisModule_Scan.map_or(0, |scan| {
                scan(ctx, pos.cursor, Some(on_key), (step as *mut Step).cast())
            });
            reclaim_found(ctx, step);
            more != 0
        };
        if !more {
            // SAFETY: the cursor is ours.
            unsafe {
                if let Some(restart) = raw::RedisModule_ScanCursorRestart {
                    restart(pos.cursor);
                }
            }
            pos.db += 1;
            if pos.db >= databases {
                pos.db = 0;
                stats::PASSES.fetch_add(1, Relaxed);
                return TICK_MS;
            }
        }
        if step.visited >= TICK_MAX_KEYS || started.elapsed().as_micros() as u64 >= TICK_BUDGET_US {
            return BUSY_TICK_MS;
        }
    }
}

/// A master that is not loading: a replica never reclaims by itself.
fn may_sweep(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: ctx is the timer's context.
    let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) } as u32;
    flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && flags & (raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_LOADING) == 0
}

unsafe fn select_db(ctx: *mut raw::RedisModuleCtx, db: c_int) {
    if let Some(select) = raw::RedisModule_SelectDb {
        select(ctx, db);
    }
}

/// The scan callback: counts the key and keeps its name when it is a lock
/// record that may go. Nothing is deleted while the scan step runs.
unsafe extern "C" fn on_key(
    _ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    let Some(step) = privdata.cast::<Step>().as_mut() else {
        return;
    };
    step.visited += 1;
    if key.is_null() || !is_lock(key) {
        return;
    }
    let value = raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(key));
    if value.is_null() {
        return;
    }
    if record::read(value).reclaimable(step.rule, step.now, step.wall_us) {
        if let Some(retain) = raw::RedisModule_RetainString {
            retain(std::ptr::null_mut(), keyname);
            step.found.push(keyname);
        }
    }
}

unsafe fn is_lock(key: *mut raw::RedisModuleKey) -> bool {
    let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(key));
    key_type == raw::REDISMODULE_KEYTYPE_MODULE as c_int
        && raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(key))
            == *LOCK_TYPE.raw_type.borrow()
}

/// Deletes the candidates of one scan step, each re-checked on the key
/// opened for writing, as a replicated `DEL` with a `redlock.reclaim`
/// keyspace event.
unsafe fn reclaim_found(ctx: *mut raw::RedisModuleCtx, step: &mut Step) {
    for name in step.found.drain(..) {
        let deleted = {
            let mut key = LockKey::write(ctx, name);
            let still = key
                .get()
                .ok()
                .flatten()
                .is_some_and(|s: LockState| s.reclaimable(step.rule, step.now, step.wall_us));
            still && key.delete()
        };
        if deleted {
            if let Some(replicate) = raw::RedisModule_Replicate {
                replicate(ctx, c"DEL".as_ptr(), c"s".as_ptr(), name);
            }
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(ctx, name);
            }
            if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                notify(
                    ctx,
                    raw::NotifyEvent::MODULE.bits(),
                    c"redlock.reclaim".as_ptr(),
                    name,
                );
            }
            stats::RECLAIMED.fetch_add(1, Relaxed);
        }
        if let Some(free) = raw::RedisModule_FreeString {
            free(std::ptr::null_mut(), name);
        }
    }
}
