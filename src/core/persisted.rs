//! A lock as it leaves the process (RDB, `DUMP`, AOF, the replication
//! stream) and how a reader times the lease it carries: the pure rules of
//! the persisted form. The encodings themselves (RDB calls, `REDLOCK.APPLY`)
//! are in the host (`host/persist.rs`).
//!
//! What leaves the process is the counter, the *hash* of the holder, the
//! lease twice: as its wall-clock end, for a reload after a restart, and as
//! the time remaining, for a process that is running now (a replica, a full
//! sync) and as the least a reload or a `RESTORE` keeps; and, for reclaiming
//! idle records (DESIGN §8), whether the last grant carried a FLOOR and the
//! idle time of a free lock, twice in the same way. [`Source`] says which
//! one a reader uses. Node-wide values travel with the records
//! ([`NodeRecord`]).

use crate::core::clock::{to_wall, WallMillis};
use crate::core::lease_time::{self, BootStamp, Origin, Reading, Written};
use crate::core::lock::{LockState, MonoMillis, OwnerHash};

/// Longest lease a running peer can hand over (one day, the largest
/// `redlock.max-ttl-ms`).
pub const STREAM_LEASE_LIMIT_MS: u64 = 86_400_000;

/// The node-wide values that travel with the data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeRecord {
    /// The highest counter of a record this node (or its master) reclaimed.
    pub reclaimed: u64,
    /// The longest lease this node (or its master) may have granted, in ms.
    pub longest_lease_ms: u64,
}

/// What one `REDLOCK.APPLY` carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The resulting state of the key.
    State(Persisted),
    /// The key was reclaimed with this counter: delete it, raise the
    /// node's reclaimed counter.
    Reclaimed(u64),
    /// Node-wide values to raise; the key is not touched.
    Node(NodeRecord),
    /// The longest lease every replica of the master acknowledged knowing
    /// (`core/lease_ack_rule.rs`), sent to replicas after each node record;
    /// the key is not touched.
    Acked(u64),
    /// A master's announcement for the replica-sync check (`host/sync.rs`);
    /// the key is not touched.
    Sync {
        /// The master's replication offset before it announced.
        offset: u64,
        /// The master's `redlock.sync-replicas`.
        r: u64,
        /// How long a replica promoted now must still guard, in ms.
        hold_ms: u64,
        /// The master's new-disk wait (`sync_rule::new_disk_wait`), in ms;
        /// 0 when the announcement does not say (an earlier version).
        new_disk_wait_ms: u64,
    },
}

/// A lock as it leaves the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Persisted {
    /// The fencing counter.
    pub counter: u64,
    /// Hash of the holder; `None` when free.
    pub owner: Option<OwnerHash>,
    /// Wall-clock end of the lease in ms since the epoch; 0 when free.
    pub expiry: WallMillis,
    /// Milliseconds left on the lease when it was written; `None` in
    /// version-1 records, which only have the wall-clock end.
    pub remaining: Option<u64>,
    /// The last grant carried a FLOOR (always false in version 1).
    pub floored: bool,
    /// Wall-clock ms since the epoch since which a free lock is unchanged;
    /// 0 when held (or unknown).
    pub idle_wall: WallMillis,
    /// How long a free lock had been unchanged when written, in ms; `None`
    /// in version-1 records.
    pub idle_ms: Option<u64>,
    /// The boot clock when written; `None` before version 3, or when the
    /// writer could not read it.
    pub boot: Option<BootStamp>,
}

impl Persisted {
    /// What the record says about the end of its lease.
    pub fn written(&self) -> Written {
        Written {
            expiry: self.expiry,
            remaining: self.remaining,
            boot: self.boot,
        }
    }
}

/// Where a persisted lock comes from, which decides how its lease is read
/// ([`crate::core::lease_time::lease_left`]). Either way a loaded lease is
/// never longer than `clamp_ms`, the longest lease this node may have
/// granted (or learned from its master): a record cannot hold a lock longer
/// than any lease this node would give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file written before this load (RDB, AOF, AOF preamble), or a
    /// `RESTORE` payload. Written on this boot: the later of its end on the
    /// boot clock and its wall-clock end, so a lease that ended while the
    /// node was down comes back free. Written on another boot: the wall
    /// clock may have stepped while the node was down, so the lease never
    /// ends earlier than the time it had left when written (the later of
    /// its wall-clock end and that time from now).
    Disk {
        /// The longest lease this node may have granted.
        clamp_ms: u64,
    },
    /// A master running now (replication stream, full sync): the
    /// remaining time, on this node's monotonic clock. The transfer delay
    /// only lengthens it. A version-1 record has no remaining time and is
    /// read from its wall-clock end.
    Stream {
        /// The longest lease this node may have granted.
        clamp_ms: u64,
    },
}

/// The persisted form of `state` at the clock readings `mono` / `wall` /
/// `boot` (`boot` read after `mono`). An expired lease is written as free,
/// idle since the lease ended.
pub fn persist_at(
    state: &LockState,
    mono: MonoMillis,
    wall: WallMillis,
    boot: Option<BootStamp>,
) -> Persisted {
    match (state.holder(mono), state.live_deadline(mono)) {
        (Some(owner), Some(deadline)) => Persisted {
            counter: state.counter(),
            owner: Some(*owner),
            expiry: to_wall(deadline, mono, wall),
            remaining: Some(deadline - mono),
            floored: state.floored(),
            idle_wall: 0,
            idle_ms: Some(0),
            boot,
        },
        _ => {
            let idle = mono.saturating_sub(state.idle_since());
            Persisted {
                counter: state.counter(),
                owner: None,
                expiry: 0,
                remaining: Some(0),
                floored: state.floored(),
                idle_wall: wall.saturating_sub(idle),
                idle_ms: Some(idle),
                boot,
            }
        }
    }
}

/// Rebuilds a live state from its persisted form at the clock readings
/// `mono` / `wall` / `boot`. A lease that has ended comes back free; the
/// counter always survives.
///
/// The lease is timed by [`crate::core::lease_time::lease_left`]: from
/// disk on the boot that wrote it, it ends at its real end (the later of
/// its boot-clock and wall-clock ends); from disk on another boot, at
/// `min(clamp, max(expiry - wall, remaining))`, so a forward step of the
/// wall clock across a restart cannot shorten it (it would free a lock its
/// holder still uses), and a backward step cannot stretch it past the
/// longest lease. The idle time of a free lock, which decides reclamation,
/// is bounded the other way: never more than it was when written (nor than
/// the wall clock says), so a forward step cannot make a record
/// reclaimable early; the time the node was down is not counted, which
/// only delays reclamation.
pub fn restore(
    p: &Persisted,
    source: Source,
    mono: MonoMillis,
    wall: WallMillis,
    boot: Option<BootStamp>,
) -> LockState {
    let (origin, clamp_ms) = match source {
        Source::Disk { clamp_ms } => (Origin::Disk, clamp_ms),
        Source::Stream { clamp_ms } => (Origin::Stream, clamp_ms),
    };
    let lease_ms = lease_time::lease_left(&p.written(), origin, &Reading { wall, boot }, clamp_ms);
    if let (Some(owner), true) = (p.owner, lease_ms > 0) {
        let deadline = mono.saturating_add(lease_ms);
        return LockState::from_parts(p.counter, Some(owner), deadline, 0, p.floored);
    }
    // Free: how long it has been unchanged. Unknown (version 1, a wall clock
    // set back) reads as "changed just now", which only delays reclamation.
    let idle = match (source, p.idle_ms) {
        _ if p.owner.is_some() && p.expiry != 0 => match p.remaining {
            // A lease that ended before this load: "changed just now", or,
            // in version 1, idle since its wall-clock end.
            Some(_) => 0,
            None => wall.saturating_sub(p.expiry),
        },
        (Source::Stream { .. }, Some(idle_ms)) => idle_ms,
        // The wall clock's word, but never more than the idle time written:
        // a forward step while the node was down must not count as idle.
        (Source::Disk { .. }, Some(idle_ms)) if p.idle_wall != 0 => {
            wall.saturating_sub(p.idle_wall).min(idle_ms)
        }
        _ => 0,
    };
    LockState::from_parts(p.counter, None, 0, mono.saturating_sub(idle), p.floored)
}

/// Whether the lease `p`, read from `source` at `wall` / `boot`, must be
/// written again with this boot's stamp ([`lease_time::restamp_needed`];
/// the host writes it: `host/restamp.rs`).
pub fn restamp_needed(
    p: &Persisted,
    source: Source,
    wall: WallMillis,
    boot: Option<BootStamp>,
) -> bool {
    match source {
        Source::Disk { clamp_ms } if p.owner.is_some() => lease_time::restamp_needed(
            &p.written(),
            Origin::Disk,
            &Reading { wall, boot },
            clamp_ms,
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::owner::hash_owner;

    const WALL: WallMillis = 1_796_000_000_000;

    fn held(counter: u64, deadline: MonoMillis) -> LockState {
        LockState::from_parts(counter, Some([7; 16]), deadline, 0, true)
    }

    #[test]
    fn a_live_lease_carries_both_its_end_and_its_remaining_time() {
        let p = persist_at(&held(5, 1_500), 1_000, WALL, None);
        assert_eq!(
            p,
            Persisted {
                counter: 5,
                owner: Some([7; 16]),
                expiry: WALL + 500,
                remaining: Some(500),
                floored: true,
                idle_wall: 0,
                idle_ms: Some(0),
                boot: None,
            }
        );
        // Run out 250 ms ago: free, idle since the end of the lease.
        let free = persist_at(&held(5, 1_500), 1_750, WALL, None);
        assert_eq!(free.owner, None);
        assert_eq!(free.expiry, 0);
        assert_eq!(free.counter, 5);
        assert_eq!((free.idle_wall, free.idle_ms), (WALL - 250, Some(250)));
    }

    #[test]
    fn the_idle_time_travels_like_the_lease() {
        let mono = 1 << 40;
        let freed = LockState::from_parts(9, None, 0, mono - 7_000, true);
        let p = persist_at(&freed, mono, WALL, None);
        assert_eq!(
            (p.idle_wall, p.idle_ms, p.floored),
            (WALL - 7_000, Some(7_000), true)
        );
        let idle = |s: &LockState, now: MonoMillis| now - s.idle_since();
        // A running peer: the time since the change, whatever its wall clock.
        let stream = Source::Stream { clamp_ms: 60_000 };
        for peer_wall in [WALL - 3_600_000, WALL + 3_600_000] {
            let s = restore(&p, stream, 1 << 41, peer_wall, None);
            assert_eq!(idle(&s, 1 << 41), 7_000);
            assert!(s.floored());
        }
        // From disk, 10 s later by the wall clock: the idle time written,
        // not more (the clock may have stepped forward while the node was down).
        let disk = Source::Disk { clamp_ms: 60_000 };
        assert_eq!(
            idle(&restore(&p, disk, 1 << 40, WALL + 10_000, None), 1 << 40),
            7_000
        );
        // A wall clock set back: "changed just now", never negative.
        assert_eq!(
            idle(&restore(&p, disk, 1 << 40, WALL - 60_000, None), 1 << 40),
            0
        );
        // A lease from disk that, by the wall clock, ended while the node was
        // down is held for the time it had left when written.
        let leased = persist_at(&held(5, 21_000), 1_000, WALL, None);
        let s = restore(&leased, disk, 1 << 40, WALL + 50_000, None);
        assert_eq!(s.inspect(1 << 40).pttl, Some(20_000));
        // Version 1 has no FLOOR mark: never reclaimable until a new FLOOR grant.
        let v1 = Persisted {
            floored: false,
            idle_wall: 0,
            idle_ms: None,
            remaining: None,
            ..p
        };
        let s = restore(&v1, disk, 1 << 40, WALL, None);
        assert!(!s.floored());
        assert_eq!(idle(&s, 1 << 40), 0);
    }

    #[test]
    fn a_replica_times_the_lease_from_the_remaining_time_whatever_its_clock() {
        let p = persist_at(&held(5, 21_000), 1_000, WALL, None);
        let source = Source::Stream { clamp_ms: 60_000 };
        for replica_wall in [WALL - 3_600_000, WALL, WALL + 3_600_000] {
            let s = restore(&p, source, 70, replica_wall, None);
            assert_eq!(s.inspect(70).pttl, Some(20_000), "wall {replica_wall}");
        }
    }

    #[test]
    fn a_lease_from_disk_never_ends_before_its_time_left_and_is_clamped() {
        let p = persist_at(&held(5, 21_000), 1_000, WALL, None);
        let disk = Source::Disk { clamp_ms: 60_000 };
        // Written with 20 s left. Reloaded 5 s later, or with the clock
        // stepped forward 55 s or an hour: never less than those 20 s.
        for wall in [WALL, WALL + 5_000, WALL + 55_000, WALL + 3_600_000] {
            let s = restore(&p, disk, 9, wall, None);
            assert_eq!(s.inspect(9).pttl, Some(20_000), "wall {wall}");
            assert_eq!(s.counter(), 5);
        }
        // The clock went back an hour across the restart: the wall-clock end,
        // never more than the clamp.
        assert_eq!(
            restore(&p, disk, 9, WALL - 3_600_000, None).inspect(9).pttl,
            Some(60_000)
        );
        assert_eq!(
            restore(&p, disk, 9, WALL - 10_000, None).inspect(9).pttl,
            Some(30_000)
        );
    }

    #[test]
    fn a_lease_from_a_running_peer_is_clamped_to_the_longest_lease() {
        // A day left, on a node whose longest lease is one second.
        let p = persist_at(&held(5, 86_400_000 + 1), 1, WALL, None);
        let s = restore(&p, Source::Stream { clamp_ms: 1_000 }, 9, WALL, None);
        assert_eq!(s.inspect(9).pttl, Some(1_000));
        // Its remaining time and its wall-clock end disagree (1 ms left, end
        // a minute away): a running peer is timed by the remaining time.
        let skewed = Persisted {
            remaining: Some(1),
            expiry: WALL + 60_000,
            ..p
        };
        let s = restore(&skewed, Source::Stream { clamp_ms: 60_000 }, 9, WALL, None);
        assert_eq!(s.inspect(9).pttl, Some(1));
    }

    #[test]
    fn version_one_records_are_read_from_the_wall_clock_even_from_a_stream() {
        let p = Persisted {
            counter: 3,
            owner: Some(hash_owner(b"old")),
            expiry: WALL + 90_000,
            remaining: None,
            floored: false,
            idle_wall: 0,
            idle_ms: None,
            boot: None,
        };
        let s = restore(&p, Source::Stream { clamp_ms: 60_000 }, 1, WALL, None);
        assert_eq!(s.inspect(1).pttl, Some(60_000));
        assert_eq!(s.holder(1), Some(&hash_owner(b"old")));
    }
}
