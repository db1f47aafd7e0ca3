//! Writing again the leases a load timed by any rule but the exact same-boot
//! one ([`crate::core::lease_time::restamp_needed`]).
//!
//! Such a lease (from another boot, without a boot stamp, after a wall
//! clock set back, cut to the clamp; read from the AOF, an RDB or a
//! `RESTORE` payload) would be timed again from the time of every later
//! load of the same record, and come back held long after it ended: the
//! AOF keeps the record as it was loaded (a restart does not rewrite it),
//! and Redis passes a `RESTORE` on as it came. So after the load (or the
//! `RESTORE`) a master appends the state of every held lock as it runs now,
//! `REDLOCK.APPLY … v3` with this boot's stamp, to its AOF and replication
//! stream; replaying the file later reads that record last.
//!
//! Why this cannot shorten a lease a holder relies on: the record written
//! is the lease the node runs, its time left now and this boot's clock
//! now, so a later load on this boot ends it where the running node would
//! have (to the reading slack, never earlier), a later load on another boot
//! keeps at least that time left, and a replica times it from the time left
//! on its own clock (the transfer delay only lengthens it).
//!
//! The walk is one pass over every database, from a timer on the main
//! thread: it runs once per load that needed it (after a reboot, a clock
//! set back, a `RESTORE` from elsewhere), never on the path of a command.

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use redis_module::{raw, ContextFlags};

use crate::host::clock::{boot_now, mono_now, wall_now};
use crate::host::store::LockKey;
use crate::host::{datatype, persist, reclaim, replication};

/// A pass is scheduled and has not run yet.
static SCHEDULED: AtomicBool = AtomicBool::new(false);
/// How long a pass waits before it looks again while clients are paused.
const PAUSED_RETRY_MS: i64 = 100;

/// Schedules a pass when a lease is waiting for one
/// ([`datatype::note_restamp`]): after a load ends, or after a `RESTORE`
/// (its keyspace event).
///
/// # Safety
/// `ctx` must be a context Redis handed to the module on the main thread.
pub unsafe fn schedule(ctx: *mut raw::RedisModuleCtx) {
    if !datatype::restamp_pending() || SCHEDULED.swap(true, Relaxed) {
        return;
    }
    match raw::RedisModule_CreateTimer {
        Some(create) => {
            create(ctx, 0, Some(on_timer), std::ptr::null_mut());
        }
        None => SCHEDULED.store(false, Relaxed),
    }
}

/// Leases written again since the module loaded (`INFO redlock`
/// `redlock_leases_restamped`).
pub static WRITTEN: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    SCHEDULED.store(false, Relaxed);
    let _ = catch_unwind(AssertUnwindSafe(|| pass(ctx)));
}

/// Names of the lock records one database holds, collected by the scan.
struct Found(Vec<*mut raw::RedisModuleString>);

fn pass(ctx: *mut raw::RedisModuleCtx) {
    let context = redis_module::Context::new(ctx);
    let flags = context.get_flags();
    // A replica takes its leases from its master, which writes them again
    // itself; a node still loading is scheduled again when it ends.
    if flags.intersects(ContextFlags::SLAVE | ContextFlags::LOADING) {
        datatype::take_restamp_pending();
        return;
    }
    // Nothing may be propagated while clients are paused (`CLIENT PAUSE`,
    // `FAILOVER`, a shutdown waiting for its replicas): Redis asserts it
    // (the dataset must hold still for a failover), and a `RESTORE`
    // pipelined with a `CLIENT PAUSE … WRITE` ran this pass inside the
    // pause and took the server down. The pass waits for the pause to end;
    // until then the lease runs in memory as loaded.
    if replication::writes_paused() {
        SCHEDULED.store(true, Relaxed);
        // SAFETY: ctx is the timer's context on the main thread.
        match unsafe { raw::RedisModule_CreateTimer } {
            Some(create) => unsafe {
                create(ctx, PAUSED_RETRY_MS, Some(on_timer), std::ptr::null_mut());
            },
            None => SCHEDULED.store(false, Relaxed),
        }
        return;
    }
    datatype::take_restamp_pending();
    if !replication::needed(&context) {
        return;
    }
    // SAFETY: ctx is the timer's context on the main thread; the cursor and
    // the retained names are ours and freed below.
    unsafe {
        let (Some(create), Some(destroy), Some(scan), Some(select), Some(current)) = (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_ScanCursorDestroy,
            raw::RedisModule_Scan,
            raw::RedisModule_SelectDb,
            raw::RedisModule_GetSelectedDb,
        ) else {
            return;
        };
        let selected = current(ctx);
        for db in 0..reclaim::databases() {
            if select(ctx, db) != raw::REDISMODULE_OK as c_int {
                continue;
            }
            let cursor = create();
            if cursor.is_null() {
                continue;
            }
            let mut found = Found(Vec::new());
            while scan(ctx, cursor, Some(on_key), (&mut found as *mut Found).cast()) != 0 {}
            destroy(cursor);
            for name in found.0.drain(..) {
                write_again(ctx, name);
                if let Some(free) = raw::RedisModule_FreeString {
                    free(std::ptr::null_mut(), name);
                }
            }
        }
        select(ctx, selected);
    }
}

/// Appends the held lock at `name` as it runs now.
///
/// # Safety
/// `ctx` is the timer's context and `name` a live string.
unsafe fn write_again(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) {
    let state = match LockKey::read(ctx, name).get() {
        Ok(Some(state)) => state,
        _ => return,
    };
    let mono = mono_now();
    if !state.is_held(mono) {
        return;
    }
    let written = persist::persist_at(&state, mono, wall_now(), boot_now());
    persist::replicate(ctx, name, &written);
    WRITTEN.fetch_add(1, Relaxed);
}

unsafe extern "C" fn on_key(
    _ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(found) = privdata.cast::<Found>().as_mut() else {
            return;
        };
        if key.is_null() || !reclaim::is_lock(key) {
            return;
        }
        if let Some(retain) = raw::RedisModule_RetainString {
            retain(std::ptr::null_mut(), keyname);
            found.0.push(keyname);
        }
    }));
}
