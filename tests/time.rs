//! Leases on real time: replicas whose wall clock differs from their
//! master's, restarts across a wall-clock change, `FLOOR` and FENCE tokens
//! far ahead of the node's clock, the restart guard after `max-ttl-ms` was
//! raised at run time, owner ids kept out of `MONITOR` and `SLOWLOG`, and
//! files written by the first version of the module.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

const HOUR_MS: i64 = 3_600_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn start_replica_of(master: &Node) -> Node {
    start_replica(master, Node::builder())
}

/// Acceptance 1: the replica's lease follows the master's remaining time,
/// not the master's wall clock, after streaming and after a full sync, and
/// a promoted replica refuses other owners until the lease really ends.
#[test]
fn replicas_time_leases_from_the_remaining_time() {
    for offset in [HOUR_MS, -HOUR_MS] {
        let master = Node::builder()
            .config("repl-diskless-sync-delay", "0")
            .start();
        let mut m = master.connection();
        wall_offset(&mut m, offset);
        // Streaming: the replica is attached before the grant.
        let replica = start_replica_of(&master);
        let mut r = replica.connection();
        assert_eq!(acquire(&mut m, "streamed", "alice", 20_000), Some(1));
        wait_replicated(&mut m);
        let on_master = inspect(&mut m, "streamed").unwrap();
        let on_replica = inspect(&mut r, "streamed").unwrap();
        assert!(on_replica.held, "offset {offset}: {on_replica:?}");
        assert!(
            (on_replica.pttl - on_master.pttl).abs() <= 3_000,
            "offset {offset}: master {on_master:?}, replica {on_replica:?}"
        );

        // Full sync that starts while a lease is live.
        assert_eq!(acquire(&mut m, "synced", "bob", 5_000), Some(1));
        let granted = Instant::now();
        let late = start_replica_of(&master);
        let mut l = late.connection();
        let on_master = inspect(&mut m, "synced").unwrap();
        let on_late = inspect(&mut l, "synced").unwrap();
        assert!(on_late.held, "offset {offset}: {on_late:?}");
        assert!(
            (on_late.pttl - on_master.pttl).abs() <= 3_000,
            "offset {offset}: master {on_master:?}, full-synced replica {on_late:?}"
        );

        // The master's acknowledged length reaches the replica right after
        // it came online; promoted before, it would start from 0 and wait
        // for a replica of its own (`core/lease_ack_rule.rs`).
        let acked = redlock_info(&mut m, "longest_lease_acked_ms");
        wait_until(Duration::from_secs(10), "the master's acked length", || {
            redlock_info(&mut l, "master_acked_ms") >= acked.max(1_000)
        });
        // Promote the full-synced replica: another owner is refused until
        // the lease really ends (5 s after the grant), then gets it.
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut l)
            .unwrap();
        assert_eq!(acquire(&mut l, "synced", "mallory", 1_000), None);
        wait_until(Duration::from_secs(10), "lease end", || {
            acquire(&mut l, "synced", "mallory", 1_000).is_some()
        });
        assert!(
            granted.elapsed() >= Duration::from_millis(4_900),
            "offset {offset}: lease ended after {:?}",
            granted.elapsed()
        );
        drop(r);
    }
}

/// Acceptance 2: restarts from the AOF (`always`) and from an RDB across a
/// wall-clock change. Back one hour: the lease is clamped to max-ttl-ms.
/// Forward one hour (or 55 s, NTP fixing a bad clock at boot): the lease
/// runs to its real end (the boot clock, on the boot that wrote it, says
/// how much of it is left), so no other owner gets the lock while its
/// holder may still use it, and it is not held longer either.
#[test]
fn restarts_across_a_wall_clock_change_clamp_or_free_leases() {
    for persistence in ["aof", "rdb"] {
        let mut builder = Node::builder().config("redlock.max-ttl-ms", "30000");
        if persistence == "aof" {
            builder = builder
                .config("appendonly", "yes")
                .config("appendfsync", "always");
        }
        let mut node = builder.start();
        let mut con = node.connection();
        // Granted while the clock reads one hour ahead, reloaded at the right time.
        wall_offset(&mut con, HOUR_MS);
        assert_eq!(acquire_floor(&mut con, "back", "alice", 20_000, 5), Some(5));
        wall_offset(&mut con, 0);
        // Granted at the right time, reloaded one hour later.
        let asked = Instant::now();
        assert_eq!(acquire_floor(&mut con, "fwd", "bob", 20_000, 9), Some(9));
        let granted = Instant::now();
        if persistence == "rdb" {
            let _: String = redis::cmd("SAVE").query(&mut con).unwrap();
        }
        drop(con);
        node.kill();
        node.restart();
        let mut con = node.connection();
        let back = inspect(&mut con, "back").unwrap();
        assert!(
            back.held && back.pttl <= 30_000 && back.token == 5,
            "{persistence}, clock back 1 h: {back:?}"
        );
        drop(con);

        for step_ms in [55_000, HOUR_MS] {
            node.set_env("REDLOCK_TEST_WALL_OFFSET_MS", &step_ms.to_string());
            node.restart();
            let mut con = node.connection();
            let before = Instant::now();
            let fwd = inspect(&mut con, "fwd").unwrap();
            let since_asked = asked.elapsed().as_millis() as i64;
            let since_granted = (before - granted).as_millis() as i64;
            // What is left of the 20 s, to the readings' milliseconds.
            assert!(
                fwd.held
                    && fwd.token == 9
                    && fwd.pttl >= 20_000 - since_asked - 3
                    && fwd.pttl <= 20_000 - since_granted + 3,
                "{persistence}, clock forward {step_ms} ms: {fwd:?}, granted {since_granted}–{since_asked} ms ago"
            );
            assert_eq!(acquire(&mut con, "fwd", "carol", 1_000), None);
        }
        // The test build's mutant that reads the wall-clock end only frees it.
        node.set_env("REDLOCK_TEST_MUTANTS", "disk-lease-from-wall");
        node.restart();
        let mut con = node.connection();
        assert!(
            !inspect(&mut con, "fwd").unwrap().held,
            "{persistence}: mutant"
        );
        drop(con);
        node.set_env("REDLOCK_TEST_MUTANTS", "");
        node.restart();
        let mut con = node.connection();
        assert_eq!(release(&mut con, "fwd", "bob"), 1);
        assert_eq!(acquire(&mut con, "fwd", "carol", 1_000), Some(10));
    }
}

/// Acceptance 3: FLOOR and FENCE tokens two days ahead of the node's clock
/// are refused and change nothing; one hour ahead they are accepted.
#[test]
fn tokens_far_ahead_of_the_node_clock_are_refused() {
    let node = Node::start();
    let mut con = node.connection();
    let now_us = now_ms() * 1000;
    let two_days = (now_us + 2 * 86_400_000_000).to_string();
    let one_hour = (now_us + 3_600_000_000).to_string();
    let err = error_of(
        &mut con,
        &[
            b"REDLOCK.ACQUIRE",
            b"k",
            b"alice",
            b"10000",
            b"FLOOR",
            two_days.as_bytes(),
        ],
    );
    assert!(err.starts_with("ERR invalid FLOOR: "), "{err}");
    assert!(
        err.contains("more than one day ahead of this node's clock"),
        "{err}"
    );
    assert_eq!(
        inspect(&mut con, "k"),
        None,
        "a refused ACQUIRE created the key"
    );

    assert_eq!(acquire(&mut con, "k", "alice", 10_000), Some(1));
    let err = error_of(
        &mut con,
        &[b"REDLOCK.FENCE", b"k", b"alice", two_days.as_bytes()],
    );
    assert!(err.starts_with("ERR invalid token: "), "{err}");
    assert_eq!(inspect(&mut con, "k").unwrap().token, 1);

    let one_hour_token: i64 = one_hour.parse().unwrap();
    assert_eq!(
        fence(&mut con, "k", "alice", Some(one_hour_token)),
        Some(one_hour_token)
    );
    assert_eq!(release(&mut con, "k", "alice"), 1);
    assert_eq!(
        acquire_floor(&mut con, "k2", "bob", 10_000, one_hour_token),
        Some(one_hour_token)
    );
    // Small values that are not clock readings stay valid.
    assert_eq!(acquire_floor(&mut con, "k3", "bob", 10_000, 7), Some(7));
}

/// Acceptance 4: a lease granted under a max-ttl-ms raised at run time is
/// covered by the restart guard after a kill -9, even when redis.conf
/// brings the smaller value back.
#[test]
fn the_restart_guard_covers_leases_granted_under_a_raised_max_ttl() {
    let mut node = Node::builder()
        .config("redlock.max-ttl-ms", "1000")
        .config("redlock.restart-grace-ms", "-1")
        .start();
    let mut con = node.connection();
    wait_until(Duration::from_secs(5), "first grace window end", || {
        info_field(&mut con, "redlock", "redlock_grace_active").as_deref() == Some("0")
    });
    config_set(&mut con, "redlock.max-ttl-ms", "4000");
    assert_eq!(acquire(&mut con, "k", "alice", 4_000), Some(1));
    let recorded = std::fs::read_to_string(node.dir().join("redlock-longest-lease-ms")).unwrap();
    assert_eq!(recorded.trim(), "4000");
    drop(con);
    node.kill();
    node.restart();
    let restarted = Instant::now();
    let mut con = node.connection();
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_max_ttl_ms").as_deref(),
        Some("1000")
    );
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_grace_window_ms").as_deref(),
        Some("4000")
    );
    // Past the configured 1000 ms, still refused.
    std::thread::sleep(Duration::from_millis(1_500));
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k", b"bob", b"500"]);
    assert!(err.starts_with("GRACE node restarted"), "{err}");
    wait_until(Duration::from_secs(10), "grace window end", || {
        redis::cmd("REDLOCK.ACQUIRE")
            .arg("k")
            .arg("bob")
            .arg(500)
            .query::<Option<i64>>(&mut con)
            .is_ok()
    });
    assert!(restarted.elapsed() >= Duration::from_millis(3_500));
}

fn expect_no_owner_in(haystack: &[u8], owner: &str, what: &str) {
    let needle = owner.as_bytes();
    assert!(
        !haystack.windows(needle.len()).any(|w| w == needle),
        "{what} shows the owner id:\n{}",
        String::from_utf8_lossy(haystack)
    );
}

/// Acceptance 7: neither MONITOR nor SLOWLOG shows an owner id, for every
/// command that takes one; the key and the other arguments stay visible.
#[test]
fn monitor_and_slowlog_never_show_owner_ids() {
    let node = Node::start();
    let mut con = node.connection();
    config_set(&mut con, "slowlog-log-slower-than", "0");
    let mut monitor = std::net::TcpStream::connect(("127.0.0.1", node.port())).unwrap();
    monitor.write_all(b"MONITOR\r\n").unwrap();
    monitor
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.starts_with(b"+OK") {
        let n = monitor.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
    let owner = "secret-owner-123";
    assert_eq!(acquire(&mut con, "k", owner, 10_000), Some(1));
    assert_eq!(extend(&mut con, "k", owner, 20_000), 1);
    assert_eq!(fence(&mut con, "k", owner, Some(5)), Some(5));
    assert_eq!(release(&mut con, "k", owner), 1);
    let _ = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k", owner.as_bytes()]);
    let _: String = redis::cmd("PING").arg("done").query(&mut con).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&seen).contains("\"done\"") {
        assert!(Instant::now() < deadline, "MONITOR output incomplete");
        if let Ok(n) = monitor.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
        }
    }
    let text = String::from_utf8_lossy(&seen).to_string();
    expect_no_owner_in(&seen, owner, "MONITOR");
    for visible in [
        "\"REDLOCK.ACQUIRE\" \"k\" \"(redacted)\" \"10000\"",
        "\"REDLOCK.EXTEND\" \"k\" \"(redacted)\" \"20000\"",
        "\"REDLOCK.FENCE\" \"k\" \"(redacted)\" \"5\"",
        "\"REDLOCK.RELEASE\" \"k\" \"(redacted)\"",
    ] {
        assert!(text.contains(visible), "MONITOR lacks {visible}:\n{text}");
    }

    let log: redis::Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100)
        .query(&mut con)
        .unwrap();
    let rendered = format!("{log:?}");
    expect_no_owner_in(rendered.as_bytes(), owner, "SLOWLOG");
    for command in [
        "REDLOCK.ACQUIRE",
        "REDLOCK.EXTEND",
        "REDLOCK.FENCE",
        "REDLOCK.RELEASE",
    ] {
        let as_bulk = format!(
            "{:?}",
            redis::Value::BulkString(command.as_bytes().to_vec())
        );
        assert!(
            rendered.contains(&as_bulk),
            "SLOWLOG lacks {command}: {rendered}"
        );
    }
    assert!(rendered.contains("redacted"), "{rendered}");
}

/// One fixture written by an earlier encoding of the module (see
/// tests/fixtures/v1 and tests/fixtures/v2).
struct Fixture {
    created_wall_ms: i64,
    /// key → (held, pttl, token) as INSPECT showed them when written.
    keys: Vec<(String, bool, i64, i64)>,
}

fn read_fixture(version: &str, name: &str) -> Fixture {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(version)
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    let created_wall_ms = text
        .split("\"created_wall_ms\":")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    let mut keys = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("\"fx:")) {
        let mut parts = line
            .split('"')
            .filter(|p| !p.trim().is_empty() && *p != ": ");
        let key = parts.next().unwrap().to_string();
        let fields: Vec<&str> = parts.next().unwrap().split_whitespace().collect();
        let num = |i: usize| fields[i].parse::<i64>().unwrap();
        keys.push((key, num(1) == 1, num(3), num(5)));
    }
    Fixture {
        created_wall_ms,
        keys,
    }
}

/// Owners used when the fixtures were written.
pub fn fixture_owner(key: &str) -> String {
    match key {
        "fx:held" => "fixture-owner-held-0001".into(),
        "fx:uuid" => "0b9a4a2e-5c1f-4f7e-9d43-2f7c1d0e8a11".into(),
        "fx:long" => "L".repeat(100),
        "fx:late" => "fixture-owner-late".into(),
        "fx:big" => "fixture-owner-big".into(),
        other => panic!("no owner for {other}"),
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Acceptance 5 (and issue 14's third): RDB and AOF files written by the
/// first version and by encoding version 2 load with the same INSPECT
/// results, and their locks are released with their original owners. A
/// version-2 file also brings its node record back (the longest lease),
/// from the RDB's auxiliary data, which carries the version it was written
/// under, and from the AOF's `REDLOCK.APPLY … node`.
#[test]
fn files_written_by_earlier_versions_still_load() {
    for (version, name) in [
        ("v1", "rdb"),
        ("v1", "aof-plain"),
        ("v1", "aof-preamble"),
        ("v2", "rdb"),
        ("v2", "aof-plain"),
        ("v2", "aof-preamble"),
    ] {
        let name_shown = format!("{version}/{name}");
        let name = name_shown.as_str();
        let fixture = read_fixture(version, name.rsplit('/').next().unwrap());
        let mut builder = Node::builder();
        if !name.ends_with("rdb") {
            builder = builder.config("appendonly", "yes");
        }
        let mut node = builder.start();
        node.stop();
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        if !name.ends_with("rdb") {
            let _ = std::fs::remove_dir_all(node.dir().join("appendonlydir"));
        }
        copy_dir(&source, node.dir());
        // The node's clock reads just after the moment the files were written.
        let offset = fixture.created_wall_ms + 1_000 - now_ms();
        node.set_env("REDLOCK_TEST_WALL_OFFSET_MS", &offset.to_string());
        node.restart();
        let mut con = node.connection();
        if version == "v2" {
            assert_eq!(
                redlock_info(&mut con, "longest_lease_ms"),
                100_000,
                "{name}: the node record"
            );
        }
        for (key, held, pttl, token) in &fixture.keys {
            let v = inspect(&mut con, key).unwrap_or_else(|| panic!("{name}: {key} missing"));
            assert_eq!((v.held, v.token), (*held, *token), "{name} {key}: {v:?}");
            if *held {
                assert!(
                    (v.pttl - pttl).abs() <= 5_000,
                    "{name} {key}: pttl {} vs {pttl} when written",
                    v.pttl
                );
                assert_eq!(release(&mut con, key, "not-the-owner"), 0, "{name} {key}");
                assert_eq!(
                    fence(&mut con, key, "not-the-owner", None),
                    None,
                    "{name} {key}"
                );
                let owner = fixture_owner(key);
                assert_eq!(extend(&mut con, key, &owner, 10_000), 1, "{name} {key}");
                assert_eq!(release(&mut con, key, &owner), 1, "{name} {key}");
            }
        }
    }
}
