//! Contention within one process: attempts on the same lock name from many
//! tasks reach every node in the same order, so the nodes never split their
//! grants between attempts that all fail.

mod common;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, five};
use redlock_testkit::Node;

/// `acquire_granted` from the node's `INFO redlock`.
fn grants(node: &Node) -> u64 {
    let mut con = node.connection();
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut con)
        .expect("INFO redlock");
    info.lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.ends_with("acquire_granted"))
        })
        .and_then(|(_, v)| v.trim().parse().ok())
        .expect("acquire_granted in INFO redlock")
}

/// 16 tasks `try_acquire` one key and release whatever they get. Every
/// grant a node hands out belongs to an attempt that succeeded: at most
/// five per success (or per attempt that ended in an error). (Interleaved per node, two attempts queued at the same
/// time from the two worker threads, or an attempt and the holder's
/// RELEASE, each won some nodes and both failed: 0.02–0.15 grants per
/// failed attempt before the rounds on one name were queued in one order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_tasks_of_one_process_never_split_the_grants() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let errors = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (r, ok, failed, errors) = (redlock.clone(), ok.clone(), failed.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                match r.try_acquire("contended", Duration::from_secs(10)).await {
                    Ok(Some(lock)) => {
                        ok.fetch_add(1, Relaxed);
                        lock.release().await.expect("release");
                    }
                    Ok(None) => {
                        failed.fetch_add(1, Relaxed);
                    }
                    // A node that missed the timeout on a loaded machine:
                    // the attempt may have won some nodes (released since).
                    Err(e) => {
                        eprintln!("attempt failed: {e}");
                        errors.fetch_add(1, Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    // Let the background releases land before reading the counters.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let granted: u64 = nodes.iter().map(grants).sum();
    let (ok, failed, errors) = (ok.load(Relaxed), failed.load(Relaxed), errors.load(Relaxed));
    assert!(
        ok > 10 && failed > 100,
        "too little contention: {ok} ok, {failed} failed"
    );
    assert!(
        granted <= 5 * (ok + errors),
        "{granted} grants for {ok} successes and {errors} errors ({failed} busy attempts): \
         {} grants went to busy attempts",
        granted - 5 * (ok + errors)
    );
}
