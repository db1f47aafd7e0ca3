//! The holes the simulator must find: each mutant puts one back, in the
//! module's pure code (`src/core/mutant.rs`), in the client's
//! (`client/src/core/rules.rs`, the `danger-test-switches`), in the
//! resource's rule, or in the clients' settings. A simulator is trusted only
//! as far as it finds them: each must fail a seed (`make sim` prints the
//! table of seeds to the first failure; `make test` replays each one's known
//! failing seed).

use redlock_client_rules::core::rules::Switches;
use redlock_module_rules::core::mutant::Mutant;

use crate::resource::ResourceMutant;
use crate::world::Setup;

/// Where a mutant acts.
#[derive(Clone, Copy, Debug)]
pub enum Hole {
    /// The module's rules.
    Module(Mutant),
    /// Several of the module's rules at once: a hole that a later rule
    /// closes too (all switched back).
    Modules(&'static [Mutant]),
    /// The client's rules.
    Client(fn(&mut Switches)),
    /// The protected resource's rule.
    Resource(ResourceMutant),
    /// Every client sends no `FLOOR`.
    NoClockFloor,
}

/// A mutant of the table.
#[derive(Clone, Copy, Debug)]
pub struct SimMutant {
    /// Its name (`--mutant`).
    pub name: &'static str,
    /// The hole it puts back.
    pub hole: Hole,
    /// What it breaks, and where the rule came from.
    pub what: &'static str,
    /// A seed it fails (replayed by `make test`).
    pub known_seed: u64,
}

/// Every mutant.
pub const MUTANTS: &[SimMutant] = &[
    SimMutant {
        name: "late-extend",
        hole: Hole::Client(|s| s.late_extend = true),
        what: "an extension counts only its own ttl: a late copy of an earlier, shorter EXTEND lands after a later one (client, before 6829c45)",
        known_seed: 53,
    },
    SimMutant {
        name: "extend-cap",
        hole: Hole::Client(|s| s.extend_cap = true),
        what: "the validity cap of failed extensions, lifted by the next success: a confirmed short extension's late EXTEND is not covered (client, before 25c01d3)",
        known_seed: 53,
    },
    SimMutant {
        name: "renewal-shortens",
        hole: Hole::Module(Mutant::RenewalShortens),
        what: "a late copy of the holder's ACQUIRE ends a lease extended since (module, before 74f467a)",
        known_seed: 2_081,
    },
    SimMutant {
        name: "no-promotion-guard",
        hole: Hole::Module(Mutant::NoPromotionGuard),
        what: "a promoted replica grants at once (module; PROMOTION-GUARD 0)",
        known_seed: 39,
    },
    SimMutant {
        name: "replica-own-lease",
        hole: Hole::Module(Mutant::ReplicaOwnLease),
        what: "a replica keeps its own longest lease whatever it received: promoted, it guards for less than its master's leases (module)",
        known_seed: 183,
    },
    SimMutant {
        name: "aux-writer-baseline",
        hole: Hole::Modules(&[
            Mutant::AuxWriterBaseline,
            Mutant::TaughtByAny,
            Mutant::UntaughtNotTaughtOn,
        ]),
        what: "aux_save2 leaves the node record out at the writer's own max-ttl-ms: a replica with a smaller one learns a shorter longest lease than its master's (Redis 7.2+/Valkey, issue 39); with taught-by-any, since a replica that applied no record of its master is untaught and guards long (core/teacher.rs); with untaught-not-taught-on, since a replica promoted before its master's announcement reached it is untaught too (sync_rule::taught_at_promotion)",
        known_seed: 108,
    },
    SimMutant {
        name: "no-write-back",
        hole: Hole::Client(|s| s.no_write_back = true),
        what: "step 4 off: the highest granted token is used on fewer than a quorum (client)",
        known_seed: 15,
    },
    SimMutant {
        name: "lapsed-extend",
        hole: Hole::Client(|s| s.lapsed_extend = true),
        what: "an extension started or confirmed after the validity ended counts: a node that lost a later grant in a restart revives the old lease (client; two holders at seed 786,312 of the long swarm)",
        known_seed: 1,
    },
    SimMutant {
        name: "no-validity-check",
        hole: Hole::Client(|s| s.no_validity_check = true),
        what: "step 5 off: the full ttl from the end of the round (client)",
        known_seed: 25,
    },
    SimMutant {
        name: "no-restart-guard",
        hole: Hole::Module(Mutant::NoRestartGuard),
        what: "a restart opens no window: a node that lost grants grants again at once (module)",
        known_seed: 8,
    },
    SimMutant {
        name: "no-reclaimed-floor",
        hole: Hole::Module(Mutant::NoReclaimedFloor),
        what: "reclamation floor off: a grant on a missing key ignores the counters reclaimed (module)",
        known_seed: 2_411,
    },
    SimMutant {
        name: "config-exemption",
        hole: Hole::Module(Mutant::ConfigExemption),
        what: "a restart is exempt by today's configuration: a promotion window does not survive a restart (module, issue 24)",
        known_seed: 827,
    },
    SimMutant {
        name: "disk-lease-from-wall",
        hole: Hole::Module(Mutant::DiskLeaseFromWall),
        what: "a lease loaded from disk ends at its wall-clock end only: a forward step across a restart frees it (module, issue 24)",
        known_seed: 555,
    },
    SimMutant {
        name: "skip-replication",
        hole: Hole::Module(Mutant::SkipReplication),
        what: "effects not written to the AOF nor sent to replicas (module; SKIP-REPLICATION 1)",
        known_seed: 3,
    },
    SimMutant {
        name: "no-lease-ack",
        hole: Hole::Module(Mutant::NoLeaseAck),
        what: "a master grants a lease longer than its replicas acknowledged knowing, and a replica that learned nothing guards only for its own max-ttl-ms once promoted (module; simulator seeds 189,411, 352,891, 503,818, 892,199)",
        known_seed: 287,
    },
    SimMutant {
        name: "teacher-outlives-life",
        hole: Hole::Modules(&[Mutant::TeacherOutlivesLife, Mutant::UntaughtNotTaughtOn]),
        what: "a node keeps its teacher through its own life as master: switched over to and back, it counts as taught by its old master before any record of that master's new life, and promoted during its full sync guards for less than the leases the master granted since (module, finding B; caught through switch-back; with untaught-not-taught-on, since a replica promoted during its full sync, before its master's announcement, is untaught too)",
        known_seed: 287,
    },
    SimMutant {
        name: "taught-by-any",
        hole: Hole::Modules(&[Mutant::TaughtByAny, Mutant::UntaughtNotTaughtOn]),
        what: "a replica counts as taught by any node record it applied, from another master or its own files (module, promotion holes 2 and 3; caught through switch-back; with untaught-not-taught-on, since a replica promoted before its master's announcement is untaught too)",
        known_seed: 287,
    },
    SimMutant {
        name: "promotion-trusts-longest",
        hole: Hole::Module(Mutant::PromotionTrustsLongest),
        what: "a promoted master starts from its own longest lease acknowledged and is not held while its replica set is empty: a raise grants at once while a fellow replica of the old master has not reconnected (module, promotion hole 1; caught through slow-repoint)",
        known_seed: 1_411,
    },
    SimMutant {
        name: "syncing-replicas-uncounted",
        hole: Hole::Modules(&[
            Mutant::SyncingReplicasUncounted,
            Mutant::UntaughtNotTaughtOn,
        ]),
        what: "the lease-ack check waits only for the replicas of the master's life, not for one connected and still in its first sync: a master that never had a replica grants a longer lease than its first replica's snapshot says (module, finding F; caught through late-replica; with untaught-not-taught-on, since the replica, promoted before its dead master's announcement, is untaught too)",
        known_seed: 4_876,
    },
    SimMutant {
        name: "learned-not-configured",
        hole: Hole::Module(Mutant::LearnedNotConfigured),
        what: "a replica that learns a lease longer than its own max-ttl-ms keeps its configuration: promoted, then restarted on a new disk, it waits only that shorter max-ttl-ms (module, finding L of the swarm of 1,000,000 seeds; caught through new-disk-promoted)",
        known_seed: 3_648,
    },
    SimMutant {
        name: "held-lost-with-disk",
        hole: Hole::Module(Mutant::HeldLostWithDisk),
        what: "a promoted master's held life is kept only on its data disk: restarted on a new disk it grants a raised lease at once, while a fellow replica of the old master, not repointed yet, guards once promoted only for the shorter lease the old master taught it (module, seed 3,098,182 of the long swarm; caught through repoint-new-disk)",
        known_seed: 7_534,
    },
    SimMutant {
        name: "untaught-lost-with-disk",
        hole: Hole::Module(Mutant::UntaughtLostWithDisk),
        what: "a promoted master's untaught window (a day) is kept only on its data disk: restarted on a new disk inside it, it waits only its max-ttl-ms while a lease of its old master runs (module, seed 3,508,262 of the long swarm; caught through switch-back-new-disk)",
        known_seed: 1_430,
    },
    SimMutant {
        name: "untaught-not-taught-on",
        hole: Hole::Module(Mutant::UntaughtNotTaughtOn),
        what: "a replica taught by a master inside an untaught promotion's day (its announced hold reaches past the replica's longest lease), or without that master's announcement, counts as taught once promoted: it guards only its own longest lease while a lease of its teacher's old master runs (module, adversarial read of the untaught day; caught through untaught-teaches)",
        known_seed: 31,
    },
    SimMutant {
        name: "no-clock-floor",
        hole: Hole::NoClockFloor,
        what: "clients send no FLOOR: a node that lost its counters hands out low tokens again (client setting)",
        known_seed: 180,
    },
    SimMutant {
        name: "fenced-check-off",
        hole: Hole::Resource(ResourceMutant::CheckOff),
        what: "the resource accepts every token (FENCED-CHECK 0)",
        known_seed: 1,
    },
    SimMutant {
        name: "fenced-raise-off",
        hole: Hole::Resource(ResourceMutant::RaiseOff),
        what: "the resource's guard never rises (FENCED-RAISE 0)",
        known_seed: 1,
    },
    SimMutant {
        name: "reads-unfenced",
        hole: Hole::Resource(ResourceMutant::ReadsUnfenced),
        what: "reads go to the resource unfenced: only writes are checked",
        known_seed: 1,
    },
];

/// The mutant of that name.
pub fn named(name: &str) -> Option<&'static SimMutant> {
    MUTANTS.iter().find(|m| m.name == name)
}

impl SimMutant {
    /// A setup with this mutant on.
    pub fn setup(&self) -> Setup {
        let mut setup = Setup::default();
        self.apply(&mut setup);
        setup
    }

    /// The setup of the holes this mutant needs beside its own (the rest
    /// of a [`Hole::Modules`] list, each closing the hole a second way), or
    /// `None` for a mutant of one hole. A seed shows this mutant's hole only
    /// if it passes with these partners alone.
    pub fn partners(&self) -> Option<Setup> {
        let Hole::Modules([_, rest @ ..]) = self.hole else {
            return None;
        };
        let mut setup = Setup::default();
        for &m in rest {
            setup.mutants = setup.mutants.with(m, true);
        }
        Some(setup)
    }

    /// Whether `seed`'s failure under this mutant is its own hole's: the
    /// seed passes with the partners alone (always, for a mutant of one
    /// hole).
    pub fn own_failure(&self, seed: u64) -> bool {
        self.partners().is_none_or(|setup| {
            crate::run(seed, &crate::scenario::Overrides::default(), &setup)
                .violations
                .is_empty()
        })
    }

    /// Switches this mutant on in `setup`.
    pub fn apply(&self, setup: &mut Setup) {
        match self.hole {
            Hole::Module(m) => setup.mutants = setup.mutants.with(m, true),
            Hole::Modules(ms) => {
                for &m in ms {
                    setup.mutants = setup.mutants.with(m, true);
                }
            }
            Hole::Client(f) => f(&mut setup.switches),
            Hole::Resource(r) => setup.resource = r,
            Hole::NoClockFloor => setup.no_floor = true,
        }
    }
}
