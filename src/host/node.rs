//! The node-wide values that travel with the data (RDB auxiliary data,
//! `REDLOCK.APPLY key node …`, AOF rewrites; see [`crate::host::persist`]): the
//! highest counter the sweep ([`crate::host::reclaim`]) deleted, kept here, and
//! the longest lease the node may have granted, kept by [`crate::host::guard`].
//!
//! The type callbacks ([`crate::host::datatype`]), the commands and the sweep all
//! read and raise them through this module, which depends on none of them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

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

/// Takes in node-wide values from the master or from a file.
pub fn learn_node_record(ctx: &redis_module::Context, n: &NodeRecord) {
    raise_reclaimed(n.reclaimed);
    guard::learn_lease(ctx, n.longest_lease_ms);
}
