//! Leader hand-off: from the leader's `resign()` to the next leader's first
//! fenced write on a resource, p50 and p99, for `Election::campaign`
//! (woken by the nodes) against a candidate that polls `try_acquire` every
//! 100 ms, measured in the same run on five local nodes. Figures, not
//! pass/fail.
//!
//! `REDLOCK_MODULE=target/release/libredlock.so cargo run --release -p redlock-bench --example election_handoff [rounds]`

use std::time::{Duration, Instant};

use redlock_client::{LockInfo, Redlock};
use redlock_testkit::{start_nodes, Node};

const TTL: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(100);

async fn fenced_write(
    info: &LockInfo,
    con: &mut redis::aio::MultiplexedConnection,
) -> Result<(), redlock_client::Error> {
    let mut set = redis::cmd("SET");
    set.arg("state").arg(info.token());
    let guard = format!("fence:{}", info.key());
    info.fenced::<()>(con, &guard, &set).await
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "{name:<28} p50 {:>8.2} ms   p99 {:>8.2} ms   ({} hand-offs)",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        samples.len()
    );
    p50
}

async fn connect(node: &Node) -> redis::aio::MultiplexedConnection {
    redis::Client::open(node.url())
        .expect("resource url")
        .get_multiplexed_async_connection()
        .await
        .expect("resource connection")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let nodes = start_nodes(5, &Node::builder());
    let resource = Node::start();
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let leader_client = Redlock::builder(urls.clone()).build().await?;
    let next_client = Redlock::builder(urls).build().await?;

    // Election: the next candidate campaigns (blocked on the nodes) while
    // the leader leads; the leader resigns.
    let mut election_samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let leadership = leader_client.election("bench").campaign(TTL).await?;
        let next = next_client.clone();
        let mut con = connect(&resource).await;
        let waiting = tokio::spawn(async move {
            let l = next.election("bench").campaign(TTL).await?;
            fenced_write(l.info(), &mut con).await?;
            let wrote = Instant::now();
            l.resign().await;
            Ok::<_, redlock_client::Error>(wrote)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let resigned = Instant::now();
        leadership.resign().await;
        let wrote = waiting.await??;
        election_samples.push(wrote - resigned);
    }

    // Baseline: the next candidate polls try_acquire every 100 ms.
    let mut polling_samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let lock = leader_client.acquire("bench-poll", TTL).await?;
        let next = next_client.clone();
        let mut con = connect(&resource).await;
        let waiting = tokio::spawn(async move {
            loop {
                if let Some(l) = next.try_acquire("bench-poll", TTL).await? {
                    fenced_write(l.info(), &mut con).await?;
                    let wrote = Instant::now();
                    l.release().await?;
                    return Ok::<_, redlock_client::Error>(wrote);
                }
                tokio::time::sleep(POLL).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        lock.release().await?;
        let wrote = waiting.await??;
        polling_samples.push(wrote - released);
    }

    println!("leader hand-off: resign/release -> next leader's first fenced write");
    let e = report("election (woken by nodes)", election_samples);
    let p = report("polling try_acquire 100 ms", polling_samples);
    println!(
        "ratio p50 polling / election: {:.1}x",
        p.as_secs_f64() / e.as_secs_f64().max(1e-9)
    );
    Ok(())
}
