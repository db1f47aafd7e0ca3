//! Issue 35 item 1, found by its review (same-boot restarts exact): a record whose
//! boot stamp is not this boot's is read by the older rule ("the time it had
//! left when written", counted from the load) at EVERY load of this boot, as
//! long as the file still holds that record. Nothing re-stamps it: an AOF
//! is not rewritten at SHUTDOWN, so the first restart after a reboot (or
//! a `RESTORE` of a payload from another boot or of encoding 2) leaves a
//! lease that comes back held, for its whole time left, at every later
//! restart of the same boot, long after it ended on this boot. That is the
//! issue's revived lease ("held again for its whole time left") on a
//! same-boot restart.
//!
//! Expected here (the rule for a same-boot restart): free. Before
//! the fix (src/host/restamp.rs): held again for about 2 s, another owner
//! refused.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// A boot id that is not this machine's (the test build's
/// `REDLOCK_TEST_BOOT_ID` / `REDLOCK.TESTHOOK BOOT-ID`).
const OTHER_BOOT: &str = "00000000-0000-4000-8000-0000000000b2";

fn shutdown_and_restart(node: &mut Node) {
    let mut con = node.connection();
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut con);
    node.restart();
}

fn durable() -> redlock_testkit::NodeBuilder {
    Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
}

/// Granted for 2 s on one boot; the machine reboots (the fake boot id);
/// the first restart of the new boot keeps the 2 s (the rule across a
/// reboot), and they end on this boot. A second restart of the same new
/// boot, 3 s later, must find the lock free.
#[test]
fn a_lease_from_before_a_reboot_is_not_revived_at_every_restart_of_the_new_boot() {
    let mut node = durable().start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 2_000), Some(1));
    drop(con);
    std::thread::sleep(Duration::from_millis(3_000));

    // The reboot: the first start of the new boot.
    node.set_env("REDLOCK_TEST_BOOT_ID", OTHER_BOOT);
    shutdown_and_restart(&mut node);
    let mut con = node.connection();
    let v = inspect(&mut con, "k").unwrap();
    assert!(
        v.held && v.pttl <= 2_000,
        "first start after the reboot: {v:?}"
    );
    let loaded = Instant::now();
    // Timed by the rule across a reboot: written again with this boot's
    // stamp once the load ended.
    let deadline = Instant::now() + Duration::from_secs(2);
    while info_field(&mut con, "redlock", "redlock_leases_restamped").as_deref() != Some("1") {
        assert!(Instant::now() < deadline, "the lease was not written again");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The lease ends on this boot.
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(!inspect(&mut con, "k").unwrap().held);
    drop(con);

    // A restart on the SAME (new) boot, 3 s after the lease ended here.
    shutdown_and_restart(&mut node);
    let mut con = node.connection();
    let v = inspect(&mut con, "k").unwrap();
    assert!(
        !v.held,
        "a lease that ended {:?} ago on this boot is held again after a same-boot restart: {v:?}",
        loaded
            .elapsed()
            .saturating_sub(Duration::from_millis(2_000))
    );
    assert_eq!(acquire(&mut con, "k", "bob", 1_000), Some(2));
}

/// A `DUMP` from another boot (another host: `MIGRATE` in a cluster), or of
/// encoding 2, restored into a node with the AOF on: its lease runs for the
/// time it had left when dumped, and ends. The AOF holds the `RESTORE` as it
/// came (the payload's stamp, not this node's), so every restart of this
/// boot brings the lease back for that whole time again.
#[test]
fn a_restored_lease_from_another_boot_is_not_revived_at_a_same_boot_restart() {
    let source = Node::builder()
        .env("REDLOCK_TEST_BOOT_ID", OTHER_BOOT)
        .start();
    let mut s = source.connection();
    assert_eq!(acquire(&mut s, "k", "alice", 2_000), Some(1));
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut s).unwrap();

    let mut target = durable().start();
    let mut t = target.connection();
    let _: () = redis::cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(payload)
        .query(&mut t)
        .unwrap();
    let v = inspect(&mut t, "k").unwrap();
    assert!(v.held && v.pttl <= 2_000, "restored: {v:?}");
    std::thread::sleep(Duration::from_millis(3_000));
    assert!(!inspect(&mut t, "k").unwrap().held, "over on this node");
    drop(t);

    shutdown_and_restart(&mut target);
    let mut t = target.connection();
    let v = inspect(&mut t, "k").unwrap();
    assert!(
        !v.held,
        "a restored lease that ended a second ago on this boot is held again after a same-boot restart: {v:?}"
    );
    assert_eq!(acquire(&mut t, "k", "bob", 1_000), Some(2));
}

/// A `RESTORE` of an other-boot lease and a `CLIENT PAUSE … WRITE` in one
/// pipeline: the pass that writes the lease again runs from a 0 ms timer,
/// at the next turn of the event loop, while the writes are paused. Redis
/// asserts that nothing is propagated while clients are paused (7.0
/// `propagateNow`: "the dataset should be fixed during client pause,
/// otherwise data may be lost during a failover"), as the reclaim sweep
/// respects (`reclaim::may_sweep`). Expected: the server keeps running, and
/// the lease is written again once the pause ends.
#[test]
fn a_restamp_pass_during_a_client_pause_waits_for_it() {
    let source = Node::builder()
        .env("REDLOCK_TEST_BOOT_ID", OTHER_BOOT)
        .start();
    let mut s = source.connection();
    assert_eq!(acquire(&mut s, "k", "alice", 20_000), Some(1));
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut s).unwrap();

    let target = durable().start();
    let mut t = target.connection();
    let replies: redis::RedisResult<((), ())> = redis::pipe()
        .cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(payload)
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_000)
        .arg("WRITE")
        .query(&mut t);
    assert!(
        replies.is_ok(),
        "{replies:?}; the server's log says:\n{}",
        std::fs::read_to_string(target.dir().join("redis.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("ASSERTION") || l.contains("==> ") || l.contains("crashed by"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // While paused: reads still answer, so the server must be up.
    let mut probe = target.connection();
    let v = inspect(&mut probe, "k");
    assert!(
        v.as_ref().is_some_and(|v| v.held),
        "the server did not survive the pass during the pause: {v:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let written = info_field(&mut probe, "redlock", "redlock_leases_restamped");
        if written.as_deref().is_some_and(|w| w != "0") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease was never written again after the pause: {written:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `restamp-skipped` mutant (no lease written again after a load that
/// timed it by the rule across a reboot) brings the revival back: the
/// lease from before the reboot is held again at a later restart of the
/// new boot, after it ended there, and another owner is refused.
#[test]
fn the_restamp_skipped_mutant_revives_the_lease() {
    let mut node = durable()
        .env("REDLOCK_TEST_MUTANTS", "restamp-skipped")
        .start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 2_000), Some(1));
    drop(con);
    std::thread::sleep(Duration::from_millis(3_000));
    node.set_env("REDLOCK_TEST_BOOT_ID", OTHER_BOOT);
    shutdown_and_restart(&mut node);
    let mut con = node.connection();
    assert!(inspect(&mut con, "k").unwrap().held);
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(!inspect(&mut con, "k").unwrap().held);
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_leases_restamped").as_deref(),
        Some("0")
    );
    drop(con);
    shutdown_and_restart(&mut node);
    let mut con = node.connection();
    let v = inspect(&mut con, "k").unwrap();
    assert!(v.held && v.pttl > 1_000, "{v:?}");
    assert_eq!(acquire(&mut con, "k", "bob", 1_000), None);
}
