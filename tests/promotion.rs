//! A replica promoted to master starts the restart guard: it may have
//! missed its old master's last grants, exactly like a node restarted
//! without its data.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn replica_with_guard(master: &Node, max_ttl: &str) -> Node {
    let replica = start_replica(
        master,
        Node::builder()
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", max_ttl),
    );
    let mut r = replica.connection();
    // Loaded long ago: its own load window is over.
    wait_until(Duration::from_secs(10), "load window end", || {
        info_field(&mut r, "redlock", "redlock_grace_active").as_deref() == Some("0")
    });
    replica
}

#[test]
fn a_promoted_replica_refuses_new_locks_for_the_guard_window() {
    // The replica learns its master's longest lease: both at 2 s here.
    let master = Node::builder()
        .config("repl-diskless-sync-delay", "0")
        .config("redlock.max-ttl-ms", "2000")
        .start();
    let mut m = master.connection();
    let replica = replica_with_guard(&master, "2000");
    let mut r = replica.connection();
    assert_eq!(acquire(&mut m, "held", "alice", 1_500), Some(1));
    wait_replicated(&mut m);

    promote(&mut r);
    let promoted = Instant::now();
    let err = error_of(&mut r, &[b"REDLOCK.ACQUIRE", b"fresh", b"bob", b"1000"]);
    assert!(
        err.starts_with("GRACE node was promoted to master"),
        "{err}"
    );
    assert_eq!(
        inspect(&mut r, "fresh"),
        None,
        "a refused ACQUIRE created the key"
    );
    assert_eq!(
        info_field(&mut r, "redlock", "redlock_grace_active").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut r, "redlock", "redlock_grace_reason").as_deref(),
        Some("promotion")
    );
    // The holder keeps working with the replicated lock inside the window.
    assert!(inspect(&mut r, "held").unwrap().held);
    assert_eq!(extend(&mut r, "held", "alice", 1_000), 1);
    assert_eq!(fence(&mut r, "held", "alice", None), Some(1));
    assert_eq!(release(&mut r, "held", "alice"), 1);

    wait_until(Duration::from_secs(10), "promotion window end", || {
        redis::cmd("REDLOCK.ACQUIRE")
            .arg("fresh")
            .arg("bob")
            .arg(1_000)
            .query::<Option<i64>>(&mut r)
            .is_ok()
    });
    assert!(
        promoted.elapsed() >= Duration::from_millis(1_900),
        "window ended after {:?}",
        promoted.elapsed()
    );
}

/// `appendfsync always` does not exempt a promoted replica: it may never
/// have received the grant it would otherwise repeat.
#[test]
fn a_durable_replica_is_not_exempt_after_promotion() {
    let master = Node::start();
    let replica = start_replica(
        &master,
        Node::builder()
            .config("redlock.restart-grace-ms", "1500")
            .config("appendonly", "yes")
            .config("appendfsync", "always"),
    );
    let mut r = replica.connection();
    promote(&mut r);
    let err = error_of(&mut r, &[b"REDLOCK.ACQUIRE", b"k", b"bob", b"1000"]);
    assert!(err.starts_with("GRACE"), "{err}");
}

/// The check above fails when the promotion guard is off (the test build's
/// switch): the promoted replica then grants at once.
#[test]
fn without_the_promotion_guard_a_promoted_replica_grants_at_once() {
    let master = Node::builder().config("redlock.max-ttl-ms", "2000").start();
    let replica = replica_with_guard(&master, "2000");
    let mut r = replica.connection();
    let _: () = redis::cmd("REDLOCK.TESTHOOK")
        .arg("PROMOTION-GUARD")
        .arg(0)
        .query(&mut r)
        .unwrap();
    promote(&mut r);
    assert_eq!(acquire(&mut r, "fresh", "bob", 1_000), Some(1));
}

fn grace_remaining_ms(con: &mut redis::Connection) -> u64 {
    info_field(con, "redlock", "redlock_grace_remaining_ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The holes issue, item 1: an old master grants a 60 s lease that never
/// reaches its replica; the replica (durable: `appendonly yes` +
/// `appendfsync always`) is promoted, then restarts inside its window (a
/// crash loop). The restart must not exempt it: it refuses other owners
/// until the window of the promotion has passed. The test build's
/// `config-exemption` mutant (the rule that trusted today's configuration)
/// grants the lock to another owner at once.
#[test]
fn a_durable_promoted_replica_restarted_inside_its_window_keeps_refusing() {
    for mutant in [false, true] {
        let master = Node::start();
        let mut builder = Node::builder()
            .config("redlock.restart-grace-ms", "-1")
            .config("appendonly", "yes")
            .config("appendfsync", "always");
        if mutant {
            builder = builder.env("REDLOCK_TEST_MUTANTS", "config-exemption");
        }
        let mut replica = start_replica(&master, builder);
        let mut m = master.connection();
        let _: () = redis::cmd("REDLOCK.TESTHOOK")
            .arg("SKIP-REPLICATION")
            .arg(1)
            .query(&mut m)
            .unwrap();
        assert_eq!(acquire(&mut m, "k", "alice", 60_000), Some(1));
        let mut r = replica.connection();
        promote(&mut r);
        let err = error_of(&mut r, &[b"REDLOCK.ACQUIRE", b"k", b"bob", b"1000"]);
        assert!(err.starts_with("GRACE node was promoted"), "{err}");
        drop(r);
        // A crash 1 s into the window, restarted as a master from its AOF.
        std::thread::sleep(Duration::from_millis(1_000));
        replica.kill();
        replica.restart_with(&[("replicaof", "no one")]);
        let mut r = replica.connection();
        let reply = redis::cmd("REDLOCK.ACQUIRE")
            .arg("k")
            .arg("bob")
            .arg(1_000)
            .query::<Option<i64>>(&mut r);
        if mutant {
            assert_eq!(reply.ok(), Some(Some(1)), "the mutant should grant");
            continue;
        }
        let err = reply.expect_err("bob was granted alice's lock");
        assert_eq!(err.code(), Some("GRACE"), "{err}");
        assert!(
            grace_remaining_ms(&mut r) > 50_000,
            "window shorter than the promotion's: {} ms",
            grace_remaining_ms(&mut r)
        );
        // The next restart (still inside the window) refuses too.
        drop(r);
        replica.kill();
        replica.restart();
        let mut r = replica.connection();
        let err = error_of(&mut r, &[b"REDLOCK.ACQUIRE", b"k", b"bob", b"1000"]);
        assert!(err.starts_with("GRACE"), "{err}");
    }
}

/// The holes issue, item 1, its other forms: a durable node restarted on an
/// empty directory (a new disk: no run record), and one whose run stopped
/// being durable at run time (`CONFIG SET appendfsync everysec`), wait for
/// the window; a run durable all its life does not.
#[test]
fn only_a_run_durable_all_its_life_exempts_the_next_start() {
    let mut node = Node::builder()
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "1000")
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut con = node.connection();
    // First start: no record from an earlier run.
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k", b"a", b"100"]);
    assert!(err.starts_with("GRACE"), "{err}");
    wait_until(Duration::from_secs(5), "window end", || {
        acquire_result(&mut con, "k", "a", 100).is_ok()
    });
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k2", "a", 100), Some(1));
    // Durable no more, then durable again: the run was not durable all along.
    for fsync in ["everysec", "always"] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendfsync")
            .arg(fsync)
            .query(&mut con)
            .unwrap();
    }
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k3", b"a", b"100"]);
    assert!(err.starts_with("GRACE"), "{err}");
    // A new disk: the run record is gone with the data.
    wait_until(Duration::from_secs(5), "window end", || {
        acquire_result(&mut con, "k3", "a", 100).is_ok()
    });
    drop(con);
    node.kill();
    for entry in std::fs::read_dir(node.dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    node.restart();
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k4", b"a", b"100"]);
    assert!(err.starts_with("GRACE"), "{err}");
}

/// The holes issue, item 4: `max-ttl-ms` raised at run time on the master
/// (300 s leases) while the replica keeps 60 s. The replica learns the
/// longest lease from its master, so its promotion window covers 300 s, and
/// a lease it received is not clamped to its own 60 s after a restart from
/// disk. The `replica-own-lease` mutant gives the 60 s window.
#[test]
fn a_promoted_replica_guards_for_its_masters_longest_lease() {
    for mutant in [false, true] {
        let master = Node::builder()
            .config("repl-diskless-sync-delay", "0")
            .start();
        let mut builder = Node::builder()
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", "60000")
            .config("appendonly", "yes");
        if mutant {
            builder = builder.env("REDLOCK_TEST_MUTANTS", "replica-own-lease");
        }
        let mut replica = start_replica(&master, builder);
        let mut m = master.connection();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("redlock.max-ttl-ms")
            .arg("300000")
            .query(&mut m)
            .unwrap();
        assert_eq!(
            acquire_acknowledged(&mut m, "long", "alice", 300_000),
            Some(1)
        );
        wait_replicated(&mut m);
        let mut r = replica.connection();
        let learned: u64 = info_field(&mut r, "redlock", "redlock_longest_lease_ms")
            .unwrap()
            .parse()
            .unwrap();
        promote(&mut r);
        let remaining = grace_remaining_ms(&mut r);
        if mutant {
            assert_eq!(learned, 60_000);
            assert!(remaining <= 60_000, "{remaining}");
            continue;
        }
        assert_eq!(learned, 300_000);
        assert!(remaining > 290_000, "window {remaining} ms");
        // Restarted from its AOF: the received lease keeps its length.
        drop(r);
        replica.restart_with(&[("replicaof", "no one")]);
        let mut r = replica.connection();
        let v = inspect(&mut r, "long").unwrap();
        assert!(v.held && v.pttl > 60_000, "{v:?}");
    }
}

/// Review finding: a restart that brings back a smaller `max-ttl-ms` from
/// its configuration still guards for the longer leases the previous run
/// granted under its startup `max-ttl-ms` (recorded at load).
#[test]
fn a_restart_with_a_smaller_max_ttl_still_covers_the_earlier_leases() {
    let mut node = Node::builder()
        .config("redlock.max-ttl-ms", "10000")
        .start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "res", "alice", 10_000), Some(1));
    drop(con);
    node.kill();
    node.restart_with(&[
        ("redlock.max-ttl-ms", "2000"),
        ("redlock.restart-grace-ms", "-1"),
    ]);
    let mut con = node.connection();
    let window: u64 = info_field(&mut con, "redlock", "redlock_grace_window_ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(window >= 10_000, "window {window} ms");
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"res", b"bob", b"2000"]);
    assert!(err.starts_with("GRACE"), "{err}");
}

/// Review finding: a durable node that became a replica at run time and
/// is then restarted as a master (its configuration names no master) may
/// lack its master's last grants, like a promoted replica: it waits.
#[test]
fn a_replica_restarted_as_a_master_waits_for_the_window() {
    let master = Node::builder().config("redlock.max-ttl-ms", "3000").start();
    let mut node = Node::builder()
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "3000")
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut con = node.connection();
    wait_until(Duration::from_secs(10), "first window end", || {
        acquire_result(&mut con, "warm", "a", 100).is_ok()
    });
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_restart_exempt").as_deref(),
        Some("1")
    );
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(20), "replica link up", || {
        info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
    });
    let mut m = master.connection();
    assert_eq!(acquire(&mut m, "L", "alice", 3_000), Some(1));
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_restart_exempt").as_deref(),
        Some("0")
    );
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"L", b"bob", b"3000"]);
    assert!(err.starts_with("GRACE"), "{err}");
}

/// Review finding: `no-appendfsync-on-rewrite yes` skips the fsync of
/// acknowledged writes while a child runs, so the run is not durable.
#[test]
fn no_appendfsync_on_rewrite_is_not_durable() {
    let mut node = Node::builder()
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "1000")
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .config("no-appendfsync-on-rewrite", "yes")
        .start();
    let mut con = node.connection();
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_durable_run").as_deref(),
        Some("0")
    );
    wait_until(Duration::from_secs(10), "first window end", || {
        acquire_result(&mut con, "k", "a", 100).is_ok()
    });
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k2", b"a", b"100"]);
    assert!(err.starts_with("GRACE"), "{err}");
}

/// Review finding: `RESTORE` (what `MIGRATE` runs on the target shard) of a
/// lock whose lease is longer than the target's longest lease is refused,
/// not cut short; once the target's `max-ttl-ms` covers it, it loads whole.
#[test]
fn restore_refuses_a_lease_longer_than_the_nodes_longest_lease() {
    let source = Node::builder()
        .config("redlock.max-ttl-ms", "20000")
        .start();
    let target = Node::builder().config("redlock.max-ttl-ms", "2000").start();
    let mut s = source.connection();
    let mut t = target.connection();
    assert_eq!(acquire(&mut s, "k", "alice", 20_000), Some(1));
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut s).unwrap();
    let refused = redis::cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(&payload)
        .query::<()>(&mut t);
    assert!(refused.is_err(), "a 20 s lease restored on a 2 s node");
    assert_eq!(inspect(&mut t, "k"), None);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg("30000")
        .query(&mut t)
        .unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(&payload)
        .query(&mut t)
        .unwrap();
    let v = inspect(&mut t, "k").unwrap();
    assert!(v.held && v.pttl > 15_000 && v.token == 1, "{v:?}");
    assert_eq!(acquire(&mut t, "k", "bob", 1_000), None);
}

/// Review findings: a `RESTORE` (what `MIGRATE` runs) on a master whose
/// `max-ttl-ms` was raised at run time records the lease before accepting
/// it, so a restart that brings the smaller `max-ttl-ms` back neither cuts
/// the lease nor shortens the window; the master's replica, still at the
/// smaller `max-ttl-ms`, takes the same `RESTORE` instead of refusing it
/// (once it acknowledged the raise: before, the master refuses the
/// `RESTORE`, `tests/adversarial_promotion.rs`).
#[test]
fn a_restored_lease_is_recorded_and_its_replica_takes_it() {
    let source = Node::builder()
        .config("redlock.max-ttl-ms", "20000")
        .start();
    let mut s = source.connection();
    assert_eq!(acquire(&mut s, "k", "alice", 20_000), Some(1));
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut s).unwrap();
    let mut target = Node::builder()
        .config("redlock.max-ttl-ms", "2000")
        .config("redlock.restart-grace-ms", "-1")
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .config("repl-diskless-sync-delay", "0")
        .start();
    let replica = start_replica(
        &target,
        Node::builder().config("redlock.max-ttl-ms", "2000"),
    );
    let mut t = target.connection();
    let mut r = replica.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg("30000")
        .query(&mut t)
        .unwrap();
    // Refused (lease-ack check) until the replica acknowledged the raise.
    wait_until(
        Duration::from_secs(20),
        "RESTORE passes once the replica acknowledged the raise",
        || {
            redis::cmd("RESTORE")
                .arg("k")
                .arg(0)
                .arg(&payload)
                .query::<()>(&mut t)
                .is_ok()
        },
    );
    wait_replicated(&mut t);
    let v = inspect(&mut r, "k").expect("the replica refused its master's RESTORE");
    assert!(v.held && v.pttl > 10_000, "replica: {v:?}");
    let recorded: u64 = std::fs::read_to_string(target.dir().join("redlock-longest-lease-ms"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(recorded > 15_000, "recorded {recorded}");
    drop(t);
    target.kill();
    target.restart_with(&[("redlock.max-ttl-ms", "2000")]);
    let mut t = target.connection();
    let v = inspect(&mut t, "k").unwrap();
    assert!(v.held && v.pttl > 10_000, "after the restart: {v:?}");
    assert_eq!(acquire_result(&mut t, "k", "bob", 2_000).ok(), None);
}

/// Review finding: the run record lives in the AOF directory, so a durable
/// node that comes back with another AOF directory (a lost or unmounted
/// one) has no record and waits.
#[test]
fn a_node_back_with_another_aof_directory_waits() {
    let mut node = Node::builder()
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "1000")
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut con = node.connection();
    wait_until(Duration::from_secs(10), "first window end", || {
        acquire_result(&mut con, "k", "a", 100).is_ok()
    });
    assert!(node
        .dir()
        .join("appendonlydir/redlock-run-state-appendonly.aof")
        .exists());
    drop(con);
    node.kill();
    node.restart_with(&[("appenddirname", "elsewhere")]);
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k2", b"a", b"100"]);
    assert!(err.starts_with("GRACE"), "{err}");
}

/// Review finding: a window that is over does not open again when a longer
/// lease becomes known later.
#[test]
fn a_window_that_is_over_stays_over() {
    let mut node = Node::builder().config("redlock.max-ttl-ms", "1000").start();
    drop(node.connection());
    node.restart_with(&[("redlock.restart-grace-ms", "-1")]);
    let mut con = node.connection();
    wait_until(Duration::from_secs(10), "window end", || {
        acquire_result(&mut con, "k", "a", 100).is_ok()
    });
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg("10000")
        .query(&mut con)
        .unwrap();
    assert_eq!(acquire(&mut con, "long", "a", 10_000), Some(1));
    assert_eq!(acquire(&mut con, "other", "b", 1_000), Some(1));
}
