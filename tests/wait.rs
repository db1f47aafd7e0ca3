//! `REDLOCK.WAIT key timeout-ms`: each rule of DESIGN.md section 6.

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;

/// Starts `REDLOCK.WAIT key timeout` on a connection of its own; returns
/// its reply and how long it took.
fn spawn_wait(node: &Node, key: &str, timeout_ms: u64) -> JoinHandle<(i64, Duration)> {
    let mut con = node.connection();
    let key = key.to_string();
    std::thread::spawn(move || {
        let started = Instant::now();
        let reply: i64 = redis::cmd("REDLOCK.WAIT")
            .arg(&key)
            .arg(timeout_ms)
            .query(&mut con)
            .unwrap();
        (reply, started.elapsed())
    })
}

fn wait_now(con: &mut redis::Connection, key: &str, timeout_ms: u64) -> i64 {
    redis::cmd("REDLOCK.WAIT")
        .arg(key)
        .arg(timeout_ms)
        .query(con)
        .unwrap()
}

fn redlock_info(con: &mut redis::Connection, field: &str) -> u64 {
    info_field(con, "redlock", &format!("redlock_{field}"))
        .unwrap_or_else(|| panic!("INFO redlock has no {field}"))
        .parse()
        .unwrap()
}

/// Waits until `n` clients are blocked in WAIT on the node.
fn until_waiting(con: &mut redis::Connection, n: u64) {
    wait_until(Duration::from_secs(5), "blocked waiters", || {
        redlock_info(con, "waiting_clients") == n
    });
}

#[test]
fn free_locks_answer_at_once() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(wait_now(&mut con, "missing", 0), 1);
    assert_eq!(acquire(&mut con, "released", "a", 10_000), Some(1));
    assert_eq!(release(&mut con, "released", "a"), 1);
    assert_eq!(wait_now(&mut con, "released", 0), 1);
    assert_eq!(acquire(&mut con, "over", "a", 50), Some(1));
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(wait_now(&mut con, "over", 0), 1);
    assert_eq!(inspect(&mut con, "missing"), None, "WAIT created a key");
    assert_eq!(redlock_info(&mut con, "wait_free_at_once"), 3);
}

#[test]
fn a_release_wakes_the_waiter() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    let waiter = spawn_wait(&node, "k", 0);
    until_waiting(&mut con, 1);
    assert_eq!(redlock_info(&mut con, "wait_timers"), 1);
    let released = Instant::now();
    assert_eq!(release(&mut con, "k", "holder"), 1);
    let (reply, _) = waiter.join().unwrap();
    let woke_after = released.elapsed();
    assert_eq!(reply, 1);
    assert!(woke_after < Duration::from_millis(200), "{woke_after:?}");
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 0);
    assert_eq!(redlock_info(&mut con, "wait_timers"), 0);
    assert_eq!(redlock_info(&mut con, "wait_woken"), 1);
}

#[test]
fn the_end_of_the_lease_wakes_the_waiter_without_any_command() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 300), Some(1));
    let (reply, took) = spawn_wait(&node, "k", 0).join().unwrap();
    assert_eq!(reply, 1);
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(700),
        "{took:?}"
    );
}

#[test]
fn extend_and_renewal_move_the_wake_up() {
    let node = Node::start();
    let mut con = node.connection();
    // Longer: EXTEND at 100 ms to 600 ms wakes at about 700 ms.
    assert_eq!(acquire(&mut con, "longer", "holder", 300), Some(1));
    let waiter = spawn_wait(&node, "longer", 0);
    until_waiting(&mut con, 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(extend(&mut con, "longer", "holder", 600), 1);
    let (reply, took) = waiter.join().unwrap();
    assert_eq!(reply, 1);
    assert!(took >= Duration::from_millis(650), "{took:?}");

    // Shorter: a renewal by the holder to 100 ms wakes well before the
    // first deadline (5 s).
    assert_eq!(acquire(&mut con, "shorter", "holder", 5_000), Some(1));
    let waiter = spawn_wait(&node, "shorter", 0);
    until_waiting(&mut con, 1);
    assert_eq!(acquire(&mut con, "shorter", "holder", 100), Some(1));
    let (reply, took) = waiter.join().unwrap();
    assert_eq!(reply, 1);
    assert!(took < Duration::from_millis(1_000), "{took:?}");
}

#[test]
fn a_timeout_answers_zero_and_zero_means_no_limit() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 5_000), Some(1));
    let (reply, took) = spawn_wait(&node, "k", 200).join().unwrap();
    assert_eq!(reply, 0);
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_millis(2_000),
        "{took:?}"
    );
    assert_eq!(redlock_info(&mut con, "wait_timeouts"), 1);
    assert!(inspect(&mut con, "k").unwrap().held);

    // No limit: answered when the lease ends, not before.
    assert_eq!(acquire(&mut con, "k2", "holder", 1_000), Some(1));
    let (reply, took) = spawn_wait(&node, "k2", 0).join().unwrap();
    assert_eq!(reply, 1);
    assert!(took >= Duration::from_millis(900), "{took:?}");
}

#[test]
fn every_waiter_is_answered() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    let waiters: Vec<_> = (0..20u64)
        .map(|i| {
            let w = spawn_wait(&node, "k", 0);
            until_waiting(&mut con, i + 1);
            w
        })
        .collect();
    assert_eq!(
        redlock_info(&mut con, "wait_timers"),
        1,
        "one timer per key"
    );
    assert_eq!(release(&mut con, "k", "holder"), 1);
    for w in waiters {
        assert_eq!(w.join().unwrap().0, 1);
    }
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 0);
}

#[test]
fn a_waiter_that_gets_the_lock_first_keeps_the_others_waiting() {
    // Waiters are woken when the lock frees; the lock may be taken again
    // before a woken waiter runs, and then the others keep waiting.
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    let waiter = spawn_wait(&node, "k", 0);
    until_waiting(&mut con, 1);
    // Release and re-take in one transaction: the waiter never sees it free.
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("REDLOCK.RELEASE")
        .arg("k")
        .arg("holder")
        .cmd("REDLOCK.ACQUIRE")
        .arg("k")
        .arg("other")
        .arg(300)
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 1);
    let (reply, took) = waiter.join().unwrap();
    assert_eq!(reply, 1);
    assert!(took >= Duration::from_millis(300), "{took:?}");
}

#[test]
fn inside_multi_and_scripts_wait_answers_at_once() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "held", "holder", 30_000), Some(1));
    let (held, free): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("REDLOCK.WAIT")
        .arg("held")
        .arg(0)
        .cmd("REDLOCK.WAIT")
        .arg("free")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!((held, free), (0, 1));
    let from_script: i64 = redis::cmd("EVAL")
        .arg("return redis.call('REDLOCK.WAIT', KEYS[1], 0)")
        .arg(1)
        .arg("held")
        .query(&mut con)
        .unwrap();
    assert_eq!(from_script, 0);
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=waitlib\nredis.register_function('waitfor', function(keys) return redis.call('REDLOCK.WAIT', keys[1], 0) end)")
        .query(&mut con)
        .unwrap();
    let from_function: i64 = redis::cmd("FCALL")
        .arg("waitfor")
        .arg(1)
        .arg("held")
        .query(&mut con)
        .unwrap();
    assert_eq!(from_function, 0);
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 0);
}

#[test]
fn a_disconnected_waiter_leaves_nothing_behind() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", node.port())).unwrap();
    std::io::Write::write_all(&mut raw, b"REDLOCK.WAIT k 0\r\n").unwrap();
    until_waiting(&mut con, 1);
    assert_eq!(
        info_field(&mut con, "clients", "blocked_clients").as_deref(),
        Some("1")
    );
    assert_eq!(redlock_info(&mut con, "wait_timers"), 1);
    drop(raw);
    wait_until(Duration::from_secs(5), "waiter gone", || {
        info_field(&mut con, "clients", "blocked_clients").as_deref() == Some("0")
    });
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 0);
    assert_eq!(redlock_info(&mut con, "wait_timers"), 0);
    // The lock is untouched.
    assert!(inspect(&mut con, "k").unwrap().held);
}

#[test]
fn bad_input_and_wrong_types_are_refused_by_name() {
    let node = Node::start();
    let mut con = node.connection();
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut con).unwrap();
    let cases: &[(&[&[u8]], &str)] = &[
        (
            &[b"REDLOCK.WAIT", b"k"],
            "ERR wrong number of arguments for 'redlock.wait' command",
        ),
        (
            &[b"REDLOCK.WAIT", b"k", b"1", b"2"],
            "ERR wrong number of arguments",
        ),
        (
            &[b"REDLOCK.WAIT", b"k", b"soon"],
            "ERR invalid timeout-ms: not an integer",
        ),
        (
            &[b"REDLOCK.WAIT", b"k", b"-5"],
            "ERR invalid timeout-ms: must be between 0 and 86400000",
        ),
        (
            &[b"REDLOCK.WAIT", b"k", b"86400001"],
            "ERR invalid timeout-ms: must be between 0 and 86400000",
        ),
        (&[b"REDLOCK.WAIT", b"s", b"0"], "WRONGTYPE"),
    ];
    for (args, expected) in cases {
        let err = error_of(&mut con, args);
        assert!(err.starts_with(expected), "{args:?}: {err}");
    }
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 0);
    assert_eq!(inspect(&mut con, "k"), None);
}

#[test]
fn wait_is_not_replicated_and_changes_nothing() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    let offset =
        |con: &mut redis::Connection| info_field(con, "replication", "master_repl_offset").unwrap();
    let before = offset(&mut con);
    let digest_before = digest(&mut con);
    assert_eq!(wait_now(&mut con, "free", 0), 1);
    assert_eq!(wait_now(&mut con, "k", 100), 0);
    assert_eq!(offset(&mut con), before);
    assert_eq!(digest(&mut con), digest_before);
    assert_eq!(inspect(&mut con, "free"), None);
    assert_eq!(redlock_info(&mut con, "wait_calls"), 2);
}

#[test]
fn waiters_on_a_replica_wake_when_the_master_releases() {
    let master = Node::start();
    let mut m = master.connection();
    let replica = Node::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start();
    let mut r = replica.connection();
    wait_until(Duration::from_secs(20), "replica link up", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert_eq!(acquire(&mut m, "k", "holder", 30_000), Some(1));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let waiter = spawn_wait(&replica, "k", 0);
    until_waiting(&mut r, 1);
    assert_eq!(release(&mut m, "k", "holder"), 1);
    let (reply, _) = waiter.join().unwrap();
    assert_eq!(reply, 1);
}

/// Starts `REDLOCK.WAIT key timeout QUEUE owner ticket` on a connection of
/// its own.
fn spawn_queued(node: &Node, key: &str, owner: &str, ticket: u64) -> JoinHandle<(i64, Duration)> {
    let mut con = node.connection();
    let (key, owner) = (key.to_string(), owner.to_string());
    std::thread::spawn(move || {
        let started = Instant::now();
        let reply: i64 = redis::cmd("REDLOCK.WAIT")
            .arg(&key)
            .arg(0)
            .arg("QUEUE")
            .arg(&owner)
            .arg(ticket)
            .query(&mut con)
            .unwrap();
        (reply, started.elapsed())
    })
}

#[test]
fn a_freed_lock_goes_to_the_first_ticket_and_newcomers_are_refused() {
    let node = Node::builder().config("redlock.handoff-ms", "300").start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    // Blocked in this order; tickets say "late" came last.
    let late = spawn_queued(&node, "k", "late", 30);
    until_waiting(&mut con, 1);
    let early = spawn_queued(&node, "k", "early", 10);
    until_waiting(&mut con, 2);
    assert_eq!(release(&mut con, "k", "holder"), 1);
    // Only the first ticket is woken.
    assert_eq!(early.join().unwrap().0, 1);
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 1);
    // The freed lock is kept for it: the holder that just released, and
    // the later waiter, are refused.
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), None);
    assert_eq!(acquire(&mut con, "k", "late", 30_000), None);
    assert!(!inspect(&mut con, "k").unwrap().held);
    assert_eq!(acquire(&mut con, "k", "early", 300), Some(2));
    // The next one gets it when that lease ends.
    let (reply, took) = late.join().unwrap();
    assert_eq!(reply, 1);
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert_eq!(acquire(&mut con, "k", "late", 1_000), Some(3));
}

#[test]
fn a_reservation_nobody_uses_passes_to_the_next_waiter() {
    let node = Node::builder().config("redlock.handoff-ms", "200").start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    let first = spawn_queued(&node, "k", "gone", 1);
    until_waiting(&mut con, 1);
    let second = spawn_queued(&node, "k", "next", 2);
    until_waiting(&mut con, 2);
    let released = Instant::now();
    assert_eq!(release(&mut con, "k", "holder"), 1);
    assert_eq!(first.join().unwrap().0, 1);
    // "gone" never comes to ACQUIRE: after the window, "next" is woken.
    let (reply, _) = second.join().unwrap();
    assert_eq!(reply, 1);
    let passed = released.elapsed();
    assert!(passed >= Duration::from_millis(190), "{passed:?}");
    assert!(passed < Duration::from_millis(1_000), "{passed:?}");
    assert_eq!(acquire(&mut con, "k", "gone", 1_000), None);
    assert_eq!(acquire(&mut con, "k", "next", 1_000), Some(2));
}

#[test]
fn queued_owners_are_redacted_and_bad_queue_arguments_refused() {
    let node = Node::start();
    let mut con = node.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg("0")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        redis::cmd("REDLOCK.WAIT")
            .arg("free")
            .arg(0)
            .arg("QUEUE")
            .arg("secret-waiter-9")
            .arg(5)
            .query::<i64>(&mut con)
            .unwrap(),
        1
    );
    let log: redis::Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10)
        .query(&mut con)
        .unwrap();
    let text = format!("{log:?}");
    assert!(!text.contains("secret-waiter-9"), "{text}");
    let err = error_of(
        &mut con,
        &[b"REDLOCK.WAIT", b"k", b"0", b"QUEUE", b"me", b"soon"],
    );
    assert!(
        err.starts_with("ERR invalid ticket: not an integer"),
        "{err}"
    );
    let err = error_of(
        &mut con,
        &[b"REDLOCK.WAIT", b"k", b"0", b"LINE", b"me", b"1"],
    );
    assert!(err.starts_with("ERR syntax error: expected QUEUE"), "{err}");
}
