//! What a cluster member relies on from redis-rs's async cluster
//! connection (`client/src/cluster.rs`, "Ordering"), checked against a real
//! cluster with the same settings. The member does not rely on the
//! connection's ordering across retries (it sequences a lock's commands
//! itself); it relies on:
//!
//! 1. a command keyed by its first argument reaching the master of that
//!    key's slot, through `-ASK` while the slot moves and `-MOVED` once it
//!    moved, without an error reaching the caller;
//! 2. a command being finished once its reply is back: it is never sent
//!    again afterwards (so the next command of a sequence, sent after that
//!    reply, is the last to reach the shard).

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::Value;
use redlock_testkit::Cluster;

/// A cluster connection with the member's settings.
async fn connect(cluster: &Cluster) -> ClusterConnection {
    let timeout = Duration::from_secs(2);
    ClusterClientBuilder::new(cluster.seed_urls())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .overall_response_timeout(Some(timeout * 3))
        .retries(6)
        .min_retry_wait(5)
        .max_retry_wait(200)
        .build()
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("connect")
}

/// `RPUSH key value`, routed as the member routes a lock command.
async fn push(conn: &mut ClusterConnection, key: &str, value: &str) -> Value {
    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )));
    conn.route_command(redis::cmd("RPUSH").arg(key).arg(value).clone(), route)
        .await
        .expect("RPUSH through the cluster connection")
}

fn list_on(node: &redlock_testkit::Node, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut node.connection())
        .expect("LRANGE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_commands_follow_ask_and_moved_and_run_once() {
    let cluster = Cluster::builder().shards(3).start();
    let mut conn = connect(&cluster).await;
    let key = "contract:list";
    let slot = cluster.slot_of(key.as_bytes());
    let from = cluster.shard_of_slot(slot);
    let to = (from + 1) % 3;

    // 1: served by the slot's master.
    assert_eq!(push(&mut conn, key, "a").await, Value::Int(1));
    assert_eq!(list_on(cluster.master(from), key), ["a"]);

    // The slot moves: the key goes first, so the source answers -ASK.
    let migration = cluster.begin_migration(slot, to);
    assert_eq!(cluster.migrate_keys(&migration, 10), 1);
    assert_eq!(push(&mut conn, key, "b").await, Value::Int(2));
    // Once moved, the source answers -MOVED.
    cluster.finish_migration(&migration);
    assert_eq!(push(&mut conn, key, "c").await, Value::Int(3));
    assert_eq!(push(&mut conn, key, "d").await, Value::Int(4));

    // 2: each command ran once, in the order the replies came back, on the
    // new master; nothing is sent again later.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(list_on(cluster.master(to), key), ["a", "b", "c", "d"]);
    let left: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut cluster.master(from).connection())
        .expect("COUNTKEYSINSLOT");
    assert_eq!(left, 0, "nothing was written to the old master");
}
