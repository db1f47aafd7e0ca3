//! Tests of the switches that break the algorithm on purpose (feature
//! `danger-test-switches`, which this test target requires): each shows
//! what its step prevents.

mod common;

use std::time::Duration;

use common::{client, divergent_trace, five, urls, NODE_TIMEOUT};
use redlock_client::{Redlock, RedlockBuilder, RetryPolicy};

/// 4b. The same trace without the write-back goes backwards at L5:
/// max(3, 3, 3) = 3 < 4. This is why step 4 exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergent_counters_go_backwards_without_write_back() {
    let tokens = divergent_trace(RedlockBuilder::unsafe_disable_write_back).await;
    assert_eq!(tokens, vec![1, 2, 3, 4, 3], "expected the inversion");
    assert!(tokens[4] < tokens[3]);
}

/// The safety suite's mutation switch: without step 5, a lease that leaves
/// nothing after the drift margin is still handed out, and the validity is
/// the full ttl from the end of the acquisition (and of an extension).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_the_validity_check_skips_step_5() {
    let nodes = five();
    let broken = Redlock::builder(urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .unsafe_disable_validity_check()
        .build()
        .await
        .unwrap();
    // 2 ms minus the 2 ms + 1 % margin leaves nothing: ExpiredBeforeUse
    // normally (see above), a lock here.
    let short = broken
        .try_acquire("unchecked-short", Duration::from_millis(2))
        .await
        .unwrap()
        .expect("not busy");
    drop(short);

    let ttl = Duration::from_secs(2);
    // ttl − (ttl × 0.01 + 2 ms): the most a checked lock can ever show.
    let margin = ttl.mul_f64(0.01) + Duration::from_millis(2);
    let checked_max = ttl - margin;
    let before = std::time::Instant::now();
    let mut lock = broken.acquire("unchecked", ttl).await.unwrap();
    let validity = lock.validity();
    assert!(
        validity > checked_max,
        "validity {validity:?} after {:?}",
        before.elapsed()
    );
    assert!(validity <= ttl, "{validity:?}");
    lock.extend(ttl).await.unwrap();
    let validity = lock.validity();
    assert!(validity > checked_max, "extended validity {validity:?}");
    lock.release().await.unwrap();

    // The same steps with the check: ttl − elapsed − margin, never more
    // than ttl − margin.
    let checked = client(&nodes).await;
    let mut lock = checked.acquire("checked", ttl).await.unwrap();
    assert!(lock.validity() <= checked_max, "{:?}", lock.validity());
    lock.extend(ttl).await.unwrap();
    assert!(lock.validity() <= checked_max, "{:?}", lock.validity());
    lock.release().await.unwrap();
}
