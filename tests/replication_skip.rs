//! A node skips replicating effects only while nobody can ever read them
//! (see src/host/replication.rs). Each scenario runs with the module's rule,
//! where nothing is lost, and with a loosened rule (test builds) under which
//! the replica or the AOF ends up without some locks, so that the scenario
//! would catch a rule that is too loose: the naive rule "replicate only
//! while a replica is online", and, where the AOF is turned on at run time,
//! the module's rule without the fork (the AOF has no check per command).

mod common;

use std::time::Duration;

use common::*;

fn set_rule(con: &mut redis::Connection, rule: &str) {
    let _: () = redis::cmd("REDLOCK.TESTHOOK")
        .arg("REPLICATION-RULE")
        .arg(rule)
        .query(con)
        .unwrap();
}

/// Locks `prefix0..prefixN` with tokens 1.
fn take(con: &mut redis::Connection, prefix: &str, n: usize) {
    for i in 0..n {
        assert_eq!(
            acquire(con, &format!("{prefix}{i}"), "owner", 60_000),
            Some(1)
        );
    }
}

fn count_held(con: &mut redis::Connection, prefix: &str, n: usize) -> usize {
    (0..n)
        .filter(|i| inspect(con, &format!("{prefix}{i}")).is_some_and(|v| v.held))
        .count()
}

/// A replica attached after locks were taken unreplicated: the full sync has
/// every lock, and effects during the sync (between the fork and the replica
/// coming online) reach it too.
fn attach_a_replica_later(rule: &str) -> (usize, usize) {
    // The snapshot for the sync takes at least half a second (100 ms per
    // key): effects in that time are the ones a too-loose rule loses.
    let master = Node::builder()
        .config("repl-diskless-sync-delay", "0")
        .config("rdb-key-save-delay", "100000")
        // A master on its first disk holds every lease while a replica not
        // of its life syncs (`LeaseAck::check_joining`); this test is of the
        // replication of effects made during the sync, so it grants them,
        // as before that rule.
        .env("REDLOCK_TEST_MUTANTS", "fresh-trusts-joining")
        .start();
    let mut m = master.connection();
    set_rule(&mut m, rule);
    take(&mut m, "before", 5);
    if rule == "SAFE" {
        assert_eq!(redlock_info(&mut m, "effects_unreplicated"), 5);
        assert_eq!(redlock_info(&mut m, "replication_skip_allowed"), 1);
    }
    let replica = Node::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start();
    let mut r = replica.connection();
    // Lock more names while the sync runs, until the replica is online.
    let mut during = 0;
    while !link_up(&mut r) {
        assert_eq!(
            acquire(&mut m, &format!("during{during}"), "owner", 60_000),
            Some(1)
        );
        during += 1;
        std::thread::sleep(Duration::from_millis(5));
        assert!(during < 4_000, "replica never came online");
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let held = count_held(&mut r, "before", 5) + count_held(&mut r, "during", during);
    (held, 5 + during)
}

#[test]
fn a_replica_attached_later_has_every_lock() {
    let (held, total) = attach_a_replica_later("SAFE");
    assert_eq!(held, total);
    let (held, total) = attach_a_replica_later("NAIVE");
    assert!(held < total, "the naive rule lost nothing ({held}/{total})");
}

/// AOF turned on at run time: the rewrite has every lock, and later effects
/// go to the AOF; a restart from it has them all.
fn turn_on_the_aof_later(rule: &str) -> (usize, usize) {
    let mut node = Node::start();
    let mut con = node.connection();
    set_rule(&mut con, rule);
    take(&mut con, "before", 5);
    let _: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut con)
        .unwrap();
    wait_for_no_child(&mut con);
    take(&mut con, "after", 5);
    drop(con);
    node.restart_with(&[("appendonly", "yes")]);
    let mut con = node.connection();
    (
        count_held(&mut con, "before", 5) + count_held(&mut con, "after", 5),
        10,
    )
}

#[test]
fn turning_on_the_aof_later_keeps_every_lock() {
    let (held, total) = turn_on_the_aof_later("SAFE");
    assert_eq!(held, total);
    let (held, total) = turn_on_the_aof_later("NAIVE");
    assert!(held < total, "the naive rule lost nothing ({held}/{total})");
    let (held, total) = turn_on_the_aof_later("NO-FORKS");
    assert!(
        held < total,
        "the rule without forks lost nothing ({held}/{total})"
    );
}

/// AOF turned on inside `MULTI`: the rewrite is only scheduled, so effects
/// later in the same transaction are written to no file until it forks
/// (from the server's cron), and its snapshot has them; effects after the
/// fork go to the AOF. A restart from it has them all.
fn turn_on_the_aof_inside_multi(rule: &str) -> (usize, usize) {
    let mut node = Node::start();
    let mut con = node.connection();
    set_rule(&mut con, rule);
    take(&mut con, "before", 3);
    let mut tx = redis::pipe();
    tx.atomic()
        .cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes");
    for i in 0..3 {
        tx.cmd("REDLOCK.ACQUIRE")
            .arg(format!("inside{i}"))
            .arg("owner")
            .arg(60_000);
    }
    let (ok, t0, t1, t2): (String, i64, i64, i64) = tx.query(&mut con).unwrap();
    assert_eq!((ok.as_str(), t0, t1, t2), ("OK", 1, 1, 1));
    wait_for_no_child(&mut con);
    assert_eq!(
        info_field(&mut con, "persistence", "aof_enabled").as_deref(),
        Some("1")
    );
    if rule == "SAFE" {
        // The transaction's locks were skipped (the rewrite had not forked
        // yet), and the fork then ended the skip.
        assert_eq!(redlock_info(&mut con, "effects_unreplicated"), 6);
        assert_eq!(redlock_info(&mut con, "replication_skip_allowed"), 0);
    }
    take(&mut con, "after", 3);
    drop(con);
    node.restart_with(&[("appendonly", "yes")]);
    let mut con = node.connection();
    (
        count_held(&mut con, "before", 3)
            + count_held(&mut con, "inside", 3)
            + count_held(&mut con, "after", 3),
        9,
    )
}

#[test]
fn turning_on_the_aof_inside_multi_keeps_every_lock() {
    let (held, total) = turn_on_the_aof_inside_multi("SAFE");
    assert_eq!(held, total);
    let (held, total) = turn_on_the_aof_inside_multi("NO-FORKS");
    assert!(
        held < total,
        "the rule without forks lost nothing ({held}/{total})"
    );
}

/// A node started with the AOF on writes every effect to it from the first
/// command: a kill -9 and a restart from the AOF keep every lock.
#[test]
fn a_node_started_with_the_aof_never_skips() {
    let mut node = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut con = node.connection();
    let allowed = redlock_info(&mut con, "replication_skip_allowed");
    take(&mut con, "k", 5);
    let skipped = redlock_info(&mut con, "effects_unreplicated");
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    assert_eq!(count_held(&mut con, "k", 5), 5, "locks lost in the kill -9");
    assert_eq!((allowed, skipped), (0, 0));
    assert_eq!(redlock_info(&mut con, "replication_skip_allowed"), 0);
}

/// A replica that disconnects and comes back with a partial resync: the
/// backlog must hold everything that happened meanwhile.
fn reconnect_with_a_partial_resync(rule: &str) -> (usize, usize, bool) {
    let master = Node::builder()
        .config("repl-diskless-sync-delay", "0")
        .start();
    let mut m = master.connection();
    set_rule(&mut m, rule);
    let replica = Node::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start();
    let mut r = replica.connection();
    wait_until(Duration::from_secs(20), "replica link up", || {
        link_up(&mut r)
    });
    // The master puts the replica online on its own side a little later;
    // until then a master that loaded no file refuses leases (`NOSYNC`).
    wait_online_at_master(&mut m, replica.port());
    take(&mut m, "linked", 3);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    // Cut the link from the master's side, lock names while it is down. The
    // replica is stopped meanwhile, so that it cannot reconnect before the
    // names are locked.
    replica.pause();
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut m)
        .map(|_: i64| ())
        .unwrap();
    wait_until(Duration::from_secs(5), "replica offline", || {
        info_field(&mut m, "replication", "connected_slaves").as_deref() == Some("0")
    });
    take(&mut m, "apart", 5);
    replica.resume();
    wait_until(Duration::from_secs(20), "replica back", || link_up(&mut r));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let partial: u64 = info_field(&mut m, "stats", "sync_partial_ok")
        .unwrap()
        .parse()
        .unwrap();
    let held = count_held(&mut r, "linked", 3) + count_held(&mut r, "apart", 5);
    (held, 8, partial >= 1)
}

#[test]
fn a_partial_resync_brings_every_lock() {
    let (held, total, partial) = reconnect_with_a_partial_resync("SAFE");
    assert!(partial, "the replica came back with a full sync");
    assert_eq!(held, total);
    let (held, total, partial) = reconnect_with_a_partial_resync("NAIVE");
    assert!(partial, "the replica came back with a full sync");
    assert!(held < total, "the naive rule lost nothing ({held}/{total})");
}

#[test]
fn a_node_that_had_a_replica_never_skips_again() {
    let master = Node::builder()
        .config("repl-diskless-sync-delay", "0")
        .start();
    let mut m = master.connection();
    assert_eq!(redlock_info(&mut m, "replication_skip_allowed"), 1);
    let mut replica = Node::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start();
    let mut r = replica.connection();
    wait_until(Duration::from_secs(20), "replica link up", || {
        link_up(&mut r)
    });
    drop(r);
    replica.stop();
    take(&mut m, "k", 2);
    assert_eq!(redlock_info(&mut m, "replication_skip_allowed"), 0);
    assert_eq!(redlock_info(&mut m, "effects_unreplicated"), 0);
}
