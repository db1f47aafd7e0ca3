//! A replica promoted to master starts the restart guard: it may have
//! missed its old master's last grants, exactly like a node restarted
//! without its data.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn replica_with_guard(master: &Node, max_ttl: &str) -> Node {
    let replica = Node::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", max_ttl)
        .start();
    let mut r = replica.connection();
    wait_until(Duration::from_secs(20), "replica link up", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    // Loaded long ago: its own load window is over.
    wait_until(Duration::from_secs(10), "load window end", || {
        info_field(&mut r, "redlock", "redlock_grace_active").as_deref() == Some("0")
    });
    replica
}

fn promote(con: &mut redis::Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(con)
        .unwrap();
}

#[test]
fn a_promoted_replica_refuses_new_locks_for_the_guard_window() {
    let master = Node::builder()
        .config("repl-diskless-sync-delay", "0")
        .start();
    let mut m = master.connection();
    let replica = replica_with_guard(&master, "2000");
    let mut r = replica.connection();
    assert_eq!(acquire(&mut m, "held", "alice", 1_500), Some(1));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);

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
    let replica = Node::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .config("redlock.restart-grace-ms", "1500")
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut r = replica.connection();
    wait_until(Duration::from_secs(20), "replica link up", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    promote(&mut r);
    let err = error_of(&mut r, &[b"REDLOCK.ACQUIRE", b"k", b"bob", b"1000"]);
    assert!(err.starts_with("GRACE"), "{err}");
}

/// The check above fails when the promotion guard is off (the test build's
/// switch): the promoted replica then grants at once.
#[test]
fn without_the_promotion_guard_a_promoted_replica_grants_at_once() {
    let master = Node::start();
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
