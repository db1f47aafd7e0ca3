//! What `LockInfo::validity` reports after an extension that failed and
//! after a release (seen through `Lock::info` or a `LockGuard`), and what a
//! dropped `acquire_wait` leaves on the nodes. Each test plays the sequence
//! on five real nodes while another client takes the lock (DESIGN §4, §6).
//! Each failed before the fixes (found by an adversarial read).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_client::{Error, Redlock, RetryPolicy};
use redlock_testkit::proxy::{Fault, FaultProxy};
use redlock_testkit::Node;

/// A failed `Lock::extend` to a shorter lease: the nodes ran the EXTEND (the
/// lease there is now `ttl` from the extend), so the client's validity must
/// not outlast it once another client has taken the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_shorter_extend_cuts_the_validity() {
    let nodes = common::five();
    let a = common::client(&nodes).await;
    let b = common::client(&nodes).await;
    let mut lock = a
        .acquire("validity:extend", Duration::from_secs(10))
        .await
        .expect("acquire");
    // 1 ms: the nodes accept it, the client cannot use it (below the 2 ms
    // fixed margin), so extend fails with ExpiredBeforeUse after the nodes
    // applied it.
    let err = lock
        .extend(Duration::from_millis(1))
        .await
        .expect_err("1 ms is never usable");
    assert!(matches!(err, Error::ExpiredBeforeUse { .. }), "{err}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let other = b
        .try_acquire("validity:extend", Duration::from_secs(10))
        .await
        .expect("try_acquire")
        .expect("the nodes' leases ended 1 ms after the extend: free");
    assert!(other.token() > lock.token());
    // Two holders now. The first must not report validity past the lease
    // the nodes hold for it (which has ended).
    assert_eq!(
        lock.validity(),
        Duration::ZERO,
        "lock A reports {:?} of validity while B holds the lock with token {} > {}",
        lock.validity(),
        other.token(),
        lock.token()
    );
}

/// The same through an extension whose replies are lost (NoQuorum): the
/// EXTEND ran on every node, shortening the lease there, the client timed
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_shorter_extend_cuts_the_validity() {
    let nodes = common::five();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|n| FaultProxy::start(format!("127.0.0.1:{}", n.port()).parse().expect("addr")))
        .collect();
    let a = Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(common::NODE_TIMEOUT)
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build");
    let b = common::client(&nodes).await;
    let mut lock = a
        .acquire("validity:extend2", Duration::from_secs(10))
        .await
        .expect("acquire");
    // Three members lose their replies: the EXTEND runs there, the client
    // times out.
    for p in &proxies[..3] {
        p.set(Fault::DropReplies);
    }
    let err = lock
        .extend(Duration::from_millis(200))
        .await
        .expect_err("three replies are lost");
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    for p in &proxies[..3] {
        p.set(Fault::None);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = b
        .try_acquire("validity:extend2", Duration::from_secs(10))
        .await
        .expect("try_acquire")
        .expect("the nodes' 200 ms leases ended: free");
    assert!(other.token() > lock.token());
    assert_eq!(
        lock.validity(),
        Duration::ZERO,
        "lock A reports {:?} of validity while B holds the lock with token {} > {}",
        lock.validity(),
        other.token(),
        lock.token()
    );
}

/// `Lock::info` (for code that uses the lock from another task): the shared
/// `LockInfo` outlives the release and must report no validity while
/// another client holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_info_reports_no_validity_after_the_release() {
    let nodes = common::five();
    let a = common::client(&nodes).await;
    let b = common::client(&nodes).await;
    let lock = a
        .acquire("validity:info", Duration::from_secs(10))
        .await
        .expect("acquire");
    let info = Arc::clone(lock.info());
    assert!(lock.release().await.expect("release"));
    let other = b
        .try_acquire("validity:info", Duration::from_secs(10))
        .await
        .expect("try_acquire")
        .expect("released: free");
    assert!(other.token() > info.token());
    assert_eq!(
        info.validity(),
        Duration::ZERO,
        "the released lock's info reports {:?} of validity while B holds token {}",
        info.validity(),
        other.token()
    );
}

/// DESIGN §6: "Dropping the future leaves no grant behind." An
/// `acquire_wait` dropped while its ACQUIRE round is in flight (the
/// commands reached the nodes, the replies did not reach the client yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_wait_leaves_no_grant() {
    let nodes = common::five();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|n| FaultProxy::start(format!("127.0.0.1:{}", n.port()).parse().expect("addr")))
        .collect();
    let a = Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_secs(2))
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build");
    let b = common::client(&nodes).await;
    for p in &proxies {
        p.set(Fault::Delay(Duration::from_millis(150)));
    }
    // Requests arrive after 150 ms, replies after 300 ms: drop at 250 ms.
    let dropped = tokio::time::timeout(
        Duration::from_millis(250),
        a.acquire_wait(
            "validity:drop",
            Duration::from_secs(5),
            Duration::from_secs(5),
        ),
    )
    .await;
    assert!(dropped.is_err(), "the wait was dropped in flight");
    for p in &proxies {
        p.set(Fault::None);
    }
    // Give a background release (if any) time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = common::held_on(&b, "validity:drop").await;
    assert_eq!(
        held, 0,
        "a dropped acquire_wait left its grant on {held} nodes (lease 5 s, nobody holds it)"
    );
}

/// The same through a [`redlock_client::LockGuard`] (public and `Clone`)
/// kept past `with_lock`: the lock is released when the work returns, and
/// the guard reports no validity while another client holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_guard_kept_past_with_lock_reports_no_validity() {
    let nodes = common::five();
    let a = common::client(&nodes).await;
    let b = common::client(&nodes).await;
    let guard = a
        .with_lock(
            "validity:guard",
            Duration::from_secs(10),
            |guard| async move { guard },
        )
        .await
        .expect("with_lock");
    let other = b
        .try_acquire("validity:guard", Duration::from_secs(10))
        .await
        .expect("try_acquire")
        .expect("released when the work returned: free");
    assert!(other.token() > guard.token());
    assert!(
        guard.is_lost() || guard.validity() == Duration::ZERO,
        "the guard reports lost={} and {:?} of validity while B holds token {}",
        guard.is_lost(),
        guard.validity(),
        other.token()
    );
}

/// `pttl` of `key` on the node (-1 when not held, or when the node has no
/// record: a loaded machine can make the acquisition miss one node).
fn pttl(node: &Node, key: &str) -> i64 {
    let fields: Vec<redis::Value> = redis::cmd("REDLOCK.INSPECT")
        .arg(key)
        .query(&mut node.connection())
        .expect("INSPECT");
    match fields.get(3) {
        Some(v) => redis::from_redis_value::<Option<i64>>(v.clone())
            .expect("pttl")
            .unwrap_or(-1),
        None => -1,
    }
}

/// A later extension counts its validity with the shortest lease sent so
/// far: a failed shorter extension's EXTEND can reach nodes late, over a
/// successful longer one sent on new connections (the late delivery of
/// `stale_release.rs`, for EXTEND).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_shorter_extend_bounds_the_later_extensions() {
    let nodes = common::five();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|n| FaultProxy::start(format!("127.0.0.1:{}", n.port()).parse().expect("addr")))
        .collect();
    let a = Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(common::NODE_TIMEOUT)
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build");
    let b = common::client(&nodes).await;
    let key = "validity:late-extend";
    let mut lock = a
        .acquire(key, Duration::from_secs(30))
        .await
        .expect("acquire");

    // 1. A shorter extend whose requests are held on three members: it
    //    fails (NoQuorum); the fix cuts the validity to the 500 ms lease.
    for p in &proxies[..3] {
        p.hold_requests();
    }
    lock.extend(Duration::from_millis(500))
        .await
        .expect_err("three members hold the EXTEND");
    assert!(lock.validity() <= Duration::from_millis(500));

    // 2. Those connections break with the EXTEND still on its way; the
    //    client reconnects and extends to 30 s again, successfully.
    for p in &proxies[..3] {
        p.cut_clients();
    }
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match lock.extend(Duration::from_secs(30)).await {
            Ok(()) => break,
            Err(e) => {
                assert!(Instant::now() < until, "never extended again: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // Extended, but counted with the failed 500 ms extension's lease, whose
    // EXTEND is still on its way.
    assert!(lock.validity() <= Duration::from_millis(500));
    // A quorum took the 30 s lease. A member whose 500 ms EXTEND was not
    // held (the client had opened a connection after `hold_requests`, as a
    // loaded machine may make it) let that lease run out and then refused
    // the 30 s one: it holds nothing, which step 4 needs as much.
    let holding = nodes.iter().filter(|n| pttl(n, key) > 20_000).count();
    assert!(holding >= 3, "{holding} nodes hold the 30 s lease");
    for (i, n) in nodes[..3].iter().enumerate() {
        let left = pttl(n, key);
        assert!(
            !(0..=20_000).contains(&left),
            "node {i} holds neither the 30 s lease nor nothing: PTTL {left}"
        );
    }

    // 3. The held EXTEND arrives now: three nodes hold a 500 ms lease.
    for p in &proxies[..3] {
        p.deliver_held();
    }
    let until = Instant::now() + Duration::from_secs(10);
    while nodes[..3].iter().any(|n| pttl(n, key) > 1_000) {
        assert!(Instant::now() < until, "the held EXTEND never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;

    // 4. Another client takes the lock on those three nodes.
    let other = b
        .try_acquire(key, Duration::from_secs(10))
        .await
        .expect("try_acquire")
        .expect("free on three of five nodes");
    assert!(other.token() > lock.token());
    assert_eq!(
        lock.validity(),
        Duration::ZERO,
        "lock A reports {:?} of validity (its last extend succeeded) while B holds \
         the lock with token {} > {}",
        lock.validity(),
        other.token(),
        lock.token()
    );
}

/// A failed extension to the same ttl bounds nothing for good: the next
/// successful one counts the whole lease from its own start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_extension_does_not_cap_the_next_ones_for_good() {
    let nodes = common::five();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|n| FaultProxy::start(format!("127.0.0.1:{}", n.port()).parse().expect("addr")))
        .collect();
    let a = Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(common::NODE_TIMEOUT)
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build");
    let ttl = Duration::from_secs(2);
    let mut lock = a.acquire("validity:no-cap", ttl).await.expect("acquire");
    for p in &proxies[..3] {
        p.set(Fault::DropReplies);
    }
    lock.extend(ttl).await.expect_err("three replies are lost");
    for p in &proxies[..3] {
        p.set(Fault::None);
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match lock.extend(ttl).await {
            Ok(()) => break,
            Err(e) => {
                assert!(Instant::now() < until, "never extended again: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    // Measured from this extension's start: about 2 s − drift, past where a
    // bound fixed at the failed extension would end (about 1.3 s from now).
    assert!(
        lock.validity() > Duration::from_millis(1_500),
        "validity {:?} after a successful extension of {ttl:?}",
        lock.validity()
    );
}

/// A client whose validity is 30 % shorter than the nodes' leases (drift
/// factor 0.3), through proxies, with a node timeout long enough to wait
/// for held requests.
async fn drifting_client(proxies: &[FaultProxy]) -> Redlock {
    Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_secs(3))
        .connect_timeout(common::CONNECT_TIMEOUT)
        .drift_factor(0.3)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build")
}

/// An extension continues a validity that still runs, or none: confirmed
/// after the validity ended it reports the lock lapsed, although every node
/// still had this owner's lease and said yes. Once the validity has ended
/// another owner may have taken the lock on a quorum and a node may have
/// forgotten that grant in a restart while it still has this owner's older
/// lease (the simulator's seed 786,312: a reboot that lost its last second
/// of writes); a quorum of yes then proves nothing. Here the nodes' leases
/// outlast the client's validity (its 30 % drift margin), so the EXTENDs,
/// held until the validity has ended, still succeed on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_confirmed_after_the_validity_ended_is_lapsed() {
    let nodes = common::five();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|n| FaultProxy::start(format!("127.0.0.1:{}", n.port()).parse().expect("addr")))
        .collect();
    let a = drifting_client(&proxies).await;
    let key = "validity:lapsed-confirmation";
    let mut lock = a
        .acquire(key, Duration::from_millis(3_000))
        .await
        .expect("acquire");
    // The validity is at most 3 s × 0.7 ≈ 2.1 s; the nodes hold 3 s.
    let validity = lock.validity();
    assert!(validity < Duration::from_millis(2_100), "{validity:?}");
    for p in &proxies {
        p.hold_requests();
    }
    let deliver = {
        let proxies_deliver_at = Instant::now() + validity + Duration::from_millis(200);
        async move {
            tokio::time::sleep_until(proxies_deliver_at.into()).await;
        }
    };
    let (result, ()) = tokio::join!(lock.extend(Duration::from_millis(3_000)), async {
        deliver.await;
        for p in &proxies {
            p.deliver_held();
        }
    });
    let err = result.expect_err("confirmed after the validity ended");
    assert!(matches!(err, Error::Lapsed { .. }), "{err}");
    assert_eq!(lock.validity(), Duration::ZERO);
    // The nodes did apply it: the EXTENDs reached live leases.
    let renewed = nodes.iter().filter(|n| pttl(n, key) > 2_000).count();
    assert_eq!(renewed, 5, "every node had the lease and renewed it");
}

/// An extension that starts after the validity ended sends nothing: it
/// reports the lock lapsed, and no node's lease is renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_started_after_the_validity_ended_sends_nothing() {
    let nodes = common::five();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|n| FaultProxy::start(format!("127.0.0.1:{}", n.port()).parse().expect("addr")))
        .collect();
    let a = drifting_client(&proxies).await;
    let key = "validity:lapsed-start";
    let mut lock = a
        .acquire(key, Duration::from_millis(3_000))
        .await
        .expect("acquire");
    tokio::time::sleep(lock.validity() + Duration::from_millis(100)).await;
    let err = lock
        .extend(Duration::from_millis(3_000))
        .await
        .expect_err("started after the validity ended");
    let Error::Lapsed {
        key: lapsed_key,
        late,
    } = &err
    else {
        panic!("expected Lapsed, got {err:?}");
    };
    assert_eq!(lapsed_key, key);
    assert!(*late >= Duration::from_millis(100), "{late:?}");
    assert!(
        err.to_string().contains("no longer held"),
        "the message says what to do: {err}"
    );
    // Nothing was sent: the leases still end with the acquisition's 3 s.
    for n in &nodes {
        let left = pttl(n, key);
        assert!(
            left < 1_000,
            "node {} renewed the lease: PTTL {left}",
            n.port()
        );
    }
}
