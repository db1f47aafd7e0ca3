//! Leader election on real nodes: one leader at a time with epochs that only
//! grow (also while a node is paused), a leader cut off past its lease is
//! deposed and fenced out by its epoch, a deposed leader's proclaim is
//! refused, and `observe` reports every change in order.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client, five, Frozen};
use redlock_client::{Error, Leader, Redlock};
use redlock_testkit::Node;

/// A connection to a resource server (a node with the module, not one of
/// the lock's nodes).
async fn resource(node: &Node) -> redis::aio::MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn append(epoch: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("RPUSH");
    cmd.arg("{jobs}:log").arg(epoch);
    cmd
}

/// Waits (up to `within`) until `f` returns `Some`.
async fn eventually<T, F, Fut>(within: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Four candidates (each its own client) campaign in turn for twelve terms
/// while node 0 is paused for a stretch in the middle: never two leaders at
/// once, each leader's fenced write is accepted, and the epochs in the
/// order the terms happened strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_epochs_that_only_grow() {
    let nodes = five();
    let res = Node::start();
    let terms_wanted = 12;
    let leading = Arc::new(AtomicUsize::new(0));
    let terms: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut candidates = Vec::new();
    for _ in 0..4 {
        let redlock = client(&nodes).await;
        let mut con = resource(&res).await;
        let (leading, terms) = (Arc::clone(&leading), Arc::clone(&terms));
        candidates.push(tokio::spawn(async move {
            let election = redlock.election("jobs");
            loop {
                if terms.lock().unwrap().len() >= terms_wanted {
                    return;
                }
                let leadership = tokio::time::timeout(
                    Duration::from_secs(30),
                    election.campaign(Duration::from_secs(2)),
                )
                .await
                .expect("a campaign never ended")
                .expect("campaign");
                let before = leading.fetch_add(1, Ordering::SeqCst);
                assert_eq!(before, 0, "two leaders at once");
                let written: i64 = leadership
                    .info()
                    .fenced(&mut con, "{jobs}:fence", &append(leadership.epoch()))
                    .await
                    .expect("the leader's fenced write");
                assert!(written >= 1);
                terms.lock().unwrap().push(leadership.epoch());
                tokio::time::sleep(Duration::from_millis(30)).await;
                assert!(!leadership.is_lost());
                leading.fetch_sub(1, Ordering::SeqCst);
                leadership.resign().await;
            }
        }));
    }
    // Node 0 pauses after the third term and resumes after the ninth.
    let wait_terms = |n: usize| {
        let terms = Arc::clone(&terms);
        async move {
            eventually(Duration::from_secs(60), || {
                let done = terms.lock().unwrap().len() >= n;
                async move { done.then_some(()) }
            })
            .await
            .expect("the terms stopped coming")
        }
    };
    wait_terms(3).await;
    nodes[0].pause();
    wait_terms(9).await;
    nodes[0].resume();
    for c in candidates {
        c.await.expect("a candidate failed");
    }
    let terms = terms.lock().unwrap().clone();
    assert!(terms.len() >= terms_wanted);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "epochs did not strictly increase: {terms:?}"
    );
    // The resource saw every term's write, in the same order.
    let mut con = resource(&res).await;
    let log: Vec<u64> = redis::cmd("LRANGE")
        .arg("{jobs}:log")
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(log, terms);
}

/// A leader whose nodes freeze past its lease gets the lost signal; the next
/// candidate leads with a higher epoch once they resume, and after its
/// fenced write the deposed leader's write with its epoch is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_past_its_lease_loses_and_is_fenced_out() {
    let nodes = five();
    let res = Node::start();
    let (a, b) = (client(&nodes).await, client(&nodes).await);
    let ttl = Duration::from_millis(1500);
    let old = a.election("cron").campaign(ttl).await.unwrap();
    let mut con_a = resource(&res).await;
    let _: i64 = old
        .info()
        .fenced(&mut con_a, "{jobs}:fence", &append(old.epoch()))
        .await
        .unwrap();

    let frozen = Frozen::new(&nodes[..3]);
    tokio::time::timeout(Duration::from_secs(10), old.lost())
        .await
        .expect("the lost signal never fired");
    assert!(old.is_lost());
    drop(frozen);

    let new = tokio::time::timeout(Duration::from_secs(10), b.election("cron").campaign(ttl))
        .await
        .expect("the next candidate never led")
        .unwrap();
    assert!(new.epoch() > old.epoch());
    let mut con_b = resource(&res).await;
    let _: i64 = new
        .info()
        .fenced(&mut con_b, "{jobs}:fence", &append(new.epoch()))
        .await
        .unwrap();
    let late = old
        .info()
        .fenced::<i64>(&mut con_a, "{jobs}:fence", &append(old.epoch()))
        .await;
    match late {
        Err(Error::Stale { token, highest, .. }) => {
            assert_eq!((token, highest), (old.epoch(), new.epoch()))
        }
        other => panic!("the deposed leader's write was not refused: {other:?}"),
    }
    // Its proclaim is refused too (locally: it knows it lost).
    assert!(matches!(old.proclaim("old").await, Err(Error::Lost { .. })));
    new.resign().await;
}

/// Releases `owner`'s hold on `key` on every node behind the holder's back
/// (as a partition and a lease end would), so that the holder does not know
/// yet that it was deposed.
fn depose(nodes: &[Node], key: &str, owner: &str) {
    for node in nodes {
        let released: i64 = redis::cmd("REDLOCK.RELEASE")
            .arg(key)
            .arg(owner)
            .query(&mut node.connection())
            .unwrap();
        assert_eq!(released, 1);
    }
}

/// A deposed leader that does not know it yet proclaims after the next
/// leader led: the nodes refuse it (the new epoch was shown to the value's
/// guard when the new leader won), and readers see only the new leader's
/// value; a value the old leader left under its own epoch is never shown
/// for the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_proclaim_is_refused() {
    let nodes = five();
    let (a, b) = (client(&nodes).await, client(&nodes).await);
    let ttl = Duration::from_secs(30);
    let old = a.election("api").campaign(ttl).await.unwrap();
    old.proclaim("http://old").await.unwrap();
    let leader = a.election("api").leader().await.unwrap().expect("a leader");
    assert_eq!(leader.epoch, old.epoch());
    assert_eq!(leader.value.as_deref(), Some("http://old"));
    assert!(leader.time_left > Duration::from_secs(20));

    depose(&nodes, "api", old.info().owner());
    assert_eq!(b.election("api").leader().await.unwrap(), None);
    let new = b.election("api").campaign(ttl).await.unwrap();
    assert!(new.epoch() > old.epoch());
    // The old value stays on the nodes but is not the new leader's.
    let leader = b.election("api").leader().await.unwrap().expect("a leader");
    assert_eq!((leader.epoch, leader.value), (new.epoch(), None));

    assert!(!old.is_lost(), "the old leader should not know yet");
    match old.proclaim("http://late").await {
        Err(Error::Stale { token, highest, .. }) => {
            assert_eq!((token, highest), (old.epoch(), new.epoch()))
        }
        other => panic!("the deposed leader's proclaim was not refused: {other:?}"),
    }
    new.proclaim("http://new").await.unwrap();
    let leader = a.election("api").leader().await.unwrap().expect("a leader");
    assert_eq!(leader.value.as_deref(), Some("http://new"));
    new.resign().await;
    assert_eq!(a.election("api").leader().await.unwrap(), None);
}

/// Collects an observer's reports into a channel.
fn observe(redlock: &Redlock, name: &str) -> tokio::sync::mpsc::UnboundedReceiver<Leader> {
    let mut observer = redlock.election(name).observe();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(change) = observer.next().await {
            // A read that too few nodes answered is tried again.
            let Ok(leader) = change else { continue };
            if tx.send(leader).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next leader the observer reports.
async fn next_leader(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Leader>) -> Leader {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no change reported")
        .expect("the observer stopped")
}

/// `observe` reports every change in order: a leader, its proclaimed value,
/// the next leader after a resign, its value; and the next leader is seen
/// soon after the resign (latencies printed, a generous bound asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_sees_each_change_in_order() {
    let nodes = five();
    let watcher = client(&nodes).await;
    let mut rx = observe(&watcher, "feed");
    let candidates = [client(&nodes).await, client(&nodes).await];
    let ttl = Duration::from_secs(10);
    let mut current = candidates[0].election("feed").campaign(ttl).await.unwrap();
    let mut epochs = Vec::new();
    let mut latencies = Vec::new();
    let mut resigned_at: Option<Instant> = None;
    for round in 0..5 {
        let leader = next_leader(&mut rx).await;
        if let Some(at) = resigned_at.take() {
            latencies.push(at.elapsed());
        }
        assert_eq!((leader.epoch, leader.value), (current.epoch(), None));
        let value = format!("term {round}");
        current.proclaim(&value).await.unwrap();
        let leader = next_leader(&mut rx).await;
        assert_eq!(
            (leader.epoch, leader.value.as_deref()),
            (current.epoch(), Some(value.as_str()))
        );
        epochs.push(current.epoch());
        // The other candidate queues, then the leader resigns.
        let next = candidates[(round + 1) % 2].election("feed");
        let waiting = tokio::spawn(async move { next.campaign(ttl).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        resigned_at = Some(Instant::now());
        current.resign().await;
        current = waiting.await.unwrap().unwrap();
    }
    let leader = next_leader(&mut rx).await;
    latencies.push(resigned_at.unwrap().elapsed());
    assert_eq!((leader.epoch, leader.value), (current.epoch(), None));
    epochs.push(current.epoch());
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs out of order: {epochs:?}"
    );
    current.resign().await;
    latencies.sort();
    println!(
        "observe: resign -> next leader reported: median {:?}, max {:?} over {} hand-offs",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
        latencies.len()
    );
    // A generous bound: timing claims belong in benchmarks.
    assert!(
        latencies.iter().all(|l| *l < Duration::from_secs(3)),
        "{latencies:?}"
    );
}
