//! The promotion rules of the lease-ack rule (`src/core/lease_ack_rule.rs`,
//! `src/core/teacher.rs`), each played on real processes where an
//! adversarial read found a way past the first form of the rule: a promoted
//! replica guarding for 1 s while a 5 s lease of its old master runs (two
//! holders). Each test asserts the safe outcome: the long lease is refused,
//! or the promoted replica grants no earlier than the lease's end.
//!
//! - A new master starts from what every replica of the old master
//!   acknowledged, and is held back while its replica set is empty
//!   (`failover_then_raise_…`), waiting for its own replicas of its life as
//!   a replica (`replica_of_a_replica_…`): mutant `promotion-trusts-longest`.
//! - Taught means taught by the master followed now: not by another master
//!   (`replica_taught_elsewhere_…`), not by the node's own data
//!   (`standalone_with_own_data_…`, `own_data_teaches_nothing_…`): mutant
//!   `taught-by-any`.
//! - Replicas sharing one address cannot be told apart
//!   (`replicas_sharing_an_address_…`): mutant `ambiguous-replicas-counted`.
//! - The module's per-node files are named per node, not per directory
//!   (`replica_sharing_the_masters_dir_…`): mutant `shared-node-files`.
//!
//! Each mutant puts its hole back; `REDLOCK_TEST_MUTANTS=name` makes the
//! tests of that hole fail (the nodes read it at load).

mod common;

use std::time::{Duration, Instant};

use common::*;

fn replica_builder() -> redlock_testkit::NodeBuilder {
    Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "1000")
}

/// The promoted node grants `key` no earlier than 5 s after the other
/// holder's grant (or not at all within 6 s of it).
fn assert_no_second_holder(con: &mut redis::Connection, key: &str, granted_a: Instant, who: &str) {
    let until = granted_a + Duration::from_millis(6_000);
    match first_grant(con, key, "owner-b", 1000, until) {
        None => eprintln!("{who} did not grant {key} within 6 s of the 5 s lease"),
        Some(granted_b) => {
            let gap = granted_b - granted_a;
            eprintln!("{who} granted {key} {gap:?} after the 5 s lease");
            assert!(
                gap >= Duration::from_millis(5_000),
                "two holders: gap {gap:?}"
            );
        }
    }
}

/// A long lease asked for over `for_ms`: granted (when), or refused all
/// along (`NOSYNC`, the last error).
fn long_lease_over(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    for_ms: u64,
) -> Result<Instant, redis::RedisError> {
    let until = Instant::now() + Duration::from_millis(for_ms);
    loop {
        match acquire_result(con, key, owner, 5_000) {
            Ok(Some(_)) => return Ok(Instant::now()),
            Ok(None) => panic!("held by someone"),
            Err(e) => {
                assert_eq!(e.code(), Some("NOSYNC"), "{e}");
                if Instant::now() >= until {
                    return Err(e);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn acquire_until_granted(con: &mut redis::Connection, key: &str, owner: &str, ttl: u64) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match acquire_result(con, key, owner, ttl) {
            Ok(Some(_)) => return Instant::now(),
            Ok(None) => panic!("held by someone"),
            Err(e) => assert!(matches!(e.code(), Some("GRACE") | Some("NOSYNC")), "{e}"),
        }
        assert!(Instant::now() < deadline, "never granted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A → B, C (both learned 1 s). A dies, B is promoted while C still
/// follows dead A; `max-ttl-ms` is raised on B only. B's replica set is
/// empty, but its life began by promotion: a 5 s lease waits until a
/// replica acknowledged it (C, promoted next, knows only 1 s).
#[test]
fn failover_then_raise_on_new_master_before_other_replica_reconnects() {
    let mut a = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let b = start_replica(&a, replica_builder());
    let c = start_replica(&a, replica_builder());
    // A lease on A so that both replicas learn 1000 (they are taught).
    let mut am = a.connection();
    assert!(acquire(&mut am, "warm", "x", 1000).is_some());
    let _: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut am).unwrap();
    for n in [&b, &c] {
        let mut r = n.connection();
        wait_until(Duration::from_secs(20), "learned 1 s", || {
            redlock_info(&mut r, "longest_lease_ms") >= 1_000
        });
    }
    drop(am);
    // A dies; B is promoted; C is not re-pointed yet (still following dead A).
    a.kill();
    let mut bm = b.connection();
    promote(&mut bm);
    // B guards its own window, then the operator raises max-ttl-ms on the
    // master only (the supported order per the claim), and client 1 takes L.
    let _ = acquire_until_granted(&mut bm, "probe", "p", 1000);
    config_set(&mut bm, "redlock.max-ttl-ms", "5000");
    let got = long_lease_over(&mut bm, "L", "owner-a", 2_500);
    eprintln!(
        "B ACQUIRE L 5000 -> {got:?}; B acked_ms: {:?}",
        info_field(&mut bm, "redlock", "redlock_longest_lease_acked_ms")
    );
    let granted_a = match got {
        Ok(at) => at,
        Err(e) => {
            // Held: the refusal says what it waits for.
            assert!(e.to_string().contains("a replica of this master"), "{e}");
            return;
        }
    };
    drop(bm);
    let mut b = b;
    b.kill();
    // C promoted (Sentinel's candidate: a replica of the group).
    let mut cm = c.connection();
    promote(&mut cm);
    assert_no_second_holder(&mut cm, "L", granted_a, "C");
}

/// A node taught by one master (C learned 1000 from Q) is pointed at
/// another master M (no replica so far, max-ttl-ms raised with CONFIG SET).
/// While C waits for its first full sync (diskless delay), M grants 5 s;
/// M dies; C is promoted and guards only its 1 s.
///
/// C is not taught by M (its teacher is Q): promoted, it guards for the
/// longest lease any node grants.
#[test]
fn replica_taught_elsewhere_promoted_during_first_sync_with_new_master() {
    let mut q = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let c = start_replica(&q, replica_builder());
    let mut qm = q.connection();
    assert!(acquire(&mut qm, "warm", "x", 1000).is_some());
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut qm).unwrap();
    let mut cc = c.connection();
    wait_until(Duration::from_secs(20), "learned 1 s", || {
        redlock_info(&mut cc, "longest_lease_ms") >= 1_000
    });
    drop(qm);
    let mut m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .config("repl-diskless-sync", "yes")
        .config("repl-diskless-sync-delay", "5")
        // M grants while C syncs, as before the rules that wait for
        // syncing replicas (`lease_ack_rule::waited_for`) and, on a master
        // with no file (fresh), for one joining (`LeaseAck::check_joining`;
        // without this switch M refused, and the test returned early since
        // that rule landed): this test is of the teacher rule behind them.
        .env(
            "REDLOCK_TEST_MUTANTS",
            "syncing-replicas-uncounted,fresh-trusts-joining",
        )
        .start();
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m.port())
        .query(&mut cc)
        .unwrap();
    q.kill();
    // C is in M's INFO (waiting for the bgsave) but not online.
    wait_until(Duration::from_secs(10), "C connected to M", || {
        info_field(&mut mm, "replication", "connected_slaves").as_deref() == Some("1")
    });
    std::thread::sleep(Duration::from_millis(300));
    let got = acquire_result(&mut mm, "L", "owner-a", 5_000);
    eprintln!("M ACQUIRE L 5000 -> {got:?}");
    let granted_a = match got {
        Ok(Some(_)) => Instant::now(),
        other => {
            eprintln!("held (refused): {other:?}");
            return;
        }
    };
    drop(mm);
    m.kill();
    let mut cc = c.connection();
    let taught = redlock_info(&mut cc, "taught_by_master");
    promote(&mut cc);
    assert_no_second_holder(&mut cc, "L", granted_a, "C");
    // C was not taught by M (its teacher is Q).
    assert_eq!(taught, 0);
}

/// Three replicas behind one announced address: A and B were online
/// together (two identities, `ip:X` and `ip#2:X`); A drops out (frozen);
/// C joins at the same address. B and C now fill both identities, so a
/// raised max-ttl-ms is "acknowledged by every replica of the life" while A
/// never heard of it. M dies, A is promoted and guards its 1 s.
///
/// Replicas at one address cannot be told apart: a lease longer than what
/// every replica acknowledged is refused while the life has such an
/// identity, and the refusal names it.
#[test]
fn replicas_sharing_an_address_let_one_that_left_be_forgotten() {
    let shared = redlock_testkit::free_port().to_string();
    let rb = || replica_builder().config("replica-announce-port", &shared);
    let mut m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let a = start_replica(&m, rb());
    let b = start_replica(&m, rb());
    let mut mm = m.connection();
    assert!(acquire(&mut mm, "warm", "x", 1000).is_some());
    let _: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut mm).unwrap();
    for n in [&a, &b] {
        let mut r = n.connection();
        wait_until(Duration::from_secs(20), "learned 1 s", || {
            redlock_info(&mut r, "longest_lease_ms") >= 1_000
        });
    }
    eprintln!(
        "M replication: {:?}",
        info_field(&mut mm, "replication", "slave1")
    );
    // A leaves (frozen, its link cut by the master).
    a.pause();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut mm)
        .unwrap();
    wait_until(Duration::from_secs(20), "B back, A gone", || {
        info_field(&mut mm, "replication", "connected_slaves").as_deref() == Some("1")
            && info_field(&mut mm, "replication", "slave0").is_some_and(|l| l.contains("online"))
    });
    let c = start_replica(&m, rb());
    wait_until(Duration::from_secs(20), "B and C online", || {
        info_field(&mut mm, "replication", "connected_slaves").as_deref() == Some("2")
    });
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    let got = long_lease_over(&mut mm, "L", "owner-a", 3_000);
    eprintln!(
        "M ACQUIRE L 5000 -> {got:?}; acked_ms {:?}",
        info_field(&mut mm, "redlock", "redlock_longest_lease_acked_ms")
    );
    let granted_a = match got {
        Ok(at) => at,
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("cannot be told apart"), "{text}");
            assert!(text.contains(&format!("127.0.0.1#2:{shared}")), "{text}");
            assert!(text.contains("replica-announce-port"), "{text}");
            return;
        }
    };
    drop(mm);
    m.kill();
    drop(c);
    drop(b);
    a.resume();
    let mut ac = a.connection();
    promote(&mut ac);
    assert_no_second_holder(&mut ac, "L", granted_a, "A");
}

/// A replica of a replica: M → X → Y. Y's link to X is cut (Y frozen)
/// before M's max-ttl-ms is raised; M waits only for X (its replica). M
/// dies, X is promoted (knows 5 s, guards 5 s, then starts its life as
/// master with 5 s "acknowledged", LeaseAck::starting) and grants 5 s at
/// once. X dies, Y is promoted: it guards its 1 s.
///
/// X's life as master starts from 0 until Y, its replica as a replica,
/// acknowledged an announcement of X (or is forgotten).
#[test]
fn replica_of_a_replica_cut_off_before_the_raise() {
    let mut m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let mut x = start_replica(&m, replica_builder());
    let y = start_replica(&x, replica_builder());
    let mut mm = m.connection();
    assert!(acquire(&mut mm, "warm", "x", 1000).is_some());
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mm).unwrap();
    let mut yc = y.connection();
    wait_until(Duration::from_secs(20), "Y learned 1 s", || {
        redlock_info(&mut yc, "longest_lease_ms") >= 1_000
    });
    drop(yc);
    y.pause();
    let mut xc = x.connection();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut xc)
        .unwrap();
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    assert!(acquire_acknowledged(&mut mm, "L0", "o", 5_000).is_some());
    drop(mm);
    m.kill();
    promote(&mut xc);
    // X's own max-ttl-ms is 1 s; the operator raises it on the new master
    // only (it already knows 5 s from M).
    config_set(&mut xc, "redlock.max-ttl-ms", "5000");
    // X guards 5 s (it learned 5 s from M), then waits for Y.
    let until = Instant::now() + Duration::from_millis(8_000);
    let got = first_grant(&mut xc, "L", "owner-a", 5_000, until);
    eprintln!(
        "X ACQUIRE L 5000 -> {got:?}; X acked_ms {:?}, longest {:?}",
        info_field(&mut xc, "redlock", "redlock_longest_lease_acked_ms"),
        info_field(&mut xc, "redlock", "redlock_longest_lease_ms")
    );
    let Some(granted_a) = got else {
        // Held: Y is waited for by name.
        let e = acquire_result(&mut xc, "L", "owner-a", 5_000).unwrap_err();
        assert!(e.to_string().contains(&format!(":{}", y.port())), "{e}");
        return;
    };
    drop(xc);
    x.kill();
    y.resume();
    let mut yc = y.connection();
    promote(&mut yc);
    assert_no_second_holder(&mut yc, "L", granted_a, "Y");
}

/// A node's own data teaches nothing; a record of the master it follows
/// does, also across a restart that follows the same master; pointed at
/// another master it is untaught again.
#[test]
fn own_data_teaches_nothing_and_the_teacher_survives_a_restart() {
    let mut s = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .config("appendonly", "yes")
        .start();
    let mut sc = s.connection();
    assert!(acquire(&mut sc, "warm", "x", 1000).is_some());
    drop(sc);
    s.restart();
    let learned = s.dir().join(format!("redlock-lease-learned-{}", s.port()));
    let mut sc = s.connection();
    assert_eq!(redlock_info(&mut sc, "taught_by_master"), 0);
    assert!(!learned.exists());
    // A replica of M: taught by M once its sync is done.
    let m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m.port())
        .query(&mut sc)
        .unwrap();
    wait_until(Duration::from_secs(20), "taught by M", || {
        redlock_info(&mut sc, "taught_by_master") == 1
    });
    let text = std::fs::read_to_string(&learned).unwrap();
    assert!(
        text.starts_with(&format!("teacher 127.0.0.1:{} ", m.port())),
        "{text}"
    );
    drop(sc);
    // Restarted following the same master: still taught, before any sync.
    let replicaof = format!("127.0.0.1 {}", m.port());
    s.restart_with(&[("replicaof", replicaof.as_str())]);
    let mut sc = s.connection();
    assert_eq!(redlock_info(&mut sc, "taught_by_master"), 1);
    // Pointed at another master: untaught until a record of that one.
    let q = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("repl-diskless-sync", "yes")
        .config("repl-diskless-sync-delay", "5")
        .start();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(q.port())
        .query(&mut sc)
        .unwrap();
    assert_eq!(redlock_info(&mut sc, "taught_by_master"), 0);
}

/// S was only ever a standalone master (its own data made it "taught"
/// under the first rule). Pointed at M (max-ttl-ms raised with CONFIG SET,
/// no replica so far), promoted before its first full sync completed: it
/// is not taught by M and guards for the longest lease any node grants.
#[test]
fn standalone_with_own_data_promoted_during_first_sync() {
    let mut s = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .config("appendonly", "yes")
        .start();
    let mut sc = s.connection();
    assert!(acquire(&mut sc, "warm", "x", 1000).is_some());
    drop(sc);
    s.restart_with(&[("redlock.restart-grace-ms", "-1")]);
    let mut m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .config("repl-diskless-sync", "yes")
        .config("repl-diskless-sync-delay", "5")
        // M grants while S syncs, as before the rules that wait for
        // syncing replicas (`lease_ack_rule::waited_for`) and, on a master
        // with no file (fresh), for one joining (`LeaseAck::check_joining`,
        // which sees its PSYNC at once): this test is of the teacher rule
        // behind them.
        .env(
            "REDLOCK_TEST_MUTANTS",
            "syncing-replicas-uncounted,fresh-trusts-joining",
        )
        .start();
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    let mut sc = s.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m.port())
        .query(&mut sc)
        .unwrap();
    wait_until(Duration::from_secs(10), "S connected to M", || {
        info_field(&mut mm, "replication", "connected_slaves").as_deref() == Some("1")
    });
    let got = acquire_result(&mut mm, "L", "owner-a", 5_000);
    eprintln!("M ACQUIRE L 5000 -> {got:?}");
    let granted_a = Instant::now();
    assert!(matches!(got, Ok(Some(_))));
    drop(mm);
    m.kill();
    eprintln!(
        "S taught by M: {}",
        redlock_info(&mut sc, "taught_by_master")
    );
    promote(&mut sc);
    assert_no_second_holder(&mut sc, "L", granted_a, "S");
}

/// The control: the same with a fresh disk (untaught under either rule).
#[test]
fn control_fresh_disk_promoted_during_first_sync() {
    let mut s = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .config("appendonly", "yes")
        .start();
    let mut sc = s.connection();
    assert!(acquire(&mut sc, "warm", "x", 1000).is_some());
    drop(sc);
    s.restart_with(&[("redlock.restart-grace-ms", "-1")]);
    for f in ["redlock-lease-learned", "appendonlydir", "dump.rdb"] {
        let p = s.dir().join(f);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
    s.restart();
    let mut m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .config("repl-diskless-sync", "yes")
        .config("repl-diskless-sync-delay", "5")
        // M grants while S syncs, as before the rules that wait for
        // syncing replicas (`lease_ack_rule::waited_for`) and, on a master
        // with no file (fresh), for one joining (`LeaseAck::check_joining`,
        // which sees its PSYNC at once): this test is of the teacher rule
        // behind them.
        .env(
            "REDLOCK_TEST_MUTANTS",
            "syncing-replicas-uncounted,fresh-trusts-joining",
        )
        .start();
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    let mut sc = s.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m.port())
        .query(&mut sc)
        .unwrap();
    wait_until(Duration::from_secs(10), "S connected to M", || {
        info_field(&mut mm, "replication", "connected_slaves").as_deref() == Some("1")
    });
    let got = acquire_result(&mut mm, "L", "owner-a", 5_000);
    eprintln!("M ACQUIRE L 5000 -> {got:?}");
    let granted_a = Instant::now();
    assert!(matches!(got, Ok(Some(_))));
    drop(mm);
    m.kill();
    promote(&mut sc);
    std::thread::sleep(Duration::from_millis(1500));
    let r = acquire_result(&mut sc, "L", "owner-b", 1000);
    eprintln!(
        "control: S ACQUIRE 1.5 s after promotion -> {r:?} ({:?})",
        granted_a.elapsed()
    );
    assert!(r.is_err());
}

/// M and its replica X share M's directory (own dbfilename/appenddirname,
/// as host/sync.rs supports); Z is a replica elsewhere that lags. The
/// acknowledged length M keeps for its restart (`redlock-lease-acked`, one
/// name per directory) was written by X too; now each node has its own
/// (`redlock-lease-acked-PORT`).
#[test]
fn replica_sharing_the_masters_dir_writes_its_acknowledged_length() {
    let mut m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let mdir = m.dir().to_path_buf();
    let mut x = start_replica(
        &m,
        replica_builder()
            .config("dir", mdir.to_str().unwrap())
            .config("dbfilename", "x.rdb")
            .config("appenddirname", "x-aof"),
    );
    let z = start_replica(&m, replica_builder());
    let mut mm = m.connection();
    assert!(acquire(&mut mm, "warm", "x", 1000).is_some());
    let _: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut mm).unwrap();
    let mut zc = z.connection();
    wait_until(Duration::from_secs(20), "Z learned 1 s", || {
        redlock_info(&mut zc, "longest_lease_ms") >= 1_000
    });
    drop(zc);
    let file = mdir.join(format!("redlock-lease-acked-{}", m.port()));
    eprintln!("acked file before: {:?}", std::fs::read_to_string(&file));
    // Z lags from here on.
    z.pause();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut mm)
        .unwrap();
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    let r = acquire_result(&mut mm, "L0", "o", 5_000);
    eprintln!("M ACQUIRE 5000 with Z lagging -> {r:?}");
    let mut xc = x.connection();
    wait_until(Duration::from_secs(20), "X learned 5 s", || {
        redlock_info(&mut xc, "longest_lease_ms") >= 5_000
    });
    drop(xc);
    eprintln!(
        "acked file after raise: {:?}",
        std::fs::read_to_string(&file)
    );
    x.restart();
    eprintln!(
        "acked file after X restarted: {:?}",
        std::fs::read_to_string(&file)
    );
    drop(mm);
    m.restart_with(&[("redlock.max-ttl-ms", "5000")]);
    let mut mm = m.connection();
    let got = acquire_result(&mut mm, "L", "owner-a", 5_000);
    eprintln!(
        "restarted M ACQUIRE 5000 -> {got:?}, acked {:?}",
        info_field(&mut mm, "redlock", "redlock_longest_lease_acked_ms")
    );
    let granted_a = Instant::now();
    match got {
        Ok(Some(_)) => {}
        // Held: Z has not acknowledged (M's own file says so).
        Err(e) if e.code() == Some("NOSYNC") => return,
        other => panic!("{other:?}"),
    }
    drop(mm);
    m.kill();
    x.kill();
    z.resume();
    let mut zc = z.connection();
    promote(&mut zc);
    assert_no_second_holder(&mut zc, "L", granted_a, "Z");
}

/// After a failover, Sentinel points the other replicas at the new master
/// (`REPLICAOF`): each is untaught until the new master's record reaches
/// it, which the new master announces to every replica that comes online,
/// also after a partial resync. The window is short.
#[test]
fn a_fellow_replica_repointed_at_the_new_master_is_taught_again_after_its_partial_resync() {
    let mut a = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let b = start_replica(&a, replica_builder());
    let c = start_replica(&a, replica_builder());
    let mut am = a.connection();
    assert!(acquire(&mut am, "warm", "x", 1000).is_some());
    let _: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut am).unwrap();
    drop(am);
    let mut cc = c.connection();
    wait_until(Duration::from_secs(20), "C taught by A", || {
        redlock_info(&mut cc, "taught_by_master") == 1
    });
    a.kill();
    let mut bm = b.connection();
    promote(&mut bm);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(b.port())
        .query(&mut cc)
        .unwrap();
    let repointed = Instant::now();
    assert_eq!(redlock_info(&mut cc, "taught_by_master"), 0);
    wait_until(Duration::from_secs(20), "C taught by B", || {
        redlock_info(&mut cc, "taught_by_master") == 1
    });
    eprintln!("C untaught for {:?} after REPLICAOF", repointed.elapsed());
    // A partial resync (B continues A's history), not a full sync.
    let partial: u64 = info_field(&mut bm, "stats", "sync_partial_ok")
        .unwrap()
        .parse()
        .unwrap();
    assert!(partial >= 1, "C did a full sync");
}
