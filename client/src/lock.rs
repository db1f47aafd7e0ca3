//! The public client: [`RedlockBuilder`], [`Redlock`], [`Lock`] and the
//! [`Redlock::with_lock`] guard.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;
use redis::Value;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::Instrument;

use crate::error::Error;
use crate::node::Node;
use crate::quorum::{Leftover, Quorum, Unanswered};
use crate::tls::TlsFiles;

/// Default bound on one node's reply.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default bound on opening a connection to a node.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default clock drift factor: 1 % of the TTL (plus 2 ms) is kept as margin.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Fixed part of the drift margin.
const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// How [`Redlock::acquire`] retries when the lock is busy, no quorum
/// answered or nodes are in their restart grace window.
///
/// Attempt `n + 1` starts `base_delay` plus a uniformly random
/// `0..=jitter` after attempt `n` failed (the random part keeps contending
/// clients from retrying in lock step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, at least 1.
    pub attempts: u32,
    /// Fixed pause between attempts.
    pub base_delay: Duration,
    /// Upper bound of the random pause added to `base_delay`.
    pub jitter: Duration,
}

impl Default for RetryPolicy {
    /// 3 attempts, 100 ms apart plus up to 100 ms of jitter.
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            base_delay: Duration::from_millis(100),
            jitter: Duration::from_millis(100),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub fn no_retry() -> Self {
        RetryPolicy {
            attempts: 1,
            ..Self::default()
        }
    }

    fn delay(&self) -> Duration {
        let jitter_us = self.jitter.as_micros().min(u64::MAX as u128) as u64;
        let extra = if jitter_us == 0 {
            0
        } else {
            rand::thread_rng().gen_range(0..=jitter_us)
        };
        self.base_delay + Duration::from_micros(extra)
    }
}

/// Options for a [`Redlock`]; made by [`Redlock::builder`].
#[derive(Clone, Debug)]
pub struct RedlockBuilder {
    urls: Vec<String>,
    node_timeout: Duration,
    connect_timeout: Duration,
    retry: RetryPolicy,
    drift_factor: f64,
    clock_floor: bool,
    write_back: bool,
    validity_check: bool,
    tls: TlsFiles,
}

impl RedlockBuilder {
    /// Bound on each node's reply to one command (default 100 ms). A dead
    /// or frozen node costs at most this much per call. Keep it well below
    /// the TTLs you use.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Bound on opening a connection (TCP, TLS, AUTH), at build time and for
    /// background reconnects (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts the CA certificate(s) in this PEM file for `rediss://` nodes,
    /// instead of the operating system's trust store: the nodes'
    /// certificates must be signed by it. Read by [`RedlockBuilder::build`],
    /// which fails naming the file when it is missing or holds no
    /// certificate.
    ///
    /// Certificate verification cannot be turned off: there is no such
    /// option, and `rediss://…#insecure` URLs are refused.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this client certificate (PEM, with any intermediate
    /// certificates after it) and private key (PEM) to `rediss://` nodes:
    /// mutual TLS, which Redis requires by default (`tls-auth-clients
    /// yes`). Read by [`RedlockBuilder::build`], which fails naming the
    /// file when one is missing or is not PEM of the right type.
    pub fn tls_client_cert(
        mut self,
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert_path.into(), key_path.into()));
        self
    }

    /// How [`Redlock::acquire`] retries (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Fraction of the TTL kept as margin for clock drift between the client
    /// and the nodes (default 0.01; 2 ms are always added). Must be in `0..1`.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Passes the client's wall clock, in microseconds since the Unix epoch,
    /// as `FLOOR` to every ACQUIRE (default: on). Tokens then keep
    /// increasing even when a node loses its counter (restart without
    /// persistence, FLUSHALL), as long as client clocks are roughly right.
    /// Tokens are then large numbers (around 1.7e15); with it off they count
    /// 1, 2, 3, …
    pub fn clock_floor(mut self, on: bool) -> Self {
        self.clock_floor = on;
        self
    }

    /// Turns off step 4 of the algorithm (the write-back). **Unsafe: tokens
    /// can go backwards.** Exists only so that a test can show why the step
    /// is needed.
    #[doc(hidden)]
    pub fn unsafe_disable_write_back(mut self) -> Self {
        self.write_back = false;
        self
    }

    /// Turns off step 5 of the algorithm (the validity check). **Unsafe: a
    /// deliberately broken variant for the safety suite's mutation checks.**
    /// Acquire and extend never fail with [`Error::ExpiredBeforeUse`], and
    /// the lock's deadline becomes the end of the acquisition (or
    /// extension) plus the full ttl, with nothing subtracted for the time
    /// the round took or for clock drift.
    #[doc(hidden)]
    pub fn unsafe_disable_validity_check(mut self) -> Self {
        self.validity_check = false;
        self
    }

    /// Checks the options and connects to every node in parallel.
    ///
    /// Fails with [`Error::InvalidArgument`] on a bad URL, no nodes or bad
    /// options, with [`Error::ModuleNotLoaded`] when a reachable node runs
    /// without the module, and with [`Error::NoQuorum`] when fewer than a
    /// majority of the nodes can be reached. Nodes that are down (a
    /// minority) are connected in the background. An even number of nodes
    /// works but is logged as a warning: it tolerates no more failures than
    /// one node fewer.
    pub async fn build(self) -> Result<Redlock, Error> {
        if self.urls.is_empty() {
            return Err(Error::InvalidArgument(
                "no nodes given: pass at least one redis:// URL (5 independent masters are the usual setup)".into(),
            ));
        }
        if self.node_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "node and connect timeouts must be above zero".into(),
            ));
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(Error::InvalidArgument(format!(
                "drift factor {} is outside 0..1",
                self.drift_factor
            )));
        }
        if self.retry.attempts == 0 {
            return Err(Error::InvalidArgument(
                "retry attempts must be at least 1".into(),
            ));
        }
        let tls = self.tls.load()?;
        let nodes = self
            .urls
            .iter()
            .map(|url| Node::new(url, self.node_timeout, self.connect_timeout, tls.as_ref()))
            .collect::<Result<Box<[_]>, _>>()?;
        let n = nodes.len();
        if n % 2 == 0 {
            tracing::warn!(
                nodes = n,
                "an even number of nodes tolerates no more failures than {} nodes; use an odd number",
                n - 1
            );
        }
        let quorum = Quorum {
            nodes,
            quorum: n / 2 + 1,
        };

        // Connect and check for the module, all nodes at once.
        let probe = redis::cmd("REDLOCK.INSPECT");
        let checks = quorum.nodes.iter().map(|node| {
            let probe = &probe;
            async move {
                node.connect().await?;
                // INSPECT without a key: the module answers a wrong-arity
                // error, a server without it "unknown command".
                match node.probe(probe).await {
                    Err(
                        e @ (crate::error::NodeFailure::ModuleNotLoaded
                        | crate::error::NodeFailure::AuthFailed(_)),
                    ) => Err(e),
                    _ => Ok(()),
                }
            }
        });
        let results = futures_util::future::join_all(checks).await;
        let mut failed = Vec::new();
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(()) => {}
                Err(crate::error::NodeFailure::ModuleNotLoaded) => {
                    return Err(Error::ModuleNotLoaded {
                        node: quorum.nodes[i].addr().to_string(),
                    })
                }
                Err(e) => failed.push((i, e)),
            }
        }
        if n - failed.len() < quorum.quorum {
            let answered = n - failed.len();
            return Err(quorum.failure_error(failed, answered));
        }
        for (i, e) in &failed {
            tracing::warn!(node = quorum.nodes[*i].addr(), reason = %e, "node unreachable at start; reconnecting in the background");
        }
        Ok(Redlock {
            inner: Arc::new(Inner {
                quorum,
                retry: self.retry,
                drift_factor: self.drift_factor,
                clock_floor: self.clock_floor,
                write_back: self.write_back,
                validity_check: self.validity_check,
            }),
        })
    }
}

pub(crate) struct Inner {
    quorum: Quorum,
    retry: RetryPolicy,
    drift_factor: f64,
    clock_floor: bool,
    write_back: bool,
    /// Step 5; off only for the safety suite's mutation checks.
    validity_check: bool,
}

impl Inner {
    /// ttl − (ttl × drift + 2 ms), or `None` when nothing is left.
    fn usable(&self, ttl: Duration) -> Option<Duration> {
        ttl.checked_sub(ttl.mul_f64(self.drift_factor) + DRIFT_FIXED)
    }
}

/// A Redlock client over N independent Redis masters that run the redlock
/// module. Cheap to clone (all clones share the connections).
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.nodes())
            .field("quorum", &self.quorum())
            .finish()
    }
}

/// The lock's state on one node, as `REDLOCK.INSPECT` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// The key does not exist on this node (never locked there).
    Missing,
    /// The key exists.
    Present {
        /// A live lease exists.
        held: bool,
        /// Time left on the lease, when held.
        pttl: Option<Duration>,
        /// The node's fencing counter for the key.
        token: u64,
    },
    /// The node did not answer usably (the reason).
    Error(String),
}

/// One node's view of a lock: see [`Redlock::inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// The node's address (`host:port`).
    pub node: String,
    /// What the node reports.
    pub state: NodeState,
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros().min(i64::MAX as u128) as u64)
        .unwrap_or(0)
}

fn ttl_millis(ttl: Duration) -> Result<u64, Error> {
    let ms = ttl.as_millis();
    if ms == 0 {
        return Err(Error::InvalidArgument(format!(
            "ttl {ttl:?} is below 1 ms: locks need a lease of at least 1 ms"
        )));
    }
    Ok(ms.min(i64::MAX as u128) as u64)
}

/// A fresh owner id: a hyphenated UUID v4, kept inline (36 ASCII bytes).
#[derive(Clone, Copy)]
struct OwnerId([u8; 36]);

impl OwnerId {
    fn new() -> Self {
        let mut buf = [0u8; 36];
        uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
        OwnerId(buf)
    }

    fn as_str(&self) -> &str {
        // Always ASCII: written by encode_lower.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl Redlock {
    /// Starts configuring a client for `nodes` (redis URLs: `redis://host:port`,
    /// `rediss://` for TLS, `redis://user:password@host:port` for ACL auth).
    /// Five independent masters is the usual setup; one node is a plain
    /// fenced lock without fault tolerance.
    pub fn builder<I, S>(nodes: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedlockBuilder {
            urls: nodes.into_iter().map(Into::into).collect(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retry: RetryPolicy::default(),
            drift_factor: DEFAULT_DRIFT_FACTOR,
            clock_floor: true,
            write_back: true,
            validity_check: true,
            tls: TlsFiles::default(),
        }
    }

    /// The nodes' addresses (`host:port`), in the order given.
    pub fn nodes(&self) -> Vec<String> {
        self.inner
            .quorum
            .nodes
            .iter()
            .map(|n| n.addr().to_string())
            .collect()
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum.quorum
    }

    /// Takes the lock for `ttl`, retrying per the [`RetryPolicy`] while it
    /// is busy (or no quorum answers, or nodes are in their restart grace
    /// window). After the last attempt, returns that attempt's error, e.g.
    /// [`Error::Busy`].
    ///
    /// One owner id is used for all attempts of one call, and every failed
    /// attempt is released on every node that may have granted it before
    /// the next attempt starts.
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Lock, Error> {
        let owner = OwnerId::new();
        let span = tracing::debug_span!(
            "redlock.acquire",
            key,
            owner = owner.as_str(),
            ttl_ms = ttl.as_millis() as u64,
            token = tracing::field::Empty
        );
        async {
            let attempts = self.inner.retry.attempts.max(1);
            let mut attempt = 1;
            loop {
                match self.attempt(key, ttl, owner).await {
                    Ok(lock) => return Ok(lock),
                    Err((error, leftovers)) => {
                        if attempt >= attempts || !error.is_transient() {
                            self.inner
                                .quorum
                                .release_on(key, owner.as_str(), &leftovers.nodes)
                                .await;
                            return Err(error);
                        }
                        tracing::debug!(attempt, %error, "attempt failed; retrying");
                        let delay = self.inner.retry.delay();
                        tokio::join!(
                            self.inner
                                .quorum
                                .release_on(key, owner.as_str(), &leftovers.nodes),
                            tokio::time::sleep(delay)
                        );
                        attempt += 1;
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Makes one attempt: `Ok(None)` when another owner holds the lock.
    /// Other failures are errors (no quorum, restart guard, …).
    ///
    /// A failed attempt is released on the nodes that may have granted it
    /// (those that did not answer yet, timed out, or granted). When busy,
    /// that release runs in the background so that the "busy" answer costs
    /// one round trip; otherwise it completes before this returns.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lock>, Error> {
        let owner = OwnerId::new();
        let span = tracing::debug_span!(
            "redlock.acquire",
            key,
            owner = owner.as_str(),
            ttl_ms = ttl.as_millis() as u64,
            token = tracing::field::Empty
        );
        async {
            match self.attempt(key, ttl, owner).await {
                Ok(lock) => Ok(Some(lock)),
                Err((Error::Busy { .. }, leftovers)) => {
                    if !leftovers.nodes.is_empty() {
                        let inner = Arc::clone(&self.inner);
                        let key = key.to_string();
                        tokio::spawn(
                            async move {
                                inner
                                    .quorum
                                    .release_on(&key, owner.as_str(), &leftovers.nodes)
                                    .await
                            }
                            .in_current_span(),
                        );
                    }
                    Ok(None)
                }
                Err((error, leftovers)) => {
                    self.inner
                        .quorum
                        .release_on(key, owner.as_str(), &leftovers.nodes)
                        .await;
                    Err(error)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt: steps 1–6 of the algorithm. On failure, the error and
    /// the nodes to release.
    async fn attempt(
        &self,
        key: &str,
        ttl: Duration,
        owner: OwnerId,
    ) -> Result<Lock, (Error, Leftover)> {
        let inner = &self.inner;
        let ttl_ms = ttl_millis(ttl).map_err(|e| {
            let nothing = Leftover {
                nodes: Vec::new(),
                _unanswered: Unanswered::default(),
            };
            (e, nothing)
        })?;
        let start = Instant::now();
        let floor = inner.clock_floor.then(now_micros);
        let (token, unanswered) = inner
            .quorum
            .acquire(key, owner.as_str(), ttl_ms, floor, inner.write_back)
            .await?;
        // Step 5: validity = ttl − elapsed − (ttl × drift + 2 ms).
        let deadline = if inner.validity_check {
            let elapsed = start.elapsed();
            let Some(usable) = inner.usable(ttl).filter(|u| *u > elapsed) else {
                let all = Leftover {
                    nodes: (0..inner.quorum.nodes.len()).collect(),
                    _unanswered: unanswered,
                };
                return Err((Error::ExpiredBeforeUse { ttl, elapsed }, all));
            };
            tracing::debug!(
                token,
                validity_ms = (usable - elapsed).as_millis() as u64,
                "acquired"
            );
            start + usable
        } else {
            // Deliberately broken (safety-suite mutation): the full ttl from
            // the end of the acquisition.
            tracing::debug!(token, "acquired without the validity check");
            Instant::now() + ttl
        };
        tracing::Span::current().record("token", token);
        Ok(Lock {
            inner: Arc::clone(inner),
            key: key.to_string(),
            owner,
            token,
            deadline,
            released: false,
            _unanswered: unanswered,
        })
    }

    /// Releases `key` for the owner id `owner` (as printed by
    /// [`Lock::owner`] or `redlock acquire`), e.g. from another process.
    /// `Ok(true)` when a quorum confirmed that `owner` held the lock and it
    /// is now free, `Ok(false)` when it was no longer held by `owner`
    /// (expired or already released). Anyone who knows the owner id can
    /// release the lock: treat it as a secret.
    pub async fn release_owner(&self, key: &str, owner: &str) -> Result<bool, Error> {
        if owner.is_empty() || owner.len() > 256 {
            return Err(Error::InvalidArgument(format!(
                "owner id must be 1 to 256 bytes, got {} bytes",
                owner.len()
            )));
        }
        let span = tracing::debug_span!("redlock.release", key, owner);
        self.inner.quorum.release(key, owner).instrument(span).await
    }

    /// Every node's view of `key` (held, time left, counter), in node order.
    /// Read-only; waits for every node (each bounded by the node timeout).
    pub async fn inspect(&self, key: &str) -> Vec<NodeView> {
        let nodes = &self.inner.quorum.nodes;
        let mut cmd = redis::cmd("REDLOCK.INSPECT");
        cmd.arg(key);
        let cmd = &cmd;
        let replies = futures_util::future::join_all(nodes.iter().map(|node| node.call(cmd))).await;
        nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| NodeView {
                node: node.addr().to_string(),
                state: match reply {
                    Err(e) => NodeState::Error(e.to_string()),
                    Ok(v) => parse_inspect(v),
                },
            })
            .collect()
    }

    /// Runs `f` while holding `key`, and releases the lock when `f`'s future
    /// ends, whatever it returned (also when it panics or is dropped).
    ///
    /// A background task extends the lock to `ttl` about every `ttl / 3`.
    /// If an extension fails to reach a quorum, or the validity runs out
    /// before an extension succeeds, [`LockGuard::lost`] fires at once: stop
    /// using the token then. Returns `f`'s value, or the acquisition error
    /// (after the retries of [`Redlock::acquire`]).
    ///
    /// Needs a tokio runtime with the `time` driver (the extension runs as a
    /// spawned task).
    pub async fn with_lock<F, Fut, T>(&self, key: &str, ttl: Duration, f: F) -> Result<T, Error>
    where
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.acquire(key, ttl).await?;
        let lost = CancellationToken::new();
        let done = CancellationToken::new();
        let deadline = Arc::new(Mutex::new(lock.deadline));
        let guard = LockGuard {
            key: Arc::from(key),
            owner: lock.owner,
            token: lock.token,
            lost: lost.clone(),
            deadline: Arc::clone(&deadline),
        };
        let keeper = tokio::spawn(keep_alive(lock, ttl, lost, done.clone(), deadline));
        // Stops the keeper (which then releases) if `f` panics or this
        // future is dropped.
        let stop = done.drop_guard();
        let value = f(guard).await;
        drop(stop);
        let _ = keeper.await;
        Ok(value)
    }
}

fn parse_inspect(v: Value) -> NodeState {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return NodeState::Missing,
        Value::Array(items) => {
            let mut it = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        Value::Map(pairs) => pairs,
        other => return NodeState::Error(format!("unexpected reply: {other:?}")),
    };
    let (mut held, mut pttl, mut token) = (false, -1i64, 0i64);
    for (k, v) in pairs {
        let name = match k {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::SimpleString(s) => s,
            _ => continue,
        };
        let Value::Int(n) = v else { continue };
        match name.as_str() {
            "held" => held = n == 1,
            "pttl" => pttl = n,
            "token" => token = n,
            _ => {}
        }
    }
    NodeState::Present {
        held,
        pttl: (held && pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
        token: token.max(0) as u64,
    }
}

/// The background task of [`Redlock::with_lock`]: extends every `ttl / 3`,
/// fires `lost` on a failed extension or when the validity runs out, and
/// releases the lock when `done` fires.
async fn keep_alive(
    mut lock: Lock,
    ttl: Duration,
    lost: CancellationToken,
    done: CancellationToken,
    shared: Arc<Mutex<Instant>>,
) {
    let interval = (ttl / 3).max(Duration::from_millis(1));
    let mut next = Instant::now() + interval;
    let (key, token) = (lock.key.clone(), lock.token);
    while !lost.is_cancelled() {
        let deadline = tokio::time::Instant::from_std(lock.deadline);
        tokio::select! {
            _ = done.cancelled() => break,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(key = key.as_str(), token, "validity ran out before an extension succeeded: lock lost");
                lost.cancel();
                break;
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => {}
        }
        next = Instant::now() + interval;
        tokio::select! {
            _ = done.cancelled() => break,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(key = key.as_str(), token, "validity ran out before an extension succeeded: lock lost");
                lost.cancel();
            }
            result = lock.extend(ttl) => match result {
                Ok(()) => {
                    *shared.lock().unwrap_or_else(|p| p.into_inner()) = lock.deadline;
                }
                Err(error) => {
                    tracing::warn!(key = key.as_str(), token, %error, "extension failed: lock lost");
                    lost.cancel();
                }
            }
        }
    }
    if lost.is_cancelled() {
        *shared.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        done.cancelled().await;
    }
    let _ = lock.release().await;
}

/// A held lock: its key, owner id and fencing token.
///
/// Pass [`Lock::token`] to the protected resource with every operation (see
/// the crate docs). Dropping a `Lock` that was not released releases it in
/// the background when a tokio runtime is available (and does nothing
/// otherwise: the lease then simply runs out).
pub struct Lock {
    inner: Arc<Inner>,
    key: String,
    owner: OwnerId,
    token: u64,
    /// End of the validity on the local monotonic clock.
    deadline: Instant,
    released: bool,
    /// The ACQUIREs the acquisition did not wait for, kept until a release
    /// is queued behind them (see `quorum::Leftovers::Return`).
    _unanswered: Unanswered,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl Lock {
    /// The fencing token: higher than every token handed out earlier for
    /// this key, by a quorum the client could reach.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id (a UUID v4) this acquisition used. Anyone who knows it
    /// can release the lock: see [`Redlock::release_owner`].
    pub fn owner(&self) -> &str {
        self.owner.as_str()
    }

    /// What is left of the validity now, on the local monotonic clock:
    /// ttl − time since the start of the acquisition (or of the last
    /// extension) − drift margin. Zero once it ran out.
    pub fn validity(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Extends the lease to `ttl` from now on a quorum of nodes. The new
    /// validity is measured from the start of this call. A lock whose lease
    /// ran out is never revived: that gives [`Error::Lost`]. Too few nodes
    /// answering gives [`Error::NoQuorum`]; an extension that took longer
    /// than `ttl` minus the drift margin gives [`Error::ExpiredBeforeUse`].
    /// After any error, stop using the token.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = ttl_millis(ttl)?;
        let span = tracing::debug_span!(
            "redlock.extend",
            key = self.key.as_str(),
            token = self.token,
            ttl_ms
        );
        async {
            let start = Instant::now();
            self.inner
                .quorum
                .extend(&self.key, self.owner.as_str(), ttl_ms)
                .await?;
            if !self.inner.validity_check {
                // Deliberately broken (safety-suite mutation): the full ttl
                // from the end of the extension.
                self.deadline = Instant::now() + ttl;
                return Ok(());
            }
            let elapsed = start.elapsed();
            match self.inner.usable(ttl).filter(|u| *u > elapsed) {
                Some(usable) => {
                    self.deadline = start + usable;
                    tracing::debug!(
                        validity_ms = (usable - elapsed).as_millis() as u64,
                        "extended"
                    );
                    Ok(())
                }
                None => Err(Error::ExpiredBeforeUse { ttl, elapsed }),
            }
        }
        .instrument(span)
        .await
    }

    /// Releases the lock on every node. Returns once a quorum answered:
    /// `Ok(true)` when it was still held and is now free, `Ok(false)` when
    /// its lease had already run out (the token may have been superseded).
    /// Nodes slower than the quorum get the release in the background.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        let span = tracing::debug_span!(
            "redlock.release",
            key = self.key.as_str(),
            token = self.token
        );
        self.inner
            .quorum
            .release(&self.key, self.owner.as_str())
            .instrument(span)
            .await
    }

    /// Stops tracking the lock without releasing it: it stays held until its
    /// lease runs out or someone calls [`Redlock::release_owner`] with the
    /// returned owner id. Used by `redlock acquire`.
    pub fn detach(mut self) -> String {
        self.released = true;
        self.owner.as_str().to_string()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        let key = std::mem::take(&mut self.key);
        let owner = self.owner;
        // Kept until the release is queued behind them.
        let unanswered = std::mem::take(&mut self._unanswered);
        let span = tracing::debug_span!(
            "redlock.release",
            key = key.as_str(),
            token = self.token,
            dropped = true
        );
        handle.spawn(
            async move {
                let _ = inner.quorum.release(&key, owner.as_str()).await;
                drop(unanswered);
            }
            .instrument(span),
        );
    }
}

/// What the closure of [`Redlock::with_lock`] gets: the token and a signal
/// that fires when the lock is lost.
#[derive(Clone)]
pub struct LockGuard {
    key: Arc<str>,
    owner: OwnerId,
    token: u64,
    lost: CancellationToken,
    deadline: Arc<Mutex<Instant>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id of this acquisition.
    pub fn owner(&self) -> &str {
        self.owner.as_str()
    }

    /// Completes when the lock is lost (an extension failed or the validity
    /// ran out first). Use it in `tokio::select!` next to the work.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lost.cancelled()
    }

    /// A token that is cancelled when the lock is lost, to move into other
    /// tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the lock was lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// What is left of the validity now (after the latest successful
    /// extension); zero once lost.
    pub fn validity(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .saturating_duration_since(Instant::now())
    }
}
