//! Reclaiming idle lock records (DESIGN §8) against real nodes: what the
//! sweep deletes and what it keeps, tokens through the quorum client after
//! reclamation, replication, restarts and a promotion mid-sweep.
//!
//! The nodes run with `redlock.reclaim-after-ms` 1000 and
//! `redlock.max-ttl-ms` 500, so a record that meets the rule goes about one
//! second after its last change (the sweep ticks every 100 ms).

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use redlock_testkit::NodeBuilder;

const RECLAIM_AFTER_MS: u64 = 1_000;
const MAX_TTL_MS: u64 = 500;

fn builder() -> NodeBuilder {
    Node::builder()
        .config("redlock.reclaim-after-ms", &RECLAIM_AFTER_MS.to_string())
        .config("redlock.max-ttl-ms", &MAX_TTL_MS.to_string())
        .config("redlock.restart-grace-ms", "0")
        .config("repl-diskless-sync-delay", "0")
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn exists(con: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

/// A FLOOR grant (the client's clock, as the quorum client sends it) and its release.
fn take_and_release(con: &mut redis::Connection, key: &str) -> i64 {
    let token = acquire_floor(con, key, "owner", MAX_TTL_MS, now_us()).unwrap();
    assert_eq!(release(con, key, "owner"), 1);
    token
}

fn info_u64(con: &mut redis::Connection, field: &str) -> u64 {
    info_field(con, "redlock", field)
        .unwrap_or_else(|| panic!("INFO redlock has no {field}"))
        .parse()
        .unwrap()
}

fn wait_gone(con: &mut redis::Connection, key: &str, timeout: Duration) {
    wait_until(timeout, &format!("{key} reclaimed"), || !exists(con, key));
}

/// A control record that meets the rule, released now: once it is gone, a
/// sweep has passed over records that were old enough.
fn control(con: &mut redis::Connection) {
    take_and_release(con, "control");
}

fn wait_for_control(con: &mut redis::Connection) {
    wait_gone(con, "control", Duration::from_secs(5));
}

/// Acceptance 1: a free, idle, FLOOR-granted record whose counter is behind
/// the node's clock goes about one sweep period after reclaim-after, with a
/// `redlock.reclaim` keyspace event and the INFO counters moving.
#[test]
fn a_record_meeting_the_rule_disappears_after_reclaim_after() {
    let node = builder().config("notify-keyspace-events", "Kd").start();
    let mut con = node.connection();
    let mut events = node.connection();
    events
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut pubsub = events.as_pubsub();
    pubsub.subscribe("__keyspace@0__:k").unwrap();

    take_and_release(&mut con, "k");
    let released = Instant::now();
    assert_eq!(info_u64(&mut con, "redlock_records"), 1);
    std::thread::sleep(Duration::from_millis(RECLAIM_AFTER_MS * 7 / 10));
    let present = exists(&mut con, "k");
    let at = released.elapsed();
    assert!(
        present || at >= Duration::from_millis(RECLAIM_AFTER_MS),
        "reclaimed {at:?} after its release"
    );
    wait_gone(&mut con, "k", Duration::from_secs(3));
    let took = released.elapsed();
    assert!(
        took >= Duration::from_millis(RECLAIM_AFTER_MS),
        "gone after {took:?}"
    );
    // About one sweep period (100 ms) late; the margin is for a loaded machine.
    assert!(
        took < Duration::from_millis(RECLAIM_AFTER_MS + 1_000),
        "gone after {took:?}"
    );
    let mut seen = Vec::new();
    while !seen.iter().any(|e: &String| e == "redlock.reclaim") {
        let msg = pubsub.get_message().expect("keyspace event");
        seen.push(msg.get_payload::<String>().unwrap());
    }
    assert_eq!(
        seen,
        ["redlock.acquire", "redlock.release", "redlock.reclaim"]
    );
    assert_eq!(info_u64(&mut con, "redlock_reclaimed"), 1);
    assert_eq!(info_u64(&mut con, "redlock_records"), 0);
    assert!(info_u64(&mut con, "redlock_sweep_passes") >= 1);
    assert!(info_u64(&mut con, "redlock_sweep_keys_scanned") >= 1);
    assert!(info_u64(&mut con, "redlock_sweep_longest_tick_us") > 0);
    // The name starts afresh, and the next FLOOR grant is above the old token.
    let before = now_us();
    let token = acquire_floor(&mut con, "k", "next", MAX_TTL_MS, now_us()).unwrap();
    assert!(token >= before, "{token} < {before}");
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect()
}

/// A released FLOOR record goes after reclaim-after, with the node otherwise idle.
fn reclaims_a_released_record(con: &mut redis::Connection) {
    take_and_release(con, "k");
    wait_gone(con, "k", Duration::from_secs(3));
    assert_eq!(info_u64(con, "redlock_reclaimed"), 1);
}

/// The ticks run on the module's sweep thread, under the module lock, not
/// on main-thread timers (which slow a node's replies, docs/performance.md).
#[test]
fn the_sweep_runs_on_its_own_thread() {
    let node = builder().start();
    let mut con = node.connection();
    assert_eq!(info_u64(&mut con, "redlock_sweep_thread"), 1);
    // A new thread names itself once it first runs: on a loaded machine the
    // server can answer before that.
    let pid = node.pid().unwrap();
    wait_until(
        Duration::from_secs(5),
        "a thread named redlock-sweep",
        || thread_names(pid).iter().any(|n| n == "redlock-sweep"),
    );
    reclaims_a_released_record(&mut con);
}

/// The fallback, module timers on the main thread, reclaims the same way.
#[test]
fn the_sweep_on_module_timers_reclaims_too() {
    let node = builder().env("REDLOCK_TEST_SWEEP_ON_TIMERS", "1").start();
    let mut con = node.connection();
    assert_eq!(info_u64(&mut con, "redlock_sweep_thread"), 0);
    let names = thread_names(node.pid().unwrap());
    assert!(
        !names.iter().any(|n| n == "redlock-sweep"),
        "threads: {names:?}"
    );
    reclaims_a_released_record(&mut con);
}

/// Paused writes (`CLIENT PAUSE … WRITE`, as `FAILOVER` and a shutdown
/// waiting for its replicas pause them) stop the sweep, as they stop Redis's
/// own expiry: a master with a replica that propagated a delete then would
/// abort on Redis's assertion. The record goes once the pause ends.
#[test]
fn the_sweep_waits_while_writes_are_paused() {
    let master = builder().start();
    let replica = replica_of(&master, builder());
    let mut con = master.connection();
    take_and_release(&mut con, "k");
    wait_replicated(&mut con);
    let pause_ms = RECLAIM_AFTER_MS + 2_000;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause_ms)
        .arg("WRITE")
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(RECLAIM_AFTER_MS + 1_000));
    assert!(exists(&mut con, "k"), "reclaimed while writes were paused");
    assert_eq!(info_u64(&mut con, "redlock_reclaimed"), 0);
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut con).unwrap();
    wait_gone(&mut con, "k", Duration::from_secs(3));
    assert_eq!(info_u64(&mut con, "redlock_reclaimed"), 1);
    wait_gone(&mut replica.connection(), "k", Duration::from_secs(3));
}

/// Held: a lock kept held (extended) past reclaim-after stays.
#[test]
fn a_held_record_stays() {
    let node = builder().start();
    let mut con = node.connection();
    acquire_floor(&mut con, "held", "holder", MAX_TTL_MS, now_us()).unwrap();
    control(&mut con);
    let deadline = Instant::now() + Duration::from_millis(RECLAIM_AFTER_MS * 2);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(MAX_TTL_MS / 3));
        assert_eq!(extend(&mut con, "held", "holder", MAX_TTL_MS), 1);
    }
    wait_for_control(&mut con);
    assert!(inspect(&mut con, "held").unwrap().held);
}

/// Recently changed: a record changed less than reclaim-after ago stays,
/// and goes reclaim-after after that change.
#[test]
fn a_recently_changed_record_stays() {
    let after_ms = 3 * RECLAIM_AFTER_MS;
    let node = builder()
        .config("redlock.reclaim-after-ms", &after_ms.to_string())
        .start();
    let mut con = node.connection();
    take_and_release(&mut con, "busy");
    let first = Instant::now();
    std::thread::sleep(Duration::from_millis(after_ms * 7 / 10));
    take_and_release(&mut con, "busy");
    let changed = Instant::now();
    std::thread::sleep(Duration::from_millis(after_ms * 6 / 10));
    // The first release is reclaim-after old, the last change is not.
    let present = exists(&mut con, "busy");
    assert!(first.elapsed() >= Duration::from_millis(after_ms));
    assert!(
        present || changed.elapsed() >= Duration::from_millis(after_ms),
        "reclaimed {:?} after its last change",
        changed.elapsed()
    );
    wait_gone(&mut con, "busy", Duration::from_secs(6));
    assert!(changed.elapsed() >= Duration::from_millis(after_ms));
}

/// Acquired without FLOOR (plain redis-cli): the record is kept for ever.
#[test]
fn a_record_granted_without_floor_stays() {
    let node = builder().start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "plain", "owner", MAX_TTL_MS), Some(1));
    assert_eq!(release(&mut con, "plain", "owner"), 1);
    // A FLOOR grant followed by a plain one: the last grant decides.
    take_and_release(&mut con, "mixed");
    assert!(acquire(&mut con, "mixed", "owner", MAX_TTL_MS).is_some());
    assert_eq!(release(&mut con, "mixed", "owner"), 1);
    std::thread::sleep(Duration::from_millis(RECLAIM_AFTER_MS));
    control(&mut con);
    wait_for_control(&mut con);
    assert_eq!(inspect(&mut con, "plain").unwrap().token, 1);
    assert!(exists(&mut con, "mixed"));
}

/// Counter ahead of the node's clock: stays until the node's clock is
/// reclaim-after past it.
#[test]
fn a_record_whose_counter_is_ahead_of_the_node_clock_stays() {
    let node = builder().start();
    let mut con = node.connection();
    let ahead = now_us() + 3_600_000_000;
    assert_eq!(
        acquire_floor(&mut con, "ahead", "owner", MAX_TTL_MS, ahead),
        Some(ahead)
    );
    assert_eq!(release(&mut con, "ahead", "owner"), 1);
    // Ten seconds ahead: also stays.
    let close = now_us() + 10_000_000;
    acquire_floor(&mut con, "close", "owner", MAX_TTL_MS, close).unwrap();
    assert_eq!(release(&mut con, "close", "owner"), 1);
    std::thread::sleep(Duration::from_millis(RECLAIM_AFTER_MS));
    control(&mut con);
    wait_for_control(&mut con);
    assert_eq!(inspect(&mut con, "ahead").unwrap().token, ahead);
    assert!(exists(&mut con, "close"));
    // Move the node's clock past the counter: now it goes.
    let _: () = redis::cmd("REDLOCK.TESTHOOK")
        .arg("WALLCLOCK-OFFSET")
        .arg(3_700_000)
        .query(&mut con)
        .unwrap();
    wait_gone(&mut con, "ahead", Duration::from_secs(3));
}

/// `redlock.reclaim-after-ms` 0 turns reclamation off; it is settable at
/// run time with a range check, and as a `loadmodule` argument.
#[test]
fn reclaim_after_zero_keeps_everything_and_the_config_is_range_checked() {
    let node = Node::builder()
        .module_arg("reclaim-after-ms")
        .module_arg("0")
        .config("redlock.max-ttl-ms", &MAX_TTL_MS.to_string())
        .config("redlock.restart-grace-ms", "0")
        .start();
    let mut con = node.connection();
    assert_eq!(info_u64(&mut con, "redlock_reclaim_after_ms"), 0);
    take_and_release(&mut con, "kept");
    std::thread::sleep(Duration::from_millis(RECLAIM_AFTER_MS + 500));
    assert!(exists(&mut con, "kept"));
    let err = error_of(
        &mut con,
        &[b"CONFIG", b"SET", b"redlock.reclaim-after-ms", b"-1"],
    );
    assert!(err.contains("redlock.reclaim-after-ms"), "{err}");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.reclaim-after-ms")
        .arg(RECLAIM_AFTER_MS)
        .query(&mut con)
        .unwrap();
    wait_gone(&mut con, "kept", Duration::from_secs(3));
}

/// Acceptance 2: after every node reclaimed a name, or only some of them,
/// the next acquisition through the quorum client gets a token above every
/// token the name had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_through_the_client_after_reclamation() {
    let nodes = redlock_testkit::start_nodes(3, &builder());
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let redlock = redlock_client::Redlock::builder(urls)
        .node_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_millis(MAX_TTL_MS);
    let mut highest = 0;
    let mut take = |token: u64, what: &str| {
        assert!(token > highest, "{what}: token {token} <= {highest}");
        highest = token;
    };
    for _ in 0..3 {
        let lock = redlock.acquire("name", ttl).await.unwrap();
        take(lock.token(), "before reclamation");
        lock.release().await.unwrap();
    }
    let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connection).collect();
    let all_gone = |cons: &mut Vec<redis::Connection>| {
        for con in cons.iter_mut() {
            wait_gone(con, "name", Duration::from_secs(5));
        }
    };
    all_gone(&mut cons);
    let lock = redlock.acquire("name", ttl).await.unwrap();
    take(lock.token(), "after reclamation on every node");
    lock.release().await.unwrap();

    // Node 0 keeps its record (reclamation off there); the others reclaim.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.reclaim-after-ms")
        .arg(0)
        .query(&mut cons[0])
        .unwrap();
    let lock = redlock.acquire("name", ttl).await.unwrap();
    take(lock.token(), "again");
    lock.release().await.unwrap();
    for con in cons.iter_mut().skip(1) {
        wait_gone(con, "name", Duration::from_secs(5));
    }
    assert!(exists(&mut cons[0], "name"));
    let lock = redlock.acquire("name", ttl).await.unwrap();
    take(lock.token(), "after reclamation on some nodes");
    lock.release().await.unwrap();
}

fn replica_of(master: &Node, builder: NodeBuilder) -> Node {
    common::start_replica(master, builder)
}

fn wait_replicated(master: &mut redis::Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(master).unwrap();
    assert_eq!(acked, 1);
}

fn keys(con: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys
}

/// Acceptance 3: the master's deletes reach the replica (same keyspace,
/// same DEBUG DIGEST); a replica never reclaims by itself.
#[test]
fn reclamation_is_replicated_and_replicas_never_reclaim_by_themselves() {
    let master = builder().start();
    let mut m = master.connection();
    let replica = replica_of(&master, builder());
    let mut r = replica.connection();
    for i in 0..50 {
        take_and_release(&mut m, &format!("idle:{i}"));
    }
    // Two records the rule keeps, released so that the digest does not
    // depend on when each node sees a lease end.
    assert_eq!(acquire(&mut m, "plain", "o", MAX_TTL_MS), Some(1));
    assert_eq!(release(&mut m, "plain", "o"), 1);
    acquire_floor(&mut m, "ahead", "o", MAX_TTL_MS, now_us() + 3_600_000_000).unwrap();
    assert_eq!(release(&mut m, "ahead", "o"), 1);
    wait_replicated(&mut m);
    assert_eq!(keys(&mut r).len(), 52);
    wait_until(Duration::from_secs(5), "reclaimed on the master", || {
        keys(&mut m) == ["ahead", "plain"]
    });
    wait_replicated(&mut m);
    assert_eq!(keys(&mut r), ["ahead", "plain"]);
    assert_eq!(digest(&mut m), digest(&mut r));
    assert_eq!(info_u64(&mut m, "redlock_reclaimed"), 50);
    assert_eq!(info_u64(&mut r, "redlock_reclaimed"), 0);
    assert_eq!(info_u64(&mut r, "redlock_records"), 2);

    // A master that never reclaims: its replica keeps everything too.
    let keeper = builder().config("redlock.reclaim-after-ms", "0").start();
    let mut k = keeper.connection();
    let eager = replica_of(&keeper, builder());
    let mut e = eager.connection();
    take_and_release(&mut k, "kept");
    wait_replicated(&mut k);
    std::thread::sleep(Duration::from_millis(RECLAIM_AFTER_MS + 600));
    assert!(exists(&mut e, "kept"));
    assert_eq!(info_u64(&mut e, "redlock_reclaimed"), 0);
}

/// Acceptance 3: reclamation survives a restart from the AOF and from an
/// RDB file, and so does the highest reclaimed counter: a grant without
/// FLOOR on a reclaimed name still gets a higher token. The idle time of a
/// record not yet reclaimed is never more after the restart than it was
/// when written (a wall clock stepped forward while the node was down must
/// not make it reclaimable early), so the time the node was down does not
/// count.
#[test]
fn reclamation_and_idle_time_survive_restarts_from_aof_and_rdb() {
    for aof in [true, false] {
        let reclaim_after: u64 = 4_000;
        let mut b = builder().config("redlock.reclaim-after-ms", &reclaim_after.to_string());
        if aof {
            b = b.config("appendonly", "yes");
        }
        let mut node = b.start();
        let mut con = node.connection();
        let gone_token = take_and_release(&mut con, "gone");
        wait_gone(&mut con, "gone", Duration::from_secs(6));
        take_and_release(&mut con, "idle");
        // Without FLOOR: kept for ever (its first token is above the
        // reclaimed counter).
        assert!(acquire(&mut con, "plain", "o", MAX_TTL_MS).unwrap() > gone_token);
        let idle_when_written = reclaim_after * 3 / 4;
        std::thread::sleep(Duration::from_millis(idle_when_written));
        if !aof {
            let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
        }
        node.restart();
        let restarted = Instant::now();
        let mut con = node.connection();
        assert!(
            !exists(&mut con, "gone"),
            "aof {aof}: reclaimed record came back"
        );
        assert!(exists(&mut con, "idle"), "aof {aof}");
        assert!(exists(&mut con, "plain"), "aof {aof}");
        wait_gone(&mut con, "idle", Duration::from_secs(10));
        // The AOF holds the release (idle 0 when written): reclaim-after
        // from the restart. The RDB was written 3 s into the idle time:
        // the rest of it from the restart.
        let left = if aof {
            reclaim_after
        } else {
            reclaim_after - idle_when_written
        };
        let took = restarted.elapsed();
        assert!(
            took >= Duration::from_millis(left - 100)
                && took < Duration::from_millis(left + reclaim_after / 2),
            "aof {aof}: gone {took:?} after the restart, {left} ms expected"
        );
        assert!(exists(&mut con, "plain"), "aof {aof}");
        if aof {
            // The AOF replays the deletes, also after a rewrite.
            let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
            wait_for_no_child(&mut con);
            node.restart();
            let mut con = node.connection();
            assert_eq!(keys(&mut con), ["plain"]);
        }
        // A grant without FLOOR on a name reclaimed before the restart(s).
        let mut con = node.connection();
        let token = acquire(&mut con, "gone", "plain-client", MAX_TTL_MS).unwrap();
        assert!(
            token > gone_token,
            "aof {aof}: token {token} after a reclaimed {gone_token}"
        );
    }
}

/// Acceptance 3: a replica promoted while its master is in the middle of a
/// sweep finishes the job; what the rule keeps stays.
#[test]
fn a_replica_promoted_mid_sweep_continues() {
    let mut master = builder().config("redlock.reclaim-after-ms", "0").start();
    let mut m = master.connection();
    let replica = replica_of(&master, builder());
    let mut r = replica.connection();
    const N: usize = 30_000;
    let floor = now_us();
    let mut pipe = redis::pipe();
    for i in 0..N {
        let key = format!("idle:{i}");
        pipe.cmd("REDLOCK.ACQUIRE")
            .arg(&key)
            .arg("o")
            .arg(MAX_TTL_MS)
            .arg("FLOOR")
            .arg(floor)
            .ignore()
            .cmd("REDLOCK.RELEASE")
            .arg(&key)
            .arg("o")
            .ignore();
    }
    let _: () = pipe.query(&mut m).unwrap();
    assert_eq!(acquire(&mut m, "plain", "o", MAX_TTL_MS), Some(1));
    wait_replicated(&mut m);
    std::thread::sleep(Duration::from_millis(RECLAIM_AFTER_MS));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.reclaim-after-ms")
        .arg(RECLAIM_AFTER_MS)
        .query(&mut m)
        .unwrap();
    // Mid-sweep: the replica has some of the master's deletes, not all. (The
    // sweep's deletes leave for the replica when the master's main thread
    // next wakes, so the master's own count runs ahead of the replica's.)
    wait_until(
        Duration::from_secs(10),
        "the master's sweep under way on the replica",
        || {
            info_u64(&mut r, "redlock_records") < N as u64 + 1
                && info_u64(&mut m, "redlock_records") > 1
        },
    );
    master.kill();
    // Let the replica apply what its master had sent before it died.
    std::thread::sleep(Duration::from_millis(300));
    let on_replica = info_u64(&mut r, "redlock_records");
    assert!(
        on_replica > 1 && on_replica < N as u64 + 1,
        "replica had {on_replica} records when its master died"
    );
    assert_eq!(info_u64(&mut r, "redlock_reclaimed"), 0);
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    wait_until(
        Duration::from_secs(30),
        "the promoted replica's sweep",
        || keys(&mut r) == ["plain"],
    );
    assert_eq!(
        info_u64(&mut r, "redlock_reclaimed"),
        on_replica - 1,
        "every idle record the replica had was reclaimed once"
    );
    assert_eq!(info_u64(&mut r, "redlock_records"), 1);
}

/// Memory: a held name costs at most 1.1× a `SET NX PX` key with a 36-byte
/// value (the UUID a plain Redlock client stores), a released one less
/// than a held one (`MEMORY USAGE`, printed for the README).
#[test]
fn memory_per_held_and_released_name() {
    let node = builder().start();
    let mut con = node.connection();
    let name = "lock:order:1234567";
    acquire_floor(&mut con, name, "0b9a4a2e-5c1f-4f7e", MAX_TTL_MS, now_us()).unwrap();
    let held = memory_usage(&mut con, name);
    assert_eq!(release(&mut con, name, "0b9a4a2e-5c1f-4f7e"), 1);
    let released = memory_usage(&mut con, name);
    let plain = "lock:order:7654321";
    let _: () = redis::cmd("SET")
        .arg(plain)
        .arg("0b9a4a2e-5c1f-4f7e-9d43-2f7c1d0e8a11")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let set = memory_usage(&mut con, plain);
    println!(
        "MEMORY USAGE: held {held} B ({:.2}x), released {released} B ({:.2}x), SET NX PX {set} B",
        held as f64 / set as f64,
        released as f64 / set as f64
    );
    assert!(held * 10 <= set * 11, "held {held} B vs SET NX PX {set} B");
    assert!(released < held, "released {released} B vs held {held} B");
}

/// The holes issue, item 3: a name reclaimed after a clock FLOOR grant,
/// then acquired without FLOOR (redis-cli, `clock_floor(false)`, another
/// client) or with a small FLOOR, gets a token above the reclaimed counter;
/// on the node, after an AOF rewrite without RDB preamble and a restart, and
/// on a replica promoted after the reclamation. A small FLOOR does not make
/// a record reclaimable. The test build's `no-reclaimed-floor` mutant shows
/// the check is real: it hands out token 1.
#[test]
fn no_grant_on_a_reclaimed_name_goes_below_its_counter_whatever_the_floor() {
    let b = builder()
        .config("appendonly", "yes")
        .config("aof-use-rdb-preamble", "no");
    let mut master = b.clone().start();
    let replica = replica_of(&master, builder());
    let mut m = master.connection();
    let mut r = replica.connection();

    assert_eq!(acquire_floor(&mut m, "small", "o", MAX_TTL_MS, 5), Some(5));
    assert_eq!(release(&mut m, "small", "o"), 1);
    let clock_token = take_and_release(&mut m, "a");
    wait_gone(&mut m, "a", Duration::from_secs(5));
    let plain = acquire(&mut m, "a", "plain-client", MAX_TTL_MS).unwrap();
    assert!(plain > clock_token, "{plain} after {clock_token}");
    assert_eq!(release(&mut m, "a", "plain-client"), 1);

    let c_token = take_and_release(&mut m, "c");
    wait_gone(&mut m, "c", Duration::from_secs(5));
    control(&mut m);
    wait_for_control(&mut m);
    assert!(
        exists(&mut m, "small"),
        "a small FLOOR made a record reclaimable"
    );
    wait_replicated(&mut m);
    assert!(!exists(&mut r, "c"));

    // The promoted replica learned the reclaimed counter from the stream.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let on_replica = acquire_floor(&mut r, "c", "other", MAX_TTL_MS, 1).unwrap();
    assert!(
        on_replica > c_token,
        "replica: {on_replica} after {c_token}"
    );

    // The master after an AOF rewrite without preamble and a restart.
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut m).unwrap();
    wait_for_no_child(&mut m);
    drop(m);
    master.kill();
    master.restart();
    let mut m = master.connection();
    assert!(!exists(&mut m, "c"));
    let after = acquire(&mut m, "c", "plain-client", MAX_TTL_MS).unwrap();
    assert!(after > c_token, "restarted: {after} after {c_token}");

    // The mutant: no floor from reclaimed counters.
    let mut mutant = b.env("REDLOCK_TEST_MUTANTS", "no-reclaimed-floor").start();
    let mut x = mutant.connection();
    take_and_release(&mut x, "a");
    wait_gone(&mut x, "a", Duration::from_secs(5));
    assert_eq!(acquire(&mut x, "a", "plain-client", MAX_TTL_MS), Some(1));
    drop(x);
    mutant.kill();
}

/// Review finding: with `aof-use-rdb-preamble no` an AOF rewrite has no
/// auxiliary data and, once every record is reclaimed, no record to carry
/// the reclaimed counter: the node writes it to `redlock-reclaimed-counter`
/// when it forks the rewrite, and a restart from that AOF keeps it.
#[test]
fn without_rdb_preamble_the_reclaimed_counter_survives_a_rewrite_with_no_record() {
    let mut node = builder()
        .config("appendonly", "yes")
        .config("aof-use-rdb-preamble", "no")
        .start();
    let mut con = node.connection();
    let first = take_and_release(&mut con, "first");
    let second = take_and_release(&mut con, "second");
    wait_gone(&mut con, "first", Duration::from_secs(5));
    wait_gone(&mut con, "second", Duration::from_secs(5));
    let reclaimed = info_u64(&mut con, "redlock_reclaimed_counter");
    assert_eq!(reclaimed, first.max(second) as u64);
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    wait_for_no_child(&mut con);
    let file = std::fs::read_to_string(node.dir().join("redlock-reclaimed-counter")).unwrap();
    assert_eq!(file.trim(), reclaimed.to_string());
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    assert_eq!(info_u64(&mut con, "redlock_reclaimed_counter"), reclaimed);
    let token = acquire(&mut con, "first", "plain-client", MAX_TTL_MS).unwrap();
    assert!(token as u64 > reclaimed, "{token} after {reclaimed}");
}
