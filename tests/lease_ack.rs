//! A master grants no lease longer than every replica of its life has
//! acknowledged knowing (`core/lease_ack_rule.rs`; simulator seeds 189,411
//! and 892,199): after `redlock.max-ttl-ms` is raised at run time on the
//! master only, a lease of the new length waits (`NOSYNC`, transient) until
//! the replica applied the master's announcement of it. Without the rule, a
//! lagging replica promoted after the master died guarded for its own,
//! shorter longest lease and granted the lock while the old master's lease
//! still ran. Run on both servers: `make test` (Redis 7.0) and `make
//! test-valkey` (`REDLOCK_SERVER_BIN=…/valkey-server`).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// A master and a replica, both at `max-ttl-ms` 1 s (the replica's guard
/// follows its longest lease), linked, the replica acknowledged.
fn group() -> (Node, Node) {
    let master = Node::builder()
        .module_arg("max-ttl-ms")
        .module_arg("1000")
        .start();
    let replica = start_replica(
        &master,
        Node::builder()
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", "1000"),
    );
    wait_replicated(&mut master.connection());
    (master, replica)
}

#[test]
fn a_lease_longer_than_a_lagging_replica_knows_waits_until_it_acknowledged() {
    let (master, replica) = group();
    let mut m = master.connection();
    replica.pause();
    config_set(&mut m, "redlock.max-ttl-ms", "5000");
    // The master's old longest lease is granted at once.
    assert!(acquire(&mut m, "short", "owner-a", 1_000).is_some());
    // The new length is refused while the replica cannot have learned it.
    for _ in 0..5 {
        let e = acquire_result(&mut m, "L", "owner-a", 5_000)
            .expect_err("a 5 s lease was granted while the replica knew only 1 s");
        assert_eq!(e.code(), Some("NOSYNC"), "{e}");
        assert!(
            e.to_string().contains("acknowledged knowing"),
            "the reply names the reason: {e}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(redlock_info(&mut m, "longest_lease_acked_ms") < 5_000);
    // Once the replica applied the announcement and acknowledged it, the
    // lease is granted.
    replica.resume();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match acquire_result(&mut m, "L", "owner-a", 5_000) {
            Ok(Some(_)) => break,
            Ok(None) => panic!("L is held by someone"),
            Err(e) => assert_eq!(e.code(), Some("NOSYNC"), "{e}"),
        }
        assert!(Instant::now() < deadline, "the lease was never granted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(redlock_info(&mut m, "longest_lease_acked_ms") >= 5_000);
    let mut r = replica.connection();
    assert!(
        redlock_info(&mut r, "longest_lease_ms") >= 5_000,
        "the replica did not learn the master's longest lease"
    );
}

/// The simulator's sequence on real nodes: the replica is frozen, the
/// master's `max-ttl-ms` is raised, a client asks for a lease of the new
/// length, the master dies, the replica is promoted. Either the master
/// refused the lease (`NOSYNC`), or the promoted replica must not grant the
/// lock before that lease ended.
#[test]
fn a_replica_promoted_while_it_lagged_behind_a_raised_max_ttl_keeps_one_holder() {
    let (mut master, replica) = group();
    let mut m = master.connection();
    replica.pause();
    // The link is cut too: what the master writes from now on (its
    // announcement, the grant) must not wait in the frozen replica's socket
    // buffer, to be applied when it thaws before it sees the master gone.
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut m)
        .unwrap();
    config_set(&mut m, "redlock.max-ttl-ms", "5000");
    // Read before the request: the lease ends no earlier than this + its ttl.
    let granted = Instant::now();
    let a = acquire_result(&mut m, "L", "owner-a", 5_000);
    drop(m);
    master.kill();
    replica.resume();
    let mut r = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    match a {
        Err(e) => assert_eq!(e.code(), Some("NOSYNC"), "{e}"),
        Ok(None) => panic!("L was held before"),
        Ok(Some(_)) => {
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
                gap >= Duration::from_millis(5_000),
                "B got L {gap:?} after A's 5 s lease was granted: two holders"
            );
        }
    }
}
