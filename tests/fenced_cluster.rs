//! Fenced writes in a Redis Cluster: FENCED declares the guard and the inner
//! command's keys, so Redis routes it (MOVED), refuses a guard and a resource
//! in different slots (CROSSSLOT), and a guard moves with its slot.

mod common;

use redis::Value;
use redlock_testkit::Cluster;

fn fenced_cmd(guard: &str, lock: &str, token: i64, inner: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("REDLOCK.FENCED");
    cmd.arg(guard).arg(lock).arg(token);
    for a in inner {
        cmd.arg(*a);
    }
    cmd
}

fn guard_highest(con: &mut redis::Connection, guard: &str) -> Option<i64> {
    let reply: Option<Vec<Value>> = redis::cmd("REDLOCK.GUARDINFO")
        .arg(guard)
        .query(con)
        .unwrap();
    reply.map(|f| redis::from_redis_value_ref(&f[3]).unwrap())
}

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
