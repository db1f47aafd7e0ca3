//! The three implementations of the client sections (redlock-client, the
//! hand-written Redlock, the PING floor), connected to the same nodes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use redlock_bench::floor::PingFloor;
use redlock_bench::handwritten::HandRedlock;
use redlock_bench::workload::Window;
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
