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
//! later gets the record with its first full sync.
//!
//! A life as master that begins at a promotion starts from what every
//! replica of the *old* master acknowledged knowing, as the old master last
//! announced it ([`LeaseAck::promoted`], `REDLOCK.APPLY … acked`,
//! [`crate::core::teacher::Taught`]), never from the longest lease the new
//! master knows: a fellow replica that lagged, or has not reconnected to
//! the new master yet, may know no more than that. And it stays *held*: a
//! lease longer than its acknowledged length waits for an acknowledgement
//! even while its replica set is empty (a fellow replica that never
//! reconnects is a candidate for the next promotion all the same). Its own
//! replicas (a replica of a replica, seen while it was a replica:
//! [`LeaseAck::promoted`]'s `inherited`) learned from the old master's
//! stream through it, which proves nothing of what they applied: the life
//! starts from 0 until they acknowledged an announcement (or are
//! forgotten). At a load (a restart) a master with replicas, or whose life
//! was held, starts from what they acknowledged in the run before, kept on
//! its disk ([`LeaseAck::at_load`]), so a `max-ttl-ms` raised in its
//! configuration across the restart waits like one raised with `CONFIG
//! SET`; a replica that knows nothing at all guards, promoted, for the
//! longest lease any node grants. The first grant of a longer lease waits
//! for one acknowledgement round (replicas acknowledge once a second).
//!
//! Replicas are told apart by the address they announce (`ip:port`). Two
//! replicas at one address (`ip#2:port`, [`crate::core::sync_rule::replica_identities`]),
//! or a replica without a listening port, cannot be told apart later: one
//! that left is replaced by another that acknowledges in its place. So
//! while the life has such an identity ([`LeaseAck::saw_ambiguous`], or one
//! in its replica set) no lease longer than the acknowledged length is
//! granted; the refusal names them (give each replica its own
//! `replica-announce-ip`/`replica-announce-port`, or `REDLOCK.REPLICAS
//! FORGET` the one gone).

use std::collections::BTreeSet;

use crate::core::mutant::{Mutant, Mutants};
use crate::core::sync_rule::{listens, lowering_waits_for};

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
    /// out yet, or no replica is connected to a held life).
    pub waiting: Vec<String>,
    /// Identities that cannot be told apart (refused until they are
    /// forgotten or announced apart).
    pub ambiguous: Vec<String>,
}

/// Whether a replica identity may stand for more than one replica: one of
/// several at one address (`ip#2:port`), or one without a listening port.
pub fn ambiguous_identity(id: &str) -> bool {
    id.contains('#') || !listens(id)
}

/// What a master knows of its replicas' knowledge of its longest lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseAck {
    acked_ms: u64,
    pending: Option<Announced>,
    /// Held back even with an empty replica set (a life begun by promotion,
    /// or loaded with replicas).
    held: bool,
    /// Replicas of this node's life as a replica (replicas of a replica)
    /// that have not acknowledged an announcement of this life yet.
    inherited: BTreeSet<String>,
    /// What the life starts from once no inherited replica is left
    /// ([`LeaseAck::forget`]).
    base_ms: u64,
    /// Identities of this life that cannot be told apart.
    ambiguous: BTreeSet<String>,
    /// The life began at a load that found no file at all (no acknowledged
    /// length, no replica set), or at a load of the file of such a life
    /// that had no replica yet: this may be another run of a master at this
    /// address ([`LeaseAck::check_joining`]).
    fresh: bool,
}

/// What the master's file keeps of a [`LeaseAck`] across a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// The acknowledged length.
    pub acked_ms: u64,
    /// The life was held.
    pub held: bool,
    /// See [`LeaseAck`].
    pub base_ms: u64,
    /// See [`LeaseAck`].
    pub inherited: BTreeSet<String>,
    /// See [`LeaseAck`].
    pub ambiguous: BTreeSet<String>,
    /// The life was fresh ([`LeaseAck::fresh`]): a restart before its
    /// first replica came online is fresh again (finding I).
    pub fresh: bool,
}

impl Kept {
    /// Parses the file: version 2 (`redlock-lease-acked 2` and one `name
    /// value` line each), or the bare number of version 1 (the acknowledged
    /// length alone). `None`: unreadable.
    ///
    /// The line `fresh 1` is written only by a fresh life: a build before
    /// it finds a name it does not know and reads no file at all, which
    /// makes its life fresh too (and, with replicas, held at 0): the same
    /// or the safe side.
    pub fn parse(text: &str) -> Option<Kept> {
        let mut lines = text.lines();
        let first = lines.next()?.trim();
        if let Ok(acked_ms) = first.parse::<u64>() {
            return Some(Kept {
                acked_ms,
                ..Kept::default()
            });
        }
        if first != "redlock-lease-acked 2" {
            return None;
        }
        let mut kept = Kept::default();
        for line in lines {
            let (name, value) = line.trim().split_once(' ')?;
            match name {
                "acked" => kept.acked_ms = value.parse().ok()?,
                "held" => kept.held = value == "1",
                "base" => kept.base_ms = value.parse().ok()?,
                "inherited" => {
                    kept.inherited.insert(value.to_string());
                }
                "ambiguous" => {
                    kept.ambiguous.insert(value.to_string());
                }
                "fresh" => kept.fresh = value == "1",
                _ => return None,
            }
        }
        Some(kept)
    }

    /// The file's text (version 2).
    pub fn render(&self) -> String {
        let mut text = format!(
            "redlock-lease-acked 2\nacked {}\nheld {}\nbase {}\n",
            self.acked_ms,
            u8::from(self.held),
            self.base_ms
        );
        for id in &self.inherited {
            text.push_str(&format!("inherited {id}\n"));
        }
        for id in &self.ambiguous {
            text.push_str(&format!("ambiguous {id}\n"));
        }
        if self.fresh {
            text.push_str("fresh 1\n");
        }
        text
    }
}

impl LeaseAck {
    /// Before a life as master: nothing acknowledged.
    pub const fn new() -> Self {
        LeaseAck {
            acked_ms: 0,
            pending: None,
            held: false,
            inherited: BTreeSet::new(),
            base_ms: 0,
            ambiguous: BTreeSet::new(),
            fresh: false,
        }
    }

    /// A life as master that begins at a promotion. `learned_acked_ms`: the
    /// acknowledged length the old master last announced, when this node is
    /// taught by it ([`crate::core::teacher::Taught::acked_ms`]; 0
    /// otherwise); `longest_ms` the longest lease this node knows;
    /// `inherited` the replicas it had as a replica.
    ///
    /// Every replica of the old master acknowledged knowing
    /// `learned_acked_ms` (a replica that joined the old master later got a
    /// record at least that long with its full sync), so a fellow replica
    /// promoted after this node guards at least that long; nothing longer
    /// is known of it. The life is held: an empty replica set does not mean
    /// no replica may be promoted after this one.
    pub fn promoted(
        learned_acked_ms: u64,
        longest_ms: u64,
        inherited: BTreeSet<String>,
        mutants: Mutants,
    ) -> Self {
        if mutants.on(Mutant::PromotionTrustsLongest) {
            // The rule before: its replicas learned its longest lease as
            // replicas of the same master.
            return LeaseAck {
                acked_ms: longest_ms,
                ..LeaseAck::new()
            };
        }
        let base_ms = learned_acked_ms.min(longest_ms);
        LeaseAck {
            acked_ms: if inherited.is_empty() { base_ms } else { 0 },
            pending: None,
            held: true,
            ambiguous: inherited
                .iter()
                .filter(|id| ambiguous_identity(id))
                .cloned()
                .collect(),
            inherited,
            base_ms,
            fresh: false,
        }
    }

    /// A life as master that begins at a load (a restart): `kept` is what
    /// its disk kept from the run before (`None`: no file),
    /// `had_replicas` whether its replica set (kept on disk) names any,
    /// `longest_ms` the longest lease it knows now.
    ///
    /// A master with replicas, or whose life was held, starts from what
    /// they acknowledged before, never from its longest lease: a
    /// `max-ttl-ms` raised in its configuration across the restart is new
    /// to a replica that lags (it may not even be connected yet), exactly
    /// like one raised with `CONFIG SET` (`tests/lease_ack_restart.rs`).
    /// Without the file (an upgrade, a lost disk) it starts from 0: the
    /// first longer lease waits for one acknowledgement round. A master
    /// that never had a replica starts from its longest lease (a replica
    /// that joins later learns it with its full sync).
    ///
    /// Such a life is *fresh* ([`LeaseAck::check_joining`]) when no file
    /// was found, and also when the file is that of a fresh life and no
    /// replica came online since (finding I): the first run on a new disk
    /// writes its file at load, and a replica of the run before the disk
    /// was lost that had not reached it is no less a stranger to the second
    /// run. A fresh life whose replica came online loads with replicas,
    /// held, and is fresh no more: its replica set names who it waits for.
    /// (Under the `fresh-forgotten-at-restart` mutant only a missing file
    /// makes a life fresh.)
    pub fn at_load(
        kept: Option<Kept>,
        had_replicas: bool,
        longest_ms: u64,
        mutants: Mutants,
    ) -> Self {
        let kept_held =
            kept.as_ref().is_some_and(|k| k.held) && !mutants.on(Mutant::PromotionTrustsLongest);
        let held = had_replicas || kept_held;
        if !held {
            let fresh = match &kept {
                None => true,
                Some(k) => k.fresh && !mutants.on(Mutant::FreshForgottenAtRestart),
            };
            return LeaseAck {
                acked_ms: longest_ms,
                fresh,
                ..LeaseAck::new()
            };
        }
        let kept = kept.unwrap_or_default();
        LeaseAck {
            acked_ms: kept.acked_ms.min(longest_ms),
            pending: None,
            held: true,
            base_ms: kept.base_ms.min(longest_ms),
            inherited: kept.inherited,
            ambiguous: kept.ambiguous,
            // A fresh life held by its configuration
            // ([`LeaseAck::held_by_configuration`]) stays fresh until a
            // replica came online, like one that is not held (finding I).
            fresh: kept.fresh && !had_replicas && !mutants.on(Mutant::FreshForgottenAtRestart),
        }
    }

    /// What the configuration file keeps of a life begun by promotion
    /// (`redlock.promoted-acked-ms`, written with `CONFIG REWRITE` at the
    /// promotion): the acknowledged length it started from. `None` for a
    /// life that is not held.
    pub fn configured_hold(&self) -> Option<u64> {
        self.held.then_some(self.acked_ms.min(self.base_ms))
    }

    /// A load whose life is not held by its files, on a node whose
    /// configuration file says it was promoted (`configured_ms`, what
    /// [`LeaseAck::configured_hold`] said then): held from that length.
    ///
    /// Why (simulator seed 3,098,182): the held state of a promoted life
    /// is in its data directory. Lost with the disk, the next run is a
    /// fresh master with no replica, free to grant whatever `max-ttl-ms` is
    /// raised to; a fellow replica of the old master that Sentinel has not
    /// repointed yet never becomes a replica of that run, still counts as
    /// taught by the old master, and, promoted next, guards only for what
    /// the old master taught it. The configuration file survives a lost
    /// data disk (finding L): held from what every replica of the old
    /// master acknowledged, the run grants a longer lease only once a
    /// replica of its own acknowledged knowing it. A replica of this run
    /// learned at least that length from its full sync; a fellow replica
    /// of the old master acknowledged it there. A load with its files
    /// knows more: those decide. (Under the `held-lost-with-disk` mutant
    /// the configuration is not read.)
    ///
    /// A file that says held is the current life's: a node that starts as
    /// a replica resets its file (as a demotion does, `host/lease_ack.rs`),
    /// so a promotion always finds it not held, and a crash between the
    /// promotion's configuration write and its file write leaves a load
    /// that this configuration holds. (Taking the smaller of a held file
    /// and the configuration instead sent every once-promoted master back
    /// to its promotion's hold at each restart, for good once its replicas
    /// were gone.)
    pub fn held_by_configuration(mut self, configured_ms: Option<u64>, mutants: Mutants) -> Self {
        if self.held || mutants.on(Mutant::HeldLostWithDisk) {
            return self;
        }
        let Some(ms) = configured_ms else {
            return self;
        };
        let ms = ms.min(self.acked_ms);
        self.acked_ms = ms;
        self.base_ms = ms;
        self.held = true;
        self
    }

    /// After a load: the `redlock.promoted-acked-ms` to write when the
    /// configuration file (saying `configured`) holds this life back less
    /// than its files do ([`LeaseAck::configured_hold`]); `None`: nothing to
    /// write. A life held by its data directory alone (promoted under a
    /// release without the copy, a configuration write that failed, a crash
    /// between the file and the configuration) is copied, so that a later
    /// new disk is held too. A smaller configured value stays: it only
    /// holds back more.
    pub fn hold_to_configure(&self, configured: Option<u64>, mutants: Mutants) -> Option<u64> {
        if mutants.on(Mutant::LoadedNotConfigured) {
            return None;
        }
        // A hold of 0 is a life with nothing to start from (every
        // ordinary master restarted with replicas): copied, it would refuse
        // every lease of a later run on a new disk without replicas.
        let hold = self.configured_hold().filter(|&h| h > 0)?;
        configured.is_none_or(|c| c > hold).then_some(hold)
    }

    /// What the master's file keeps.
    pub fn kept(&self) -> Kept {
        Kept {
            acked_ms: self.acked_ms,
            held: self.held,
            base_ms: self.base_ms,
            inherited: self.inherited.clone(),
            ambiguous: self.ambiguous.clone(),
            fresh: self.fresh,
        }
    }

    /// The longest lease every replica of this master's life acknowledged
    /// knowing.
    pub fn acked_ms(&self) -> u64 {
        self.acked_ms
    }

    /// Whether the life is held back even with an empty replica set.
    pub fn held(&self) -> bool {
        self.held
    }

    /// Whether, with an empty replica set, no lease is held back (what
    /// [`LeaseAck::check`] answers then without looking at any replica):
    /// the life is not held and knows no inherited nor ambiguous replica.
    pub fn free_without_replicas(&self) -> bool {
        !self.held && self.inherited.is_empty() && self.ambiguous.is_empty()
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

    /// Replica identities seen online now (the host's scan): those that
    /// cannot be told apart are remembered for the life. `true` when the
    /// set grew (the host writes its file).
    pub fn saw_ambiguous<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) -> bool {
        let mut grew = false;
        for id in ids {
            if ambiguous_identity(id) {
                grew |= self.ambiguous.insert(id.to_string());
            }
        }
        grew
    }

    /// `REDLOCK.REPLICAS FORGET id` (the replica is not connected): it is
    /// no longer waited for nor ambiguous. Once no inherited replica is
    /// left, the life goes on from its base. `true` when anything changed.
    pub fn forget(&mut self, id: &str) -> bool {
        let removed = self.inherited.remove(id) | self.ambiguous.remove(id);
        if removed && self.inherited.is_empty() {
            self.acked_ms = self.acked_ms.max(self.base_ms);
        }
        removed
    }

    /// Whether this life began at a load that found no file at all (or the
    /// file of such a life that had no replica yet, [`LeaseAck::at_load`]).
    pub fn fresh(&self) -> bool {
        self.fresh
    }

    /// The check of a lease of `ttl_ms` on a life begun at a load with no
    /// file at all, while `joining` replicas (not of this life) are in
    /// their first sync: refused, whatever its length, until they are
    /// online (then of this life, and checked as such by [`check`]).
    ///
    /// Why: the replica's teacher is an address. A master restarted on a
    /// new disk is another run at the same address: it never had a replica,
    /// so it grants up to its own longest lease at once, while a replica of
    /// its earlier run, reconnecting, still counts as taught by it (its full
    /// sync waits for `repl-diskless-sync-delay`, and its `INFO` shows no
    /// sync until the master forks) and, promoted, guards only for what the
    /// earlier run taught it. This run cannot know what that was: it grants
    /// nothing until the replica is online, by then holding this run's
    /// snapshot and its node record. Only such a life pays (a new
    /// deployment's first replica, one sync); one with files knows its
    /// replicas. (Under the `fresh-trusts-joining` mutant: not checked.)
    ///
    /// [`check`]: LeaseAck::check
    pub fn check_joining(
        &self,
        ttl_ms: u64,
        joining: &[String],
        mutants: Mutants,
    ) -> Result<(), LeaseAckRefusal> {
        if !self.fresh || joining.is_empty() || mutants.on(Mutant::FreshTrustsJoining) {
            return Ok(());
        }
        Err(LeaseAckRefusal {
            ttl_ms,
            acked_ms: 0,
            waiting: joining.to_vec(),
            ambiguous: Vec::new(),
        })
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
        if mutants.on(Mutant::NoLeaseAck) || ttl_ms <= self.acked_ms {
            return Ok(());
        }
        let refusal = |acked_ms, waiting, ambiguous| LeaseAckRefusal {
            ttl_ms,
            acked_ms,
            waiting,
            ambiguous,
        };
        if !mutants.on(Mutant::AmbiguousReplicasCounted) {
            // An identity that may stand for two replicas: the one that
            // acknowledges may not be the one that was there (why: module
            // documentation).
            let ambiguous: Vec<String> = self
                .ambiguous
                .iter()
                .chain(known.iter().filter(|id| ambiguous_identity(id)))
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if !ambiguous.is_empty() {
                return Err(refusal(self.acked_ms, Vec::new(), ambiguous));
            }
        }
        let all: BTreeSet<String> = known.union(&self.inherited).cloned().collect();
        if all.is_empty() && !self.held {
            return Ok(());
        }
        let mut waiting = Vec::new();
        if let Some(p) = self.pending {
            if !all.is_empty() {
                waiting = lowering_waits_for(&all, acks, p.target);
                if waiting.is_empty() {
                    self.acked_ms = self.acked_ms.max(p.ms);
                    self.pending = None;
                    // The inherited replicas acknowledged this life's
                    // announcement: from now on they are replicas like
                    // any other (online, so in `known`).
                    self.inherited.clear();
                    if ttl_ms <= self.acked_ms {
                        return Ok(());
                    }
                }
            }
        }
        Err(refusal(self.acked_ms, waiting, Vec::new()))
    }
}

/// How late a replica's `PSYNC` is seen under the `joining-seen-late`
/// mutant: the period of the look at `INFO replication` that found joining
/// replicas before finding J.
pub const JOINING_SEEN_LATE_MS: u64 = 100;

/// Whether a fresh life's check must look for joining replicas
/// ([`LeaseAck::check_joining`]): a replica's `PSYNC` (or `SYNC`) arrived
/// at `sync_began_at` (`None`: none since the last look found no replica
/// joining), and the check runs at `now` (the same monotonic clock).
///
/// Why at the `PSYNC` itself: a replica is in its first sync from that
/// command on (`wait_bgsave` in `INFO replication`), and a grant in a
/// later command must see it. The look before was a 100 ms timer, and a
/// grant between the `PSYNC` and the next look passed (finding J). The
/// host sees the command in a command filter, in the same event loop
/// turn, before any later command runs. (Under the `joining-seen-late`
/// mutant it is seen only [`JOINING_SEEN_LATE_MS`] later.)
pub fn sync_seen(sync_began_at: Option<u64>, now: u64, mutants: Mutants) -> bool {
    match sync_began_at {
        None => false,
        Some(at) if mutants.on(Mutant::JoiningSeenLate) => {
            now.saturating_sub(at) >= JOINING_SEEN_LATE_MS
        }
        Some(_) => true,
    }
}

/// The replicas a lease-ack check waits for: `life`, the replica set of
/// the master's life (replicas that came online), and `syncing`, the
/// replicas connected now that are not online yet (`ip:port` of
/// `INFO replication` lines in `wait_bgsave`, `send_bulk` …: their first
/// sync is under way).
///
/// Why the syncing ones: a replica joins the life's set only once online,
/// but its snapshot's node record is the one of the fork, and the stream
/// that would carry a later record starts only once it is online. A master
/// that grants a longer lease meanwhile (one that never had a replica is
/// not held) leaves a replica that, promoted right after its load, guards
/// for the snapshot's shorter length. Waited for, it must come online and
/// acknowledge an announcement of the longer record first. A syncing client
/// without a listening port (`ip:0`, a dump or change-data-capture tool) is
/// not waited for: Sentinel cannot promote it. A replica that connects
/// only after the check gets a snapshot forked after the grant, whose node
/// record holds its length; promoted before it loads that snapshot, it
/// still has only what it knew (finding H of `tests/adversarial_promotion.rs`,
/// open: its teacher names an address, not the master's run).
/// Under the `syncing-replicas-uncounted` mutant only `life` counts.
pub fn waited_for(
    life: &BTreeSet<String>,
    syncing: &[String],
    mutants: Mutants,
) -> BTreeSet<String> {
    let mut all = life.clone();
    if !mutants.on(Mutant::SyncingReplicasUncounted) {
        all.extend(syncing.iter().filter(|id| listens(id)).cloned());
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const N: Mutants = Mutants::NONE;

    #[test]
    fn a_fresh_life_grants_nothing_while_a_replica_joins() {
        let joining = vec!["127.0.0.1:7001".to_string()];
        let fresh = LeaseAck::at_load(None, false, 3_000, N);
        assert!(fresh.fresh());
        assert!(fresh.check_joining(1, &joining, N).is_err());
        assert!(fresh.check_joining(3_000, &[], N).is_ok());
        // A life with its file knows its replicas.
        let kept_life = LeaseAck::at_load(kept(3_000), false, 3_000, N);
        assert!(!kept_life.fresh());
        assert!(kept_life.check_joining(3_000, &joining, N).is_ok());
        // Nor is a promoted life fresh.
        let promoted = LeaseAck::promoted(0, 3_000, BTreeSet::new(), N);
        assert!(promoted.check_joining(3_000, &joining, N).is_ok());
    }

    /// Finding I: the first run on a new disk writes its file at load; the
    /// second run, with that file and still no replica, is fresh too. Once
    /// a replica came online, the next load (with replicas) is held, not
    /// fresh.
    #[test]
    fn a_fresh_life_stays_fresh_across_restarts_until_a_replica_came_online() {
        let joining = vec!["127.0.0.1:7001".to_string()];
        let run1 = LeaseAck::at_load(None, false, 3_000, N);
        let text = run1.kept().render();
        assert!(text.contains("fresh 1"), "{text}");
        let run2 = LeaseAck::at_load(Kept::parse(&text), false, 3_000, N);
        assert!(run2.fresh());
        assert!(run2.check_joining(1, &joining, N).is_err());
        let run3 = LeaseAck::at_load(Kept::parse(&run2.kept().render()), false, 3_000, N);
        assert!(run3.fresh());
        // A replica came online in a fresh run: the next load has replicas.
        let with_replicas = LeaseAck::at_load(Kept::parse(&run3.kept().render()), true, 3_000, N);
        assert!(!with_replicas.fresh());
        assert!(with_replicas.held());
        assert!(!with_replicas.kept().render().contains("fresh"));
        // A file of a life that was never fresh (also every file of the
        // builds before this line) does not make a fresh life.
        let old = "redlock-lease-acked 2\nacked 3000\nheld 0\nbase 0\n";
        assert!(!LeaseAck::at_load(Kept::parse(old), false, 3_000, N).fresh());
        assert!(!LeaseAck::at_load(Kept::parse("3000\n"), false, 3_000, N).fresh());
    }

    /// The mutant forgets freshness at a restart.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_forgets_a_fresh_life_at_restart() {
        let on = Mutants::NONE.with(Mutant::FreshForgottenAtRestart, true);
        let run1 = LeaseAck::at_load(None, false, 3_000, on);
        assert!(run1.fresh());
        let run2 = LeaseAck::at_load(Kept::parse(&run1.kept().render()), false, 3_000, on);
        assert!(!run2.fresh());
        assert!(run2
            .check_joining(3_000, &["127.0.0.1:7001".to_string()], on)
            .is_ok());
    }

    /// Finding J: a `PSYNC` is seen by the next check, however soon.
    #[test]
    fn a_sync_is_seen_by_the_next_check() {
        assert!(!sync_seen(None, 1_000, N));
        assert!(sync_seen(Some(1_000), 1_000, N));
        assert!(sync_seen(Some(1_000), 5_000, N));
    }

    /// The mutant sees it a poll period late.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_sees_a_sync_late() {
        let on = Mutants::NONE.with(Mutant::JoiningSeenLate, true);
        assert!(!sync_seen(Some(1_000), 1_000, on));
        assert!(!sync_seen(
            Some(1_000),
            1_000 + JOINING_SEEN_LATE_MS - 1,
            on
        ));
        assert!(sync_seen(Some(1_000), 1_000 + JOINING_SEEN_LATE_MS, on));
    }

    /// The mutant grants while a replica joins.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_trusts_a_joining_replica() {
        let on = Mutants::NONE.with(Mutant::FreshTrustsJoining, true);
        let fresh = LeaseAck::at_load(None, false, 3_000, on);
        assert!(fresh
            .check_joining(3_000, &["127.0.0.1:7001".to_string()], on)
            .is_ok());
    }

    #[test]
    fn syncing_replicas_are_waited_for() {
        let syncing = vec!["127.0.0.1:7001".to_string(), "127.0.0.1:0".to_string()];
        let all = waited_for(&set(&["127.0.0.1:7000"]), &syncing, N);
        assert_eq!(all, set(&["127.0.0.1:7000", "127.0.0.1:7001"]));
        // A master that never had a replica (not held) refuses a longer
        // lease while its first replica syncs, and waits for it.
        let mut a = LeaseAck::at_load(None, false, 1_000, N);
        let all = waited_for(&BTreeSet::new(), &syncing, N);
        let r = a.check(5_000, &all, &[], N).unwrap_err();
        assert_eq!(r.acked_ms, 1_000);
        // Without a syncing replica it grants.
        let none = waited_for(&BTreeSet::new(), &["127.0.0.1:0".to_string()], N);
        assert!(a.check(5_000, &none, &[], N).is_ok());
    }

    /// The mutant counts only the life's set.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_leaves_syncing_replicas_out() {
        let on = Mutants::NONE.with(Mutant::SyncingReplicasUncounted, true);
        let all = waited_for(&BTreeSet::new(), &["127.0.0.1:7001".to_string()], on);
        assert!(all.is_empty());
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn kept(acked_ms: u64) -> Option<Kept> {
        Some(Kept {
            acked_ms,
            ..Kept::default()
        })
    }

    #[test]
    fn a_restart_starts_from_what_the_replicas_acknowledged_before() {
        // A replica set: what the disk kept, not the (raised) longest lease.
        assert_eq!(
            LeaseAck::at_load(kept(1_000), true, 5_000, N).acked_ms(),
            1_000
        );
        assert_eq!(
            LeaseAck::at_load(kept(5_000), true, 1_000, N).acked_ms(),
            1_000
        );
        assert_eq!(LeaseAck::at_load(None, true, 5_000, N).acked_ms(), 0);
        // Never a replica: the longest lease.
        assert_eq!(LeaseAck::at_load(None, false, 5_000, N).acked_ms(), 5_000);
        let known = set(&["r1:1"]);
        let mut a = LeaseAck::at_load(kept(1_000), true, 5_000, N);
        assert_eq!(a.check(1_000, &known, &[], N), Ok(()));
        assert!(a.check(5_000, &known, &[], N).is_err());
        // A held life (begun by promotion) stays held across a restart,
        // with an empty replica set too.
        let mut p = LeaseAck::promoted(1_000, 5_000, set(&[]), N);
        let mut r = LeaseAck::at_load(Kept::parse(&p.kept().render()), false, 5_000, N);
        assert!(r.held());
        assert_eq!(r.acked_ms(), 1_000);
        assert!(r.check(5_000, &set(&[]), &[], N).is_err());
        assert!(p.check(5_000, &set(&[]), &[], N).is_err());
    }

    /// Seed 3,098,182: a promoted master restarted on a new disk (no file)
    /// is held from the length its configuration file kept, and stays
    /// fresh; a load with its file decides by the file.
    #[test]
    fn a_promoted_life_stays_held_across_a_lost_disk_through_its_configuration() {
        let promoted = LeaseAck::promoted(200, 200, set(&[]), N);
        let configured = promoted.configured_hold();
        assert_eq!(configured, Some(200));
        // The disk is lost; `max-ttl-ms` is 752 in the configuration.
        let mut run = LeaseAck::at_load(None, false, 752, N).held_by_configuration(configured, N);
        assert!(run.held());
        assert!(run.fresh());
        assert_eq!(run.acked_ms(), 200);
        assert_eq!(run.check(200, &set(&[]), &[], N), Ok(()));
        let refused = run.check(566, &set(&[]), &[], N).unwrap_err();
        assert_eq!(refused.acked_ms, 200);
        // A replica of this run acknowledges an announcement of 752.
        let known = set(&["r2:1"]);
        run.announced(752, 10);
        assert!(run
            .check(566, &known, &[("r2:1".to_string(), true, 10)], N)
            .is_ok());
        // Its next restart (file kept, still no replica came online) is
        // held and fresh.
        let next = LeaseAck::at_load(Kept::parse(&run.kept().render()), false, 752, N);
        assert!(next.held() && next.fresh());
        // Once one came online it is held, not fresh.
        let with = LeaseAck::at_load(Kept::parse(&next.kept().render()), true, 752, N);
        assert!(with.held() && !with.fresh());
        // With inherited replicas the promoted life starts from 0: so does
        // its configuration.
        let chained = LeaseAck::promoted(200, 200, set(&["sub:1"]), N);
        assert_eq!(chained.configured_hold(), Some(0));
        // A life not held configures nothing; a node never promoted loads
        // as before.
        assert_eq!(
            LeaseAck::at_load(None, false, 752, N).configured_hold(),
            None
        );
        let standalone = LeaseAck::at_load(None, false, 752, N).held_by_configuration(None, N);
        assert!(!standalone.held());
        assert_eq!(standalone.acked_ms(), 752);
        // A load with its file is decided by the file.
        let own = LeaseAck::at_load(kept(100), true, 752, N).held_by_configuration(Some(200), N);
        assert_eq!(own.acked_ms(), 100);
        // Never above the longest lease known now.
        let low = LeaseAck::at_load(None, false, 150, N).held_by_configuration(Some(200), N);
        assert_eq!(low.acked_ms(), 150);
    }

    /// The mutant does not read the configuration.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_loses_the_hold_with_the_disk() {
        let on = Mutants::NONE.with(Mutant::HeldLostWithDisk, true);
        let mut run = LeaseAck::at_load(None, false, 752, on).held_by_configuration(Some(200), on);
        assert!(!run.held());
        assert!(run.check(566, &set(&[]), &[], on).is_ok());
    }

    #[test]
    fn the_file_reads_both_versions() {
        assert_eq!(Kept::parse("1000\n"), kept(1_000));
        let k = Kept {
            acked_ms: 7,
            held: true,
            base_ms: 5,
            inherited: set(&["a:1"]),
            ambiguous: set(&["a#2:1", "b:0"]),
            fresh: false,
        };
        assert_eq!(Kept::parse(&k.render()), Some(k.clone()));
        let f = Kept { fresh: true, ..k };
        assert_eq!(Kept::parse(&f.render()), Some(f));
        assert_eq!(Kept::parse("garbage"), None);
    }

    #[test]
    fn a_master_without_replicas_is_not_held_back() {
        let mut a = LeaseAck::new();
        assert!(a.free_without_replicas());
        assert_eq!(a.check(5_000, &set(&[]), &[], N), Ok(()));
        assert!(!LeaseAck::promoted(0, 0, set(&[]), N).free_without_replicas());
        let mut b = LeaseAck::new();
        b.saw_ambiguous(["ip:0"]);
        assert!(!b.free_without_replicas());
    }

    #[test]
    fn a_promoted_master_starts_from_what_the_old_masters_replicas_acknowledged() {
        // Knows 5 s, but the old master's replicas acknowledged 1 s only.
        let mut a = LeaseAck::promoted(1_000, 5_000, set(&[]), N);
        assert_eq!(a.acked_ms(), 1_000);
        assert_eq!(a.check(1_000, &set(&[]), &[], N), Ok(()));
        // Held with no replica: a fellow replica may not have reconnected.
        let r = a.check(5_000, &set(&[]), &[], N).unwrap_err();
        assert!(r.waiting.is_empty() && r.ambiguous.is_empty());
        // A replica joins and acknowledges the announcement.
        a.announced(5_000, 10);
        let known = set(&["r:1"]);
        assert_eq!(
            a.check(5_000, &known, &[("r:1".into(), true, 10)], N),
            Ok(())
        );
        // Never more than it knows itself.
        assert_eq!(
            LeaseAck::promoted(9_000, 5_000, set(&[]), N).acked_ms(),
            5_000
        );
    }

    #[test]
    fn a_promoted_master_waits_for_its_own_replicas_from_0() {
        let mut a = LeaseAck::promoted(5_000, 5_000, set(&["y:1"]), N);
        assert_eq!(a.acked_ms(), 0);
        assert!(a.check(1_000, &set(&[]), &[], N).is_err());
        a.announced(5_000, 10);
        let r = a.check(1_000, &set(&[]), &[], N).unwrap_err();
        assert_eq!(r.waiting, vec!["y:1".to_string()]);
        // Y reconnects and acknowledges.
        assert_eq!(
            a.check(5_000, &set(&["y:1"]), &[("y:1".into(), true, 10)], N),
            Ok(())
        );
        // Or Y is forgotten: the life goes on from the base.
        let mut b = LeaseAck::promoted(1_000, 5_000, set(&["y:1"]), N);
        assert!(b.forget("y:1"));
        assert_eq!(b.acked_ms(), 1_000);
    }

    #[test]
    fn identities_that_cannot_be_told_apart_hold_a_longer_lease_back() {
        let known = set(&["ip:5", "ip#2:5"]);
        let mut a = LeaseAck::promoted(1_000, 1_000, set(&[]), N);
        a.announced(5_000, 10);
        let acks = vec![("ip:5".into(), true, 10), ("ip#2:5".into(), true, 10)];
        let r = a.check(5_000, &known, &acks, N).unwrap_err();
        assert_eq!(r.ambiguous, vec!["ip#2:5".to_string()]);
        // Shorter leases go on.
        assert_eq!(a.check(1_000, &known, &acks, N), Ok(()));
        // A replica without a listening port, seen once, is remembered.
        let mut b = LeaseAck::new();
        assert!(b.saw_ambiguous(["ip:0", "ip:7"]));
        assert!(!b.saw_ambiguous(["ip:0"]));
        assert!(b.check(5_000, &set(&["ip:7"]), &[], N).is_err());
        assert!(b.forget("ip:0"));
        assert_eq!(b.check(5_000, &set(&[]), &[], N), Ok(()));
    }

    #[test]
    fn a_longer_lease_waits_until_every_replica_of_the_life_acknowledged() {
        let known = set(&["r1:1", "r2:2"]);
        let mut a = LeaseAck::promoted(500, 500, set(&[]), N);
        assert_eq!(a.check(500, &known, &[], N), Ok(()));
        // Nothing announced yet.
        assert!(a.check(1_000, &known, &[], N).is_err());
        a.announced(1_000, 50);
        let one = vec![
            ("r1:1".to_string(), true, 60),
            ("r2:2".to_string(), true, 40),
        ];
        let refused = a.check(1_000, &known, &one, N).unwrap_err();
        assert_eq!(refused.waiting, vec!["r2:2".to_string()]);
        // r2 gone: still waited for (it may be promoted).
        let gone = vec![("r1:1".to_string(), true, 60)];
        assert!(a.check(1_000, &known, &gone, N).is_err());
        let both = vec![
            ("r1:1".to_string(), true, 60),
            ("r2:2".to_string(), true, 50),
        ];
        assert_eq!(a.check(1_000, &known, &both, N), Ok(()));
        assert_eq!(a.acked_ms(), 1_000);
        // Shorter or equal leases pass without looking; a longer one waits.
        assert_eq!(a.check(900, &known, &[], N), Ok(()));
        assert!(a.check(1_001, &known, &both, N).is_err());
    }

    proptest! {
        /// A lease is granted above what the life started from only after
        /// every replica of the life (and every inherited one) acknowledged
        /// an announcement at least that long, whatever the order of
        /// announcements, acknowledgements and checks.
        #[test]
        fn no_grant_above_what_every_replica_acknowledged(
            learned in 0u64..6_000,
            longest in 0u64..6_000,
            inherited in proptest::collection::btree_set("[ab]:1", 0..2),
            steps in proptest::collection::vec((0u8..3, 0u64..8_000, 0u64..100), 0..30),
        ) {
            let known = set(&["r:1", "s:2"]);
            let mut a = LeaseAck::promoted(learned, longest, inherited.clone(), N);
            let start = if inherited.is_empty() { learned.min(longest) } else { 0 };
            prop_assert_eq!(a.acked_ms(), start);
            // What every replica provably knows: the start, then the
            // longest announcement all of them acknowledged.
            let mut announcements: Vec<(u64, u64)> = Vec::new();
            let mut offset = 0;
            // Acknowledged once, known for good (a replica's knowledge only
            // grows).
            let mut proven = start;
            for (kind, ms, ack) in steps {
                match kind {
                    0 => {
                        offset += 1;
                        a.announced(ms, offset);
                        announcements.push((ms, offset));
                    }
                    _ => {
                        let acks: Vec<(String, bool, u64)> = known
                            .iter()
                            .chain(inherited.iter())
                            .map(|id| (id.clone(), true, ack % (offset + 1)))
                            .collect();
                        let low = acks.iter().map(|a| a.2).min().unwrap_or(0);
                        proven = announcements
                            .iter()
                            .filter(|(_, at)| *at <= low)
                            .map(|(m, _)| *m)
                            .max()
                            .unwrap_or(0)
                            .max(proven);
                        if a.check(ms, &known, &acks, N).is_ok() {
                            prop_assert!(ms <= proven, "granted {} above {}", ms, proven);
                        }
                    }
                }
            }
        }
    }

    /// The mutant puts the hole back: a longer lease is granted unacknowledged.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutants_put_the_holes_back() {
        let mut a = LeaseAck::promoted(1_000, 1_000, set(&[]), N);
        let known: BTreeSet<String> = ["r1:1".to_string()].into();
        let on = Mutants::NONE.with(Mutant::NoLeaseAck, true);
        assert_eq!(a.check(1_001, &known, &[], on), Ok(()));
        let trusts = Mutants::NONE.with(Mutant::PromotionTrustsLongest, true);
        let mut b = LeaseAck::promoted(1_000, 5_000, set(&["y:1"]), trusts);
        assert_eq!(b.check(5_000, &set(&[]), &[], trusts), Ok(()));
        let counted = Mutants::NONE.with(Mutant::AmbiguousReplicasCounted, true);
        let mut c = LeaseAck::promoted(1_000, 1_000, set(&[]), counted);
        c.announced(5_000, 1);
        let both = set(&["ip:5", "ip#2:5"]);
        let acks = vec![("ip:5".into(), true, 1), ("ip#2:5".into(), true, 1)];
        assert_eq!(c.check(5_000, &both, &acks, counted), Ok(()));
    }

    #[test]
    fn a_hold_loaded_from_the_file_alone_is_copied_to_the_configuration() {
        let kept = Kept {
            acked_ms: 1_000,
            held: true,
            base_ms: 1_000,
            ..Kept::default()
        };
        let loaded = LeaseAck::at_load(Some(kept), false, 6_000, Mutants::NONE);
        assert_eq!(loaded.hold_to_configure(None, Mutants::NONE), Some(1_000));
        assert_eq!(
            loaded.hold_to_configure(Some(3_000), Mutants::NONE),
            Some(1_000)
        );
        // Already there, or smaller (holds back more): nothing to write.
        assert_eq!(loaded.hold_to_configure(Some(1_000), Mutants::NONE), None);
        assert_eq!(loaded.hold_to_configure(Some(500), Mutants::NONE), None);
        // A life that is not held writes nothing.
        let free = LeaseAck::at_load(None, false, 6_000, Mutants::NONE);
        assert_eq!(free.hold_to_configure(None, Mutants::NONE), None);
        // Nor one held from 0 (an ordinary master restarted with replicas).
        let ordinary = LeaseAck::at_load(None, true, 6_000, Mutants::NONE);
        assert_eq!(ordinary.configured_hold(), Some(0));
        assert_eq!(ordinary.hold_to_configure(None, Mutants::NONE), None);
        // A held file is the current life's: the configuration's (older,
        // smaller) hold does not send it back.
        let current = Kept {
            acked_ms: 3_000,
            held: true,
            base_ms: 1_000,
            ..Kept::default()
        };
        let held = LeaseAck::at_load(Some(current), false, 3_000, Mutants::NONE)
            .held_by_configuration(Some(0), Mutants::NONE);
        assert_eq!(held.acked_ms(), 3_000);
        #[cfg(feature = "danger-mutants")]
        {
            let broken = Mutants::NONE.with(Mutant::LoadedNotConfigured, true);
            assert_eq!(loaded.hold_to_configure(None, broken), None);
        }
    }
}
