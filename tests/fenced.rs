//! Fenced writes (DESIGN §10): REDLOCK.FENCED, REDLOCK.GUARD and
//! REDLOCK.GUARDINFO against a real redis-server: the token rule, the inner
//! reply passed through, every refusal changing nothing, the guard type,
//! ACLs, replication and the AOF, MULTI and Lua, RESP3.

mod common;

use std::time::Duration;

use common::*;
use redis::Value;

/// Runs `REDLOCK.FENCED guard lock token args...`: its reply.
fn fenced(
    con: &mut redis::Connection,
    guard: &str,
    lock: &str,
    token: i64,
    inner: &[&str],
) -> redis::RedisResult<Value> {
    fenced_cmd(guard, lock, token, inner).query(con)
}

/// The error text (`CODE detail`) of a call expected to fail.
fn err_text(result: redis::RedisResult<Value>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string(),
    }
}

/// `REDLOCK.GUARDINFO guard` as (lock, highest).
fn guard_info(con: &mut redis::Connection, guard: &str) -> Option<(String, i64)> {
    let reply: Option<Vec<Value>> = redis::cmd("REDLOCK.GUARDINFO")
        .arg(guard)
        .query(con)
        .unwrap();
    let fields = reply?;
    assert_eq!(fields.len(), 4, "{fields:?}");
    let s = |v: &Value| -> String { redis::from_redis_value_ref(v).unwrap() };
    assert_eq!(s(&fields[0]), "lock");
    assert_eq!(s(&fields[2]), "highest");
    Some((
        s(&fields[1]),
        redis::from_redis_value_ref(&fields[3]).unwrap(),
    ))
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

#[test]
fn stale_equal_and_higher_tokens() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(
        fenced(&mut con, "g", "L", 5, &["SET", "k", "a"]).unwrap(),
        Value::Okay
    );
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 5)));
    // Lower: STALE, naming the highest; nothing ran.
    let e = fenced(&mut con, "g", "L", 4, &["SET", "k", "b"]).unwrap_err();
    assert_eq!(e.code(), Some("STALE"));
    assert_eq!(
        err_text(Err(e)),
        "STALE token 4 is below 5, the highest token guard 'g' has seen for lock 'L'"
    );
    assert_eq!(get(&mut con, "k").as_deref(), Some("a"));
    // Equal: passes, no raise.
    fenced(&mut con, "g", "L", 5, &["SET", "k", "c"]).unwrap();
    assert_eq!(get(&mut con, "k").as_deref(), Some("c"));
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 5)));
    // Higher: passes and raises; the old token is now stale.
    fenced(&mut con, "g", "L", 6, &["SET", "k", "d"]).unwrap();
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 6)));
    let e = err_text(fenced(&mut con, "g", "L", 5, &["SET", "k", "e"]));
    assert!(e.starts_with("STALE token 5 is below 6"), "{e}");
    assert_eq!(get(&mut con, "k").as_deref(), Some("d"));
    // Another lock's tokens cannot be compared.
    let e = err_text(fenced(&mut con, "g", "other", 100, &["SET", "k", "f"]));
    assert!(
        e.starts_with("ERR guard 'g' serves lock 'L', not 'other'"),
        "{e}"
    );
    assert_eq!(get(&mut con, "k").as_deref(), Some("d"));
    // GUARD: check and raise only, replying the highest.
    let h: i64 = redis::cmd("REDLOCK.GUARD")
        .arg("g")
        .arg("L")
        .arg(6)
        .query(&mut con)
        .unwrap();
    assert_eq!(h, 6);
    let h: i64 = redis::cmd("REDLOCK.GUARD")
        .arg("g")
        .arg("L")
        .arg(9)
        .query(&mut con)
        .unwrap();
    assert_eq!(h, 9);
    let e = redis::cmd("REDLOCK.GUARD")
        .arg("g")
        .arg("L")
        .arg(8)
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(e.code(), Some("STALE"));
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 9)));
    assert_eq!(guard_info(&mut con, "missing"), None);
    assert_eq!(redlock_info(&mut con, "fenced_ok"), 3);
    assert_eq!(redlock_info(&mut con, "fenced_stale"), 2);
    assert_eq!(redlock_info(&mut con, "fenced_refused"), 1);
    assert_eq!(redlock_info(&mut con, "guard_ok"), 2);
    assert_eq!(redlock_info(&mut con, "guard_stale"), 1);
    assert_eq!(redlock_info(&mut con, "guards"), 1);
}

#[test]
fn inner_replies_pass_through_unchanged() {
    let node = Node::start();
    let mut con = node.connection();
    let v = fenced(&mut con, "g", "L", 1, &["INCRBY", "n", "5"]).unwrap();
    assert_eq!(v, Value::Int(5));
    let v = fenced(&mut con, "g", "L", 1, &["GET", "n"]).unwrap();
    assert_eq!(v, Value::BulkString(b"5".to_vec()));
    let v = fenced(&mut con, "g", "L", 1, &["GET", "none"]).unwrap();
    assert_eq!(v, Value::Nil);
    fenced(&mut con, "g", "L", 1, &["RPUSH", "list", "a", "b"]).unwrap();
    let v = fenced(&mut con, "g", "L", 1, &["LRANGE", "list", "0", "-1"]).unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"b".to_vec())
        ])
    );
    // An inner error is passed through, and the guard is raised (it ran).
    fenced(&mut con, "g", "L", 1, &["SET", "text", "abc"]).unwrap();
    let e = err_text(fenced(&mut con, "g", "L", 2, &["INCR", "text"]));
    assert_eq!(e, "ERR value is not an integer or out of range");
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 2)));
    let e = err_text(fenced(&mut con, "g", "L", 3, &["HSET", "text", "f", "v"]));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 3)));
    // Module commands run too.
    let t: i64 = fenced_cmd("g", "L", 3, &["REDLOCK.INSPECT", "x"])
        .query(&mut con)
        .map(|_: Value| 0)
        .unwrap_or(-1);
    assert_eq!(t, -1, "REDLOCK.* inner commands are refused");
}

/// Every count of inner arguments reaches the inner command intact: up to
/// 16 they are passed to `RedisModule_Call` one by one, beyond as a vector.
#[test]
fn every_argument_count_reaches_the_inner_command() {
    let node = Node::start();
    let mut con = node.connection();
    // DEL with one key: a single inner argument.
    let v = fenced(&mut con, "g", "L", 1, &["DEL", "nothing"]).unwrap();
    assert_eq!(v, Value::Int(0));
    for members in 1..=40usize {
        let key = format!("set{members}");
        let names: Vec<String> = (0..members).map(|i| format!("m{i}-{members}")).collect();
        let mut inner: Vec<&str> = vec!["SADD", &key];
        inner.extend(names.iter().map(String::as_str));
        let v = fenced(&mut con, "g", "L", 1, &inner).unwrap();
        assert_eq!(v, Value::Int(members as i64), "{members} members");
        let mut stored: Vec<String> = redis::cmd("SMEMBERS").arg(&key).query(&mut con).unwrap();
        stored.sort();
        let mut expected = names.clone();
        expected.sort();
        assert_eq!(stored, expected, "{members} members");
    }
}

#[test]
fn hgetall_is_a_map_under_resp3_and_flat_under_resp2() {
    let node = Node::start();
    let mut con = node.connection();
    fenced(&mut con, "g", "L", 1, &["HSET", "h", "f", "v"]).unwrap();
    let flat = fenced(&mut con, "g", "L", 1, &["HGETALL", "h"]).unwrap();
    assert_eq!(
        flat,
        Value::Array(vec![
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec())
        ])
    );
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut con).unwrap();
    let map = fenced(&mut con, "g", "L", 1, &["HGETALL", "h"]).unwrap();
    assert_eq!(
        map,
        Value::Map(vec![(
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec())
        )])
    );
    // In Lua after redis.setresp(3): the script sees a map.
    let _: Value = redis::cmd("HELLO").arg(2).query(&mut con).unwrap();
    let script = "redis.setresp(3); local r = redis.call('REDLOCK.FENCED', KEYS[1], 'L', 1, 'HGETALL', KEYS[2]); return r['map'] and 'map' or 'flat'";
    let kind: String = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("g")
        .arg("h")
        .query(&mut con)
        .unwrap();
    assert_eq!(kind, "map");
}

/// Every refusal before the inner command runs: the error names the
/// problem, no key changes, nothing reaches the replication stream.
#[test]
fn refusals_change_nothing() {
    let master = Node::builder()
        .config("repl-ping-replica-period", "3600")
        .config("repl-diskless-sync-delay", "0")
        .start();
    let replica = start_replica(
        &master,
        Node::builder().config("repl-ping-replica-period", "3600"),
    );
    let mut con = master.connection();
    fenced(&mut con, "g", "L", 10, &["SET", "k", "v"]).unwrap();
    let _: () = redis::cmd("SET").arg("x").arg("1").query(&mut con).unwrap();
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("1")
        .query(&mut con)
        .unwrap();
    wait_replicated(&mut con);
    let digest_before = digest(&mut con);
    let offset = || {
        info_field(
            &mut master.connection(),
            "replication",
            "master_repl_offset",
        )
    };
    let offset_before = offset();
    let ahead = (now_us() + 86_400_000_000 + 60_000_000).to_string();
    let long_lock = "l".repeat(1025);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["g", "L", "10"], "ERR wrong number of arguments"),
        (vec!["g", "L", "0", "SET", "k", "1"], "ERR invalid token"),
        (vec!["g", "L", "-1", "SET", "k", "1"], "ERR invalid token"),
        (vec!["g", "L", "ten", "SET", "k", "1"], "ERR invalid token"),
        (
            vec!["g", "L", "9223372036854775808", "SET", "k", "1"],
            "ERR invalid token",
        ),
        (
            vec!["g", "L", &ahead, "SET", "k", "1"],
            "ERR invalid token: ",
        ),
        (vec!["g", "", "10", "SET", "k", "1"], "ERR invalid lock"),
        (
            vec!["g", &long_lock, "10", "SET", "k", "1"],
            "ERR invalid lock",
        ),
        (
            vec!["g", "L", "10", "S\0ET", "k", "1"],
            "ERR REDLOCK.FENCED cannot run",
        ),
        (vec!["g", "L", "10", "NOSUCH", "k"], "ERR unknown command"),
        (
            vec!["g", "L", "10", "SET", "k"],
            "ERR wrong number of arguments for 'SET'",
        ),
        (vec!["g", "L", "10", "FLUSHALL"], "must have a key"),
        (
            vec!["g", "L", "10", "PUBLISH", "ch", "m"],
            "must have a key",
        ),
        (vec!["g", "L", "10", "PING"], "must have a key"),
        (
            vec!["g", "L", "10", "CONFIG", "SET", "maxmemory", "1"],
            "must have a key",
        ),
        (
            vec!["g", "L", "10", "MULTI"],
            "transactions are not allowed",
        ),
        (
            vec!["g", "L", "10", "WATCH", "k"],
            "transactions are not allowed",
        ),
        (vec!["g", "L", "10", "BLPOP", "k", "0"], "blocking commands"),
        (
            vec!["g", "L", "10", "EVAL", "return 1", "1", "k"],
            "scripts are not allowed",
        ),
        (
            vec!["g", "L", "10", "REDLOCK.ACQUIRE", "k2", "o", "100"],
            "redlock commands are not allowed",
        ),
        (
            vec!["g", "L", "10", "DEL", "k", "g"],
            "must not touch the guard key",
        ),
        (
            vec!["g", "L", "10", "RENAME", "x", "g"],
            "must not touch the guard key",
        ),
        (
            vec!["g", "L", "10", "COPY", "x", "g"],
            "must not touch the guard key",
        ),
        (
            vec!["g", "L", "9", "SET", "k", "1"],
            "STALE token 9 is below 10",
        ),
        (
            vec!["g", "M", "11", "SET", "k", "1"],
            "ERR guard 'g' serves lock 'L'",
        ),
        (vec!["str", "L", "11", "SET", "k", "1"], "WRONGTYPE"),
        // A keyed command that talks to another server.
        (
            vec!["g", "L", "11", "MIGRATE", "127.0.0.1", "1", "k", "0", "10"],
            "ERR REDLOCK.FENCED cannot run 'MIGRATE'",
        ),
    ];
    for (args, expected) in &cases {
        let mut cmd = redis::cmd("REDLOCK.FENCED");
        for a in args {
            cmd.arg(*a);
        }
        let e = err_text(cmd.query(&mut con));
        assert!(e.contains(expected), "{args:?}: {e}");
    }
    let e = err_text(
        redis::cmd("REDLOCK.GUARD")
            .arg("g")
            .arg("L")
            .query(&mut con),
    );
    assert!(e.contains("wrong number of arguments"), "{e}");
    assert_eq!(digest(&mut con), digest_before);
    assert_eq!(offset(), offset_before, "a refused call reached the stream");
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 10)));
    assert_eq!(get(&mut con, "k").as_deref(), Some("v"));
    // Redis refuses the arity itself (the command declares arity -5); the
    // STALE call is counted as stale.
    assert_eq!(
        redlock_info(&mut con, "fenced_refused"),
        cases.len() as u64 - 2
    );
    assert_eq!(redlock_info(&mut con, "fenced_stale"), 1);
    // A call on a replica is refused.
    let mut r = replica.connection();
    let e = err_text(fenced(&mut r, "g", "L", 11, &["SET", "k", "1"]));
    assert!(e.starts_with("READONLY"), "{e}");
    // The server still answers.
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn guard_type_key_level_commands() {
    let node = Node::start();
    let mut con = node.connection();
    fenced(&mut con, "g", "report", 57, &["SET", "k", "v"]).unwrap();
    let t: String = redis::cmd("TYPE").arg("g").query(&mut con).unwrap();
    assert_eq!(t, "redlockgd");
    // A lock record or a string as guard: WRONGTYPE; a guard as lock too.
    acquire(&mut con, "lockrec", "me", 10_000);
    let e = err_text(fenced(
        &mut con,
        "lockrec",
        "report",
        60,
        &["SET", "k", "v"],
    ));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = err_text(
        redis::cmd("REDLOCK.GUARD")
            .arg("k")
            .arg("report")
            .arg(60)
            .query(&mut con),
    );
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = err_text(redis::cmd("REDLOCK.INSPECT").arg("g").query(&mut con));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = err_text(
        redis::cmd("REDLOCK.GUARDINFO")
            .arg("lockrec")
            .query(&mut con),
    );
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    // DUMP / RESTORE, COPY, MEMORY USAGE, DEBUG RELOAD.
    let dump: Vec<u8> = redis::cmd("DUMP").arg("g").query(&mut con).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        guard_info(&mut con, "restored"),
        Some(("report".into(), 57))
    );
    let copied: i64 = redis::cmd("COPY")
        .arg("g")
        .arg("copied")
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    fenced(&mut con, "copied", "report", 58, &["SET", "k", "w"]).unwrap();
    assert_eq!(guard_info(&mut con, "copied"), Some(("report".into(), 58)));
    assert_eq!(
        guard_info(&mut con, "g"),
        Some(("report".into(), 57)),
        "a copy is independent"
    );
    assert!(memory_usage(&mut con, "g") > 0);
    assert_eq!(redlock_info(&mut con, "guards"), 3);
    let before = digest(&mut con);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(digest(&mut con), before);
    assert_eq!(guard_info(&mut con, "g"), Some(("report".into(), 57)));
    assert_eq!(redlock_info(&mut con, "guards"), 3);
    let e = err_text(fenced(&mut con, "g", "report", 56, &["SET", "k", "x"]));
    assert!(e.starts_with("STALE"), "{e}");
    // Not a Redis TTL, and the internal command refuses users.
    let ttl: i64 = redis::cmd("PTTL").arg("g").query(&mut con).unwrap();
    assert_eq!(ttl, -1);
    let e = err_text(
        redis::cmd("REDLOCK.APPLY")
            .arg("g")
            .arg("g1")
            .arg(1)
            .arg("report")
            .query(&mut con),
    );
    assert!(e.contains("internal"), "{e}");
    assert_eq!(guard_info(&mut con, "g"), Some(("report".into(), 57)));
}

/// The sweep deletes idle lock records only, never a guard.
#[test]
fn the_sweep_never_deletes_a_guard() {
    let node = Node::builder()
        .config("redlock.reclaim-after-ms", "1000")
        .config("redlock.max-ttl-ms", "500")
        .start();
    let mut con = node.connection();
    fenced(&mut con, "g", "L", 5, &["SET", "k", "v"]).unwrap();
    acquire_floor(&mut con, "lk", "o", 500, now_us() - 5_000_000);
    release(&mut con, "lk", "o");
    wait_until(Duration::from_secs(20), "the lock record reclaimed", || {
        let n: i64 = redis::cmd("EXISTS").arg("lk").query(&mut con).unwrap();
        n == 0
    });
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 5)));
}

/// The documented limit: an old holder is refused only once the resource
/// has seen the newer token.
#[test]
fn stale_after_the_new_holder_announces() {
    let node = Node::start();
    let mut con = node.connection();
    let t1 = acquire(&mut con, "job", "a", 100).unwrap();
    fenced(&mut con, "g", "job", t1, &["SET", "state", "a1"]).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let t2 = acquire(&mut con, "job", "b", 10_000).unwrap();
    assert!(t2 > t1);
    // A is paused past its lease: accepted until B shows its token.
    fenced(&mut con, "g", "job", t1, &["SET", "state", "a2"]).unwrap();
    let h: i64 = redis::cmd("REDLOCK.GUARD")
        .arg("g")
        .arg("job")
        .arg(t2)
        .query(&mut con)
        .unwrap();
    assert_eq!(h, t2);
    let e = err_text(fenced(&mut con, "g", "job", t1, &["SET", "state", "a3"]));
    assert!(e.starts_with("STALE"), "{e}");
    fenced(&mut con, "g", "job", t2, &["SET", "state", "b1"]).unwrap();
    assert_eq!(get(&mut con, "state").as_deref(), Some("b1"));
}

#[test]
fn acl_rights_of_the_caller_apply_to_the_inner_command() {
    let node = Node::start();
    let mut admin = node.connection();
    let setuser = |admin: &mut redis::Connection, rules: &[&str]| {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER");
        for r in rules {
            cmd.arg(*r);
        }
        let _: () = cmd.query(admin).unwrap();
    };
    setuser(
        &mut admin,
        &[
            "worker",
            "on",
            ">pw",
            "~job:*",
            "-@all",
            "+redlock.fenced",
            "+redlock.guard",
            "+hget",
            "+get",
        ],
    );
    setuser(
        &mut admin,
        &[
            "reader",
            "on",
            ">pw",
            "~job:g",
            "%R~job:*",
            "-@all",
            "+redlock.fenced",
            "+get",
            "+hset",
        ],
    );
    setuser(
        &mut admin,
        &[
            "noguard",
            "on",
            ">pw",
            "%R~job:g",
            "~job:d",
            "-@all",
            "+redlock.fenced",
            "+set",
        ],
    );
    let con_as = |user: &str| {
        redis::Client::open(node.url_as(user, "pw"))
            .unwrap()
            .get_connection()
            .unwrap()
    };
    let mut worker = con_as("worker");
    // No +hset: NOPERM from the inner check, with an ACL LOG entry; nothing changed.
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .unwrap();
    let e = err_text(fenced(
        &mut worker,
        "job:g",
        "L",
        1,
        &["HSET", "job:h", "f", "v"],
    ));
    assert!(e.starts_with("NOPERM"), "{e}");
    let log: Vec<Value> = redis::cmd("ACL").arg("LOG").query(&mut admin).unwrap();
    let text = format!("{log:?}");
    assert!(text.contains("hset") && text.contains("module"), "{text}");
    assert_eq!(guard_info(&mut admin, "job:g"), None);
    let exists: i64 = redis::cmd("EXISTS").arg("job:h").query(&mut admin).unwrap();
    assert_eq!(exists, 0);
    // Allowed command, inner key outside the pattern: NOPERM (outer check).
    let e = err_text(fenced(&mut worker, "job:g", "L", 1, &["GET", "other"]));
    assert!(e.starts_with("NOPERM"), "{e}");
    // Within its rights: it runs.
    let v = fenced(&mut worker, "job:g", "L", 1, &["GET", "job:x"]).unwrap();
    assert_eq!(v, Value::Nil);
    assert_eq!(guard_info(&mut admin, "job:g"), Some(("L".into(), 1)));
    // Read-only key rights: a fenced GET passes, a fenced HSET does not.
    let mut reader = con_as("reader");
    fenced(&mut reader, "job:g", "L", 1, &["GET", "job:x"]).unwrap();
    let e = err_text(fenced(
        &mut reader,
        "job:g",
        "L",
        1,
        &["HSET", "job:x", "f", "v"],
    ));
    assert!(e.starts_with("NOPERM"), "{e}");
    // No write right on the guard: NOPERM.
    let mut noguard = con_as("noguard");
    let e = err_text(fenced(
        &mut noguard,
        "job:g",
        "L",
        2,
        &["SET", "job:d", "v"],
    ));
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(get(&mut admin, "job:d"), None);
    assert_eq!(guard_info(&mut admin, "job:g"), Some(("L".into(), 1)));
}

/// `ACL SETUSER user rules...` on an admin connection.
fn set_user(admin: &mut redis::Connection, user: &str, rules: &[&str]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(user);
    for r in rules {
        cmd.arg(*r);
    }
    let _: () = cmd
        .query(admin)
        .unwrap_or_else(|e| panic!("ACL SETUSER {user} {rules:?}: {e}"));
}

/// On `con`: MULTI, then `queued` (each must answer QUEUED), then `rules`
/// applied to `user` from `admin`, then EXEC; EXEC's reply as sent.
fn exec_after_acl_change(
    con: &mut redis::Connection,
    admin: &mut redis::Connection,
    queued: &[redis::Cmd],
    user: &str,
    rules: &[&str],
) -> redis::RedisResult<Value> {
    let _: () = redis::cmd("MULTI").query(con).unwrap();
    for cmd in queued {
        let q: String = cmd.query(con).unwrap();
        assert_eq!(q, "QUEUED");
    }
    set_user(admin, user, rules);
    // The raw reply: `query` would turn an error inside the array into the
    // whole call's error.
    redis::ConnectionLike::req_command(con, &redis::cmd("EXEC"))
}

/// The only entry of an EXEC reply, which must be an error: `CODE detail`.
fn sole_error(exec: redis::RedisResult<Value>) -> String {
    match exec {
        Ok(Value::Array(items)) => match items.as_slice() {
            [Value::ServerError(e)] => format!("{} {}", e.code(), e.details().unwrap_or("")),
            other => panic!("EXEC replied {other:?}"),
        },
        other => panic!("EXEC replied {other:?}"),
    }
}

/// The newest `ACL LOG` entry's `reason`, `context` and `object`.
fn newest_acl_log(admin: &mut redis::Connection) -> (String, String, String) {
    let log: Vec<Vec<Value>> = redis::cmd("ACL").arg("LOG").arg(1).query(admin).unwrap();
    assert_eq!(log.len(), 1, "ACL LOG is empty");
    let field = |name: &str| -> String {
        let i = log[0]
            .iter()
            .position(|v| redis::from_redis_value_ref::<String>(v).ok().as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {:?}", log[0]));
        redis::from_redis_value_ref(&log[0][i + 1]).unwrap()
    };
    (field("reason"), field("context"), field("object"))
}

/// Rights changed between MULTI and EXEC (Redis 7.0 re-checks the ACL of
/// every queued command at EXEC, per command, without EXECABORT): a right
/// taken away refuses the fenced write with NOPERM, and neither the inner
/// write nor the guard happen, nothing reaches the replica; a right granted
/// in between lets the queued FENCED run once at EXEC. REDLOCK.GUARD too.
#[test]
fn acl_changed_between_multi_and_exec() {
    // No pings to move the offset; the replica syncs at once.
    let master = Node::builder()
        .config("repl-ping-replica-period", "3600")
        .config("repl-diskless-sync-delay", "0")
        .start();
    let replica = start_replica(
        &master,
        Node::builder().config("repl-ping-replica-period", "3600"),
    );
    let mut admin = master.connection();
    let offset = |admin: &mut redis::Connection| {
        info_field(admin, "replication", "master_repl_offset").unwrap()
    };
    set_user(
        &mut admin,
        "u",
        &[
            "on",
            ">pw",
            "~{r}*",
            "-@all",
            "+multi",
            "+exec",
            "+redlock.fenced",
            "+redlock.guard",
            "+set",
        ],
    );
    let mut u = redis::Client::open(master.url_as("u", "pw"))
        .unwrap()
        .get_connection()
        .unwrap();
    let set_k = fenced_cmd("{r}g", "lk", 5, &["SET", "{r}k", "v"]);

    // SET taken away: FENCED still passes EXEC's own check (its command
    // and keys), the inner check refuses SET: NOPERM from FENCED, logged
    // as a module denial; no write, no guard created.
    let before = offset(&mut admin);
    let e = sole_error(exec_after_acl_change(
        &mut u,
        &mut admin,
        std::slice::from_ref(&set_k),
        "u",
        &["-set"],
    ));
    assert!(
        e.starts_with("NOPERM")
            && e.to_lowercase().contains("'set'")
            && e.contains("REDLOCK.FENCED"),
        "{e}"
    );
    assert_eq!(
        newest_acl_log(&mut admin),
        ("command".into(), "module".into(), "set".into())
    );
    assert_eq!(get(&mut admin, "{r}k"), None);
    assert_eq!(guard_info(&mut admin, "{r}g"), None);
    let exists: i64 = redis::cmd("EXISTS").arg("{r}g").query(&mut admin).unwrap();
    assert_eq!(exists, 0);
    assert_eq!(offset(&mut admin), before);

    // Key pattern narrowed: EXEC's re-check refuses FENCED itself; an
    // existing guard is not raised and the resource keeps its value.
    set_user(&mut admin, "u", &["+set"]);
    fenced(&mut admin, "{r}g", "lk", 3, &["SET", "{r}k", "v0"]).unwrap();
    let before = offset(&mut admin);
    let e = sole_error(exec_after_acl_change(
        &mut u,
        &mut admin,
        std::slice::from_ref(&set_k),
        "u",
        &["resetkeys", "~other*"],
    ));
    assert!(
        e.starts_with("NOPERM") && e.contains("changed between") && e.contains("keys"),
        "{e}"
    );
    assert_eq!(
        newest_acl_log(&mut admin),
        ("key".into(), "multi".into(), "{r}g".into())
    );
    assert_eq!(get(&mut admin, "{r}k").as_deref(), Some("v0"));
    assert_eq!(guard_info(&mut admin, "{r}g"), Some(("lk".into(), 3)));
    assert_eq!(offset(&mut admin), before);

    // The reverse: INCR granted between MULTI and EXEC runs once at EXEC,
    // raises the guard, and reaches the replica.
    set_user(&mut admin, "u", &["resetkeys", "~{r}*", "-incr"]);
    let incr = fenced_cmd("{r}g", "lk", 5, &["INCR", "{r}n"]);
    let before = offset(&mut admin);
    let exec = exec_after_acl_change(
        &mut u,
        &mut admin,
        std::slice::from_ref(&incr),
        "u",
        &["+incr"],
    )
    .unwrap();
    assert_eq!(exec, Value::Array(vec![Value::Int(1)]));
    assert_eq!(get(&mut admin, "{r}n").as_deref(), Some("1"));
    assert_eq!(guard_info(&mut admin, "{r}g"), Some(("lk".into(), 5)));
    assert_ne!(offset(&mut admin), before);
    wait_replicated(&mut admin);
    let mut r = replica.connection();
    assert_eq!(get(&mut r, "{r}n").as_deref(), Some("1"));
    assert_eq!(guard_info(&mut r, "{r}g"), Some(("lk".into(), 5)));

    // A key right granted too late: FENCED was refused while queueing, so
    // EXEC aborts the whole transaction whatever the rights are by then.
    set_user(&mut admin, "u", &["resetkeys", "~other*"]);
    let before = offset(&mut admin);
    let _: () = redis::cmd("MULTI").query(&mut u).unwrap();
    let e = fenced_cmd("{r}g", "lk", 6, &["INCR", "{r}n"])
        .query::<Value>(&mut u)
        .unwrap_err();
    assert_eq!(e.code(), Some("NOPERM"), "{e}");
    set_user(&mut admin, "u", &["resetkeys", "~{r}*"]);
    let e = redis::cmd("EXEC").query::<Value>(&mut u).unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"), "{e}");
    assert_eq!(get(&mut admin, "{r}n").as_deref(), Some("1"));
    assert_eq!(guard_info(&mut admin, "{r}g"), Some(("lk".into(), 5)));
    assert_eq!(offset(&mut admin), before);

    // REDLOCK.GUARD: the command taken away, then the keys; no guard is
    // created, none raised.
    let guard_cmd = |guard: &str, token: i64| {
        let mut cmd = redis::cmd("REDLOCK.GUARD");
        cmd.arg(guard).arg("lk").arg(token);
        cmd
    };
    let before = offset(&mut admin);
    let e = sole_error(exec_after_acl_change(
        &mut u,
        &mut admin,
        &[guard_cmd("{r}h", 5)],
        "u",
        &["-redlock.guard"],
    ));
    assert!(
        e.starts_with("NOPERM") && e.contains("changed between") && e.contains("command"),
        "{e}"
    );
    assert_eq!(
        newest_acl_log(&mut admin),
        ("command".into(), "multi".into(), "REDLOCK.GUARD".into())
    );
    assert_eq!(guard_info(&mut admin, "{r}h"), None);
    set_user(&mut admin, "u", &["+redlock.guard"]);
    let e = sole_error(exec_after_acl_change(
        &mut u,
        &mut admin,
        &[guard_cmd("{r}g", 9)],
        "u",
        &["resetkeys", "~other*"],
    ));
    assert!(
        e.starts_with("NOPERM") && e.contains("changed between") && e.contains("keys"),
        "{e}"
    );
    assert_eq!(guard_info(&mut admin, "{r}g"), Some(("lk".into(), 5)));
    assert_eq!(offset(&mut admin), before);
}

/// On Redis 7.0.0–7.0.5 `RedisModule_Call` runs a `C` call as the
/// superuser after checking the caller's rights, so FENCED refuses to run
/// there (the test build acts on the version `SERVER-VERSION` sets); GUARD,
/// which runs nothing, still works.
#[test]
fn fenced_refuses_servers_before_7_0_6() {
    let node = Node::start();
    let mut con = node.connection();
    fenced(&mut con, "g", "L", 1, &["SET", "k", "v1"]).unwrap();
    let hook = |con: &mut redis::Connection, v: u32| {
        let _: () = redis::cmd("REDLOCK.TESTHOOK")
            .arg("SERVER-VERSION")
            .arg(v)
            .query(con)
            .unwrap();
    };
    hook(&mut con, 0x0007_0005);
    let e = err_text(fenced(&mut con, "g", "L", 2, &["SET", "k", "v2"]));
    hook(&mut con, 0);
    assert!(
        e.starts_with("ERR REDLOCK.FENCED needs Redis 7.0.6 or later: this server (7.0.5)"),
        "{e}"
    );
    assert_eq!(get(&mut con, "k").as_deref(), Some("v1"));
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 1)));
    hook(&mut con, 0x0007_0005);
    let highest: redis::RedisResult<i64> = redis::cmd("REDLOCK.GUARD")
        .arg("g")
        .arg("L")
        .arg(3)
        .query(&mut con);
    hook(&mut con, 0x0007_0006);
    let v = fenced(&mut con, "g", "L", 3, &["SET", "k", "v3"]);
    hook(&mut con, 0);
    assert_eq!(highest.unwrap(), 3);
    assert_eq!(v.unwrap(), Value::Okay);
    assert_eq!(get(&mut con, "k").as_deref(), Some("v3"));
}

#[test]
fn out_of_memory_follows_the_inner_command() {
    let node = Node::start();
    let mut con = node.connection();
    fenced(&mut con, "g", "L", 1, &["SET", "k", "v"]).unwrap();
    config_set(&mut con, "maxmemory", "1");
    let e = err_text(fenced(&mut con, "g", "L", 2, &["SET", "k2", "v"]));
    assert!(e.starts_with("OOM"), "{e}");
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 1)));
    // DEL frees memory: allowed, and raises.
    let v = fenced(&mut con, "g", "L", 2, &["DEL", "k"]).unwrap();
    assert_eq!(v, Value::Int(1));
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 2)));
    // A new guard is refused.
    let e = err_text(fenced(&mut con, "new", "L", 2, &["DEL", "k"]));
    assert!(e.starts_with("OOM"), "{e}");
    assert_eq!(guard_info(&mut con, "new"), None);
    config_set(&mut con, "maxmemory", "0");
}

/// The inner effect (as Redis rewrote it) and the guard state reach the
/// replica together: same digest, same guard; the AOF holds them in one
/// MULTI/EXEC and replays to the same data.
#[test]
fn replica_and_aof_follow_fenced_writes() {
    let master = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .config("aof-use-rdb-preamble", "no")
        .config("repl-diskless-sync-delay", "0")
        .start();
    let replica = start_replica(&master, Node::builder());
    let mut m = master.connection();
    let _: () = redis::cmd("SADD")
        .arg("s")
        .arg("a")
        .arg("b")
        .arg("c")
        .query(&mut m)
        .unwrap();
    fenced(&mut m, "{r}g", "L", 3, &["SET", "{r}k", "v", "EX", "100"]).unwrap();
    fenced(&mut m, "{r}g", "L", 4, &["EXPIRE", "{r}k", "200"]).unwrap();
    fenced(&mut m, "{r}g", "L", 5, &["SPOP", "s"]).unwrap();
    fenced(&mut m, "{r}g", "L", 6, &["INCRBYFLOAT", "f", "1.25"]).unwrap();
    fenced(&mut m, "{r}g", "L", 6, &["HSET", "h", "a", "1"]).unwrap();
    fenced(&mut m, "{r}g", "L", 7, &["GET", "f"]).unwrap();
    wait_replicated(&mut m);
    let mut r = replica.connection();
    assert_eq!(digest(&mut r), digest(&mut m));
    assert_eq!(guard_info(&mut r, "{r}g"), Some(("L".into(), 7)));
    let aof = String::from_utf8_lossy(&aof_bytes(&master)).into_owned();
    let flat = without_node_announcements(&aof.replace("\r\n", " "));
    assert!(
        flat.contains("*1 $5 MULTI *5 $3 SET $4 {r}k $1 v $4 PXAT"),
        "SET EX went out rewritten inside MULTI: {flat}"
    );
    assert!(
        flat.contains("$13 REDLOCK.APPLY $4 {r}g $2 g1 $1 3 $1 L *1 $4 EXEC"),
        "{flat}"
    );
    assert!(
        flat.contains("$4 SREM $1 s"),
        "SPOP went out as SREM: {flat}"
    );
    // The GET raised only the guard: APPLY alone, no MULTI around it.
    assert!(
        flat.ends_with("*5 $13 REDLOCK.APPLY $4 {r}g $2 g1 $1 7 $1 L "),
        "{flat}"
    );
    let digest_before = digest(&mut m);
    // DEBUG LOADAOF, BGREWRITEAOF without and with the preamble, and a restart.
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
    assert_eq!(digest(&mut m), digest_before);
    for preamble in ["no", "yes"] {
        config_set(&mut m, "aof-use-rdb-preamble", preamble);
        let _: Value = redis::cmd("BGREWRITEAOF").query(&mut m).unwrap();
        wait_for_no_child(&mut m);
        let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
        assert_eq!(digest(&mut m), digest_before, "preamble {preamble}");
    }
    drop(replica);
    let mut master = master;
    master.restart();
    let mut m = master.connection();
    assert_eq!(digest(&mut m), digest_before);
    assert_eq!(guard_info(&mut m, "{r}g"), Some(("L".into(), 7)));
    let e = err_text(fenced(&mut m, "{r}g", "L", 6, &["SET", "{r}k", "x"]));
    assert!(e.starts_with("STALE"), "{e}");
}

#[test]
fn multi_and_lua() {
    let node = Node::builder()
        .config("appendonly", "yes")
        .config("aof-use-rdb-preamble", "no")
        .start();
    let mut con = node.connection();
    // Three FENCED in one MULTI: one MULTI/EXEC in the AOF.
    let (a, b, c): (Value, Value, Value) = redis::pipe()
        .atomic()
        .add_command(fenced_cmd("g", "L", 2, &["INCR", "seq"]))
        .add_command(fenced_cmd("g", "L", 2, &["HSET", "h", "v", "x"]))
        .add_command(fenced_cmd("g", "L", 2, &["HINCRBY", "h", "ver", "1"]))
        .query(&mut con)
        .unwrap();
    assert_eq!((a, b, c), (Value::Int(1), Value::Int(1), Value::Int(1)));
    let flat = String::from_utf8_lossy(&aof_bytes(&node)).replace("\r\n", " ");
    assert_eq!(flat.matches("MULTI").count(), 1, "{flat}");
    assert_eq!(flat.matches("REDLOCK.APPLY").count(), 1, "{flat}");
    // The pitfall GUARD cannot close: in MULTI, a STALE GUARD does not stop
    // the SET after it.
    let results: Vec<redis::RedisResult<Value>> = redis::pipe()
        .atomic()
        .ignore_errors()
        .cmd("REDLOCK.GUARD")
        .arg("g")
        .arg("L")
        .arg(1)
        .cmd("SET")
        .arg("k")
        .arg("ran")
        .query(&mut con)
        .unwrap();
    assert_eq!(results.len(), 2);
    let e = results[0].as_ref().unwrap_err();
    assert_eq!(e.code(), Some("STALE"));
    assert_eq!(results[1].as_ref().unwrap(), &Value::Okay);
    assert_eq!(get(&mut con, "k").as_deref(), Some("ran"));
    // In Lua, GUARD's STALE stops the script before its write.
    let script = "redis.call('REDLOCK.GUARD', KEYS[1], ARGV[1], ARGV[2]); redis.call('SET', KEYS[2], ARGV[3]); return 1";
    let e = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("g")
        .arg("lua")
        .arg("L")
        .arg(1)
        .arg("stale")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert!(e.to_string().contains("STALE"), "{e}");
    assert_eq!(get(&mut con, "lua"), None);
    let ok: i64 = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("g")
        .arg("lua")
        .arg("L")
        .arg(3)
        .arg("fresh")
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, 1);
    assert_eq!(get(&mut con, "lua").as_deref(), Some("fresh"));
    assert_eq!(guard_info(&mut con, "g"), Some(("L".into(), 3)));
    // FENCED inside EVAL works.
    let v: String = redis::cmd("EVAL")
        .arg("return redis.call('REDLOCK.FENCED', KEYS[1], 'L', 3, 'GET', KEYS[2])")
        .arg(2)
        .arg("g")
        .arg("lua")
        .query(&mut con)
        .unwrap();
    assert_eq!(v, "fresh");
    // WATCH on the guard: another client's raise aborts the transaction.
    let mut other = node.connection();
    let _: () = redis::cmd("WATCH").arg("g").query(&mut con).unwrap();
    fenced(&mut other, "g", "L", 3, &["GET", "k"]).unwrap();
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("w").arg("1").query(&mut con).unwrap();
    let exec: Option<Vec<Value>> = redis::cmd("EXEC").query(&mut con).unwrap();
    assert!(exec.is_some(), "an equal token changes nothing");
    let _: () = redis::cmd("WATCH").arg("g").query(&mut con).unwrap();
    fenced(&mut other, "g", "L", 4, &["GET", "k"]).unwrap();
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("w").arg("2").query(&mut con).unwrap();
    let exec: Option<Vec<Value>> = redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(exec, None, "the raise must abort the watcher");
}

/// A raise is announced as the keyspace event `redlock.guard`; an equal
/// token (nothing changed) and a STALE call raise none.
#[test]
fn keyspace_events_on_raises_only() {
    let node = Node::start();
    let mut con = node.connection();
    config_set(&mut con, "notify-keyspace-events", "Kd");
    let mut sub_con = node.connection();
    let mut sub = sub_con.as_pubsub();
    sub.subscribe("__keyspace@0__:g").unwrap();
    sub.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut next = || -> Option<String> {
        sub.get_message()
            .ok()
            .map(|m| m.get_payload::<String>().unwrap())
    };
    fenced(&mut con, "g", "L", 5, &["SET", "k", "v"]).unwrap();
    assert_eq!(next().as_deref(), Some("redlock.guard"));
    fenced(&mut con, "g", "L", 5, &["SET", "k", "v"]).unwrap();
    fenced(&mut con, "g", "L", 4, &["SET", "k", "v"]).unwrap_err();
    assert_eq!(next(), None, "an equal or stale token changes nothing");
    fenced(&mut con, "g", "L", 6, &["GET", "k"]).unwrap();
    assert_eq!(next().as_deref(), Some("redlock.guard"));
}
