//! Diagnostic for the contended row: 16 tasks `try_acquire` one key for a
//! few seconds, then the nodes' own counters (INFO redlock) tell what the
//! attempts did: grants per success, grants handed out to attempts that
//! failed (split votes and their leftovers), releases that found nothing.
//!
//! `REDLOCK_MODULE=target/release/libredlock.so cargo run --release -p redlock-bench --example contention_probe [secs]`

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_client::Redlock;
use redlock_testkit::{start_nodes, Node};

const TASKS: usize = 16;
const TTL: Duration = Duration::from_secs(10);

fn counters(node: &Node) -> [u64; 4] {
    let mut con = node.connection();
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut con)
        .unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.ends_with(name)))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0)
    };
    [
        field("acquire_granted"),
        field("acquire_busy"),
        field("release_ok"),
        field("release_missed"),
    ]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let nodes = start_nodes(5, &Node::builder());
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let redlock = Redlock::builder(urls).build().await?;
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (r, ok, failed) = (redlock.clone(), ok.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                match r.try_acquire("probe", TTL).await {
                    Ok(Some(lock)) => {
                        ok.fetch_add(1, Relaxed);
                        let _ = lock.release().await;
                    }
                    Ok(None) => {
                        failed.fetch_add(1, Relaxed);
                    }
                    Err(e) => eprintln!("{e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut sum = [0u64; 4];
    for n in &nodes {
        for (s, c) in sum.iter_mut().zip(counters(n)) {
            *s += c;
        }
    }
    let (ok, failed) = (ok.load(Relaxed) as f64, failed.load(Relaxed) as f64);
    let [granted, busy, released, missed] = sum.map(|v| v as f64);
    println!(
        "ok/s {:.0}  failed/s {:.0}  | per success: node grants {:.2}, node busy {:.2}, releases ok {:.2}, releases missed {:.2} | grants to failed attempts (≈ grants − 5×ok) per failed attempt {:.3}",
        ok / secs,
        failed / secs,
        granted / ok,
        busy / ok,
        released / ok,
        missed / ok,
        (granted - 5.0 * ok) / failed,
    );
    Ok(())
}
