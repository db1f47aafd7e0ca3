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

    // Longer by renewal: the holder's ACQUIRE at 100 ms to 600 ms wakes at
    // about 700 ms.
    assert_eq!(acquire(&mut con, "renewed", "holder", 300), Some(1));
    let waiter = spawn_wait(&node, "renewed", 0);
    until_waiting(&mut con, 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(acquire(&mut con, "renewed", "holder", 600), Some(1));
    let (reply, took) = waiter.join().unwrap();
    assert_eq!(reply, 1);
    assert!(took >= Duration::from_millis(650), "{took:?}");

    // Shorter: an EXTEND by the holder to 100 ms wakes well before the
    // first deadline (5 s); a renewal never shortens the lease.
    assert_eq!(acquire(&mut con, "shorter", "holder", 5_000), Some(1));
    let waiter = spawn_wait(&node, "shorter", 0);
    until_waiting(&mut con, 1);
    assert_eq!(acquire(&mut con, "shorter", "holder", 100), Some(1));
    assert!(inspect(&mut con, "shorter").unwrap().pttl > 4_000);
    assert_eq!(extend(&mut con, "shorter", "holder", 100), 1);
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
    let replica = start_replica(&master, Node::builder());
    let mut r = replica.connection();
    assert_eq!(acquire(&mut m, "k", "holder", 30_000), Some(1));
    wait_replicated(&mut m);
    let waiter = spawn_wait(&replica, "k", 0);
    until_waiting(&mut r, 1);
    assert_eq!(release(&mut m, "k", "holder"), 1);
    let (reply, _) = waiter.join().unwrap();
    assert_eq!(reply, 1);
}

/// Starts `REDLOCK.WAIT key 0 QUEUE owner ticket` on a connection of its
/// own.
fn spawn_queued(node: &Node, key: &str, owner: &str, ticket: u64) -> JoinHandle<(i64, Duration)> {
    spawn_queued_for(node, key, owner, ticket, 0)
}

/// Starts `REDLOCK.WAIT key timeout QUEUE owner ticket` on a connection of
/// its own.
fn spawn_queued_for(
    node: &Node,
    key: &str,
    owner: &str,
    ticket: u64,
    timeout_ms: u64,
) -> JoinHandle<(i64, Duration)> {
    let mut con = node.connection();
    let (key, owner) = (key.to_string(), owner.to_string());
    std::thread::spawn(move || {
        let started = Instant::now();
        let reply: i64 = redis::cmd("REDLOCK.WAIT")
            .arg(&key)
            .arg(timeout_ms)
            .arg("QUEUE")
            .arg(&owner)
            .arg(ticket)
            .query(&mut con)
            .unwrap();
        (reply, started.elapsed())
    })
}

fn wait_queued_now(con: &mut redis::Connection, key: &str, owner: &str, ticket: u64) -> i64 {
    redis::cmd("REDLOCK.WAIT")
        .arg(key)
        .arg(0)
        .arg("QUEUE")
        .arg(owner)
        .arg(ticket)
        .query(con)
        .unwrap()
}

/// The node's wall clock in microseconds (`TIME`): honest tickets are
/// close to it.
fn node_clock_us(con: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1_000_000 + micros
}

#[test]
fn a_freed_lock_goes_to_the_first_ticket_and_newcomers_are_refused() {
    let node = Node::builder().config("redlock.handoff-ms", "300").start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    // Blocked in this order; tickets say "late" came last.
    let now = node_clock_us(&mut con);
    let late = spawn_queued(&node, "k", "late", now + 30);
    until_waiting(&mut con, 1);
    let early = spawn_queued(&node, "k", "early", now + 10);
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
    let now = node_clock_us(&mut con);
    let first = spawn_queued(&node, "k", "gone", now + 1);
    until_waiting(&mut con, 1);
    let second = spawn_queued(&node, "k", "next", now + 2);
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
    config_set(&mut con, "slowlog-log-slower-than", "0");
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

/// A squatter that only queues on a free lock (`WAIT k 0 QUEUE squatter
/// 0`, repeated) gets 1 at once every time and keeps nothing from anyone:
/// only a waiter that waited is ever reserved for.
#[test]
fn queueing_on_a_free_lock_reserves_nothing() {
    let node = Node::builder().config("redlock.handoff-ms", "5000").start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "released", "a", 10_000), Some(1));
    assert_eq!(release(&mut con, "released", "a"), 1);
    for key in ["missing", "released"] {
        for _ in 0..20 {
            assert_eq!(wait_queued_now(&mut con, key, "squatter", 0), 1);
        }
        let token = acquire(&mut con, key, "other", 10_000);
        assert!(token.is_some(), "{key}: refused after the squatter's WAITs");
        assert_eq!(release(&mut con, key, "other"), 1);
        for _ in 0..5 {
            assert_eq!(wait_queued_now(&mut con, key, "squatter", 0), 1);
            assert!(acquire(&mut con, key, "other", 10_000).is_some(), "{key}");
            assert_eq!(release(&mut con, key, "other"), 1);
        }
    }
    assert_eq!(redlock_info(&mut con, "wait_keys"), 0);
}

/// WAIT … QUEUE answered at once stores nothing: thousands on fresh names
/// leave the waiter map empty (it used to keep a reservation per name,
/// about 0.7 KB each, that only a later ACQUIRE or WAIT on that name
/// removed).
#[test]
fn queued_waits_answered_at_once_leave_nothing_behind() {
    let node = Node::start();
    let mut con = node.connection();
    let mut pipe = redis::pipe();
    for i in 0..2_000 {
        pipe.cmd("REDLOCK.WAIT")
            .arg(format!("fresh:{i}"))
            .arg(0)
            .arg("QUEUE")
            .arg("w")
            .arg(i);
    }
    let replies: Vec<i64> = pipe.query(&mut con).unwrap();
    assert!(replies.iter().all(|&r| r == 1));
    assert_eq!(redlock_info(&mut con, "wait_keys"), 0);
    assert_eq!(redlock_info(&mut con, "wait_timers"), 0);
}

/// A reservation nobody takes (the woken waiter never comes to ACQUIRE)
/// leaves the waiter map when its window ends, on a master and on a
/// replica, where no ACQUIRE ever runs.
#[test]
fn an_unused_reservation_leaves_the_map_when_its_window_ends() {
    let master = Node::builder().config("redlock.handoff-ms", "200").start();
    let mut m = master.connection();
    let replica = start_replica(&master, Node::builder().config("redlock.handoff-ms", "200"));
    let mut r = replica.connection();
    assert_eq!(acquire(&mut m, "k", "holder", 30_000), Some(1));
    wait_replicated(&mut m);
    let now = node_clock_us(&mut m);
    let on_master = spawn_queued(&master, "k", "gone", now);
    let on_replica = spawn_queued(&replica, "k", "gone", now);
    until_waiting(&mut m, 1);
    until_waiting(&mut r, 1);
    assert_eq!(release(&mut m, "k", "holder"), 1);
    assert_eq!(on_master.join().unwrap().0, 1);
    assert_eq!(on_replica.join().unwrap().0, 1);
    for con in [&mut m, &mut r] {
        wait_until(Duration::from_secs(5), "reservation dropped", || {
            redlock_info(con, "wait_keys") == 0
        });
        assert_eq!(redlock_info(con, "wait_timers"), 0);
        assert_eq!(redlock_info(con, "waiting_clients"), 0);
    }
    assert_eq!(acquire(&mut m, "k", "other", 1_000), Some(2));
}

/// A plain WAIT (no QUEUE) on a lock that is free but reserved for a
/// queued waiter waits, as an ACQUIRE would get nil; it is answered when an
/// ACQUIRE could succeed (here: at the end of the reserved owner's lease).
#[test]
fn a_plain_waiter_waits_while_the_lock_is_reserved() {
    let node = Node::builder().config("redlock.handoff-ms", "3000").start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    let queued = spawn_queued(&node, "k", "first", node_clock_us(&mut con));
    until_waiting(&mut con, 1);
    let plain = spawn_wait(&node, "k", 0);
    until_waiting(&mut con, 2);
    assert_eq!(release(&mut con, "k", "holder"), 1);
    assert_eq!(queued.join().unwrap().0, 1);
    // Reserved for "first": ACQUIREs by others get nil, and plain WAITs
    // wait (the short one times out).
    assert_eq!(acquire(&mut con, "k", "other", 1_000), None);
    assert_eq!(wait_now(&mut con, "k", 100), 0);
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 1);
    assert_eq!(acquire(&mut con, "k", "first", 300), Some(2));
    let (reply, _) = plain.join().unwrap();
    assert_eq!(reply, 1);
    assert_eq!(acquire(&mut con, "k", "other", 1_000), Some(3));
}

/// Tickets count only near the node's clock: ticket 0 (or a client clock
/// far behind) does not go before a waiter that queued earlier with an
/// honest ticket.
#[test]
fn a_ticket_far_behind_the_node_clock_does_not_go_first() {
    let node = Node::builder().config("redlock.handoff-ms", "3000").start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 30_000), Some(1));
    // An honest waiter that started waiting 30 s ago.
    let old = node_clock_us(&mut con) - 30_000_000;
    let honest = spawn_queued(&node, "k", "honest", old);
    until_waiting(&mut con, 1);
    let squatter = spawn_queued_for(&node, "k", "squatter", 0, 5_000);
    until_waiting(&mut con, 2);
    assert_eq!(release(&mut con, "k", "holder"), 1);
    // Reserved for the honest waiter at once: the squatter is refused.
    assert_eq!(acquire(&mut con, "k", "squatter", 1_000), None);
    assert_eq!(honest.join().unwrap().0, 1);
    assert_eq!(acquire(&mut con, "k", "honest", 300), Some(2));
    // The squatter's turn comes when that lease ends.
    assert_eq!(squatter.join().unwrap().0, 1);
}

/// Redis 7.0 never wakes a client blocked on a key that no longer exists.
/// A waiter queued behind a reservation whose record the reclamation sweep
/// deleted is still answered when the reservation ends (it used to stay
/// blocked until something recreated the key, for ever with timeout 0).
#[test]
fn a_waiter_behind_a_reclaimed_key_is_answered_when_the_reservation_ends() {
    let node = Node::builder()
        .config("redlock.handoff-ms", "2500")
        .config("redlock.reclaim-after-ms", "300")
        .config("redlock.max-ttl-ms", "200")
        .config("redlock.restart-grace-ms", "0")
        .start();
    let mut con = node.connection();
    let now = node_clock_us(&mut con);
    assert!(acquire_floor(&mut con, "k", "holder", 200, now as i64).is_some());
    let first = spawn_queued(&node, "k", "first", now);
    until_waiting(&mut con, 1);
    let second = spawn_queued_for(&node, "k", "second", now + 1, 8_000);
    until_waiting(&mut con, 2);
    assert_eq!(release(&mut con, "k", "holder"), 1);
    assert_eq!(first.join().unwrap().0, 1);
    // "first" never takes it; the sweep deletes the idle record meanwhile.
    wait_until(Duration::from_secs(2), "record reclaimed", || {
        !redis::cmd("EXISTS")
            .arg("k")
            .query::<bool>(&mut con)
            .unwrap()
    });
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 1);
    let (reply, took) = second.join().unwrap();
    assert_eq!(reply, 1, "answered after {took:?}");
    assert_eq!(acquire(&mut con, "k", "first", 200), None);
    assert!(acquire(&mut con, "k", "second", 200).is_some());
    wait_until(Duration::from_secs(5), "map emptied", || {
        redlock_info(&mut con, "wait_keys") == 0
    });
}

/// On Redis 7.0 too, waiters on a held key that is deleted (`DEL`) are
/// answered when the lease would have ended, not at their timeout.
#[test]
fn waiters_on_a_deleted_key_are_answered_at_the_lease_end() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "holder", 300), Some(1));
    let waiter = spawn_wait(&node, "k", 10_000);
    until_waiting(&mut con, 1);
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut con).unwrap();
    let (reply, took) = waiter.join().unwrap();
    assert_eq!(reply, 1, "answered after {took:?}");
    assert_eq!(redlock_info(&mut con, "waiting_clients"), 0);
    assert_eq!(redlock_info(&mut con, "wait_keys"), 0);
}
