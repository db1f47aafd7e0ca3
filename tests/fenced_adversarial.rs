//! Adversarial checks of fenced writes (DESIGN §10) that the main suite
//! (`tests/fenced.rs`, `tests/fenced_cluster.rs`) does not pin: checks the
//! inner command makes itself (SORT's BY/GET key check) run as the caller;
//! keys that expire lazily during a fenced call (the guard itself included)
//! go out inside the same MULTI/EXEC as the guard's state; crafted guard
//! payloads are refused, not fatal; mid-migration, a guard is neither
//! bypassed nor recreated on either side.

mod common;

use common::*;
use redis::Value;
use redlock_testkit::Cluster;

/// The inner command must run as the caller, not only be checked as the
/// caller: SORT checks its BY/GET patterns against the running client's
/// user inside the command. Redis 7.0.0 to 7.0.5 run RedisModule_Call's
/// command as the superuser after the `C` check (the user is attached from
/// 7.0.6 on), so there a fenced SORT reads, and with STORE copies, keys the
/// user may not read.
#[test]
fn sort_patterns_inside_fenced_are_checked_as_the_caller() {
    let node = Node::start();
    let mut admin = node.connection();
    let _: () = redis::cmd("SET")
        .arg("secret:x")
        .arg("TOPSECRET")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("{j}:list")
        .arg("x")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("w")
        .arg("on")
        .arg(">pw")
        .arg("~{j}*")
        .arg("-@all")
        .arg("+redlock.fenced")
        .arg("+sort")
        .query(&mut admin)
        .unwrap();
    let mut w = redis::Client::open(node.url_as("w", "pw"))
        .unwrap()
        .get_connection()
        .unwrap();
    // Direct: Redis refuses the GET pattern for a user with restricted keys.
    let direct = redis::cmd("SORT")
        .arg("{j}:list")
        .arg("BY")
        .arg("nosort")
        .arg("GET")
        .arg("secret:*")
        .query::<Value>(&mut w);
    assert!(direct.is_err(), "direct SORT GET: {direct:?}");
    // Fenced: the same refusal, and nothing stored.
    let fenced = fenced_cmd(
        "{j}:g",
        "L",
        5,
        &[
            "SORT", "{j}:list", "BY", "nosort", "GET", "secret:*", "STORE", "{j}:out",
        ],
    )
    .query::<Value>(&mut w);
    assert!(
        fenced.is_err(),
        "FENCED SORT … GET secret:* STORE ran past the user's key patterns: {fenced:?}"
    );
    let copied: Option<Vec<String>> = redis::cmd("LRANGE")
        .arg("{j}:out")
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .ok();
    assert!(
        copied.as_deref().unwrap_or_default().is_empty(),
        "a secret was copied: {copied:?}"
    );
}

/// A guard or an inner key that expires lazily during the call: its DEL
/// goes out inside the fenced MULTI/EXEC, before the guard's new state; the
/// replica ends equal.
#[test]
fn lazily_expired_keys_go_out_inside_the_fenced_transaction() {
    let master = Node::builder()
        .config("appendonly", "yes")
        .config("aof-use-rdb-preamble", "no")
        .config("repl-diskless-sync-delay", "0")
        .start();
    let replica = start_replica(&master, Node::builder());
    let mut m = master.connection();
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut m)
        .unwrap();
    fenced_cmd("g", "L", 10, &["SET", "d", "v"])
        .query::<Value>(&mut m)
        .unwrap();
    for key in ["k", "gt"] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("old")
            .arg("PX")
            .arg(1)
            .query(&mut m)
            .unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let v: Option<String> = fenced_cmd("g", "L", 11, &["GET", "k"])
        .query(&mut m)
        .unwrap();
    assert_eq!(v, None);
    // An expired string where the guard should be: gone, a new guard.
    let v: Value = fenced_cmd("gt", "L", 3, &["SET", "d2", "v"])
        .query(&mut m)
        .unwrap();
    assert_eq!(v, Value::Okay);
    assert_eq!(guard_highest(&mut m, "gt"), Some(3));
    wait_replicated(&mut m);
    let mut r = replica.connection();
    assert_eq!(digest(&mut r), digest(&mut m));
    assert_eq!(guard_highest(&mut r, "gt"), Some(3));
    // Redis 7.0 propagates a lazy expiry as DEL, Valkey 8 (where
    // lazyfree-lazy-expire defaults to yes) as UNLINK: the same effect.
    let flat = String::from_utf8_lossy(&aof_bytes(&master))
        .replace("\r\n", " ")
        .replace("*2 $6 UNLINK", "*2 $3 DEL");
    assert!(
        flat.contains(
            "*1 $5 MULTI *2 $3 DEL $1 k *5 $13 REDLOCK.APPLY $1 g $2 g1 $2 11 $1 L *1 $4 EXEC"
        ),
        "{flat}"
    );
    assert!(
        flat.contains(
            "*1 $5 MULTI *2 $3 DEL $2 gt *3 $3 SET $2 d2 $1 v *5 $13 REDLOCK.APPLY $2 gt $2 g1 $1 3 $1 L *1 $4 EXEC"
        ),
        "{flat}"
    );
}

/// RESTORE of crafted `redlockgd` payloads (checksums off): each is
/// refused with "Bad data format", no key is created, the server lives.
#[test]
fn crafted_guard_payloads_are_refused_not_fatal() {
    let node = Node::start();
    let mut con = node.connection();
    fenced_cmd("g", "L", 14, &["SET", "d", "v"])
        .query::<Value>(&mut con)
        .unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg("g").query(&mut con).unwrap();
    // Type byte, 0x81 and the 8-byte module id (its low 10 bits: encver 1),
    // then `02 <highest> 05 <len> <lock> 00`, RDB version (2), CRC (8).
    assert_eq!(&dump[..2], &[7, 0x81], "{dump:?}");
    let header = &dump[..10];
    let body = &dump[10..dump.len() - 10];
    assert_eq!(body, b"\x02\x0e\x05\x01L\x00", "{dump:?}");
    let trailer = &dump[dump.len() - 10..];
    let _: () = redis::cmd("DEBUG")
        .arg("SET-SKIP-CHECKSUM-VALIDATION")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let mut bigger_lock = b"\x02\x0e\x05\x44\x01".to_vec();
    bigger_lock.extend(vec![b'x'; 1025]);
    bigger_lock.push(0);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", b"\x00".to_vec()),
        ("no highest", b"\x02".to_vec()),
        ("no lock", b"\x02\x0e".to_vec()),
        ("cut lock", b"\x02\x0e\x05".to_vec()),
        ("highest 0", b"\x02\x00\x05\x01L\x00".to_vec()),
        ("empty lock", b"\x02\x0e\x05\x00\x00".to_vec()),
        ("fields swapped", b"\x05\x01L\x02\x0e\x00".to_vec()),
        (
            "highest above i64",
            b"\x02\x81\xff\xff\xff\xff\xff\xff\xff\xff\x05\x01L\x00".to_vec(),
        ),
        ("lock of 1025 bytes", bigger_lock),
        ("no end", b"\x02\x0e\x05\x01L".to_vec()),
        ("extra field", b"\x02\x0e\x05\x01L\x02\x05\x00".to_vec()),
    ];
    for (name, value) in &cases {
        let mut payload = header.to_vec();
        payload.extend_from_slice(value);
        payload.extend_from_slice(trailer);
        let e = redis::cmd("RESTORE")
            .arg("x")
            .arg(0)
            .arg(payload)
            .query::<Value>(&mut con)
            .unwrap_err();
        assert!(e.to_string().contains("Bad data format"), "{name}: {e}");
        let exists: i64 = redis::cmd("EXISTS").arg("x").query(&mut con).unwrap();
        assert_eq!(exists, 0, "{name}");
    }
    // Another encoding version in the module id.
    let mut other = header.to_vec();
    other[9] = (other[9] & !0x03) | 0x02;
    other.extend_from_slice(body);
    other.extend_from_slice(trailer);
    let e = redis::cmd("RESTORE")
        .arg("x")
        .arg(0)
        .arg(other)
        .query::<Value>(&mut con)
        .unwrap_err();
    assert!(e.to_string().contains("Bad data format"), "encver 2: {e}");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(guard_highest(&mut con, "g"), Some(14));
}

/// Mid-migration with the guard already on the target: the source never
/// creates a new guard (ASK / TRYAGAIN), the target refuses a stale token
/// under ASKING, and after the move the stale token stays refused.
#[test]
fn mid_migration_a_guard_is_neither_bypassed_nor_recreated() {
    let cluster = Cluster::builder().shards(2).start();
    let guard = "{job:7}:fence";
    let state = "{job:7}:state";
    let slot = cluster.slot_of(guard.as_bytes());
    let from = cluster.shard_of_slot(slot);
    let to = 1 - from;
    let mut src = cluster.master(from).connection();
    fenced_cmd(guard, "L", 10, &["SET", state, "ten"])
        .query::<Value>(&mut src)
        .unwrap();
    let migration = cluster.begin_migration(slot, to);
    let target = cluster.master(to);
    let reply: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port())
        .arg(guard)
        .arg(0)
        .arg(5000)
        .query(&mut src)
        .unwrap();
    assert_eq!(reply, "OK");
    // Source: the guard is gone from here, the data is not.
    let e = fenced_cmd(guard, "L", 9, &["SET", state, "nine"])
        .query::<Value>(&mut src)
        .unwrap_err();
    assert_eq!(e.code(), Some("TRYAGAIN"), "{e}");
    let e = redis::cmd("REDLOCK.GUARD")
        .arg(guard)
        .arg("L")
        .arg(9)
        .query::<Value>(&mut src)
        .unwrap_err();
    assert_eq!(e.code(), Some("ASK"), "{e}");
    // Target under ASKING: the guard is here and refuses the stale token.
    let mut dst = target.connection();
    // ASKING holds for the next command on the same connection.
    let asking = |con: &mut redis::Connection, cmd: &redis::Cmd| {
        let _: () = redis::cmd("ASKING").query(con).unwrap();
        cmd.query::<Value>(con)
    };
    let stale = redis::cmd("REDLOCK.GUARD")
        .arg(guard)
        .arg("L")
        .arg(9)
        .clone();
    let e = asking(&mut dst, &stale).unwrap_err();
    assert_eq!(e.code(), Some("STALE"), "{e}");
    let e = asking(&mut dst, &fenced_cmd(guard, "L", 11, &["SET", state, "x"])).unwrap_err();
    assert_eq!(e.code(), Some("TRYAGAIN"), "{e}");
    let get: Option<String> = redis::cmd("GET").arg(state).query(&mut src).unwrap();
    assert_eq!(get.as_deref(), Some("ten"));
    while cluster.migrate_keys(&migration, 100) > 0 {}
    cluster.finish_migration(&migration);
    let mut dst = cluster.master(to).connection();
    assert_eq!(guard_highest(&mut dst, guard), Some(10));
    let e = fenced_cmd(guard, "L", 9, &["SET", state, "nine"])
        .query::<Value>(&mut dst)
        .unwrap_err();
    assert_eq!(e.code(), Some("STALE"), "{e}");
    let get: Option<String> = redis::cmd("GET").arg(state).query(&mut dst).unwrap();
    assert_eq!(get.as_deref(), Some("ten"));
}
