//! Fenced writes in a Redis Cluster: FENCED declares the guard and the inner
//! command's keys, so Redis routes it (MOVED), refuses a guard and a resource
//! in different slots (CROSSSLOT), answers TRYAGAIN/ASK while the slot
//! migrates, and a guard moves with its slot.

mod common;

use common::{fenced_cmd, guard_highest};

use redis::Value;
use redlock_testkit::Cluster;

#[test]
fn keys_route_and_a_guard_moves_with_its_slot() {
    let cluster = Cluster::builder().shards(2).start();
    let guard = "{job:42}:fence";
    let state = "{job:42}:state";
    let slot = cluster.slot_of(guard.as_bytes());
    let home = cluster.shard_of_slot(slot);
    let mut con = cluster.master(home).connection();

    // COMMAND GETKEYSANDFLAGS: the guard read-write, then the inner key.
    let keys: Vec<Value> = redis::cmd("COMMAND")
        .arg("GETKEYSANDFLAGS")
        .arg("REDLOCK.FENCED")
        .arg(guard)
        .arg("L")
        .arg(5)
        .arg("HSET")
        .arg(state)
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let text = format!("{keys:?}");
    assert_eq!(keys.len(), 2, "{text}");
    assert!(
        text.contains("{job:42}:fence") && text.contains("RW"),
        "{text}"
    );
    assert!(text.contains("{job:42}:state"), "{text}");
    let plain: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("REDLOCK.FENCED")
        .arg(guard)
        .arg("L")
        .arg(5)
        .arg("MSET")
        .arg(state)
        .arg("1")
        .arg("{job:42}:other")
        .arg("2")
        .query(&mut con)
        .unwrap();
    assert_eq!(plain, [guard, state, "{job:42}:other"]);

    // One hash tag: it runs.
    let v: Value = fenced_cmd(guard, "L", 5, &["HSET", state, "f", "v"])
        .query(&mut con)
        .unwrap();
    assert_eq!(v, Value::Int(1));
    // Guard and resource in different slots: CROSSSLOT, nothing changed.
    let other = (0..1000)
        .map(|i| format!("res{i}"))
        .find(|k| {
            cluster.slot_of(k.as_bytes()) != slot
                && cluster.shard_of_slot(cluster.slot_of(k.as_bytes())) == home
        })
        .expect("a key of another slot on the same shard");
    let e = fenced_cmd(guard, "L", 6, &["SET", &other, "v"])
        .query::<Value>(&mut con)
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    assert_eq!(guard_highest(&mut con, guard), Some(5));
    // Sent to the other shard: MOVED to the guard's slot.
    let away = 1 - home;
    let mut wrong = cluster.master(away).connection();
    let e = fenced_cmd(guard, "L", 6, &["HSET", state, "f", "w"])
        .query::<Value>(&mut wrong)
        .unwrap_err();
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    assert_eq!(e.redirect_node().map(|(_, s)| s), Some(slot));

    // The guard moves with its slot and keeps refusing stale tokens.
    cluster.migrate_slot(slot, away);
    let mut there = cluster.master(away).connection();
    assert_eq!(guard_highest(&mut there, guard), Some(5));
    let e = fenced_cmd(guard, "L", 4, &["HSET", state, "f", "x"])
        .query::<Value>(&mut there)
        .unwrap_err();
    assert_eq!(e.code(), Some("STALE"), "{e}");
    let v: String = fenced_cmd(guard, "L", 5, &["HGET", state, "f"])
        .query(&mut there)
        .unwrap();
    assert_eq!(v, "v");
}

/// `REDLOCK.GUARDINFO guard` as (lock, highest), after `ASKING` when
/// `asking` (a node importing the slot answers only then).
fn guard_info(con: &mut redis::Connection, guard: &str, asking: bool) -> Option<(String, i64)> {
    if asking {
        ask(con);
    }
    let reply: Option<Vec<Value>> = redis::cmd("REDLOCK.GUARDINFO")
        .arg(guard)
        .query(con)
        .unwrap();
    let f = reply?;
    assert_eq!(f.len(), 4, "{f:?}");
    Some((
        redis::from_redis_value_ref(&f[1]).unwrap(),
        redis::from_redis_value_ref(&f[3]).unwrap(),
    ))
}

/// `ASKING`: the next command of this connection may use a slot the node
/// is importing.
fn ask(con: &mut redis::Connection) {
    let _: () = redis::cmd("ASKING").query(con).unwrap();
}

/// `MIGRATE` of one key from the node behind `con` to `port`.
fn migrate_key(con: &mut redis::Connection, port: u16, key: &str) {
    let reply: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(port)
        .arg(key)
        .arg(0)
        .arg(5000)
        .query(con)
        .unwrap_or_else(|e| panic!("MIGRATE {key}: {e}"));
    assert_eq!(reply, "OK", "MIGRATE {key}");
}

/// A slot moved step by step (SETSLOT IMPORTING/MIGRATING, MIGRATE of one
/// key at a time, SETSLOT NODE): FENCED follows Redis Cluster's rules for a
/// command with several keys (getNodeByQuery, Redis 7.0): it runs where all
/// its keys are, answers TRYAGAIN while guard and resource are split, ASK
/// once both left, MOVED after the move. The guard moves with its highest
/// and its lock name (DUMP/RESTORE inside MIGRATE).
#[test]
fn fenced_through_a_slot_migration_step_by_step() {
    let cluster = Cluster::builder().shards(2).start();
    let (guard, res) = ("{r}g", "{r}k");
    let slot = cluster.slot_of(guard.as_bytes());
    assert_eq!(cluster.slot_of(res.as_bytes()), slot);
    let from = cluster.shard_of_slot(slot);
    let to = 1 - from;
    let port_b = cluster.master(to).port();
    let mut a = cluster.master(from).connection();
    let mut b = cluster.master(to).connection();
    let v: Value = fenced_cmd(guard, "lk", 5, &["SET", res, "v0"])
        .query(&mut a)
        .unwrap();
    assert_eq!(v, Value::Okay);

    // (a) MIGRATING on A, both keys still there: it runs on A and raises.
    let migration = cluster.begin_migration(slot, to);
    let v: Value = fenced_cmd(guard, "lk", 7, &["SET", res, "v1"])
        .query(&mut a)
        .unwrap();
    assert_eq!(v, Value::Okay);
    assert_eq!(guard_info(&mut a, guard, false), Some(("lk".into(), 7)));
    let got: String = redis::cmd("GET").arg(res).query(&mut a).unwrap();
    assert_eq!(got, "v1");

    // (b) The guard alone moved: the keys are split, TRYAGAIN on A and on
    // B (even with ASKING), nothing changes on either node.
    migrate_key(&mut a, port_b, guard);
    let (digest_a, digest_b) = (common::digest(&mut a), common::digest(&mut b));
    let e = fenced_cmd(guard, "lk", 8, &["SET", res, "v2"])
        .query::<Value>(&mut a)
        .unwrap_err();
    assert_eq!(e.code(), Some("TRYAGAIN"), "{e}");
    ask(&mut b);
    let e = fenced_cmd(guard, "lk", 8, &["SET", res, "v2"])
        .query::<Value>(&mut b)
        .unwrap_err();
    assert_eq!(e.code(), Some("TRYAGAIN"), "{e}");
    assert_eq!(common::digest(&mut a), digest_a);
    assert_eq!(common::digest(&mut b), digest_b);
    // The guard arrived whole: its lock name and its highest.
    assert_eq!(guard_info(&mut b, guard, true), Some(("lk".into(), 7)));
    // Without ASKING, B sends the client back to A, which still owns the slot.
    let e = fenced_cmd(guard, "lk", 8, &["SET", res, "v2"])
        .query::<Value>(&mut b)
        .unwrap_err();
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    let port_a = cluster.master(from).port();
    let to_a = e.redirect_node().map(|(addr, s)| (addr.to_string(), s));
    assert_eq!(to_a, Some((format!("127.0.0.1:{port_a}"), slot)));

    // (c) Both moved: A answers ASK to B; on B with ASKING the guard keeps
    // refusing below its highest and its lock name, then runs.
    migrate_key(&mut a, port_b, res);
    let e = fenced_cmd(guard, "lk", 8, &["SET", res, "v2"])
        .query::<Value>(&mut a)
        .unwrap_err();
    assert_eq!(e.code(), Some("ASK"), "{e}");
    let to_b = e.redirect_node().map(|(addr, s)| (addr.to_string(), s));
    assert_eq!(to_b, Some((format!("127.0.0.1:{port_b}"), slot)));
    ask(&mut b);
    let e = fenced_cmd(guard, "lk", 6, &["SET", res, "stale"])
        .query::<Value>(&mut b)
        .unwrap_err();
    assert_eq!(e.code(), Some("STALE"), "{e}");
    assert!(e.to_string().contains("below 7"), "{e}");
    ask(&mut b);
    let e = fenced_cmd(guard, "other", 8, &["SET", res, "x"])
        .query::<Value>(&mut b)
        .unwrap_err();
    assert!(e.to_string().contains("serves lock 'lk'"), "{e}");
    ask(&mut b);
    let v: Value = fenced_cmd(guard, "lk", 8, &["SET", res, "v2"])
        .query(&mut b)
        .unwrap();
    assert_eq!(v, Value::Okay);
    assert_eq!(guard_info(&mut b, guard, true), Some(("lk".into(), 8)));

    // (d) SETSLOT NODE B everywhere: A answers MOVED to B; B owns the slot
    // and still refuses the stale token.
    cluster.finish_migration(&migration);
    let e = fenced_cmd(guard, "lk", 9, &["SET", res, "v3"])
        .query::<Value>(&mut a)
        .unwrap_err();
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    let to_b = e.redirect_node().map(|(addr, s)| (addr.to_string(), s));
    assert_eq!(to_b, Some((format!("127.0.0.1:{port_b}"), slot)));
    let e = fenced_cmd(guard, "lk", 7, &["SET", res, "stale"])
        .query::<Value>(&mut b)
        .unwrap_err();
    assert_eq!(e.code(), Some("STALE"), "{e}");
    assert!(e.to_string().contains("below 8"), "{e}");
    let v: String = fenced_cmd(guard, "lk", 8, &["GET", res])
        .query(&mut b)
        .unwrap();
    assert_eq!(v, "v2");
    assert_eq!(guard_info(&mut b, guard, false), Some(("lk".into(), 8)));
}
