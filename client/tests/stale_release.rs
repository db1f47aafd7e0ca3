//! A failed attempt's RELEASE that reaches a member late, after the next
//! attempt of the same call took the lock there, must not free that
//! attempt's grant: every attempt uses an owner id of its own
//! (`client/src/redlock.rs`, `Redlock::acquire`).
//!
//! How a RELEASE comes late: a member's connection breaks while the RELEASE
//! is still on its way (in a proxy or load balancer, or a retransmission
//! in flight), the client reconnects and retries on a new connection (a
//! cluster member's connection even sends the RELEASE again there), and
//! the first copy is delivered afterwards. The fault proxy plays that on
//! cue: it holds the requests of the member's connection while the first
//! attempts fail, cuts that connection off from the client, and delivers
//! what it held once a later attempt got the lock over a new connection.

mod common;

use std::time::{Duration, Instant};

use redlock_client::{Lock, Member, Redlock, RetryPolicy};
use redlock_testkit::proxy::FaultProxy;
use redlock_testkit::{Cluster, Node};

/// The round's bound on each member: short, so that held attempts fail
/// quickly.
const ROUND_TIMEOUT: Duration = Duration::from_millis(100);

/// Which acquire path takes the lock.
#[derive(Clone, Copy, Debug)]
enum Path {
    Acquire,
    AcquireWait,
}

/// Many quick attempts: the first ones fail while the proxy holds them.
fn patient() -> RetryPolicy {
    RetryPolicy {
        attempts: 1000,
        base_delay: Duration::from_millis(20),
        jitter: Duration::from_millis(10),
    }
}

fn proxy_to(port: u16) -> FaultProxy {
    FaultProxy::start(format!("127.0.0.1:{port}").parse().expect("address"))
}

/// `calls` of `REDLOCK.<command>` on the node so far (`INFO commandstats`).
fn calls(node: &Node, command: &str) -> usize {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut node.connection())
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_redlock.{command}:calls=");
    info.lines()
        .find(|l| l.to_ascii_lowercase().starts_with(&prefix))
        .and_then(|l| l[prefix.len()..].split(',').next())
        .map_or(0, |n| n.parse().expect("calls"))
}

/// (held, token) of `key` on the node.
fn inspect(node: &Node, key: &str) -> (bool, u64) {
    let fields: Vec<redis::Value> = redis::cmd("REDLOCK.INSPECT")
        .arg(key)
        .query(&mut node.connection())
        .expect("INSPECT");
    let int = |i: usize| -> i64 { redis::from_redis_value(fields[i].clone()).expect("integer") };
    (int(1) == 1, int(5) as u64)
}

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
        .count()
}

/// Plays the late RELEASE against the one member behind `proxy`, served by
/// `node`, and checks that the lock the client got is still held by it.
async fn late_release_of_an_earlier_attempt(
    redlock: Redlock,
    proxy: &FaultProxy,
    node: &Node,
    key: &str,
    path: Path,
) {
    let ttl = Duration::from_secs(30);
    // Every request of the client's connection is held from now on: the
    // first attempts time out, and each is released.
    proxy.hold_requests();
    let client = redlock.clone();
    let owned_key = key.to_string();
    let taking = tokio::spawn(async move {
        match path {
            Path::Acquire => client.acquire(&owned_key, ttl).await,
            Path::AcquireWait => {
                client
                    .acquire_wait(&owned_key, ttl, Duration::from_secs(60))
                    .await
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&proxy.held_requests(), "REDLOCK.RELEASE") == 0 {
        assert!(
            Instant::now() < deadline,
            "{path:?}: no RELEASE of a failed attempt reached the proxy"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The connection breaks with that RELEASE still on its way; the client
    // reconnects, and a later attempt takes the lock.
    proxy.cut_clients();
    let mut lock: Lock = tokio::time::timeout(Duration::from_secs(30), taking)
        .await
        .expect("the lock is taken once the connection is back")
        .expect("task")
        .expect("acquired");
    assert_eq!(inspect(node, key), (true, lock.token()), "{path:?}");
    // Now the held requests arrive: the failed attempts' ACQUIREs and
    // RELEASEs, after the grant of the attempt that won.
    let stale = proxy.held_requests();
    let (acquires, releases) = (
        count(&stale, "REDLOCK.ACQUIRE"),
        count(&stale, "REDLOCK.RELEASE"),
    );
    assert!(
        releases >= 1,
        "{path:?}: {}",
        String::from_utf8_lossy(&stale)
    );
    let (acquired_before, released_before) = (calls(node, "acquire"), calls(node, "release"));
    proxy.deliver_held();
    let deadline = Instant::now() + Duration::from_secs(10);
    while calls(node, "acquire") < acquired_before + acquires
        || calls(node, "release") < released_before + releases
    {
        assert!(
            Instant::now() < deadline,
            "{path:?}: the held requests never reached the node"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        inspect(node, key),
        (true, lock.token()),
        "{path:?}: a late RELEASE ({releases}) or ACQUIRE ({acquires}) of an earlier attempt \
         changed the lock the client holds"
    );
    // The client's own view agrees: the lock is still its own.
    lock.extend(ttl).await.expect("still held: extend");
    assert!(lock.release().await.expect("release"), "{path:?}");
    assert!(!inspect(node, key).0);
}

/// A single node: its connection gives no retry of its own, but a RELEASE
/// written just before the connection broke can still arrive after the
/// next attempt's ACQUIRE on the new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_cannot_free_a_later_attempt_on_a_node() {
    let node = Node::start();
    for (i, path) in [Path::Acquire, Path::AcquireWait].into_iter().enumerate() {
        let proxy = proxy_to(node.port());
        let redlock = Redlock::builder([proxy.url()])
            .node_timeout(ROUND_TIMEOUT)
            .connect_timeout(common::CONNECT_TIMEOUT)
            .retry(patient())
            .build()
            .await
            .expect("build");
        late_release_of_an_earlier_attempt(redlock, &proxy, &node, &format!("node:{i}"), path)
            .await;
    }
}

/// A cluster member: the cluster connection retries a RELEASE on a new
/// connection after the old one broke, and the member sequences a lock's
/// commands per (key, owner) only, so the next attempt's ACQUIRE follows
/// the retried copy, not the first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_cannot_free_a_later_attempt_on_a_cluster_member() {
    let cluster = Cluster::builder().shards(1).start();
    let master = cluster.master(0);
    for (i, path) in [Path::Acquire, Path::AcquireWait].into_iter().enumerate() {
        let proxy = proxy_to(master.port());
        // The shard announces the proxy, so that every connection of the
        // client to it goes through the proxy.
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(proxy.addr().port())
            .query(&mut master.connection())
            .expect("CONFIG SET cluster-announce-port");
        let redlock = Redlock::builder([Member::cluster([proxy.url()])])
            .node_timeout(ROUND_TIMEOUT)
            .connect_timeout(Duration::from_millis(500))
            .retry(patient())
            .build()
            .await
            .expect("build");
        late_release_of_an_earlier_attempt(redlock, &proxy, master, &format!("cluster:{i}"), path)
            .await;
    }
}
