//! Sentinel members and the replica-sync check on real processes (issue 37,
//! DESIGN §13): one master, two replicas and three sentinels on loopback
//! ports, `redlock.sync-replicas 2`, the module's guard on.
//!
//! The acceptance tests (a)–(e). (b) and (d) run in `make test`; the ones
//! that wait for Sentinel to fail over, (a), (c) and (e), are `#[ignore]`d
//! there and run in `make test-sentinel`.

use std::time::{Duration, Instant};

use redlock_client::{Error, Member, Redlock, RetryPolicy};
use redlock_testkit::{Node, SentinelGroup};

/// The group of the tests: R = 2, the guard on (60 s), so that a replica
/// promoted without the check's word would refuse new locks.
fn group() -> SentinelGroup {
    SentinelGroup::builder()
        .node(
            Node::builder()
                .config("redlock.sync-replicas", "2")
                .config("redlock.max-ttl-ms", "60000"),
        )
        .start()
}

/// Turns the promotion guard on at every replica (the nodes start with it
/// off: on the master, turning it on would reopen the window of its own
/// start).
fn guard_on(group: &SentinelGroup) {
    for i in 0..group.nodes().len() {
        if group.node(i).pid().is_some() && group.role(i).as_deref() == Some("slave") {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("redlock.restart-grace-ms")
                .arg(-1)
                .query(&mut group.connection(i))
                .unwrap();
        }
    }
}

async fn client(group: &SentinelGroup) -> Redlock {
    Redlock::builder([Member::sentinel(group.name(), group.sentinel_urls())])
        .node_timeout(Duration::from_millis(500))
        .sync_timeout(Duration::from_millis(500))
        .retry(RetryPolicy {
            attempts: 2,
            base_delay: Duration::from_millis(20),
            jitter: Duration::from_millis(10),
        })
        .build()
        .await
        .unwrap()
}

/// `INSPECT key` on data node `i`: held?
fn held_on(group: &SentinelGroup, i: usize, key: &str) -> bool {
    let reply: Option<Vec<redis::Value>> = redis::cmd("REDLOCK.INSPECT")
        .arg(key)
        .query(&mut group.connection(i))
        .unwrap();
    reply.is_some_and(|f| f[1] == redis::Value::Int(1))
}

/// Retries `f` until it succeeds or `within` passes; the last error on
/// failure.
async fn eventually<T, F, Fut>(within: Duration, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + within;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// (a) and (e): a holder keeps its lock through a failover (a crash of the
/// master when `crash`, `SENTINEL FAILOVER` otherwise).
async fn holder_keeps_its_lock_through(crash: bool) {
    let mut group = group();
    guard_on(&group);
    let holder = client(&group).await;
    let other = client(&group).await;
    let ttl = Duration::from_secs(30);
    let mut lock = holder.acquire("job", ttl).await.unwrap();
    let first = lock.token();
    let old = group.master_index();
    for i in 0..3 {
        assert!(held_on(&group, i, "job"), "node {i} lacks the grant");
    }

    let new = if crash {
        group.kill(old);
        let new = group.wait_master_change(old);
        // A supervisor brings the old master back as a replica of the new
        // one: with R = 2 the new master needs two replicas to confirm.
        group.restart_as_replica(old);
        new
    } else {
        group.failover()
    };
    assert_ne!(new, old);
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut group.connection(new))
        .unwrap();
    assert!(
        info.contains("redlock_sync_last_promotion:1"),
        "the new master was not promoted at once:\n{info}"
    );

    // The holder's next extension succeeds on the new master.
    let deadline = Instant::now() + Duration::from_secs(20);
    let extended = loop {
        match lock.extend(ttl).await {
            Ok(()) => break Ok(()),
            Err(e) if Instant::now() > deadline => break Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(extended.is_ok(), "{extended:?}");
    assert!(held_on(&group, new, "job"));
    // Another client is told "busy", not granted.
    assert!(other.try_acquire("job", ttl).await.unwrap().is_none());
    assert!(lock.release().await.unwrap());
    let start = Instant::now();
    let next = other.acquire("job", ttl).await.unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(next.token() > first, "{} then {}", first, next.token());
    next.release().await.unwrap();
}

/// (a) A holder keeps its lock through `kill -9` of the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits for Sentinel to fail over; make test-sentinel runs it"]
async fn a_holder_keeps_its_lock_through_a_crash_of_the_master() {
    holder_keeps_its_lock_through(true).await;
}

/// (e) A `SENTINEL FAILOVER` with no crash is followed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits for Sentinel to fail over; make test-sentinel runs it"]
async fn a_sentinel_failover_without_a_crash_is_followed() {
    holder_keeps_its_lock_through(false).await;
}

/// (b) With one replica frozen, grants fail the check and nothing stays
/// held; resumed, they succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_fails_the_check_and_nothing_stays_held() {
    let group = group();
    let c = client(&group).await;
    let master = group.master_index();
    let frozen = (0..3).find(|&i| i != master).unwrap();
    group.node(frozen).pause();
    let err = c.acquire("job", Duration::from_secs(10)).await.unwrap_err();
    group.node(frozen).resume();
    let text = err.to_string();
    assert!(
        text.contains("replica-sync check failed: 1 of the 2 replicas"),
        "{text}"
    );
    assert!(
        text.contains(&format!("sentinel({}@", group.name())),
        "{text}"
    );
    assert!(err.is_transient());
    for i in 0..3 {
        assert!(!held_on(&group, i, "job"), "node {i} still holds it");
    }
    let lock = eventually(Duration::from_secs(10), || {
        c.acquire("job", Duration::from_secs(10))
    })
    .await
    .unwrap();
    for i in 0..3 {
        assert!(held_on(&group, i, "job"), "node {i} lacks the grant");
    }
    lock.release().await.unwrap();
}

/// (c) A replica restarted without its data and promoted before it synced
/// refuses new locks (the guard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits for Sentinel to fail over; make test-sentinel runs it"]
async fn a_replica_restarted_empty_and_promoted_before_it_synced_keeps_the_guard() {
    let mut group = group();
    guard_on(&group);
    let c = client(&group).await;
    let lock = c.acquire("job", Duration::from_secs(30)).await.unwrap();
    let old = group.master_index();
    let mut replicas = (0..3).filter(|&i| i != old);
    let (empty, other) = (replicas.next().unwrap(), replicas.next().unwrap());
    // The master and the other replica die; the remaining one comes back
    // empty, pointed at the dead master: it cannot sync before Sentinel
    // promotes it.
    group.kill(old);
    group.kill(other);
    let port = group.node(old).port();
    group.node_mut(empty).kill();
    group.node_mut(empty).set_replica_of(Some(port));
    wipe(group.node(empty));
    group.node_mut(empty).restart();
    guard_on(&group);
    let new = group.wait_master_change(old);
    assert_eq!(new, empty);
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut group.connection(new))
        .unwrap();
    assert!(info.contains("redlock_sync_last_promotion:3"), "{info}");
    let err = eventually(Duration::from_secs(10), || async {
        match c.try_acquire("fresh", Duration::from_secs(1)).await {
            Err(e @ Error::RestartGuard { .. }) => Ok(e),
            other => Err(Error::InvalidArgument(format!("{other:?}"))),
        }
    })
    .await
    .unwrap();
    assert!(err.to_string().contains("restart guard"), "{err}");
    drop(lock);
}

/// Empties a stopped node's folder but for its log.
fn wipe(node: &Node) {
    for e in std::fs::read_dir(node.dir()).unwrap().flatten() {
        let path = e.path();
        if path.file_name().is_some_and(|n| n == "redis.log") {
            continue;
        }
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
}

/// (d) A third replica added while R = 2: the master refuses grants with a
/// clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_replica_makes_the_master_refuse_grants() {
    let group = group();
    let c = client(&group).await;
    c.acquire("before", Duration::from_secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let master = group.master_index();
    let third = Node::builder()
        .config("redlock.sync-replicas", "2")
        .replica_of(group.node(master).port())
        .start();
    group.wait_online(master, 3);
    let err = c.acquire("job", Duration::from_secs(5)).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("TOOMANYREPLICAS this master has had 3 replicas"),
        "{text}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{}", third.port())),
        "{text}"
    );
    assert!(!held_on(&group, master, "job"));
}

/// A client that states no R learns it from the nodes, and a change of R
/// at run time is followed: the node refuses the old R with its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_learns_r_from_the_nodes_and_follows_a_change() {
    let group = group();
    let c = client(&group).await;
    let lock = c.acquire("job", Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
    let master = group.master_index();
    let refused_before: u64 = info_u64(&group, master, "redlock_sync_refused_stated");
    for i in 0..3 {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("redlock.sync-replicas")
            .arg(0)
            .query(&mut group.connection(i))
            .unwrap();
    }
    // Lowered to 0, the master takes lock writes without the check once
    // every replica acknowledged the change (within about a second).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while info_u64(&group, master, "redlock_sync_lowering") == 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the lowering to 0 never completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lock = c.acquire("job", Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
    let refused: u64 = info_u64(&group, master, "redlock_sync_refused_stated");
    assert_eq!(
        refused,
        refused_before + 1,
        "the stale R 2 was not refused once"
    );
}

fn info_u64(group: &SentinelGroup, i: usize, field: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut group.connection(i))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field}"))
}

/// A lock kept alive by `with_lock` is not lost through a crash of the
/// master: the extensions that fail during the failover are tried again
/// while the lease lasts, and succeed on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits for Sentinel to fail over; make test-sentinel runs it"]
async fn with_lock_keeps_its_lock_through_a_crash_of_the_master() {
    let started = group();
    guard_on(&started);
    let c = client(&started).await;
    let other = client(&started).await;
    let group = std::sync::Arc::new(std::sync::Mutex::new(started));
    let ttl = Duration::from_secs(6);
    let g = std::sync::Arc::clone(&group);
    let (lost, busy) = c
        .with_lock("kept", ttl, |guard| async move {
            let failover = tokio::task::spawn_blocking(move || {
                let mut group = g.lock().unwrap();
                let old = group.master_index();
                group.kill(old);
                group.wait_master_change(old);
                group.restart_as_replica(old);
                group.settle();
            });
            failover.await.unwrap();
            // Two extension periods on the new master.
            tokio::time::sleep(ttl).await;
            let busy = other.try_acquire("kept", ttl).await.unwrap().is_none();
            (guard.is_lost(), busy)
        })
        .await
        .unwrap();
    assert!(!lost, "the lock was reported lost through the failover");
    assert!(busy, "another client got the lock");
}
