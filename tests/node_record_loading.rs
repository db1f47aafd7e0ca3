//! Adversarial review of the fixed node-record baseline (issue 39): event
//! sequences around the node record that still break mutual exclusion or
//! the lease-loading invariant (DESIGN §12), on the server the tests run
//! on (`REDLOCK_SERVER_BIN`). The first two fail on Valkey 8.1.8 (and, by
//! the same `aux_save2` path, Redis 7.2+) and pass on Redis 7.0, whose
//! `aux_save` always writes the record.
//!
//! Both load data written by a node whose node record equals the baseline
//! (60 s, nothing reclaimed), so `aux_save2` left it out, into a node with
//! a smaller `max-ttl-ms` and no `redlock-longest-lease-ms` of its own (the
//! data directory restored on a new disk; README: "a node on a new disk or
//! with another AOF directory"). An RDB file then teaches the baseline, but
//! only when loading ends, after the keys were clamped; an AOF's RDB
//! preamble teaches nothing (`events.rs` learns the baseline only for
//! `LOADING_RDB_START` / `LOADING_REPL_START`).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Removes the node's longest-lease record (the node is stopped).
fn forget_longest_lease(node: &Node) {
    std::fs::remove_file(node.dir().join("redlock-longest-lease-ms"))
        .expect("the node wrote redlock-longest-lease-ms");
}

/// Tries to give `key` to `owner` until `until`; panics if it is granted.
fn never_granted_before(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    until: Instant,
    what: &str,
) {
    while Instant::now() < until {
        match acquire_result(con, key, owner, 1_000) {
            Ok(Some(token)) => panic!(
                "{what}: {owner} got {key} (token {token}) {:?} before the earlier lease ended: two holders",
                until - Instant::now()
            ),
            Ok(None) => {}
            Err(e) => assert_eq!(e.code(), Some("GRACE"), "{e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A durable node at the default `max-ttl-ms` grants A a 10 s lease and
/// rewrites its AOF (the lease goes into the RDB preamble; on 7.2+/Valkey
/// the node record does not, it equals the baseline). The node crashes and
/// comes back from that AOF without its longest-lease file and with
/// `max-ttl-ms` 1000: the lease is clamped to 1 s, the window is 1 s, and B
/// gets the lock while A's lease runs. The same files as an RDB are safe
/// (the baseline is learned when loading ends), and so is Redis 7.0.
#[test]
fn an_aof_preamble_without_the_node_record_does_not_shorten_the_restart_guard() {
    let mut node = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .config("aof-use-rdb-preamble", "yes")
        .start();
    let mut con = node.connection();
    // Read before the request: the lease ends no earlier than this + its ttl.
    let granted = Instant::now();
    assert!(acquire(&mut con, "L", "owner-a", 10_000).is_some());
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    wait_for_no_child(&mut con);
    drop(con);
    node.kill();
    forget_longest_lease(&node);
    node.restart_with(&[
        ("redlock.max-ttl-ms", "1000"),
        ("redlock.restart-grace-ms", "-1"),
    ]);
    let mut con = node.connection();
    never_granted_before(
        &mut con,
        "L",
        "owner-b",
        granted + Duration::from_millis(10_000),
        "restart from an AOF with an RDB preamble",
    );
}

/// DESIGN §12: "A lease read from disk never ends earlier than the time it
/// had left when written." The RDB of a node at the default `max-ttl-ms`
/// (no node record on 7.2+/Valkey) loaded by a node with `max-ttl-ms` 1000
/// and no longest-lease file: the keys are clamped to 1 s before the
/// baseline is learned at the end of the load, so A's 10 s lease ends after
/// 1 s and its EXTEND fails. (The guard window, 60 s once the baseline is
/// learned, keeps B out; the holder loses its lock on this node early.)
#[test]
fn an_rdb_without_the_node_record_never_cuts_a_lease_short() {
    let mut node = Node::start();
    let mut con = node.connection();
    assert!(acquire(&mut con, "L", "owner-a", 10_000).is_some());
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    drop(con);
    node.kill();
    forget_longest_lease(&node);
    node.restart_with(&[
        ("redlock.max-ttl-ms", "1000"),
        ("redlock.restart-grace-ms", "-1"),
    ]);
    let mut con = node.connection();
    let pttl = inspect(&mut con, "L").map(|v| v.pttl);
    assert!(
        pttl.is_some_and(|ms| ms > 5_000),
        "A's lease was written with about 10 s left and reads back with {pttl:?} ms"
    );
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        extend(&mut con, "L", "owner-a", 1_000),
        1,
        "A's EXTEND fails 1.5 s into a lease written with 10 s left"
    );
}

/// `CONFIG SET` raises the master's `max-ttl-ms` while the replica is
/// linked: the master announces its node record at once, not only with its
/// first longer grant, which is exactly what a lagging replica misses (and
/// with it the announcement). Promoted after missing that grant, the
/// replica still guards for the master's 4 s while A's 4 s lease runs.
/// (Review finding; without the announcement it grants B after its own
/// 1 s, with A's token.)
#[test]
fn a_max_ttl_raised_on_the_master_reaches_the_replica_before_a_grant_it_misses() {
    let mut master = Node::builder()
        .module_arg("max-ttl-ms")
        .module_arg("1000")
        .start();
    let replica = start_replica(
        &master,
        Node::builder()
            .config("redlock.max-ttl-ms", "1000")
            .config("redlock.restart-grace-ms", "-1"),
    );
    let mut m = master.connection();
    config_set(&mut m, "redlock.max-ttl-ms", "4000");
    let mut r = replica.connection();
    wait_until(Duration::from_secs(5), "the announcement", || {
        redlock_info(&mut r, "longest_lease_ms") == 4_000
    });
    // The master grants 4 s leases once the replica acknowledged the
    // announcement (`core/lease_ack_rule.rs`).
    assert!(acquire_acknowledged(&mut m, "warm", "owner-x", 4_000).is_some());
    replica.pause();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut m)
        .unwrap();
    // Read before the request: the lease ends no earlier than this + its ttl.
    let granted = Instant::now();
    assert!(acquire(&mut m, "L", "owner-a", 4_000).is_some());
    drop(m);
    master.kill();
    replica.resume();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    never_granted_before(
        &mut r,
        "L",
        "owner-b",
        granted + Duration::from_millis(4_000),
        "promotion after a runtime raise on the master",
    );
}

/// A master restarted with a larger `max-ttl-ms` (from its configuration)
/// has that length on record from its start; its replica may come back by
/// a partial resync, which carries no node record: the master announces
/// its record whenever a replica comes online.
#[test]
fn a_replica_learns_a_restarted_masters_larger_max_ttl() {
    let mut master = Node::builder()
        .config("redlock.max-ttl-ms", "1000")
        .config("save", "3600 1")
        .start();
    let replica = start_replica(
        &master,
        Node::builder().config("redlock.max-ttl-ms", "1000"),
    );
    let mut r = replica.connection();
    assert_eq!(redlock_info(&mut r, "longest_lease_ms"), 1_000);
    // SHUTDOWN SAVE keeps the replication id and offset in the RDB: the
    // replica continues where it was, by a partial resync.
    let _ = redis::cmd("SHUTDOWN")
        .arg("SAVE")
        .query::<()>(&mut master.connection());
    master.restart_with(&[("redlock.max-ttl-ms", "4000")]);
    wait_until(Duration::from_secs(10), "the replica learns 4 s", || {
        redlock_info(&mut r, "longest_lease_ms") == 4_000
    });
    let mut m = master.connection();
    assert_eq!(
        info_field(&mut m, "stats", "sync_partial_ok").as_deref(),
        Some("1"),
        "the replica came back by a full sync: this test needs a partial resync"
    );
}

/// Passes today; covers the RDB-file half of the change's claim, which no
/// test of the change checks (dropping `LOADING_RDB_START` from the loads
/// that learn the baseline passes `tests/replica_longest_lease.rs`): an RDB
/// file of a default node (no node record on 7.2+/Valkey) loaded by a node
/// with `max-ttl-ms` 1000 and no longest-lease file guards for the baseline,
/// so B never gets the lock while A's lease runs.
#[test]
fn an_rdb_file_without_the_node_record_guards_for_the_baseline() {
    let mut node = Node::start();
    let mut con = node.connection();
    // Read before the request: the lease ends no earlier than this + its ttl.
    let granted = Instant::now();
    assert!(acquire(&mut con, "L", "owner-a", 4_000).is_some());
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    drop(con);
    node.kill();
    forget_longest_lease(&node);
    node.restart_with(&[
        ("redlock.max-ttl-ms", "1000"),
        ("redlock.restart-grace-ms", "-1"),
    ]);
    let mut con = node.connection();
    assert_eq!(redlock_info(&mut con, "longest_lease_ms"), 60_000);
    never_granted_before(
        &mut con,
        "L",
        "owner-b",
        granted + Duration::from_millis(4_000),
        "restart from an RDB file",
    );
}
