//! The module and the simulator share one list of mutants
//! (`src/core/mutant.rs`): every test hook that switches one must change
//! what the module does, so that no mutation check passes vacuously.

mod common;

use std::time::Duration;

use common::*;
use redlock_testkit::Node;

fn mutant(con: &mut redis::Connection, name: &str, on: u8) -> redis::RedisResult<()> {
    redis::cmd("REDLOCK.TESTHOOK")
        .arg("MUTANT")
        .arg(name)
        .arg(on)
        .query(con)
}

fn promotion_guard(con: &mut redis::Connection, on: u8) {
    let _: () = redis::cmd("REDLOCK.TESTHOOK")
        .arg("PROMOTION-GUARD")
        .arg(on)
        .query(con)
        .unwrap();
}

/// A replica of `master` whose own load window is over.
fn settled_replica(master: &Node) -> Node {
    let replica = start_replica(
        master,
        Node::builder()
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", "2000"),
    );
    let mut r = replica.connection();
    wait_until(Duration::from_secs(10), "load window end", || {
        info_field(&mut r, "redlock", "redlock_grace_active").as_deref() == Some("0")
    });
    replica
}

/// `PROMOTION-GUARD 0` is now the `no-promotion-guard` mutant: switching
/// that mutant off again brings the guard back (one switch, not two).
#[test]
fn the_promotion_guard_hook_and_its_mutant_are_one_switch() {
    let master = Node::builder().config("redlock.max-ttl-ms", "2000").start();
    let replica = settled_replica(&master);
    let mut r = replica.connection();
    promotion_guard(&mut r, 0);
    mutant(&mut r, "no-promotion-guard", 0).unwrap();
    promote(&mut r);
    let err = error_of(&mut r, &[b"REDLOCK.ACQUIRE", b"fresh", b"bob", b"1000"]);
    assert!(
        err.starts_with("GRACE node was promoted to master"),
        "{err}"
    );
}

/// `REDLOCK.TESTHOOK MUTANT skip-replication 1` is the same switch as
/// `SKIP-REPLICATION 1`: the lock's effect does not reach the replica (when
/// the list became shared, the mutant was accepted and did nothing).
#[test]
fn a_mutant_the_module_accepts_changes_what_the_module_does() {
    let master = Node::builder().start();
    let replica = start_replica(&master, Node::builder());
    let mut m = master.connection();
    let mut r = replica.connection();
    mutant(&mut m, "skip-replication", 1).expect("MUTANT skip-replication 1");
    assert_eq!(acquire(&mut m, "k", "alice", 30_000), Some(1));
    wait_replicated(&mut m);
    assert!(
        inspect(&mut r, "k").is_none(),
        "MUTANT skip-replication 1 was accepted, yet the lock's effect reached the replica"
    );
}
