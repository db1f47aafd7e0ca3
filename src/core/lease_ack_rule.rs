//! A master grants no lease longer than its replicas know of (DESIGN §13,
//! simulator seeds 189,411 and 892,199).
//!
//! A promoted replica guards for the longest lease it knows
//! ([`crate::core::guard_rule`]); it learns its master's from the node
//! record in the replication stream. Replication is asynchronous: after
//! `redlock.max-ttl-ms` is raised on a master (and not on its replicas), a
//! client may take a lease of the new length before a lagging replica
//! applied the record announcing it; the master dies, the replica is
//! promoted, guards for its older, shorter longest lease and grants the
//! lock while the old master's lease still runs: two holders.
//!
//! So a master keeps the longest lease that every replica of its life has
//! acknowledged knowing ([`LeaseAck::acked_ms`]), and refuses an ACQUIRE or
//! EXTEND to a longer ttl (a transient `NOSYNC` reply, the client tries
//! again) until every replica of its life acknowledged a replication offset
//! past an announcement of a longest lease at least that long. The
//! acknowledgements are the ones the lowering of `sync-replicas` to 0
//! waits for ([`crate::core::sync_rule::lowering_waits_for`]): the offset of
//! `INFO replication`, which a replica reports only for what it applied.
//!
//! Why it is safe: a lease of ttl `t` is granted only once every replica of
//! the master's life has applied a record saying `t` or more, and a replica
//! records what it learned durably before it goes on; a replica promoted
//! later guards for at least `t`. A replica that restarts without its files
//! forgets what it acknowledged, but it is then not online (no offset)
//! until its full sync, which carries the record again; one promoted before
//! that guards for [`crate::core::guard_rule::LEASE_LIMIT_MS`] (it learned
//! nothing, `Guard::on_promotion`).
//!
//! A master that never had a replica is not held back: a replica that joins
//! later gets the record with its first full sync. At a promotion the
//! acknowledged length starts at the longest lease the new master knows
//! ([`LeaseAck::starting`]): it learned it as a replica of the same master
//! as its fellow replicas. At a load (a restart) a master with replicas
//! starts from what they acknowledged in the run before, kept on its disk
//! ([`LeaseAck::at_load`]), so a `max-ttl-ms` raised in its configuration
//! across the restart waits like one raised with `CONFIG SET`; a replica
//! that knows nothing at all guards, promoted, for the longest lease any
//! node grants. The first grant of a longer lease waits for one
//! acknowledgement round (replicas acknowledge once a second).

use std::collections::BTreeSet;

use crate::core::mutant::{Mutant, Mutants};
use crate::core::sync_rule::lowering_waits_for;

/// An announcement of the longest lease waiting for acknowledgements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announced {
    /// The longest lease it said.
    pub ms: u64,
    /// The master offset every replica must acknowledge (one past the
    /// announcement).
    pub target: u64,
}

/// Why a lease of this length is not granted yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseAckRefusal {
    /// The ttl asked for.
    pub ttl_ms: u64,
    /// The longest lease every replica acknowledged knowing.
    pub acked_ms: u64,
    /// The replicas not acknowledged yet (empty: the announcement is not
    /// out yet).
    pub waiting: Vec<String>,
}

/// What a master knows of its replicas' knowledge of its longest lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseAck {
    acked_ms: u64,
    pending: Option<Announced>,
}

impl LeaseAck {
    /// Before a life as master: nothing acknowledged.
    pub const fn new() -> Self {
        LeaseAck {
            acked_ms: 0,
            pending: None,
        }
    }

    /// A life as master starts (a load, a promotion) knowing `longest_ms`
    /// as its longest lease: its replicas learn that length with their sync
    /// (see the module documentation).
    pub const fn starting(longest_ms: u64) -> Self {
        LeaseAck {
            acked_ms: longest_ms,
            pending: None,
        }
    }

    /// A life as master that begins at a load (a restart): `kept_ms` is
    /// the acknowledged length its disk kept from the run before (`None`:
    /// no file), `had_replicas` whether its replica set (kept on disk)
    /// names any, `longest_ms` the longest lease it knows now.
    ///
    /// A master with replicas starts from what they acknowledged before,
    /// never from its longest lease: a `max-ttl-ms` raised in its
    /// configuration across the restart is new to a replica that lags (it
    /// may not even be connected yet), exactly like one raised with
    /// `CONFIG SET` (`tests/lease_ack_restart.rs`). Without the file (an
    /// upgrade, a lost disk) it starts from 0: the first longer lease waits
    /// for one acknowledgement round. A master that never had a replica
    /// starts from its longest lease (a replica that joins later learns it
    /// with its full sync).
    pub fn at_load(kept_ms: Option<u64>, had_replicas: bool, longest_ms: u64) -> Self {
        let acked_ms = if had_replicas {
            kept_ms.unwrap_or(0).min(longest_ms)
        } else {
            longest_ms
        };
        LeaseAck {
            acked_ms,
            pending: None,
        }
    }

    /// The longest lease every replica of this master's life acknowledged
    /// knowing.
    pub fn acked_ms(&self) -> u64 {
        self.acked_ms
    }

    /// The announcement waited for, if any.
    pub fn pending(&self) -> Option<Announced> {
        self.pending
    }

    /// An announcement of the longest lease `ms` lies before master offset
    /// `target`: what the check waits for next (a longer one replaces a
    /// shorter).
    pub fn announced(&mut self, ms: u64, target: u64) {
        if ms <= self.acked_ms {
            return;
        }
        match self.pending {
            Some(p) if p.ms > ms => {}
            _ => self.pending = Some(Announced { ms, target }),
        }
    }

    /// Whether a lease of `ttl_ms` may be granted: `known` is the replica
    /// set of the master's life, `acks` every replica online now with the
    /// offset it acknowledged (`ip:port`, online, offset).
    pub fn check(
        &mut self,
        ttl_ms: u64,
        known: &BTreeSet<String>,
        acks: &[(String, bool, u64)],
        mutants: Mutants,
    ) -> Result<(), LeaseAckRefusal> {
        if mutants.on(Mutant::NoLeaseAck) || ttl_ms <= self.acked_ms || known.is_empty() {
            return Ok(());
        }
        let mut waiting = Vec::new();
        if let Some(p) = self.pending {
            waiting = lowering_waits_for(known, acks, p.target);
            if waiting.is_empty() {
                self.acked_ms = self.acked_ms.max(p.ms);
                self.pending = None;
                if ttl_ms <= self.acked_ms {
                    return Ok(());
                }
            }
        }
        Err(LeaseAckRefusal {
            ttl_ms,
            acked_ms: self.acked_ms,
            waiting,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_restart_starts_from_what_the_replicas_acknowledged_before() {
        // A replica set: what the disk kept, not the (raised) longest lease.
        assert_eq!(
            LeaseAck::at_load(Some(1_000), true, 5_000).acked_ms(),
            1_000
        );
        assert_eq!(
            LeaseAck::at_load(Some(5_000), true, 1_000).acked_ms(),
            1_000
        );
        assert_eq!(LeaseAck::at_load(None, true, 5_000).acked_ms(), 0);
        // Never a replica: the longest lease.
        assert_eq!(LeaseAck::at_load(None, false, 5_000).acked_ms(), 5_000);
        let known = set(&["r1:1"]);
        let mut a = LeaseAck::at_load(Some(1_000), true, 5_000);
        assert_eq!(a.check(1_000, &known, &[], Mutants::NONE), Ok(()));
        assert!(a.check(5_000, &known, &[], Mutants::NONE).is_err());
    }

    #[test]
    fn a_master_without_replicas_is_not_held_back() {
        let mut a = LeaseAck::new();
        assert_eq!(a.check(5_000, &set(&[]), &[], Mutants::NONE), Ok(()));
    }

    #[test]
    fn a_longer_lease_waits_until_every_replica_of_the_life_acknowledged() {
        let known = set(&["r1:1", "r2:2"]);
        let mut a = LeaseAck::starting(500);
        assert_eq!(a.check(500, &known, &[], Mutants::NONE), Ok(()));
        // Nothing announced yet.
        assert!(a.check(1_000, &known, &[], Mutants::NONE).is_err());
        a.announced(1_000, 50);
        let one = vec![
            ("r1:1".to_string(), true, 60),
            ("r2:2".to_string(), true, 40),
        ];
        let refused = a.check(1_000, &known, &one, Mutants::NONE).unwrap_err();
        assert_eq!(refused.waiting, vec!["r2:2".to_string()]);
        // r2 gone: still waited for (it may be promoted).
        let gone = vec![("r1:1".to_string(), true, 60)];
        assert!(a.check(1_000, &known, &gone, Mutants::NONE).is_err());
        let both = vec![
            ("r1:1".to_string(), true, 60),
            ("r2:2".to_string(), true, 50),
        ];
        assert_eq!(a.check(1_000, &known, &both, Mutants::NONE), Ok(()));
        assert_eq!(a.acked_ms(), 1_000);
        // Shorter or equal leases pass without looking; a longer one waits.
        assert_eq!(a.check(900, &known, &[], Mutants::NONE), Ok(()));
        assert!(a.check(1_001, &known, &both, Mutants::NONE).is_err());
    }

    /// The mutant puts the hole back: a longer lease is granted unacknowledged.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_grants_a_longer_lease_unacknowledged() {
        let mut a = LeaseAck::starting(1_000);
        let known: BTreeSet<String> = ["r1:1".to_string()].into();
        let on = Mutants::NONE.with(Mutant::NoLeaseAck, true);
        assert_eq!(a.check(1_001, &known, &[], on), Ok(()));
    }
}
