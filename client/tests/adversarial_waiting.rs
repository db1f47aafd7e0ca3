//! An adversarial read of the waiting changes: a set waiter queues its
//! busy attempt's RELEASEs without awaiting them
//! (`Quorum::release_set_queued`), and waiters whose pooled `WAIT`
//! connections died with a restart of every node. Each test asserts the
//! safe (and live) outcome; the probes found safe pass.

mod common;

use std::time::{Duration, Instant};

use common::{client, five, info_u64};
use redlock_testkit::Node;

/// Every node restarted (same ports): the idle WAIT connections the
/// waiter opened ahead of time are dead.
async fn restart_all(nodes: &mut [Node], holder: &redlock_client::Redlock) {
    for node in nodes.iter_mut() {
        node.restart();
    }
    // The shared connections reconnect in the background.
    let started = Instant::now();
    loop {
        if let Ok(Some(lock)) = holder.try_acquire("probe", Duration::from_secs(1)).await {
            lock.release().await.unwrap();
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no reconnect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Safe: a wait whose pooled WAIT connections (opened ahead of time by an
/// earlier wait that got its lock at once) died with a restart of every
/// node is still woken soon after the release: a broken connection fails
/// at once, is not pooled again, and the next round connects afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_connections_warmed_before_a_restart_is_woken() {
    let mut nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    // Warms one WAIT connection per node; the lock is free, no WAIT sent.
    let warm = waiter
        .acquire_wait("w", Duration::from_secs(1), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(warm.release().await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    restart_all(&mut nodes, &holder).await;
    let lock = holder.acquire("k", Duration::from_secs(10)).await.unwrap();
    let first = lock.token();
    let waiting = tokio::spawn(async move {
        let lock = waiter
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(15))
            .await;
        (lock, Instant::now())
    });
    // Blocked in WAIT on a majority, whatever the dead connections cost.
    let started = Instant::now();
    while nodes
        .iter()
        .filter(|n| info_u64(n, "redlock", "redlock_waiting_clients") == 1)
        .count()
        < 3
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the waiter never blocked after the restart"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("blocked in WAIT {:?} after its start", started.elapsed());
    let released = Instant::now();
    assert!(lock.release().await.unwrap());
    let (lock, got_it) = waiting.await.unwrap();
    let lock = lock.unwrap();
    eprintln!("woken {:?} after the release", got_it - released);
    assert!(lock.token() > first);
    assert!(got_it - released < Duration::from_millis(1_500));
    assert!(lock.release().await.unwrap());
}

/// Safe: the same for a set waiter (`acquire_many_wait`), whose busy
/// attempt's RELEASEs are only queued: the tokens go forward and the
/// waiter gets the set soon after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_wait_on_connections_warmed_before_a_restart_is_woken() {
    let mut nodes = five();
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    let names = ["set:a", "set:b", "set:c"];
    let warm = waiter
        .acquire_many_wait(
            &["w1", "w2"],
            Duration::from_secs(1),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(warm.release().await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    restart_all(&mut nodes, &holder).await;
    // The holder holds one name of the set: the waiter's busy attempt gets
    // the other two on every node and queues their RELEASEs.
    let one = holder
        .acquire("set:b", Duration::from_secs(10))
        .await
        .unwrap();
    let first = one.token();
    let waiting = tokio::spawn(async move {
        let set = waiter
            .acquire_many_wait(&names, Duration::from_secs(5), Duration::from_secs(15))
            .await;
        (set, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // Nothing of the set is held by the waiter's busy attempts meanwhile.
    let mut con = nodes[0].connection();
    for name in ["set:a", "set:c"] {
        let view: redis::Value = redis::cmd("REDLOCK.INSPECT")
            .arg(name)
            .query(&mut con)
            .unwrap();
        eprintln!("{name} while the set waiter waits: {view:?}");
    }
    let released = Instant::now();
    assert!(one.release().await.unwrap());
    let (set, got_it) = waiting.await.unwrap();
    let set = set.unwrap();
    eprintln!("set woken {:?} after the release", got_it - released);
    let b = set
        .tokens()
        .find(|(name, _)| *name == "set:b")
        .map(|(_, t)| t)
        .unwrap();
    assert!(b > first);
    assert!(got_it - released < Duration::from_millis(1_500));
    assert!(set.release().await.unwrap());
}
