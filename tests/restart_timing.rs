//! Issue 35 item 1: a lease read back on the boot that wrote it ends at its
//! real end (src/core/lease_time.rs). A durable restart after a lease ended
//! no longer brings it back; one while it runs keeps what is left of it and
//! no more; a `DUMP` restored later on this boot keeps the dumped lease's
//! end. On another boot (the test build's fake boot id) the rule before the
//! boot stamp holds: never less than the time the lease had left when
//! written.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// A boot id that is not this machine's (the test build's
/// `REDLOCK_TEST_BOOT_ID` / `REDLOCK.TESTHOOK BOOT-ID`).
const OTHER_BOOT: &str = "00000000-0000-4000-8000-000000000035";

/// `SHUTDOWN` (the AOF is flushed and fsynced; no RDB is saved: the test
/// nodes have `save ""`), then a start on the same files.
fn shutdown_and_restart(node: &mut Node) {
    let mut con = node.connection();
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut con);
    node.restart();
}

fn sleep_until(at: Instant) {
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
}

/// The acceptance test, for every way a lease reaches disk: granted
/// for 2 s, written (the AOF with `appendfsync always`, a rewritten AOF with
/// and without RDB preamble, an RDB), 3 s later `SHUTDOWN` and a restart:
/// free at once, and another owner gets the next token. Before the boot
/// stamp every one of them was held again for about 2 s, as it still is
/// when the restart runs on another boot.
#[test]
fn a_lease_that_ended_while_the_node_was_down_comes_back_free() {
    // The four cases run side by side (each has its own node).
    std::thread::scope(|s| {
        for case in ["aof", "aof rewritten", "aof rewritten with preamble", "rdb"] {
            s.spawn(move || lease_ended_while_down(case));
        }
    });
}

fn lease_ended_while_down(case: &str) {
    let builder = match case {
        "rdb" => Node::builder(),
        _ => Node::builder()
            .config("appendonly", "yes")
            .config("appendfsync", "always")
            .config(
                "aof-use-rdb-preamble",
                if case.ends_with("preamble") {
                    "yes"
                } else {
                    "no"
                },
            ),
    };
    let mut node = builder.start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 2_000), Some(1), "{case}");
    let granted = Instant::now();
    write_out(case, &mut con);
    drop(con);
    sleep_until(granted + Duration::from_millis(3_000));

    // This boot: the lease ended a second ago.
    shutdown_and_restart(&mut node);
    let mut con = node.connection();
    assert_eq!(
        inspect(&mut con, "k"),
        Some(View {
            held: false,
            pttl: -1,
            token: 1
        }),
        "{case}: an expired lease came back"
    );
    assert_eq!(acquire(&mut con, "k", "bob", 2_000), Some(2), "{case}");
    let granted = Instant::now();
    write_out(case, &mut con);
    drop(con);
    sleep_until(granted + Duration::from_millis(3_000));

    // Another boot: nothing says how long the node was down, so the
    // lease keeps the time it had left when written.
    node.set_env("REDLOCK_TEST_BOOT_ID", OTHER_BOOT);
    shutdown_and_restart(&mut node);
    let mut con = node.connection();
    let v = inspect(&mut con, "k").unwrap();
    assert!(
        v.held && v.token == 2 && v.pttl > 1_000 && v.pttl <= 2_000,
        "{case}, another boot: {v:?}"
    );
}

/// Puts the node's state on disk the way `case` says: the AOF as it is
/// (`appendfsync always`), a rewritten AOF, or an RDB.
fn write_out(case: &str, con: &mut redis::Connection) {
    match case {
        "rdb" => {
            let _: String = redis::cmd("SAVE").query(con).unwrap();
        }
        "aof" => {}
        _ => {
            let _: String = redis::cmd("BGREWRITEAOF").query(con).unwrap();
            wait_for_no_child(con);
        }
    }
}

/// A lease still running at a durable restart keeps what is left of it, to
/// the millisecond, and ends when it would have ended without the restart:
/// another owner is refused until then and gets the lock then.
#[test]
fn a_same_boot_restart_keeps_a_running_lease_for_what_is_left_of_it() {
    let mut node = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut con = node.connection();
    let asked = Instant::now();
    assert_eq!(acquire(&mut con, "k", "alice", 6_000), Some(1));
    let granted = Instant::now();
    drop(con);
    sleep_until(granted + Duration::from_millis(1_500));
    shutdown_and_restart(&mut node);
    let mut con = node.connection();
    let before = Instant::now();
    let v = inspect(&mut con, "k").unwrap();
    let most = 6_000 - (before - granted).as_millis() as i64;
    let least = 6_000 - asked.elapsed().as_millis() as i64;
    assert!(
        v.held && v.token == 1 && v.pttl >= least - 3 && v.pttl <= most + 3,
        "{v:?}: between {least} and {most} ms expected"
    );
    assert_eq!(acquire(&mut con, "k", "bob", 1_000), None);
    // Another owner gets it once the lease is over, not before.
    let got = loop {
        let sent = Instant::now();
        if acquire(&mut con, "k", "bob", 1_000).is_some() {
            break sent;
        }
        assert!(asked.elapsed() < Duration::from_secs(20), "never freed");
        std::thread::sleep(Duration::from_millis(10));
    };
    let freed_after = (got - asked).as_millis() as i64;
    assert!(
        freed_after >= 6_000 - 3,
        "freed {freed_after} ms after the grant"
    );
    assert!(
        freed_after <= 6_000 + 1_500,
        "held {freed_after} ms after a grant of 6 s (a loaded machine may add a little)"
    );
}

/// A `DUMP` restored later on this boot keeps the dumped lease's end, live
/// and after a restart from the AOF (which holds the `RESTORE` as it came):
/// a lease that ended before the `RESTORE` is free, a running one keeps
/// what is left of it. On another boot, a payload keeps the time it had
/// left when dumped.
#[test]
fn a_dump_restored_later_keeps_the_end_of_the_dumped_lease() {
    let source = Node::start();
    let mut s = source.connection();
    let mut target = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut t = target.connection();
    assert_eq!(acquire(&mut s, "ended", "alice", 2_000), Some(1));
    let ended_at = Instant::now() + Duration::from_millis(2_000);
    let ended: Vec<u8> = redis::cmd("DUMP").arg("ended").query(&mut s).unwrap();
    assert_eq!(acquire(&mut s, "running", "carol", 8_000), Some(1));
    let granted = Instant::now();
    let running: Vec<u8> = redis::cmd("DUMP").arg("running").query(&mut s).unwrap();
    sleep_until(ended_at + Duration::from_millis(1_000));

    let restore = |con: &mut redis::Connection, key: &str, payload: &[u8]| {
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(payload)
            .arg("REPLACE")
            .query(con)
            .unwrap_or_else(|e| panic!("RESTORE {key}: {e}"));
    };
    let boot_id = |con: &mut redis::Connection, id: &str| {
        let _: () = redis::cmd("REDLOCK.TESTHOOK")
            .arg("BOOT-ID")
            .arg(id)
            .query(con)
            .unwrap();
    };
    // Another boot: the time it had left when dumped (about 2 s).
    boot_id(&mut t, OTHER_BOOT);
    restore(&mut t, "elsewhere", &ended);
    let v = inspect(&mut t, "elsewhere").unwrap();
    assert!(v.held && v.pttl > 1_000 && v.pttl <= 2_000, "{v:?}");
    boot_id(&mut t, "REAL");

    restore(&mut t, "ended", &ended);
    restore(&mut t, "running", &running);
    let check = |con: &mut redis::Connection, what: &str| {
        let free = inspect(con, "ended").unwrap();
        assert_eq!((free.held, free.token), (false, 1), "{what}: {free:?}");
        let before = Instant::now();
        let v = inspect(con, "running").unwrap();
        let most = 8_000 - (before - granted).as_millis() as i64 + 3;
        assert!(
            v.held && v.token == 1 && v.pttl <= most,
            "{what}: {v:?}, at most {most} ms expected"
        );
    };
    check(&mut t, "live");
    drop(t);
    shutdown_and_restart(&mut target);
    let mut t = target.connection();
    check(&mut t, "after a restart from the AOF");
    assert_eq!(acquire(&mut t, "ended", "bob", 1_000), Some(2));
    assert_eq!(acquire(&mut t, "running", "bob", 1_000), None);
}
