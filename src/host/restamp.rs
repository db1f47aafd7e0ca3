//! Re-stamping leases that a load timed by an inexact rule (issue 35).
//!
//! A lease read from disk is timed exactly only from a stamp of this
//! node's own clock ([`crate::core::lease_time`]). One read by any other
//! rule (written on another boot or in another time namespace, without a
//! stamp, a `RESTORE` of such a payload, a wall-clock end later than the
//! stamped end, the clamp) is timed from this load. The file still holds
//! the record as it came (an AOF is not rewritten at `SHUTDOWN`, and a
//! `RESTORE` goes to the AOF as it came), so every later restart of this
//! boot would time it from that restart again: the lease would come back
//! held long after it ended here. So once the load is over, the master
//! writes each such lease again, as it holds it now, to its AOF and
//! replicas (`REDLOCK.APPLY … v3` with this node's stamp): a later restart
//! of this boot reads that record last and times the lease exactly. The
//! record in memory needs nothing: an RDB save or an AOF rewrite writes it
//! with the stamp of the moment.
//!
//! Why this never shortens a lease a holder relies on: what is written is
//! the lease exactly as this running node times it in memory (its deadline
//! on the monotonic clock, as remaining time, wall-clock end and stamp of
//! the same moment). This node frees the lock, and grants it to another
//! owner, at that deadline whatever the file says, so no holder can rely on
//! the lease past it; the older record could only make a later restart hold
//! it past the deadline the running node already kept. A later restart on
//! the same clock reads the stamped end (to the millisecond slack) or a
//! later wall-clock end; one on another clock, the remaining time from then
//! (later still). A replica receiving it times it by the remaining time,
//! as it does every effect.
//!
//! Sequences: a command that changes the lock between the load and the
//! pass writes its own effect first (with a fresh stamp); the pass writes
//! the lock's state at the pass, which is the truth then, and skips it when
//! it is no longer held. A replica never writes it (its master's stream is
//! its history); nor does a master whose writes are paused, which retries.

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use redis_module::raw;

use crate::host::clock::{boot_now, mono_now, wall_now};
use crate::host::mutant::{self, Mutant};
use crate::host::persist;
use crate::host::store::LockKey;

/// Keys (database, name) loaded with a lease to write again.
static PENDING: Mutex<Vec<(c_int, Vec<u8>)>> = Mutex::new(Vec::new());
/// A pass is scheduled.
static SCHEDULED: AtomicBool = AtomicBool::new(false);
/// Leases written again since the module loaded (`INFO redlock`).
pub static RESTAMPED: AtomicU64 = AtomicU64::new(0);

/// How long a pass waits while the master's writes are paused.
const PAUSED_RETRY_MS: i64 = 100;

fn pending() -> std::sync::MutexGuard<'static, Vec<(c_int, Vec<u8>)>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Notes that the lock `key` of database `db`, just loaded, is held by a
/// lease timed by an inexact rule
/// ([`crate::core::lease_time::restamp_needed`]).
pub fn note(db: c_int, key: &[u8]) {
    if mutant::on(Mutant::RestampSkipped) {
        return;
    }
    pending().push((db, key.to_vec()));
}

/// Schedules a pass over the noted keys at the next turn of the event loop
/// (after the load, or after the `RESTORE` in progress), unless one is.
pub fn schedule(ctx: *mut raw::RedisModuleCtx) {
    if ctx.is_null() || pending().is_empty() || SCHEDULED.swap(true, Relaxed) {
        return;
    }
    arm(ctx, 0);
}

fn arm(ctx: *mut raw::RedisModuleCtx, after_ms: i64) {
    // SAFETY: a plain module API call with a live context.
    let armed = unsafe {
        raw::RedisModule_CreateTimer.is_some_and(|create| {
            create(ctx, after_ms, Some(pass), std::ptr::null_mut());
            true
        })
    };
    if !armed {
        SCHEDULED.store(false, Relaxed);
    }
}

unsafe extern "C" fn pass(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let flags = raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) as u32;
        if flags & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0 {
            pending().clear();
            SCHEDULED.store(false, Relaxed);
            return;
        }
        if !crate::host::reclaim::may_sweep(ctx) {
            arm(ctx, PAUSED_RETRY_MS);
            return;
        }
        let keys = std::mem::take(&mut *pending());
        SCHEDULED.store(false, Relaxed);
        let context = redis_module::Context::new(ctx);
        let replicate = crate::host::replication::needed(&context);
        for (db, name) in keys {
            if replicate {
                write_again(ctx, db, &name);
            }
        }
    }));
}

/// Writes the lock `name` of database `db` as held now, if it is.
unsafe fn write_again(ctx: *mut raw::RedisModuleCtx, db: c_int, name: &[u8]) {
    let (Some(select), Some(create), Some(free)) = (
        raw::RedisModule_SelectDb,
        raw::RedisModule_CreateString,
        raw::RedisModule_FreeString,
    ) else {
        return;
    };
    if select(ctx, db) != raw::REDISMODULE_OK as c_int {
        return;
    }
    let key = create(ctx, name.as_ptr().cast(), name.len());
    if key.is_null() {
        return;
    }
    let state = LockKey::read(ctx, key).get().ok().flatten();
    let mono = mono_now();
    if let (Some(state), Some(boot)) = (state.filter(|s| s.is_held(mono)), boot_now()) {
        persist::replicate(
            ctx,
            key,
            &persist::persist_at(&state, mono, wall_now(), Some(boot)),
        );
        RESTAMPED.fetch_add(1, Relaxed);
    }
    free(ctx, key);
}
