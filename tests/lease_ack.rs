//! A master grants no lease longer than every replica of its life has
//! acknowledged knowing (`src/core/lease_ack_rule.rs`; simulator seeds
//! 189,411 and 892,199): after `redlock.max-ttl-ms` is raised on the master
//! only, a lagging replica that has not applied the announcement of the new
//! longest lease would, promoted, guard for its older, shorter one and grant
//! the lock while the old master's longer lease still runs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redlock_testkit::NodeBuilder;

/// A node with leases up to 10 s, no replica-sync check and no restart
/// guard, so that only the rule under test refuses anything.
fn node() -> NodeBuilder {
    Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "10000")
}

/// Waits until `master` counts `replica` online.
fn wait_online(master: &Node, replica: &Node) {
    let mut m = master.connection();
    let online = format!("port={},state=online", replica.port());
    wait_until(Duration::from_secs(20), "the replica online", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap();
        info.contains(&online)
    });
}

/// Asks for `key` until it is granted (a transient refusal is retried, as
/// the client does) or `timeout` passes: the token, or the last error.
fn acquire_retrying(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    timeout: Duration,
) -> Result<i64, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match acquire_result(con, key, owner, ttl) {
            Ok(Some(token)) => return Ok(token),
            Ok(None) => return Err("held by another owner".into()),
            Err(e) if Instant::now() >= deadline => return Err(e.to_string()),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[test]
fn a_lease_longer_than_a_paused_replica_knows_waits_until_it_acknowledged() {
    let master = node().start();
    let mut m = master.connection();
    let replica = start_replica(&master, node());
    wait_online(&master, &replica);

    // Leases within what the replica acknowledged knowing are granted (the
    // first waits for one acknowledgement round of this master's life).
    acquire_retrying(&mut m, "warm", "a", 5_000, Duration::from_secs(20))
        .expect("a 5 s lease with the replica up to date");
    wait_until(Duration::from_secs(20), "10 s acknowledged", || {
        redlock_info(&mut m, "longest_lease_acked_ms") >= 10_000
    });

    // The replica lags (frozen); the operator raises max-ttl-ms on the
    // master only.
    replica.pause();
    config_set(&mut m, "redlock.max-ttl-ms", "60000");

    // A 30 s lease is refused, transiently, naming the reason, for as long
    // as the replica has not acknowledged the new longest lease.
    let deadline = Instant::now() + Duration::from_millis(2_500);
    let mut refusals = 0;
    while Instant::now() < deadline {
        let err = acquire_result(&mut m, "k", "alice", 30_000)
            .expect_err("a 30 s lease granted while the replica knows only 10 s");
        assert_eq!(err.code(), Some("NOSYNC"), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("30000 ms is longer than the 10000 ms"),
            "the reply names the reason: {text}"
        );
        assert!(
            text.contains(&replica.port().to_string()),
            "the reply names the replica waited for: {text}"
        );
        refusals += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(refusals >= 5, "{refusals} refusals");
    // An EXTEND to the longer ttl is refused the same way, one within what
    // the replica knows is not.
    assert_eq!(acquire(&mut m, "short", "bob", 5_000).is_some(), true);
    let err = redis::cmd("REDLOCK.EXTEND")
        .arg("short")
        .arg("bob")
        .arg(30_000)
        .query::<i64>(&mut m)
        .expect_err("an extension to 30 s granted while the replica knows only 10 s");
    assert_eq!(err.code(), Some("NOSYNC"), "{err}");
    assert_eq!(extend(&mut m, "short", "bob", 8_000), 1);
    let held: Option<View> = inspect(&mut m, "k");
    assert!(held.is_none(), "nothing was granted on k: {held:?}");

    // The replica catches up: the lease is granted.
    replica.resume();
    let token = acquire_retrying(&mut m, "k", "alice", 30_000, Duration::from_secs(20))
        .expect("the 30 s lease once the replica acknowledged knowing 60 s");
    assert!(token > 0);
    assert_eq!(redlock_info(&mut m, "longest_lease_acked_ms"), 60_000);
    // The replica knows the longest lease it would guard for if promoted.
    let mut r = replica.connection();
    assert!(redlock_info(&mut r, "longest_lease_ms") >= 60_000);
}

#[test]
fn a_master_that_never_had_a_replica_is_not_held_back() {
    let master = node().start();
    let mut m = master.connection();
    config_set(&mut m, "redlock.max-ttl-ms", "60000");
    assert!(acquire(&mut m, "k", "alice", 30_000).is_some());
    assert_eq!(extend(&mut m, "k", "alice", 60_000), 1);
}
