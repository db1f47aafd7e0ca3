//! Adversarial review of the promotion rules (`src/core/teacher.rs`,
//! `src/core/lease_ack_rule.rs`, `src/core/guard_rule.rs`): event sequences
//! played on real processes, each asserting the SAFE outcome (no second
//! holder while the first lease runs, no token issued twice or going back).
//! A test that fails while its hole is open is marked `#[ignore = "open
//! finding: …"]`.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn promote(con: &mut redis::Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(con)
        .unwrap();
}

/// Tries `REDLOCK.ACQUIRE` (refused by `GRACE` or `NOSYNC` meanwhile) until
/// `until`: when it was granted, or `None`.
fn first_grant(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    until: Instant,
) -> Option<Instant> {
    loop {
        match acquire_result(con, key, owner, ttl) {
            Ok(Some(_)) => return Some(Instant::now()),
            Ok(None) => panic!("held by someone"),
            Err(e) => assert!(matches!(e.code(), Some("GRACE") | Some("NOSYNC")), "{e}"),
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The node behind `con` grants `key` to another owner no earlier than
/// `lease_ms` after `granted_a` (or not at all until a second after).
fn assert_no_second_holder(
    con: &mut redis::Connection,
    key: &str,
    granted_a: Instant,
    lease_ms: u64,
    who: &str,
) {
    let until = granted_a + Duration::from_millis(lease_ms + 1_000);
    match first_grant(con, key, "owner-b", 1000, until) {
        None => eprintln!("{who} did not grant {key} within the {lease_ms} ms lease + 1 s"),
        Some(granted_b) => {
            let gap = granted_b - granted_a;
            eprintln!("{who} granted {key} {gap:?} after the {lease_ms} ms lease began");
            assert!(
                gap >= Duration::from_millis(lease_ms),
                "two holders: {who} granted {key} {gap:?} after a {lease_ms} ms lease began"
            );
        }
    }
}

/// Removes every file of a node's folder but its log: a restart "without
/// its files" (a new disk).
fn wipe_dir(node: &Node) {
    for entry in std::fs::read_dir(node.dir()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "redis.log" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
}

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
#[ignore = "open finding: a replica is taught by its master's address, not its life: a master restarted without files (max-ttl raised) grants a longer lease during the replica's first sync and the promoted replica guards for the old length"]
fn master_restarted_without_files_is_not_the_teacher_of_its_replica() {
    let mut m = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", "1000")
        .start();
    let r = start_replica(
        &m,
        Node::builder()
            .config("redlock.sync-replicas", "0")
            .config("redlock.restart-grace-ms", "-1")
            .config("redlock.max-ttl-ms", "1000"),
    );
    // M's first start opened a 1 s window.
    let mut mm = m.connection();
    let _ = first_grant(
        &mut mm,
        "warm",
        "x",
        1000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("warm grant");
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mm).unwrap();
    let mut rc = r.connection();
    wait_until(Duration::from_secs(20), "R taught by M", || {
        redlock_info(&mut rc, "longest_lease_ms") >= 1_000
            && redlock_info(&mut rc, "taught_by_master") == 1
    });
    drop(mm);

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
