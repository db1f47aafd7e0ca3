//! Acceptance test 6: `with_lock` keeps the lock alive through several TTLs,
//! releases it at the end whatever happens, and signals `lost()` in time
//! when the nodes holding it freeze.

mod common;

use std::time::{Duration, Instant};

use common::{client, five, held_on, Frozen};

/// The lock outlives several TTLs through auto-extension, nobody else can
/// take it meanwhile, the closure's value comes back and the lock is
/// released at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_outlives_several_ttls_and_releases_at_the_end() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let other = client(&nodes).await;
    let ttl = Duration::from_secs(1);

    let started = Instant::now();
    let value = redlock
        .with_lock("long-job", ttl, |guard| {
            let other = other.clone();
            async move {
                let token = guard.token();
                for _ in 0..7 {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    assert!(!guard.is_lost(), "lost during normal operation");
                    assert!(guard.validity() > Duration::ZERO);
                    assert!(
                        !matches!(other.try_acquire("long-job", ttl).await, Ok(Some(_))),
                        "someone else got the lock while it was kept alive"
                    );
                }
                assert_eq!(guard.key(), "long-job");
                token
            }
        })
        .await
        .unwrap();
    assert!(started.elapsed() > ttl * 3, "ran through several TTLs");
    assert!(value > 0);
    // Released at the end, not left to expire.
    assert_eq!(held_on(&redlock, "long-job").await, 0);
    let next = other
        .try_acquire("long-job", ttl)
        .await
        .unwrap()
        .expect("free after with_lock");
    assert!(next.token() > value);
    next.release().await.unwrap();
}

/// The nodes holding the lock freeze past the lease: `lost()` fires before
/// the lease would have ended on the client's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_before_the_lease_ends_when_nodes_freeze() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let ttl = Duration::from_millis(1500);
    // The margin the client keeps: ttl × 0.01 + 2 ms.
    let drift = ttl.mul_f64(0.01) + Duration::from_millis(2);

    let outcome = redlock
        .with_lock("freeze", ttl, |guard| {
            let nodes = &nodes;
            async move {
                // Let a couple of extensions happen first.
                tokio::time::sleep(ttl).await;
                assert!(!guard.is_lost());
                let frozen = Frozen::new(&nodes[..3]);
                let frozen_at = Instant::now();
                // The last extension that succeeded started before the
                // freeze; its lease ends, on the client's clock, at
                // start + ttl = now + validity + drift margin. An extension
                // already answered by the nodes before they froze may still
                // succeed after this point and move that end: it is
                // sampled until lost() fires, and the latest end counts.
                let mut lease_end = frozen_at + guard.validity() + drift;
                let give_up = frozen_at + Duration::from_secs(10);
                let lost = guard.lost();
                tokio::pin!(lost);
                loop {
                    tokio::select! {
                        _ = &mut lost => break,
                        _ = tokio::time::sleep(Duration::from_millis(5)) => {
                            let now = Instant::now();
                            let validity = guard.validity();
                            if validity > Duration::ZERO {
                                lease_end = lease_end.max(now + validity + drift);
                            }
                            // A hang guard only; the timing is checked below.
                            assert!(now < give_up, "lost() never fired");
                        }
                    }
                }
                let lost_at = Instant::now();
                drop(frozen);
                (lost_at, lease_end, guard.is_lost(), guard.validity())
            }
        })
        .await
        .unwrap();
    let (lost_at, lease_end, is_lost, validity) = outcome;
    assert!(is_lost);
    assert_eq!(validity, Duration::ZERO);
    assert!(
        lost_at < lease_end,
        "lost() fired {:?} after the lease ended",
        lost_at - lease_end
    );
}

/// The lock is released even when the closure panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_releases_when_the_closure_panics() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let task = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            redlock
                .with_lock("panics", Duration::from_secs(30), |_guard| async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    panic!("deliberate panic inside with_lock");
                })
                .await
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    let deadline = Instant::now() + Duration::from_secs(3);
    while held_on(&redlock, "panics").await > 0 {
        assert!(
            Instant::now() < deadline,
            "lock still held after the panic (ttl 30 s)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
