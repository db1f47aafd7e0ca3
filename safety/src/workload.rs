//! The workload one worker process runs: client tasks that contend for the
//! keys, use the fenced resource with their token (read, then write the value
//! read plus one) and record every step.
//!
//! The runner starts worker processes by re-executing its own binary as
//! `safety worker SPEC-JSON`, so that a whole client process can be frozen
//! with SIGSTOP. Each worker stops by itself at the spec's deadline.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::clock::mono_ns;
use crate::history::{Event, Kind, Recorder};
use crate::resource::{RedisResource, ResourceClient};

/// Client options, including the test-only mutation switches.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClientOptions {
    /// Per-node timeout, ms.
    pub node_timeout_ms: u64,
    /// Pass the client's wall clock as FLOOR (default on).
    pub clock_floor: bool,
    /// Step 4, the write-back (off = mutant).
    pub write_back: bool,
    /// Step 5, the validity check (off = mutant; needs a client switch, see
    /// [`crate::mutants::disable_validity_check`]).
    pub validity_check: bool,
    /// Tasks take the lock with `acquire_wait`, waiting up to this many ms
    /// (none: one attempt with `try_acquire`).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            node_timeout_ms: 100,
            clock_floor: true,
            write_back: true,
            validity_check: true,
            wait_ms: None,
        }
    }
}

/// Where a client task stalls (a GC pause, a stopped VM) when told to.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PausePoint {
    /// After the ACQUIREs went out (first poll of the acquire future), before
    /// the replies are looked at.
    AfterSendAcquire,
    /// After the lock was acquired and its validity checked, before the token
    /// is used.
    BeforeUse,
    /// Between the resource read and the write.
    BetweenReadAndWrite,
}

impl PausePoint {
    /// Name used in fault events.
    pub fn name(self) -> &'static str {
        match self {
            PausePoint::AfterSendAcquire => "after_send_acquire",
            PausePoint::BeforeUse => "before_use",
            PausePoint::BetweenReadAndWrite => "between_read_and_write",
        }
    }
}

/// Client-pause plan of a worker: at most `max` pauses per worker, at least
/// `gap_ms` apart, each lasting a random time in `ms`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PausePlan {
    /// Where.
    pub point: PausePoint,
    /// Bounds of one pause, ms.
    pub ms: (u64, u64),
    /// Minimal time between two pause starts in this worker, ms.
    pub gap_ms: u64,
    /// Most pauses in this worker.
    pub max: u64,
}

/// Late copies of a holder's own ACQUIRE (the late-ACQUIRE sequence): in
/// `percent` of the holds, the task extends its lock to `extend_ms` (longer
/// than the acquisition's lease), then sends the ACQUIRE it took the lock
/// with again to every node, as a connection that resends a request or a
/// second route to the same server would deliver it late, and then keeps
/// using the lock for `hold_ms`, past the end of the first lease and inside
/// the extension. A node must not let the copy end the extended lease.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LateCopyPlan {
    /// The extension's lease, ms.
    pub extend_ms: u64,
    /// How long the task keeps the lock after the copies, ms.
    pub hold_ms: u64,
    /// Share of holds that do it, percent.
    pub percent: u32,
}

/// Everything a worker process needs; passed as JSON on its command line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// Worker index (`w<index>` in op ids).
    pub index: usize,
    /// Client tasks in this worker.
    pub tasks: usize,
    /// Node URLs (the fault proxies).
    pub nodes: Vec<String>,
    /// Members that are Redis Clusters, by their seed URLs (they come
    /// before `nodes` in the quorum).
    #[serde(default)]
    pub clusters: Vec<Vec<String>>,
    /// Address of the in-process fenced resource (when it is the one used).
    #[serde(default)]
    pub resource: Option<SocketAddr>,
    /// URL of the Redis-held fenced resource (when it is the one used).
    #[serde(default)]
    pub resource_url: Option<String>,
    /// Redis-held resource: reads go through `REDLOCK.FENCED` too (false:
    /// the mutant that reads unfenced).
    #[serde(default)]
    pub fenced_reads: bool,
    /// Keys to contend for.
    pub keys: Vec<String>,
    /// Lease of each acquisition, ms.
    pub ttl_ms: u64,
    /// Share of holds that extend the lease once, percent.
    pub extend_percent: u32,
    /// Time spent inside the critical section, between the resource read and
    /// write, as a range in ms (none: no extra time).
    #[serde(default)]
    pub hold_ms: Option<(u64, u64)>,
    /// Seed.
    pub seed: u64,
    /// Stop at this `CLOCK_MONOTONIC` time, ns.
    pub deadline_ns: u64,
    /// History file to write.
    pub out: PathBuf,
    /// Client options.
    pub client: ClientOptions,
    /// Client pauses, if this run injects them.
    pub pauses: Option<PausePlan>,
    /// Late copies of the holders' ACQUIREs, if this run sends them.
    #[serde(default)]
    pub late_copies: Option<LateCopyPlan>,
    /// First fault id this worker may use (fault ids must be unique in a run).
    pub fault_id_base: u64,
    /// Short-lived names: the keys are used half at a time, the halves
    /// taking turns every this many ms (on `CLOCK_MONOTONIC`, so every
    /// worker agrees), so each name lies idle for a whole phase and the
    /// nodes can reclaim it before it is used again.
    #[serde(default)]
    pub key_phase_ms: Option<u64>,
    /// The quorum is one Sentinel member: the master's name and the
    /// sentinels' URLs (`nodes` and `clusters` are then empty).
    #[serde(default)]
    pub sentinel: Option<(String, Vec<String>)>,
    /// The tasks are candidates of an election over the first key
    /// ([`crate::election`]) instead of lock users.
    #[serde(default)]
    pub election: bool,
    /// Election workload: a file where a candidate writes its worker's
    /// index when it is elected, so that the runner can pause the leader's
    /// process.
    #[serde(default)]
    pub leader_file: Option<PathBuf>,
}

/// The key a task uses next: any key, or with [`WorkerSpec::key_phase_ms`]
/// one of the half in use during the current phase.
fn pick_key<'a>(spec: &'a WorkerSpec, rng: &mut ChaCha8Rng) -> &'a String {
    let n = spec.keys.len();
    match spec.key_phase_ms {
        Some(phase_ms) if n >= 2 && phase_ms > 0 => {
            let half = n / 2;
            let turn = (mono_ns() / (phase_ms * 1_000_000)) % 2;
            let base = if turn == 0 { 0 } else { half };
            let len = if turn == 0 { half } else { n - half };
            &spec.keys[base + rng.gen_range(0..len)]
        }
        _ => &spec.keys[rng.gen_range(0..n)],
    }
}

/// Builds the client for `spec`, applying the mutation switches.
pub async fn build_client(
    clusters: &[Vec<String>],
    nodes: &[String],
    opts: &ClientOptions,
) -> Result<redlock_client::Redlock, String> {
    let members = clusters
        .iter()
        .map(|seeds| redlock_client::Member::cluster(seeds.iter().cloned()))
        .chain(
            nodes
                .iter()
                .map(|n| redlock_client::Member::node(n.clone())),
        );
    let mut b = redlock_client::Redlock::builder(members)
        .node_timeout(Duration::from_millis(opts.node_timeout_ms))
        .connect_timeout(Duration::from_millis(500))
        .retry(redlock_client::RetryPolicy::no_retry())
        .clock_floor(opts.clock_floor);
    if !opts.write_back {
        b = b.unsafe_disable_write_back();
    }
    if !opts.validity_check {
        b = crate::mutants::disable_validity_check(b)?;
    }
    b.build().await.map_err(|e| e.to_string())
}

/// The client of a run whose quorum is one Sentinel member (N = 1).
pub async fn build_sentinel_client(
    name: &str,
    sentinels: &[String],
    opts: &ClientOptions,
) -> Result<redlock_client::Redlock, String> {
    redlock_client::Redlock::builder([redlock_client::Member::sentinel(
        name,
        sentinels.iter().cloned(),
    )])
    .node_timeout(Duration::from_millis(opts.node_timeout_ms))
    .connect_timeout(Duration::from_millis(500))
    .retry(redlock_client::RetryPolicy::no_retry())
    .clock_floor(opts.clock_floor)
    .build()
    .await
    .map_err(|e| e.to_string())
}

/// A failed acquisition's error as the history names it.
pub fn classify(e: &redlock_client::Error) -> String {
    use redlock_client::Error as E;
    match e {
        E::Busy { .. } => "busy".into(),
        E::NoQuorum { .. } => "no_quorum".into(),
        E::RestartGuard { .. } => "grace".into(),
        E::ExpiredBeforeUse { .. } => "expired".into(),
        E::Lost { .. } | E::Lapsed { .. } => "lost".into(),
        other => format!("other: {other}"),
    }
}

struct Pauser {
    plan: Option<PausePlan>,
    /// Next allowed start (ns) and pauses left, shared by the worker's tasks.
    next_ns: AtomicU64,
    left: AtomicU64,
    next_id: AtomicU64,
}

impl Pauser {
    /// Claims a pause at `point` when the plan allows one now.
    fn claim(&self, point: PausePoint, rng: &mut ChaCha8Rng) -> Option<(u64, Duration)> {
        let plan = self.plan.as_ref().filter(|p| p.point == point)?;
        let now = mono_ns();
        let next = self.next_ns.load(Ordering::SeqCst);
        if now < next
            || self
                .next_ns
                .compare_exchange(
                    next,
                    now + plan.gap_ms * 1_000_000,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_err()
        {
            return None;
        }
        if self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| l.checked_sub(1))
            .is_err()
        {
            return None;
        }
        let ms = rng.gen_range(plan.ms.0..=plan.ms.1.max(plan.ms.0));
        Some((
            self.next_id.fetch_add(1, Ordering::SeqCst),
            Duration::from_millis(ms),
        ))
    }

    async fn maybe_pause(
        &self,
        point: PausePoint,
        rng: &mut ChaCha8Rng,
        rec: &Recorder,
        client: &str,
    ) {
        if let Some((id, d)) = self.claim(point, rng) {
            rec.record(Kind::FaultStart {
                id,
                kind: format!("client_pause_{}", point.name()),
                target: client.to_string(),
                detail: format!("{} ms", d.as_millis()),
                timing: true,
            });
            tokio::time::sleep(d).await;
            rec.record(Kind::FaultStop { id });
        }
    }
}

/// Runs a worker to its deadline. Returns the number of acquisitions.
pub async fn run_worker(spec: WorkerSpec) -> Result<u64, String> {
    let rec =
        Arc::new(Recorder::create(&spec.out).map_err(|e| format!("{}: {e}", spec.out.display()))?);
    let client = match &spec.sentinel {
        Some((name, sentinels)) => build_sentinel_client(name, sentinels, &spec.client).await?,
        None => build_client(&spec.clusters, &spec.nodes, &spec.client).await?,
    };
    let pauser = Arc::new(Pauser {
        plan: spec.pauses.clone(),
        next_ns: AtomicU64::new(mono_ns() + 300_000_000),
        left: AtomicU64::new(spec.pauses.as_ref().map_or(0, |p| p.max)),
        next_id: AtomicU64::new(spec.fault_id_base),
    });
    let spec = Arc::new(spec);
    let mut handles = Vec::new();
    for task in 0..spec.tasks {
        let (spec, rec, client, pauser) = (
            Arc::clone(&spec),
            Arc::clone(&rec),
            client.clone(),
            Arc::clone(&pauser),
        );
        handles.push(tokio::spawn(async move {
            client_task(task, &spec, &rec, &client, &pauser).await
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.map_err(|e| e.to_string())??;
    }
    rec.flush().map_err(|e| e.to_string())?;
    Ok(total)
}

async fn client_task(
    task: usize,
    spec: &WorkerSpec,
    rec: &Recorder,
    client: &redlock_client::Redlock,
    pauser: &Pauser,
) -> Result<u64, String> {
    let name = format!("w{}.c{}", spec.index, task);
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed ^ ((spec.index as u64) << 32) ^ task as u64);
    let mut resource: Option<Res> = None;
    // Connections of this task's own to every node, for the late copies.
    let mut copy_routes: Vec<Option<redis::aio::MultiplexedConnection>> =
        vec![None; spec.nodes.len()];
    let mut next_copy_id = spec.fault_id_base + 500_000 + 1_000 * task as u64;
    let ttl = Duration::from_millis(spec.ttl_ms);
    let mut acquired = 0u64;
    let mut n = 0u64;
    while mono_ns() < spec.deadline_ns {
        if resource.is_none() {
            resource = Res::connect(spec).await?;
            if resource.is_none() {
                // The resource server is being restarted: try again.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        }
        n += 1;
        let op = format!("{name}.{n}");
        let key = pick_key(spec, &mut rng).clone();
        let result = if let Some(wait_ms) = spec.client.wait_ms {
            let called = mono_ns();
            let result = client
                .acquire_wait(&key, ttl, Duration::from_millis(wait_ms))
                .await;
            // The round that got the lock started after the wait: the
            // history takes that start (on its own clock) as the invocation.
            // The instant is read before the history clock: a stop of this
            // process between the two readings moves the start later (the
            // check gets looser), never earlier (no false alarm).
            let started = match &result {
                Ok(lock) => {
                    let since_start = lock.started_at().elapsed();
                    mono_ns()
                        .saturating_sub(since_start.as_nanos() as u64)
                        .max(called)
                }
                Err(_) => called,
            };
            rec.record_at(&Event {
                t: started,
                kind: Kind::AcquireInvoke {
                    op: op.clone(),
                    client: name.clone(),
                    key: key.clone(),
                    ttl_ms: spec.ttl_ms,
                    first_poll: Some(started),
                },
            });
            match result {
                Ok(lock) => Ok(Some(lock)),
                Err(redlock_client::Error::Busy { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        } else {
            let mut fut = Box::pin(client.try_acquire(&key, ttl));
            // Stamped right before the client reads its own clock (first
            // poll); the line is written after, so that no file write sits
            // between the stamp and the start of the acquisition.
            let invoked = mono_ns();
            let first =
                std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await;
            let first_poll = mono_ns();
            rec.record_at(&Event {
                t: invoked,
                kind: Kind::AcquireInvoke {
                    op: op.clone(),
                    client: name.clone(),
                    key: key.clone(),
                    ttl_ms: spec.ttl_ms,
                    first_poll: Some(first_poll),
                },
            });
            match first {
                std::task::Poll::Ready(r) => r,
                std::task::Poll::Pending => {
                    pauser
                        .maybe_pause(PausePoint::AfterSendAcquire, &mut rng, rec, &name)
                        .await;
                    fut.await
                }
            }
        };
        let mut lock = match result {
            Ok(Some(lock)) => {
                let t = mono_ns();
                let validity = lock.validity();
                rec.record_at(&Event {
                    t,
                    kind: Kind::AcquireOk {
                        op: op.clone(),
                        client: name.clone(),
                        key: key.clone(),
                        token: lock.token(),
                        validity_ns: validity.as_nanos() as u64,
                        nodes: Vec::new(),
                    },
                });
                acquired += 1;
                lock
            }
            Ok(None) => {
                rec.record(Kind::AcquireFail {
                    op,
                    client: name.clone(),
                    key,
                    error: "busy".into(),
                });
                tokio::time::sleep(Duration::from_micros(rng.gen_range(500..4_000))).await;
                continue;
            }
            Err(e) => {
                rec.record(Kind::AcquireFail {
                    op,
                    client: name.clone(),
                    key,
                    error: classify(&e),
                });
                tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
                continue;
            }
        };
        // An honest client checks the validity before it uses the token.
        let t = mono_ns();
        let validity = lock.validity();
        if !validity.is_zero() {
            rec.record_at(&Event {
                t,
                kind: Kind::Use {
                    op: op.clone(),
                    validity_ns: validity.as_nanos() as u64,
                },
            });
            pauser
                .maybe_pause(PausePoint::BeforeUse, &mut rng, rec, &name)
                .await;
            let token = lock.token();
            let res = resource.as_mut().ok_or("no resource")?;
            match res.read(rec, &op, &key, token).await {
                Ok(Some((value, version))) => {
                    pauser
                        .maybe_pause(PausePoint::BetweenReadAndWrite, &mut rng, rec, &name)
                        .await;
                    if let Some((low, high)) = spec.hold_ms {
                        let hold = rng.gen_range(low..=high.max(low));
                        tokio::time::sleep(Duration::from_millis(hold)).await;
                    }
                    let late_copy = spec
                        .late_copies
                        .as_ref()
                        .filter(|plan| rng.gen_range(0..100) < plan.percent);
                    if let Some(plan) = late_copy {
                        let extended = extend_recorded(&mut lock, plan.extend_ms, rec, &op).await;
                        if extended {
                            next_copy_id += 1;
                            rec.record(Kind::FaultStart {
                                id: next_copy_id,
                                kind: "late_acquire_copy".into(),
                                target: name.clone(),
                                detail: format!(
                                    "the {} ms ACQUIRE again, after an extension to {} ms",
                                    spec.ttl_ms, plan.extend_ms
                                ),
                                timing: false,
                            });
                            send_late_copies(spec, &mut copy_routes, &lock).await;
                            rec.record(Kind::FaultStop { id: next_copy_id });
                            tokio::time::sleep(Duration::from_millis(plan.hold_ms)).await;
                        }
                    } else if rng.gen_range(0..100) < spec.extend_percent {
                        let r = {
                            let mut fut = Box::pin(lock.extend(ttl));
                            let invoked = mono_ns();
                            let first = std::future::poll_fn(|cx| {
                                std::task::Poll::Ready(fut.as_mut().poll(cx))
                            })
                            .await;
                            rec.record_at(&Event {
                                t: invoked,
                                kind: Kind::ExtendInvoke {
                                    op: op.clone(),
                                    ttl_ms: spec.ttl_ms,
                                    first_poll: Some(mono_ns()),
                                },
                            });
                            match first {
                                std::task::Poll::Ready(r) => r,
                                std::task::Poll::Pending => fut.await,
                            }
                        };
                        let t = mono_ns();
                        let validity = lock.validity();
                        rec.record_at(&Event {
                            t,
                            kind: Kind::ExtendDone {
                                op: op.clone(),
                                ok: r.is_ok(),
                                validity_ns: if r.is_ok() {
                                    validity.as_nanos() as u64
                                } else {
                                    0
                                },
                            },
                        });
                    }
                    if let Err(e) = res.write(rec, &op, &key, token, value + 1, version).await {
                        resource = None;
                        let _ = e;
                    }
                }
                Ok(None) => {}
                Err(_) => resource = None,
            }
        }
        rec.record(Kind::ReleaseInvoke { op: op.clone() });
        let ok = matches!(lock.release().await, Ok(true));
        rec.record(Kind::ReleaseDone { op, ok });
    }
    Ok(acquired)
}

/// Extends `lock` to `ttl_ms`, recorded as the workload's extensions are;
/// true when it succeeded.
async fn extend_recorded(
    lock: &mut redlock_client::Lock,
    ttl_ms: u64,
    rec: &Recorder,
    op: &str,
) -> bool {
    let invoked = mono_ns();
    let r = lock.extend(Duration::from_millis(ttl_ms)).await;
    rec.record_at(&Event {
        t: invoked,
        kind: Kind::ExtendInvoke {
            op: op.to_string(),
            ttl_ms,
            first_poll: Some(invoked),
        },
    });
    let validity = lock.validity();
    rec.record(Kind::ExtendDone {
        op: op.to_string(),
        ok: r.is_ok(),
        validity_ns: if r.is_ok() {
            validity.as_nanos() as u64
        } else {
            0
        },
    });
    r.is_ok()
}

/// Sends `REDLOCK.ACQUIRE key owner ttl` — the request `lock` was taken
/// with, without its FLOOR (a renewal only raises the counter to it, and it
/// was at most the token) — to every node again, on connections of the
/// task's own; replies and errors are ignored, as a late copy's are.
async fn send_late_copies(
    spec: &WorkerSpec,
    routes: &mut [Option<redis::aio::MultiplexedConnection>],
    lock: &redlock_client::Lock,
) {
    let wait = Duration::from_millis(spec.client.node_timeout_ms.max(50));
    for (url, route) in spec.nodes.iter().zip(routes.iter_mut()) {
        if route.is_none() {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                continue;
            };
            if let Ok(Ok(con)) =
                tokio::time::timeout(wait, client.get_multiplexed_async_connection()).await
            {
                *route = Some(con);
            }
        }
        let Some(con) = route.as_mut() else {
            continue;
        };
        let mut cmd = redis::cmd("REDLOCK.ACQUIRE");
        cmd.arg(lock.key()).arg(lock.owner()).arg(spec.ttl_ms);
        let sent = tokio::time::timeout(wait, cmd.query_async::<redis::Value>(con)).await;
        if !matches!(sent, Ok(Ok(_))) {
            *route = None;
        }
    }
}

/// The fenced resource as a client task uses it.
pub enum Res {
    /// The in-process server (it records the operations itself).
    Tcp(ResourceClient),
    /// The Redis-held resource (the task records the operations).
    Redis(RedisResource),
}

impl Res {
    /// Connects to the spec's resource: `None` while the Redis-held
    /// resource does not answer (it is being restarted).
    pub async fn connect(spec: &WorkerSpec) -> Result<Option<Res>, String> {
        match (&spec.resource_url, spec.resource) {
            (Some(url), _) => Ok(RedisResource::connect(url, spec.fenced_reads)
                .await
                .ok()
                .map(Res::Redis)),
            (None, Some(addr)) => match ResourceClient::connect(addr).await {
                Ok(c) => Ok(Some(Res::Tcp(c))),
                Err(e) => Err(format!("resource: {e}")),
            },
            (None, None) => Err("no resource".into()),
        }
    }

    /// Reads `key` with `token`: `Some((value, version))`, `None` when
    /// refused as stale.
    pub async fn read(
        &mut self,
        rec: &Recorder,
        op: &str,
        key: &str,
        token: u64,
    ) -> std::io::Result<Option<(u64, u64)>> {
        match self {
            Res::Tcp(c) => c.read(op, key, token).await,
            Res::Redis(c) => c.read(rec, op, key, token).await,
        }
    }

    /// Writes `value` to `key` with `token`, based on the version read;
    /// false when refused.
    pub async fn write(
        &mut self,
        rec: &Recorder,
        op: &str,
        key: &str,
        token: u64,
        value: u64,
        based_on: u64,
    ) -> std::io::Result<bool> {
        match self {
            Res::Tcp(c) => c.write(op, key, token, value, based_on).await,
            Res::Redis(c) => c.write(rec, op, key, token, value, based_on).await,
        }
    }
}
