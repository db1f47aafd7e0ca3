//! A dropped `try_acquire` / `acquire` leaves no grant (also when dropped
//! during the write-back FENCE round: DESIGN §6), and an extension to the
//! same ttl whose replies are lost does not cut the validity.

mod common;

use std::time::Duration;

use redlock_client::{Redlock, RetryPolicy};
use redlock_testkit::proxy::{Fault, FaultProxy};
use redlock_testkit::Node;

fn proxies(nodes: &[Node]) -> Vec<FaultProxy> {
    nodes
        .iter()
        .map(|n| FaultProxy::start(format!("127.0.0.1:{}", n.port()).parse().expect("addr")))
        .collect()
}

async fn through(proxies: &[FaultProxy], retry: RetryPolicy) -> Redlock {
    Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_secs(2))
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(retry)
        .build()
        .await
        .expect("build")
}

fn token(node: &Node, key: &str) -> u64 {
    let fields: Vec<redis::Value> = redis::cmd("REDLOCK.INSPECT")
        .arg(key)
        .query(&mut node.connection())
        .expect("INSPECT");
    let t: i64 = redis::from_redis_value(fields[5].clone()).expect("token");
    t as u64
}

/// Drops `acquire` (`which` = 0: try_acquire, 1: acquire with retries)
/// 250 ms into a round whose requests and replies are each delayed 150 ms.
async fn dropped_in_flight_leaves_no_grant(which: usize) {
    let nodes = common::five();
    let proxies = proxies(&nodes);
    let retry = RetryPolicy {
        attempts: 5,
        base_delay: Duration::from_millis(50),
        jitter: Duration::from_millis(10),
    };
    let a = through(&proxies, retry).await;
    let b = common::client(&nodes).await;
    for p in &proxies {
        p.set(Fault::Delay(Duration::from_millis(150)));
    }
    let key = format!("dropped:drop:{which}");
    let ttl = Duration::from_secs(5);
    let dropped = if which == 0 {
        tokio::time::timeout(Duration::from_millis(250), async {
            a.try_acquire(&key, ttl).await.map(|_| ())
        })
        .await
    } else {
        tokio::time::timeout(Duration::from_millis(250), async {
            a.acquire(&key, ttl).await.map(|_| ())
        })
        .await
    };
    assert!(
        dropped.is_err(),
        "dropped in flight, but the acquire returned first: {:?}",
        dropped
    );
    for p in &proxies {
        p.set(Fault::None);
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(nodes.iter().all(|n| token(n, &key) > 0), "the ACQUIREs ran");
    assert_eq!(common::held_on(&b, &key).await, 0, "path {which}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_try_acquire_leaves_no_grant() {
    dropped_in_flight_leaves_no_grant(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_no_grant() {
    dropped_in_flight_leaves_no_grant(1).await;
}

/// Node 0's counter is far ahead, so the attempt's token counts on one node
/// only and the write-back FENCEs the other four; the acquire is dropped
/// while those FENCEs are in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_during_the_write_back_leaves_no_grant() {
    let nodes = common::five();
    let proxies = proxies(&nodes);
    let a = through(&proxies, RetryPolicy::no_retry()).await;
    let b = common::client(&nodes).await;
    let key = "dropped:drop:fence";
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64;
    let ahead = now_us + 3_600_000_000;
    let mut c = nodes[0].connection();
    let granted: i64 = redis::cmd("REDLOCK.ACQUIRE")
        .arg(key)
        .arg("someone")
        .arg(1000)
        .arg("FLOOR")
        .arg(ahead)
        .query(&mut c)
        .expect("ACQUIRE");
    assert_eq!(granted as u64, ahead);
    let _: i64 = redis::cmd("REDLOCK.RELEASE")
        .arg(key)
        .arg("someone")
        .query(&mut c)
        .expect("RELEASE");
    // Node 0's reply (the token far ahead) comes first, at about 100 ms:
    // had three of the others answered before it, their equal tokens would
    // have made a quorum without the write-back (seen on a loaded machine).
    proxies[0].set(Fault::Delay(Duration::from_millis(50)));
    for p in &proxies[1..] {
        p.set(Fault::Delay(Duration::from_millis(150)));
    }
    // The other ACQUIRE replies arrive at about 300 ms, the FENCEs reach the
    // nodes at about 450 ms and their replies would come back at about
    // 600 ms.
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        a.acquire(key, Duration::from_secs(5)),
    )
    .await;
    assert!(
        dropped.is_err(),
        "dropped in flight, but the acquire returned first: {:?}",
        dropped.map(|r| r.map(|lock| (lock.token(), lock.validity())))
    );
    for p in &proxies {
        p.set(Fault::None);
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The FENCEs were sent (the attempt was in its write-back round when it
    // was dropped): a quorum has the write-back's token.
    let fenced = nodes.iter().filter(|n| token(n, key) == ahead + 1).count();
    assert!(fenced >= 3, "the write-back reached {fenced} nodes");
    assert_eq!(common::held_on(&b, key).await, 0);
}

/// An extension to the same ttl whose replies are lost leaves the validity
/// as it was (the nodes' leases only got longer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_same_ttl_extend_keeps_the_validity() {
    let nodes = common::five();
    let proxies = proxies(&nodes);
    let a = Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(common::NODE_TIMEOUT)
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build");
    let ttl = Duration::from_secs(10);
    let mut lock = a.acquire("dropped:same", ttl).await.expect("acquire");
    let before = lock.deadline_probe();
    for p in &proxies[..3] {
        p.set(Fault::DropReplies);
    }
    lock.extend(ttl).await.expect_err("three replies are lost");
    let after = lock.deadline_probe();
    assert!(
        after + Duration::from_millis(1) >= before,
        "the validity was cut by {:?}",
        before - after
    );
    for p in &proxies[..3] {
        p.set(Fault::None);
    }
}

trait Probe {
    /// When the validity ends, on the monotonic clock.
    fn deadline_probe(&self) -> std::time::Instant;
}

impl Probe for redlock_client::Lock {
    fn deadline_probe(&self) -> std::time::Instant {
        std::time::Instant::now() + self.validity()
    }
}
