//! The simulator's share of `make test` (about a minute on two cores): a
//! swarm of unmutated seeds with no violation and every fault kind injected,
//! every mutant's known failing seed failing (and passing without the
//! mutant), the canary failing, and a seed replayed to the same trace hash.
//! `make sim` runs the long swarm and the mutant table.

use redlock_module_rules::core::mutant::Mutant;
use redlock_sim::mutant::MUTANTS;
use redlock_sim::scenario::{FaultKind, Kinds, Overrides};
use redlock_sim::swarm::{swarm, SwarmOptions};
use redlock_sim::world::Setup;

/// Seeds of the quick swarm.
const QUICK_SEEDS: u64 = 1_000;

/// The draw of the seeds kept before fault kind `raise-failover` existed:
/// it and the kinds added after it (`switch-back`, `slow-repoint`,
/// `late-replica`, `new-disk-promoted`, `repoint-new-disk`, `switch-back-new-disk`,
/// `untaught-teaches`) are drawn after everything else, so filtering them out
/// replays their old worlds exactly (`--faults
/// all,-raise-failover,-switch-back,-slow-repoint,-late-replica,-new-disk-promoted,-repoint-new-disk,-switch-back-new-disk,-untaught-teaches`).
fn as_kept() -> Overrides {
    Overrides {
        faults: Some(
            Kinds::ALL
                .with(FaultKind::RaiseFailover, false)
                .with(FaultKind::SwitchBack, false)
                .with(FaultKind::SlowRepoint, false)
                .with(FaultKind::LateReplica, false)
                .with(FaultKind::NewDiskPromoted, false)
                .with(FaultKind::RepointNewDisk, false)
                .with(FaultKind::SwitchBackNewDisk, false)
                .with(FaultKind::UntaughtTeaches, false),
        ),
        ..Overrides::default()
    }
}

/// The draw of the seeds kept before fault kinds `switch-back`,
/// `slow-repoint`, `late-replica` and `new-disk-promoted` existed
/// (`raise-failover` stays):
/// `--faults all,-switch-back,-slow-repoint,-late-replica,-new-disk-promoted,-repoint-new-disk,-switch-back-new-disk,-untaught-teaches`.
fn before_switch_back() -> Overrides {
    Overrides {
        faults: Some(
            Kinds::ALL
                .with(FaultKind::SwitchBack, false)
                .with(FaultKind::SlowRepoint, false)
                .with(FaultKind::LateReplica, false)
                .with(FaultKind::NewDiskPromoted, false)
                .with(FaultKind::RepointNewDisk, false)
                .with(FaultKind::SwitchBackNewDisk, false)
                .with(FaultKind::UntaughtTeaches, false),
        ),
        ..Overrides::default()
    }
}

/// The client of the seeds kept before a busy waiter queued at once (it
/// awaited its busy attempt's RELEASEs before its WAIT,
/// `Setup::release_before_wait`): their worlds replay exactly with it.
/// `mutant` is put back on top when given.
fn kept_client(mutant: Option<&redlock_sim::mutant::SimMutant>) -> Setup {
    let mut setup = Setup {
        release_before_wait: true,
        ..Setup::default()
    };
    if let Some(m) = mutant {
        m.apply(&mut setup);
    }
    setup
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

#[test]
fn a_thousand_unmutated_seeds_pass_and_inject_every_fault_kind() {
    let summary = swarm(&SwarmOptions {
        from: 0,
        seeds: QUICK_SEEDS,
        threads: threads(),
        overrides: Overrides::default(),
        setup: Setup::default(),
        progress: false,
        stop_at_first_failure: false,
    });
    println!("{}", summary.table());
    for f in &summary.failures {
        println!(
            "seed {} failed: [{}] {} (replay: cargo run -p redlock-sim --release -- --seed {})",
            f.seed, f.first.kind, f.first.what, f.seed
        );
    }
    assert_eq!(summary.seeds, QUICK_SEEDS);
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    assert!(summary.stats.acquisitions > 10 * QUICK_SEEDS);
    for k in FaultKind::ALL {
        assert!(
            summary.stats.faults[k.index()] > 0,
            "no {} fault in {QUICK_SEEDS} seeds",
            k.name()
        );
    }
}

#[test]
fn every_mutant_fails_its_known_seed_and_the_seed_passes_without_it() {
    for m in MUTANTS {
        let mutated = redlock_sim::run(m.known_seed, &Overrides::default(), &m.setup());
        assert!(
            !mutated.violations.is_empty(),
            "mutant {} no longer fails seed {}: replay with cargo run -p redlock-sim --release -- --seed {} --mutant {}",
            m.name,
            m.known_seed,
            m.known_seed,
            m.name
        );
        let first = &mutated.violations[0];
        println!(
            "mutant {}: seed {} fails [{}] at {} µs",
            m.name, m.known_seed, first.kind, first.at
        );
        assert!(
            m.own_failure(m.known_seed),
            "seed {} fails with the partners of mutant {} alone: it does not show its hole",
            m.known_seed,
            m.name
        );
        let clean = redlock_sim::run(m.known_seed, &Overrides::default(), &Setup::default());
        assert!(
            clean.violations.is_empty(),
            "seed {} fails without mutant {}: {:?}",
            m.known_seed,
            m.name,
            clean.violations
        );
    }
}

#[test]
fn the_canary_fails() {
    let out = redlock_sim::run_canary(1);
    assert!(
        out.violations.iter().any(|v| v.kind == "overlap"),
        "clocks drifting 8 % must show two holders: {:?}",
        out.violations
    );
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    let setup = Setup::default();
    for seed in [3, 977] {
        let a = redlock_sim::run(seed, &Overrides::default(), &setup);
        let b = redlock_sim::run(seed, &Overrides::default(), &setup);
        assert_eq!(a.hash, b.hash, "seed {seed} played two ways");
        assert_eq!(a.events, b.events);
        assert_eq!(a.stats, b.stats);
    }
    let a = redlock_sim::run(3, &Overrides::default(), &setup);
    let c = redlock_sim::run(4, &Overrides::default(), &setup);
    assert_ne!(a.hash, c.hash, "two seeds, one trace");
}

/// Seeds the long swarm failed with a lost wake-up, kept as regression
/// cases. The cause was in the simulator's model: a master demoted by a
/// switchover answered its blocked waiters but kept their places in its
/// queues, so once promoted again it reserved the free lock for waiters
/// that were long gone, one hand-off window after another, while the live
/// waiters could not get a quorum. Redis unblocks a demoted master's
/// blocked clients, and the module forgets each waiter's place as it is
/// freed (`host/wait.rs::free_waiter`); the model now does the same.
#[test]
fn the_seeds_of_the_demoted_master_queue_leak_pass() {
    for seed in [21_728, 65_217, 65_600] {
        let r = redlock_sim::run(seed, &as_kept(), &kept_client(None));
        assert!(
            r.violations.is_empty(),
            "seed {seed}: {:?} (replay: cargo run -p redlock-sim --release -- --seed {seed} --faults all,-raise-failover,-switch-back,-slow-repoint,-late-replica,-new-disk-promoted,-repoint-new-disk,-switch-back-new-disk,-untaught-teaches --release-before-wait)",
            r.violations.first()
        );
    }
}

/// Seed 786,312 of the long swarm: two holders, fixed in the client (the
/// lapse rule of `client/src/core/lease.rs`). A holder paused past its
/// validity extended its lock; another client had been granted it on three
/// members since, and one of them rebooted with its last writes lost: it
/// forgot the new grant and kept the old lease (timed by its remaining
/// time, a reboot leaves no clock to age it). With two members that still
/// had the old lease, the late extension got a quorum. The seed passes, and
/// with the rule off (mutant `lapsed-extend`) it fails with the overlap, not
/// only with the "revived" checker that catches the mutant at once.
#[test]
fn the_seed_of_the_revived_lease_passes_and_fails_without_the_lapse_rule() {
    let seed = 786_312;
    let clean = redlock_sim::run(seed, &as_kept(), &kept_client(None));
    assert!(
        clean.violations.is_empty(),
        "seed {seed}: {:?} (replay: cargo run -p redlock-sim --release -- --seed {seed} --faults all,-raise-failover,-switch-back,-slow-repoint,-late-replica,-new-disk-promoted,-repoint-new-disk,-switch-back-new-disk,-untaught-teaches --release-before-wait)",
        clean.violations.first()
    );
    let mutant = redlock_sim::mutant::named("lapsed-extend").expect("the mutant");
    let mutated = redlock_sim::run(seed, &as_kept(), &kept_client(Some(mutant)));
    assert!(
        mutated.violations.iter().any(|v| v.kind == "overlap"),
        "seed {seed} with lapsed-extend: {:?}",
        mutated.violations
    );
}

/// Open findings of the long swarm, one class: a replica configured with a
/// shorter `redlock.max-ttl-ms` than its master is promoted while it does
/// not know the master's longest lease, guards for its own shorter one and
/// grants the lock again while a lease of its old master runs (two
/// holders).
/// - Seeds 189,411 and 892,199: the operator raises `max-ttl-ms` at run time on the
///   masters only (the README asks for the replicas first), a client takes
///   a lease of the new length at once, and the replica lags behind both
///   the master's announcement and that grant when the master dies.
/// - Seeds 352,891 and 503,818: the replica (250 ms against its master's
///   1,000 ms; 300 against 1,500) loses its disk, restarts with nothing
///   recorded, and is promoted before its full sync taught it the master's
///   record.
///
/// The module's fix (`core/lease_ack_rule.rs`, `Guard::on_promotion`): a
/// master holds back a lease longer than every replica of its life has
/// acknowledged knowing (as it holds back unchecked writes after
/// `sync-replicas` is lowered to 0), and a replica that learned nothing
/// from a master nor its disk guards, once promoted, as long as the longest
/// lease any node grants. The mutant `no-lease-ack` puts the hole back.
/// Since finding L a replica that learns a longer lease is configured for
/// it, which also covers the replica of seed 352,891 (it learned the
/// master's longest lease before it lost its disk): the seeds are played
/// with `learned-not-configured` too, so that each shows the hole of the
/// lease-ack rule alone.
#[test]
fn a_replica_promoted_before_it_learned_its_masters_longest_lease_keeps_one_holder() {
    let mutant = redlock_sim::mutant::named("no-lease-ack").expect("the mutant");
    let mut setup = kept_client(Some(mutant));
    setup.mutants = setup.mutants.with(Mutant::LearnedNotConfigured, true);
    for seed in [189_411, 352_891, 503_818, 892_199] {
        let r = redlock_sim::run(seed, &as_kept(), &kept_client(None));
        assert!(
            r.violations.is_empty(),
            "seed {seed}: {:?} (replay: cargo run -p redlock-sim --release -- --seed {seed} --faults all,-raise-failover,-switch-back,-slow-repoint,-late-replica,-new-disk-promoted,-repoint-new-disk,-switch-back-new-disk,-untaught-teaches --release-before-wait)",
            r.violations.first()
        );
        let mutated = redlock_sim::run(seed, &as_kept(), &setup);
        assert!(
            mutated.violations.iter().any(|v| v.kind == "overlap"),
            "seed {seed} with no-lease-ack and learned-not-configured: {:?}",
            mutated.violations
        );
    }
}

/// Finding L of the long swarm (1,000,000 seeds from 2,000,000), fixed:
/// seeds 2,073,237 and 2,657,013 ended with two holders. `max-ttl-ms` is
/// raised on the masters only (fault kind `raise-failover`); a master
/// grants a lease of the new length once its replica acknowledged knowing
/// it; a switchover makes that replica, still configured for the shorter
/// `max-ttl-ms`, the master holding the lease; it loses its disk and
/// restarts, waits its own configured `max-ttl-ms` and grants the lock while
/// the lease runs. In seed 2,657,013 the replicas are configured for half
/// their masters' `max-ttl-ms` from the start, and the replica promoted
/// after a crash of its master is the one that loses its disk. The fix: a
/// node that learns a longer lease raises its own `max-ttl-ms` and writes
/// it to its configuration file (`core/guard_rule.rs::max_ttl_to_cover`,
/// `host/config_file.rs`); mutant `learned-not-configured` puts the hole
/// back. `tests/sim_findings.rs` plays it on real processes. Their worlds
/// are the ones before the fault kinds `switch-back`, `slow-repoint`,
/// `late-replica` and `new-disk-promoted`.
#[test]
fn the_seeds_of_the_new_disk_below_a_held_lease_pass_and_fail_without_the_raise() {
    let mutant = redlock_sim::mutant::named("learned-not-configured").expect("the mutant");
    for seed in [2_073_237, 2_657_013] {
        let r = redlock_sim::run(seed, &before_switch_back(), &kept_client(None));
        assert!(
            r.violations.is_empty(),
            "seed {seed}: {:?} (replay: cargo run -p redlock-sim --release -- --seed {seed} --faults all,-switch-back,-slow-repoint,-late-replica,-new-disk-promoted,-repoint-new-disk,-switch-back-new-disk,-untaught-teaches --release-before-wait)",
            r.violations.first()
        );
        let mutated = redlock_sim::run(seed, &before_switch_back(), &kept_client(Some(mutant)));
        assert!(
            mutated.violations.iter().any(|v| v.kind == "overlap"),
            "seed {seed} with learned-not-configured: {:?}",
            mutated.violations
        );
    }
}

/// Seed 3,508,262 of the swarm of 1,000,000 seeds from 3,100,000 (at
/// 5639c8e, before the fault kinds `repoint-new-disk` and
/// `switch-back-new-disk`): an untaught promoted master lost its disk inside
/// its day's window and restarted waiting only its `max-ttl-ms`. It passes
/// with the configuration file's copy of the marker
/// (`guard_rule::untaught_at_load`) and fails with `untaught-lost-with-disk`.
#[test]
fn the_seed_of_the_untaught_window_lost_with_its_disk_passes_and_fails_without_the_copy() {
    let seed = 3_508_262;
    let world = Overrides {
        faults: Some(
            Kinds::ALL
                .with(FaultKind::RepointNewDisk, false)
                .with(FaultKind::SwitchBackNewDisk, false)
                .with(FaultKind::UntaughtTeaches, false),
        ),
        ..Overrides::default()
    };
    let clean = redlock_sim::run(seed, &world, &Setup::default());
    assert!(
        clean.violations.is_empty(),
        "seed {seed}: {:?} (replay: cargo run -p redlock-sim --release -- --seed {seed} --faults all,-repoint-new-disk,-switch-back-new-disk,-untaught-teaches)",
        clean.violations.first()
    );
    let mutant = redlock_sim::mutant::named("untaught-lost-with-disk").expect("the mutant");
    let mutated = redlock_sim::run(seed, &world, &mutant.setup());
    assert!(
        mutated.violations.iter().any(|v| v.kind == "overlap"),
        "seed {seed} with untaught-lost-with-disk: {:?}",
        mutated.violations
    );
}
