//! Deliberately broken variants of the module's rules ("mutants"): each
//! puts back a hole a rule closes, so that a test, the safety suite or the
//! simulator can show the rule is needed and that it catches the hole.
//!
//! A [`Mutants`] value is passed to the rules that have a broken variant;
//! the test builds of the module fill it from their switches
//! (`host/mutant.rs`), the simulator from its command line. Without the
//! `danger-mutants` feature no mutant can be switched on and every check
//! is a constant `false`: the release library has none of them.

/// A rule that can be switched back to its broken form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Mutant {
    /// The restart exemption trusts today's configuration at each ACQUIRE
    /// (`appendonly yes` + `appendfsync always`), not the previous run's
    /// record (a promotion window does not survive a restart).
    ConfigExemption = 1,
    /// A lease loaded from disk ends at its wall-clock end only (a forward
    /// step of the clock shortens it).
    DiskLeaseFromWall = 2,
    /// A grant on a missing key ignores the node's highest reclaimed counter.
    NoReclaimedFloor = 4,
    /// A replica keeps its own longest lease, whatever it received.
    ReplicaOwnLease = 8,
    /// `aux_save2` (Redis 7.2+, Valkey) leaves the node record out when it
    /// equals one built from the writer's own `max-ttl-ms`, a load without
    /// it learns nothing, and a replica coming online is not told the
    /// record (issue 39: a replica whose `max-ttl-ms` is smaller than its
    /// master's guards too short once promoted).
    AuxWriterBaseline = 16,
    /// ACQUIRE by the holder renews the lease to ttl from now even when
    /// that is shorter (the rule before 74f467a: a late copy of the
    /// holder's ACQUIRE ends a lease extended since).
    RenewalShortens = 32,
    /// A master counts only the replicas online now for the replica-sync
    /// check (Redisson's rule, redisson#5256), not every replica of its life.
    SyncCountsOnline = 64,
    /// A replica counts every announcement of its master as fresh, also one
    /// replayed from the backlog after a restart.
    SyncAnyAnnouncement = 128,
    /// A lease that a load timed by an inexact rule (another boot, no
    /// stamp, a `RESTORE` from elsewhere, the wall-clock end, the clamp) is
    /// not written again with this node's stamp after the load, so every
    /// later restart of the same boot revives it (`host::restamp`).
    RestampSkipped = 256,
    /// A replica promoted to master grants at once (no promotion window).
    NoPromotionGuard = 512,
    /// A restart opens no window: the node grants at once after it loads.
    NoRestartGuard = 1024,
    /// The effects of the lock commands are not written to the AOF nor
    /// sent to replicas (the in-memory state still changes; the simulator
    /// only).
    SkipReplication = 2048,
    /// A master grants a lease longer than its replicas acknowledged
    /// knowing (`core/lease_ack_rule.rs`), and a replica that learned
    /// nothing from a master or its disk guards, once promoted, only for
    /// the longest lease it knows (simulator seeds 189,411 and 352,891).
    NoLeaseAck = 4096,
    /// A replica counts as taught by whatever node record it applied, from
    /// any master or from its own files, not only by one of the master it
    /// follows now (`core/teacher.rs`: a node taught by another master, or a
    /// standalone node with its own data, promoted during its first sync
    /// guards only for its own longest lease).
    TaughtByAny = 8192,
    /// A promoted master starts its life with its own longest lease
    /// acknowledged and is not held back while its replica set is empty
    /// (`LeaseAck::promoted`): a fellow replica that has not reconnected, or
    /// a replica of this replica, never learned what it then grants.
    PromotionTrustsLongest = 16384,
    /// Replicas sharing one address, or announcing no listening port, count
    /// as acknowledged by whichever replica fills their place
    /// (`LeaseAck::check`).
    AmbiguousReplicasCounted = 32768,
    /// The module's per-node files (`redlock-lease-acked`,
    /// `redlock-lease-learned`, `redlock-untaught-window`) are named per
    /// directory, not per node: nodes sharing a `dir` overwrite each other's.
    SharedNodeFiles = 65536,
    /// A node keeps its teacher through its own life as master
    /// (`Taught::became_master`): pointed back at the master that taught
    /// it before, it counts as taught before any record of that master's
    /// new life.
    TeacherOutlivesLife = 131072,
    /// A `RESTORE` of a held lock on a master skips the lease-ack check
    /// (`host/datatype.rs::rdb_load`): the master takes a lease longer than
    /// its replicas acknowledged knowing.
    RestoreSkipsLeaseAck = 262144,
    /// The lease-ack check waits only for the replica set of the master's
    /// life (replicas that came online), not for replicas connected but
    /// still in their first sync (`waited_for`): a master that never had a
    /// replica grants a longer lease than its first replica's snapshot says.
    SyncingReplicasUncounted = 524288,
    /// A master loaded with no files at all grants while a replica that is
    /// not of its life is in its first sync (`LeaseAck::check_joining`):
    /// the replica, taught by the address of an earlier run of this
    /// master, guards once promoted for what that run taught it.
    FreshTrustsJoining = 1048576,
    /// A `RESTORE` on a master is checked (lease-ack, the longest lease)
    /// for the time left its payload states, while the load holds the
    /// lease to the later of that and its wall-clock end
    /// (`host/datatype.rs::rdb_load`): a payload from a node whose clock
    /// runs ahead brings a lease longer than the replicas acknowledged.
    RestoreChecksStated = 2097152,
    /// A master loaded with no files at all sees a replica's `PSYNC` (or
    /// `SYNC`) only [`crate::core::lease_ack_rule::JOINING_SEEN_LATE_MS`]
    /// after it arrived (the 100 ms look at `INFO replication` before
    /// finding J): a grant right after the replica's sync began passes
    /// `LeaseAck::check_joining`.
    JoiningSeenLate = 4194304,
    /// A master's fresh life (begun on a disk with no file at all) is
    /// forgotten at its next restart (finding I): its file, written at the
    /// first load, makes the second run look like one that knows its
    /// replicas, and a replica of a run before the lost disk joins it
    /// unchecked.
    FreshForgottenAtRestart = 8388608,
    /// A node that learns a lease longer than its own `max-ttl-ms` keeps its
    /// configuration as it is (finding L): a restart on a new disk waits
    /// only that shorter `max-ttl-ms` while the learned lease runs.
    LearnedNotConfigured = 16777216,
    /// A life as master begun by promotion is held only by its file
    /// (`redlock-lease-acked-PORT`), not by the configuration file too
    /// (`redlock.promoted-acked-ms`, `LeaseAck::held_by_configuration`): a
    /// promoted master restarted on a new disk grants a raised lease at
    /// once, while a fellow replica of the old master, not repointed yet,
    /// knows only the shorter one (simulator seed 3,098,182).
    HeldLostWithDisk = 33554432,
    /// A promoted master's untaught window (a day) is kept only in its
    /// marker file on the data disk, not in the configuration file too
    /// (simulator seed 3,508,262): restarted on a new disk inside it, the
    /// node waits only its `max-ttl-ms`.
    UntaughtLostWithDisk = 67108864,
    /// A replica taught by a master that was, as last announced, inside a
    /// window longer than the replica's own guard (an untaught promotion's
    /// day), or whose announcement it has not received, counts as taught
    /// at its promotion (`sync_rule::taught_at_promotion`): it guards only
    /// its own longest lease while a lease of its teacher's old master runs.
    UntaughtNotTaughtOn = 134217728,
    /// An explicit `redlock.restart-grace-ms` replaces an untaught
    /// promotion's day (the guide's `max-ttl-ms 30000 restart-grace-ms
    /// 30000` then guards an untaught promotion for 30 s while a longer
    /// lease of the old master runs).
    ExplicitGraceEndsDay = 268435456,
    /// A load that opens an untaught window from its marker file, or is
    /// held by its file of what its replicas acknowledged, leaves the
    /// configuration file as it is: a later restart on a new disk waits
    /// only its `max-ttl-ms`, or is not held (a node promoted under an
    /// earlier release, a configuration write that failed, a crash between
    /// the two writes).
    LoadedNotConfigured = 536870912,
    /// A load reads the longest lease this node may have granted from its
    /// data directory's record only, not from the configuration file's copy
    /// too (`redlock.longest-lease-ms`): after `max-ttl-ms` was lowered (and
    /// the lower value written by any `CONFIG REWRITE`), or overridden on
    /// the command line, a restart on a new disk waits only that value
    /// while a longer lease runs.
    LongestLostWithDisk = 1073741824,
    /// A promoted replica's cut-off from its master compares the link's down
    /// time with the longest lease the replica knows only, not with the
    /// master's announced new-disk wait (finding D,
    /// `sync_rule::promotion`): a master restarted on a new disk, whose
    /// configuration lacks a run-time raise, grants after its shorter
    /// window while the replica, cut off for less than its longest lease,
    /// is promoted at once.
    NewDiskWaitIgnored = 2147483648,
    /// A replica's link to its master counts as down from when the replica
    /// noticed (the link-down event), not from the last moment its running
    /// server still saw it up (`host/sync.rs::on_master_link`): a replica
    /// that was not running when its master ended (a pause) measures a
    /// down time of a few ms after it resumes, and the cut-off of
    /// `sync_rule::promotion` misses a master that came back on a new disk
    /// and granted meanwhile.
    LinkDownWhenNoticed = 4294967296,
}

impl Mutant {
    /// Every mutant with its name (as in `REDLOCK.TESTHOOK MUTANT name 0|1`,
    /// the `REDLOCK_TEST_MUTANTS` variable and the simulator's `--mutant`).
    pub const ALL: [(&'static str, Mutant); 33] = [
        ("config-exemption", Mutant::ConfigExemption),
        ("disk-lease-from-wall", Mutant::DiskLeaseFromWall),
        ("no-reclaimed-floor", Mutant::NoReclaimedFloor),
        ("replica-own-lease", Mutant::ReplicaOwnLease),
        ("aux-writer-baseline", Mutant::AuxWriterBaseline),
        ("renewal-shortens", Mutant::RenewalShortens),
        ("sync-counts-online", Mutant::SyncCountsOnline),
        ("sync-any-announcement", Mutant::SyncAnyAnnouncement),
        ("restamp-skipped", Mutant::RestampSkipped),
        ("no-promotion-guard", Mutant::NoPromotionGuard),
        ("no-restart-guard", Mutant::NoRestartGuard),
        ("skip-replication", Mutant::SkipReplication),
        ("no-lease-ack", Mutant::NoLeaseAck),
        ("taught-by-any", Mutant::TaughtByAny),
        ("promotion-trusts-longest", Mutant::PromotionTrustsLongest),
        (
            "ambiguous-replicas-counted",
            Mutant::AmbiguousReplicasCounted,
        ),
        ("shared-node-files", Mutant::SharedNodeFiles),
        ("teacher-outlives-life", Mutant::TeacherOutlivesLife),
        ("restore-skips-lease-ack", Mutant::RestoreSkipsLeaseAck),
        (
            "syncing-replicas-uncounted",
            Mutant::SyncingReplicasUncounted,
        ),
        ("fresh-trusts-joining", Mutant::FreshTrustsJoining),
        ("restore-checks-stated", Mutant::RestoreChecksStated),
        ("joining-seen-late", Mutant::JoiningSeenLate),
        (
            "fresh-forgotten-at-restart",
            Mutant::FreshForgottenAtRestart,
        ),
        ("learned-not-configured", Mutant::LearnedNotConfigured),
        ("held-lost-with-disk", Mutant::HeldLostWithDisk),
        ("untaught-lost-with-disk", Mutant::UntaughtLostWithDisk),
        ("untaught-not-taught-on", Mutant::UntaughtNotTaughtOn),
        ("explicit-grace-ends-day", Mutant::ExplicitGraceEndsDay),
        ("loaded-not-configured", Mutant::LoadedNotConfigured),
        ("longest-lost-with-disk", Mutant::LongestLostWithDisk),
        ("new-disk-wait-ignored", Mutant::NewDiskWaitIgnored),
        ("link-down-when-noticed", Mutant::LinkDownWhenNoticed),
    ];

    /// The mutant of that name (ASCII case-insensitive).
    pub fn named(name: &[u8]) -> Option<Mutant> {
        Self::ALL
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
            .map(|&(_, m)| m)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }
}

/// The mutants switched on: none, unless a test build or the simulator set
/// some.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mutants(u64);

impl Mutants {
    /// No mutant: the rules as they are.
    pub const NONE: Mutants = Mutants(0);

    /// Whether `m` is on (never without the `danger-mutants` feature).
    #[inline(always)]
    pub fn on(self, m: Mutant) -> bool {
        #[cfg(feature = "danger-mutants")]
        {
            self.0 & m as u64 != 0
        }
        #[cfg(not(feature = "danger-mutants"))]
        {
            let _ = m;
            false
        }
    }

    /// These mutants with `m` switched on or off.
    #[cfg(feature = "danger-mutants")]
    pub fn with(self, m: Mutant, on: bool) -> Mutants {
        if on {
            Mutants(self.0 | m as u64)
        } else {
            Mutants(self.0 & !(m as u64))
        }
    }

    /// The bits, for a test build's atomic switch.
    #[cfg(feature = "danger-mutants")]
    pub fn bits(self) -> u64 {
        self.0
    }

    /// Mutants from their bits.
    #[cfg(feature = "danger-mutants")]
    pub fn from_bits(bits: u64) -> Mutants {
        Mutants(bits)
    }
}
