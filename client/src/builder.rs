//! [`RedlockBuilder`] (options, checks, connecting) and [`Redlock::builder`],
//! which starts one with the defaults of [`crate::defaults`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::core::error::{Error, NodeFailure};
use crate::core::rules::Rules;
#[cfg(feature = "danger-test-switches")]
use crate::defaults::DangerSwitches;
use crate::defaults::{
    RetryPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR, DEFAULT_NODE_TIMEOUT,
    DEFAULT_SYNC_TIMEOUT,
};
use crate::identity::{identical_urls, shared_server, Endpoint};
use crate::member::{Member, MemberKind, Voter};
use crate::metrics::LockMetrics;
use crate::node::Node;
use crate::quorum::Quorum;
use crate::redlock::Redlock;
use crate::sentinel::SentinelMember;
use crate::shared::Inner;
use crate::sync_check::SyncState;
use crate::tls::TlsFiles;

/// Options for a [`Redlock`]; made by [`Redlock::builder`].
#[derive(Clone, Debug)]
pub struct RedlockBuilder {
    pub(crate) members: Vec<Member>,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) sync_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) drift_factor: f64,
    pub(crate) clock_floor: bool,
    pub(crate) metrics: LockMetrics,
    pub(crate) tls: TlsFiles,
    #[cfg(feature = "danger-test-switches")]
    pub(crate) danger: DangerSwitches,
}

impl RedlockBuilder {
    /// Bound on each node's reply to one command (default 100 ms). A dead
    /// or frozen node costs at most this much per call. Keep it well below
    /// the TTLs you use.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = redlock_client::Redlock::builder(["redis://127.0.0.1:7001"])
    ///     .node_timeout(Duration::from_millis(50));
    /// # let _ = builder;
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Bound on the replica-sync check's `WAIT` (default 250 ms): on a member
    /// whose nodes set `redlock.sync-replicas` to R > 0, every grant,
    /// extension and write-back waits at most this long for R replicas to
    /// acknowledge it, on top of the node timeout, and does not count
    /// without them (DESIGN §13).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = redlock_client::Redlock::builder(["redis://127.0.0.1:7001"])
    ///     .sync_timeout(Duration::from_millis(500));
    /// # let _ = builder;
    /// ```
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// Bound on opening a connection (TCP, TLS, AUTH) and on the module
    /// check, at build time and for background reconnects (default 1 s).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = redlock_client::Redlock::builder(["redis://127.0.0.1:7001"])
    ///     .connect_timeout(Duration::from_millis(500));
    /// # let _ = builder;
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts the CA certificate(s) in this PEM file for `rediss://` nodes,
    /// instead of the operating system's trust store: the nodes'
    /// certificates must be signed by it. Read by [`RedlockBuilder::build`].
    ///
    /// Certificate verification cannot be turned off: there is no such
    /// option, and `rediss://…#insecure` URLs are refused.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = redlock_client::Redlock::builder(["rediss://10.0.0.1:6380"])
    ///     .tls_ca_file("/etc/redlock/ca.crt")
    ///     .tls_client_cert("/etc/redlock/client.crt", "/etc/redlock/client.key");
    /// # let _ = builder;
    /// ```
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this client certificate (PEM, any intermediate certificates
    /// after it) and private key (PEM) to `rediss://` nodes: mutual TLS,
    /// which Redis requires by default (`tls-auth-clients yes`). Read by
    /// [`RedlockBuilder::build`].
    pub fn tls_client_cert(
        mut self,
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert_path.into(), key_path.into()));
        self
    }

    /// How [`Redlock::acquire`] retries (default: [`RetryPolicy::default`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use redlock_client::{Redlock, RetryPolicy};
    /// let builder = Redlock::builder(["redis://127.0.0.1:7001"]).retry(RetryPolicy::no_retry());
    /// # let _ = builder;
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Fraction of the TTL kept as margin for clock drift between the client
    /// and the nodes (default 0.01; 2 ms are always added). Must be in `0..1`.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = redlock_client::Redlock::builder(["redis://127.0.0.1:7001"]).drift_factor(0.02);
    /// # let _ = builder;
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = redlock_client::Redlock::builder(["redis://127.0.0.1:7001"]).clock_floor(false);
    /// # let _ = builder;
    /// ```
    pub fn clock_floor(mut self, on: bool) -> Self {
        self.clock_floor = on;
        self
    }

    /// Adds a `lock` label with the lock's name to the client's metrics
    /// (see [`crate::metrics`]; default: off). Every lock name becomes a
    /// series of its own in every metric: turn it on only when the names
    /// are few and fixed (not one per job or per user).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = redlock_client::Redlock::builder(["redis://127.0.0.1:7001"])
    ///     .metrics_lock_names(true);
    /// # let _ = builder;
    /// ```
    pub fn metrics_lock_names(mut self, on: bool) -> Self {
        self.metrics.lock_names = on;
        self
    }

    /// Turns off step 4 of the algorithm (the write-back). **Unsafe: tokens
    /// can go backwards.** Exists only so that a test can show why the step
    /// is needed; only with the `danger-test-switches` feature.
    #[cfg(feature = "danger-test-switches")]
    pub fn unsafe_disable_write_back(mut self) -> Self {
        self.danger.no_write_back = true;
        self
    }

    /// Turns off step 5 of the algorithm (the validity check). **Unsafe: a
    /// deliberately broken variant for the safety suite's mutation checks**;
    /// only with the `danger-test-switches` feature. Acquire and extend
    /// never fail with [`Error::ExpiredBeforeUse`], and the lock's deadline
    /// becomes the end of the acquisition (or extension) plus the full ttl,
    /// with nothing subtracted for the time the round took or for clock
    /// drift.
    #[cfg(feature = "danger-test-switches")]
    pub fn unsafe_disable_validity_check(mut self) -> Self {
        self.danger.no_validity_check = true;
        self
    }

    /// Checks the options and connects to every node in parallel.
    ///
    /// Nodes that are down (a minority) are connected in the background. An
    /// even number of nodes works but is logged as a warning: it tolerates
    /// no more failures than one node fewer.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidArgument`]: a bad URL, no nodes, bad options, the
    ///   same node listed twice (identical URLs once the host's case, the
    ///   default port and database are normalised; a cluster's seeds
    ///   count), or two members that turn out to be the same Redis server
    ///   (same `run_id`: an alias, `localhost` next to `127.0.0.1`, two
    ///   forwarded ports, the same cluster twice, a cluster and one of its
    ///   own nodes); a cluster member whose seeds mix `redis://` and
    ///   `rediss://`; a TLS file
    ///   that is missing or holds no PEM of the right type (the message
    ///   names the file); a URL with a `#fragment`; a plain `redis://` URL
    ///   when TLS files are given.
    /// - [`Error::ModuleNotLoaded`]: a reachable node (or a master of a
    ///   reachable cluster) runs without the module.
    /// - [`Error::NoQuorum`]: fewer than a majority of the nodes could be
    ///   reached and checked within the connect timeout.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redlock_client::Error> {
    /// let redlock = redlock_client::Redlock::builder([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])
    /// .build()
    /// .await?;
    /// assert_eq!(redlock.quorum(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Redlock, Error> {
        if self.members.is_empty() {
            return Err(Error::InvalidArgument(
                "no nodes given: pass at least one redis:// URL (5 independent masters are the usual setup)".into(),
            ));
        }
        if self.node_timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.sync_timeout.is_zero()
        {
            return Err(Error::InvalidArgument(
                "node, connect and sync timeouts must be above zero".into(),
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
            .members
            .iter()
            .map(|member| match &member.0 {
                MemberKind::Node(url) => Node::new(
                    url,
                    self.node_timeout,
                    self.connect_timeout,
                    tls.as_ref(),
                    Arc::new(SyncState::new(self.sync_timeout)),
                )
                .map(Voter::Node),
                MemberKind::Cluster(seeds) => Cluster::new(
                    seeds,
                    self.node_timeout,
                    self.connect_timeout,
                    tls.as_ref(),
                    Arc::new(SyncState::new(self.sync_timeout)),
                )
                .map(Voter::Cluster),
                MemberKind::Sentinel(spec) => SentinelMember::new(
                    spec,
                    self.node_timeout,
                    self.connect_timeout,
                    tls.as_ref(),
                    Arc::new(SyncState::new(self.sync_timeout)),
                )
                .map(Voter::Sentinel),
                MemberKind::Misused(what) => Err(Error::InvalidArgument(format!(
                    "Member::{what} applies to Sentinel members only (Member::sentinel)"
                ))),
            })
            .collect::<Result<Arc<[_]>, _>>()?;
        // Every endpoint a member connects to (a cluster's seeds), with
        // its member: the same endpoint in two members is one server twice.
        let mut endpoints: Vec<(Endpoint, usize)> = Vec::new();
        for (i, voter) in nodes.iter().enumerate() {
            match voter {
                Voter::Node(n) => endpoints.push((n.endpoint().clone(), i)),
                // Told apart by the master's run_id once connected.
                Voter::Sentinel(_) => {}
                Voter::Cluster(c) => {
                    let mut own: Vec<Endpoint> = Vec::new();
                    for e in c.endpoints() {
                        if !own.contains(&e) {
                            own.push(e);
                        }
                    }
                    endpoints.extend(own.into_iter().map(|e| (e, i)));
                }
            }
        }
        let only: Vec<Endpoint> = endpoints.iter().map(|(e, _)| e.clone()).collect();
        if let Some(&(a, b)) = identical_urls(&only).first() {
            let (i, j) = (endpoints[a].1, endpoints[b].1);
            return Err(Error::InvalidArgument(format!(
                "{} and {} are the same node: each server may be listed once (one server, one vote)",
                nodes[i].url(),
                nodes[j].url()
            )));
        }
        let n = nodes.len();
        if n.is_multiple_of(2) {
            tracing::warn!(
                nodes = n,
                "an even number of nodes tolerates no more failures than {} nodes; use an odd number",
                n - 1
            );
        }
        let quorum = Quorum {
            nodes,
            quorum: n / 2 + 1,
            metrics: self.metrics,
        };

        // Connect and check for the module, all nodes at once.
        let checks = quorum.nodes.iter().map(Voter::connect_and_check);
        let results = futures_util::future::join_all(checks).await;
        let mut failed = Vec::new();
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(()) => {}
                Err(NodeFailure::ModuleNotLoaded) => {
                    return Err(Error::ModuleNotLoaded {
                        node: quorum.nodes[i].addr().to_string(),
                    })
                }
                Err(e) => failed.push((i, e)),
            }
        }
        let ids: Vec<_> = quorum.nodes.iter().map(Voter::server_ids).collect();
        if let Some((i, j, id)) = shared_server(&ids) {
            let (a, b) = (quorum.nodes[i].url(), quorum.nodes[j].url());
            tracing::error!(
                node = b,
                same_server_as = a,
                "two members of the quorum are the same Redis server"
            );
            return Err(Error::InvalidArgument(format!(
                "{a} and {b} are the same Redis server (run_id {id}): each server may be listed once (one server, one vote)"
            )));
        }
        if n - failed.len() < quorum.quorum {
            let answered = n - failed.len();
            return Err(quorum.failure_error(failed, answered));
        }
        for (i, e) in &failed {
            tracing::warn!(node = quorum.nodes[*i].addr(), reason = %e, "node unreachable at start; reconnecting in the background");
        }
        #[cfg_attr(not(feature = "danger-test-switches"), allow(unused_mut))]
        let mut rules = Rules::new(n, self.drift_factor);
        #[cfg(feature = "danger-test-switches")]
        {
            rules.switches = self.danger;
        }
        Ok(Redlock {
            inner: Arc::new(Inner {
                quorum,
                retry: self.retry,
                clock_floor: self.clock_floor,
                rules,
                local_turns: Default::default(),
            }),
        })
    }
}

impl Redlock {
    /// Starts configuring a client for `members`: node URLs
    /// (`redis://host:port`, `rediss://` for TLS,
    /// `redis://user:password@host:port` for ACL auth), or [`Member`]s, which
    /// may also be Redis Clusters ([`Member::cluster`]). Five independent
    /// members is the usual setup; one node is a plain fenced lock without
    /// fault tolerance.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redlock_client::{Member, Redlock};
    ///
    /// let builder = Redlock::builder(["redis://127.0.0.1:7001"])
    ///     .node_timeout(Duration::from_millis(50));
    /// # let _ = builder;
    /// let mixed = Redlock::builder([
    ///     Member::cluster(["redis://127.0.0.1:7101", "redis://127.0.0.1:7102"]),
    ///     Member::node("redis://127.0.0.1:7002"),
    ///     Member::node("redis://127.0.0.1:7003"),
    /// ]);
    /// # let _ = mixed;
    /// ```
    pub fn builder<I, S>(members: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<Member>,
    {
        RedlockBuilder {
            members: members.into_iter().map(Into::into).collect(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            retry: RetryPolicy::default(),
            drift_factor: DEFAULT_DRIFT_FACTOR,
            clock_floor: true,
            metrics: LockMetrics::default(),
            tls: Default::default(),
            #[cfg(feature = "danger-test-switches")]
            danger: Default::default(),
        }
    }
}
