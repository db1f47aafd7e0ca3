//! The commands against a real redis-server: tokens, contention, FENCE,
//! INSPECT, bad input, the panic guard, ACLs, INFO and key-level commands.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn token_sequence() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 10_000), Some(1));
    assert_eq!(release(&mut con, "k", "alice"), 1);
    assert_eq!(acquire(&mut con, "k", "bob", 10_000), Some(2));
    // Same-owner re-acquire is idempotent: same token, no new one.
    assert_eq!(acquire(&mut con, "k", "bob", 10_000), Some(2));
    assert_eq!(inspect(&mut con, "k").unwrap().token, 2);
    assert_eq!(release(&mut con, "k", "bob"), 1);

    assert_eq!(
        acquire_floor(&mut con, "f", "alice", 10_000, 1000),
        Some(1000)
    );
    assert_eq!(release(&mut con, "f", "alice"), 1);
    assert_eq!(acquire(&mut con, "f", "bob", 10_000), Some(1001));
    // A same-owner re-acquire with a FLOOR raises the counter, same holder.
    assert_eq!(
        acquire_floor(&mut con, "f", "bob", 10_000, 5000),
        Some(5000)
    );
    assert_eq!(release(&mut con, "f", "bob"), 1);
    assert_eq!(acquire(&mut con, "f", "carol", 10_000), Some(5001));
}

#[test]
fn contention_expiry_and_extend() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 300), Some(1));
    assert_eq!(acquire(&mut con, "k", "bob", 10_000), None);
    assert_eq!(release(&mut con, "k", "bob"), 0);
    assert_eq!(extend(&mut con, "k", "bob", 10_000), 0);
    // The holder keeps the lock alive past its first lease.
    assert_eq!(extend(&mut con, "k", "alice", 500), 1);
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(
        acquire(&mut con, "k", "bob", 10_000),
        None,
        "extended lease must still hold"
    );
    assert!(inspect(&mut con, "k").unwrap().held);
    std::thread::sleep(Duration::from_millis(250));
    // The lease ran out: EXTEND does not revive it, bob gets the next token.
    assert_eq!(extend(&mut con, "k", "alice", 10_000), 0);
    assert!(!inspect(&mut con, "k").unwrap().held);
    assert_eq!(release(&mut con, "k", "alice"), 0);
    assert_eq!(acquire(&mut con, "k", "bob", 10_000), Some(2));
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_expired_leases").as_deref(),
        Some("1")
    );
}

#[test]
fn fence_raises_for_the_holder_only_and_never_lowers() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(fence(&mut con, "k", "alice", Some(5)), None, "missing key");
    assert_eq!(acquire(&mut con, "k", "alice", 10_000), Some(1));
    assert_eq!(fence(&mut con, "k", "bob", Some(50)), None);
    assert_eq!(
        inspect(&mut con, "k").unwrap().token,
        1,
        "non-holder FENCE changed nothing"
    );
    assert_eq!(fence(&mut con, "k", "alice", Some(50)), Some(50));
    assert_eq!(fence(&mut con, "k", "alice", Some(7)), Some(50));
    assert_eq!(fence(&mut con, "k", "alice", None), Some(50));
    assert_eq!(release(&mut con, "k", "alice"), 1);
    assert_eq!(fence(&mut con, "k", "alice", Some(90)), None, "released");
    assert_eq!(acquire(&mut con, "k", "bob", 10_000), Some(51));
}

#[test]
fn inspect_reports_state_but_never_the_owner() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(inspect(&mut con, "nope"), None);
    let owner = "secret-owner-id-4f1c";
    assert_eq!(acquire(&mut con, "k", owner, 5_000), Some(1));
    let raw: redis::Value = redis::cmd("REDLOCK.INSPECT")
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert!(
        !format!("{raw:?}").contains(owner),
        "INSPECT leaked the owner: {raw:?}"
    );
    let v = inspect(&mut con, "k").unwrap();
    assert!(v.held);
    assert!(v.pttl > 4_000 && v.pttl <= 5_000, "pttl {}", v.pttl);
    assert_eq!(v.token, 1);
    release(&mut con, "k", owner);
    assert_eq!(
        inspect(&mut con, "k"),
        Some(View {
            held: false,
            pttl: -1,
            token: 1
        })
    );
    // The key is the module type and never gets a Redis TTL.
    let t: String = redis::cmd("TYPE").arg("k").query(&mut con).unwrap();
    assert_eq!(t, "redlockfn");
    let ttl: i64 = redis::cmd("PTTL").arg("k").query(&mut con).unwrap();
    assert_eq!(ttl, -1);
}

#[test]
fn inspect_is_a_map_for_resp3_clients() {
    let node = Node::start();
    let mut con = node.connection();
    acquire(&mut con, "k", "alice", 5_000);
    let hello: redis::Value = redis::cmd("HELLO").arg(3).query(&mut con).unwrap();
    assert!(matches!(hello, redis::Value::Map(_)), "{hello:?}");
    let reply: redis::Value = redis::cmd("REDLOCK.INSPECT")
        .arg("k")
        .query(&mut con)
        .unwrap();
    let redis::Value::Map(pairs) = reply else {
        panic!("expected a map, got {reply:?}");
    };
    let keys: Vec<String> = pairs
        .iter()
        .map(|(k, _)| redis::from_redis_value_ref(k).unwrap())
        .collect();
    assert_eq!(keys, ["held", "pttl", "token"]);
}

/// Every refused call: the error names the problem, nothing changes, the
/// server keeps answering.
#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 10_000), Some(1));
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let before = inspect(&mut con, "k").unwrap();
    let digest_before = digest(&mut con);
    let long_owner = vec![b'x'; 257];
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob"],
            "ERR wrong number of arguments for 'redlock.acquire'",
        ),
        (
            vec![
                b"REDLOCK.ACQUIRE",
                b"k",
                b"bob",
                b"100",
                b"FLOOR",
                b"1",
                b"x",
            ],
            "ERR wrong number of arguments",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob", b"100", b"FLOOR"],
            "ERR syntax error: expected a value after FLOOR",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob", b"100", b"CEILING", b"1"],
            "ERR syntax error: expected FLOOR",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob", b"ten"],
            "ERR invalid ttl-ms: not an integer",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob", b"0"],
            "ERR invalid ttl-ms: must be between 1 and 60000",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob", b"-5"],
            "ERR invalid ttl-ms: must be between 1 and 60000",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob", b"60001"],
            "ERR invalid ttl-ms: 60001 is above redlock.max-ttl-ms (60000)",
        ),
        (
            vec![
                b"REDLOCK.ACQUIRE",
                b"k",
                b"bob",
                b"100",
                b"FLOOR",
                b"9223372036854775808",
            ],
            "ERR invalid FLOOR: must be between 0 and 9223372036854775807",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"bob", b"100", b"FLOOR", b"-1"],
            "ERR invalid FLOOR: must be between 0",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", b"", b"100"],
            "ERR invalid owner: must be 1 to 256 bytes, got 0 bytes",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"k", &long_owner, b"100"],
            "ERR invalid owner: must be 1 to 256 bytes, got 257 bytes",
        ),
        (
            vec![b"REDLOCK.ACQUIRE", b"str", b"bob", b"100"],
            "WRONGTYPE",
        ),
        (
            vec![b"REDLOCK.RELEASE", b"k"],
            "ERR wrong number of arguments for 'redlock.release'",
        ),
        (
            vec![b"REDLOCK.RELEASE", b"k", b"alice", b"extra"],
            "ERR wrong number of arguments",
        ),
        (vec![b"REDLOCK.RELEASE", b"k", b""], "ERR invalid owner"),
        (vec![b"REDLOCK.RELEASE", b"str", b"alice"], "WRONGTYPE"),
        (
            vec![b"REDLOCK.EXTEND", b"k", b"alice"],
            "ERR wrong number of arguments for 'redlock.extend'",
        ),
        (
            vec![b"REDLOCK.EXTEND", b"k", b"alice", b"1.5"],
            "ERR invalid ttl-ms: not an integer",
        ),
        (
            vec![b"REDLOCK.EXTEND", b"k", b"alice", b"0"],
            "ERR invalid ttl-ms: must be between 1",
        ),
        (
            vec![b"REDLOCK.EXTEND", b"k", b"alice", b"999999999"],
            "ERR invalid ttl-ms: 999999999 is above redlock.max-ttl-ms",
        ),
        (
            vec![b"REDLOCK.EXTEND", b"str", b"alice", b"100"],
            "WRONGTYPE",
        ),
        (
            vec![b"REDLOCK.FENCE", b"k"],
            "ERR wrong number of arguments for 'redlock.fence'",
        ),
        (
            vec![b"REDLOCK.FENCE", b"k", b"alice", b"1", b"2"],
            "ERR wrong number of arguments",
        ),
        (
            vec![b"REDLOCK.FENCE", b"k", b"alice", b"abc"],
            "ERR invalid token: not an integer",
        ),
        (
            vec![b"REDLOCK.FENCE", b"k", b"alice", b"-3"],
            "ERR invalid token: must be between 0",
        ),
        (
            vec![b"REDLOCK.FENCE", b"k", b"alice", b"99999999999999999999"],
            "ERR invalid token: must be between 0 and 9223372036854775807",
        ),
        (vec![b"REDLOCK.FENCE", b"str", b"alice"], "WRONGTYPE"),
        (
            vec![b"REDLOCK.INSPECT"],
            "ERR wrong number of arguments for 'redlock.inspect'",
        ),
        (
            vec![b"REDLOCK.INSPECT", b"k", b"x"],
            "ERR wrong number of arguments",
        ),
        (vec![b"REDLOCK.INSPECT", b"str"], "WRONGTYPE"),
        (
            vec![b"REDLOCK.APPLY", b"k", b"99", b"0"],
            "ERR REDLOCK.APPLY is internal",
        ),
        (
            vec![b"REDLOCK.APPLY", b"new", b"99", b"0", b"mallory"],
            "ERR REDLOCK.APPLY is internal",
        ),
    ];
    for (args, expected) in &cases {
        let err = error_of(&mut con, args);
        assert!(
            err.starts_with(expected),
            "{:?}: got {err:?}, want {expected:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        );
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
    }
    assert_eq!(inspect(&mut con, "k").unwrap().token, before.token);
    assert!(inspect(&mut con, "k").unwrap().held);
    assert_eq!(
        inspect(&mut con, "new"),
        None,
        "APPLY by a user created a key"
    );
    let s: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(s, "v");
    assert_eq!(digest(&mut con), digest_before);
    assert_eq!(
        release(&mut con, "k", "alice"),
        1,
        "alice still holds after every refused call"
    );
}

#[test]
fn counter_exhaustion_is_an_error() {
    let node = Node::start();
    let mut con = node.connection();
    // A floor near i64::MAX is only in reach of a node whose clock reads
    // about 292,000 years after the epoch (a floor may be at most one day
    // ahead of the node's clock in microseconds).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let far_future = i64::MAX / 1000 - now_ms;
    let _: () = redis::cmd("REDLOCK.TESTHOOK")
        .arg("WALLCLOCK-OFFSET")
        .arg(far_future)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        acquire_floor(&mut con, "k", "a", 10_000, i64::MAX),
        Some(i64::MAX)
    );
    release(&mut con, "k", "a");
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k", b"b", b"100"]);
    assert!(err.contains("fencing counter exhausted"), "{err}");
    assert_eq!(
        inspect(&mut con, "k").unwrap(),
        View {
            held: false,
            pttl: -1,
            token: i64::MAX
        }
    );
}

#[test]
fn a_panic_in_a_handler_becomes_an_error_reply() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "k", "alice", 10_000), Some(1));
    let err = error_of(&mut con, &[b"REDLOCK.TESTHOOK", b"PANIC"]);
    assert!(
        err.starts_with("ERR redlock internal error in REDLOCK.TESTHOOK"),
        "{err}"
    );
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(acquire(&mut con, "k", "bob", 10_000), None);
    assert_eq!(release(&mut con, "k", "alice"), 1);
}

#[test]
fn busy_acquire_does_not_break_watch() {
    let node = Node::start();
    let mut a = node.connection();
    let mut b = node.connection();
    assert_eq!(acquire(&mut a, "k", "alice", 10_000), Some(1));
    let _: () = redis::cmd("WATCH").arg("k").query(&mut a).unwrap();
    // Refused calls by another client do not touch the key.
    assert_eq!(acquire(&mut b, "k", "bob", 10_000), None);
    assert_eq!(release(&mut b, "k", "bob"), 0);
    let _: () = redis::cmd("MULTI").query(&mut a).unwrap();
    let _: () = redis::cmd("SET").arg("x").arg("1").query(&mut a).unwrap();
    let exec: Option<Vec<String>> = redis::cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(exec, Some(vec!["OK".to_string()]));
    // A real change does.
    let _: () = redis::cmd("WATCH").arg("k").query(&mut a).unwrap();
    assert_eq!(extend(&mut b, "k", "alice", 10_000), 1);
    let _: () = redis::cmd("MULTI").query(&mut a).unwrap();
    let _: () = redis::cmd("SET").arg("x").arg("2").query(&mut a).unwrap();
    let exec: Option<Vec<String>> = redis::cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(exec, None);
}

#[test]
fn acl_user_limited_to_lock_commands_and_prefix() {
    let node = Node::start();
    let mut admin = node.connection();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locker",
            "on",
            ">s3cret",
            "resetkeys",
            "~locks:*",
            "-@all",
            "+redlock.acquire",
            "+redlock.release",
            "+redlock.extend",
            "+redlock.fence",
            "+redlock.inspect",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://locker:s3cret@127.0.0.1:{}", node.port());
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert_eq!(acquire(&mut con, "locks:a", "me", 10_000), Some(1));
    assert_eq!(inspect(&mut con, "locks:a").unwrap().token, 1);
    assert_eq!(release(&mut con, "locks:a", "me"), 1);
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"other:a", b"me", b"100"]);
    assert!(err.starts_with("NOPERM"), "{err}");
    let err = error_of(&mut con, &[b"SET", b"locks:a", b"x"]);
    assert!(err.starts_with("NOPERM"), "{err}");
    let err = error_of(&mut con, &[b"REDLOCK.APPLY", b"locks:a", b"1", b"0"]);
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(inspect(&mut admin, "other:a"), None);
}

/// The key specs say which commands only read their key: a user with
/// read-only key access (`%R~`) may INSPECT and WAIT, not take or change a
/// lock.
#[test]
fn read_only_key_access_allows_inspect_and_wait_only() {
    let node = Node::start();
    let mut admin = node.connection();
    assert_eq!(acquire(&mut admin, "locks:a", "me", 10_000), Some(1));
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "watcher",
            "on",
            ">s3cret",
            "resetkeys",
            "%R~locks:*",
            "-@all",
            "+redlock.acquire",
            "+redlock.release",
            "+redlock.extend",
            "+redlock.fence",
            "+redlock.inspect",
            "+redlock.wait",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://watcher:s3cret@127.0.0.1:{}", node.port());
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert_eq!(inspect(&mut con, "locks:a").unwrap().token, 1);
    let free: i64 = redis::cmd("REDLOCK.WAIT")
        .arg("locks:free")
        .arg(100)
        .query(&mut con)
        .unwrap();
    assert_eq!(free, 1);
    for args in [
        &[&b"REDLOCK.ACQUIRE"[..], b"locks:b", b"me", b"100"][..],
        &[b"REDLOCK.RELEASE", b"locks:a", b"me"],
        &[b"REDLOCK.EXTEND", b"locks:a", b"me", b"100"],
        &[b"REDLOCK.FENCE", b"locks:a", b"me"],
    ] {
        let err = error_of(&mut con, args);
        assert!(err.starts_with("NOPERM"), "{err}");
    }
    assert_eq!(inspect(&mut admin, "locks:b"), None);
    assert!(inspect(&mut admin, "locks:a").unwrap().held);
}

#[test]
fn info_counts_and_eviction_warning() {
    let node = Node::builder()
        .config("maxmemory-policy", "allkeys-lru")
        .start();
    let mut con = node.connection();
    let field =
        |con: &mut redis::Connection, f: &str| info_field(con, "redlock", &format!("redlock_{f}"));
    assert_eq!(
        field(&mut con, "eviction_policy_warning").as_deref(),
        Some("1")
    );
    assert!(
        node.log_tail().contains("may evict lock keys"),
        "{}",
        node.log_tail()
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        field(&mut con, "eviction_policy_warning").as_deref(),
        Some("0")
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-random")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        field(&mut con, "eviction_policy_warning").as_deref(),
        Some("1")
    );

    acquire(&mut con, "k", "a", 10_000);
    acquire(&mut con, "k", "a", 10_000);
    acquire(&mut con, "k", "b", 10_000);
    extend(&mut con, "k", "a", 10_000);
    extend(&mut con, "k", "b", 10_000);
    fence(&mut con, "k", "a", Some(3));
    fence(&mut con, "k", "b", Some(3));
    release(&mut con, "k", "a");
    release(&mut con, "k", "a");
    for (f, want) in [
        ("acquire_granted", "1"),
        ("acquire_renewed", "1"),
        ("acquire_busy", "1"),
        ("extend_ok", "1"),
        ("extend_missed", "1"),
        ("fence_ok", "1"),
        ("fence_missed", "1"),
        ("release_ok", "1"),
        ("release_missed", "1"),
        ("grace_active", "0"),
        ("max_ttl_ms", "60000"),
    ] {
        assert_eq!(field(&mut con, f).as_deref(), Some(want), "{f}");
    }
}

#[test]
fn configs_from_loadmodule_args_conf_lines_and_config_set() {
    let node = Node::builder()
        .module_arg("max-ttl-ms")
        .module_arg("30000")
        .start();
    let mut con = node.connection();
    let get = |con: &mut redis::Connection, name: &str| -> String {
        let v: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query(con)
            .unwrap();
        v[1].clone()
    };
    assert_eq!(get(&mut con, "redlock.max-ttl-ms"), "30000");
    let err = error_of(&mut con, &[b"REDLOCK.ACQUIRE", b"k", b"a", b"30001"]);
    assert!(err.contains("above redlock.max-ttl-ms (30000)"), "{err}");
    let err = error_of(&mut con, &[b"CONFIG", b"SET", b"redlock.max-ttl-ms", b"0"]);
    assert!(err.contains("must be between 1 and 86400000"), "{err}");
    let err = error_of(
        &mut con,
        &[b"CONFIG", b"SET", b"redlock.restart-grace-ms", b"-2"],
    );
    assert!(err.contains("must be between -1 and 86400000"), "{err}");
    assert_eq!(get(&mut con, "redlock.max-ttl-ms"), "30000");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg("40000")
        .query(&mut con)
        .unwrap();
    assert_eq!(acquire(&mut con, "k", "a", 40_000), Some(1));

    // A `redlock.*` option after the loadmodule wins over the module argument.
    let node = Node::builder()
        .module_arg("max-ttl-ms")
        .module_arg("30000")
        .config("redlock.max-ttl-ms", "1234")
        .start();
    assert_eq!(get(&mut node.connection(), "redlock.max-ttl-ms"), "1234");
}

#[test]
fn bad_module_arguments_refuse_to_load_with_a_clear_log_line() {
    let dir = tempfile_dir();
    let log = dir.join("redis.log");
    let status = std::process::Command::new(redlock_testkit::server_bin())
        .arg("--port")
        .arg(redlock_testkit::free_port().to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--save")
        .arg("")
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(redlock_testkit::module_path())
        .arg("max-ttl-ms")
        .arg("0")
        .status()
        .unwrap();
    assert!(!status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(
            "module argument max-ttl-ms must be an integer between 1 and 86400000, got '0'"
        ),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("redlock-badarg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn dump_restore_and_copy_keep_the_counter_and_lease() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire_floor(&mut con, "k", "alice", 20_000, 41), Some(41));
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut con).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("k2")
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("COPY")
        .arg("k")
        .arg("k3")
        .query(&mut con)
        .unwrap();
    for key in ["k2", "k3"] {
        let v = inspect(&mut con, key).unwrap();
        assert!(v.held && v.token == 41, "{key}: {v:?}");
        assert_eq!(acquire(&mut con, key, "bob", 1_000), None, "{key}");
        assert_eq!(release(&mut con, key, "alice"), 1, "{key}");
        assert_eq!(acquire(&mut con, key, "bob", 1_000), Some(42), "{key}");
    }
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert!(usage > 0);
}

#[test]
fn release_build_registers_no_test_hooks() {
    let Some(path) = std::env::var_os("REDLOCK_RELEASE_MODULE") else {
        eprintln!("REDLOCK_RELEASE_MODULE is not set (make test sets it): skipped");
        return;
    };
    let node = Node::builder().module(path.into()).start();
    let mut con = node.connection();
    let err = error_of(&mut con, &[b"REDLOCK.TESTHOOK", b"PANIC"]);
    assert!(err.contains("unknown command"), "{err}");
    let names: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("redlock")
        .query(&mut con)
        .unwrap();
    let mut names: Vec<String> = names.into_iter().map(|n| n.to_lowercase()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "redlock.acquire",
            "redlock.apply",
            "redlock.extend",
            "redlock.fence",
            "redlock.fenced",
            "redlock.guard",
            "redlock.guardinfo",
            "redlock.inspect",
            "redlock.release",
            "redlock.replicas",
            "redlock.wait"
        ]
    );
}

#[test]
fn changes_raise_keyspace_events_and_refusals_do_not() {
    let node = Node::start();
    let mut con = node.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kd")
        .query(&mut con)
        .unwrap();
    let mut sub_con = node.connection();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:k").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    acquire(&mut con, "k", "a", 10_000);
    acquire(&mut con, "k", "b", 10_000); // busy: no event
    extend(&mut con, "k", "b", 10_000); // refused: no event
    extend(&mut con, "k", "a", 10_000);
    fence(&mut con, "k", "a", Some(1)); // no change: no event
    fence(&mut con, "k", "a", Some(5));
    release(&mut con, "k", "a");
    let mut events = Vec::new();
    for _ in 0..4 {
        let msg = pubsub.get_message().unwrap();
        events.push(msg.get_payload::<String>().unwrap());
    }
    assert_eq!(
        events,
        [
            "redlock.acquire",
            "redlock.extend",
            "redlock.fence",
            "redlock.release"
        ]
    );
    pubsub
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(pubsub.get_message().is_err(), "an unexpected extra event");
}
