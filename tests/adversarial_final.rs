//! The final adversarial read of the day: the configuration file's copy of
//! the longest lease (`redlock.longest-lease-ms`), the hold a load takes
//! from `redlock.promoted-acked-ms` (the smaller of the file's and the
//! configuration's), the untaught marker following the guard, and
//! `sync_rule::taught_at_promotion`. Each test plays a sequence on real
//! processes (the server of `REDLOCK_SERVER_BIN`) and asserts the SAFE (or
//! live) outcome.
//!
//! Findings, fixed (Redis 7.0.15 and Valkey 8.1.8 alike), both liveness,
//! one root: `redlock.promoted-acked-ms` is the promotion's hold and never
//! grows with the life, and a load held by its files took the smaller of
//! the file's and the configuration's (`held_by_configuration`), then wrote
//! that smaller value to the data file (`lease_ack::begin`). A held file is
//! now the current life's again (a node that starts as a replica resets its
//! file, so a promotion's crash between its two writes is held by the
//! configuration without the min):
//! - `a_node_promoted_from_0_grants_after_a_restart_alone_on_its_disk`: a
//!   node promoted with `promoted-acked-ms 0`, whose replicas are gone and
//!   forgotten, restarted on its own disk, answered NOSYNC to every
//!   ACQUIRE, for good.
//! - `a_promoted_node_raised_later_grants_its_raise_after_a_restart_alone`:
//!   the ordinary failover (hold 1000), `max-ttl-ms` raised to 3000 in the
//!   life and acknowledged; alone after a restart, 3 s leases were NOSYNC
//!   for good.
//!
//! Safe (they pass): an operator's `longest-lease-ms 0` (alone, or in the
//! `CONFIG SET` that lowers `max-ttl-ms`) is put back by the change event;
//! a replica lowered after learning (the next lease raises it again); a
//! sub-replica cut off from its master's untaught promotion (counted
//! taught, its window 1 s instead of a day, but held by the lease-ack rule
//! from 0); the lowering and the operator's 0 inside `MULTI`/`EXEC` (the
//! rewrite runs in the transaction: no crash, the copy written).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Whether the master behind `con` lists any replica.
fn has_replica_line(con: &mut redis::Connection) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(con)
        .unwrap_or_default();
    info.lines().any(|l| l.starts_with("slave"))
}

/// Finding (liveness, fixed). R is promoted with a replica of its own (S,
/// a chained replica): its life starts from 0 and `promoted-acked-ms 0`
/// goes to its configuration file. S acknowledges, R grants. S is then
/// decommissioned (`REDLOCK.REPLICAS FORGET`, as the refusal advises) and
/// R, alone, still grants. R restarts on its own disk: its file says held
/// from what S acknowledged, its configuration 0, and the load now takes
/// the smaller (`held_by_configuration`): every ACQUIRE waits for a
/// replica that will never come (NOSYNC), with no documented way out. The
/// configuration's hold is the promotion's and never grows with the life.
#[test]
fn a_node_promoted_from_0_grants_after_a_restart_alone_on_its_disk() {
    let mut m = adversarial_node("1000").start();
    let mut r = start_replica(&m, adversarial_node("1000").config_file());
    let mut rc = taught_replica_of(&m, &r);
    let mut s = start_replica(&r, adversarial_node("1000"));
    m.kill();
    promote(&mut rc);
    wait_until(
        Duration::from_secs(10),
        "promoted-acked-ms 0 in the file",
        || config_file_says(&r, "redlock.promoted-acked-ms 0"),
    );
    eprintln!(
        "R promoted with S attached: promoted-acked-ms {} (memory)",
        config_get(&mut rc, "redlock.promoted-acked-ms")
    );
    let live = first_grant(
        &mut rc,
        "warm2",
        "x",
        1000,
        Instant::now() + Duration::from_secs(15),
    );
    if live.is_none() {
        let err = error_of(&mut rc, &[b"REDLOCK.ACQUIRE", b"warm2", b"x", b"1000"]);
        panic!("R with S never granted: {err}");
    }
    // S is gone for good; R forgets it.
    s.kill();
    wait_until(Duration::from_secs(20), "S gone from R", || {
        !has_replica_line(&mut rc)
    });
    let forgot: redis::RedisResult<redis::Value> = redis::cmd("REDLOCK.REPLICAS")
        .arg("FORGET")
        .arg(format!("127.0.0.1:{}", s.port()))
        .query(&mut rc);
    eprintln!("REDLOCK.REPLICAS FORGET S: {forgot:?}");
    let alone = first_grant(
        &mut rc,
        "warm3",
        "x",
        1000,
        Instant::now() + Duration::from_secs(5),
    );
    if alone.is_none() {
        let err = error_of(&mut rc, &[b"REDLOCK.ACQUIRE", b"warm3", b"x", b"1000"]);
        panic!("R alone (S forgotten) grants nothing even before its restart: {err}");
    }
    eprintln!("R alone grants before its restart");
    drop(rc);
    r.restart();
    let mut rc = r.connection();
    let asked = Instant::now();
    let granted = first_grant(
        &mut rc,
        "K",
        "owner-a",
        1000,
        Instant::now() + Duration::from_secs(8),
    );
    if granted.is_none() {
        let err = error_of(&mut rc, &[b"REDLOCK.ACQUIRE", b"K", b"owner-a", b"1000"]);
        eprintln!(
            "R restarted alone on its own disk, {:?} after its start: {err}",
            asked.elapsed()
        );
        // The ways out an operator might try (diagnostics): an operator's
        // -1 (not documented as theirs to set) and a restart.
        config_set(&mut rc, "redlock.promoted-acked-ms", "-1");
        let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut rc).unwrap();
        drop(rc);
        r.restart();
        let mut rc = r.connection();
        let after = first_grant(
            &mut rc,
            "K",
            "owner-a",
            1000,
            Instant::now() + Duration::from_secs(5),
        );
        eprintln!(
            "after CONFIG SET redlock.promoted-acked-ms -1, a rewrite and a restart: granted {}",
            after.is_some()
        );
        // The other way out: a new replica of R acknowledges.
        let _t = start_replica(&r, adversarial_node("1000"));
        let with = first_grant(
            &mut rc,
            "K",
            "owner-a",
            1000,
            Instant::now() + Duration::from_secs(8),
        );
        eprintln!("with a new replica attached: granted {}", with.is_some());
    }
    assert!(
        granted.is_some(),
        "R, restarted alone on its own disk, granted nothing in {:?}",
        asked.elapsed()
    );
}

/// Safe: an operator (or a configuration tool) sets
/// `redlock.longest-lease-ms 0` after `max-ttl-ms` was lowered below a
/// running 3 s lease; the configuration change puts the copy back at once
/// (the longest recorded is above `max-ttl-ms`), so a rewrite and a new
/// disk still wait the lease out.
#[test]
fn an_operator_lowering_the_copy_does_not_shorten_a_new_disks_wait() {
    const LEASE: u64 = 3_000;
    let mut n = adversarial_node(&LEASE.to_string()).config_file().start();
    let mut nc = n.connection();
    let granted_a = first_grant(
        &mut nc,
        "K",
        "owner-a",
        LEASE,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("first grant");
    config_set(&mut nc, "redlock.max-ttl-ms", "400");
    assert!(config_file_says(
        &n,
        &format!("redlock.longest-lease-ms {LEASE}")
    ));
    config_set(&mut nc, "redlock.longest-lease-ms", "0");
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut nc).unwrap();
    eprintln!(
        "after the operator's 0 and a rewrite: memory {}, file {:?}",
        config_get(&mut nc, "redlock.longest-lease-ms"),
        config_file_of(&n)
            .lines()
            .filter(|l| l.contains("redlock"))
            .collect::<Vec<_>>()
    );
    drop(nc);
    n.kill();
    wipe_dir(&n);
    n.restart();
    let mut nc = n.connection();
    assert_no_second_holder_of(&mut nc, "K", granted_a, LEASE, "N on a new disk", 300);
}

/// Safe: the same, with the operator's 0 given in the same `CONFIG SET` as
/// the lowering (`CONFIG SET redlock.max-ttl-ms 400
/// redlock.longest-lease-ms 0`): the change event sees both and writes the
/// copy.
#[test]
fn lowering_and_zeroing_the_copy_in_one_config_set_still_waits() {
    const LEASE: u64 = 3_000;
    let mut n = adversarial_node(&LEASE.to_string()).config_file().start();
    let mut nc = n.connection();
    let granted_a = first_grant(
        &mut nc,
        "K",
        "owner-a",
        LEASE,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("first grant");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg("400")
        .arg("redlock.longest-lease-ms")
        .arg("0")
        .query(&mut nc)
        .unwrap();
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut nc).unwrap();
    eprintln!(
        "file: {:?}",
        config_file_of(&n)
            .lines()
            .filter(|l| l.contains("redlock"))
            .collect::<Vec<_>>()
    );
    drop(nc);
    n.kill();
    wipe_dir(&n);
    n.restart();
    let mut nc = n.connection();
    assert_no_second_holder_of(&mut nc, "K", granted_a, LEASE, "N on a new disk", 300);
}

fn info_line(con: &mut redis::Connection, fields: &[&str]) -> String {
    fields
        .iter()
        .map(|f| {
            format!(
                "{f}={}",
                info_field(con, "redlock", &format!("redlock_{f}")).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Probe (`taught_at_promotion`, a replica of a replica). M0 (1000) → R →
/// S, S taught by R and current. R is pointed at M1, whose 20 s lease of
/// K runs, and promoted during its first sync (untaught: a day); R's
/// `REPLICAOF` dropped S's link (no sync from a replica without its
/// master), and R is lost before S reconnects, so R's announcement of the
/// day never reaches S. S is promoted: its last fresh announcement is
/// M0's through R, with no hold, so `taught_at_promotion` counts it taught
/// and its window is its own 1000 ms (not a day), 0.3 s into M1's 20 s
/// lease (Redis 7.0.15). Safe all the same: S starts its life from what
/// its teacher announced its replicas acknowledged, 0 (a replica announces
/// nothing), so after the window it answers NOSYNC to every lease.
#[test]
fn a_sub_replica_cut_off_by_an_untaught_promotion_guards_long() {
    const OLD: u64 = 20_000;
    let mut m0 = adversarial_node("1000").start();
    let mut r = start_replica(&m0, adversarial_node("1000"));
    let _ = taught_replica_of(&m0, &r);
    let s = start_replica(&r, adversarial_node("1000"));
    let mut sc = s.connection();
    // A change M0 announces (forwarded by R to S).
    let mut mc = m0.connection();
    config_set(&mut mc, "redlock.sync-replicas", "1");
    config_set(&mut mc, "redlock.sync-replicas", "0");
    let _ = acquire_result(&mut mc, "nudge", "x", 500);
    let current = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if redlock_info(&mut sc, "sync_fresh") >= 1
                && redlock_info(&mut sc, "taught_by_master") == 1
            {
                break true;
            }
            if Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    eprintln!(
        "S before: current {current}, {}",
        info_line(
            &mut sc,
            &[
                "sync_fresh",
                "taught_by_master",
                "longest_lease_ms",
                "sync_hold_left_ms",
                "master_acked_ms"
            ]
        )
    );
    // M1: the group's master now, granting a 20 s lease.
    let mut m1 = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("repl-diskless-sync", "yes")
        .config("repl-diskless-sync-delay", "5")
        .start();
    let mut m1c = m1.connection();
    config_set(&mut m1c, "redlock.max-ttl-ms", &OLD.to_string());
    let granted = first_grant(
        &mut m1c,
        "K",
        "owner-a",
        OLD,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("M1 grants the long lease");
    // R pointed at M1, promoted during its first sync, lost at once. S
    // cannot reconnect meanwhile (R asks for a password it lacks).
    let mut rc = r.connection();
    config_set(&mut rc, "requirepass", "cut-off");
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m1.port())
        .query(&mut rc)
        .unwrap();
    promote(&mut rc);
    std::thread::sleep(Duration::from_millis(300));
    eprintln!(
        "R promoted: {}",
        info_line(&mut rc, &["taught_by_master", "grace_window_ms"])
    );
    r.kill();
    m1.kill();
    m0.kill();
    eprintln!(
        "S before its promotion: link {:?}, {}",
        info_field(&mut sc, "replication", "master_link_status"),
        info_line(
            &mut sc,
            &["sync_fresh", "taught_by_master", "sync_hold_left_ms"]
        )
    );
    promote(&mut sc);
    eprintln!(
        "S promoted {:?} into the lease: {}",
        granted.elapsed(),
        info_line(
            &mut sc,
            &["taught_by_master", "grace_window_ms", "sync_last_promotion"]
        )
    );
    let err = error_of(&mut sc, &[b"REDLOCK.ACQUIRE", b"probe", b"x", b"500"]);
    eprintln!("S's first answer: {err}");
    std::thread::sleep(Duration::from_millis(1_200));
    let err = error_of(&mut sc, &[b"REDLOCK.ACQUIRE", b"probe", b"x", b"500"]);
    eprintln!("S's answer after its window: {err}");
    assert_no_second_holder(&mut sc, "K", granted, OLD, "S");
}

/// Safe: a replica R (1000) learns its master's raise to 3000 (its file
/// gets `max-ttl-ms 3000` and the copy), an operator lowers R back to 1000
/// (the copy is already there: nothing written), M grants a 3 s lease, R
/// is promoted, Sentinel's `CONFIG REWRITE` writes the lowered value, and
/// R restarts on a new disk: the copy makes it wait the lease out.
#[test]
fn a_replica_lowered_after_learning_waits_on_a_new_disk() {
    const LEASE: u64 = 3_000;
    let mut m = adversarial_node("1000").start();
    let mut r = start_replica(&m, adversarial_node("1000").config_file());
    let mut rc = taught_replica_of(&m, &r);
    let mut mc = m.connection();
    config_set(&mut mc, "redlock.max-ttl-ms", &LEASE.to_string());
    wait_until(Duration::from_secs(10), "R learned 3000", || {
        config_file_says(&r, &format!("redlock.longest-lease-ms {LEASE}"))
    });
    config_set(&mut rc, "redlock.max-ttl-ms", "1000");
    let granted_a = first_grant(
        &mut mc,
        "K",
        "owner-a",
        LEASE,
        Instant::now() + Duration::from_secs(15),
    )
    .expect("M grants the 3 s lease");
    wait_replicated(&mut mc);
    m.kill();
    promote(&mut rc);
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut rc).unwrap();
    eprintln!(
        "R's file: {:?}",
        config_file_of(&r)
            .lines()
            .filter(|l| l.contains("redlock"))
            .collect::<Vec<_>>()
    );
    drop(rc);
    r.kill();
    wipe_dir(&r);
    r.restart();
    let mut rc = r.connection();
    assert_no_second_holder(&mut rc, "K", granted_a, LEASE, "R on a new disk");
}

/// Finding (liveness, fixed), the ordinary failover. R, taught by M and
/// knowing M's replicas acknowledged 1000, is promoted: `promoted-acked-ms
/// 1000`. Its life raises `max-ttl-ms` to 3000, its replica T acknowledges,
/// R grants 3 s leases. T is decommissioned and forgotten; R alone still
/// grants them. R restarts on its own disk: held from min(3000, 1000), it
/// answers NOSYNC to every lease above 1000, for good.
#[test]
fn a_promoted_node_raised_later_grants_its_raise_after_a_restart_alone() {
    let mut m = adversarial_node("1000").start();
    let mut r = start_replica(&m, adversarial_node("1000").config_file());
    let mut rc = taught_replica_of(&m, &r);
    wait_until(Duration::from_secs(10), "R knows M's acked 1000", || {
        redlock_info(&mut rc, "master_acked_ms") >= 1000
    });
    m.kill();
    promote(&mut rc);
    wait_until(
        Duration::from_secs(10),
        "promoted-acked-ms 1000 in the file",
        || config_file_says(&r, "redlock.promoted-acked-ms 1000"),
    );
    let mut t = start_replica(&r, adversarial_node("1000"));
    config_set(&mut rc, "redlock.max-ttl-ms", "3000");
    first_grant(
        &mut rc,
        "warm2",
        "x",
        3000,
        Instant::now() + Duration::from_secs(15),
    )
    .expect("R with T grants 3 s");
    t.kill();
    wait_until(Duration::from_secs(20), "T gone from R", || {
        !has_replica_line(&mut rc)
    });
    let _: redis::Value = redis::cmd("REDLOCK.REPLICAS")
        .arg("FORGET")
        .arg(format!("127.0.0.1:{}", t.port()))
        .query(&mut rc)
        .unwrap();
    first_grant(
        &mut rc,
        "warm3",
        "x",
        3000,
        Instant::now() + Duration::from_secs(5),
    )
    .expect("R alone grants 3 s before its restart");
    drop(rc);
    r.restart();
    let mut rc = r.connection();
    let asked = Instant::now();
    let granted = first_grant(
        &mut rc,
        "K",
        "owner-a",
        3000,
        Instant::now() + Duration::from_secs(10),
    );
    if granted.is_none() {
        let err = error_of(&mut rc, &[b"REDLOCK.ACQUIRE", b"K", b"owner-a", b"3000"]);
        let short = acquire_result(&mut rc, "K2", "owner-a", 1000);
        eprintln!(
            "R restarted alone, {:?} after its start: 3000 → {err}; 1000 → {short:?}",
            asked.elapsed()
        );
    }
    assert!(
        granted.is_some(),
        "R restarted alone never grants its 3 s leases"
    );
}

/// Safe: the lowering inside `MULTI`/`EXEC` (the change event's `CONFIG
/// REWRITE` runs inside the transaction): the server lives and the file
/// has the copy.
#[test]
fn a_lowering_inside_multi_writes_the_copy() {
    let n = adversarial_node("3000").config_file().start();
    let mut nc = n.connection();
    first_grant(
        &mut nc,
        "K",
        "owner-a",
        3000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("first grant");
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg("400")
        .cmd("CONFIG")
        .arg("SET")
        .arg("redlock.longest-lease-ms")
        .arg("0")
        .query(&mut nc)
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut nc).unwrap();
    assert_eq!(pong, "PONG");
    assert!(
        config_file_says(&n, "redlock.longest-lease-ms 3000"),
        "{}",
        config_file_of(&n)
    );
}
