//! Leader hand-off: from the leader's resign to the next leader's first
//! fenced write, p50 and p99, measured in the same run on the same machine
//! for three elections:
//!
//! - `redlock_client::Election::campaign` on five local nodes (the waiting
//!   candidate is woken by the nodes); the fenced write is `REDLOCK.FENCED`
//!   on a sixth node holding the resource;
//! - etcd's v3 election (`etcd.rs`) on a single-member etcd, when an `etcd`
//!   binary is on `PATH` (or in `ETCD_BIN`): the waiting candidate's campaign
//!   returns when etcd's watch sees the leader key deleted; the fenced write
//!   is a txn that puts only while the new leader's key exists with its
//!   create revision (etcd's epoch). etcd fsyncs its WAL on every write (the
//!   bench does not pass `--unsafe-no-fsync`), so it runs twice: its data
//!   directory on the disk, then on tmpfs;
//! - a candidate polling `try_acquire` every 100 ms on the same five nodes,
//!   at a random phase to the release.
//!
//! Figures, not pass/fail. `make bench-election`, or
//! `REDLOCK_MODULE=target/release/libredlock.so cargo run --release -p redlock-bench --features etcd-baseline --example election_handoff [rounds]` (or `make bench-election`)

mod etcd;

use std::time::{Duration, Instant};

use redlock_client::{LockInfo, Redlock};
use redlock_testkit::{start_nodes, Node};

use etcd::{Candidate, DataDir, Etcd};

const TTL: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(100);
/// How long the leader leads before it resigns, so that the next candidate
/// is waiting when it does: queued on the nodes, or in etcd watching the
/// leader key with a watcher already caught up. etcd's campaign watches from
/// the revision it read, a watcher that starts "unsynced" and is caught up
/// by a loop that runs every 100 ms; a resign before that is delivered on the
/// loop's next turn (about 70 ms at p50 with a 20 ms lead), which a real
/// hand-off, after a term of seconds, never pays. Every side gets the same
/// lead.
const LEAD: Duration = Duration::from_millis(250);

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

/// p50 and p99 of one side's hand-offs.
#[derive(Clone, Copy)]
struct Figures {
    p50: Duration,
    p99: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(name: &str, mut samples: Vec<Duration>) -> Figures {
    samples.sort();
    let f = Figures {
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
    };
    println!(
        "{name:<40} p50 {:>8.2} ms   p99 {:>8.2} ms   ({} hand-offs)",
        ms(f.p50),
        ms(f.p99),
        samples.len()
    );
    f
}

fn ratio(name: &str, num: Figures, den: Figures) {
    println!(
        "{name:<40} p50 {:>6.2}x      p99 {:>6.2}x",
        num.p50.as_secs_f64() / den.p50.as_secs_f64().max(1e-9),
        num.p99.as_secs_f64() / den.p99.as_secs_f64().max(1e-9)
    );
}

async fn connect(node: &Node) -> redis::aio::MultiplexedConnection {
    redis::Client::open(node.url())
        .expect("resource url")
        .get_multiplexed_async_connection()
        .await
        .expect("resource connection")
}

/// `rounds` hand-offs of etcd's election on `etcd`.
async fn etcd_handoffs(etcd: &Etcd, rounds: usize) -> Result<Vec<Duration>, etcd::Error> {
    const ELECTION: &str = "bench";
    let leader_side = etcd.candidate();
    let next_side = etcd.candidate();
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let lease = leader_side.grant(TTL).await?;
        let leadership = leader_side.campaign(ELECTION, lease).await?;
        let next: Candidate = next_side.clone();
        let next_lease = next.grant(TTL).await?;
        let waiting = tokio::spawn(async move {
            let l = next.campaign(ELECTION, next_lease).await?;
            next.fenced_write(&l, "state", &l.rev.to_string()).await?;
            let wrote = Instant::now();
            next.resign(&l).await?;
            next.revoke(&l).await?;
            Ok::<_, etcd::Error>(wrote)
        });
        tokio::time::sleep(LEAD).await;
        // The next candidate's key is there (it waits behind the leader's).
        let deadline = Instant::now() + Duration::from_secs(5);
        while leader_side.candidates(ELECTION).await? < 2 {
            if Instant::now() > deadline {
                return Err("the next candidate never queued in etcd".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let resigned = Instant::now();
        leader_side.resign(&leadership).await?;
        let wrote = waiting.await??;
        leader_side.revoke(&leadership).await?;
        samples.push(wrote - resigned);
    }
    Ok(samples)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
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
        tokio::time::sleep(LEAD).await;
        let resigned = Instant::now();
        leadership.resign().await;
        let wrote = waiting.await??;
        election_samples.push(wrote - resigned);
    }

    // etcd's election, its data directory on the disk and then on tmpfs.
    let mut etcd_samples = Vec::new();
    match etcd::etcd_binary() {
        None => println!("etcd: no `etcd` binary (ETCD_BIN, or PATH): the etcd baseline is skipped, polling only"),
        Some(bin) => {
            for data_dir in [DataDir::Disk, DataDir::Tmpfs] {
                if !data_dir.available() {
                    println!("etcd: no {data_dir:?} data directory here: skipped");
                    continue;
                }
                let etcd = Etcd::start(&bin, data_dir).await?;
                println!(
                    "etcd: {} pid {} at {}, data dir on {data_dir:?}",
                    bin.display(),
                    etcd.pid(),
                    etcd.url()
                );
                etcd_samples.push((data_dir, etcd_handoffs(&etcd, rounds).await?));
            }
        }
    }

    // Baseline: the next candidate polls try_acquire every 100 ms, its
    // tries at a random phase to the release (with a fixed phase the lead
    // would decide the wait: 250 ms of lead is 50 ms before the third try).
    let mut polling_samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let lock = leader_client.acquire("bench-poll", TTL).await?;
        let next = next_client.clone();
        let mut con = connect(&resource).await;
        let phase = POLL.mul_f64(rand::random::<f64>());
        let waiting = tokio::spawn(async move {
            tokio::time::sleep(phase).await;
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
        tokio::time::sleep(LEAD).await;
        let released = Instant::now();
        lock.release().await?;
        let wrote = waiting.await??;
        polling_samples.push(wrote - released);
    }

    println!();
    println!("leader hand-off: resign/release -> next leader's first fenced write ({rounds} rounds each)");
    println!(
        "durability: the redlock nodes keep their state in memory (the test kit's nodes: no RDB \
         snapshots, no AOF)"
    );
    if !etcd_samples.is_empty() {
        println!(
            "durability: etcd fsyncs its WAL on every write (no --unsafe-no-fsync): on the disk \
             that is a real fsync, on tmpfs it returns at once"
        );
    }
    let redlock = report("redlock Election (woken by nodes)", election_samples);
    let etcd: Vec<(DataDir, Figures)> = etcd_samples
        .into_iter()
        .map(|(d, s)| {
            let name = match d {
                DataDir::Disk => "etcd election (data dir on disk)",
                DataDir::Tmpfs => "etcd election (data dir on tmpfs)",
            };
            (d, report(name, s))
        })
        .collect();
    let polling = report("polling try_acquire every 100 ms", polling_samples);
    for (d, e) in &etcd {
        let name = match d {
            DataDir::Disk => "ratio redlock / etcd (disk)",
            DataDir::Tmpfs => "ratio redlock / etcd (tmpfs)",
        };
        ratio(name, redlock, *e);
    }
    ratio("ratio redlock / polling", redlock, polling);
    Ok(())
}
