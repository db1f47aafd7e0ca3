//! Adversarial read of a6cdafb (`host/sync.rs::on_load` + `check`: a
//! master start that finds `redlock-sync-state-PORT` missing while
//! `redlock-sync-vouched-PORT` says a vouch went out refuses lock writes for
//! its new-disk wait, `SET_LOST_UNTIL`; `save_again` from the cron;
//! `check_recorded`): event sequences on real processes, each asserting the
//! SAFE (or live) outcome. A test that fails while its hole is open is
//! marked `#[ignore = "open finding: …"]`; run them with `-- --ignored`.
//!
//! Writes are made to fail as in `tests/adversarial_sync_save.rs`: a
//! directory named `redlock-sync-state-PORT.tmp`; or the file made
//! immutable (`chattr +i`: its replacement and its removal both fail).
//!
//! Open (each: a cut-off replica, vouched for R 1, promoted at once while
//! the restarted master's lease runs; figures on Redis 7.0.15 and Valkey
//! 8.1):
//! - `a_restart_inside_the_lost_wait_waits_on`: `SET_LOST_UNTIL` lives in
//!   the process, the file comes back at the first replica online (scan,
//!   announcement); a second restart inside the wait finds it and, durable,
//!   waits nothing (two holders 31–116 ms into a 2 s lease).
//! - `a_lost_start_waits_the_wait_it_announced_not_a_lower_one_configured_since`:
//!   the wait is this start's configured new-disk wait; `restart-grace-ms`
//!   lowered between runs (3000 → 1000) leaves the cut-off replica holding
//!   3000 (two holders 31–134 ms into a 3 s lease).
//! - `a_failed_write_that_cannot_remove_the_file_leaves_a_stale_replica_set`:
//!   `save` ignores a failed removal; the old file names fewer replicas, the
//!   start trusts it (two holders 32–248 ms into a 2 s lease).
//! - `an_unnamed_file_left_in_the_directory_hides_a_lost_replica_set`: the
//!   fallback to the unnamed file is read before `lost` is decided (two
//!   holders 31–34 ms into a 2 s lease).
//!
//! Checked sound (they pass): `restarts_that_lost_nothing_do_not_wait`
//! (restarts with the file: first grant 0.02–1.04 s after, as the replica
//! comes back; R lowered to 0 and done, file removed: 22–26 ms),
//! `a_former_replica_started_or_promoted_as_master_is_not_lost` (GRACE and
//! NOSYNC only, never the lost wait).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use redlock_testkit::proxy::FaultProxy;

/// M (`sync-replicas r`, `max-ttl-ms` 2000, durable) → R through a path
/// that can be cut, R current, the file naming R; then the next write of
/// M's file fails (the blocker stays until the caller removes it): R's
/// link is dropped, it resumes, and M's announcement to it fails to write
/// the file.
struct FailedAnnouncement {
    m: Node,
    path: FaultProxy,
    r: Node,
    rc: redis::Connection,
    mm: redis::Connection,
}

fn failed_announcement(r_value: u64) -> FailedAnnouncement {
    failed_announcement_with(r_value, 2_000, "-1")
}

/// [`failed_announcement`] with `max-ttl-ms` `ttl` and `restart-grace-ms`
/// `grace` on both.
fn failed_announcement_with(r_value: u64, ttl: u64, grace: &str) -> FailedAnnouncement {
    let m = durable(synced(r_value, ttl).config("redlock.restart-grace-ms", grace)).start();
    let path = FaultProxy::start(m.addr().parse().unwrap());
    let r = synced(r_value, ttl)
        .config("redlock.restart-grace-ms", grace)
        .config("replicaof", &format!("127.0.0.1 {}", path.addr().port()))
        .start();
    let mut rc = r.connection();
    wait_for_link(&mut rc);
    let mut mm = m.connection();
    assert!(first_synced_grant(
        &mut mm,
        "warm",
        "x",
        1000,
        r_value,
        Instant::now() + Duration::from_secs(10)
    )
    .is_some());
    wait_until(Duration::from_secs(10), "R current", || {
        redlock_info(&mut rc, "sync_current") == 1
    });
    assert!(file_names(&m, &r));
    block_writes(&m);
    let announced = redlock_info(&mut mm, "sync_announced");
    kill_replicas(&mut mm);
    wait_until(Duration::from_secs(10), "an announcement to R", || {
        redlock_info(&mut mm, "sync_announced") > announced
    });
    wait_until(Duration::from_secs(10), "R current again", || {
        redlock_info(&mut rc, "sync_current") == 1
    });
    assert!(
        !state_file(&m).exists(),
        "the failed write removed the file"
    );
    FailedAnnouncement { m, path, r, rc, mm }
}

/// After [`failed_announcement`]: R is cut off (its path leads nowhere), M
/// crashes with the file missing, the disk has room again, and M restarts
/// (`restart_with` these options first). When R's link went down, and when
/// M restarted.
fn cut_off_and_crash(
    m: &mut Node,
    path: &FaultProxy,
    configs: &[(&str, &str)],
) -> (Instant, Instant) {
    let dead: std::net::SocketAddr = format!("127.0.0.1:{}", redlock_testkit::free_port())
        .parse()
        .unwrap();
    path.set_upstream(dead);
    path.reset_connections();
    m.kill();
    let down_at = Instant::now();
    assert!(!state_file(m).exists());
    std::fs::remove_dir(blocker(m)).unwrap();
    let restarted_at = Instant::now();
    m.restart_with(configs);
    (down_at, restarted_at)
}

/// M (which granted `L` for `lease_ms` at `granted_a`) dies; R, cut off
/// since `down_at`, is promoted, S (M's replica) repointed at it: R must not
/// grant `L` while M's lease runs.
fn promote_cut_off(
    m: &mut Node,
    r: &Node,
    rc: &mut redis::Connection,
    s: &Node,
    granted_a: Instant,
    down_at: Instant,
    lease_ms: u64,
) {
    m.kill();
    promote(rc);
    eprintln!(
        "the cut-off replica promoted {:?} after its link went down: last promotion {} (1 at once, 2 rest, 3 guard)",
        down_at.elapsed(),
        redlock_info(rc, "sync_last_promotion")
    );
    replica_of(&mut s.connection(), r);
    assert_no_second_synced_holder(rc, "L", 1, granted_a, lease_ms, "the cut-off replica");
}

/// The wait of a start that lost its replica set lives in the process
/// (`SET_LOST_UNTIL`), while the file it is inferred from comes back at the
/// first replica that comes online (`scan` writes the grown set, and the
/// announcement to it its offset). A second restart inside the wait (a
/// crash loop, a supervisor's restart, the operator's) finds the file and
/// waits nothing: its durable restart is exempt from the guard, and its
/// replica set names S only.
///
/// M (`sync-replicas 1`, `max-ttl-ms` 2000, durable) → R current; M's
/// announcement fails to write the file; R is cut off, M crashes and
/// restarts (the lost wait, 2 s); S syncs with it (the file, naming S, is
/// back); M restarts again, grants L (2 s) with S, and dies; R, cut off
/// less than W, is promoted at once and grants L.
#[test]
#[ignore = "open finding: the lost wait is in memory; a replica coming online writes the file again inside it, and a second restart then waits nothing (two holders 31–116 ms into a 2 s lease, Redis 7.0 and Valkey 8.1)"]
fn a_restart_inside_the_lost_wait_waits_on() {
    let FailedAnnouncement {
        mut m,
        path,
        r,
        mut rc,
        mm,
    } = failed_announcement(1);
    drop(mm);
    let (down_at, restarted_at) = cut_off_and_crash(&mut m, &path, &[]);
    let s = start_replica(&m, synced(1, 2_000));
    wait_until(Duration::from_secs(5), "the file naming S", || {
        file_names(&m, &s)
    });
    eprintln!(
        "S online at M {:?} after M's first restart; the file is back: {}",
        restarted_at.elapsed(),
        std::fs::read_to_string(state_file(&m))
            .unwrap_or_default()
            .replace('\n', "; ")
    );
    m.kill();
    m.restart();
    let mut mm = m.connection();
    eprintln!(
        "M restarted again {:?} after its first restart: exempt {}, replicas known {}",
        restarted_at.elapsed(),
        redlock_info(&mut mm, "restart_exempt"),
        redlock_info(&mut mm, "sync_replicas_known"),
    );
    let granted_a = first_synced_grant(
        &mut mm,
        "L",
        "owner-a",
        2000,
        1,
        Instant::now() + Duration::from_secs(6),
    )
    .expect("M grants L");
    eprintln!(
        "M granted L 2000 with S {:?} after its first restart, {:?} after R's link went down",
        granted_a - restarted_at,
        granted_a - down_at
    );
    drop(mm);
    promote_cut_off(&mut m, &r, &mut rc, &s, granted_a, down_at, 2000);
}

/// The lost wait is this start's new-disk wait, from its configuration now
/// (`config_file::new_disk_wait` at `on_load`); the cut-off replica holds
/// the wait of the last announcement it applied. An explicit
/// `restart-grace-ms` lowered in the file between the two runs (the
/// operator's edit, applied by the restart) shortens the first and not the
/// second. For a new disk the node knows nothing else (docs/replica-sync.md,
/// Limits: "a replica cut off before it arrives holds the longer wait"); a
/// start that lost only its replica set still has its disk, where the
/// largest wait it ever announced could be kept (next to the vouch mark).
///
/// M and R: `max-ttl-ms` 3000, `restart-grace-ms` 3000 (W = 3000, R holds
/// it). The failed announcement; R cut off; M crashes and comes back with
/// `restart-grace-ms` 1000: it waits 1 s, grants L (3 s) with S, dies; R,
/// cut off for less than 3 s, is promoted at once.
#[test]
#[ignore = "open finding: the lost wait is the new-disk wait of this start's configuration, shorter than the one the cut-off replica holds after restart-grace-ms was lowered (two holders 31–134 ms into a 3 s lease, Redis 7.0 and Valkey 8.1)"]
fn a_lost_start_waits_the_wait_it_announced_not_a_lower_one_configured_since() {
    let FailedAnnouncement {
        mut m,
        path,
        r,
        mut rc,
        mm,
    } = failed_announcement_with(1, 3_000, "3000");
    drop(mm);
    eprintln!(
        "R holds M's new-disk wait {} ms",
        redlock_info(&mut rc, "sync_master_new_disk_wait_ms")
    );
    let (down_at, restarted_at) =
        cut_off_and_crash(&mut m, &path, &[("redlock.restart-grace-ms", "1000")]);
    let mut mm = m.connection();
    eprintln!(
        "M restarted with restart-grace-ms 1000: its new-disk wait {} ms, exempt {}",
        redlock_info(&mut mm, "sync_new_disk_wait_ms"),
        redlock_info(&mut mm, "restart_exempt")
    );
    let s = start_replica(
        &m,
        synced(1, 3_000).config("redlock.restart-grace-ms", "1000"),
    );
    let granted_a = first_synced_grant(
        &mut mm,
        "L",
        "owner-a",
        3000,
        1,
        Instant::now() + Duration::from_secs(8),
    )
    .expect("M grants L");
    eprintln!(
        "M granted L 3000 with S {:?} after its restart, {:?} after R's link went down",
        granted_a - restarted_at,
        granted_a - down_at
    );
    drop(mm);
    promote_cut_off(&mut m, &r, &mut rc, &s, granted_a, down_at, 3000);
}

/// `chattr +i` on a file while it lives (its rename target and its unlink
/// fail, as on a file system remounted read-only); `None` where the file
/// system or the process cannot.
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: PathBuf) -> Option<Immutable> {
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Immutable(path))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

/// `save` assumes a failed write leaves no file ("a failure removes it"),
/// and `on_load` takes a file it can read for the replica set of the life.
/// When the removal fails too (a file system remounted read-only after an
/// error, `errors=remount-ro`: the rename and the unlink both fail), the
/// previous file stays, and it names fewer replicas than the master had:
/// the start finds a set, waits nothing, and forgets the replica whose
/// joining could not be written. That replica was vouched for meanwhile:
/// the announcement to it goes out even though its write failed
/// (`announce` replicates after `save` failed; only a failed vouch mark
/// holds it back).
///
/// M (`sync-replicas 1`, `max-ttl-ms` 2000, durable) → B, the file names
/// B. The file can no longer be replaced nor removed (`chattr +i`); C
/// syncs with M through a path that can be cut and is vouched for (current);
/// M refuses lock writes (`could not be written`, two replicas for R 1).
/// C is cut off, M crashes, the file system is fixed, M restarts: it reads
/// B alone, grants L (2 s) with B, dies; C, cut off less than 2 s, is
/// promoted at once.
#[test]
#[ignore = "open finding: a failed write whose removal fails too leaves the previous file, which names fewer replicas; the start trusts it and the replica whose joining was not written, vouched for meanwhile, is promoted at once (two holders 32–248 ms into a 2 s lease, Redis 7.0 and Valkey 8.1)"]
fn a_failed_write_that_cannot_remove_the_file_leaves_a_stale_replica_set() {
    let mut m = durable(synced(1, 2_000)).start();
    let b = start_replica(&m, synced(1, 2_000));
    let mut mm = m.connection();
    assert!(first_synced_grant(
        &mut mm,
        "warm",
        "x",
        1000,
        1,
        Instant::now() + Duration::from_secs(10)
    )
    .is_some());
    assert!(file_names(&m, &b));
    let Some(frozen) = Immutable::set(state_file(&m)) else {
        eprintln!("chattr +i is not available here: skipped");
        return;
    };
    let path = FaultProxy::start(m.addr().parse().unwrap());
    let c = synced(1, 2_000)
        .config("replicaof", &format!("127.0.0.1 {}", path.addr().port()))
        .start();
    let mut cc = c.connection();
    wait_for_link(&mut cc);
    wait_until(Duration::from_secs(10), "C current", || {
        redlock_info(&mut cc, "sync_current") == 1
    });
    let refused = acquire_synced(&mut mm, "k", "y", 1000, 1);
    eprintln!(
        "C current; M knows {} replicas, its file names C: {}; a lock write: {refused:?}",
        redlock_info(&mut mm, "sync_replicas_known"),
        file_names(&m, &c)
    );
    assert!(refused.is_err());
    let dead: std::net::SocketAddr = format!("127.0.0.1:{}", redlock_testkit::free_port())
        .parse()
        .unwrap();
    path.set_upstream(dead);
    path.reset_connections();
    drop(mm);
    m.kill();
    let down_at = Instant::now();
    drop(frozen);
    m.restart();
    let mut mm = m.connection();
    eprintln!(
        "M restarted: exempt {}, replicas known {}, the file: {}",
        redlock_info(&mut mm, "restart_exempt"),
        redlock_info(&mut mm, "sync_replicas_known"),
        std::fs::read_to_string(state_file(&m))
            .unwrap_or_default()
            .replace('\n', "; ")
    );
    let granted_a = first_synced_grant(
        &mut mm,
        "L",
        "owner-a",
        2000,
        1,
        Instant::now() + Duration::from_secs(6),
    )
    .expect("M grants L");
    eprintln!(
        "M granted L 2000 with B {:?} after C's link went down",
        granted_a - down_at
    );
    drop(mm);
    promote_cut_off(&mut m, &c, &mut cc, &b, granted_a, down_at, 2000);
}

/// `on_load` reads the unnamed `redlock-sync-state` of the development
/// builds (or of an instance sharing `dir` that listens on no TCP port)
/// when the node's own file is missing, and `lost` is decided after that
/// fallback: a leftover unnamed file (never removed once the node's own
/// file exists) hides the loss, and its replica set (here a replica's:
/// none) is taken for this master's.
///
/// As [`a_restart_inside_the_lost_wait_waits_on`]'s first restart, with the
/// unnamed file a development build left in the directory.
#[test]
#[ignore = "open finding: the fallback to the unnamed redlock-sync-state hides a lost file (two holders 31–34 ms into a 2 s lease, Redis 7.0 and Valkey 8.1)"]
fn an_unnamed_file_left_in_the_directory_hides_a_lost_replica_set() {
    let FailedAnnouncement {
        mut m,
        path,
        r,
        mut rc,
        mm,
    } = failed_announcement(1);
    drop(mm);
    std::fs::write(
        m.dir().join("redlock-sync-state"),
        "redlock-sync-state 1\nseen none\n",
    )
    .unwrap();
    let (down_at, restarted_at) = cut_off_and_crash(&mut m, &path, &[]);
    let mut mm = m.connection();
    let s = start_replica(&m, synced(1, 2_000));
    let granted_a = first_synced_grant(
        &mut mm,
        "L",
        "owner-a",
        2000,
        1,
        Instant::now() + Duration::from_secs(6),
    )
    .expect("M grants L");
    eprintln!(
        "M granted L 2000 with S {:?} after its restart, {:?} after R's link went down",
        granted_a - restarted_at,
        granted_a - down_at
    );
    drop(mm);
    promote_cut_off(&mut m, &r, &mut rc, &s, granted_a, down_at, 2000);
}

/// Liveness: restarts that lost nothing wait nothing. A durable master that
/// vouched (R 1) restarted twice grants as soon as its replica is back;
/// after R was lowered to 0 and the lowering reached every replica (the
/// vouch mark says 0), a start without the file grants at once too.
#[test]
fn restarts_that_lost_nothing_do_not_wait() {
    let mut m = durable(synced(1, 2_000)).start();
    let r = start_replica(&m, synced(1, 2_000));
    let mut mm = m.connection();
    assert!(first_synced_grant(
        &mut mm,
        "warm",
        "x",
        1000,
        1,
        Instant::now() + Duration::from_secs(10)
    )
    .is_some());
    drop(mm);
    for round in 0..2 {
        m.kill();
        let restarted = Instant::now();
        m.restart();
        let mut mm = m.connection();
        let granted = first_synced_grant(
            &mut mm,
            &format!("k{round}"),
            "y",
            1000,
            1,
            Instant::now() + Duration::from_secs(5),
        )
        .expect("granted");
        eprintln!(
            "restart {round} with the file: granted {:?} after it",
            granted - restarted
        );
        assert!(granted - restarted < Duration::from_millis(1_900));
    }
    let mut mm = m.connection();
    let mut rc = r.connection();
    config_set(&mut rc, "redlock.sync-replicas", "0");
    config_set(&mut mm, "redlock.sync-replicas", "0");
    wait_until(Duration::from_secs(10), "the lowering done", || {
        acquire_result(&mut mm, "z", "y", 1000).is_ok()
    });
    let vouched = m.dir().join(format!("redlock-sync-vouched-{}", m.port()));
    wait_until(Duration::from_secs(5), "the vouch mark 0", || {
        std::fs::read_to_string(&vouched).unwrap_or_default().trim() == "0"
    });
    drop(mm);
    m.kill();
    std::fs::remove_file(state_file(&m)).unwrap();
    let restarted = Instant::now();
    m.restart_with(&[("redlock.sync-replicas", "0")]);
    let mut mm = m.connection();
    let deadline = Instant::now() + Duration::from_secs(5);
    let granted = loop {
        match acquire_result(&mut mm, "z2", "y", 1000) {
            Ok(_) => break Instant::now(),
            Err(e) => {
                assert!(Instant::now() < deadline, "still refused: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    eprintln!(
        "R 0, lowering done, the file removed: granted {:?} after the restart",
        granted - restarted
    );
    assert!(granted - restarted < Duration::from_millis(1_900));
}

/// Grants `key` (SYNC r) by `until`, collecting every refusal's text.
fn grant_collecting(
    con: &mut redis::Connection,
    key: &str,
    r: u64,
    until: Instant,
) -> (Option<Instant>, Vec<String>) {
    let mut refusals = Vec::new();
    loop {
        let asked = Instant::now();
        if asked >= until {
            return (None, refusals);
        }
        match acquire_synced(con, key, "y", 1000, r) {
            Ok((Some(_), acks)) if acks >= r as i64 => return (Some(asked), refusals),
            Ok(other) => refusals.push(format!("{other:?}")),
            Err(e) => refusals.push(e.to_string()),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Liveness: a master that vouched, demoted (its file is then a replica's),
/// started again as a master does not count its set as lost; nor does one
/// whose file is missing started as a replica and promoted (its promotion
/// keeps the guard, nothing more).
#[test]
fn a_former_replica_started_or_promoted_as_master_is_not_lost() {
    let mut m = durable(synced(1, 2_000)).start();
    let r = start_replica(&m, synced(1, 2_000));
    let mut mm = m.connection();
    assert!(first_synced_grant(
        &mut mm,
        "warm",
        "x",
        1000,
        1,
        Instant::now() + Duration::from_secs(10)
    )
    .is_some());
    let mut rc = r.connection();
    promote(&mut rc);
    replica_of(&mut mm, &r);
    wait_for_link(&mut mm);
    wait_online_at_master(&mut rc, m.port());
    drop(mm);
    // Started as a master, its file a replica's.
    m.kill();
    m.set_replica_of(None);
    m.restart();
    let mut mm = m.connection();
    replica_of(&mut rc, &m);
    let (granted, refusals) =
        grant_collecting(&mut mm, "a", 1, Instant::now() + Duration::from_secs(8));
    eprintln!(
        "the former replica started as a master: granted {}, refusals {:?}",
        granted.is_some(),
        refusals
            .iter()
            .map(|t| t.chars().skip(31).take(40).collect::<String>())
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert!(granted.is_some());
    assert!(!refusals.iter().any(|t| t.contains("was missing")));
    // Started as a replica with its file missing, then promoted.
    drop(mm);
    m.kill();
    std::fs::remove_file(state_file(&m)).ok();
    m.set_replica_of(Some(r.port()));
    promote(&mut rc);
    m.restart();
    let mut mm = m.connection();
    wait_for_link(&mut mm);
    wait_online_at_master(&mut rc, m.port());
    promote(&mut mm);
    replica_of(&mut rc, &m);
    let (granted, refusals) =
        grant_collecting(&mut mm, "b", 1, Instant::now() + Duration::from_secs(8));
    eprintln!(
        "started as a replica without its file, promoted: granted {}, refusals {:?}",
        granted.is_some(),
        refusals
            .iter()
            .map(|t| t.chars().skip(31).take(40).collect::<String>())
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert!(granted.is_some());
    assert!(!refusals.iter().any(|t| t.contains("was missing")));
}
