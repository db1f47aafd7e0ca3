//! The node-wide values that travel with the data (RDB auxiliary data,
//! `REDLOCK.APPLY key node …`, AOF rewrites; see [`crate::host::persist`]): the
//! highest counter the sweep ([`crate::host::reclaim`]) deleted, kept here, and
//! the longest lease the node may have granted, kept by [`crate::host::guard`].
//!
//! The type callbacks ([`crate::host::datatype`]), the commands and the sweep all
//! read and raise them through this module, which depends on none of them.

use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::raw;

use crate::host::guard;
use crate::host::mutant::{self, Mutant};
use crate::host::persist::NodeRecord;

/// The highest counter of any record this node (or its master) reclaimed.
static RECLAIMED_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The highest counter of any record this node (or its master) reclaimed:
/// the counter a missing record starts from ([`crate::core::lock::LockState::missing`]).
pub fn reclaimed_counter() -> u64 {
    if mutant::on(Mutant::NoReclaimedFloor) {
        return 0;
    }
    RECLAIMED_COUNTER.load(Relaxed)
}

/// The highest reclaimed counter as kept, whatever a test mutant makes
/// [`reclaimed_counter`] answer: what the sweep's counter file records.
pub fn reclaimed_kept() -> u64 {
    RECLAIMED_COUNTER.load(Relaxed)
}

/// Raises the highest reclaimed counter to `counter` (a delete here, one
/// received from the master, or the value loaded with the data).
pub fn raise_reclaimed(counter: u64) {
    RECLAIMED_COUNTER.fetch_max(counter, Relaxed);
}

/// The node-wide values that travel with the data.
pub fn node_record() -> NodeRecord {
    NodeRecord {
        reclaimed: reclaimed_counter(),
        longest_lease_ms: guard::longest_lease(),
    }
}

/// Takes in node-wide values from the master (its stream or a full sync:
/// `from_master`, which makes it the node's teacher, `core/teacher.rs`) or
/// from a file of this node's own (which teaches nothing).
pub fn learn_node_record(ctx: &redis_module::Context, n: &NodeRecord, from_master: bool) {
    raise_reclaimed(n.reclaimed);
    guard::learn_lease(ctx, n.longest_lease_ms);
    crate::host::teacher::record_applied(ctx, from_master);
}

/// The key that `REDLOCK.APPLY key node …` names when no command's key is at
/// hand; that form leaves its key untouched.
const ANNOUNCE_KEY: &[u8] = b"redlock:node-record";

/// How long an announcement waits before it looks again while clients are
/// paused.
const PAUSED_RETRY_MS: i64 = 100;

/// Tells replicas and the AOF the node record soon (on the next turn of the
/// event loop, from a timer's context, like any effect of a command),
/// rather than only with the first grant that lengthens it: a replica that
/// misses that grant misses its announcement too, and promoted, it would
/// guard for less than its old master's leases (two holders). Called when
/// `redlock.max-ttl-ms` was raised and when a replica comes online (a
/// partial resync after this node restarted with a larger `max-ttl-ms`
/// carries no node record).
pub fn announce_soon(ctx: &redis_module::Context) {
    // SAFETY: a plain module API call with the event's context.
    unsafe {
        if let Some(create) = raw::RedisModule_CreateTimer {
            create(ctx.ctx, 0, Some(announce), std::ptr::null_mut());
        }
    }
}

unsafe extern "C" fn announce(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let context = redis_module::Context::new(ctx);
        crate::host::lease_ack::announce_ran();
        // Inside a client pause nothing may be propagated (Redis asserts
        // it; `CONFIG SET` raising max-ttl-ms is not a write, so it runs
        // inside a `CLIENT PAUSE … WRITE`): look again after it.
        if crate::host::replication::writes_paused() {
            // SAFETY: ctx is the timer's context on the main thread.
            unsafe {
                if let Some(create) = raw::RedisModule_CreateTimer {
                    create(ctx, PAUSED_RETRY_MS, Some(announce), std::ptr::null_mut());
                }
            }
            return;
        }
        if !crate::host::replication::needed(&context) {
            return;
        }
        // SAFETY: ctx is the timer's context; the string is freed below.
        unsafe {
            let (Some(create), Some(free)) =
                (raw::RedisModule_CreateString, raw::RedisModule_FreeString)
            else {
                return;
            };
            let key = create(ctx, ANNOUNCE_KEY.as_ptr().cast(), ANNOUNCE_KEY.len());
            if key.is_null() {
                return;
            }
            let record = node_record();
            crate::host::lease_ack::announcing(record.longest_lease_ms);
            crate::host::persist::replicate_node(ctx, key, &record);
            crate::host::persist::replicate_acked(ctx, key, crate::host::lease_ack::acked_ms());
            free(ctx, key);
        }
    }));
}
