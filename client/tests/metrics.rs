//! The client's metrics (`redlock_client::metrics`) after real operations
//! on five real nodes, read back from a recorder local to the test
//! (`metrics::with_local_recorder` around a current-thread runtime, so
//! that every task of the test records into it and tests running in
//! parallel do not mix).

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redlock_client::metrics::{
    ACQUIRE_SECONDS, ACQUISITIONS, EXTENSIONS, HOLD_SECONDS, LOCKS_LOST, NODE_ERRORS,
    STALE_REFUSALS, WAIT_SECONDS, WRITE_BACKS,
};
use redlock_client::{Error, Redlock, RetryPolicy};

use common::{five, urls, CONNECT_TIMEOUT, NODE_TIMEOUT};

/// Every metric recorded: `(name, sorted "label=value" list)` → the
/// counter's value, or the histogram's number of samples.
type Recorded = BTreeMap<(String, Vec<String>), u64>;

/// Runs `test` on a current-thread runtime with a recorder of its own and
/// returns what it recorded, with the test's value.
fn recorded<F: Future>(test: impl FnOnce() -> F) -> (Recorded, F::Output) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let value = metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    let mut out = Recorded::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let value = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(samples) => samples.len() as u64,
            DebugValue::Gauge(_) => panic!("the client records no gauges: {key:?}"),
        };
        out.insert((key.name().to_string(), labels), value);
    }
    (out, value)
}

/// The value recorded for `name` with exactly `labels` (0 when none).
fn get(recorded: &Recorded, name: &str, labels: &[&str]) -> u64 {
    let mut labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    labels.sort();
    recorded
        .get(&(name.to_string(), labels))
        .copied()
        .unwrap_or(0)
}

/// The sum of `name` over every label set.
fn total(recorded: &Recorded, name: &str) -> u64 {
    recorded
        .iter()
        .filter(|((n, _), _)| n == name)
        .map(|(_, v)| v)
        .sum()
}

async fn client_with(urls: Vec<String>, lock_names: bool, clock_floor: bool) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .clock_floor(clock_floor)
        .metrics_lock_names(lock_names)
        .build()
        .await
        .expect("build client")
}

/// Granted, busy and timed-out acquisitions, the waits, holds, extensions
/// and a lock lost, each counted once per event and without a `lock` label.
#[test]
fn acquisitions_waits_holds_extensions_and_losses_are_counted() {
    let nodes = five();
    let (m, ()) = recorded(|| async move {
        let redlock = client_with(urls(&nodes), false, true).await;
        let ttl = Duration::from_secs(5);

        // Granted, then busy for another owner.
        let mut a = redlock.try_acquire("k", ttl).await.unwrap().expect("free");
        assert!(redlock.try_acquire("k", ttl).await.unwrap().is_none());
        a.extend(ttl).await.unwrap();
        assert!(a.release().await.unwrap());

        // An extension after the lease ran out: failed, and the lock lost
        // (once, though the release finds it gone as well).
        let mut short = redlock
            .acquire("short", Duration::from_millis(100))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(matches!(short.extend(ttl).await, Err(Error::Lapsed { .. })));
        assert!(matches!(short.extend(ttl).await, Err(Error::Lapsed { .. })));
        assert!(!short.release().await.unwrap());

        // A wait that runs out (one busy attempt, then the wait), and one
        // that gets the lock once its holder lets go.
        let held = redlock.try_acquire("w", ttl).await.unwrap().expect("free");
        let waited = redlock
            .acquire_wait("w", ttl, Duration::from_millis(200))
            .await;
        assert!(matches!(waited, Err(Error::Busy { .. })), "{waited:?}");
        let (got, released) = tokio::join!(
            redlock.acquire_wait("w", ttl, Duration::from_secs(10)),
            async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                held.release().await
            }
        );
        assert!(released.unwrap());
        let got = got.unwrap();
        assert!(got.release().await.unwrap());
    });

    // Attempts: a, short, held, the last wait's grant; the busy try and
    // the first wait's attempt (the second wait's first attempt may or may
    // not have found the lock still held: counted as what it was).
    assert_eq!(get(&m, ACQUISITIONS, &["outcome=granted"]), 4, "{m:#?}");
    let busy = get(&m, ACQUISITIONS, &["outcome=busy"]);
    assert!((2..=3).contains(&busy), "{m:#?}");
    assert_eq!(get(&m, ACQUISITIONS, &["outcome=timeout"]), 1, "{m:#?}");
    assert_eq!(get(&m, ACQUIRE_SECONDS, &["outcome=granted"]), 4, "{m:#?}");
    assert_eq!(get(&m, ACQUIRE_SECONDS, &["outcome=busy"]), busy, "{m:#?}");
    // `acquire("short")` and the wait that got the lock; a try_acquire
    // does not wait.
    assert_eq!(get(&m, WAIT_SECONDS, &[]), 2, "{m:#?}");
    // a, short, held and got.
    assert_eq!(get(&m, HOLD_SECONDS, &[]), 4, "{m:#?}");
    assert_eq!(get(&m, EXTENSIONS, &["outcome=ok"]), 1, "{m:#?}");
    assert_eq!(get(&m, EXTENSIONS, &["outcome=failed"]), 2, "{m:#?}");
    assert_eq!(get(&m, LOCKS_LOST, &[]), 1, "{m:#?}");
    assert_eq!(total(&m, STALE_REFUSALS), 0, "{m:#?}");
    // No metric names a lock.
    assert!(
        m.keys()
            .all(|(_, labels)| labels.iter().all(|l| !l.starts_with("lock="))),
        "{m:#?}"
    );
}

/// A write-back when the nodes' counters disagree, and node errors by node
/// and kind: dead nodes, and a frozen node that times out.
#[test]
fn write_backs_and_node_errors_are_counted() {
    let mut nodes = five();
    // Node i's counter for "wb" at i: any three grants then carry three
    // different tokens, and the highest must be written back to the others.
    for (i, node) in nodes.iter().enumerate() {
        let mut con = node.connection();
        for n in 0..i {
            let owner = format!("setup-{n}");
            let token: u64 = redis::cmd("REDLOCK.ACQUIRE")
                .arg("wb")
                .arg(&owner)
                .arg(10_000)
                .query(&mut con)
                .unwrap();
            assert_eq!(token, n as u64 + 1);
            let released: u64 = redis::cmd("REDLOCK.RELEASE")
                .arg("wb")
                .arg(&owner)
                .query(&mut con)
                .unwrap();
            assert_eq!(released, 1);
        }
    }
    let node_urls = urls(&nodes);
    let redlock_urls = node_urls.clone();
    let (m, (client_nodes, token)) = recorded(|| async move {
        let redlock = client_with(redlock_urls, false, false).await;
        let lock = redlock.acquire("wb", Duration::from_secs(5)).await.unwrap();
        let token = lock.token();
        assert!(lock.release().await.unwrap());

        // Two nodes down: still granted, with their errors.
        nodes[3].kill();
        nodes[4].kill();
        let lock = redlock
            .acquire("down", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(lock.release().await.unwrap());
        // A third one frozen: no quorum, after its timeout.
        nodes[2].pause();
        let err = redlock
            .try_acquire("down", Duration::from_secs(5))
            .await
            .unwrap_err();
        nodes[2].resume();
        assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
        // The releases of the failed try reach (and fail on) the dead nodes
        // in the background, after the call returned: give them time to be
        // counted before the recorder is read (on a loaded machine they
        // were not yet).
        tokio::time::sleep(Duration::from_secs(1)).await;
        (redlock.nodes(), token)
    });
    assert!(token >= 3, "token {token}");
    assert_eq!(get(&m, WRITE_BACKS, &[]), 1, "{m:#?}");
    assert_eq!(get(&m, ACQUISITIONS, &["outcome=granted"]), 2, "{m:#?}");
    assert_eq!(get(&m, ACQUISITIONS, &["outcome=no_quorum"]), 1, "{m:#?}");

    // The node label is the member's URL without credentials.
    let node_label = |i: usize| format!("node={}", node_urls[i]);
    assert_eq!(client_nodes.len(), 5);
    let errors_of = |i: usize| -> u64 {
        m.iter()
            .filter(|((n, labels), _)| n == NODE_ERRORS && labels.contains(&node_label(i)))
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(errors_of(0) + errors_of(1), 0, "{m:#?}");
    // Each dead node failed the acquire, its release, the try and the
    // release of the failed try (connection errors, then "not connected"
    // while it reconnects in the background).
    for i in [3, 4] {
        // At least the acquire and the try; a release may be skipped on a
        // connection already known to be down (seen under load).
        assert!(errors_of(i) >= 2, "node {i}: {m:#?}");
        assert!(
            m.iter().all(|((n, labels), _)| n != NODE_ERRORS
                || !labels.contains(&node_label(i))
                || labels
                    .iter()
                    .any(|l| l == "kind=connection" || l == "kind=not_connected")),
            "{m:#?}"
        );
    }
    let frozen = node_label(2);
    assert!(
        get(&m, NODE_ERRORS, &[frozen.as_str(), "kind=timeout"]) >= 1,
        "{m:#?}"
    );
}

/// A fenced call refused as stale, and the `lock` label when the client
/// opted in.
#[test]
fn stale_refusals_and_the_opt_in_lock_label() {
    let nodes = five();
    let resource = nodes[0].url();
    let (m, ()) = recorded(|| async move {
        let redlock = client_with(urls(&nodes), true, true).await;
        let mut con = redis::Client::open(resource)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let a = redlock
            .acquire("job", Duration::from_millis(200))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let b = redlock
            .acquire("job", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(b.announce(&mut con, "job:fence").await.unwrap(), b.token());
        let mut set = redis::cmd("SET");
        set.arg("job:state").arg("late");
        let stale = a
            .fenced::<String>(&mut con, "job:fence", &set)
            .await
            .unwrap_err();
        assert!(matches!(stale, Error::Stale { .. }), "{stale:?}");
        assert!(b.release().await.unwrap());
        assert!(!a.release().await.unwrap());
    });
    assert_eq!(get(&m, STALE_REFUSALS, &["lock=job"]), 1, "{m:#?}");
    assert_eq!(
        get(&m, ACQUISITIONS, &["lock=job", "outcome=granted"]),
        2,
        "{m:#?}"
    );
    assert_eq!(get(&m, HOLD_SECONDS, &["lock=job"]), 2, "{m:#?}");
    // Node errors name nodes, never locks.
    assert!(
        m.keys()
            .filter(|(n, _)| n != NODE_ERRORS)
            .all(|(_, labels)| labels.iter().any(|l| l == "lock=job")),
        "{m:#?}"
    );
}
