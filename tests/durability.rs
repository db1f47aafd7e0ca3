//! What survives: DEBUG RELOAD, AOF rewrite and replay, restarts, full sync
//! to a replica and promotion; the restart guard; wall-clock jumps.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Two locks: `held` (live lease, token 7) and `free` (released, counter 3).
fn seed(con: &mut redis::Connection) {
    assert_eq!(acquire_floor(con, "held", "alice", 60_000, 7), Some(7));
    for owner in ["a", "b", "c"] {
        acquire(con, "free", owner, 60_000).unwrap();
        assert_eq!(release(con, "free", owner), 1);
    }
}

fn check_seeded(con: &mut redis::Connection, context: &str) {
    let held = inspect(con, "held").unwrap_or_else(|| panic!("{context}: held missing"));
    assert!(held.held && held.token == 7, "{context}: {held:?}");
    assert!(held.pttl > 30_000, "{context}: lease shortened: {held:?}");
    assert_eq!(acquire(con, "held", "mallory", 1_000), None, "{context}");
    let free = inspect(con, "free").unwrap_or_else(|| panic!("{context}: free missing"));
    assert_eq!(
        free,
        View {
            held: false,
            pttl: -1,
            token: 3
        },
        "{context}"
    );
}

fn aof_files(node: &Node) -> String {
    String::from_utf8_lossy(&aof_bytes(node)).into_owned()
}

#[test]
fn debug_reload_keeps_counter_and_lease() {
    let node = Node::start();
    let mut con = node.connection();
    seed(&mut con);
    let before = digest(&mut con);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    check_seeded(&mut con, "after DEBUG RELOAD");
    assert_eq!(digest(&mut con), before);
}

#[test]
fn aof_rewrite_without_and_with_rdb_preamble() {
    for preamble in ["no", "yes"] {
        let node = Node::builder()
            .config("appendonly", "yes")
            .config("aof-use-rdb-preamble", preamble)
            .start();
        let mut con = node.connection();
        seed(&mut con);
        let before = digest(&mut con);
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
        wait_for_no_child(&mut con);
        if preamble == "no" {
            let aof = aof_files(&node);
            assert!(
                aof.contains("REDLOCK.APPLY"),
                "rewritten AOF has no APPLY:\n{aof}"
            );
            assert!(
                !aof.contains("REDLOCK.ACQUIRE"),
                "AOF replays commands, not effects"
            );
        }
        let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();
        check_seeded(
            &mut con,
            &format!("after BGREWRITEAOF (preamble {preamble}) + DEBUG LOADAOF"),
        );
        assert_eq!(digest(&mut con), before, "preamble {preamble}");
    }
}

#[test]
fn restart_from_aof_and_from_rdb() {
    let mut node = Node::builder().config("appendonly", "yes").start();
    let mut con = node.connection();
    seed(&mut con);
    let before = digest(&mut con);
    drop(con);
    node.restart();
    let mut con = node.connection();
    check_seeded(&mut con, "after restart from AOF");
    assert_eq!(digest(&mut con), before);

    let _: String = redis::cmd("SAVE").query(&mut con).unwrap();
    drop(con);
    node.restart_with(&[("appendonly", "no")]);
    let mut con = node.connection();
    check_seeded(&mut con, "after restart from RDB");
    assert_eq!(digest(&mut con), before);
}

#[test]
fn kill_9_with_appendfsync_always_loses_nothing() {
    let mut node = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut con = node.connection();
    seed(&mut con);
    assert_eq!(fence(&mut con, "held", "alice", Some(9)), Some(9));
    drop(con);
    node.kill();
    node.restart();
    let mut con = node.connection();
    let v = inspect(&mut con, "held").unwrap();
    assert!(v.held && v.token == 9, "{v:?}");
    assert_eq!(inspect(&mut con, "free").unwrap().token, 3);
}

/// Replay reproduces the effects: it does not re-run ACQUIRE against the
/// clock at load time (which would hand the lock back to alice).
#[test]
fn aof_replay_reproduces_effects_not_commands() {
    let mut node = Node::builder()
        .config("appendonly", "yes")
        .config("aof-use-rdb-preamble", "no")
        .start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 200), Some(1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(acquire(&mut con, "k", "bob", 60_000), Some(2));
    let aof = aof_files(&node);
    assert!(aof.contains("REDLOCK.APPLY") && !aof.contains("REDLOCK.ACQUIRE"));
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();
    let v = inspect(&mut con, "k").unwrap();
    assert!(v.held && v.token == 2, "after DEBUG LOADAOF: {v:?}");
    drop(con);
    node.restart();
    let mut con = node.connection();
    let v = inspect(&mut con, "k").unwrap();
    assert!(v.held && v.token == 2, "after restart: {v:?}");
    assert_eq!(release(&mut con, "k", "alice"), 0);
    assert_eq!(release(&mut con, "k", "bob"), 1);
}

#[test]
fn replica_full_sync_stream_and_promotion() {
    let master = Node::start();
    let mut m = master.connection();
    seed(&mut m);
    let replica = Node::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start();
    let mut r = replica.connection();
    wait_until(Duration::from_secs(20), "replica link up", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    // Online on the master's side too (until then a master that loaded no
    // file refuses leases: `NOSYNC`).
    wait_online_at_master(&mut m, replica.port());
    // Effects after the full sync travel as REDLOCK.APPLY.
    assert_eq!(acquire(&mut m, "live", "carol", 60_000), Some(1));
    assert_eq!(release(&mut m, "held", "alice"), 1);
    assert_eq!(acquire(&mut m, "held", "dave", 60_000), Some(8));
    assert_eq!(fence(&mut m, "held", "dave", Some(20)), Some(20));
    assert_eq!(extend(&mut m, "live", "carol", 60_000), 1);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(digest(&mut r), digest(&mut m));
    // A replica refuses writes, including FENCE.
    let err = error_of(&mut r, &[b"REDLOCK.FENCE", b"held", b"dave", b"99"]);
    assert!(err.starts_with("READONLY"), "{err}");

    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    // Leases live on the master are still held on the promoted replica.
    for (key, holder) in [("held", "dave"), ("live", "carol")] {
        let v = inspect(&mut r, key).unwrap();
        assert!(v.held, "{key}: {v:?}");
        assert_eq!(acquire(&mut r, key, "mallory", 1_000), None, "{key}");
        assert_eq!(release(&mut r, key, holder), 1, "{key}");
    }
    // Tokens continue above every token the master gave.
    assert_eq!(acquire(&mut r, "held", "erin", 1_000), Some(21));
    assert_eq!(acquire(&mut r, "live", "erin", 1_000), Some(2));
    assert_eq!(acquire(&mut r, "free", "erin", 1_000), Some(4));
}

#[test]
fn restart_guard_refuses_acquire_for_the_window() {
    let mut node = Node::builder()
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "4000")
        .start();
    let started = Instant::now();
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k", b"a", b"100"]);
    assert!(err.starts_with("GRACE node restarted"), "{err}");
    assert_eq!(
        inspect(&mut con, "k"),
        None,
        "refused ACQUIRE created the key"
    );
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_grace_active").as_deref(),
        Some("1")
    );
    // The other commands keep working inside the window.
    assert_eq!(release(&mut con, "k", "a"), 0);
    wait_until(Duration::from_secs(15), "grace window end", || {
        redis::cmd("REDLOCK.ACQUIRE")
            .arg("k")
            .arg("a")
            .arg(100)
            .query::<Option<i64>>(&mut con)
            .is_ok()
    });
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "window ended early"
    );
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_grace_active").as_deref(),
        Some("0")
    );
    let refused: u64 = info_field(&mut con, "redlock", "redlock_acquire_refused_grace")
        .unwrap()
        .parse()
        .unwrap();
    assert!(refused >= 1);

    // Switching to appendonly yes + appendfsync always across a restart
    // does not exempt it: the previous run was not durable, so it may have
    // lost grants it acknowledged.
    drop(con);
    node.restart_with(&[("appendonly", "yes"), ("appendfsync", "always")]);
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k2", b"a", b"100"]);
    assert!(err.starts_with("GRACE node restarted"), "{err}");
    // A restart after a run that was durable all its life accepts at once
    // (the window of that run was over and recorded as over).
    wait_until(Duration::from_secs(15), "grace window end", || {
        acquire_result(&mut con, "k2", "a", 100).is_ok()
    });
    drop(con);
    node.restart_with(&[("appendonly", "yes"), ("appendfsync", "always")]);
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k4", "a", 100), Some(1));

    // appendfsync everysec is not enough.
    drop(con);
    node.restart_with(&[("appendfsync", "everysec")]);
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k3", b"a", b"100"]);
    assert!(err.starts_with("GRACE"), "{err}");
    // Operators can end the window early.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.restart-grace-ms")
        .arg("0")
        .query(&mut con)
        .unwrap();
    assert_eq!(acquire(&mut con, "k3", "a", 100), Some(1));
}

#[test]
fn wall_clock_jumps_do_not_move_leases() {
    let node = Node::start();
    let mut con = node.connection();
    let hook = |con: &mut redis::Connection, ms: i64| {
        let _: () = redis::cmd("REDLOCK.TESTHOOK")
            .arg("WALLCLOCK-OFFSET")
            .arg(ms)
            .query(con)
            .unwrap();
    };
    assert_eq!(acquire(&mut con, "long", "alice", 20_000), Some(1));
    assert_eq!(acquire(&mut con, "short", "alice", 400), Some(1));
    hook(&mut con, 3_600_000);
    let v = inspect(&mut con, "long").unwrap();
    assert!(
        v.held && v.pttl > 15_000,
        "+1 h expired a live lease: {v:?}"
    );
    assert_eq!(acquire(&mut con, "long", "bob", 1_000), None);
    // Persisted state is encoded and decoded with the same (jumped) clock.
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let v = inspect(&mut con, "long").unwrap();
    assert!(v.held && v.pttl > 15_000, "after reload with +1 h: {v:?}");
    // A backwards jump does not lengthen a lease either.
    hook(&mut con, -3_600_000);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !inspect(&mut con, "short").unwrap().held,
        "-1 h lengthened a lease"
    );
    assert_eq!(acquire(&mut con, "short", "bob", 1_000), Some(2));
    assert!(inspect(&mut con, "long").unwrap().held);
}
