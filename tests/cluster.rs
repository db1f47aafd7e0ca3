//! The module in a Redis Cluster (DESIGN §9): commands route by their key,
//! a held lock moves with its slot (counter, owner, lease), `-ASK` and
//! `ASKING` during a slot move, failovers keep the locks and open the
//! promotion guard, waiters on a key that moves away are answered at once,
//! and each shard reclaims its own records.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use redlock_testkit::Cluster;

/// The public commands with a key, each as one valid call on `key`.
fn calls(key: &str) -> Vec<Vec<String>> {
    let k = key.to_string();
    let s = |v: &str| v.to_string();
    vec![
        vec![s("REDLOCK.ACQUIRE"), k.clone(), s("o"), s("1000")],
        vec![
            s("REDLOCK.ACQUIRE"),
            k.clone(),
            s("o"),
            s("1000"),
            s("FLOOR"),
            s("5"),
        ],
        vec![s("REDLOCK.RELEASE"), k.clone(), s("o")],
        vec![s("REDLOCK.EXTEND"), k.clone(), s("o"), s("1000")],
        vec![s("REDLOCK.FENCE"), k.clone(), s("o")],
        vec![s("REDLOCK.FENCE"), k.clone(), s("o"), s("9")],
        vec![s("REDLOCK.INSPECT"), k.clone()],
        vec![s("REDLOCK.WAIT"), k.clone(), s("1")],
        vec![
            s("REDLOCK.WAIT"),
            k.clone(),
            s("1"),
            s("QUEUE"),
            s("o"),
            s("3"),
        ],
        vec![
            s("REDLOCK.APPLY"),
            k.clone(),
            s("v2"),
            s("1"),
            s("0"),
            s("0"),
            s("0"),
            s("0"),
            s("0"),
        ],
    ]
}

fn cmd_of(args: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(&args[0]);
    for a in &args[1..] {
        cmd.arg(a);
    }
    cmd
}

/// The redirect a command got: `(kind, slot, port)`.
fn redirect(result: redis::RedisResult<redis::Value>) -> (redis::ErrorKind, u16, u16) {
    let err = match result {
        Ok(v) => panic!("expected a redirect, got {v:?}"),
        Err(e) => e,
    };
    let (addr, slot) = err
        .redirect_node()
        .unwrap_or_else(|| panic!("not a redirect: {err}"));
    let port: u16 = addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {err}"));
    (err.kind(), slot, port)
}

const MOVED: redis::ErrorKind = redis::ErrorKind::Server(redis::ServerErrorKind::Moved);
const ASK: redis::ErrorKind = redis::ErrorKind::Server(redis::ServerErrorKind::Ask);

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Keys `prefix:N` on `shard`, `count` of them.
fn keys_on(cluster: &Cluster, shard: usize, prefix: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .filter(|k| cluster.shard_of_slot(cluster.slot_of(k.as_bytes())) == shard)
        .take(count)
        .collect()
}

/// Whether `INSPECT` on the node behind `con` shows the same lock as
/// `before`, with a pttl that went down by at most `elapsed` plus slack.
fn assert_same_lock(view: View, before: View, elapsed: Duration, what: &str) {
    assert!(view.held, "{what}: not held: {view:?}");
    assert_eq!(view.token, before.token, "{what}: token");
    assert!(
        view.pttl <= before.pttl && view.pttl >= before.pttl - elapsed.as_millis() as i64 - 200,
        "{what}: pttl {} after {elapsed:?}, was {}",
        view.pttl,
        before.pttl
    );
}

/// Every command declares its key at position 1 (also WAIT's QUEUE form),
/// and a command sent to a shard that does not serve its key is answered
/// `-MOVED` with the slot and the shard that does.
#[test]
fn commands_route_by_their_key() {
    let cluster = Cluster::builder().shards(3).start();
    let mut con = cluster.master(0).connection();
    for name in [
        "REDLOCK.ACQUIRE",
        "REDLOCK.RELEASE",
        "REDLOCK.EXTEND",
        "REDLOCK.FENCE",
        "REDLOCK.INSPECT",
        "REDLOCK.WAIT",
        "REDLOCK.APPLY",
    ] {
        let info: Vec<Vec<redis::Value>> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut con)
            .unwrap();
        let row = &info[0];
        let int = |v: &redis::Value| -> i64 { redis::from_redis_value_ref(v).unwrap() };
        assert_eq!(
            (int(&row[3]), int(&row[4]), int(&row[5])),
            (1, 1, 1),
            "{name}: first, last key and step"
        );
        // One key spec: index 1, with read-only flags for the commands
        // that only read the lock.
        let specs = format!("{:?}", row[8]);
        assert!(specs.contains("index"), "{name}: key specs {specs}");
        let read_only = name == "REDLOCK.INSPECT" || name == "REDLOCK.WAIT";
        assert_eq!(
            specs.contains("\"RO\""),
            read_only,
            "{name}: key specs {specs}"
        );
    }
    for call in calls("lock:x") {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("GETKEYS").arg(&call);
        let keys: Vec<String> = cmd.query(&mut con).unwrap();
        assert_eq!(keys, ["lock:x"], "{call:?}");
    }

    let key = "lock:routed";
    let slot = cluster.slot_of(key.as_bytes());
    let home = cluster.shard_of_slot(slot);
    for shard in (0..3).filter(|&s| s != home) {
        let mut wrong = cluster.master(shard).connection();
        for call in calls(key) {
            let (kind, s, port) = redirect(cmd_of(&call).query(&mut wrong));
            assert_eq!(kind, MOVED, "{call:?}");
            assert_eq!(s, slot, "{call:?}");
            assert_eq!(port, cluster.master(home).port(), "{call:?}");
        }
    }
    let mut right = cluster.master(home).connection();
    assert_eq!(acquire(&mut right, key, "o", 1000), Some(1));
    assert_eq!(release(&mut right, key, "o"), 1);
}

/// Keys spread over every shard; each shard keeps its own counters.
#[test]
fn locks_spread_over_every_shard() {
    let cluster = Cluster::builder().shards(3).start();
    let mut per_shard = [0usize; 3];
    for i in 0..60 {
        let key = format!("spread:{i}");
        let shard = cluster.shard_of_slot(cluster.slot_of(key.as_bytes()));
        per_shard[shard] += 1;
        let mut con = cluster.master(shard).connection();
        assert_eq!(acquire(&mut con, &key, "a", 5_000), Some(1));
        assert_eq!(acquire(&mut con, &key, "b", 5_000), None);
        assert_eq!(release(&mut con, &key, "a"), 1);
        assert_eq!(acquire(&mut con, &key, "b", 5_000), Some(2));
    }
    assert!(per_shard.iter().all(|&n| n > 0), "{per_shard:?}");
    for (shard, &n) in per_shard.iter().enumerate() {
        let dbsize: usize = redis::cmd("DBSIZE")
            .query(&mut cluster.master(shard).connection())
            .unwrap();
        assert_eq!(dbsize, n, "shard {shard}");
    }
}

/// Resharding: a held lock moves with its slot (MIGRATE = DUMP/RESTORE):
/// same token, holder and lease on the new shard and on its replica, the
/// holder extends and releases there, another owner is refused meanwhile,
/// the next token is higher, and the old shard (and its replica) no longer
/// has it and answers `-MOVED`.
#[test]
fn a_held_lock_moves_with_its_slot() {
    let cluster = Cluster::builder().shards(3).replicas(1).start();
    let key = "moving";
    let slot = cluster.slot_of(key.as_bytes());
    let from = cluster.shard_of_slot(slot);
    let to = (from + 1) % 3;
    let mut src = cluster.master(from).connection();
    let floor = now_us();
    let token = acquire_floor(&mut src, key, "holder", 20_000, floor).unwrap();
    assert_eq!(token, floor);
    let before = inspect(&mut src, key).unwrap();
    let moved_at = Instant::now();

    cluster.migrate_slot(slot, to);

    let mut dst = cluster.master(to).connection();
    let after = inspect(&mut dst, key).expect("the lock moved");
    assert_same_lock(after, before, moved_at.elapsed(), "after the move");
    let (kind, s, port) = redirect(redis::cmd("REDLOCK.INSPECT").arg(key).query(&mut src));
    assert_eq!((kind, s, port), (MOVED, slot, cluster.master(to).port()));
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut src).unwrap();
    assert_eq!(dbsize, 0, "the source kept a copy");
    // The shards' replicas follow: RESTORE on the target, DEL on the source.
    wait_replicated(&mut dst);
    let mut dst_replica = cluster.replicas(to)[0].connection();
    let _: () = redis::cmd("READONLY").query(&mut dst_replica).unwrap();
    let on_replica = inspect(&mut dst_replica, key).expect("the target's replica has the lock");
    assert_same_lock(
        on_replica,
        before,
        moved_at.elapsed(),
        "on the target's replica",
    );
    wait_replicated(&mut src);
    let mut src_replica = cluster.replicas(from)[0].connection();
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut src_replica).unwrap();
    assert_eq!(dbsize, 0, "the source's replica kept a copy");

    assert_eq!(acquire(&mut dst, key, "other", 1_000), None);
    assert_eq!(
        acquire_floor(&mut dst, key, "holder", 20_000, 0),
        Some(token),
        "the holder's renewal is idempotent on the new shard"
    );
    assert_eq!(extend(&mut dst, key, "holder", 30_000), 1);
    let extended = inspect(&mut dst, key).unwrap();
    assert!(extended.pttl > 20_000, "{extended:?}");
    assert_eq!(fence(&mut dst, key, "other", None), None);
    assert_eq!(fence(&mut dst, key, "holder", None), Some(token));
    assert_eq!(release(&mut dst, key, "other"), 0);
    assert_eq!(release(&mut dst, key, "holder"), 1);
    let next = acquire(&mut dst, key, "other", 1_000).unwrap();
    assert!(next > token, "{next} after {token}");
}

/// In the middle of a slot move: the source answers `-ASK` for a lock it
/// already handed over and still serves the ones it has; the target serves
/// a moved lock to an `ASKING` client only, until the move ends.
#[test]
fn a_slot_in_the_middle_of_a_move_answers_ask() {
    let cluster = Cluster::builder().shards(3).start();
    let (moved, stays) = ("{tag}moved", "{tag}stays");
    let slot = cluster.slot_of(b"tag");
    let from = cluster.shard_of_slot(slot);
    let to = (from + 2) % 3;
    let mut src = cluster.master(from).connection();
    let t1 = acquire(&mut src, moved, "h1", 20_000).unwrap();
    let t2 = acquire(&mut src, stays, "h2", 20_000).unwrap();
    let before = inspect(&mut src, moved).unwrap();

    let migration = cluster.begin_migration(slot, to);
    // Move only the first key, by hand.
    let target_port = cluster.master(to).port();
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target_port)
        .arg(moved)
        .arg(0)
        .arg(5_000)
        .query(&mut src)
        .unwrap();
    let moved_at = Instant::now();

    for call in calls(moved) {
        if call[0] == "REDLOCK.APPLY" {
            continue;
        }
        let (kind, s, port) = redirect(cmd_of(&call).query(&mut src));
        assert_eq!((kind, s, port), (ASK, slot, target_port), "{call:?}");
    }
    // The source still serves the key it has.
    assert!(inspect(&mut src, stays).unwrap().held);
    assert_eq!(acquire(&mut src, stays, "x", 1_000), None);
    assert_eq!(extend(&mut src, stays, "h2", 20_000), 1);

    let mut dst = cluster.master(to).connection();
    let (kind, s, port) = redirect(redis::cmd("REDLOCK.INSPECT").arg(moved).query(&mut dst));
    assert_eq!((kind, s, port), (MOVED, slot, cluster.master(from).port()));
    let asking = |con: &mut redis::Connection, cmd: &mut redis::Cmd| -> redis::Value {
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").ignore().add_command(cmd.clone());
        let (v,): (redis::Value,) = pipe.query(con).unwrap();
        v
    };
    let view = asking(&mut dst, redis::cmd("REDLOCK.INSPECT").arg(moved));
    let fields: Vec<i64> = match view {
        redis::Value::Array(items) => items
            .iter()
            .skip(1)
            .step_by(2)
            .map(|v| redis::from_redis_value_ref(v).unwrap())
            .collect(),
        other => panic!("INSPECT: {other:?}"),
    };
    let elapsed = moved_at.elapsed();
    assert_same_lock(
        View {
            held: fields[0] == 1,
            pttl: fields[1],
            token: fields[2],
        },
        before,
        elapsed,
        "on the target, with ASKING",
    );
    let refused = asking(
        &mut dst,
        redis::cmd("REDLOCK.ACQUIRE").arg(moved).arg("x").arg(1_000),
    );
    assert_eq!(refused, redis::Value::Nil);
    let extended = asking(
        &mut dst,
        redis::cmd("REDLOCK.EXTEND")
            .arg(moved)
            .arg("h1")
            .arg(25_000),
    );
    assert_eq!(extended, redis::Value::Int(1));

    while cluster.migrate_keys(&migration, 10) > 0 {}
    cluster.finish_migration(&migration);
    assert_eq!(release(&mut dst, moved, "h1"), 1);
    assert_eq!(release(&mut dst, stays, "h2"), 1);
    assert!(acquire(&mut dst, moved, "x", 1_000).unwrap() > t1);
    assert!(acquire(&mut dst, stays, "x", 1_000).unwrap() > t2);
}

/// Sends `REDLOCK.WAIT key timeout` (after `ASKING` when `asking`) on a
/// connection of its own; the reply (or error) arrives on the channel.
fn wait_in_background(
    node: &Node,
    key: &str,
    timeout_ms: u64,
    asking: bool,
) -> mpsc::Receiver<redis::RedisResult<redis::Value>> {
    let mut con = node.connection();
    let key = key.to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut wait = redis::cmd("REDLOCK.WAIT");
        wait.arg(&key).arg(timeout_ms);
        let reply = if asking {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(wait);
            pipe.query::<(redis::Value,)>(&mut con).map(|(v,)| v)
        } else {
            wait.query(&mut con)
        };
        let _ = tx.send(reply);
    });
    rx
}

/// Waits until the node has `n` clients blocked in WAIT.
fn wait_for_waiters(con: &mut redis::Connection, n: u64) {
    wait_until(Duration::from_secs(10), "waiters blocked", || {
        redlock_info(con, "waiting_clients") == n
    });
}

/// A waiter on a lock whose key `MIGRATE` hands to another shard is
/// answered at once with `-TRYAGAIN` (not at its timeout, nor only when the
/// whole slot has moved); sent again, WAIT gets `-ASK` from the source and,
/// with `ASKING`, waits on the target, where the release wakes it. Waiters
/// on keys of the slot not moved yet keep waiting on the source. A `DEL`
/// under a waiter is answered the same way.
#[test]
fn a_waiter_on_a_key_that_moves_away_is_redirected() {
    let cluster = Cluster::builder().shards(3).start();
    let (key, stays) = ("{w}held", "{w}stays");
    let slot = cluster.slot_of(b"w");
    let from = cluster.shard_of_slot(slot);
    let to = (from + 1) % 3;
    let source = cluster.master(from);
    let target = cluster.master(to);
    let mut src = source.connection();
    acquire(&mut src, key, "h", 30_000).unwrap();
    acquire(&mut src, stays, "h2", 30_000).unwrap();
    let moving = wait_in_background(source, key, 30_000, false);
    let staying = wait_in_background(source, stays, 30_000, false);
    wait_for_waiters(&mut src, 2);

    let migration = cluster.begin_migration(slot, to);
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port())
        .arg(key)
        .arg(0)
        .arg(5_000)
        .query(&mut src)
        .unwrap();
    let err = moving
        .recv_timeout(Duration::from_secs(2))
        .expect("the waiter on the moved key is still blocked")
        .expect_err("the waiter on the moved key was answered");
    assert_eq!(err.code(), Some("TRYAGAIN"), "{err}");
    assert!(
        staying.try_recv().is_err(),
        "the waiter on a key still here was answered"
    );
    assert_eq!(redlock_info(&mut src, "waiting_clients"), 1);

    // Sent again: -ASK to the target, where it waits for the release.
    let (kind, s, port) = redirect(redis::cmd("REDLOCK.WAIT").arg(key).arg(100).query(&mut src));
    assert_eq!((kind, s, port), (ASK, slot, target.port()));
    let mut dst = target.connection();
    let on_target = wait_in_background(target, key, 30_000, true);
    wait_for_waiters(&mut dst, 1);
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING")
        .ignore()
        .cmd("REDLOCK.RELEASE")
        .arg(key)
        .arg("h");
    let (released,): (i64,) = pipe.query(&mut dst).unwrap();
    assert_eq!(released, 1);
    let woken = on_target
        .recv_timeout(Duration::from_secs(2))
        .expect("the waiter on the target was not woken");
    assert_eq!(woken.unwrap(), redis::Value::Int(1));

    // The rest of the slot moves: the last waiter is answered too.
    while cluster.migrate_keys(&migration, 10) > 0 {}
    let err = staying
        .recv_timeout(Duration::from_secs(2))
        .expect("the waiter on the second key is still blocked")
        .expect_err("the waiter on the second key was answered");
    assert_eq!(err.code(), Some("TRYAGAIN"), "{err}");
    cluster.finish_migration(&migration);
    assert_eq!(redlock_info(&mut src, "waiting_clients"), 0);
    assert_eq!(redlock_info(&mut dst, "waiting_clients"), 0);
    assert!(inspect(&mut dst, stays).unwrap().held);

    // A plain DEL under a waiter is answered the same way, and the retry
    // finds the lock free.
    let deleted = wait_in_background(target, stays, 30_000, false);
    wait_for_waiters(&mut dst, 1);
    let _: i64 = redis::cmd("DEL").arg(stays).query(&mut dst).unwrap();
    let err = deleted
        .recv_timeout(Duration::from_secs(2))
        .expect("the waiter on the deleted key is still blocked")
        .expect_err("the waiter on the deleted key was answered");
    assert_eq!(err.code(), Some("TRYAGAIN"), "{err}");
    let free: i64 = redis::cmd("REDLOCK.WAIT")
        .arg(stays)
        .arg(100)
        .query(&mut dst)
        .unwrap();
    assert_eq!(free, 1);
}

/// The guard window of [`guarded_cluster`], shorter than the leases so
/// that a test can wait it out while its locks are held.
const GRACE_MS: u64 = 1_500;
const LEASE_MS: u64 = 10_000;

/// Starts 3 shards with a replica each and the promotion guard on (the
/// load windows are waited out).
fn guarded_cluster() -> Cluster {
    let cluster = Cluster::builder()
        .shards(3)
        .replicas(1)
        .node(
            Node::builder()
                .config("redlock.restart-grace-ms", &GRACE_MS.to_string())
                .config("redlock.max-ttl-ms", &LEASE_MS.to_string())
                .config("repl-diskless-sync-delay", "0"),
        )
        .start();
    for shard in 0..3 {
        for node in cluster.shard_nodes(shard) {
            let mut con = node.connection();
            wait_until(Duration::from_secs(20), "load window end", || {
                redlock_info(&mut con, "grace_active") == 0
            });
        }
    }
    cluster
}

/// Checks the shard's new master after a failover: the locks are intact,
/// new grants wait out the promotion window, holders keep working.
fn check_promoted(cluster: &Cluster, shard: usize, locks: &[(String, View)], since: Instant) {
    let master = cluster.master(shard);
    let mut con = master.connection();
    for (key, before) in locks {
        let view = inspect(&mut con, key).expect("lock lost in the failover");
        assert_same_lock(view, *before, since.elapsed(), key);
    }
    let fresh = keys_on(cluster, shard, "fresh", 1).remove(0);
    let err = error_of(
        &mut con,
        &[b"REDLOCK.ACQUIRE", fresh.as_bytes(), b"n", b"1000"],
    );
    assert!(
        err.starts_with("GRACE node was promoted to master"),
        "{err}"
    );
    assert_eq!(
        info_field(&mut con, "redlock", "redlock_grace_reason").as_deref(),
        Some("promotion")
    );
    let (key, before) = &locks[0];
    assert_eq!(extend(&mut con, key, "holder", 10_000), 1);
    assert_eq!(fence(&mut con, key, "holder", None), Some(before.token));
    assert_eq!(release(&mut con, key, "holder"), 1);
}

/// Manual and automatic failover of a shard: the lock state replicated
/// with `REDLOCK.APPLY` is intact on the new master, the replication role
/// event opens the promotion guard, holders extend and release; the old
/// master, now a replica, answers its waiters at once.
#[test]
fn failovers_keep_the_locks_and_open_the_promotion_guard() {
    let mut cluster = guarded_cluster();
    let shard = 1;
    let keys = keys_on(&cluster, shard, "fo", 3);
    let mut m = cluster.master(shard).connection();
    let mut locks = Vec::new();
    for key in &keys {
        acquire_floor(&mut m, key, "holder", LEASE_MS, now_us()).unwrap();
    }
    wait_replicated(&mut m);
    for key in &keys {
        locks.push((key.clone(), inspect(&mut m, key).unwrap()));
    }
    let since = Instant::now();
    let old_master = cluster.master(shard);
    let waiter = wait_in_background(old_master, &keys[1], 30_000, false);
    wait_for_waiters(&mut m, 1);
    cluster.failover(shard);
    check_promoted(&cluster, shard, &locks, since);
    // Redis answers every client blocked on a master that becomes a
    // replica with `-UNBLOCKED` (before any module event runs), and closes
    // the connection.
    let reply = waiter
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiter on the demoted master is still blocked");
    let err = reply.expect_err("the demoted master answered the waiter");
    assert_eq!(err.code(), Some("UNBLOCKED"), "{err}");

    // Automatic failover: the master dies, its replica takes over.
    let mut m = cluster.master(shard).connection();
    wait_until(Duration::from_secs(10), "promotion window end", || {
        redlock_info(&mut m, "grace_active") == 0
    });
    let mut locks = Vec::new();
    for key in &keys[1..] {
        let token = acquire(&mut m, key, "holder", LEASE_MS).unwrap();
        assert!(token > 0);
    }
    wait_replicated(&mut m);
    for key in &keys[1..] {
        locks.push((key.clone(), inspect(&mut m, key).unwrap()));
    }
    let since = Instant::now();
    // A waiter on another, healthy shard.
    let elsewhere = keys_on(&cluster, 0, "elsewhere", 1).remove(0);
    let other = cluster.master(0);
    acquire(&mut other.connection(), &elsewhere, "h", LEASE_MS).unwrap();
    let bystander = wait_in_background(other, &elsewhere, 30_000, false);
    wait_for_waiters(&mut other.connection(), 1);
    cluster.kill_master(shard);
    check_promoted(&cluster, shard, &locks, since);
    // While a shard has no master the cluster is down (full coverage is
    // required by default), and Redis answers every blocked client of every
    // shard with `-CLUSTERDOWN`.
    let reply = bystander
        .recv_timeout(Duration::from_secs(1))
        .expect("the waiter on a healthy shard is still blocked");
    let err = reply.expect_err("the waiter was answered");
    assert_eq!(err.code(), Some("CLUSTERDOWN"), "{err}");
}

/// Each shard sweeps its own idle records (and its replica follows with the
/// deletes); replicas never sweep.
#[test]
fn each_shard_reclaims_its_own_records() {
    let cluster = Cluster::builder()
        .shards(3)
        .replicas(1)
        .node(
            Node::builder()
                .config("redlock.reclaim-after-ms", "1000")
                .config("redlock.max-ttl-ms", "500")
                .config("repl-diskless-sync-delay", "0"),
        )
        .start();
    let mut keys = Vec::new();
    for shard in 0..3 {
        let mut con = cluster.master(shard).connection();
        for key in keys_on(&cluster, shard, "idle", 5) {
            acquire_floor(&mut con, &key, "o", 500, now_us()).unwrap();
            assert_eq!(release(&mut con, &key, "o"), 1);
            keys.push((shard, key));
        }
        // Kept: its last grant had no FLOOR.
        let kept = keys_on(&cluster, shard, "kept", 1).remove(0);
        acquire(&mut con, &kept, "o", 500).unwrap();
        assert_eq!(release(&mut con, &kept, "o"), 1);
    }
    for shard in 0..3 {
        let mut con = cluster.master(shard).connection();
        wait_until(Duration::from_secs(15), "records reclaimed", || {
            redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap() == 1
        });
        assert_eq!(redlock_info(&mut con, "reclaimed"), 5, "shard {shard}");
        for replica in cluster.replicas(shard) {
            let mut r = replica.connection();
            wait_until(Duration::from_secs(5), "deletes replicated", || {
                redis::cmd("DBSIZE").query::<i64>(&mut r).unwrap() == 1
            });
            assert_eq!(redlock_info(&mut r, "reclaimed"), 0, "replica of {shard}");
        }
    }
}

/// A connection per node, following `-MOVED` (new home) and `-ASK` (one
/// `ASKING` call) as a cluster client does.
struct Router {
    cons: std::collections::HashMap<u16, redis::Connection>,
    home: u16,
    redirects: u64,
}

impl Router {
    fn new(home: u16) -> Router {
        Router {
            cons: Default::default(),
            home,
            redirects: 0,
        }
    }

    fn con(&mut self, port: u16) -> &mut redis::Connection {
        self.cons.entry(port).or_insert_with(|| {
            redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .unwrap()
                .get_connection()
                .unwrap()
        })
    }

    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> T {
        let mut ask: Option<u16> = None;
        for _ in 0..10 {
            let result = match ask.take() {
                None => {
                    let home = self.home;
                    cmd.query::<T>(self.con(home))
                }
                Some(port) => {
                    let mut pipe = redis::pipe();
                    pipe.cmd("ASKING").ignore().add_command(cmd.clone());
                    pipe.query::<(T,)>(self.con(port)).map(|(v,)| v)
                }
            };
            let err = match result {
                Ok(v) => return v,
                Err(e) => e,
            };
            let Some((addr, _)) = err.redirect_node() else {
                panic!("{:?}: {err}", cmd.args_iter().next());
            };
            let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
            self.redirects += 1;
            if err.kind() == MOVED {
                self.home = port;
            } else {
                ask = Some(port);
            }
        }
        panic!("more than 10 redirects");
    }
}

/// Resharding under load: workers contend for one lock (following
/// redirects) while its slot moves from shard to shard, key by key. Grants
/// stay exclusive, tokens only go up, holders always extend and release,
/// and no call fails with anything but a redirect.
#[test]
fn resharding_under_contention_keeps_locks_exclusive_and_tokens_increasing() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    let cluster = Cluster::builder().shards(3).start();
    let key = "{hot}lock";
    let slot = cluster.slot_of(b"hot");
    let mut shard = cluster.shard_of_slot(slot);
    {
        // Neighbours in the same slot, so that a move takes several steps
        // and the lock moves between two of them.
        let mut con = cluster.master(shard).connection();
        for i in 0..12 {
            let name = format!("{{hot}}filler:{i}");
            acquire(&mut con, &name, "f", 60_000).unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(Mutex::new(Vec::<i64>::new()));
    let redirects = Arc::new(AtomicU64::new(0));
    let home = cluster.master(shard).port();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (stop, held, grants, redirects) = (
                stop.clone(),
                held.clone(),
                grants.clone(),
                redirects.clone(),
            );
            std::thread::spawn(move || {
                let mut router = Router::new(home);
                let owner = format!("worker-{w}");
                while !stop.load(Ordering::Relaxed) {
                    let token: Option<i64> = router.query(
                        redis::cmd("REDLOCK.ACQUIRE")
                            .arg(key)
                            .arg(&owner)
                            .arg(10_000),
                    );
                    let Some(token) = token else {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    };
                    assert!(
                        !held.swap(true, Ordering::SeqCst),
                        "{owner} got {token} while another worker held the lock"
                    );
                    grants.lock().unwrap().push(token);
                    let extended: i64 = router.query(
                        redis::cmd("REDLOCK.EXTEND")
                            .arg(key)
                            .arg(&owner)
                            .arg(10_000),
                    );
                    assert_eq!(extended, 1, "{owner} could not extend {token}");
                    std::thread::sleep(Duration::from_millis(2));
                    held.store(false, Ordering::SeqCst);
                    let released: i64 =
                        router.query(redis::cmd("REDLOCK.RELEASE").arg(key).arg(&owner));
                    assert_eq!(released, 1, "{owner} could not release {token}");
                }
                redirects.fetch_add(router.redirects, Ordering::Relaxed);
            })
        })
        .collect();
    for round in 0..3 {
        let to = (shard + 1) % 3;
        let migration = cluster.begin_migration(slot, to);
        while cluster.migrate_keys(&migration, 2) > 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
        cluster.finish_migration(&migration);
        shard = to;
        std::thread::sleep(Duration::from_millis(100 + 50 * round));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a worker failed");
    }
    let grants = grants.lock().unwrap();
    assert!(grants.len() > 20, "only {} grants", grants.len());
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens went back or repeated: {grants:?}"
    );
    assert!(
        redirects.load(Ordering::Relaxed) > 0,
        "the workers never followed a redirect"
    );
    let mut con = cluster.master(shard).connection();
    let view = inspect(&mut con, key).unwrap();
    assert_eq!(view.token, *grants.last().unwrap());
}
