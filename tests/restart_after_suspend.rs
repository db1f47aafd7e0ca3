//! Issue 35 item 1, found by its review: leases run on the monotonic clock (DESIGN §2,
//! `host/clock.rs::mono_now`, `std::time::Instant` = `CLOCK_MONOTONIC`),
//! but a record read back on the same boot is timed by `CLOCK_BOOTTIME`
//! (`host/clock.rs::boot_now`). The two differ by the time the machine was
//! suspended: a suspend stops `CLOCK_MONOTONIC` and moves `CLOCK_BOOTTIME`
//! and the wall clock on by its length. A node that keeps running across a
//! suspend keeps its leases for their monotonic time left (so does a holder
//! on that host: the client's validity is `Instant`-timed too); a node
//! restarted after the suspend counts the suspend and frees them. The
//! restart then grants a lock whose lease, as the running node and its
//! same-host holder count it, still runs. Before the boot stamp the lease
//! came back for at least the time it had left when written.
//!
//! A suspend cannot be made here, so the restarted server is shown the
//! clocks a suspend leaves behind: its `CLOCK_BOOTTIME` 30 s ahead (a time
//! namespace with a boot-time offset, with `/proc` hidden so that the module
//! cannot read the offset back: `/proc/self/timens_offsets` missing reads as
//! "no offset") and its wall clock 30 s ahead (the test build's
//! `REDLOCK_TEST_WALL_OFFSET_MS`), while its monotonic clock, like a
//! suspended machine's, moved on by well under a second.
//!
//! Needs `unshare -m -T` and `mount` (root, or the capabilities); the tests
//! say so and do nothing elsewhere. The first test failed before the stamp
//! moved to `CLOCK_MONOTONIC` (the lease came back free). The second: a
//! restart inside a time namespace whose monotonic (and boot) clock reads
//! 30 s ahead, with the offset visible: the module takes it off and reads
//! the machine's clock (without that the lease would come back free).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use common::*;

/// The server, started through a shell that can move its boot clock.
const WRAPPER: &str = r#"#!/bin/sh
case "$REVIEW_CLOCKS" in
suspend)
  exec unshare -m -T --boottime "$REVIEW_BOOT_AHEAD_S" sh -c '
    mount -t tmpfs none /proc &&
    mkdir -p /proc/sys/kernel/random &&
    printf "%s\n" "$REVIEW_BOOT_ID" > /proc/sys/kernel/random/boot_id &&
    exec "$REVIEW_SERVER" "$@"' review-suspend "$@" ;;
namespace)
  exec unshare -T --monotonic "$REVIEW_BOOT_AHEAD_S" --boottime "$REVIEW_BOOT_AHEAD_S" "$REVIEW_SERVER" "$@" ;;
*)
  exec "$REVIEW_SERVER" "$@" ;;
esac
"#;

fn namespaces_allowed() -> bool {
    Command::new("unshare")
        .args(["-m", "-T", "--boottime", "1", "sh", "-c"])
        .arg("mount -t tmpfs none /proc")
        .status()
        .is_ok_and(|s| s.success())
}

fn wrapper(test: &str) -> PathBuf {
    // Cargo's scratch folder for integration tests (under target/).
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("suspend-server-{test}-{}.sh", std::process::id()));
    std::fs::write(&path, WRAPPER).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn durable_node(test: &str) -> Node {
    let server = redlock_testkit::server_bin();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    Node::builder()
        .server(wrapper(test))
        .env("REVIEW_SERVER", server.to_str().unwrap())
        .env("REVIEW_BOOT_ID", boot_id.trim())
        .env("REVIEW_CLOCKS", "")
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start()
}

/// `SHUTDOWN`, then a start whose boot clock reads `ahead_s` seconds ahead
/// the way `clocks` says, and whose wall clock reads `wall_ahead_ms` ahead.
fn restart_ahead(node: &mut Node, clocks: &str, ahead_s: u64, wall_ahead_ms: u64) {
    let mut con = node.connection();
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut con);
    node.set_env("REVIEW_CLOCKS", clocks);
    node.set_env("REVIEW_BOOT_AHEAD_S", &ahead_s.to_string());
    node.set_env("REDLOCK_TEST_WALL_OFFSET_MS", &wall_ahead_ms.to_string());
    node.restart();
}

#[test]
fn a_restart_after_a_suspend_keeps_the_lease_the_running_node_would_keep() {
    if !namespaces_allowed() {
        eprintln!("skipped: unshare -m -T with a tmpfs /proc is not permitted here");
        return;
    }
    let mut node = durable_node("suspend");
    let mut con = node.connection();
    // Read before the request: the lease ends no earlier than this + its ttl.
    let granted = Instant::now();
    assert_eq!(acquire(&mut con, "k", "alice", 20_000), Some(1));
    drop(con);
    // A 30 s suspend, then the node restarts (an AOF-always restart is
    // exempt from the restart guard; the test nodes have it off anyway).
    restart_ahead(&mut node, "suspend", 30, 30_000);
    let mut con = node.connection();
    let v = inspect(&mut con, "k").unwrap();
    // The grant happened before its reply arrived: allow for that delay on a
    // loaded machine (the hole freed the lease, or kept 30 s less of it).
    let least = 20_000 - granted.elapsed().as_millis() as i64 - 1_000;
    assert!(
        v.held && v.pttl >= least,
        "{v:?}: the running node (CLOCK_MONOTONIC) would still hold it for about {least} ms, and a holder on this host counts the same"
    );
    assert_eq!(
        acquire(&mut con, "k", "bob", 1_000),
        None,
        "another owner got the lock {:?} into a 20 s lease",
        granted.elapsed()
    );
}

/// The server restarted inside a time namespace whose monotonic and boot
/// clocks are 30 s ahead, with the offsets readable: the module takes the
/// monotonic one off and reads the machine's clock, so the lease keeps what is left of it (the
/// wall clock 30 s ahead too: only the boot clock can keep it).
#[test]
fn a_restart_inside_a_time_namespace_reads_the_hosts_boot_clock() {
    if !namespaces_allowed() {
        eprintln!("skipped: unshare -T is not permitted here");
        return;
    }
    let mut node = durable_node("namespace");
    let mut con = node.connection();
    // Read before the request: the lease ends no earlier than this + its ttl.
    let granted = Instant::now();
    assert_eq!(acquire(&mut con, "k", "alice", 20_000), Some(1));
    drop(con);
    restart_ahead(&mut node, "namespace", 30, 30_000);
    let mut con = node.connection();
    let v = inspect(&mut con, "k").unwrap();
    // The grant happened before its reply arrived: allow for that delay on a
    // loaded machine (the hole freed the lease, or kept 30 s less of it).
    let least = 20_000 - granted.elapsed().as_millis() as i64 - 1_000;
    assert!(v.held && v.pttl >= least && v.pttl <= 20_000, "{v:?}");
    assert_eq!(acquire(&mut con, "k", "bob", 1_000), None);
}
