//! The three implementations of the client sections (redlock-client, the
//! hand-written Redlock, the PING floor), connected to the same nodes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_bench::floor::PingFloor;
use redlock_bench::handwritten::HandRedlock;
use redlock_bench::workload::{self, Outcome, RunResult, Window};
use redlock_testkit::Node;

use crate::client::ClientLocker;
use crate::plan::{Impl, Plan};

/// Lease of every lock the client workloads take.
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// A single measurement that takes longer than its window plus this fails.
pub(crate) const MEASUREMENT_SLACK: Duration = Duration::from_secs(60);

pub(crate) fn addr_of(node: &Node) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], node.port()))
}

pub(crate) async fn timed<T>(
    what: &str,
    window: Window,
    fut: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let limit = window.warmup + window.duration + MEASUREMENT_SLACK;
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("{what}: no result within {limit:?}"))?
}

/// The three implementations of the client sections, connected.
pub(crate) struct Lockers {
    pub(crate) pids: Vec<u32>,
    pub(crate) client: Option<ClientLocker>,
    pub(crate) hand: Option<HandRedlock>,
    pub(crate) floor: Option<PingFloor>,
}

impl Lockers {
    pub(crate) async fn connect(
        urls: &[String],
        pids: &[u32],
        plan: &Plan,
    ) -> Result<Self, String> {
        Ok(Lockers {
            pids: pids.to_vec(),
            client: if plan.has(Impl::Client) {
                Some(ClientLocker::connect(urls).await?)
            } else {
                None
            },
            hand: if plan.has(Impl::Hand) {
                Some(
                    HandRedlock::connect(urls)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            } else {
                None
            },
            floor: if plan.has(Impl::Floor) {
                Some(PingFloor::connect(urls).await.map_err(|e| e.to_string())?)
            } else {
                None
            },
        })
    }
}

pub(crate) fn keys(prefix: &str, n: usize) -> Arc<Vec<String>> {
    Arc::new((0..n).map(|i| format!("{prefix}:{i}")).collect())
}

/// What an operation's latency covers in [`own_key_cycles`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timed {
    /// Acquire and release.
    Cycle,
    /// The acquire only (the release that follows is not timed).
    Acquire,
}

/// One lock+unlock cycle per operation on `tasks` tasks, each on its own
/// key (named after `prefix`). The floor has no acquire of its own: it can
/// only be timed per cycle.
pub(crate) async fn own_key_cycles(
    l: &Lockers,
    imp: Impl,
    tasks: usize,
    window: Window,
    prefix: &str,
    timing: Timed,
) -> Result<RunResult, String> {
    let keys = keys(&format!("{prefix}:{imp:?}"), tasks);
    let what = format!("{prefix} {}", imp.label());
    let acquire_only = timing == Timed::Acquire;
    match imp {
        Impl::Client => {
            let c = l.client.clone().ok_or("no client")?;
            timed(
                &what,
                window,
                workload::run(tasks, window, &l.pids, move |task| {
                    let (c, keys) = (c.clone(), keys.clone());
                    async move {
                        let t = Instant::now();
                        let lock = c.acquire(&keys[task], TTL).await?;
                        let acquired = t.elapsed();
                        c.release(lock).await?;
                        let latency = if acquire_only { acquired } else { t.elapsed() };
                        Ok(Outcome { ok: true, latency })
                    }
                }),
            )
            .await
        }
        Impl::Hand => {
            let h = l.hand.clone().ok_or("no hand-written")?;
            timed(
                &what,
                window,
                workload::run(tasks, window, &l.pids, move |task| {
                    let (h, keys) = (h.clone(), keys.clone());
                    async move {
                        let t = Instant::now();
                        let key = &keys[task];
                        let lock = h.acquire(key, TTL).await.map_err(|e| e.to_string())?;
                        let acquired = t.elapsed();
                        h.release(key, &lock).await.map_err(|e| e.to_string())?;
                        let latency = if acquire_only { acquired } else { t.elapsed() };
                        Ok(Outcome { ok: true, latency })
                    }
                }),
            )
            .await
        }
        Impl::Floor if acquire_only => Err("the floor has no acquire".into()),
        Impl::Floor => {
            let f = l.floor.clone().ok_or("no floor")?;
            timed(
                &what,
                window,
                workload::run(tasks, window, &l.pids, move |_| {
                    let f = f.clone();
                    async move {
                        let t = Instant::now();
                        f.cycle().await.map_err(|e| e.to_string())?;
                        Ok(Outcome {
                            ok: true,
                            latency: t.elapsed(),
                        })
                    }
                }),
            )
            .await
        }
    }
}
