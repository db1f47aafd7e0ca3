//! Deliberately broken variants of the safety rules, for the tests and the
//! safety suite's mutation checks: each shows that a test catches the hole
//! its rule closes. They exist only in test builds (`test-hooks`); in the
//! release library [`on`] is a constant `false`.

/// A rule that can be switched back to its broken form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Mutant {
    /// The restart exemption trusts today's configuration at each ACQUIRE
    /// (`appendonly yes` + `appendfsync always`), not the previous run's record.
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
    /// An ACQUIRE by the holder sets its lease to `ttl` from now, shorter
    /// or not (the rule before 74f467a: a late copy of the holder's ACQUIRE
    /// ends a lease the holder has extended since).
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
}

impl Mutant {
    /// Every mutant with its name (as in `REDLOCK.TESTHOOK MUTANT name 0|1`
    /// and the `REDLOCK_TEST_MUTANTS` variable).
    pub const ALL: [(&'static str, Mutant); 9] = [
        ("config-exemption", Mutant::ConfigExemption),
        ("disk-lease-from-wall", Mutant::DiskLeaseFromWall),
        ("no-reclaimed-floor", Mutant::NoReclaimedFloor),
        ("replica-own-lease", Mutant::ReplicaOwnLease),
        ("aux-writer-baseline", Mutant::AuxWriterBaseline),
        ("renewal-shortens", Mutant::RenewalShortens),
        ("sync-counts-online", Mutant::SyncCountsOnline),
        ("sync-any-announcement", Mutant::SyncAnyAnnouncement),
        ("restamp-skipped", Mutant::RestampSkipped),
    ];

    /// The mutant of that name (ASCII case-insensitive).
    pub fn named(name: &[u8]) -> Option<Mutant> {
        Self::ALL
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
            .map(|&(_, m)| m)
    }
}

#[cfg(feature = "test-hooks")]
static ON: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Environment variable naming mutants to switch on when the module loads
/// (comma-separated), so that a restart can start broken.
#[cfg(feature = "test-hooks")]
pub const ENV: &str = "REDLOCK_TEST_MUTANTS";

/// Whether `m` is switched on (never in the release library).
#[cfg(feature = "test-hooks")]
pub fn on(m: Mutant) -> bool {
    ON.load(std::sync::atomic::Ordering::Relaxed) & m as u32 != 0
}

/// Whether `m` is switched on (never in the release library).
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn on(_m: Mutant) -> bool {
    false
}

/// Switches `m` on or off (test builds only).
#[cfg(feature = "test-hooks")]
pub fn set(m: Mutant, enabled: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    if enabled {
        ON.fetch_or(m as u32, Relaxed);
    } else {
        ON.fetch_and(!(m as u32), Relaxed);
    }
}

/// Reads [`ENV`] (test builds only).
#[cfg(feature = "test-hooks")]
pub fn load_from_env() {
    if let Ok(names) = std::env::var(ENV) {
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if let Some(m) = Mutant::named(name.as_bytes()) {
                set(m, true);
            }
        }
    }
}
