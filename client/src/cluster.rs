//! A quorum member that is a Redis Cluster: redis-rs's async cluster
//! connection (`redis::cluster_async::ClusterConnection`), which routes each
//! command to the master of its key's slot, follows `-MOVED` / `-ASK`
//! redirects, refreshes the topology and reconnects to failed-over shards.
//!
//! # Ordering: what the cluster connection does not give, and what we add
//!
//! The quorum rounds rely on three properties of a single node's connection
//! (`node.rs`, "What the quorum rounds rely on from the connection"). The
//! cluster connection has none of them for the commands of one key:
//!
//! - A command is handed to the connection's background task through a
//!   bounded channel and dispatched from there; once a reply asks for a
//!   retry (`-MOVED`, `-ASK`, `-TRYAGAIN`, `-CLUSTERDOWN`, a broken
//!   connection), the command is sent again later, possibly to another
//!   shard, after commands issued after it. A RELEASE could then reach the
//!   new owner of the slot before the ACQUIRE it was meant to undo (the
//!   ACQUIRE would leave the member locked for a lease). A retried RELEASE
//!   can also land twice, the first copy late, after the caller's next
//!   attempt; that is why every attempt has an owner id of its own
//!   (`Redlock::acquire`): a late RELEASE of one attempt cannot free the
//!   next attempt's grant.
//! - A command whose caller is dropped is not abandoned in a fixed way: the
//!   connection stops retrying it, but an attempt already written is still
//!   executed by its shard.
//!
//! So this member orders the commands of one lock itself: the mutating
//! commands (ACQUIRE, RELEASE, EXTEND, FENCE) for one (key, owner) are
//! *sequenced*: each is sent only once the previous one for the same key and
//! owner has its final outcome (its reply, or the cluster connection's final
//! error after its bounded retries), and each, once issued, runs to that
//! outcome in a task of its own whether or not its caller still waits. A
//! RELEASE therefore always reaches the member after every ACQUIRE of the
//! same owner has been answered or given up by the connection: a retried
//! ACQUIRE can never land after the RELEASE meant to undo it. What is given
//! up is bounded: [`RETRIES`] retries, each attempt bounded by the connect
//! timeout, the whole command by [`OVERALL_TIMEOUTS`] connect timeouts. As
//! with a single node whose connection breaks, an attempt already written
//! to a shard that is frozen, and then given up, may still execute when the
//! shard wakes up: that leaves at most a lease that nobody uses and that
//! runs out, never a token out of order (every token comes from the
//! module's counter, which ACQUIRE only raises).
//!
//! `client/tests/cluster_order.rs` shows the hazard on cue (a fake node
//! answers an ACQUIRE with `-TRYAGAIN` after the round gave up on it: the
//! connection sends it again after a pause, and a RELEASE not sequenced
//! behind it lands in between) and pins the order;
//! `client/tests/cluster_contract.rs` pins what is relied on from the
//! connection (keyed routing through `-ASK` and `-MOVED`, one execution per
//! command).
//!
//! The rounds still bound every call with the per-member timeout, exactly
//! as for a node: a sequenced command that is not answered in time counts as
//! a timeout (which may have executed, so it is released), and finishes in
//! its task.
//!
//! # Other commands
//!
//! `REDLOCK.WAIT` blocks, so it never goes through the shared cluster
//! connection: it goes to the master of the key's slot on a pooled
//! connection of its own ([`Cluster::wait_free`]), following at most
//! [`MAX_REDIRECTS`] redirects (a slot that moves away while a waiter is
//! blocked is answered with a redirect by the module). INSPECT goes to the
//! slot's master with `CLUSTER NODES` in the same pipeline, so that it can
//! say which shard answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, Value,
};
use tokio::sync::{oneshot, watch};

use crate::core::error::{Error, NodeFailure};
use crate::identity::{parse_run_id, Endpoint, ServerId};
use crate::node::OnSent;
use crate::node::{connection_config, redact};
use crate::sync_check::{self, SyncState};
use crate::tls::TlsSettings;

/// Retries of one command inside the cluster connection (redirects,
/// reconnects, `TRYAGAIN`).
pub(crate) const RETRIES: u32 = 6;

/// The whole of one command, retries included, is bounded by this many
/// connect timeouts.
pub(crate) const OVERALL_TIMEOUTS: u32 = 3;

/// Most redirects one `REDLOCK.WAIT` follows.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// Most idle blocking connections kept per shard.
const BLOCKING_POOL_MAX: usize = 64;

/// First and largest pause between two reconnect attempts.
const RECONNECT_MIN: Duration = Duration::from_millis(20);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// One cluster member.
pub(crate) struct Cluster {
    /// `cluster(host:port,…)`: the seeds, for messages.
    addr: Box<str>,
    /// `cluster(redis://host:port,…)` without credentials.
    url: Box<str>,
    /// The seeds, parsed (the first one also gives the scheme, credentials
    /// and database of connections to shards found through redirects).
    seeds: Vec<ConnectionInfo>,
    client: ClusterClient,
    tls: Option<TlsSettings>,
    timeout: Duration,
    connect_timeout: Duration,
    state: Mutex<State>,
    /// The latest sequenced command of each (key, owner) still running: its
    /// completion signal (the sender is dropped when it finished).
    in_flight: Mutex<HashMap<Box<[u8]>, watch::Receiver<()>>>,
    /// Idle connections for `REDLOCK.WAIT`, by shard address.
    blocking: Mutex<HashMap<Box<str>, Vec<MultiplexedConnection>>>,
    /// The master of a slot, as the latest `-MOVED` for `REDLOCK.WAIT` said.
    slot_owners: Mutex<HashMap<u16, Box<str>>>,
    /// The replica-sync check: the R the shards state (the same on every
    /// node of the cluster), learned from them.
    sync: Arc<SyncState>,
}

/// What a sequenced call sends: one command, or a lock write and its
/// `WAIT` as one pipeline to the key's slot master.
enum Request {
    Command(Cmd, RoutingInfo),
    Pipeline(redis::Pipeline, SingleNodeRoutingInfo),
}

#[derive(Default)]
struct State {
    conn: Option<ClusterConnection>,
    /// The `run_id` of every node, learned when connecting.
    ids: Vec<ServerId>,
    last_error: Option<String>,
    reconnecting: bool,
}

/// Locks a mutex whose data stays valid whatever a panicking holder did.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    /// Parses the seeds. Does not connect.
    pub(crate) fn new(
        seeds: &[String],
        timeout: Duration,
        connect_timeout: Duration,
        tls: Option<&TlsSettings>,
        sync: Arc<SyncState>,
    ) -> Result<Arc<Self>, Error> {
        if seeds.is_empty() {
            return Err(Error::InvalidArgument(
                "a cluster member needs at least one seed URL".into(),
            ));
        }
        let mut infos = Vec::with_capacity(seeds.len());
        let mut any_tls = false;
        for seed in seeds {
            crate::tls::check_url(seed, &redact(seed), tls)?;
            let info = seed.as_str().into_connection_info().map_err(|e| {
                Error::InvalidArgument(format!("bad cluster seed URL {:?}: {e}", redact(seed)))
            })?;
            match info.addr() {
                ConnectionAddr::Tcp(..) => {}
                ConnectionAddr::TcpTls { .. } => any_tls = true,
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "cluster seed {:?} is not a TCP URL: cluster nodes are reached over TCP",
                        redact(seed)
                    )))
                }
            }
            infos.push(info);
        }
        if any_tls
            && !infos
                .iter()
                .all(|i| matches!(i.addr(), ConnectionAddr::TcpTls { .. }))
        {
            return Err(Error::InvalidArgument(format!(
                "cluster seeds {} mix redis:// and rediss://: use one scheme for all seeds",
                seeds
                    .iter()
                    .map(|s| redact(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if any_tls {
            crate::node::ensure_tls_provider();
        }
        let mut builder = ClusterClientBuilder::new(infos.clone())
            .connection_timeout(connect_timeout)
            .response_timeout(connect_timeout)
            .overall_response_timeout(Some(connect_timeout * OVERALL_TIMEOUTS))
            .retries(RETRIES)
            .min_retry_wait(5)
            .max_retry_wait(200);
        if let Some(tls) = tls {
            builder = builder.certs(tls.certificates());
        }
        let client = builder.build().map_err(|e| {
            Error::InvalidArgument(format!(
                "bad cluster seeds {}: {e}",
                seeds
                    .iter()
                    .map(|s| redact(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let addr = format!(
            "cluster({})",
            infos
                .iter()
                .map(|i| i.addr().to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let url = format!(
            "cluster({})",
            seeds
                .iter()
                .map(|s| redact(s))
                .collect::<Vec<_>>()
                .join(",")
        );
        Ok(Arc::new(Cluster {
            addr: addr.into_boxed_str(),
            url: url.into_boxed_str(),
            seeds: infos,
            client,
            tls: tls.cloned(),
            timeout,
            connect_timeout,
            state: Mutex::new(State::default()),
            in_flight: Mutex::new(HashMap::new()),
            blocking: Mutex::new(HashMap::new()),
            slot_owners: Mutex::new(HashMap::new()),
            sync,
        }))
    }

    /// `cluster(host:port,…)`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// `cluster(redis://host:port,…)` without credentials.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The per-member timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout + self.sync.extra()
    }

    /// Where the seeds connect, normalised (to find a seed listed as
    /// another member too).
    pub(crate) fn endpoints(&self) -> Vec<Endpoint> {
        self.seeds.iter().map(Endpoint::of).collect()
    }

    /// The `run_id` of every node of the cluster, as learned when connecting.
    pub(crate) fn server_ids(&self) -> Vec<ServerId> {
        lock(&self.state).ids.clone()
    }

    /// Opens the cluster connection now (used by `build`); on failure the
    /// member is left to the background reconnect.
    pub(crate) async fn connect(self: &Arc<Self>) -> Result<(), NodeFailure> {
        match self.try_connect().await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.spawn_reconnect();
                Err(e)
            }
        }
    }

    async fn try_connect(&self) -> Result<(), NodeFailure> {
        let attempt = self.client.get_async_connection();
        let result = match tokio::time::timeout(self.connect_timeout, attempt).await {
            Err(_) => Err(format!(
                "connect timed out after {} ms",
                self.connect_timeout.as_millis()
            )),
            Ok(Err(e)) => Err(crate::tls::describe_connect_error(&e)),
            Ok(Ok(conn)) => Ok(conn),
        };
        let result = match result {
            Ok(mut conn) => Ok((self.learn_identities(&mut conn).await, conn)),
            Err(e) => Err(e),
        };
        let mut state = lock(&self.state);
        match result {
            Ok((ids, conn)) => {
                state.conn = Some(conn);
                state.ids = ids;
                state.last_error = None;
                tracing::debug!(member = %self.addr, "connected to the cluster");
                Ok(())
            }
            Err(e) => {
                state.last_error = Some(e.clone());
                Err(NodeFailure::NotConnected(e))
            }
        }
    }

    /// The `run_id` of every node (`INFO server` on all of them), to tell
    /// this member apart from the others. Empty when refused (an ACL user
    /// without `+info`), with a warning.
    async fn learn_identities(&self, conn: &mut ClusterConnection) -> Vec<ServerId> {
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
        let reply =
            tokio::time::timeout(self.connect_timeout, conn.route_command(info, routing)).await;
        let mut ids = Vec::new();
        let texts: Vec<Value> = match reply {
            Ok(Ok(Value::Map(pairs))) => pairs.into_iter().map(|(_, v)| v).collect(),
            Ok(Ok(other)) => vec![other],
            Ok(Err(e)) => {
                tracing::warn!(member = %self.url, reason = %e, "INFO refused: this cluster cannot be told apart from the other members (grant +info)");
                return ids;
            }
            Err(_) => {
                tracing::warn!(member = %self.url, "no reply to INFO in time: this cluster cannot be told apart from the other members");
                return ids;
            }
        };
        for value in texts {
            if let Ok(text) = redis::from_redis_value::<String>(value) {
                if let Some(id) = parse_run_id(&text) {
                    ids.push(ServerId::from(id));
                }
            }
        }
        ids
    }

    fn spawn_reconnect(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut state = lock(&self.state);
            if state.reconnecting || state.conn.is_some() {
                return;
            }
            state.reconnecting = true;
        }
        handle.spawn(reconnect_loop(ReconnectTask(Arc::downgrade(self))));
    }

    fn connection(self: &Arc<Self>) -> Result<ClusterConnection, NodeFailure> {
        let state = lock(&self.state);
        match &state.conn {
            Some(conn) => Ok(conn.clone()),
            None => {
                let reason = state
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "connecting".to_string());
                drop(state);
                self.spawn_reconnect();
                Err(NodeFailure::NotConnected(reason))
            }
        }
    }

    /// Checks that every master of the cluster runs the module
    /// (`REDLOCK.INSPECT` without a key on each, as for a node).
    pub(crate) async fn check_module(self: &Arc<Self>) -> Result<(), NodeFailure> {
        let mut conn = self.connection()?;
        let probe = redis::cmd("REDLOCK.INSPECT");
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply =
            match tokio::time::timeout(self.connect_timeout, conn.route_command(probe, routing))
                .await
            {
                Err(_) => return Err(NodeFailure::Timeout(self.connect_timeout)),
                Ok(Err(e)) => return Err(failure(&e)),
                Ok(Ok(reply)) => reply,
            };
        let replies: Vec<Value> = match reply {
            Value::Map(pairs) => pairs.into_iter().map(|(_, v)| v).collect(),
            other => vec![other],
        };
        for reply in replies {
            match reply.extract_error().map_err(|e| failure(&e)) {
                Ok(_)
                | Err(
                    NodeFailure::Refused(_)
                    | NodeFailure::BadArgument(_)
                    | NodeFailure::Grace { .. }
                    | NodeFailure::NoPermission(_),
                ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends one command to the master of its key's slot (the key is the
    /// command's first argument) and returns the reply, without a timer of
    /// its own (the rounds bound it). Mutating lock commands are sequenced
    /// per key and owner (see the module docs).
    pub(crate) async fn call(self: &Arc<Self>, cmd: &Cmd) -> Result<Value, NodeFailure> {
        let Some(kind) = sync_check::lock_write(cmd) else {
            return self.call_plain(cmd).await;
        };
        // A lock write: the replica-sync check (see `sync_check.rs`), its
        // WAIT routed with it to the key's slot master.
        let mut reply = Err(NodeFailure::SyncStated(0));
        for _ in 0..sync_check::RESTATE_TRIES {
            let r = self.sync.r();
            reply = if r == 0 {
                self.call_plain(cmd).await
            } else {
                self.call_synced(kind, cmd, r).await
            };
            match reply {
                Err(NodeFailure::SyncStated(stated)) if stated != r => self.sync.learn(stated),
                _ => break,
            }
        }
        reply
    }

    /// Learns the shards' R from [`sync_check::probe`] (routed like any lock
    /// command; nothing learned on a failure).
    pub(crate) async fn learn_sync_replicas(self: &Arc<Self>) {
        let probe = sync_check::probe();
        let reply = match tokio::time::timeout(self.connect_timeout, self.call_plain(&probe)).await
        {
            Ok(reply) => reply,
            Err(_) => return,
        };
        if let Some(r) = sync_check::probed(&reply) {
            self.sync.learn(r);
        }
    }

    async fn call_plain(self: &Arc<Self>, cmd: &Cmd) -> Result<Value, NodeFailure> {
        let conn = self.connection()?;
        let (routing, sequence) = route(cmd);
        let reply = match sequence {
            None => {
                let mut conn = conn;
                conn.route_command(cmd.clone(), routing).await
            }
            Some(sequence) => {
                self.sequenced(conn, sequence, Request::Command(cmd.clone(), routing))
                    .await
            }
        };
        reply
            .and_then(Value::extract_error)
            .map_err(|e| failure(&e))
    }

    /// `cmd SYNC r` and `WAIT r` as one pipeline to the master of the key's
    /// slot, sequenced like the command alone.
    async fn call_synced(
        self: &Arc<Self>,
        kind: sync_check::LockWrite,
        cmd: &Cmd,
        r: u64,
    ) -> Result<Value, NodeFailure> {
        let conn = self.connection()?;
        let (routing, sequence) = route(cmd);
        let (RoutingInfo::SingleNode(node), Some(sequence)) = (routing, sequence) else {
            return Err(NodeFailure::Unexpected("a lock write without a key".into()));
        };
        let pipe = sync_check::synced_pipeline(cmd, r, self.sync.timeout());
        let replies = self
            .sequenced(conn, sequence, Request::Pipeline(pipe, node))
            .await
            .map_err(|e| failure(&e))?;
        let Value::Array(replies) = replies else {
            return Err(NodeFailure::Unexpected(format!("{replies:?}")));
        };
        let mut replies = replies.into_iter();
        match (replies.next(), replies.next()) {
            (Some(reply), Some(wait)) => {
                sync_check::judge(kind, reply, wait, r, self.sync.timeout())
            }
            other => Err(NodeFailure::Unexpected(format!("{other:?}"))),
        }
    }

    /// Runs `cmd` in a task of its own once the previous sequenced command
    /// of the same key and owner finished, and waits for its reply. The
    /// command is registered as the latest of its sequence when this is
    /// called (the rounds call it in their first poll, in order).
    fn sequenced(
        self: &Arc<Self>,
        conn: ClusterConnection,
        sequence: Box<[u8]>,
        request: Request,
    ) -> impl std::future::Future<Output = redis::RedisResult<Value>> {
        let (done, done_rx) = watch::channel(());
        let previous = lock(&self.in_flight).insert(sequence.clone(), done_rx.clone());
        let (reply_tx, reply_rx) = oneshot::channel();
        let this = Arc::clone(self);
        let task = async move {
            if let Some(mut previous) = previous {
                // Err once that command's task dropped its sender: finished.
                let _ = previous.changed().await;
            }
            let mut conn = conn;
            let reply = match request {
                Request::Command(cmd, routing) => conn.route_command(cmd, routing).await,
                Request::Pipeline(pipe, node) => conn
                    .route_pipeline(pipe, 0, 2, node)
                    .await
                    .map(Value::Array),
            };
            let _ = reply_tx.send(reply);
            drop(done);
            let mut in_flight = lock(&this.in_flight);
            if in_flight
                .get(&sequence)
                .is_some_and(|latest| latest.same_channel(&done_rx))
            {
                in_flight.remove(&sequence);
            }
        };
        let spawned = tokio::runtime::Handle::try_current().map(|h| h.spawn(task));
        async move {
            if spawned.is_err() {
                return Err(RedisError::from((
                    ErrorKind::Client,
                    "no tokio runtime",
                    "cluster members need a tokio runtime".to_string(),
                )));
            }
            reply_rx.await.unwrap_or_else(|_| {
                Err(RedisError::from((
                    ErrorKind::Client,
                    "the command's task ended without a reply",
                )))
            })
        }
    }

    /// `REDLOCK.INSPECT key` on the master of the key's slot, with the
    /// shard that answered (its address and node id, from the `myself` line
    /// of `CLUSTER NODES`).
    pub(crate) async fn inspect(
        self: &Arc<Self>,
        key: &str,
    ) -> Result<(Value, Option<(String, String)>), NodeFailure> {
        let mut conn = self.connection()?;
        let mut pipe = redis::pipe();
        pipe.cmd("REDLOCK.INSPECT")
            .arg(key)
            .cmd("CLUSTER")
            .arg("NODES");
        let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
        let replies = match tokio::time::timeout(
            self.timeout,
            conn.route_pipeline(pipe, 0, 2, route),
        )
        .await
        {
            Err(_) => return Err(NodeFailure::Timeout(self.timeout)),
            Ok(Err(e)) => return Err(failure(&e)),
            Ok(Ok(replies)) => replies,
        };
        let mut replies = replies.into_iter();
        let inspect = replies
            .next()
            .ok_or_else(|| NodeFailure::Unexpected("no INSPECT reply".into()))?
            .extract_error()
            .map_err(|e| failure(&e))?;
        let shard = replies
            .next()
            .and_then(|v| redis::from_redis_value::<String>(v).ok())
            .and_then(|text| myself(&text));
        Ok((inspect, shard))
    }

    /// A `REDLOCK.WAIT` command for `key` on a connection of its own to the
    /// master of the key's slot (the one the latest `-MOVED` named, else
    /// the first seed that accepts a connection), following at most
    /// [`MAX_REDIRECTS`] redirects: `-MOVED` (remembered for the slot) and
    /// `-ASK` (`ASKING` first). Otherwise as `Node::wait_free`.
    pub(crate) async fn wait_free(
        &self,
        key: &str,
        cmd: &Cmd,
        on_sent: OnSent<'_>,
    ) -> Result<bool, NodeFailure> {
        let slot = key_slot(key.as_bytes());
        let known = lock(&self.slot_owners).get(&slot).cloned();
        let mut targets: Vec<Box<str>> = known.into_iter().collect();
        targets.extend(
            self.seeds
                .iter()
                .map(|s| s.addr().to_string().into_boxed_str()),
        );
        let mut asking = false;
        for _ in 0..=MAX_REDIRECTS {
            let mut loan = self.blocking_connection(&targets).await?;
            let conn = loan
                .conn
                .as_mut()
                .ok_or_else(|| NodeFailure::NotConnected("no connection".into()))?;
            if asking {
                let reply = conn.send_packed_command(&redis::cmd("ASKING")).await;
                if let Err(e) = reply.and_then(Value::extract_error) {
                    let (failure, broken) = crate::classify::node_failure(&e);
                    loan.answered = !broken;
                    return Err(failure);
                }
            }
            on_sent();
            let reply = conn.send_packed_command(cmd).await;
            match reply.and_then(Value::extract_error) {
                Ok(Value::Int(n)) => {
                    loan.answered = true;
                    if !asking {
                        lock(&self.slot_owners).insert(slot, loan.addr.clone());
                    }
                    return Ok(n == 1);
                }
                Ok(other) => return Err(NodeFailure::Unexpected(format!("{other:?}"))),
                Err(e) => {
                    if let Some((node, moved_slot)) = e.redirect_node() {
                        loan.answered = true;
                        let node: Box<str> = node.into();
                        asking = e.kind() == ErrorKind::Server(redis::ServerErrorKind::Ask);
                        if !asking {
                            lock(&self.slot_owners).insert(moved_slot, node.clone());
                        }
                        targets = vec![node];
                        continue;
                    }
                    // The shard let the waiter go without an answer about
                    // the lock: its key left the node (`-TRYAGAIN`, e.g. a
                    // MIGRATE), the node became a replica (`-UNBLOCKED`, and
                    // it closes the connection), or a shard of the cluster
                    // has no master for now (`-CLUSTERDOWN`). Wait again;
                    // the retry finds the key's new place or its state. The
                    // waiting round bounds the whole.
                    if let Some(code @ ("TRYAGAIN" | "UNBLOCKED" | "CLUSTERDOWN")) = e.code() {
                        loan.answered = code == "TRYAGAIN";
                        asking = false;
                        drop(loan);
                        let pause = if code == "CLUSTERDOWN" { 50 } else { 5 };
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                        continue;
                    }
                    let (failure, broken) = crate::classify::node_failure(&e);
                    loan.answered = !broken;
                    return Err(failure);
                }
            }
        }
        Err(NodeFailure::Refused(format!(
            "REDLOCK.WAIT redirected more than {MAX_REDIRECTS} times for slot {slot}"
        )))
    }

    /// An idle blocking connection to the first of `targets` that has one
    /// or accepts a new one.
    async fn blocking_connection(
        &self,
        targets: &[Box<str>],
    ) -> Result<BlockingLoan<'_>, NodeFailure> {
        let mut last = NodeFailure::NotConnected("no address to connect to".into());
        for addr in targets {
            let idle = lock(&self.blocking).get_mut(addr).and_then(Vec::pop);
            if let Some(conn) = idle {
                return Ok(BlockingLoan {
                    cluster: self,
                    addr: addr.clone(),
                    conn: Some(conn),
                    answered: false,
                });
            }
            match self.open(addr).await {
                Ok(conn) => {
                    return Ok(BlockingLoan {
                        cluster: self,
                        addr: addr.clone(),
                        conn: Some(conn),
                        answered: false,
                    })
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A new connection to the shard at `addr` (`host:port`), with the
    /// first seed's scheme, credentials and TLS settings.
    async fn open(&self, addr: &str) -> Result<MultiplexedConnection, NodeFailure> {
        let bad = || NodeFailure::Unexpected(format!("bad shard address {addr:?}"));
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let seed = &self.seeds[0];
        let target = match seed.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.to_string(), port),
        };
        let client = crate::tls::client_for(seed.clone().set_addr(target), self.tls.as_ref())
            .map_err(|e| NodeFailure::NotConnected(e.to_string()))?;
        let config = connection_config(self.connect_timeout);
        let attempt = client.get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Err(_) => Err(NodeFailure::NotConnected(format!(
                "connect to {addr} timed out after {} ms",
                self.connect_timeout.as_millis()
            ))),
            Ok(Err(e)) => Err(NodeFailure::NotConnected(format!(
                "{addr}: {}",
                crate::tls::describe_connect_error(&e)
            ))),
            Ok(Ok(conn)) => Ok(conn),
        }
    }
}

/// A blocking connection on loan: back to the pool when its command was
/// answered, closed otherwise (as for a node).
struct BlockingLoan<'a> {
    cluster: &'a Cluster,
    addr: Box<str>,
    conn: Option<MultiplexedConnection>,
    answered: bool,
}

impl Drop for BlockingLoan<'_> {
    fn drop(&mut self) {
        if let (true, Some(conn)) = (self.answered, self.conn.take()) {
            let mut pool = lock(&self.cluster.blocking);
            let idle = pool.entry(self.addr.clone()).or_default();
            if idle.len() < BLOCKING_POOL_MAX {
                idle.push(conn);
            }
        }
    }
}

/// The route of a command (the master of its first argument's slot;
/// anywhere for a command without arguments) and, for the mutating lock
/// commands, its sequence: the key and the owner.
fn route(cmd: &Cmd) -> (RoutingInfo, Option<Box<[u8]>>) {
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next().unwrap_or_default();
    let mut later_keys = 0;
    if name.eq_ignore_ascii_case(b"EVAL") {
        // `EVAL script numkeys key … owner …` (a lock set, `lock_set.rs`):
        // routed by its first key (the set's names share that key's slot),
        // and sequenced with that key's commands of the same owner.
        args.next();
        later_keys = args
            .next()
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
            .unwrap_or(1)
            .saturating_sub(1);
    }
    let Some(key) = args.next() else {
        return (RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random), None);
    };
    for _ in 0..later_keys {
        args.next();
    }
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )));
    let sequenced = [
        &b"REDLOCK.ACQUIRE"[..],
        b"REDLOCK.RELEASE",
        b"REDLOCK.EXTEND",
        b"REDLOCK.FENCE",
    ]
    .iter()
    .any(|c| c.eq_ignore_ascii_case(name))
        || sync_check::lock_write(cmd) == Some(sync_check::LockWrite::AcquireSet);
    let sequence = match (sequenced, args.next()) {
        (true, Some(owner)) => {
            // Length-prefixed, so that no two (key, owner) pairs collide.
            let mut s = Vec::with_capacity(8 + key.len() + owner.len());
            s.extend_from_slice(&(key.len() as u64).to_le_bytes());
            s.extend_from_slice(key);
            s.extend_from_slice(owner);
            Some(s.into_boxed_slice())
        }
        _ => None,
    };
    (routing, sequence)
}

/// A cluster connection's error as a member failure. Only an error reply
/// of the module (or the ACL) proves that the command did not run; a
/// routing or availability error (`MOVED`, `ASK`, `TRYAGAIN`,
/// `CLUSTERDOWN`, …) or a transport error comes after retries, one of which
/// may have run, so it counts as a broken connection (may have executed).
fn failure(err: &RedisError) -> NodeFailure {
    let routing = matches!(
        err.code(),
        Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "LOADING" | "READONLY")
    );
    match err.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension if !routing => {
            crate::classify::node_failure(err).0
        }
        _ => NodeFailure::Connection(err.to_string()),
    }
}

/// The `myself` line of a `CLUSTER NODES` reply: (address, node id).
fn myself(nodes: &str) -> Option<(String, String)> {
    nodes.lines().find_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        let id = fields.next()?;
        let addr = fields.next()?;
        let flags = fields.next()?;
        if !flags.split(',').any(|f| f == "myself") {
            return None;
        }
        // ip:port@cport[,hostname]
        let addr = addr.split(['@', ',']).next().unwrap_or(addr);
        Some((addr.to_string(), id.to_string()))
    })
}

/// The hash slot of a key: CRC16 (XMODEM) of the key, or of its hash tag
/// (the part between the first `{` and the next `}`, when not empty),
/// modulo 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The reconnect task's claim on its member (as for a node).
struct ReconnectTask(Weak<Cluster>);

impl Drop for ReconnectTask {
    fn drop(&mut self) {
        if let Some(cluster) = self.0.upgrade() {
            lock(&cluster.state).reconnecting = false;
        }
    }
}

async fn reconnect_loop(task: ReconnectTask) {
    let mut pause = RECONNECT_MIN;
    loop {
        let Some(c) = task.0.upgrade() else { return };
        if c.try_connect().await.is_ok() {
            return;
        }
        drop(c);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // The CRC16 check value, and slots Redis reports (CLUSTER KEYSLOT).
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn lock_commands_are_sequenced_by_key_and_owner() {
        let mut acquire = redis::cmd("REDLOCK.ACQUIRE");
        acquire.arg("k").arg("owner-1").arg(100);
        let mut release = redis::cmd("redlock.release");
        release.arg("k").arg("owner-1");
        let mut other = redis::cmd("REDLOCK.RELEASE");
        other.arg("k").arg("owner-2");
        let mut inspect = redis::cmd("REDLOCK.INSPECT");
        inspect.arg("k");
        let (_, a) = route(&acquire);
        let (_, r) = route(&release);
        let (_, o) = route(&other);
        assert!(a.is_some());
        assert_eq!(a, r);
        assert_ne!(a, o);
        assert_eq!(route(&inspect).1, None);
        // Length-prefixed: ("ab", "c…") and ("a", "bc…") differ.
        let mut x = redis::cmd("REDLOCK.RELEASE");
        x.arg("ab").arg("c");
        let mut y = redis::cmd("REDLOCK.RELEASE");
        y.arg("a").arg("bc");
        assert_ne!(route(&x).1, route(&y).1);
    }

    #[test]
    fn bad_seeds_are_refused_with_what_is_wrong() {
        let ms = Duration::from_millis(100);
        let new = |seeds: &[&str]| {
            let seeds: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
            match Cluster::new(&seeds, ms, ms, None, Arc::new(SyncState::new(ms))) {
                Ok(_) => String::new(),
                Err(e) => e.to_string(),
            }
        };
        assert!(new(&[]).contains("at least one seed URL"));
        let mixed = new(&["redis://:pw@h:7000", "rediss://:pw@h:7001"]);
        assert!(mixed.contains("mix redis:// and rediss://"), "{mixed}");
        assert!(!mixed.contains("pw"), "{mixed}");
        let insecure = new(&["rediss://h:7000/#insecure"]);
        assert!(insecure.contains("cannot be turned off"), "{insecure}");
        assert!(new(&["unix:///tmp/redis.sock"]).contains("not a TCP URL"));
        // TLS seeds are accepted (the redis crate's cluster client does TLS).
        assert_eq!(new(&["rediss://h:7000", "rediss://h:7001"]), "");
        let cluster = Cluster::new(
            &["redis://u:secret@H:7000".to_string()],
            ms,
            ms,
            None,
            Arc::new(SyncState::new(ms)),
        )
        .expect("a plain seed");
        assert_eq!(cluster.addr(), "cluster(H:7000)");
        assert_eq!(cluster.url(), "cluster(redis://***@H:7000)");
    }

    #[test]
    fn myself_is_found_in_cluster_nodes() {
        let nodes = "07c37dfeb2352e0b0a4e1b4c3c7c4f0b8e0a1111 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922\n\
                     67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30001@40001,host-a myself,master - 0 0 1 connected 0-5460\n";
        assert_eq!(
            myself(nodes),
            Some((
                "127.0.0.1:30001".to_string(),
                "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1".to_string()
            ))
        );
        assert_eq!(myself("garbage"), None);
    }
}
