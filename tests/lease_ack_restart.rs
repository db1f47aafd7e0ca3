//! The rule of `core/lease_ack_rule.rs` across a restart of the master: a
//! master restarted with a larger `redlock.max-ttl-ms` in its configuration
//! (not `CONFIG SET`) while its replica lags. A lease of the new length
//! granted before the replica learned it, the master dies, the replica is
//! promoted: it must not grant the lock while that lease may run. The
//! master starts from the length its replicas acknowledged in the run
//! before (`redlock-lease-acked`, `LeaseAck::at_load`), so the new length
//! waits (`NOSYNC`); starting from its longest lease, it granted at once
//! and the promoted replica granted the lock 1.04 s into the 5 s lease.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn a_master_restarted_with_a_larger_max_ttl_keeps_one_holder_after_a_promotion() {
    let mut master = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let replica = start_replica(
        &master,
        Node::builder()
            .config("redlock.sync-replicas", "0")
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", "1000"),
    );
    wait_replicated(&mut master.connection());
    let mut r = replica.connection();
    wait_until(Duration::from_secs(20), "the replica learned 1 s", || {
        redlock_info(&mut r, "longest_lease_ms") >= 1_000
    });
    drop(r);

    // The replica lags (frozen); the master restarts with leases up to 5 s.
    replica.pause();
    master.restart_with(&[("redlock.max-ttl-ms", "5000")]);
    let mut m = master.connection();
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
