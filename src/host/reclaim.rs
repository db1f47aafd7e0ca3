//! The background sweep that deletes idle lock records (DESIGN §8).
//!
//! A tick walks the keyspace with a `RedisModule_Scan` cursor kept across
//! ticks (every database in turn) and stops after [`TICK_BUDGET_US`] or
//! [`TICK_MAX_KEYS`] keys, so the work per tick is bounded whatever the
//! number of records.
//!
//! Ticks run on a thread of the module's own, under Redis's module lock
//! (`RedisModule_ThreadSafeContextLock`), which the main thread releases
//! only while it sleeps in its event loop: a tick never runs in the middle
//! of a command, and it never wakes the main thread. That second point is
//! measured, not cosmetic (docs/performance.md): a module timer firing every
//! millisecond, even with an empty callback, tripled the PING p50 of a node
//! on the test machine (and so does Redis's own `hz 500`), because a thread
//! that wakes itself that often is woken more slowly by its sockets. The
//! ticks keep the same pace from the sweep thread with PING p50 unchanged.
//! Where the thread cannot be started (no thread-safe context in the server
//! API), module timers run the same ticks on the main thread.
//!
//! What a tick queues for replicas, the AOF and keyspace-event subscribers
//! leaves when the main thread next wakes (at the latest its next `serverCron`,
//! 100 ms at the default `hz`), since the sweep never wakes it.
//!
//! A command that arrives while a tick runs waits for it (the main thread
//! takes the lock back when it wakes), so a tick's length bounds the delay
//! the sweep adds to a command, and the share of time that ticks take bounds
//! how many commands see any delay at all. Both are kept small: ticks of
//! about 20 µs, at most one per millisecond, so at most about 2 % of the
//! time. The pace follows the backlog: while a pass deletes records the
//! ticks come every [`BUSY_TICK_MS`]; a pass that finds nothing to delete
//! goes on every [`SCAN_TICK_MS`]; after a complete pass the sweep rests for
//! [`TICK_MS`], the sweep period. In a steady state (names becoming
//! reclaimable at some rate) each pass finds what became reclaimable since
//! the last one and then rests, so the sweep keeps up with that rate at
//! about 1 % of the time (2,000 names a second: 0.7–1.1 %).
//! Measured, reclaiming a record of a keyspace larger than the CPU caches
//! costs about 2 µs, mostly `RedisModule_Scan`'s own walk and copy of the
//! key name: a tick reclaims about ten, and a backlog of a million records
//! takes about two minutes to clear.
//!
//! Only a master sweeps: a replica (checked at every tick) keeps what its
//! master sends, and the master's deletes reach it, and the AOF, as
//! `REDLOCK.APPLY key reclaimed counter`. A replica promoted to master
//! starts sweeping at its next tick.
//!
//! Every delete raises the node's highest reclaimed counter
//! ([`crate::host::node::reclaimed_counter`]), which travels with the data (RDB auxiliary
//! data, the replicated delete, an AOF rewrite: see [`crate::host::persist`]). A
//! grant on a missing key issues a token above it, so reclamation never
//! lets a token go back on this node, whatever FLOOR the next client sends
//! and whatever the node's clock did (DESIGN §8).
//!
//! Whether a record may go is [`crate::core::lock::LockState::reclaimable`], evaluated at the
//! tick's clock readings, and again on the key opened for writing just
//! before the delete.

use std::cell::RefCell;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use redis_module::{raw, Context};

use crate::core::lock::{MonoMillis, ReclaimRule};
use crate::core::record;
use crate::host::clock::{mono_now, wall_now_us};
use crate::host::config;
use crate::host::datatype::LOCK_TYPE;
use crate::host::guard;
use crate::host::node::{self, raise_reclaimed};
use crate::host::persist;
use crate::host::store::LockKey;

/// Pause after a complete pass over every database (and before the first
/// tick): the sweep period.
pub const TICK_MS: i64 = 100;
/// Pause between ticks of a pass that is deleting records (the timer's
/// resolution: at most one tick per millisecond).
pub const BUSY_TICK_MS: i64 = 1;
/// Pause between ticks of a pass whose last tick deleted nothing (keys that
/// are held, recently used, or not locks): the pass goes on at a tenth of
/// the busy pace.
pub const SCAN_TICK_MS: i64 = 10;
/// Time budget of one tick, checked after every scan step (one hash-table
/// bucket, a few keys): the most a command waits for the sweep, give or
/// take one step.
pub const TICK_BUDGET_US: u64 = 20;
/// Keys one tick visits at most.
pub const TICK_MAX_KEYS: u64 = 128;
/// A tick longer than this is counted as slow (`sweep_slow_ticks`): far
/// over the budget, so the thread was descheduled or a step stalled.
pub const SLOW_TICK_US: u64 = 1_000;

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
    /// Wall-clock time of every tick added up, in µs: its growth over an
    /// interval is the share of the main thread the sweep took.
    pub static TIME_US: AtomicU64 = AtomicU64::new(0);
    /// Ticks longer than [`super::SLOW_TICK_US`].
    pub static SLOW_TICKS: AtomicU64 = AtomicU64::new(0);
    /// The most CPU time one tick used, in µs: its own work, without the
    /// time the thread was descheduled.
    pub static LONGEST_TICK_CPU_US: AtomicU64 = AtomicU64::new(0);
    /// 1 when the ticks run on the sweep thread, 0 on module timers.
    pub static ON_THREAD: AtomicU64 = AtomicU64::new(0);
}

/// Test builds: this environment variable set to 1 makes the sweep run on
/// module timers, the fallback, so that its tests can reach it.
#[cfg(feature = "test-hooks")]
pub const TIMERS_ENV: &str = "REDLOCK_TEST_SWEEP_ON_TIMERS";

/// File of the highest reclaimed counter, in the server's directory.
pub const COUNTER_FILE: &str = "redlock-reclaimed-counter";

/// The value last written to [`COUNTER_FILE`].
static COUNTER_WRITTEN: AtomicU64 = AtomicU64::new(0);

/// Reads [`COUNTER_FILE`] (at load): the counter survives a file that
/// carries no node record (an AOF rewritten without RDB preamble after the
/// last record went, with the setting changed since, or on a replica).
fn load_counter_file(ctx: &Context) {
    let path = std::env::current_dir()
        .unwrap_or_default()
        .join(COUNTER_FILE);
    if let Ok(text) = std::fs::read_to_string(&path) {
        match text.trim().parse::<u64>() {
            Ok(n) if n <= crate::core::lock::MAX_TOKEN => {
                raise_reclaimed(n);
                COUNTER_WRITTEN.fetch_max(n, Relaxed);
            }
            _ => ctx.log_warning(&format!(
                "{} does not hold a counter; ignoring it",
                path.display()
            )),
        }
    }
}

/// A child process was forked (an AOF rewrite, an RDB save, a full sync):
/// the files it writes hold the counter as of now in their node record,
/// except an AOF rewritten without RDB preamble when no lock record is
/// left. So the counter goes to [`COUNTER_FILE`] (fsynced) first: Redis
/// switches to the child's file only later, on the main thread.
pub fn on_fork(ctx: &Context) {
    let counter = node::reclaimed_kept();
    if counter <= COUNTER_WRITTEN.load(Relaxed) {
        return;
    }
    let path = std::env::current_dir()
        .unwrap_or_default()
        .join(COUNTER_FILE);
    // The larger of this node's and what the file holds: another instance
    // sharing `dir` may have written its own counter there.
    match crate::host::guard::write_max_file(&path, counter) {
        Ok(()) => {
            COUNTER_WRITTEN.fetch_max(counter, Relaxed);
        }
        Err(e) => ctx.log_warning(&format!(
            "cannot write {}: {e}; the reclaimed counter relies on the data files",
            path.display()
        )),
    }
}

/// Number of databases (`databases`), read at load.
static DATABASES: AtomicI32 = AtomicI32::new(16);

/// The server's number of databases (`databases`, read at load).
pub(crate) fn databases() -> c_int {
    DATABASES.load(Relaxed).max(1)
}

/// The scan position: a cursor and the database it walks, kept by the one
/// thread that runs the ticks (the sweep thread, or the main thread with
/// timers).
struct Position {
    cursor: *mut raw::RedisModuleScanCursor,
    db: c_int,
}

thread_local! {
    static POSITION: RefCell<Option<Position>> = const { RefCell::new(None) };
}

/// Starts the sweep (from OnLoad): on the sweep thread, or on module timers
/// where the server offers no thread-safe context.
pub fn start(ctx: &Context) {
    load_counter_file(ctx);
    let databases = config::config_get(ctx, "databases")
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(16);
    DATABASES.store(databases, Relaxed);
    #[cfg(feature = "test-hooks")]
    let on_timers = std::env::var(TIMERS_ENV).is_ok_and(|v| v == "1");
    #[cfg(not(feature = "test-hooks"))]
    let on_timers = false;
    if !on_timers && start_thread(ctx) {
        stats::ON_THREAD.store(1, Relaxed);
    } else {
        ctx.log_warning("reclamation runs on module timers: no sweep thread");
        schedule(ctx.ctx, TICK_MS);
    }
}

/// The sweep thread's context: detached from any client, used only with
/// Redis's module lock held.
struct SweepContext(*mut raw::RedisModuleCtx);

// SAFETY: the context is used by the sweep thread alone, and only between
// `RedisModule_ThreadSafeContextLock` and `Unlock`, which serialise it with
// the main thread.
unsafe impl Send for SweepContext {}

/// Stack of the sweep thread (the size Redis gives its own threads).
const SWEEP_STACK_BYTES: usize = 4 << 20;

/// Spawns the sweep thread; false when the server API or the OS refuses.
fn start_thread(ctx: &Context) -> bool {
    // SAFETY: the API table is filled once at load, before OnLoad runs.
    let (Some(detached), Some(lock), Some(unlock)) = (unsafe {
        (
            raw::RedisModule_GetDetachedThreadSafeContext,
            raw::RedisModule_ThreadSafeContextLock,
            raw::RedisModule_ThreadSafeContextUnlock,
        )
    }) else {
        return false;
    };
    // SAFETY: ctx is the OnLoad context.
    let raw_ctx = unsafe { detached(ctx.ctx) };
    if raw_ctx.is_null() {
        return false;
    }
    let sweep_ctx = SweepContext(raw_ctx);
    let spawned = std::thread::Builder::new()
        .name("redlock-sweep".into())
        // Keyspace-event subscribers of other modules run on this thread too.
        .stack_size(SWEEP_STACK_BYTES)
        .spawn(move || {
            let sweep_ctx = sweep_ctx;
            let mut delay = TICK_MS;
            loop {
                std::thread::sleep(std::time::Duration::from_millis(delay.max(1) as u64));
                if config::reclaim_after() == 0 {
                    // Off: not even the module lock is taken.
                    delay = TICK_MS;
                    continue;
                }
                // SAFETY: the lock makes this thread the only one touching
                // Redis until the unlock; the context is ours.
                unsafe { lock(sweep_ctx.0) };
                delay = catch_unwind(AssertUnwindSafe(|| tick(sweep_ctx.0))).unwrap_or(TICK_MS);
                // SAFETY: taken just above.
                unsafe { unlock(sweep_ctx.0) };
            }
        });
    if spawned.is_err() {
        // SAFETY: the thread did not start; nobody else has the context.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeThreadSafeContext {
                free(raw_ctx);
            }
        }
        return false;
    }
    true
}

fn schedule(ctx: *mut raw::RedisModuleCtx, delay_ms: i64) {
    // SAFETY: ctx is the OnLoad or timer context, valid for this call.
    unsafe {
        if let Some(create) = raw::RedisModule_CreateTimer {
            create(ctx, delay_ms, Some(on_tick), std::ptr::null_mut());
        }
    }
}

/// The timer callback (fallback): one tick, then the next one is scheduled,
/// also when the tick panicked (a bug must not stop reclamation or crash
/// the server).
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
    deleted: u64,
    found: Vec<*mut raw::RedisModuleString>,
}

/// One tick; returns the delay until the next one.
fn tick(ctx: *mut raw::RedisModuleCtx) -> i64 {
    let after_ms = config::reclaim_after();
    if after_ms == 0 || !may_sweep(ctx) {
        return TICK_MS;
    }
    let started = Instant::now();
    let cpu_started = thread_cpu_us();
    let mut step = Step {
        rule: ReclaimRule {
            after_ms,
            longest_lease_ms: guard::longest_lease(),
        },
        now: mono_now(),
        wall_us: wall_now_us(),
        visited: 0,
        deleted: 0,
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
    stats::TIME_US.fetch_add(took, Relaxed);
    stats::LONGEST_TICK_US.fetch_max(took, Relaxed);
    if took > SLOW_TICK_US {
        stats::SLOW_TICKS.fetch_add(1, Relaxed);
    }
    stats::LONGEST_TICK_CPU_US.fetch_max(thread_cpu_us().saturating_sub(cpu_started), Relaxed);
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
            return if step.deleted > 0 {
                BUSY_TICK_MS
            } else {
                SCAN_TICK_MS
            };
        }
    }
}

/// CPU time of the calling thread in µs (0 when unavailable).
fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000) + ts.tv_nsec as u64 / 1_000
}

/// A master that is not loading and whose writes are not paused: a replica
/// never reclaims by itself, and nothing is deleted while clients are paused
/// (`CLIENT PAUSE`, `FAILOVER`, a shutdown waiting for its replicas), as
/// Redis's own expiry does: the replication offset must hold still then,
/// and Redis asserts that nothing is propagated.
fn may_sweep(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: ctx is the tick's context, and the tick holds the module lock
    // (or runs on the main thread): both calls may touch server state.
    let (flags, paused) = unsafe {
        (
            raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) as u32,
            raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0),
        )
    };
    !paused
        && flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && flags & (raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_LOADING) == 0
}

unsafe fn select_db(ctx: *mut raw::RedisModuleCtx, db: c_int) {
    if let Some(select) = raw::RedisModule_SelectDb {
        select(ctx, db);
    }
}

/// The scan callback: counts the key and keeps its name when it is a lock
/// record that may go. Nothing is deleted while the scan step runs. A panic
/// must not unwind into Redis's C frames: it is caught here.
unsafe extern "C" fn on_key(
    _ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| visit(keyname, key, privdata)));
}

unsafe fn visit(
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

/// Whether the key holds a lock record. The type handle is a `RefCell` in
/// redis-module; reading it from the sweep thread is safe because every
/// reader, on either thread, holds Redis's module lock.
pub(crate) unsafe fn is_lock(key: *mut raw::RedisModuleKey) -> bool {
    let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(key));
    key_type == raw::REDISMODULE_KEYTYPE_MODULE as c_int
        && raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(key))
            == *LOCK_TYPE.raw_type.borrow()
}

/// Deletes the candidates of one scan step, each re-checked on the key
/// opened for writing, as a replicated `REDLOCK.APPLY key reclaimed
/// counter` with a `redlock.reclaim` keyspace event. The highest reclaimed
/// counter is raised before the delete is visible to any command.
unsafe fn reclaim_found(ctx: *mut raw::RedisModuleCtx, step: &mut Step) {
    for name in step.found.drain(..) {
        let deleted = {
            let mut key = LockKey::write(ctx, name);
            match key.get().ok().flatten() {
                Some(s) if s.reclaimable(step.rule, step.now, step.wall_us) => {
                    raise_reclaimed(s.counter());
                    key.delete().then_some(s.counter())
                }
                _ => None,
            }
        };
        if let Some(counter) = deleted {
            persist::replicate_reclaimed(ctx, name, counter);
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
            step.deleted += 1;
        }
        if let Some(free) = raw::RedisModule_FreeString {
            free(std::ptr::null_mut(), name);
        }
    }
}
