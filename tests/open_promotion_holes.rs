//! Open findings of the adversarial read of the lease-ack rule
//! (`src/core/lease_ack_rule.rs`): event sequences on real processes in
//! which a promoted replica guards for 1 s while a 5 s lease of its old
//! master runs (two holders). Each test asserts the safe outcome and is
//! ignored until its hole is closed; the control passes.
//!
//! Causes: a new master's replica set starts empty and an empty set is not
//! held back; "taught" counts a node's own record or another master's;
//! replicas identified by position at a shared address; replicas without a
//! listening port left out of the replica set; the acknowledged-length file
//! shared by nodes of one `dir`; a replica of a replica.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn replica_builder() -> redlock_testkit::NodeBuilder {
    Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "1000")
}

fn promote(con: &mut redis::Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(con)
        .unwrap();
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

#[test]
#[ignore = "open finding: a new master's empty replica set is not held back"]
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
    let t0 = Instant::now();
    let got = acquire_result(&mut bm, "L", "owner-a", 5_000);
    eprintln!(
        "B ACQUIRE L 5000 -> {got:?}; B acked_ms info: {:?}",
        info_field(&mut bm, "redlock", "redlock_longest_lease_acked_ms")
    );
    let granted_a = match got {
        Ok(Some(_)) => Instant::now(),
        other => {
            eprintln!("held (refused): {other:?}");
            return;
        }
    };
    let _ = t0;
    drop(bm);
    let mut b = b;
    b.kill();
    // C promoted (Sentinel's candidate: a replica of the group).
    let mut cm = c.connection();
    promote(&mut cm);
    let granted_b = acquire_until_granted(&mut cm, "L", "owner-b", 1000);
    let gap = granted_b - granted_a;
    eprintln!("C granted L {gap:?} after B's 5 s lease");
    assert!(
        gap >= Duration::from_millis(5_000),
        "two holders: gap {gap:?}"
    );
}

/// A node taught by one master (C learned 1000 from Q) is pointed at
/// another master M (no replica so far, max-ttl-ms raised with CONFIG SET).
/// While C waits for its first full sync (diskless delay), M grants 5 s;
/// M dies; C is promoted and guards only its 1 s.
#[test]
#[ignore = "open finding: taught by another master counts as taught"]
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
    promote(&mut cc);
    let granted_b = acquire_until_granted(&mut cc, "L", "owner-b", 1000);
    let gap = granted_b - granted_a;
    eprintln!("C granted L {gap:?} after M's 5 s lease");
    assert!(
        gap >= Duration::from_millis(5_000),
        "two holders: gap {gap:?}"
    );
}

/// Three replicas behind one announced address: A and B were online
/// together (two identities, `ip:X` and `ip#2:X`); A drops out (frozen);
/// C joins at the same address. B and C now fill both identities, so a
/// raised max-ttl-ms is "acknowledged by every replica of the life" while A
/// never heard of it. M dies, A is promoted and guards its 1 s.
#[test]
#[ignore = "open finding: replicas at one address are identified by position"]
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
    let first = acquire_result(&mut mm, "L", "owner-a", 5_000);
    eprintln!("first ACQUIRE 5000 -> {first:?}");
    let got = acquire_acknowledged(&mut mm, "L", "owner-a", 5_000);
    let granted_a = Instant::now();
    eprintln!(
        "M granted L 5000 -> {got:?}; acked_ms {:?}",
        info_field(&mut mm, "redlock", "redlock_longest_lease_acked_ms")
    );
    assert!(got.is_some());
    drop(mm);
    m.kill();
    drop(c);
    drop(b);
    a.resume();
    let mut ac = a.connection();
    promote(&mut ac);
    let granted_b = acquire_until_granted(&mut ac, "L", "owner-b", 1000);
    let gap = granted_b - granted_a;
    eprintln!("A granted L {gap:?} after M's 5 s lease");
    assert!(
        gap >= Duration::from_millis(5_000),
        "two holders: gap {gap:?}"
    );
}

/// A replica of a replica: M → X → Y. Y's link to X is cut (Y frozen)
/// before M's max-ttl-ms is raised; M waits only for X (its replica). M
/// dies, X is promoted (knows 5 s, guards 5 s, then starts its life as
/// master with 5 s "acknowledged", LeaseAck::starting) and grants 5 s at
/// once. X dies, Y is promoted: it guards its 1 s.
#[test]
#[ignore = "open finding: a promotion assumes its replicas know its longest lease"]
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
    let granted_a = acquire_until_granted(&mut xc, "L", "owner-a", 5_000);
    eprintln!(
        "X granted L 5000; X acked_ms {:?}, longest {:?}",
        info_field(&mut xc, "redlock", "redlock_longest_lease_acked_ms"),
        info_field(&mut xc, "redlock", "redlock_longest_lease_ms")
    );
    drop(xc);
    x.kill();
    y.resume();
    let mut yc = y.connection();
    promote(&mut yc);
    let granted_b = acquire_until_granted(&mut yc, "L", "owner-b", 1000);
    let gap = granted_b - granted_a;
    eprintln!("Y granted L {gap:?} after X's 5 s lease");
    assert!(
        gap >= Duration::from_millis(5_000),
        "two holders: gap {gap:?}"
    );
}

/// Does a node that was only ever a standalone master count as "taught"
/// after a restart that loads its own data (its own node record)?
#[test]
#[ignore = "open finding: shows the cause of the standalone case"]
fn own_data_makes_a_node_taught() {
    let mut s = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.max-ttl-ms", "1000")
        .config("appendonly", "yes")
        .start();
    let mut sc = s.connection();
    assert!(acquire(&mut sc, "warm", "x", 1000).is_some());
    drop(sc);
    eprintln!(
        "before restart learned file: {}",
        s.dir().join("redlock-lease-learned").exists()
    );
    s.restart();
    eprintln!(
        "after restart learned file: {}",
        s.dir().join("redlock-lease-learned").exists()
    );
}

/// S was only ever a standalone master (its own data makes it "taught").
/// Pointed at M (max-ttl-ms raised with CONFIG SET, no replica so far),
/// promoted before its first full sync completed.
#[test]
#[ignore = "open finding: a node's own record counts as taught"]
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
    let granted_b = acquire_until_granted(&mut sc, "L", "owner-b", 1000);
    let gap = granted_b - granted_a;
    eprintln!("S granted L {gap:?} after M's 5 s lease");
    assert!(
        gap >= Duration::from_millis(5_000),
        "two holders: gap {gap:?}"
    );
}

/// S was only ever a standalone master (its own data makes it "taught").
/// Pointed at M (max-ttl-ms raised with CONFIG SET, no replica so far),
/// promoted before its first full sync completed.
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
/// name per directory) is written by X too.
#[test]
#[ignore = "open finding: redlock-lease-acked is shared by nodes of one dir"]
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
    let file = mdir.join("redlock-lease-acked");
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
    if !matches!(got, Ok(Some(_))) {
        return;
    }
    drop(mm);
    m.kill();
    x.kill();
    z.resume();
    let mut zc = z.connection();
    promote(&mut zc);
    let granted_b = acquire_until_granted(&mut zc, "L", "owner-b", 1000);
    let gap = granted_b - granted_a;
    eprintln!("Z granted L {gap:?} after M's 5 s lease");
    assert!(
        gap >= Duration::from_millis(5_000),
        "two holders: gap {gap:?}"
    );
}
