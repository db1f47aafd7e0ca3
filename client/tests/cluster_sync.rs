//! The replica-sync check on cluster members (DESIGN §13, issue 37 item 4):
//! a lock write and its `WAIT` go together to the master of the key's slot,
//! so a grant counts only when every replica of that shard has it, and a
//! manual failover of the shard keeps the lock and grants at once.

use std::time::{Duration, Instant};

use redlock_client::{Member, Redlock, RetryPolicy};
use redlock_testkit::Cluster;

fn cluster() -> Cluster {
    Cluster::builder()
        .shards(2)
        .replicas(1)
        .config("redlock.sync-replicas", "1")
        .start()
}

async fn client(cluster: &Cluster) -> Redlock {
    Redlock::builder([Member::cluster(cluster.seed_urls())])
        .node_timeout(Duration::from_millis(500))
        .sync_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .unwrap()
}

fn held(node: &redlock_testkit::Node, key: &str) -> bool {
    let mut con = node.connection();
    // Replicas of a cluster serve reads to a connection that asks.
    let _: () = redis::cmd("READONLY").query(&mut con).unwrap();
    let reply: Option<Vec<redis::Value>> = redis::cmd("REDLOCK.INSPECT")
        .arg(key)
        .query(&mut con)
        .unwrap();
    reply.is_some_and(|f| f[1] == redis::Value::Int(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_waits_for_the_replicas_of_the_keys_shard() {
    let cluster = cluster();
    let c = client(&cluster).await;
    let key = "sync:job";
    let shard = cluster.shard_of_slot(cluster.slot_of(key.as_bytes()));
    let mut lock = c.acquire(key, Duration::from_secs(30)).await.unwrap();
    for r in cluster.replicas(shard) {
        assert!(held(r, key), "the shard's replica lacks the grant");
    }
    assert!(
        c.try_acquire(key, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none(),
        "the held lock was granted again"
    );
    // The shard's replica frozen: a grant there does not count and is
    // released.
    let same_shard_key = (0..1000)
        .map(|i| format!("sync:k{i}"))
        .find(|k| cluster.shard_of_slot(cluster.slot_of(k.as_bytes())) == shard)
        .unwrap();
    let replica = cluster.replicas(shard)[0];
    replica.pause();
    let frozen = c.acquire(&same_shard_key, Duration::from_secs(5)).await;
    replica.resume();
    let text = frozen.unwrap_err().to_string();
    assert!(
        text.contains("replica-sync check failed: 0 of the 1 replicas"),
        "{text}"
    );
    assert!(!held(cluster.master(shard), &same_shard_key));

    // A manual failover of the shard: the promoted replica grants at once
    // and the holder extends there.
    cluster.wait_stable();
    let before = Instant::now();
    cluster.failover(shard);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match lock.extend(Duration::from_secs(30)).await {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut cluster.master(shard).connection())
        .unwrap();
    assert!(info.contains("redlock_sync_last_promotion:1"), "{info}");
    let fresh = loop {
        match c.acquire(&same_shard_key, Duration::from_secs(5)).await {
            Ok(l) => break l,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(before.elapsed() < Duration::from_secs(20));
    fresh.release().await.unwrap();
    lock.release().await.unwrap();
}
