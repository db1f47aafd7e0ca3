//! Issue 35 item 2, found by its review: a replica refuses ACQUIRE, EXTEND and FENCE
//! whatever `replica-read-only` says, because a lock changed there "would
//! exist on no master". RELEASE still runs on a writable replica: it frees
//! the lock there while the master holds it (the replica's `INSPECT` and
//! `WAIT` say free, `DEBUG DIGEST` differs from the master's), and nothing
//! from the master puts it back until the key's next effect. Now:
//! `READONLY`, as for the other lock writes, and nothing changed.

mod common;

use common::*;

#[test]
fn a_writable_replica_refuses_release_too() {
    let master = Node::builder()
        .config("repl-diskless-sync-delay", "0")
        .start();
    let mut m = master.connection();
    let replica = start_replica(&master, Node::builder().config("replica-read-only", "no"));
    let mut r = replica.connection();
    assert_eq!(acquire(&mut m, "k", "alice", 30_000), Some(1));
    wait_replicated(&mut m);
    let before = digest(&mut r);
    assert_eq!(before, digest(&mut m));

    let reply: redis::RedisResult<i64> = redis::cmd("REDLOCK.RELEASE")
        .arg("k")
        .arg("alice")
        .query(&mut r);
    let replica_view = inspect(&mut r, "k").unwrap();
    let master_view = inspect(&mut m, "k").unwrap();
    assert!(master_view.held);
    assert!(
        matches!(&reply, Err(e) if e.code() == Some("READONLY")),
        "RELEASE on a replica answered {reply:?}; replica now {replica_view:?}, master {master_view:?}"
    );
    assert!(replica_view.held, "{replica_view:?}");
    assert_eq!(digest(&mut r), before);
}
