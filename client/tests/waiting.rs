//! `Redlock::acquire_wait`: woken by the nodes, never by polling.

mod common;

use std::time::{Duration, Instant};

use common::{client, five, held_on, held_on_reachable, info_u64};
use redlock_client::Error;
use redlock_testkit::Node;

/// Total calls of every command on a node.
fn commandstats(node: &Node) -> String {
    let mut con = node.connection();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    let mut lines: Vec<String> = stats
        .lines()
        // The test's own connections: INFO, and the redis crate's CLIENT
        // SETINFO on connect (answered by Redis 7.2+ and Valkey).
        .filter(|l| {
            l.starts_with("cmdstat_")
                && !l.starts_with("cmdstat_info:")
                && !l.starts_with("cmdstat_client|setinfo:")
        })
        .map(|l| l.split(",usec=").next().unwrap_or(l).to_string())
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Waits until `n` clients are blocked in WAIT on a majority of `nodes` (a
/// node that got the holder's grant after the waiter's WAIT answered "free"
/// at once, and the waiter then waits on the others).
async fn until_waiting_everywhere(nodes: &[Node], n: u64) {
    let started = Instant::now();
    loop {
        let counts: Vec<u64> = nodes
            .iter()
            .map(|node| info_u64(node, "redlock", "redlock_waiting_clients"))
            .collect();
        if counts.iter().filter(|&&c| c == n).count() > nodes.len() / 2 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "waiters never blocked: {counts:?}, expected {n} on a majority"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_right_after_the_release() {
    let nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    let lock = holder.acquire("k", Duration::from_secs(10)).await.unwrap();
    let first = lock.token();
    let waiting = tokio::spawn(async move {
        let lock = waiter
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
            .await;
        (lock, Instant::now())
    });
    until_waiting_everywhere(&nodes, 1).await;
    let released = Instant::now();
    assert!(lock.release().await.unwrap());
    let (lock, got_it) = waiting.await.unwrap();
    let lock = lock.unwrap();
    let after = got_it.duration_since(released);
    println!("waiter got the lock {after:?} after the release");
    // Woken by the release (about 6 ms on a quiet machine), not by the
    // lease end (10 s) or max_wait.
    assert!(after < Duration::from_millis(500), "{after:?}");
    assert!(lock.token() > first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_a_frozen_holders_lease_ends() {
    let nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    // The lease starts on each node after this instant.
    let granted = Instant::now();
    let lock = holder
        .acquire("k", Duration::from_millis(800))
        .await
        .unwrap();
    // The holder stops without releasing: only the lease ends it.
    let _owner = lock.detach();
    let lock = waiter
        .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
        .await
        .unwrap();
    let waited = granted.elapsed();
    println!("waiter got the lock {waited:?} after the grant (lease 800 ms)");
    assert!(waited >= Duration::from_millis(795), "{waited:?}");
    // Woken at the lease end, not at max_wait (10 s): a loaded machine may
    // add some hundreds of ms, never seconds.
    assert!(waited < Duration::from_millis(2_000), "{waited:?}");
    drop(lock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_max_wait_gives_busy_after_about_max_wait() {
    let nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    let _lock = holder.acquire("k", Duration::from_secs(10)).await.unwrap();
    let started = Instant::now();
    let err = waiter
        .acquire_wait("k", Duration::from_secs(5), Duration::from_millis(300))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(800),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiter_leaves_no_grant_and_no_blocked_connection() {
    let nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    let lock = holder.acquire("k", Duration::from_secs(10)).await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(30))
            .await
    });
    until_waiting_everywhere(&nodes, 1).await;
    waiting.abort();
    let _ = waiting.await;
    let started = Instant::now();
    while !nodes
        .iter()
        .all(|node| info_u64(node, "redlock", "redlock_waiting_clients") == 0)
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "waiters left behind"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for node in &nodes {
        assert_eq!(info_u64(node, "clients", "blocked_clients"), 0);
    }
    assert!(lock.release().await.unwrap());
    assert_eq!(
        held_on(&holder, "k").await,
        0,
        "the dropped waiter holds it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_works_with_two_nodes_down() {
    let mut nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    nodes[3].kill();
    nodes[4].kill();
    let lock = holder.acquire("k", Duration::from_secs(10)).await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
            .await
    });
    until_waiting_everywhere(&nodes[..3], 1).await;
    let released = Instant::now();
    assert!(lock.release().await.unwrap());
    let lock = waiting.await.unwrap().unwrap();
    assert!(released.elapsed() < Duration::from_millis(500));
    assert_eq!(held_on_reachable(&holder, "k", 3).await, 3);
    drop(lock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_reaches_the_nodes_while_the_lock_stays_held() {
    let nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    let lock = holder.acquire("k", Duration::from_secs(10)).await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
            .await
    });
    until_waiting_everywhere(&nodes, 1).await;
    let before: Vec<String> = nodes.iter().map(commandstats).collect();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let after: Vec<String> = nodes.iter().map(commandstats).collect();
    assert_eq!(
        before, after,
        "commands reached the nodes while the lock was held"
    );
    assert!(lock.release().await.unwrap());
    waiting.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_each_get_the_lock_in_turn() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let holder = redlock.acquire("k", Duration::from_secs(10)).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let redlock = redlock.clone();
        tasks.push(tokio::spawn(async move {
            let lock = redlock
                .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(20))
                .await
                .unwrap();
            let token = lock.token();
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(lock.release().await.unwrap());
            token
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(holder.release().await.unwrap());
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.push(t.await.unwrap());
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 6, "a token was handed out twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_wait_runs_the_work_once_the_lock_frees() {
    let nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    let lock = holder
        .acquire("job", Duration::from_millis(500))
        .await
        .unwrap();
    let first = lock.token();
    let _owner = lock.detach();
    let token = waiter
        .with_lock_wait(
            "job",
            Duration::from_secs(3),
            Duration::from_secs(5),
            |guard| async move { guard.token() },
        )
        .await
        .unwrap();
    assert!(token > first);
    let err = waiter
        .with_lock_wait(
            "job2",
            Duration::from_secs(3),
            Duration::from_secs(5),
            |_| async {},
        )
        .await;
    assert!(err.is_ok());
}

/// A client that only queues (`REDLOCK.WAIT k 0 QUEUE squatter 0` on every
/// node, over and over, never waiting) keeps a free lock from nobody: a
/// WAIT answered at once reserves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_only_queues_keeps_a_free_lock_from_nobody() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let mut squatters: Vec<_> = nodes.iter().map(Node::connection).collect();
    for round in 0..5 {
        for con in &mut squatters {
            let free: i64 = redis::cmd("REDLOCK.WAIT")
                .arg("k")
                .arg(0)
                .arg("QUEUE")
                .arg("squatter")
                .arg(0)
                .query(con)
                .unwrap();
            assert_eq!(free, 1);
        }
        let lock = redlock
            .try_acquire("k", Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: busy after the squatter's WAITs"));
        assert!(lock.release().await.unwrap());
    }
    // A node whose RELEASE of the previous round had not arrived yet made
    // that round's WAIT a real wait: its reservation ends within
    // handoff-ms, and its entry with it.
    let deadline = Instant::now() + Duration::from_secs(5);
    for node in &nodes {
        while info_u64(node, "redlock", "redlock_wait_keys") != 0 {
            assert!(
                Instant::now() < deadline,
                "a waiter-map entry outlived its reservation"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits until `n` clients are blocked in WAIT on every node of `nodes`, or
/// `limit` passed; whether they are.
async fn blocked_on_all(nodes: &[Node], n: u64, limit: Duration) -> bool {
    let started = Instant::now();
    loop {
        if nodes
            .iter()
            .all(|node| info_u64(node, "redlock", "redlock_waiting_clients") == n)
        {
            return true;
        }
        if started.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// With a waiter waiting, a released lock goes to the waiter and not back
/// to the releaser, also while a node lags. The waiter's busy attempt
/// leaves an unanswered ACQUIRE on a frozen node; it queues on the other
/// four at once (its WAIT does not wait for the RELEASE of that ACQUIRE,
/// which could take the whole per-node timeout), so the holder's release
/// reserves the lock for it there and the holder's next attempt is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lock_goes_to_the_waiter_while_a_node_lags() {
    let nodes = five();
    let holder = client(&nodes).await;
    // A per-node timeout far longer than the wait below: a waiter that let
    // its release wait on the frozen node would be queued nowhere meanwhile.
    let waiter = redlock_client::Redlock::builder(common::urls(&nodes))
        .node_timeout(Duration::from_secs(4))
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(redlock_client::RetryPolicy::no_retry())
        .build()
        .await
        .unwrap();
    let lock = holder.acquire("k", Duration::from_secs(10)).await.unwrap();
    let first = lock.token();
    nodes[4].pause();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(20))
            .await
    });
    let queued = blocked_on_all(&nodes[..4], 1, Duration::from_secs(2)).await;
    assert!(lock.release().await.unwrap());
    let again = holder.try_acquire("k", Duration::from_secs(10)).await;
    nodes[4].resume();
    assert!(
        matches!(again, Ok(None)),
        "the releaser took the lock back from a waiter (blocked in WAIT on the four live nodes: {queued}): {again:?}"
    );
    assert!(
        queued,
        "the waiter was not blocked in WAIT on the four live nodes within 2 s"
    );
    let lock = waiting.await.unwrap().unwrap();
    assert!(lock.token() > first);
    assert!(lock.release().await.unwrap());
}

/// The same for a set waiter (`acquire_many_wait`): its busy attempt's
/// RELEASEs are queued, not awaited, so its WAITs (one per name) block on
/// the four live nodes at once while the frozen node holds the RELEASE
/// back; the holder's release of the set then reserves both names for the
/// waiter, and the holder's next attempt at the set is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_set_goes_to_the_set_waiter_while_a_node_lags() {
    let nodes = five();
    let holder = client(&nodes).await;
    let waiter = redlock_client::Redlock::builder(common::urls(&nodes))
        .node_timeout(Duration::from_secs(4))
        .connect_timeout(common::CONNECT_TIMEOUT)
        .retry(redlock_client::RetryPolicy::no_retry())
        .build()
        .await
        .unwrap();
    let names = ["set:a", "set:b"];
    let set = holder
        .acquire_many(&names, Duration::from_secs(10))
        .await
        .unwrap();
    let first: Vec<u64> = set.tokens().map(|(_, token)| token).collect();
    nodes[4].pause();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_many_wait(&names, Duration::from_secs(5), Duration::from_secs(20))
            .await
    });
    // One WAIT per name on each live node.
    let queued = blocked_on_all(&nodes[..4], 2, Duration::from_secs(2)).await;
    assert!(set.release().await.unwrap());
    let again = holder
        .try_acquire_many(&names, Duration::from_secs(10))
        .await;
    nodes[4].resume();
    assert!(
        matches!(again, Ok(None)),
        "the releaser took the set back from a waiter (blocked in WAIT on the four live nodes: {queued}): {again:?}"
    );
    assert!(
        queued,
        "the set waiter was not blocked in WAIT on the four live nodes within 2 s"
    );
    let set = waiting.await.unwrap().unwrap();
    assert!(set
        .tokens()
        .zip(&first)
        .all(|((_, now), before)| now > *before));
    assert!(set.release().await.unwrap());
}

/// A worker that releases and asks again at once does not take its lock
/// back from a waiter of the same client whose `WAIT`s have not reached the
/// nodes yet (the cold start of a process: its blocking connections are
/// still being opened). The waiter's call is polled once (it has sent its
/// first ACQUIRE, which finds the lock held), then the holder releases and
/// calls again while the waiter goes on: the waiter must get the lock first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_releases_and_asks_again_lets_a_waiter_of_its_client_go_first() {
    let nodes = five();
    for round in 0..5 {
        // A fresh client each round: no blocking connection open yet.
        let redlock = client(&nodes).await;
        let key = format!("cold-{round}");
        let lock = redlock
            .acquire(&key, Duration::from_secs(10))
            .await
            .unwrap();
        let waiter = redlock.acquire_wait(&key, Duration::from_secs(10), Duration::from_secs(5));
        let mut waiter = std::pin::pin!(waiter);
        let first_poll = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(waiter.as_mut(), cx))
        })
        .await;
        assert!(first_poll.is_pending(), "the waiter got a held lock");
        let holder_again = async {
            assert!(lock.release().await.unwrap());
            redlock
                .acquire_wait(&key, Duration::from_secs(10), Duration::from_secs(5))
                .await
                .unwrap()
        };
        let order = std::sync::Mutex::new(Vec::new());
        let (w, h) = tokio::join!(
            async {
                let l = waiter.await.unwrap();
                order.lock().unwrap().push("waiter");
                let token = l.token();
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert!(l.release().await.unwrap());
                token
            },
            async {
                let l = holder_again.await;
                order.lock().unwrap().push("holder");
                let token = l.token();
                assert!(l.release().await.unwrap());
                token
            }
        );
        assert_eq!(
            *order.lock().unwrap(),
            ["waiter", "holder"],
            "round {round}: the holder took its lock back (tokens: waiter {w}, holder {h})"
        );
        assert!(w < h, "round {round}: tokens out of order: {w} then {h}");
    }
}
