//! An adversarial read of the copies a load makes from the data directory
//! to the configuration file (`guard_rule::untaught_to_configure`,
//! `LeaseAck::hold_to_configure`, written from a timer after the load) and
//! of `CONFIG SET redlock.promoted-untaught 0` ending an untaught day
//! (`host/guard.rs` `untaught_config_changed`, run at every configuration
//! change). Each test plays a sequence on real processes (the server of
//! `REDLOCK_SERVER_BIN`) and asserts the SAFE (or live) outcome.
//!
//! Findings, fixed (Redis 7.0.15 and Valkey 8.1.8 alike):
//! - `an_ordinary_master_restarted_with_replicas_grants_after_a_new_disk_alone`
//!   (liveness): `hold_to_configure` wrote `promoted-acked-ms 0` at an
//!   ordinary restart with replicas (base 0: never promoted); alone on a
//!   new disk later, the master answered NOSYNC to every ACQUIRE. A hold
//!   of 0 is no longer copied.
//! - `restoring_the_guard_after_an_untaught_promotion_under_grace_0_keeps_the_day`
//!   (two holders, 1.10 s into a 20 s lease): a promotion under
//!   `restart-grace-ms 0` set the guard's untaught flag but not
//!   `promoted-untaught`; the next CONFIG SET of anything ended the day.
//!   The marker and its copy now follow the guard at every promotion, and
//!   an operator's change is told apart from the module's by the value the
//!   module last set (`config::UNTAUGHT_KEPT`).
//! - `a_crash_between_the_promotions_writes_is_held_from_the_configuration`
//!   (two holders, 1.02 s into a 20 s lease): a node started as a replica
//!   on a held master's data directory keeps that held file (acked 20 s)
//!   until its promotion writes the new one; a crash after the new
//!   `promoted-acked-ms 1000` and before the file restarted held by the
//!   file's 20 s. A load held by its files is now held from the smaller of
//!   the file's and the configuration's (`held_by_configuration`).
//!
//! Safe (they pass): an unrelated CONFIG SET racing the deferred rewrite
//! after a load from the marker alone; promoted-untaught set on a plain
//! replica or master; a stale untaught flag through a demotion (the window
//! is the taught longest lease, not the explicit restart-grace-ms: shorter
//! than configured, still no second holder).

mod common;

use std::time::{Duration, Instant};

use common::*;
/// Finding (fixed: a hold of 0 is not copied). An ordinary master M (never promoted) with a
/// replica R restarts (its own data directory): the load is held by its
/// replica set, and `LeaseAck::hold_to_configure` copies
/// `configured_hold()` = min(acked, base) to the configuration file. A
/// life that never began at a promotion has base 0, so the file says
/// `redlock.promoted-acked-ms 0`. R is later decommissioned; M, standalone,
/// loses its data disk: the new run is held from 0 by its configuration
/// (`held_by_configuration`) and, held with an empty replica set, refuses
/// every ACQUIRE (`NOSYNC`, no ttl is ≤ 0) until a replica of its own comes
/// online and acknowledges: never, for a master that runs alone now. Before
/// the copy such a run was a fresh master and granted at once.
#[test]
fn an_ordinary_master_restarted_with_replicas_grants_after_a_new_disk_alone() {
    let mut m = adversarial_node("1000").config_file().start();
    assert!(!config_file_of(&m).contains("promoted-acked-ms"));
    let mut r = start_replica(&m, adversarial_node("1000"));
    let _rc = taught_replica_of(&m, &r);
    // An ordinary restart of M with its files.
    m.restart();
    let mut mc = m.connection();
    // Held from 0 (nothing to start from): nothing is copied.
    let looked = Instant::now();
    while looked.elapsed() < Duration::from_millis(500) {
        assert!(
            !config_file_of(&m).contains("promoted-acked-ms"),
            "a hold of 0 was copied:\n{}",
            config_file_of(&m)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "after M's ordinary restart: promoted-acked-ms {} in memory, file: {:?}",
        config_get(&mut mc, "redlock.promoted-acked-ms"),
        config_file_of(&m)
            .lines()
            .filter(|l| l.contains("promoted"))
            .collect::<Vec<_>>()
    );
    // R is decommissioned; M runs alone, then loses its data disk.
    r.kill();
    drop(mc);
    m.kill();
    wipe_dir(&m);
    m.restart();
    let mut mc = m.connection();
    let asked = Instant::now();
    let granted = first_grant(
        &mut mc,
        "K",
        "owner-a",
        1000,
        Instant::now() + Duration::from_secs(5),
    );
    if granted.is_none() {
        let err = error_of(&mut mc, &[b"REDLOCK.ACQUIRE", b"K", b"owner-a", b"1000"]);
        eprintln!("M alone on a new disk, 5 s after its start: {err}");
        // The refusal's advice: forget the replica gone for good.
        let forgot: redis::RedisResult<redis::Value> = redis::cmd("REDLOCK.REPLICAS")
            .arg("FORGET")
            .arg(format!("127.0.0.1:{}", r.port()))
            .query(&mut mc);
        eprintln!("REDLOCK.REPLICAS FORGET 127.0.0.1:{}: {forgot:?}", r.port());
        let again = error_of(&mut mc, &[b"REDLOCK.ACQUIRE", b"K", b"owner-a", b"1000"]);
        eprintln!("after FORGET: {again}");
    }
    assert!(
        granted.is_some(),
        "M, alone on a new disk, granted nothing in {:?}",
        asked.elapsed()
    );
}

/// Finding (fixed). S (`max-ttl-ms` 1000) runs with
/// `restart-grace-ms 0` (the guard off, an operator's temporary choice)
/// and is promoted untaught while M0's 20 s lease of K runs. The promotion
/// opens no window (`on_promotion` returns no record when the window is
/// 0): the guard's untaught flag is set but the marker and
/// `redlock.promoted-untaught` are not, so the two disagree. The operator
/// puts the guard back (`CONFIG SET redlock.restart-grace-ms -1`), which
/// before this change made the window a day again; now the configuration
/// change event sees promoted-untaught 0 against an untaught guard and
/// takes it for the operator ending the day (`Guard::end_untaught`): the
/// window is S's own 1000 ms from the promotion, already over, and S
/// grants K while M0's lease runs. Any unrelated `CONFIG SET` does the
/// same.
#[test]
fn restoring_the_guard_after_an_untaught_promotion_under_grace_0_keeps_the_day() {
    let (mut m0, granted_a) = old_master_granting("K");
    let s = adversarial_node("1000").config_file().start();
    let mut sc = s.connection();
    config_set(&mut sc, "redlock.restart-grace-ms", "0");
    let _promoted = promote_untaught(&s, &mut m0);
    // The operator puts the guard back.
    config_set(&mut sc, "redlock.restart-grace-ms", "-1");
    eprintln!(
        "after restoring restart-grace-ms -1: grace_window_ms {}, promoted-untaught {}",
        redlock_info(&mut sc, "grace_window_ms"),
        config_get(&mut sc, "redlock.promoted-untaught")
    );
    // Sentinel repoints a replica at S: it acknowledges S's longest lease,
    // which lifts S's hold.
    let _t = start_replica(&s, adversarial_node("1000"));
    assert_no_second_holder(&mut sc, "K", granted_a, OLD_LEASE_MS, "S");
}

/// Safe: an unrelated `CONFIG SET` right after a load that opened the day
/// from the marker file alone (the configuration copy removed, as under an
/// earlier release), before or after the deferred rewrite, leaves the day
/// standing: the load set promoted-untaught 1 in memory with the guard.
#[test]
fn an_unrelated_config_set_after_a_load_from_the_marker_keeps_the_day() {
    let (mut m0, granted_a) = old_master_granting("K");
    let mut s = adversarial_node("1000").config_file().start();
    let mut sc = promote_untaught(&s, &mut m0);
    wait_until(Duration::from_secs(5), "the copy in the file", || {
        config_file_says(&s, "redlock.promoted-untaught 1")
    });
    drop(sc);
    // As under an earlier release: the marker alone.
    let path = s.config_path().unwrap();
    let text: String = config_file_of(&s)
        .lines()
        .filter(|l| !l.contains("promoted-untaught"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    s.restart();
    sc = s.connection();
    // At once, racing the deferred rewrite.
    config_set(&mut sc, "maxmemory-policy", "noeviction");
    config_set(&mut sc, "redlock.restart-grace-ms", "1000");
    assert_eq!(config_get(&mut sc, "redlock.promoted-untaught"), "1");
    assert_eq!(redlock_info(&mut sc, "grace_window_ms"), 86_400_000);
    wait_until(Duration::from_secs(5), "the deferred rewrite", || {
        config_file_says(&s, "redlock.promoted-untaught 1")
    });
    config_set(&mut sc, "maxmemory-policy", "noeviction");
    assert_eq!(redlock_info(&mut sc, "grace_window_ms"), 86_400_000);
    assert_no_second_holder(&mut sc, "K", granted_a, OLD_LEASE_MS, "S");
}

/// Safe: `CONFIG SET redlock.promoted-untaught 0` on a replica that loaded
/// no untaught window, or 1 on any node, is put back and changes no window.
#[test]
fn setting_promoted_untaught_on_a_plain_replica_changes_nothing() {
    let m = adversarial_node("1000").config_file().start();
    let r = start_replica(&m, adversarial_node("1000").config_file());
    let mut rc = taught_replica_of(&m, &r);
    let before = redlock_info(&mut rc, "grace_window_ms");
    config_set(&mut rc, "redlock.promoted-untaught", "1");
    assert_eq!(config_get(&mut rc, "redlock.promoted-untaught"), "0");
    config_set(&mut rc, "redlock.promoted-untaught", "0");
    assert_eq!(redlock_info(&mut rc, "grace_window_ms"), before);
    let mut mc = m.connection();
    config_set(&mut mc, "redlock.promoted-untaught", "1");
    assert_eq!(config_get(&mut mc, "redlock.promoted-untaught"), "0");
    assert!(!config_file_says(&m, "redlock.promoted-untaught 1"));
}

/// Safe (a deviation, reported): S is promoted untaught (a day), then
/// pointed at a master M1 inside the day (a demotion does not clear the
/// guard's untaught flag, nor the marker), taught by it, and promoted
/// again with an explicit `restart-grace-ms 5000`. The stale untaught flag
/// makes `window_len` take the window's default (M1's longest lease, 1000)
/// in place of the explicit 5000: shorter than configured, but as long as
/// every lease M1 granted (S was taught it), so no second holder.
#[test]
fn a_stale_untaught_flag_after_a_demotion_keeps_the_taught_window() {
    let (mut m0, _granted_a) = old_master_granting("K0");
    let s = adversarial_node("1000").config_file().start();
    let mut sc = promote_untaught(&s, &mut m0);
    assert_eq!(redlock_info(&mut sc, "grace_window_ms"), 86_400_000);
    let m1 = adversarial_node("1000").start();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m1.port())
        .query(&mut sc)
        .unwrap();
    wait_for_link(&mut sc);
    let mut sc = taught_replica_of(&m1, &s);
    let mut m1c = m1.connection();
    let granted_a = first_grant(
        &mut m1c,
        "K",
        "owner-a",
        1000,
        Instant::now() + Duration::from_secs(5),
    )
    .unwrap();
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut m1c).unwrap();
    config_set(&mut sc, "redlock.restart-grace-ms", "5000");
    promote(&mut sc);
    let window = redlock_info(&mut sc, "grace_window_ms");
    eprintln!(
        "second promotion (taught, restart-grace-ms 5000): grace_window_ms {window}, \
         promoted-untaught {}",
        config_get(&mut sc, "redlock.promoted-untaught")
    );
    assert!(window >= 1000);
    let _t = start_replica(&s, adversarial_node("1000"));
    assert_no_second_holder(&mut sc, "K", granted_a, 1000, "S");
}

/// The held data file of a node.
fn acked_file(n: &Node) -> std::path::PathBuf {
    n.dir().join(format!("redlock-lease-acked-{}", n.port()))
}

/// Finding (fixed): a promotion writes `promoted-acked-ms` before its data file,
/// so a crash between the two leaves the data file as it was. When that
/// file is itself held (a node started as a replica on the data directory
/// of a held life as master: no role change resets it), the restart is
/// held by the file's old, longer acknowledged length and the
/// configuration's shorter hold is not read (`held_by_configuration` only
/// applies to a life not held). N (old life: replicas acknowledged 20 s)
/// is started as a replica of M2 (1000, replica F taught 1000), promoted
/// (hold 1000 written to the configuration), and crashes before its file
/// is written (played by putting the old file back, then SIGKILL). Back as
/// a master, it grants a 20 s lease without any replica acknowledging;
/// it is lost, F is promoted, guards 1000 ms and grants the lock.
#[test]
fn a_crash_between_the_promotions_writes_is_held_from_the_configuration() {
    // N's old life: a master whose replica acknowledged 20 s.
    let mut n = adversarial_node("1000").config_file().start();
    let f0 = start_replica(&n, adversarial_node("1000"));
    let mut nc = n.connection();
    // Past N's own restart window first (a raise inside it lengthens it).
    first_grant(
        &mut nc,
        "warm0",
        "x",
        1000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("N's first grant");
    config_set(&mut nc, "redlock.max-ttl-ms", &OLD_LEASE_MS.to_string());
    first_grant(
        &mut nc,
        "warm",
        "x",
        OLD_LEASE_MS,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("N grants 20 s once F0 acknowledged");
    drop(nc);
    // A restart with its replica: the life is held from 20 s.
    n.restart();
    let mut nc = n.connection();
    eprintln!(
        "N's file after its restart: {:?}",
        std::fs::read_to_string(acked_file(&n)).unwrap()
    );
    drop(nc);
    n.kill();
    drop(f0);
    // The new master M2 (1000) and its replica F, taught 1000.
    let mut m2 = adversarial_node("1000").start();
    let f = start_replica(&m2, adversarial_node("1000"));
    let _fc = taught_replica_of(&m2, &f);
    // N comes back as a replica of M2 on its old data directory.
    n.set_replica_of(Some(m2.port()));
    n.restart();
    nc = n.connection();
    wait_until(Duration::from_secs(20), "N taught by M2", || {
        redlock_info(&mut nc, "taught_by_master") == 1
    });
    let stale = std::fs::read_to_string(acked_file(&n)).unwrap();
    eprintln!("N's file as a replica: {stale:?}");
    m2.kill();
    promote(&mut nc);
    eprintln!(
        "after the promotion: promoted-acked-ms {}, file {:?}",
        config_get(&mut nc, "redlock.promoted-acked-ms"),
        std::fs::read_to_string(acked_file(&n)).unwrap()
    );
    // The crash between the two writes.
    std::fs::write(acked_file(&n), &stale).unwrap();
    drop(nc);
    n.kill();
    n.set_replica_of(None);
    n.restart();
    nc = n.connection();
    eprintln!(
        "N restarted: promoted-acked-ms {}, lease_acked_ms {}",
        config_get(&mut nc, "redlock.promoted-acked-ms"),
        redlock_info(&mut nc, "longest_lease_acked_ms")
    );
    let granted = first_grant(
        &mut nc,
        "K",
        "owner-a",
        OLD_LEASE_MS,
        Instant::now() + Duration::from_secs(30),
    );
    let Some(granted_a) = granted else {
        eprintln!("N never granted the 20 s lease: held (safe)");
        return;
    };
    eprintln!("N granted K for 20 s with no replica acknowledging");
    drop(nc);
    n.kill();
    let mut fc = f.connection();
    promote(&mut fc);
    let _t = start_replica(&f, adversarial_node("1000"));
    assert_no_second_holder(&mut fc, "K", granted_a, OLD_LEASE_MS, "F");
}
