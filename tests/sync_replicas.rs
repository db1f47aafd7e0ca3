//! The replica-sync check on real processes (DESIGN §13): what a master
//! takes and refuses under `redlock.sync-replicas`, what survives its
//! restart, and how a promoted replica starts (at once, for the rest of its
//! master's hold, or with the guard).

mod common;

use std::time::Duration;

use common::*;
use redlock_testkit::NodeBuilder;

/// A node with the check at `r` and the restart guard on (the promotion
/// rule is about that guard).
fn checked(r: u64) -> NodeBuilder {
    Node::builder()
        .config("redlock.sync-replicas", &r.to_string())
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "60000")
}

/// A master outside any guard window (restart-grace-ms 0).
fn master(r: u64) -> Node {
    Node::builder()
        .config("redlock.sync-replicas", &r.to_string())
        .config("redlock.max-ttl-ms", "60000")
        .start()
}

/// A replica of `master` with the check at `r`, online at the master (its
/// own link comes up a moment before the master counts it online).
fn replica_of(master: &Node, r: u64) -> Node {
    let replica = start_replica(master, checked(r).config("redlock.restart-grace-ms", "0"));
    let mut con = replica.connection();
    config_set(&mut con, "redlock.restart-grace-ms", "-1");
    let mut m = master.connection();
    let online = format!("port={},state=online", replica.port());
    wait_until(
        Duration::from_secs(10),
        "the replica online at its master",
        || {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap();
            info.contains(&online)
        },
    );
    replica
}

/// [`acquire_synced`] (tests/common) that must be answered: the token and
/// the acknowledgements.
fn acquire_synced_ok(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    r: u64,
) -> (Option<i64>, i64) {
    acquire_synced(con, key, owner, ttl, r).unwrap()
}

/// Waits until the replica applied a fresh announcement of its master.
fn wait_current(con: &mut redis::Connection) {
    wait_until(Duration::from_secs(10), "a fresh announcement", || {
        redlock_info(con, "sync_current") == 1
    });
}

#[test]
fn a_write_must_state_the_nodes_r_and_is_refused_with_it() {
    let off = Node::start();
    let mut o = off.connection();
    let err = error_of(
        &mut o,
        &[b"REDLOCK.ACQUIRE", b"k", b"me", b"1000", b"SYNC", b"2"],
    );
    assert!(
        err.starts_with(
            "SYNCREPLICAS 0 redlock.sync-replicas is 0 on this node but the command stated 2"
        ),
        "{err}"
    );
    assert_eq!(
        inspect(&mut o, "k"),
        None,
        "a refused ACQUIRE created the key"
    );
    // SYNC 0 is the same as none.
    let token: Option<i64> = redis::cmd("REDLOCK.ACQUIRE")
        .arg("k")
        .arg("me")
        .arg(1000)
        .arg("SYNC")
        .arg(0)
        .query(&mut o)
        .unwrap();
    assert_eq!(token, Some(1));

    let m = master(1);
    let replica = replica_of(&m, 1);
    let mut c = m.connection();
    for args in [
        &[&b"REDLOCK.ACQUIRE"[..], b"k", b"me", b"1000"][..],
        &[b"REDLOCK.ACQUIRE", b"k", b"me", b"1000", b"SYNC", b"2"],
        &[b"REDLOCK.EXTEND", b"k", b"me", b"1000"],
        &[b"REDLOCK.FENCE", b"k", b"me", b"5"],
    ] {
        let err = error_of(&mut c, args);
        assert!(err.starts_with("SYNCREPLICAS 1 "), "{args:?}: {err}");
        assert!(err.contains("send SYNC 1"), "{err}");
    }
    assert_eq!(inspect(&mut c, "k"), None);
    let (token, acks) = acquire_synced_ok(&mut c, "k", "me", 5_000, 1);
    assert_eq!((token, acks), (Some(1), 1));
    // EXTEND and FENCE state it too; RELEASE needs nothing.
    let extended: i64 = redis::cmd("REDLOCK.EXTEND")
        .arg("k")
        .arg("me")
        .arg(5_000)
        .arg("SYNC")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(extended, 1);
    let fenced: Option<i64> = redis::cmd("REDLOCK.FENCE")
        .arg("k")
        .arg("me")
        .arg(7)
        .arg("SYNC")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(fenced, Some(7));
    assert_eq!(release(&mut c, "k", "me"), 1);
    assert_eq!(redlock_info(&mut c, "sync_refused_stated"), 4);
    drop(replica);
}

#[test]
fn a_master_counts_every_replica_of_its_life_across_restarts() {
    let mut m = master(1);
    let mut c = m.connection();
    let mut a = replica_of(&m, 1);
    wait_current(&mut a.connection());
    assert_eq!(
        acquire_synced_ok(&mut c, "k", "one", 5_000, 1),
        (Some(1), 1)
    );
    let b = replica_of(&m, 1);
    let err = error_of(
        &mut c,
        &[b"REDLOCK.ACQUIRE", b"k2", b"me", b"1000", b"SYNC", b"1"],
    );
    assert!(
        err.starts_with("TOOMANYREPLICAS this master has had 2 replicas"),
        "{err}"
    );
    assert!(err.contains(&format!("127.0.0.1:{}", a.port())), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{}", b.port())), "{err}");
    // Extensions and write-backs too: a lease lengthened on one replica only
    // is as bad as a grant.
    let err = error_of(
        &mut c,
        &[b"REDLOCK.EXTEND", b"k", b"one", b"9000", b"SYNC", b"1"],
    );
    assert!(err.starts_with("TOOMANYREPLICAS"), "{err}");
    // The one that left still counts: it may still be promoted.
    a.kill();
    wait_until(Duration::from_secs(10), "replica a offline", || {
        redlock_info(&mut c, "sync_replicas_online") == 1
    });
    let err = error_of(
        &mut c,
        &[b"REDLOCK.ACQUIRE", b"k2", b"me", b"1000", b"SYNC", b"1"],
    );
    assert!(
        err.starts_with("TOOMANYREPLICAS this master has had 2"),
        "{err}"
    );
    // ... also after the master restarted.
    m.restart();
    let mut c = m.connection();
    wait_until(Duration::from_secs(20), "replica b back", || {
        redlock_info(&mut c, "sync_replicas_online") == 1
    });
    let err = error_of(
        &mut c,
        &[b"REDLOCK.ACQUIRE", b"k2", b"me", b"1000", b"SYNC", b"1"],
    );
    assert!(
        err.starts_with("TOOMANYREPLICAS this master has had 2"),
        "{err}"
    );
    let list: Vec<(String, i64)> = redis::cmd("REDLOCK.REPLICAS").query(&mut c).unwrap();
    assert_eq!(
        list,
        vec![
            (
                format!("127.0.0.1:{}", a.port().min(b.port())),
                i64::from(a.port() > b.port())
            ),
            (
                format!("127.0.0.1:{}", a.port().max(b.port())),
                i64::from(a.port() < b.port())
            ),
        ]
    );
    // FORGET refuses an online replica, forgets a gone one.
    let err = error_of(
        &mut c,
        &[
            b"REDLOCK.REPLICAS",
            b"FORGET",
            format!("127.0.0.1:{}", b.port()).as_bytes(),
        ],
    );
    assert!(err.contains("is connected"), "{err}");
    let forgot: i64 = redis::cmd("REDLOCK.REPLICAS")
        .arg("FORGET")
        .arg(format!("127.0.0.1:{}", a.port()))
        .query(&mut c)
        .unwrap();
    assert_eq!(forgot, 1);
    let (token, acks) = acquire_synced_ok(&mut c, "k2", "me", 5_000, 1);
    assert_eq!(acks, 1);
    assert!(token.is_some());
}

#[test]
fn fewer_replicas_online_than_r_refuses_before_granting() {
    let m = master(2);
    let mut c = m.connection();
    let a = replica_of(&m, 2);
    let mut b = replica_of(&m, 2);
    assert_eq!(acquire_synced_ok(&mut c, "k", "me", 5_000, 2), (Some(1), 2));
    b.kill();
    wait_until(Duration::from_secs(10), "b offline", || {
        let err = error_of(
            &mut c,
            &[b"REDLOCK.ACQUIRE", b"k2", b"me", b"1000", b"SYNC", b"2"],
        );
        err.starts_with("NOSYNC only 1 of the 2 replicas")
    });
    assert_eq!(inspect(&mut c, "k2"), None);
    // A frozen replica stays connected: the grant happens and WAIT says
    // what reached the replicas (the client then releases it).
    a.pause();
    let (token, acks) = {
        b.restart();
        wait_until(Duration::from_secs(20), "b back", || {
            redlock_info(&mut c, "sync_replicas_online") == 2
        });
        let (t, acks): (Option<i64>, i64) = redis::pipe()
            .cmd("REDLOCK.ACQUIRE")
            .arg("k3")
            .arg("me")
            .arg(1000)
            .arg("SYNC")
            .arg(2)
            .cmd("WAIT")
            .arg(2)
            .arg(300)
            .query(&mut c)
            .unwrap();
        (t, acks)
    };
    a.resume();
    assert!(token.is_some());
    assert_eq!(acks, 1, "the frozen replica acknowledged");
}

/// Points the node behind `con` at `master` and waits for its link.
fn follow(con: &mut redis::Connection, master: &Node) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query(con)
        .unwrap();
    wait_for_link(con);
}

#[test]
fn a_replica_the_check_vouches_for_grants_at_once_when_promoted() {
    let m = master(1);
    let mut c = m.connection();
    let replica = replica_of(&m, 1);
    let mut r = replica.connection();
    wait_current(&mut r);
    assert_eq!(
        acquire_synced_ok(&mut c, "held", "alice", 30_000, 1),
        (Some(1), 1)
    );
    promote(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_last_promotion"), 1);
    assert_eq!(redlock_info(&mut r, "grace_active"), 0);
    // No replica yet: refused by the check, not by the guard.
    let err = error_of(
        &mut r,
        &[b"REDLOCK.ACQUIRE", b"fresh", b"bob", b"1000", b"SYNC", b"1"],
    );
    assert!(err.starts_with("NOSYNC"), "{err}");
    // The old master comes back as its replica: grants at once, and the
    // lock the old master granted is held for anyone else.
    follow(&mut c, &replica);
    wait_until(Duration::from_secs(10), "old master online", || {
        redlock_info(&mut r, "sync_replicas_online") == 1
    });
    assert_eq!(
        acquire_synced_ok(&mut r, "fresh", "bob", 1_000, 1),
        (Some(1), 1)
    );
    assert_eq!(
        acquire_synced_ok(&mut r, "held", "bob", 1_000, 1),
        (None, 1)
    );
    let extended: i64 = redis::cmd("REDLOCK.EXTEND")
        .arg("held")
        .arg("alice")
        .arg(30_000)
        .arg("SYNC")
        .arg(1)
        .query(&mut r)
        .unwrap();
    assert_eq!(extended, 1);
}

fn grace_of(con: &mut redis::Connection) -> String {
    error_of(
        con,
        &[b"REDLOCK.ACQUIRE", b"probe", b"p", b"1000", b"SYNC", b"1"],
    )
}

#[test]
fn a_replica_with_another_r_keeps_the_guard() {
    let m = master(1);
    let replica = replica_of(&m, 2);
    let mut r = replica.connection();
    wait_current(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_master_replicas"), 1);
    promote(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_last_promotion"), 3);
    let err = error_of(
        &mut r,
        &[b"REDLOCK.ACQUIRE", b"probe", b"p", b"1000", b"SYNC", b"2"],
    );
    assert!(
        err.starts_with("GRACE node was promoted to master"),
        "{err}"
    );
}

#[test]
fn a_replica_restarted_and_promoted_before_it_synced_keeps_the_guard() {
    let mut m = master(1);
    let mut replica = replica_of(&m, 1);
    wait_current(&mut replica.connection());
    // Its master is gone; it restarts from its own files and cannot sync.
    m.kill();
    replica.restart_with(&[("redlock.restart-grace-ms", "0")]);
    let mut r = replica.connection();
    config_set(&mut r, "redlock.restart-grace-ms", "-1");
    assert_eq!(redlock_info(&mut r, "sync_current"), 0);
    promote(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_last_promotion"), 3);
    // Taught by M (its file), but no announcement of M since it restarted:
    // it cannot tell whether M was inside a longer window (an untaught
    // promotion's day), so it guards a day (`sync_rule::taught_at_promotion`;
    // before, its longest lease).
    assert_eq!(redlock_info(&mut r, "grace_window_ms"), 86_400_000);
    let err = grace_of(&mut r);
    assert!(
        err.starts_with("GRACE node was promoted to master"),
        "{err}"
    );
}

#[test]
fn a_master_inside_its_window_hands_the_rest_of_it_to_its_replicas() {
    // A master restarted without durable persistence: a window of 60 s.
    let m = Node::builder()
        .config("redlock.sync-replicas", "1")
        .config("redlock.max-ttl-ms", "60000")
        .config("redlock.restart-grace-ms", "-1")
        .start();
    let mut c = m.connection();
    assert_eq!(redlock_info(&mut c, "grace_active"), 1);
    let replica = replica_of(&m, 1);
    let mut r = replica.connection();
    wait_current(&mut r);
    let hold = redlock_info(&mut r, "sync_hold_left_ms");
    assert!(hold > 50_000 && hold <= 60_000, "hold {hold}");
    promote(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_last_promotion"), 2);
    let err = grace_of(&mut r);
    assert!(
        err.starts_with("GRACE node was promoted to master"),
        "{err}"
    );
    let left = redlock_info(&mut r, "grace_remaining_ms");
    assert!(left <= hold && left > 45_000, "left {left}, hold {hold}");
}

#[test]
fn raising_r_from_zero_holds_for_the_leases_granted_without_the_check() {
    let m = master(0);
    let mut c = m.connection();
    let replica = replica_of(&m, 0);
    let mut r = replica.connection();
    assert_eq!(acquire(&mut c, "unchecked", "alice", 30_000), Some(1));
    config_set(&mut r, "redlock.sync-replicas", "1");
    config_set(&mut c, "redlock.sync-replicas", "1");
    wait_current(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_master_replicas"), 1);
    let hold = redlock_info(&mut r, "sync_hold_left_ms");
    assert!(hold > 50_000, "hold {hold}");
    promote(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_last_promotion"), 2);
    assert!(grace_of(&mut r).starts_with("GRACE"));
}

/// The commands the node on `port` runs from now on (`MONITOR`), read until
/// `done` says enough or `timeout` passes.
fn monitor(
    port: u16,
    timeout: Duration,
    done: impl Fn(&[String]) -> bool + 'static,
) -> MonitorLines {
    use std::io::{BufRead, BufReader, Write};
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.write_all(b"MONITOR\r\n").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut reader = BufReader::new(sock);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "+OK");
    MonitorLines {
        reader,
        timeout,
        done: Box::new(done),
    }
}

/// Says when a `MONITOR` reader has seen enough.
type Enough = Box<dyn Fn(&[String]) -> bool>;

/// A `MONITOR` connection and when to stop reading it.
struct MonitorLines {
    reader: std::io::BufReader<std::net::TcpStream>,
    timeout: Duration,
    done: Enough,
}

impl MonitorLines {
    fn collect(mut self) -> Vec<String> {
        use std::io::BufRead;
        let deadline = std::time::Instant::now() + self.timeout;
        let mut lines = Vec::new();
        while std::time::Instant::now() < deadline && !(self.done)(&lines) {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => lines.push(line),
                Err(_) => {}
            }
        }
        lines
    }
}

#[test]
fn lowering_r_to_zero_reaches_the_replicas_before_any_unchecked_write() {
    let m = master(1);
    let mut c = m.connection();
    let replica = replica_of(&m, 1);
    let mut r = replica.connection();
    wait_current(&mut r);
    let grant = |l: &String| l.contains("\"REDLOCK.APPLY\" \"k\" \"v");
    let announcement = |l: &String| l.contains("\"sync\" ") && l.contains(" \"0\" ");
    let watch = monitor(replica.port(), Duration::from_secs(10), move |lines| {
        lines.iter().any(grant) && lines.iter().any(announcement)
    });
    // CONFIG SET and the first unchecked grant in one pipeline (one read on
    // the master, before any timer): the grant's effect must not reach the
    // replica before the new R does. The grant is refused until every
    // replica applied the new R (review37 finding 1: a replica that lags
    // would otherwise be promoted at once without it), then taken.
    let (_, first): ((), redis::Value) = redis::pipe()
        .cmd("CONFIG")
        .arg("SET")
        .arg("redlock.sync-replicas")
        .arg(0)
        .cmd("REDLOCK.ACQUIRE")
        .arg("k")
        .arg("me")
        .arg(30_000)
        .ignore_errors()
        .query(&mut c)
        .unwrap();
    assert!(
        matches!(&first, redis::Value::ServerError(e) if e.code() == "NOSYNC"),
        "{first:?}"
    );
    let mut token = None;
    wait_until(Duration::from_secs(10), "the lowering complete", || {
        token = acquire_result(&mut c, "k", "me", 30_000).ok().flatten();
        token.is_some()
    });
    assert_eq!(token, Some(1));
    let lines = watch.collect();
    let at = |f: &dyn Fn(&String) -> bool| lines.iter().position(f);
    let (said, granted) = (at(&announcement), at(&grant));
    assert!(
        said.is_some() && granted.is_some() && said < granted,
        "the replica saw the grant before the R 0 announcement: {lines:#?}"
    );
    assert_eq!(redlock_info(&mut r, "sync_master_replicas"), 0);
    promote(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_last_promotion"), 3);
}

#[test]
fn a_replayed_backlog_does_not_make_a_restarted_replica_current() {
    let m = master(1);
    let mut c = m.connection();
    let mut replica = replica_of(&m, 1);
    let mut r = replica.connection();
    wait_current(&mut r);
    // The replica's files at offset o1; then an announcement it applies
    // (R changes), then it dies and comes back from the files.
    let _: () = redis::cmd("SAVE").query(&mut r).unwrap();
    config_set(&mut r, "redlock.sync-replicas", "2");
    config_set(&mut c, "redlock.sync-replicas", "2");
    wait_until(Duration::from_secs(10), "the R 2 announcement", || {
        redlock_info(&mut r, "sync_master_replicas") == 2
    });
    let fresh_before = redlock_info(&mut r, "sync_fresh");
    replica.kill();
    replica.restart_with(&[
        ("redlock.restart-grace-ms", "0"),
        ("redlock.sync-replicas", "2"),
    ]);
    let mut r = replica.connection();
    wait_for_link(&mut r);
    wait_current(&mut r);
    let log = std::fs::read_to_string(replica.dir().join("redis.log")).unwrap();
    assert!(
        log.contains("Successful partial resynchronization"),
        "the restart did not resync partially:
{}",
        replica.log_tail()
    );
    // The R 2 announcement came again from the backlog, and did not count;
    // the one sent when the replica came back online did.
    assert_eq!(redlock_info(&mut r, "sync_stale"), 1);
    assert_eq!(redlock_info(&mut r, "sync_fresh"), 1);
    assert!(fresh_before >= 2);
}

/// A replica cut off from its master for a whole longest lease keeps the
/// guard (its master may have come back on a new disk, waited out its
/// restart window and granted with other replicas); cut off for less, it
/// grants at once.
#[test]
fn a_replica_cut_off_for_a_whole_lease_keeps_the_guard() {
    for (wait_ms, expected) in [(0u64, 1u64), (1_500, 3)] {
        let mut m = Node::builder()
            .config("redlock.sync-replicas", "1")
            .config("redlock.max-ttl-ms", "1000")
            .start();
        let replica = start_replica(
            &m,
            Node::builder()
                .config("redlock.sync-replicas", "1")
                .config("redlock.max-ttl-ms", "1000")
                .config("redlock.restart-grace-ms", "0"),
        );
        let mut r = replica.connection();
        config_set(&mut r, "redlock.restart-grace-ms", "-1");
        wait_current(&mut r);
        m.kill();
        wait_until(Duration::from_secs(10), "the link down", || {
            !link_up(&mut r)
        });
        std::thread::sleep(Duration::from_millis(wait_ms));
        promote(&mut r);
        assert_eq!(
            redlock_info(&mut r, "sync_last_promotion"),
            expected,
            "promoted {wait_ms} ms after the link went down"
        );
    }
}

/// R raised on the master before the replicas (and before a replica is
/// added): writes fail until the group has R replicas; a replica whose own
/// R still differs from its master's keeps the guard when promoted, and
/// grants at once once its R matches.
#[test]
fn a_replica_added_while_r_is_raised() {
    let m = master(1);
    let mut c = m.connection();
    let a = replica_of(&m, 1);
    let mut ra = a.connection();
    wait_current(&mut ra);
    config_set(&mut c, "redlock.sync-replicas", "2");
    let err = error_of(
        &mut c,
        &[b"REDLOCK.ACQUIRE", b"k", b"me", b"1000", b"SYNC", b"2"],
    );
    assert!(err.starts_with("NOSYNC only 1 of the 2"), "{err}");
    let b = replica_of(&m, 2);
    let mut rb = b.connection();
    wait_current(&mut rb);
    assert_eq!(
        acquire_synced_ok(&mut c, "k", "me", 30_000, 2),
        (Some(1), 2)
    );
    // a still says R 1 while its master says 2: promoted, the guard.
    wait_until(Duration::from_secs(10), "the R 2 announcement at a", || {
        redlock_info(&mut ra, "sync_master_replicas") == 2
    });
    promote(&mut ra);
    assert_eq!(redlock_info(&mut ra, "sync_last_promotion"), 3);
    // b has R 2 like its master: promoted at once, the lock still held.
    promote(&mut rb);
    assert_eq!(redlock_info(&mut rb, "sync_last_promotion"), 1);
    assert!(inspect(&mut rb, "k").is_some_and(|v| v.held));
}

/// A replica that left (its link cut) and came back is current again once
/// its master announced to it after it came back, and is promoted at once
/// with every lock.
#[test]
fn a_replica_that_left_and_came_back() {
    let m = master(1);
    let mut c = m.connection();
    let replica = replica_of(&m, 1);
    let mut r = replica.connection();
    wait_current(&mut r);
    let fresh = redlock_info(&mut r, "sync_fresh");
    // The replica drops its link (as after a network cut) and comes back.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut c)
        .map(|_: i64| ())
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        "a fresh announcement after the return",
        || redlock_info(&mut r, "sync_fresh") > fresh,
    );
    assert_eq!(
        acquire_synced_ok(&mut c, "k", "me", 30_000, 1),
        (Some(1), 1)
    );
    promote(&mut r);
    assert_eq!(redlock_info(&mut r, "sync_last_promotion"), 1);
    assert!(inspect(&mut r, "k").is_some_and(|v| v.held));
}
