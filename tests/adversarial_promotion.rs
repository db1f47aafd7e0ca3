//! Adversarial review of the promotion rules (`src/core/teacher.rs`,
//! `src/core/lease_ack_rule.rs`, `src/core/guard_rule.rs`): event sequences
//! played on real processes, each asserting the SAFE outcome (no second
//! holder while the first lease runs, no token issued twice or going back).
//! A test that fails while its hole is open is marked `#[ignore = "open
//! finding: …"]`; run them with `-- --ignored`.
//!
//! Findings closed (the test passes; the rule and its mutant are in
//! `docs/findings.md`):
//! - A. `master_restarted_without_files_is_not_the_teacher_of_its_replica`:
//!   the teacher is an address, not a life; a master on a new disk was not
//!   held back (`LeaseAck::check_joining`, mutant `fresh-trusts-joining`).
//! - B. `teacher_from_an_earlier_life_as_replica_does_not_teach_the_new_life`:
//!   the teacher outlived the node's own life as master (switchover and
//!   back; `Taught::became_master`, mutant `teacher-outlives-life`).
//! - E. `restore_bypasses_the_lease_ack_check` (mutant
//!   `restore-skips-lease-ack`).
//! - F. `first_replica_promoted_after_loading_a_snapshot_older_than_a_raise`:
//!   a replica in its first sync was not waited for (`waited_for`, mutant
//!   `syncing-replicas-uncounted`).
//! - G. `nodes_sharing_the_aof_directory_share_the_run_record`
//!   (`run_state::file_name`, mutant `shared-node-files`).
//! - D. `a_master_on_a_new_disk_waits_less_than_the_replicas_cut_off`,
//!   `a_replica_cut_off_for_less_than_it_knows_but_more_than_the_new_disk_waits`:
//!   the replica-sync cut-off compared with the replica's longest lease; it
//!   now compares with the master's announced new-disk wait
//!   (`sync_rule::promotion`, mutant `new-disk-wait-ignored`); and the
//!   paused replica of the first counted its link as down from when it
//!   noticed (`sync_rule::link_down_since`, mutant
//!   `link-down-when-noticed`).
//!
//! Open findings (each test asserts the safe outcome and fails today):
//! - C. `replica_of_a_replica_promoted_directly_then_its_old_master_rejoins`:
//!   a promoted life held at 0 is released by an acknowledgement of the
//!   promoted node's own shorter record. Since `sync_rule::taught_at_promotion`
//!   the sub-replica, with no announcement of the master it follows, is
//!   untaught at its promotion and guards a day (mutant
//!   `untaught-not-taught-on` puts the 1 s back), and the test passes in
//!   most runs (Redis 7.0.15, Valkey 8.1.8); 3 runs of about 160 still
//!   failed with the 1 s guard of a sub-replica counted as taught, as in C′.
//! - C′. `replica_of_a_replica_taught_by_its_top_masters_forwarded_announcement`:
//!   the sub-replica applies its top master's announcement, forwarded by
//!   its master, as its master's own, and counts as taught at its promotion
//!   (C's two holders, with no rejoin).
//! - What D's rule leaves: `a_replica_behind_a_silent_partition_counts_its_link_up`
//!   (a partition that resets nothing is noticed at `repl-timeout`).
//!
//! Second read (after the fixes of A, B, E, F, G), open:
//! - H. `replica_cut_off_from_a_master_restarted_without_files`: A's rule
//!   sees only a replica that reaches the master on the new disk; one that
//!   does not (a partition, a long load of its own data) before that master
//!   is lost still counts as taught by the address (it keeps the
//!   announcement of the run before). The replica hears nothing of the new
//!   run before its promotion, so a teacher naming the master's run would
//!   not close it either (`docs/findings.md`).
//!
//! Second read, closed:
//! - H, second form.
//!   `replica_restarted_after_the_grant_of_a_master_restarted_without_files`:
//!   a replica that was down (a reboot) and reconnects right after the
//!   grant, then loses the master before its snapshot arrives. Restarted,
//!   it applied no announcement of its master, so it is untaught at its
//!   promotion and guards a day (`sync_rule::taught_at_promotion`, mutant
//!   `untaught-not-taught-on`).
//! - I. `a_master_restarted_twice_without_files_before_its_replica_came_online`:
//!   the first run on the new disk wrote its file at load, so the second
//!   was not fresh. A fresh life's file now says so (`Kept::fresh`, mutant
//!   `fresh-forgotten-at-restart`).
//! - J. `a_grant_right_after_the_replicas_psync_on_a_fresh_master`: the
//!   100 ms look of A's rule; a grant between the replica's `PSYNC` and the
//!   next look passed. The fresh master now sees the `PSYNC` in a command
//!   filter (`sync_seen`, mutant `joining-seen-late`).
//! - K. `restore_checked_for_the_time_left_but_run_to_the_wall_clock_end`:
//!   E's check weighed the payload's time left while the load runs the
//!   larger wall-clock end (up to the longest lease); the check now weighs
//!   the lease the load holds (mutant `restore-checks-stated`).
//!
//! Checked sound (they pass): `replica_of_a_replica_promoted_directly_…`
//! (not with an announcement of M forwarded to the sub-replica: C′),
//! `replica_of_a_replica_is_not_vouched_…`, and the control of G.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Finding A: the teacher is an address, not a life.
///
/// M (max-ttl 1000) → R; R learns 1000 from M and is taught by
/// `127.0.0.1:M`. M restarts without its files (a new disk) and with
/// `max-ttl-ms` raised to 3000 in its configuration. Its new life has no
/// replica set and no acknowledged-length file: it is not held
/// (`LeaseAck::at_load`, "a master that never had a replica"). R reconnects
/// and asks for a full sync, which waits for `repl-diskless-sync-delay`
/// (Redis' default, 5 s); a replica waiting for its sync is not in the
/// master's replica set (only online ones are), so M's restart window
/// (3 s) ends first and M grants a 3 s lease. M dies; R is promoted. R
/// still counts as taught (its teacher's address is the address it
/// follows) and guards for 1 s: it grants while M's 3 s lease runs.
#[test]
fn master_restarted_without_files_is_not_the_teacher_of_its_replica() {
    let mut m = adversarial_node("1000").start();
    let r = start_replica(&m, adversarial_node("1000"));
    // M's first start opened a 1 s window.
    let mut rc = taught_replica_of(&m, &r);

    // M: a new disk, max-ttl-ms raised in its configuration, Redis'
    // default diskless sync delay.
    m.kill();
    wipe_dir(&m);
    m.restart_with(&[
        ("redlock.max-ttl-ms", "3000"),
        ("repl-diskless-sync", "yes"),
        ("repl-diskless-sync-delay", "5"),
    ]);
    let mut mm = m.connection();
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        3000,
        Instant::now() + Duration::from_secs(8),
    );
    eprintln!(
        "M after restart: granted {:?}; R link {:?}, taught {}, longest {}",
        granted_a.map(|g| g.elapsed()),
        info_field(&mut rc, "replication", "master_link_status"),
        redlock_info(&mut rc, "taught_by_master"),
        redlock_info(&mut rc, "longest_lease_ms"),
    );
    let Some(granted_a) = granted_a else {
        // Held back until R acknowledged: safe.
        return;
    };
    drop(mm);
    m.kill();
    promote(&mut rc);
    assert_no_second_holder(&mut rc, "L", granted_a, 3000, "R");
}

/// Finding B: the teacher survives a life as master (switchovers back and
/// forth, no disk lost).
///
/// B master, A and C its replicas (1000; A's teacher is B). Switchover to
/// A: B and C follow A. Switchover back to B: C follows B at once (partial
/// resync), A (written to meanwhile, so it needs a full sync, which waits
/// for `repl-diskless-sync-delay`) is pointed at B. A's teacher is still B
/// from its first life as B's replica, so A counts as taught without any
/// record of B's new life. `max-ttl-ms` is raised on the new master B; C
/// acknowledges it; B grants 3 s. B and C are lost; A is promoted and
/// guards for 1 s.
#[test]
fn teacher_from_an_earlier_life_as_replica_does_not_teach_the_new_life() {
    let b = adversarial_node("1000").start();
    let a = start_replica(&b, adversarial_node("1000"));
    let c = start_replica(&b, adversarial_node("1000"));
    let mut bc = b.connection();
    let _ = first_grant(
        &mut bc,
        "warm",
        "x",
        1000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("warm grant");
    let _: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut bc).unwrap();
    let mut ac = a.connection();
    let mut cc = c.connection();
    for con in [&mut ac, &mut cc] {
        wait_until(Duration::from_secs(20), "taught by B", || {
            redlock_info(con, "taught_by_master") == 1
        });
    }
    // Switchover to A.
    promote(&mut ac);
    replica_of(&mut bc, &a);
    replica_of(&mut cc, &a);
    wait_for_link(&mut bc);
    wait_for_link(&mut cc);
    for con in [&mut bc, &mut cc] {
        wait_until(Duration::from_secs(20), "taught by A", || {
            redlock_info(con, "taught_by_master") == 1
        });
    }
    // Switchover back to B (as Sentinel does: promote, then repoint).
    config_set(&mut bc, "repl-diskless-sync", "yes");
    config_set(&mut bc, "repl-diskless-sync-delay", "5");
    promote(&mut bc);
    replica_of(&mut cc, &b);
    wait_for_link(&mut cc);
    // A took a write after B left it: it needs a full sync.
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut ac).unwrap();
    replica_of(&mut ac, &b);
    eprintln!(
        "A pointed back at B: taught {}, link {:?}",
        redlock_info(&mut ac, "taught_by_master"),
        info_field(&mut ac, "replication", "master_link_status")
    );
    // The new master's max-ttl-ms is raised; C acknowledges it.
    let _ = first_grant(
        &mut bc,
        "probe",
        "p",
        1000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("B grants after its window");
    config_set(&mut bc, "redlock.max-ttl-ms", "3000");
    let granted_a = first_grant(
        &mut bc,
        "L",
        "owner-a",
        3000,
        Instant::now() + Duration::from_secs(3),
    );
    eprintln!(
        "B ACQUIRE L 3000 -> {:?}; A link {:?}, taught {}, longest {}",
        granted_a.map(|g| g.elapsed()),
        info_field(&mut ac, "replication", "master_link_status"),
        redlock_info(&mut ac, "taught_by_master"),
        redlock_info(&mut ac, "longest_lease_ms"),
    );
    let Some(granted_a) = granted_a else {
        return;
    };
    drop(bc);
    drop(cc);
    let (mut b, mut c) = (b, c);
    b.kill();
    c.kill();
    promote(&mut ac);
    assert_no_second_holder(&mut ac, "L", granted_a, 3000, "A");
}

/// M → X → Y, Y taught by X with 1 s; Y paused and cut off from X; M
/// raised to 5 s grants L for 5 s (X acknowledged); M and X killed, Y
/// resumed. Returns Y, X (stopped, for a rejoin) and when L was granted, or
/// `None` when M refused the 5 s lease (the safe outcome). With
/// `m_announces`, a second replica of M comes online before the cut, and
/// M's announcement (sent to every replica that comes online) reaches Y
/// through X, which forwards M's stream verbatim.
fn chain_with_the_last_replica_cut_off(m_announces: bool) -> Option<(Node, Node, Instant)> {
    let node = || adversarial_node("1000");
    let mut m = node().start();
    let mut x = start_replica(&m, node());
    let y = start_replica(&x, node());
    // Y is taught by X, which forwards M's stream.
    let mut yc = taught_replica_of(&m, &y);
    let _z = m_announces.then(|| {
        let z = start_replica(&m, node());
        wait_until(
            Duration::from_secs(10),
            "M's announcement forwarded to Y",
            || redlock_info(&mut yc, "sync_fresh") >= 1,
        );
        z
    });
    drop(yc);
    let mut mm = m.connection();
    y.pause();
    // X drops its link to Y (Y, paused, sees it on resuming).
    let mut xc = x.connection();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut xc)
        .unwrap();
    drop(xc);
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        5000,
        Instant::now() + Duration::from_secs(5),
    );
    eprintln!("M ACQUIRE L 5000 -> {:?}", granted_a.map(|g| g.elapsed()));
    let Some(granted_a) = granted_a else {
        y.resume();
        return None;
    };
    drop(mm);
    m.kill();
    x.kill();
    y.resume();
    Some((y, x, granted_a))
}

/// Checked sound: a replica of a replica promoted directly.
///
/// M → X → Y (1000). Y is cut off (paused, X drops its link); `max-ttl-ms`
/// is raised on M, X (M's only replica) acknowledges, M grants 5 s. M and
/// X are lost; Y is promoted (by hand: Sentinel never promotes a replica of
/// a replica). Y is taught by X, but X, a replica, never announced its hold
/// to Y: since `sync_rule::taught_at_promotion`, Y counts as untaught and
/// guards a day (it guarded 1 s before, asserted below). Its life also
/// starts from what X announced its replicas acknowledged: X never was a
/// master, so 0, and Y refuses every lease (`NOSYNC`) until a replica of its
/// own acknowledges. Safe while no replica joins it (at the cost of
/// availability); see `replica_of_a_replica_promoted_directly_then_its_old_master_rejoins`
/// for what a replica's acknowledgement then does. Not safe when an
/// announcement of M reached Y through X before the cut (finding C′,
/// `replica_of_a_replica_taught_by_its_top_masters_forwarded_announcement`).
#[test]
fn replica_of_a_replica_promoted_directly_after_master_and_its_replica_are_lost() {
    let Some((y, _x, granted_a)) = chain_with_the_last_replica_cut_off(false) else {
        return;
    };
    let mut yc = y.connection();
    eprintln!(
        "Y before promotion: taught {}, longest {}",
        redlock_info(&mut yc, "taught_by_master"),
        redlock_info(&mut yc, "longest_lease_ms")
    );
    promote(&mut yc);
    eprintln!(
        "Y promoted: grace window {}, remaining {}, acked {}",
        redlock_info(&mut yc, "grace_window_ms"),
        redlock_info(&mut yc, "grace_remaining_ms"),
        redlock_info(&mut yc, "longest_lease_acked_ms")
    );
    // No announcement of X reached Y: untaught at its promotion, a day.
    assert_eq!(redlock_info(&mut yc, "grace_window_ms"), 86_400_000);
    assert_no_second_holder(&mut yc, "L", granted_a, 5000, "Y");
}

/// Finding D: the cut-off rule of the replica-sync promotion
/// (`core/sync_rule.rs::promotion`) measured the link's down time against
/// the longest lease the *replica* knows, assuming a master that lost its
/// disk waits that long before granting. It waits only what its
/// configuration says, which may be shorter: here the old life's 5 s came
/// from a run-time `CONFIG SET` that no configuration file keeps.
///
/// M (`sync-replicas 1`, `max-ttl-ms` 2000 on its command line, raised to
/// 5000 at run time) → R, current, learned 5000. R is cut off (paused: a
/// partition). M comes back on a new disk with its command line; S (a
/// replacement replica) syncs; after its 2 s restart window M grants a
/// 2 s lease that S acknowledges (WAIT 1 = 1). M dies; R is promoted: its
/// link has been down for less than the 5 s it knows, its vouch is fresh,
/// so it granted at once; S is repointed at R (Sentinel) and R granted the
/// lock while M's lease ran.
///
/// Closed by two rules: M announces its new-disk wait
/// (`sync_rule::new_disk_wait`), 2000 (the raise had no file to go to), and
/// R cuts off at it; and R, which notices its link down only when it
/// resumes, right before its promotion, counts the link as down from the
/// last cron tick that saw it up, before its pause
/// (`sync_rule::link_down_since`): measured from when it noticed, the down
/// time was a few ms.
#[test]
fn a_master_on_a_new_disk_waits_less_than_the_replicas_cut_off() {
    master_on_a_new_disk_waits_less("");
}

/// The mutant puts finding D back: the cut-off at R's longest lease only.
#[test]
#[should_panic(expected = "two holders")]
fn a_master_on_a_new_disk_waits_less_under_its_mutant() {
    master_on_a_new_disk_waits_less("new-disk-wait-ignored");
}

/// The paused replica's mutant: the link counts as down from when R
/// noticed, a few ms before its promotion.
#[test]
#[should_panic(expected = "two holders")]
fn a_paused_replica_measures_its_cut_off_from_when_it_resumes_under_its_mutant() {
    master_on_a_new_disk_waits_less("link-down-when-noticed");
}

fn master_on_a_new_disk_waits_less(mutants: &str) {
    let synced = |ttl: &str| {
        Node::builder()
            .config("redlock.sync-replicas", "1")
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", ttl)
    };
    let mut m = synced("2000")
        .config("redlock.restart-grace-ms", "0")
        .start();
    let r = start_replica(
        &m,
        synced("2000")
            .config("redlock.restart-grace-ms", "0")
            .env("REDLOCK_TEST_MUTANTS", mutants),
    );
    let mut rc = r.connection();
    config_set(&mut rc, "redlock.restart-grace-ms", "-1");
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.restart-grace-ms", "-1");
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    assert!(first_synced_grant(
        &mut mm,
        "warm",
        "x",
        5000,
        1,
        Instant::now() + Duration::from_secs(10)
    )
    .is_some());
    wait_until(Duration::from_secs(10), "R current, learned 5 s", || {
        redlock_info(&mut rc, "sync_current") == 1
            && redlock_info(&mut rc, "longest_lease_ms") >= 5_000
    });
    eprintln!(
        "M's new-disk wait {} ms, as R holds it {} ms",
        redlock_info(&mut mm, "sync_new_disk_wait_ms"),
        redlock_info(&mut rc, "sync_master_new_disk_wait_ms")
    );
    drop(mm);
    drop(rc);
    // A partition: R hears nothing more of M.
    r.pause();
    m.kill();
    wipe_dir(&m);
    m.restart(); // its configuration: max-ttl-ms 2000
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.restart-grace-ms", "-1");
    let s = start_replica(&m, synced("2000"));
    let granted_a = first_synced_grant(
        &mut mm,
        "L",
        "owner-a",
        2000,
        1,
        Instant::now() + Duration::from_secs(8),
    );
    eprintln!(
        "M (new disk) granted L 2000 with S: {:?}",
        granted_a.map(|g| g.elapsed())
    );
    let Some(granted_a) = granted_a else {
        r.resume();
        return;
    };
    drop(mm);
    m.kill();
    r.resume();
    let mut rc = r.connection();
    promote(&mut rc);
    eprintln!(
        "R promoted: last promotion {} (1 at once, 2 rest, 3 guard)",
        redlock_info(&mut rc, "sync_last_promotion")
    );
    // Sentinel repoints the other replica at the new master.
    let mut sc = s.connection();
    replica_of(&mut sc, &r);
    let until = granted_a + Duration::from_millis(3_000);
    match first_synced_grant(&mut rc, "L", "owner-b", 1000, 1, until) {
        None => eprintln!("R did not grant L within 3 s of the 2 s lease"),
        Some(granted_b) => {
            let gap = granted_b - granted_a;
            eprintln!("R granted L {gap:?} after M's 2 s lease began");
            assert!(
                gap >= Duration::from_millis(2_000),
                "two holders: gap {gap:?}"
            );
        }
    }
}

/// Finding E: `RESTORE` (what `MIGRATE` sends) puts a lease on a master
/// without the lease-ack check (`core/lease_ack_rule.rs` gates ACQUIRE and
/// EXTEND only; `datatype.rs::rdb_load` accepts any lease up to the node's
/// longest).
///
/// M → R (1000). R is cut off (paused, M drops its link). `max-ttl-ms` is
/// raised to 5000 on M (so that it may take the lock below); an ACQUIRE of
/// 5 s is refused there (`NOSYNC`: R has not acknowledged), but a lock
/// holding 5 s, dumped from the node it was granted on, is restored on M.
/// M dies; R is promoted, guards for the 1 s it knows, and grants the lock
/// while the restored 5 s lease runs.
#[test]
fn restore_bypasses_the_lease_ack_check() {
    let mut m = adversarial_node("1000")
        .config("redlock.restart-grace-ms", "0")
        .start();
    let r = start_replica(&m, adversarial_node("1000"));
    let mut mm = m.connection();
    assert!(acquire(&mut mm, "warm", "x", 1000).is_some());
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mm).unwrap();
    let mut rc = r.connection();
    wait_until(Duration::from_secs(20), "R taught by M", || {
        redlock_info(&mut rc, "taught_by_master") == 1
            && redlock_info(&mut rc, "longest_lease_ms") >= 1_000
    });
    drop(rc);
    // The node the lock was granted on (another shard, or the old home of
    // the key).
    let q = adversarial_node("5000")
        .config("redlock.restart-grace-ms", "0")
        .start();
    let mut qc = q.connection();
    assert!(acquire(&mut qc, "L", "owner-a", 5000).is_some());
    let granted_a = Instant::now();
    let payload: Vec<u8> = redis::cmd("DUMP").arg("L").query(&mut qc).unwrap();
    // R cut off.
    r.pause();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut mm)
        .unwrap();
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    // The lease-ack check holds an ACQUIRE of 5 s back...
    let refused = acquire_result(&mut mm, "other", "o", 5000);
    eprintln!("M ACQUIRE other 5000 -> {refused:?}");
    assert!(refused.is_err(), "{refused:?}");
    // ... but not a RESTORE of a lock holding 5 s.
    let restored: redis::RedisResult<()> = redis::cmd("RESTORE")
        .arg("L")
        .arg(0)
        .arg(&payload)
        .query(&mut mm);
    eprintln!(
        "M RESTORE L -> {restored:?}; M holds {:?}",
        inspect(&mut mm, "L")
    );
    if restored.is_err() {
        // Refused: it changed nothing; once R acknowledged the raise (the
        // refusal announced it), the RESTORE passes.
        assert!(inspect(&mut mm, "L").is_none_or(|v| !v.held));
        r.resume();
        wait_until(
            Duration::from_secs(20),
            "RESTORE passes once R acknowledged",
            || {
                redis::cmd("RESTORE")
                    .arg("L")
                    .arg(0)
                    .arg(&payload)
                    .query::<()>(&mut mm)
                    .is_ok()
            },
        );
        assert!(inspect(&mut mm, "L").is_some_and(|v| v.held));
        return;
    }
    drop(mm);
    m.kill();
    r.resume();
    let mut rc = r.connection();
    promote(&mut rc);
    assert_no_second_holder(&mut rc, "L", granted_a, 5000, "R");
}

/// Finding D, without a pause: the replica sees its link go down when the
/// master dies (and cannot reconnect: a partition between them), so the
/// cut-off measures from the right moment; it compared with the replica's
/// longest lease (5 s, learned from a run-time raise), while the master on
/// a new disk waited only for its configured 2 s (`max-ttl-ms` 2000 and
/// `restart-grace-ms` -1 on its command line, no configuration file).
///
/// Closed: M announces its new-disk wait, 2000 (the 5000 raise could not
/// be written), and R, cut off for more than that, keeps the guard.
#[test]
fn a_replica_cut_off_for_less_than_it_knows_but_more_than_the_new_disk_waits() {
    replica_cut_off_for_more_than_the_new_disk_waits("");
}

/// The mutant puts finding D back: the cut-off at R's longest lease only.
#[test]
#[should_panic(expected = "two holders")]
fn a_replica_cut_off_for_more_than_the_new_disk_waits_under_its_mutant() {
    replica_cut_off_for_more_than_the_new_disk_waits("new-disk-wait-ignored");
}

/// Finding D's rule, what it leaves: a partition that resets nothing. R's
/// path to M goes silent (the proxy delivers nothing either way, closes
/// included) before M dies; R's link stays up in its own eyes until
/// `repl-timeout` (60 s), and the cut-off, which counts from when the link
/// went down, sees a few ms. M comes back on a new disk, waits its 2 s and
/// grants; R, promoted, grants at once.
#[test]
#[ignore = "open finding: a partition that resets nothing is noticed at repl-timeout; the replica's link counts as up until then and the cut-off does not see it"]
fn a_replica_behind_a_silent_partition_counts_its_link_up() {
    replica_cut_off(true, "");
}

fn replica_cut_off_for_more_than_the_new_disk_waits(mutants: &str) {
    replica_cut_off(false, mutants);
}

/// `silent`: the path goes silent (nothing reaches R, not even the end of
/// M's connection) instead of breaking.
fn replica_cut_off(silent: bool, mutants: &str) {
    use redlock_testkit::proxy::FaultProxy;
    let synced = |ttl: &str| {
        Node::builder()
            .config("redlock.sync-replicas", "1")
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", ttl)
    };
    // Its first start waits its 2 s window (the warm grant below tries
    // again meanwhile).
    let mut m = synced("2000").start();
    let m_addr: std::net::SocketAddr = m.addr().parse().unwrap();
    // R reaches M through a path that can be cut.
    let path = FaultProxy::start(m_addr);
    let r = synced("2000")
        .config("redlock.restart-grace-ms", "0")
        .config("replicaof", &format!("127.0.0.1 {}", path.addr().port()))
        .env("REDLOCK_TEST_MUTANTS", mutants)
        .start();
    let mut rc = r.connection();
    wait_for_link(&mut rc);
    config_set(&mut rc, "redlock.restart-grace-ms", "-1");
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    assert!(first_synced_grant(
        &mut mm,
        "warm",
        "x",
        5000,
        1,
        Instant::now() + Duration::from_secs(10)
    )
    .is_some());
    wait_until(Duration::from_secs(10), "R current, learned 5 s", || {
        redlock_info(&mut rc, "sync_current") == 1
            && redlock_info(&mut rc, "longest_lease_ms") >= 5_000
    });
    let wait = redlock_info(&mut rc, "sync_master_new_disk_wait_ms");
    eprintln!(
        "M's new-disk wait {} ms, as R holds it {wait} ms",
        redlock_info(&mut mm, "sync_new_disk_wait_ms"),
    );
    assert_eq!(wait, 2_000, "the raise to 5000 has no file to go to");
    drop(mm);
    // The path breaks for good: new connections reach nothing.
    let dead: std::net::SocketAddr = format!("127.0.0.1:{}", redlock_testkit::free_port())
        .parse()
        .unwrap();
    path.set_upstream(dead);
    if silent {
        path.set(redlock_testkit::proxy::Fault::Blackhole);
    }
    m.kill();
    if !silent {
        wait_until(Duration::from_secs(10), "R's link down", || {
            !link_up(&mut rc)
        });
    }
    let down_at = Instant::now();
    wipe_dir(&m);
    m.restart(); // its configuration: max-ttl-ms 2000
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.restart-grace-ms", "-1");
    let s = start_replica(&m, synced("2000"));
    let granted_a = first_synced_grant(
        &mut mm,
        "L",
        "owner-a",
        2000,
        1,
        Instant::now() + Duration::from_secs(8),
    );
    eprintln!(
        "M (new disk) granted L 2000 with S {:?} after R's link went down",
        granted_a.map(|g| g - down_at)
    );
    let Some(granted_a) = granted_a else {
        return;
    };
    drop(mm);
    m.kill();
    eprintln!("R's link up in its own eyes: {}", link_up(&mut rc));
    promote(&mut rc);
    eprintln!(
        "R promoted {:?} after its link went down: last promotion {} (1 at once, 2 rest, 3 guard)",
        down_at.elapsed(),
        redlock_info(&mut rc, "sync_last_promotion")
    );
    let mut sc = s.connection();
    replica_of(&mut sc, &r);
    let until = granted_a + Duration::from_millis(3_000);
    match first_synced_grant(&mut rc, "L", "owner-b", 1000, 1, until) {
        None => eprintln!("R did not grant L within 3 s of the 2 s lease"),
        Some(granted_b) => {
            let gap = granted_b - granted_a;
            eprintln!("R granted L {gap:?} after M's 2 s lease began");
            assert!(
                gap >= Duration::from_millis(2_000),
                "two holders: gap {gap:?}"
            );
        }
    }
}

/// Finding F: a master that never had a replica is not held back while its
/// first replica syncs (a replica joins the life's set only once online),
/// and the node record in that replica's snapshot is the one of the fork.
///
/// M (1000) has always run alone. R (1000) is pointed at it; M forks the
/// snapshot (record: 1000) and streams it (diskless, slowly: a large data
/// set, here `rdb-key-save-delay`). Meanwhile `max-ttl-ms` is raised on M
/// and M grants a 5 s lease at once (no replica in its life yet). R
/// receives the whole snapshot and loads it (slowly, `key-load-delay`); M
/// dies before R's first acknowledgement, after which it would have sent
/// the stream (with the record of 5 s). R, taught by M (the snapshot's
/// record), promoted, guards for 1 s, and waits for a replica to
/// acknowledge (its life starts at 0); the old master comes back as its
/// replica (Sentinel's reconfiguration), acknowledges, and R grants.
#[test]
fn first_replica_promoted_after_loading_a_snapshot_older_than_a_raise() {
    let mut m = adversarial_node("1000")
        .config("redlock.restart-grace-ms", "0")
        .config("repl-diskless-sync", "yes")
        .config("rdb-key-save-delay", "20000")
        .start();
    let mut mm = m.connection();
    assert!(acquire(&mut mm, "warm", "x", 1000).is_some());
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("filler{i}"))
            .arg("v".repeat(2000))
            .query(&mut mm)
            .unwrap();
    }
    let r = adversarial_node("1000")
        .config("key-load-delay", "30000")
        .config("loading-process-events-interval-bytes", "1024")
        .start();
    let mut rc = r.connection();
    replica_of(&mut rc, &m);
    wait_until(Duration::from_secs(10), "M streaming R's snapshot", || {
        info_field(&mut mm, "replication", "slave0")
            .is_some_and(|l| l.contains("state=wait_bgsave") || l.contains("state=send_bulk"))
    });
    config_set(&mut mm, "redlock.max-ttl-ms", "5000");
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        5000,
        Instant::now() + Duration::from_secs(2),
    );
    eprintln!(
        "M ACQUIRE L 5000 during R's first sync -> {:?}; M's replica line {:?}",
        granted_a.map(|g| g.elapsed()),
        info_field(&mut mm, "replication", "slave0")
    );
    let Some(granted_a) = granted_a else {
        // Held back while R syncs; once granted, R acknowledged knowing it.
        match acquire_result(&mut mm, "L", "owner-a", 5000) {
            Err(e) => assert!(format!("{e:?}").contains("NOSYNC"), "{e:?}"),
            Ok(_) => assert!(redlock_info(&mut rc, "longest_lease_ms") >= 5_000),
        }
        return;
    };
    wait_until(Duration::from_secs(10), "R loading the snapshot", || {
        info_field(&mut rc, "persistence", "loading").as_deref() == Some("1")
    });
    drop(mm);
    m.kill();
    wait_until(Duration::from_secs(10), "R loaded", || {
        info_field(&mut rc, "persistence", "loading").as_deref() == Some("0")
    });
    eprintln!(
        "R loaded {:?} after the grant: taught {}, longest {}",
        granted_a.elapsed(),
        redlock_info(&mut rc, "taught_by_master"),
        redlock_info(&mut rc, "longest_lease_ms")
    );
    promote(&mut rc);
    // Its life starts from the acknowledged length its teacher announced,
    // which the snapshot does not carry (0): it waits for a replica. The
    // old master comes back, and Sentinel makes it a replica of R.
    m.set_replica_of(Some(r.port()));
    m.restart();
    assert_no_second_holder(&mut rc, "L", granted_a, 5000, "R");
}

/// Finding C: as [`replica_of_a_replica_promoted_directly_after_master_and_its_replica_are_lost`],
/// but X comes back (restarted with its files) as Y's replica: its
/// acknowledgement of Y's record (1 s) ends Y's hold, and Y, its 1 s
/// window over, grants while M's 5 s lease runs.
///
/// Since `sync_rule::taught_at_promotion` Y usually guards a day: no
/// announcement of the master it follows reached it (X, a replica,
/// announces nothing), so it is untaught at its promotion, whatever X's
/// acknowledgement releases (the mutant `untaught-not-taught-on` puts the
/// 1 s back). Still open: in 3 runs of about 100 Y guarded 1 s (counted as
/// taught at its promotion) and granted about 1.0 s into the lease, as when
/// an announcement of M reaches Y through X:
/// [`replica_of_a_replica_taught_by_its_top_masters_forwarded_announcement`].
#[test]
#[ignore = "open finding: in a few runs in 100 the sub-replica counts as taught at its promotion (as in C′), guards 1 s, and its hold at 0 is released by the old master's acknowledgement"]
fn replica_of_a_replica_promoted_directly_then_its_old_master_rejoins() {
    let Some((y, mut x, granted_a)) = chain_with_the_last_replica_cut_off(false) else {
        return;
    };
    let mut yc = y.connection();
    promote(&mut yc);
    x.set_replica_of(Some(y.port()));
    x.restart();
    eprintln!(
        "X back as Y's replica; Y knows {} ms",
        redlock_info(&mut yc, "longest_lease_ms")
    );
    assert_no_second_holder(&mut yc, "L", granted_a, 5000, "Y");
}

/// Finding C′ (open): as [`replica_of_a_replica_promoted_directly_after_master_and_its_replica_are_lost`],
/// but before the cut a second replica of M comes online (an everyday
/// event), and M's announcement to it reaches Y too: X forwards M's stream
/// verbatim, and Y applies the announcement as one of the master it
/// follows (X, its teacher), fresh after its full sync. Y then counts as
/// taught at its promotion (M's hold was over) and its life starts from the
/// acknowledged length M announced (1000), not held at 0: it guards 1 s and
/// grants while M's 5 s lease runs (about 1.0 s into it, X not needed).
#[test]
#[ignore = "open finding: a replica of a replica applies its top master's announcement, forwarded by its master, as its master's own: taught at its promotion, it guards for its own longest lease"]
fn replica_of_a_replica_taught_by_its_top_masters_forwarded_announcement() {
    let Some((y, _x, granted_a)) = chain_with_the_last_replica_cut_off(true) else {
        return;
    };
    let mut yc = y.connection();
    promote(&mut yc);
    eprintln!(
        "Y promoted after a forwarded announcement of M: grace window {}, acked {}",
        redlock_info(&mut yc, "grace_window_ms"),
        redlock_info(&mut yc, "longest_lease_acked_ms")
    );
    assert_no_second_holder(&mut yc, "L", granted_a, 5000, "Y");
}

/// The incremental AOF file of a node whose `appendfilename` is `name`.
fn incr_aof(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    std::fs::read_dir(dir.join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let f = p.file_name().unwrap().to_string_lossy().into_owned();
            f.starts_with(&format!("{name}.")) && f.ends_with(".incr.aof")
        })
        .expect("incremental AOF")
}

/// Finding G: the run record (`redlock-run-state`, which decides whether a
/// restart is exempt from the guard) lives in `dir/appenddirname`, which
/// two instances sharing `dir` may share too: Redis 7 names the AOF files
/// and their manifest after `appendfilename`, so two nodes with their own
/// `appendfilename` (and `dbfilename`) may keep the default
/// `appenddirname`.
///
/// A and B share `dir` and `appendonlydir` (A: `a.aof`, B: `b.aof`), both
/// `appendfsync always`. A stops being durable (`CONFIG SET appendfsync
/// everysec`: its record says so); B then writes its own record (durable,
/// no window) over it. A grants a 2 s lease, and a crash loses it (the
/// last second of an `everysec` AOF: here its incremental file cut back).
/// A restarts, reads B's record, is exempt, and grants the lock again at
/// once.
#[test]
fn nodes_sharing_the_aof_directory_share_the_run_record() {
    crash_after_a_neighbour_wrote_its_run_record("appendonlydir");
}

/// The control of [`nodes_sharing_the_aof_directory_share_the_run_record`]:
/// with its own `appenddirname`, B's record is its own and A's restart
/// waits.
#[test]
fn nodes_sharing_dir_with_their_own_aof_directories_keep_their_run_records() {
    crash_after_a_neighbour_wrote_its_run_record("b-aof");
}

fn crash_after_a_neighbour_wrote_its_run_record(b_aof_dir: &str) {
    let durable = |name: &str| {
        adversarial_node("2000")
            .config("appendonly", "yes")
            .config("appendfsync", "always")
            .config("appendfilename", &format!("{name}.aof"))
            .config("dbfilename", &format!("{name}.rdb"))
    };
    let mut a = durable("a").start();
    let dir = a.dir().to_path_buf();
    let mut ac = a.connection();
    // A's first window, then its record says: durable, no window.
    let _ = first_grant(
        &mut ac,
        "warm",
        "x",
        2000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("A grants after its first window");
    config_set(&mut ac, "appendfsync", "everysec");
    // B in the same directories: its record (durable, no window once its
    // first window is over) replaces A's.
    let b = durable("b")
        .config("dir", dir.to_str().unwrap())
        .config("appenddirname", b_aof_dir)
        .start();
    let mut bc = b.connection();
    let _ = first_grant(
        &mut bc,
        "warm-b",
        "x",
        2000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("B grants after its first window");
    let records: Vec<_> = std::fs::read_dir(dir.join("appendonlydir"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    eprintln!("the AOF directory: {records:?}");
    // A grants L; a crash loses the write (everysec).
    let incr = incr_aof(&dir, "a");
    let before = std::fs::metadata(&incr).unwrap().len();
    assert!(acquire(&mut ac, "L", "owner-a", 2000).is_some());
    let granted_a = Instant::now();
    drop(ac);
    a.kill();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&incr)
        .unwrap()
        .set_len(before)
        .unwrap();
    a.restart();
    let mut ac = a.connection();
    eprintln!(
        "A restarted: exempt {}, grace window {}",
        redlock_info(&mut ac, "restart_exempt"),
        redlock_info(&mut ac, "grace_window_ms")
    );
    assert_no_second_holder(&mut ac, "L", granted_a, 2000, "A");
}

/// Checked sound: under the replica-sync check, a replica of a replica
/// (M → X → Y, all `sync-replicas 1`) that applied everything M wrote
/// (forwarded by X, with M's offsets) is not current: promoted, it keeps
/// the guard.
#[test]
fn replica_of_a_replica_is_not_vouched_by_forwarded_announcements() {
    let synced = || {
        Node::builder()
            .config("redlock.sync-replicas", "1")
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", "2000")
    };
    let m = synced().config("redlock.restart-grace-ms", "0").start();
    let x = start_replica(&m, synced().config("redlock.restart-grace-ms", "0"));
    let y = start_replica(&x, synced().config("redlock.restart-grace-ms", "0"));
    let mut xc = x.connection();
    config_set(&mut xc, "redlock.restart-grace-ms", "-1");
    let mut yc = y.connection();
    config_set(&mut yc, "redlock.restart-grace-ms", "-1");
    let mut mm = m.connection();
    assert!(first_synced_grant(
        &mut mm,
        "warm",
        "x",
        2000,
        1,
        Instant::now() + Duration::from_secs(10)
    )
    .is_some());
    wait_until(Duration::from_secs(10), "X current", || {
        redlock_info(&mut xc, "sync_current") == 1
    });
    let offset: u64 = info_field(&mut mm, "replication", "master_repl_offset")
        .unwrap()
        .parse()
        .unwrap();
    wait_until(Duration::from_secs(10), "Y has everything M wrote", || {
        info_field(&mut yc, "replication", "slave_repl_offset")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|o| o >= offset)
            && inspect(&mut yc, "warm").is_some()
    });
    assert_eq!(redlock_info(&mut yc, "sync_current"), 0);
    promote(&mut yc);
    assert_eq!(redlock_info(&mut yc, "sync_last_promotion"), 3);
    // Not current with X (no announcement of X reached it): untaught at its
    // promotion too (`sync_rule::taught_at_promotion`), a day, not X's 2 s.
    assert_eq!(redlock_info(&mut yc, "grace_window_ms"), 86_400_000);
}

/// Second read, H: finding A's rule sees only a replica that reaches the
/// master on the new disk. One that cannot (a partition between them,
/// while Sentinel still sees both) never shows in `INFO replication`, and
/// keeps counting as taught by the address.
///
/// M (1000) → R (through a path that can be cut), taught. The path breaks
/// for good; M dies and comes back on a new disk with `max-ttl-ms` 3000 in
/// its configuration (fresh: no file at all). No replica joins, so after
/// its 3 s restart window it grants a 3 s lease. M is lost; R is promoted
/// (its link has been down for seconds, well inside Sentinel's validity
/// window) and guards for the 1 s M's earlier run taught it.
#[test]
#[ignore = "open finding: a replica that never reaches the master restarted on a new disk still counts as taught by its address; the new run never sees it, and it hears nothing of the new run"]
fn replica_cut_off_from_a_master_restarted_without_files() {
    use redlock_testkit::proxy::FaultProxy;
    let mut m = adversarial_node("1000").start();
    let m_addr: std::net::SocketAddr = m.addr().parse().unwrap();
    let path = FaultProxy::start(m_addr);
    let r = adversarial_node("1000")
        .config("replicaof", &format!("127.0.0.1 {}", path.addr().port()))
        .start();
    let mut rc = r.connection();
    wait_for_link(&mut rc);
    let mut rc = {
        drop(rc);
        taught_replica_of(&m, &r)
    };
    let dead: std::net::SocketAddr = format!("127.0.0.1:{}", redlock_testkit::free_port())
        .parse()
        .unwrap();
    path.set_upstream(dead);
    m.kill();
    wait_until(Duration::from_secs(10), "R's link down", || {
        !link_up(&mut rc)
    });
    wipe_dir(&m);
    m.restart_with(&[("redlock.max-ttl-ms", "3000")]);
    let mut mm = m.connection();
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        3000,
        Instant::now() + Duration::from_secs(8),
    );
    eprintln!(
        "M (new disk, R cut off) granted L 3000: {:?}; R taught {}, longest {}",
        granted_a.map(|g| g.elapsed()),
        redlock_info(&mut rc, "taught_by_master"),
        redlock_info(&mut rc, "longest_lease_ms"),
    );
    let Some(granted_a) = granted_a else {
        return;
    };
    drop(mm);
    m.kill();
    promote(&mut rc);
    eprintln!(
        "R promoted: grace window {}, acked {}",
        redlock_info(&mut rc, "grace_window_ms"),
        redlock_info(&mut rc, "longest_lease_acked_ms")
    );
    assert_no_second_holder(&mut rc, "L", granted_a, 3000, "R");
}

/// Second read, I: the gap finding A's rule admits, "a fresh master
/// restarted again before its old replica came online". Its first run on
/// the new disk writes the acknowledged-length file at load (no replica):
/// the second run is not fresh, starts from its own longest lease, and
/// lets a replica in its first sync through (F's check is reached only
/// above the acknowledged length).
///
/// M (1000) → R, taught. M dies; R is held away meanwhile (paused: a
/// partition, or a sync of a large data set that the next restart cuts).
/// M comes back on a new disk with `max-ttl-ms` 3000 (run 1), and restarts
/// once more (run 2, a clean `SHUTDOWN NOSAVE`, say to finish its
/// configuration: its run record spares it the restart window) with Redis'
/// default diskless sync delay. R reconnects and waits for its full sync
/// (`wait_bgsave` in M's `INFO`); run 2 grants a 3 s lease, and dies
/// before forking R's snapshot. R, promoted, guards for 1 s.
///
/// Closed: a fresh life's file says it is fresh, and a load of it with no
/// replica yet is fresh again (`LeaseAck::at_load`); run 2 grants nothing
/// while R is in its first sync.
#[test]
fn a_master_restarted_twice_without_files_before_its_replica_came_online() {
    restarted_twice_on_a_new_disk("");
}

/// The mutant puts finding I back: run 2 is not fresh.
#[test]
#[should_panic(expected = "two holders")]
fn a_master_restarted_twice_on_a_new_disk_under_its_mutant() {
    restarted_twice_on_a_new_disk("fresh-forgotten-at-restart");
}

fn restarted_twice_on_a_new_disk(mutants: &str) {
    let mut m = adversarial_node("1000")
        .env("REDLOCK_TEST_MUTANTS", mutants)
        .start();
    let r = start_replica(&m, adversarial_node("1000"));
    let rc = taught_replica_of(&m, &r);
    drop(rc);
    r.pause();
    m.kill();
    wipe_dir(&m);
    m.restart_with(&[("redlock.max-ttl-ms", "3000")]);
    let mut mm = m.connection();
    eprintln!(
        "run 1 on the new disk: files {:?}",
        std::fs::read_dir(m.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
    drop(mm);
    m.restart_with(&[
        ("repl-diskless-sync", "yes"),
        ("repl-diskless-sync-delay", "5"),
    ]);
    r.resume();
    mm = m.connection();
    let mut rc = r.connection();
    // R is in its first sync with run 2, in M's INFO (what F's check and
    // A's look read).
    wait_until(
        Duration::from_secs(10),
        "R in its first sync with run 2",
        || {
            info_field(&mut mm, "replication", "slave0")
                .is_some_and(|l| l.contains("state=wait_bgsave"))
        },
    );
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        3000,
        Instant::now() + Duration::from_secs(8),
    );
    eprintln!(
        "run 2 granted L 3000: {:?}; M's replica line {:?}; R link {:?}, taught {}, longest {}",
        granted_a.map(|g| g.elapsed()),
        info_field(&mut mm, "replication", "slave0"),
        info_field(&mut rc, "replication", "master_link_status"),
        redlock_info(&mut rc, "taught_by_master"),
        redlock_info(&mut rc, "longest_lease_ms"),
    );
    let Some(granted_a) = granted_a else {
        return;
    };
    drop(mm);
    m.kill();
    promote(&mut rc);
    assert_no_second_holder(&mut rc, "L", granted_a, 3000, "R");
}

/// Second read, J: the gap finding A's rule admits, "a replica whose sync
/// begins less than 100 ms before a grant": the fresh master's look at
/// `INFO replication` is a 100 ms timer, and a grant between the replica's
/// `PSYNC` and the next look passes. Under steady traffic some ACQUIRE
/// lands in that gap at almost every reconnect; it turns into two holders
/// when the master is lost before the replica has loaded its snapshot (5 s
/// here: Redis' default diskless sync delay; a large data set takes
/// longer).
///
/// M (1000) → R, taught. R is held away (paused) while M comes back on a
/// new disk with `max-ttl-ms` 3000 and serves its restart window; R
/// reconnects, and the first grant after its `wait_bgsave` line shows is a
/// 3 s lease. M dies before forking R's snapshot; R, promoted, guards 1 s.
///
/// Closed: the fresh master sees the `PSYNC` itself (a command filter,
/// `host/lease_ack.rs::on_command`) and the next check looks
/// (`sync_seen`).
#[test]
fn a_grant_right_after_the_replicas_psync_on_a_fresh_master() {
    grant_right_after_psync("");
}

/// The mutant puts finding J back: the `PSYNC` is seen 100 ms late.
#[test]
#[should_panic(expected = "two holders")]
fn a_grant_right_after_the_replicas_psync_under_its_mutant() {
    grant_right_after_psync("joining-seen-late");
}

fn grant_right_after_psync(mutants: &str) {
    let mut m = adversarial_node("1000")
        .env("REDLOCK_TEST_MUTANTS", mutants)
        .start();
    let r = start_replica(&m, adversarial_node("1000"));
    let rc = taught_replica_of(&m, &r);
    drop(rc);
    r.pause();
    m.kill();
    wipe_dir(&m);
    m.restart_with(&[
        ("redlock.max-ttl-ms", "3000"),
        ("repl-diskless-sync", "yes"),
        ("repl-diskless-sync-delay", "5"),
    ]);
    let mut mm = m.connection();
    // The restart window is over: M grants (no replica anywhere).
    let _ = first_grant(
        &mut mm,
        "probe",
        "p",
        3000,
        Instant::now() + Duration::from_secs(8),
    )
    .expect("M grants after its window");
    r.resume();
    // Watch M's INFO with no pause, and ask at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = info_field(&mut mm, "replication", "slave0");
        if line.is_some_and(|l| l.contains("state=wait_bgsave")) {
            break;
        }
        assert!(Instant::now() < deadline, "R never reconnected");
    }
    let reply = acquire_result(&mut mm, "L", "owner-a", 3000);
    let granted_a = Instant::now();
    let mut rc = r.connection();
    eprintln!(
        "M (fresh) ACQUIRE L 3000 right after R's PSYNC -> {reply:?}; R taught {}, longest {}",
        redlock_info(&mut rc, "taught_by_master"),
        redlock_info(&mut rc, "longest_lease_ms"),
    );
    match reply {
        Ok(Some(_)) => {}
        Err(e) => {
            // Seen by the look: refused, as the rule means.
            assert_eq!(e.code(), Some("NOSYNC"), "{e}");
            return;
        }
        Ok(None) => panic!("L held by someone"),
    }
    drop(mm);
    m.kill();
    promote(&mut rc);
    assert_no_second_holder(&mut rc, "L", granted_a, 3000, "R");
}

/// Second read, K: E's check of a `RESTORE` weighs the lease as the
/// payload states it (`stated_left`: the time left), but the lock is loaded
/// with `lease_left`, which on a `RESTORE` (read as from disk) takes the
/// larger of the time left and the wall-clock end, up to the node's longest
/// lease. A dump from a node whose wall clock runs ahead (or a hand-made
/// payload) passes the check with a short lease and runs a long one.
///
/// M (1000) → R (1000), taught. R is cut off (paused, M drops its link);
/// `max-ttl-ms` is raised to 3000 on M. Q, its wall clock 5 s ahead, grants
/// L for 500 ms; its dump is restored on M: the check sees 500 ms (R
/// acknowledged 1000), M runs the lease for 3000 ms, longer than R ever
/// acknowledged knowing. M dies; R, promoted, guards for 1 s and grants L
/// while M's lease runs. (The holder was told 500 ms by Q: the overlap is
/// with the lease M ran and reported by `INSPECT`, and the rule "no lease
/// longer than the replicas acknowledged" is broken outright.)
#[test]
fn restore_checked_for_the_time_left_but_run_to_the_wall_clock_end() {
    restore_checked_for_what_the_load_holds(false);
}

/// The mutant puts the hole back: checked for the stated time left only.
#[test]
#[should_panic(expected = "two holders")]
fn restore_checked_for_the_time_left_only_under_its_mutant() {
    restore_checked_for_what_the_load_holds(true);
}

fn restore_checked_for_what_the_load_holds(mutant: bool) {
    let mutants = if mutant { "restore-checks-stated" } else { "" };
    let mut m = adversarial_node("1000")
        .config("redlock.restart-grace-ms", "0")
        .env("REDLOCK_TEST_MUTANTS", mutants)
        .start();
    let r = start_replica(&m, adversarial_node("1000"));
    let rc = taught_replica_of(&m, &r);
    drop(rc);
    let mut mm = m.connection();
    let q = adversarial_node("1000")
        .config("redlock.restart-grace-ms", "0")
        .env("REDLOCK_TEST_WALL_OFFSET_MS", "5000")
        .start();
    let mut qc = q.connection();
    r.pause();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut mm)
        .unwrap();
    config_set(&mut mm, "redlock.max-ttl-ms", "3000");
    assert!(
        acquire_result(&mut mm, "other", "o", 3000).is_err(),
        "M grants 3 s before R acknowledged"
    );
    assert!(acquire(&mut qc, "L", "owner-a", 500).is_some());
    let payload: Vec<u8> = redis::cmd("DUMP").arg("L").query(&mut qc).unwrap();
    let restored: redis::RedisResult<()> = redis::cmd("RESTORE")
        .arg("L")
        .arg(0)
        .arg(&payload)
        .query(&mut mm);
    let granted_a = Instant::now();
    let view = inspect(&mut mm, "L");
    eprintln!(
        "M RESTORE L (500 ms left, wall-clock end 5.5 s ahead) -> {restored:?}; M holds {view:?}; R acknowledged 1000"
    );
    if restored.is_err() {
        assert!(view.is_none_or(|v| !v.held));
        r.resume();
        return;
    }
    let held_ms = view.map_or(0, |v| if v.held { v.pttl.max(0) as u64 } else { 0 });
    drop(mm);
    m.kill();
    r.resume();
    let mut rc = r.connection();
    promote(&mut rc);
    assert_no_second_holder(&mut rc, "L", granted_a, held_ms, "R");
}

/// Second read, H without a partition: the replica is down (a reboot)
/// while the master comes back on a new disk and grants, and restarts
/// right after. It loads its own teacher file (still taught by the
/// address), reconnects, and waits for its full sync, which the master
/// does not live to send. "A replica that connects only after the check
/// needs no wait: its snapshot is forked after the grant" holds only if the
/// master lives until the replica loaded that snapshot.
///
/// M (1000) → R, taught. R goes down; M dies and comes back on a new disk
/// with `max-ttl-ms` 3000 (Redis' default diskless delay) and grants a 3 s
/// lease after its window. R starts again, reconnects (its sync waiting in
/// `wait_bgsave`); M dies; R, promoted, guards 1 s.
///
/// Closed by `sync_rule::taught_at_promotion`: R restarted and applied no
/// announcement of M since (the new run would send one only behind the
/// snapshot), so it is untaught at its promotion and guards a day, though
/// its teacher file still names M's address.
#[test]
fn replica_restarted_after_the_grant_of_a_master_restarted_without_files() {
    replica_restarted_after_the_grant("");
}

/// The mutant puts the second form of H back: R counts as taught by its file.
#[test]
#[should_panic(expected = "two holders")]
fn replica_restarted_after_the_grant_under_its_mutant() {
    replica_restarted_after_the_grant("untaught-not-taught-on");
}

fn replica_restarted_after_the_grant(mutants: &str) {
    let node = || adversarial_node("1000").env("REDLOCK_TEST_MUTANTS", mutants);
    let mut m = node().start();
    let mut r = start_replica(&m, node());
    let rc = taught_replica_of(&m, &r);
    drop(rc);
    r.kill();
    m.kill();
    wipe_dir(&m);
    m.restart_with(&[
        ("redlock.max-ttl-ms", "3000"),
        ("repl-diskless-sync", "yes"),
        ("repl-diskless-sync-delay", "5"),
    ]);
    let mut mm = m.connection();
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        3000,
        Instant::now() + Duration::from_secs(8),
    )
    .expect("M (new disk, no replica connected) grants after its window");
    r.restart();
    wait_until(
        Duration::from_secs(10),
        "R in its first sync with M",
        || {
            info_field(&mut mm, "replication", "slave0")
                .is_some_and(|l| l.contains("state=wait_bgsave"))
        },
    );
    let mut rc = r.connection();
    eprintln!(
        "R restarted {:?} after M's grant, syncing: taught {}, longest {}",
        granted_a.elapsed(),
        redlock_info(&mut rc, "taught_by_master"),
        redlock_info(&mut rc, "longest_lease_ms"),
    );
    drop(mm);
    m.kill();
    promote(&mut rc);
    assert_no_second_holder(&mut rc, "L", granted_a, 3000, "R");
}
