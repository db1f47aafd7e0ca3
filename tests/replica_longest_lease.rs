//! What a replica learns of its master's longest lease in a full sync, on
//! every server: Redis 7.0 writes the node record with `aux_save`, Redis
//! 7.2+ and Valkey call `aux_save2`, which leaves it out when it equals the
//! fixed baseline (`datatype::UNWRITTEN_NODE_RECORD`, 60 s, nothing
//! reclaimed). Run on both servers: `make test` (Redis 7.0) and `make
//! test-valkey` (`REDLOCK_SERVER_BIN=…/valkey-server`).
//!
//! The hole these tests close (issue 39): `aux_save2` compared the record
//! with one built from the *writing* node's `max-ttl-ms`, so a master at
//! 100 s wrote nothing and its replica kept its own shorter longest lease;
//! promoted after its master died, it guarded too short and granted a lock
//! whose lease still ran on the old master's holder.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// A master (`restart-grace-ms 0`, the given `max-ttl-ms`) and a replica
/// whose guard follows its longest lease (`restart-grace-ms -1`) with its
/// own `max-ttl-ms`, linked.
fn group(master_max_ttl: Option<&str>, replica_max_ttl: Option<&str>) -> (Node, Node) {
    let mut master = Node::builder();
    if let Some(ms) = master_max_ttl {
        master = master.module_arg("max-ttl-ms").module_arg(ms);
    }
    let master = master.start();
    let mut replica = Node::builder().config("redlock.restart-grace-ms", "-1");
    if let Some(ms) = replica_max_ttl {
        replica = replica.config("redlock.max-ttl-ms", ms);
    }
    let replica = start_replica(&master, replica);
    (master, replica)
}

/// The sequence up to the promotion: the replica is frozen and cut
/// off, the master grants `key` to `owner` for `ttl_ms` (the grant never
/// reaches the replica), the master dies, the replica is thawed and
/// promoted. Returns the moment the master's grant was acknowledged.
fn grant_unseen_then_promote(
    master: &mut Node,
    replica: &Node,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> Instant {
    let mut m = master.connection();
    replica.pause();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut m)
        .unwrap();
    // Read before the request: the lease ends no earlier than this + its ttl.
    let granted = Instant::now();
    assert!(acquire(&mut m, key, owner, ttl_ms).is_some());
    drop(m);
    master.kill();
    replica.resume();
    let mut r = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    granted
}

fn longest_lease(con: &mut redis::Connection) -> u64 {
    redlock_info(con, "longest_lease_ms")
}

/// The reproduction with its own figures: a master at 100 s, a
/// replica at the default 60 s. The replica learns 100 s in the full sync,
/// and once promoted refuses new locks for about 100 s, not 60 s.
#[test]
fn a_replica_learns_a_longer_max_ttl_of_its_master_in_the_full_sync() {
    let (mut master, replica) = group(Some("100000"), None);
    let mut r = replica.connection();
    assert_eq!(
        longest_lease(&mut r),
        100_000,
        "the replica did not learn its master's longest lease"
    );
    grant_unseen_then_promote(&mut master, &replica, "L", "owner-a", 100_000);
    let mut r = replica.connection();
    let err = error_of(&mut r, &[b"REDLOCK.ACQUIRE", b"L", b"owner-b", b"1000"]);
    assert!(
        err.starts_with("GRACE node was promoted to master"),
        "{err}"
    );
    let remaining = redlock_info(&mut r, "grace_remaining_ms");
    assert!(
        remaining > 95_000,
        "the promotion window covers {remaining} ms, less than the old master's 100 s lease"
    );
}

/// The same sequence scaled down, end to end: the old master's holder A
/// has a 4 s lease; the promoted replica (its own `max-ttl-ms` 1 s) must
/// not grant the lock to B before A's lease is over.
#[test]
fn a_promoted_replica_never_grants_while_its_old_masters_lease_runs() {
    let (mut master, replica) = group(Some("4000"), Some("1000"));
    // The replica knows that every replica of its master acknowledged
    // knowing 4 s (replicas acknowledge once a second): promoted, it is not
    // held back for B's 1 s lease (`NOSYNC`), only guarded (`GRACE`).
    let mut r = replica.connection();
    wait_until(
        Duration::from_secs(20),
        "the replica knows what its master's replicas acknowledged",
        || redlock_info(&mut r, "master_acked_ms") >= 4_000,
    );
    drop(r);
    let granted = grant_unseen_then_promote(&mut master, &replica, "L", "owner-a", 4_000);
    let mut r = replica.connection();
    let deadline = Instant::now() + Duration::from_secs(30);
    let b_granted = loop {
        match acquire_result(&mut r, "L", "owner-b", 1_000) {
            Ok(Some(_)) => break Instant::now(),
            Ok(None) => panic!("the promoted replica holds L for someone"),
            Err(e) => assert_eq!(e.code(), Some("GRACE"), "{e}"),
        }
        assert!(Instant::now() < deadline, "the window never ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    let gap = b_granted - granted;
    assert!(
        gap >= Duration::from_millis(4_000),
        "B got L {gap:?} after A's 4 s lease was granted: two holders"
    );
}

/// A master with the default configuration: on Redis 7.2+ and Valkey the
/// RDB carries no node record, and the replica (its own `max-ttl-ms` 1 s)
/// learns the baseline it stands for, 60 s.
#[test]
fn a_replica_of_a_default_master_learns_the_default_longest_lease() {
    let (_master, replica) = group(None, Some("1000"));
    let mut r = replica.connection();
    assert_eq!(longest_lease(&mut r), 60_000);
}

/// A smaller `max-ttl-ms` on the master than the baseline is written (it is
/// not the baseline), and the replica keeps its own when that is longer:
/// a longest lease only ever grows.
#[test]
fn a_replica_never_learns_a_shorter_longest_lease() {
    let (_master, replica) = group(Some("2000"), Some("5000"));
    let mut r = replica.connection();
    assert_eq!(longest_lease(&mut r), 5_000);
    let (_master, replica) = group(Some("2000"), Some("1000"));
    let mut r = replica.connection();
    assert_eq!(longest_lease(&mut r), 2_000);
}

/// A full sync after the master's longest lease grew at run time (`CONFIG
/// SET` and a longer grant): the new replica learns it from the RDB.
#[test]
fn a_longest_lease_raised_at_run_time_reaches_a_new_replica() {
    let master = Node::start();
    let mut m = master.connection();
    config_set(&mut m, "redlock.max-ttl-ms", "90000");
    assert!(acquire(&mut m, "long", "owner-a", 90_000).is_some());
    assert!(release(&mut m, "long", "owner-a") == 1);
    let replica = start_replica(
        &master,
        Node::builder().config("redlock.max-ttl-ms", "1000"),
    );
    assert_eq!(longest_lease(&mut replica.connection()), 90_000);
}

/// What `aux_save2` is for: on Redis 7.2+ and Valkey, the RDB of a node
/// with the default configuration and no lock keys loads into a server
/// without the module. A node with another `max-ttl-ms` writes its record
/// (a reader cannot know the writer's configuration), and so does Redis
/// 7.0 always (it only has `aux_save`): those files need the module.
#[test]
fn an_rdb_without_lock_data_loads_without_the_module_only_when_nothing_was_written() {
    for (max_ttl, plain_loads) in [
        (None, redlock_testkit::server_has_7_2_api()),
        (Some("30000"), false),
    ] {
        let mut b = Node::builder();
        if let Some(ms) = max_ttl {
            b = b.config("redlock.max-ttl-ms", ms);
        }
        let node = b.start();
        let mut con = node.connection();
        let _: () = redis::cmd("SET")
            .arg("plain")
            .arg("v")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
        let rdb = std::fs::read(node.dir().join("dump.rdb")).unwrap();
        let attempt = std::panic::catch_unwind(|| {
            Node::builder()
                .without_module()
                .file("dump.rdb", &rdb)
                .start()
        });
        match attempt {
            Ok(plain) => {
                assert!(plain_loads, "max-ttl {max_ttl:?}: a server without the module loaded an RDB with a node record");
                let v: String = redis::cmd("GET")
                    .arg("plain")
                    .query(&mut plain.connection())
                    .unwrap();
                assert_eq!(v, "v");
            }
            Err(_) => assert!(
                !plain_loads,
                "max-ttl {max_ttl:?}: the RDB did not load without the module"
            ),
        }
    }
}

/// Every way a full sync can reach the replica (the RDB through a file or
/// the socket; loaded into an empty database, into a temporary one swapped
/// in, or from disk; on Valkey also the dual-channel sync, where the RDB
/// comes on a connection of its own) fires the loading events the node
/// record depends on: the replica learns 100 s each time.
#[test]
fn every_full_sync_path_carries_the_longest_lease() {
    let mut paths: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "disk sync, disk load",
            vec![
                ("repl-diskless-sync", "no"),
                ("repl-diskless-load", "disabled"),
            ],
        ),
        (
            "socket sync, swapdb load",
            vec![("repl-diskless-load", "swapdb")],
        ),
        (
            "socket sync, on-empty-db load",
            vec![("repl-diskless-load", "on-empty-db")],
        ),
    ];
    if redlock_testkit::server_version().0 == redlock_testkit::Flavor::Valkey {
        paths.push((
            "dual-channel sync",
            vec![("dual-channel-replication-enabled", "yes")],
        ));
    }
    // 100 s: the RDB carries the record; the default: it carries none and
    // the loading events make the replica learn the baseline.
    for (path, configs) in paths {
        for (master_max_ttl, learned) in [(Some("100000"), 100_000), (None, 60_000)] {
            let mut master = Node::builder();
            if let Some(ms) = master_max_ttl {
                master = master.module_arg("max-ttl-ms").module_arg(ms);
            }
            let mut replica = Node::builder()
                .config("redlock.restart-grace-ms", "-1")
                .config("redlock.max-ttl-ms", "1000");
            for (name, value) in &configs {
                master = master.config(name, value);
                replica = replica.config(name, value);
            }
            let master = master.start();
            let replica = start_replica(&master, replica);
            assert_eq!(
                longest_lease(&mut replica.connection()),
                learned,
                "{path}, master max-ttl-ms {master_max_ttl:?}: the replica did not learn its master's longest lease"
            );
        }
    }
}

/// The `aux-writer-baseline` mutant (the test build's switch) puts the old
/// rule back: on Redis 7.2+ and Valkey the replica keeps its own 1 s, on
/// Redis 7.0 (`aux_save` always writes) it still learns 4 s. What the
/// tests above would catch.
#[test]
fn the_writer_baseline_mutant_puts_the_hole_back_on_7_2_and_valkey() {
    let master = Node::builder()
        .module_arg("max-ttl-ms")
        .module_arg("4000")
        .env("REDLOCK_TEST_MUTANTS", "aux-writer-baseline")
        .start();
    let replica = start_replica(
        &master,
        Node::builder()
            .config("redlock.max-ttl-ms", "1000")
            .env("REDLOCK_TEST_MUTANTS", "aux-writer-baseline"),
    );
    let expected = if redlock_testkit::server_has_7_2_api() {
        1_000
    } else {
        4_000
    };
    assert_eq!(longest_lease(&mut replica.connection()), expected);
}
