//! Acceptance tests 1–5 of the client issue, against real module-enabled
//! nodes: the basic lifecycle, node failures, a frozen node, the
//! divergent-counter trace (with and without the write-back) and the clock
//! floor.

mod common;

use std::time::{Duration, Instant};

use common::{
    addr, client, divergent_trace, five, held_after_release, held_on, held_on_reachable, urls,
    Frozen, CONNECT_TIMEOUT, NODE_TIMEOUT,
};
use redlock_client::{Error, NodeState, Redlock, RetryPolicy};
use redlock_testkit::Node;

/// 1. Acquire, extend and release on five nodes; a second client is told
/// "busy"; tokens increase across holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_extend_release_busy_and_increasing_tokens() {
    let nodes = five();
    let a = client(&nodes).await;
    let b = Redlock::builder(urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy {
            attempts: 2,
            base_delay: Duration::from_millis(20),
            jitter: Duration::from_millis(10),
        })
        .build()
        .await
        .unwrap();
    assert_eq!(a.quorum(), 3);

    let ttl = Duration::from_secs(2);
    let mut lock = a.acquire("job", ttl).await.unwrap();
    let t1 = lock.token();
    // The clock floor (on by default) makes tokens microseconds since the epoch.
    assert!(t1 > 1_000_000_000_000_000, "token {t1}");
    assert!(lock.validity() <= ttl && lock.validity() > Duration::from_millis(1800));
    assert_eq!(lock.key(), "job");
    assert_eq!(lock.owner().len(), 36);
    // Healthy case: the nodes move in lock step to the same token. (All
    // five normally have it; the client only waited for a quorum.)
    assert!(held_on(&a, "job").await >= 3);
    for view in a.inspect("job").await {
        if let NodeState::Present { held, token, pttl } = view.state {
            assert!(held, "{view:?}");
            assert_eq!(token, t1, "{view:?}");
            assert!(pttl.unwrap() > Duration::from_millis(1500), "{view:?}");
        }
    }

    // Another client: busy, with how many nodes said so.
    assert!(b.try_acquire("job", ttl).await.unwrap().is_none());
    match b.acquire("job", ttl).await {
        Err(Error::Busy { holders, nodes }) => {
            // The round stops as soon as "busy" is decided: at least a
            // quorum of "held" answers.
            assert!((3..=5).contains(&holders), "{holders}");
            assert_eq!(nodes, 5);
        }
        other => panic!("expected Busy, got {other:?}"),
    }

    // Extend: the lease and the validity grow, measured from the extend.
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.extend(Duration::from_secs(5)).await.unwrap();
    let validity = lock.validity();
    assert!(
        validity > Duration::from_secs(4) && validity < Duration::from_secs(5),
        "{validity:?}"
    );
    for view in a.inspect("job").await {
        if let NodeState::Present { pttl, .. } = view.state {
            assert!(pttl.unwrap() > Duration::from_secs(4), "{view:?}");
        }
    }
    assert_eq!(lock.token(), t1, "extend keeps the token");

    assert!(lock.release().await.unwrap());
    assert_eq!(held_after_release(&a, "job").await, 0);

    // The next holders get higher tokens.
    let lock2 = b.try_acquire("job", ttl).await.unwrap().expect("free now");
    let t2 = lock2.token();
    assert!(t2 > t1, "{t2} > {t1}");
    assert!(lock2.release().await.unwrap());
    let lock3 = a.acquire("job", ttl).await.unwrap();
    let t3 = lock3.token();
    assert!(t3 > t2, "{t3} > {t2}");

    // release_owner: the owner id is enough, once.
    let owner = lock3.detach();
    assert!(a.release_owner("job", &owner).await.unwrap());
    assert!(!a.release_owner("job", &owner).await.unwrap());
    assert_eq!(held_after_release(&a, "job").await, 0);

    // Dropping an unreleased lock releases it in the background.
    let lock4 = a.acquire("job", Duration::from_secs(30)).await.unwrap();
    assert!(lock4.token() > t3);
    drop(lock4);
    let deadline = Instant::now() + Duration::from_secs(2);
    while held_on(&a, "job").await > 0 {
        assert!(Instant::now() < deadline, "dropped lock was not released");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// 2. Two nodes killed: locks still work. Three killed: `NoQuorum` listing
/// exactly those three. Restarted nodes are reconnected in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_down_works_majority_down_is_no_quorum() {
    let mut nodes = five();
    let redlock = client(&nodes).await;
    let ttl = Duration::from_secs(5);

    nodes[0].kill();
    nodes[3].kill();
    for _ in 0..3 {
        let lock = redlock.acquire("k", ttl).await.unwrap();
        assert!(lock.release().await.unwrap());
    }
    // A lock the nodes no longer have is "not held" (a quorum answered),
    // not "no quorum": its records are deleted on the three live nodes
    // while the client's validity still runs.
    let mut lock = redlock.acquire("short", ttl).await.unwrap();
    for n in [&nodes[1], &nodes[2], &nodes[4]] {
        let deleted: i64 = redis::cmd("DEL")
            .arg("short")
            .query(&mut n.connection())
            .unwrap();
        assert_eq!(deleted, 1);
    }
    assert!(matches!(
        lock.extend(ttl).await,
        Err(Error::Lost { confirmed: 0, .. })
    ));
    // A lock reported lost leaves no validity.
    assert_eq!(lock.validity(), Duration::ZERO);
    assert!(!lock.release().await.unwrap());
    // One whose validity ran out is lapsed: nothing is sent.
    let mut lock = redlock
        .acquire("short", Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(matches!(lock.extend(ttl).await, Err(Error::Lapsed { .. })));

    nodes[4].kill();
    let started = Instant::now();
    let err = redlock.try_acquire("k", ttl).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    let Error::NoQuorum {
        nodes: n,
        quorum,
        errors,
        ..
    } = &err
    else {
        panic!("expected NoQuorum, got {err:?}")
    };
    assert_eq!((*n, *quorum), (5, 3));
    let failing: Vec<&str> = errors.iter().map(|(node, _)| node.as_str()).collect();
    assert_eq!(
        failing,
        vec![
            addr(&nodes[0]).as_str(),
            addr(&nodes[3]).as_str(),
            addr(&nodes[4]).as_str()
        ]
    );
    let text = err.to_string();
    assert!(text.starts_with("no quorum: "), "{text}");
    assert!(text.contains("3 needed"), "{text}");
    for i in [0, 3, 4] {
        assert!(text.contains(&addr(&nodes[i])), "{text}");
    }
    // The live nodes were released: nothing is left held.
    assert_eq!(held_on_reachable(&redlock, "k", 2).await, 0);

    // Back up (empty): the client reconnects by itself.
    for i in [0, 3, 4] {
        nodes[i].restart();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match redlock.try_acquire("k", ttl).await {
            Ok(Some(lock)) => {
                assert!(lock.release().await.unwrap());
                break;
            }
            other => assert!(
                Instant::now() < deadline,
                "no reconnect after restart: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Eventually every node is connected again and takes part.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lock = redlock.acquire("k2", ttl).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let all = redlock
            .inspect("k2")
            .await
            .iter()
            .all(|v| matches!(v.state, NodeState::Present { held: true, .. }));
        lock.release().await.unwrap();
        if all {
            break;
        }
        assert!(Instant::now() < deadline, "restarted nodes never rejoined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// 3. A frozen node (SIGSTOP) costs at most the per-node timeout: acquire,
/// extend and release all return promptly, and so does building a client
/// while the node is frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_node_costs_at_most_the_node_timeout() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let _frozen = Frozen::new([&nodes[2]]);
    let bound = Duration::from_millis(1500);

    for i in 0..3 {
        let started = Instant::now();
        let mut lock = redlock
            .acquire("frozen", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(
            started.elapsed() < bound,
            "acquire {i}: {:?}",
            started.elapsed()
        );
        let started = Instant::now();
        lock.extend(Duration::from_secs(5)).await.unwrap();
        assert!(
            started.elapsed() < bound,
            "extend {i}: {:?}",
            started.elapsed()
        );
        let started = Instant::now();
        assert!(lock.release().await.unwrap());
        assert!(
            started.elapsed() < bound,
            "release {i}: {:?}",
            started.elapsed()
        );
    }

    // A busy answer is just as prompt.
    let _held = redlock
        .acquire("frozen", Duration::from_secs(5))
        .await
        .unwrap();
    let started = Instant::now();
    let other = Redlock::builder(urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    // Connecting to the frozen node gives up after the connect timeout (500 ms).
    assert!(started.elapsed() < bound, "build: {:?}", started.elapsed());
    let started = Instant::now();
    assert!(other
        .try_acquire("frozen", Duration::from_secs(5))
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() < bound, "busy: {:?}", started.elapsed());
}

/// 4a. With the write-back, tokens strictly increase across the trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergent_counters_tokens_increase_with_write_back() {
    let tokens = divergent_trace(|builder| builder).await;
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase: {tokens:?}"
    );
    assert_eq!(tokens, vec![1, 2, 3, 4, 5]);
}

/// 5. Clock floor: a node restarted empty (no persistence), in every
/// majority because the nodes with the history are unreachable, still gives
/// a higher token. The same scenario without the floor goes backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_floor_keeps_tokens_increasing_after_counter_loss() {
    let mut n = five();
    async fn take(nodes: &[Node], floor: bool, key: &str) -> u64 {
        let redlock = Redlock::builder(urls(nodes))
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .retry(RetryPolicy::no_retry())
            .clock_floor(floor)
            .build()
            .await
            .unwrap();
        let lock = redlock
            .try_acquire(key, Duration::from_secs(10))
            .await
            .unwrap()
            .expect("lock is free");
        let token = lock.token();
        assert!(lock.release().await.unwrap());
        token
    }

    // History on {A, B, C} only.
    n[3].kill();
    n[4].kill();
    let mut with_floor = Vec::new();
    let mut without = Vec::new();
    for _ in 0..3 {
        with_floor.push(take(&n, true, "floor-on").await);
        without.push(take(&n, false, "floor-off").await);
    }
    assert_eq!(without, vec![1, 2, 3]);

    // C loses its counters; A and B become unreachable; D and E come back
    // (empty, they never saw the keys). Every majority is now {C, D, E}.
    n[2].kill();
    n[2].restart();
    n[3].restart();
    n[4].restart();
    n[0].kill();
    n[1].kill();

    let after = take(&n, true, "floor-on").await;
    assert!(
        after > *with_floor.last().unwrap(),
        "clock floor: {after} must exceed {with_floor:?}"
    );
    let after_without = take(&n, false, "floor-off").await;
    assert!(
        after_without <= 3,
        "without the floor the token goes back to {after_without}"
    );
}

/// A busy `try_acquire` leaves nothing that blocks the caller's next
/// attempt: the nodes that granted it are released before it returns (the
/// RELEASE is queued ahead of whatever the client sends next). Another
/// owner holds three of five nodes, the busy attempt is granted the other
/// two; once the other owner frees one node, that node and the two free
/// ones are a quorum for the next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_try_acquire_is_released_before_the_next_attempt() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let ttl = Duration::from_secs(10);
    for round in 0..20 {
        let key = format!("split:{round}");
        for node in &nodes[..3] {
            let granted: i64 = redis::cmd("REDLOCK.ACQUIRE")
                .arg(&key)
                .arg("other")
                .arg(10_000)
                .query(&mut node.connection())
                .unwrap();
            assert!(granted > 0);
        }
        assert!(redlock.try_acquire(&key, ttl).await.unwrap().is_none());
        let released: i64 = redis::cmd("REDLOCK.RELEASE")
            .arg(&key)
            .arg("other")
            .query(&mut nodes[0].connection())
            .unwrap();
        assert_eq!(released, 1);
        let lock = redlock
            .try_acquire(&key, ttl)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: three nodes are free for us"));
        assert!(lock.release().await.unwrap());
    }
}
