//! ACQUIRE against a hand-off reservation (DESIGN.md §6, `WAIT … QUEUE`):
//! the reservation is an input of the pure acquire decision
//! (`LockState::acquire_reserved`), computed before the key is opened.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Reserves the free lock `key` for `owner` on `node`: `holder` takes the
/// lock, `owner` queues behind it with `WAIT … QUEUE`, `holder` releases
/// and `owner` is woken. The reservation then lasts `redlock.handoff-ms`.
fn reserve(node: &Node, con: &mut redis::Connection, key: &str, holder: &str, owner: &str) {
    assert!(acquire(con, key, holder, 30_000).is_some());
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    let ticket = secs * 1_000_000 + micros;
    let mut waiter = node.connection();
    let (key_owned, owner_owned) = (key.to_string(), owner.to_string());
    let woken = std::thread::spawn(move || -> i64 {
        redis::cmd("REDLOCK.WAIT")
            .arg(&key_owned)
            .arg(0)
            .arg("QUEUE")
            .arg(&owner_owned)
            .arg(ticket)
            .query(&mut waiter)
            .unwrap()
    });
    wait_until(Duration::from_secs(5), "queued waiter", || {
        redlock_info(con, "waiting_clients") == 1
    });
    assert_eq!(release(con, key, holder), 1);
    assert_eq!(woken.join().unwrap(), 1);
}

/// A key of another type answers WRONGTYPE (DESIGN §2) even while a
/// reservation for another owner is live; before the reservation became
/// an input of the decision, that ACQUIRE got nil (counted as busy).
#[test]
fn a_key_of_another_type_is_wrongtype_while_reserved_for_another() {
    let node = Node::builder().config("redlock.handoff-ms", "5000").start();
    let mut con = node.connection();
    reserve(&node, &mut con, "k", "holder", "first");
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("x").query(&mut con).unwrap();
    let busy = redlock_info(&mut con, "acquire_busy");
    let err = acquire_result(&mut con, "k", "other", 1_000).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    assert_eq!(redlock_info(&mut con, "acquire_busy"), busy);
    let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, "x");
}

/// An ACQUIRE refused by the reservation opens the key but changes
/// nothing: no record on a missing key, no touch of a `WATCH`, no
/// replication; a refused ACQUIRE of the reserved owner (bad ttl) leaves
/// the reservation to it.
#[test]
fn a_refused_acquire_while_reserved_changes_nothing() {
    let node = Node::builder().config("redlock.handoff-ms", "5000").start();
    let mut con = node.connection();
    reserve(&node, &mut con, "k", "holder", "first");
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut con).unwrap();
    let mut watcher = node.connection();
    let _: () = redis::cmd("WATCH").arg("k").query(&mut watcher).unwrap();
    assert_eq!(acquire(&mut con, "k", "other", 1_000), None);
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut con).unwrap();
    assert_eq!(exists, 0, "a refused ACQUIRE created the record");
    let exec: Option<Vec<String>> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("w")
        .arg("1")
        .query(&mut watcher)
        .unwrap();
    assert!(exec.is_some(), "a refused ACQUIRE touched the WATCHed key");
    let err = acquire_result(&mut con, "k", "first", 0).unwrap_err();
    assert!(format!("{err}").contains("ttl-ms"), "{err}");
    assert_eq!(acquire(&mut con, "k", "other", 1_000), None);
    // Counted from the reclaimed floor: a fresh key's first token.
    assert_eq!(acquire(&mut con, "k", "first", 1_000), Some(1));
}

/// The holder of a live lease renews it with ACQUIRE (DESIGN §2: held by
/// the same owner, lease renewed, same token), whatever reservation the
/// node's queue still holds for another owner. A lock can be held under a
/// live reservation when a held record arrives by a command that is not an
/// ACQUIRE (here `RENAME`; also `RESTORE`, `COPY`, `MOVE`, `SWAPDB`).
/// Failed before the decision let the holder renew under a reservation
/// (4234ddb and ed30e67): the renewal got nil.
#[test]
fn the_holder_renews_under_a_reservation_for_another() {
    let node = Node::builder().config("redlock.handoff-ms", "5000").start();
    let mut con = node.connection();
    reserve(&node, &mut con, "k", "holder", "first");
    assert_eq!(acquire(&mut con, "src", "held", 30_000), Some(1));
    let _: () = redis::cmd("RENAME")
        .arg("src")
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert!(inspect(&mut con, "k").unwrap().held);
    assert_eq!(extend(&mut con, "k", "held", 30_000), 1);
    assert_eq!(
        acquire(&mut con, "k", "held", 30_000),
        Some(1),
        "the holder's renewal was refused"
    );
}

/// Issue 35 item 4: an ACQUIRE of the reserved owner that gets WRONGTYPE
/// (a key of another type under the reservation) changes nothing, the
/// reservation included: once the key is a free lock again, the reserved
/// owner still goes first. Before, reading the reservation ended it, so the
/// refused ACQUIRE gave it away and another owner got the lock.
#[test]
fn a_reserved_owners_acquire_that_gets_wrongtype_keeps_its_reservation() {
    let node = Node::builder().config("redlock.handoff-ms", "5000").start();
    let mut con = node.connection();
    reserve(&node, &mut con, "k", "holder", "first");
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("x").query(&mut con).unwrap();
    let err = acquire_result(&mut con, "k", "first", 1_000).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut con).unwrap();
    assert_eq!(
        acquire(&mut con, "k", "other", 1_000),
        None,
        "the refused ACQUIRE gave the reservation away"
    );
    assert_eq!(acquire(&mut con, "k", "first", 1_000), Some(1));
    // Taken by its owner: over.
    assert_eq!(release(&mut con, "k", "first"), 1);
    assert_eq!(acquire(&mut con, "k", "other", 1_000), Some(2));
}

/// Issue 35 item 4: on a replica, a queued waiter woken by its master's
/// release gets the lock from the master; the master's grant, arriving as
/// `REDLOCK.APPLY`, ends the replica's reservation. So once that holder
/// releases, a plain `WAIT` on the replica is answered at once. Before, the
/// reservation lived on for `redlock.handoff-ms` (the owner's ACQUIRE never
/// reaches a replica), and the `WAIT` got 0 at its timeout.
#[test]
fn the_masters_grant_ends_the_reservation_on_a_replica() {
    let master = Node::builder()
        .config("repl-diskless-sync-delay", "0")
        .start();
    let mut m = master.connection();
    let replica = start_replica(
        &master,
        Node::builder().config("redlock.handoff-ms", "5000"),
    );
    let mut r = replica.connection();
    assert_eq!(acquire(&mut m, "k", "holder", 30_000), Some(1));
    wait_replicated(&mut m);
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut r).unwrap();
    let ticket = secs * 1_000_000 + micros;
    let mut waiter = replica.connection();
    let woken = std::thread::spawn(move || -> i64 {
        redis::cmd("REDLOCK.WAIT")
            .arg("k")
            .arg(0)
            .arg("QUEUE")
            .arg("first")
            .arg(ticket)
            .query(&mut waiter)
            .unwrap()
    });
    wait_until(Duration::from_secs(5), "queued waiter", || {
        redlock_info(&mut r, "waiting_clients") == 1
    });
    assert_eq!(release(&mut m, "k", "holder"), 1);
    assert_eq!(woken.join().unwrap(), 1);
    // The woken waiter takes the lock on the master, holds it briefly and
    // releases it; both effects reach the replica.
    assert_eq!(acquire(&mut m, "k", "first", 30_000), Some(2));
    wait_replicated(&mut m);
    assert_eq!(
        redlock_info(&mut r, "wait_keys"),
        0,
        "the reservation outlived the grant"
    );
    assert_eq!(release(&mut m, "k", "first"), 1);
    wait_replicated(&mut m);
    let asked = Instant::now();
    let free: i64 = redis::cmd("REDLOCK.WAIT")
        .arg("k")
        .arg(1_000)
        .query(&mut r)
        .unwrap();
    assert_eq!(
        free,
        1,
        "a plain WAIT on the replica after {:?}",
        asked.elapsed()
    );
    assert!(
        asked.elapsed() < Duration::from_millis(900),
        "{:?}",
        asked.elapsed()
    );
}
