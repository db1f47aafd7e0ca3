//! One Redis master: a persistent multiplexed connection, a per-node timeout
//! on every call (one timer per round for the quorum rounds), and a
//! background reconnect when the connection is missing or breaks.
//!
//! A node that is down never makes a call wait: with no connection, a call
//! fails at once (and makes sure a reconnect task runs); with a connection to
//! a frozen or partitioned node, a call fails after the per-node timeout.
//!
//! # What the quorum rounds rely on from the connection
//!
//! The rounds (`quorum.rs`: `fan_out`, `Leftovers`), in particular the
//! release of a failed or finished acquisition whose ACQUIRE to a slow node
//! is still unanswered, rely on three properties of redis-rs's
//! `MultiplexedConnection` as configured by [`connection_config`]. They are
//! pinned against a real server by `client/tests/connection_contract.rs`,
//! which fails if a redis-rs release changes them:
//!
//! 1. **Queued on the first poll.** The first poll of
//!    `send_packed_command` puts the command into the connection's queue
//!    (the rounds poll it under `tokio::task::unconstrained`, so that
//!    tokio's cooperative budget cannot delay it; no concurrency limit is
//!    configured). A round therefore starts all its commands in one poll.
//! 2. **Written in queue order.** One connection per node writes queued
//!    commands in the order they were queued, so a RELEASE queued after an
//!    ACQUIRE reaches the node after it: a dropped or unanswered ACQUIRE
//!    can never be applied after the RELEASE that was meant to undo it.
//!    Only within one connection: a command written just before a
//!    connection broke may still reach the node after commands sent on the
//!    next one, which is why every acquire attempt has an owner id of its
//!    own (`Redlock::acquire`).
//! 3. **Skipped once abandoned.** A queued command whose caller was dropped
//!    before the connection wrote it is not written at all. Safe (the node
//!    never sees it), but a slow node would then miss the ACQUIRE of a held
//!    lock, leaving it on a bare quorum; so an ACQUIRE round hands its
//!    unanswered calls to the `Lock`, which keeps them until its RELEASE is
//!    queued behind them, and RELEASE and EXTEND rounds finish theirs in the
//!    background.
//!
//! The connection has no response timeout of its own: the rounds bound
//! every call with one timer per round.
//!
//! A member that is a Redis Cluster does not have these properties (its
//! commands may be retried after redirects); `cluster.rs` says what it does
//! instead.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, Value};

use crate::core::error::{Error, NodeFailure};
use crate::identity::{parse_run_id, Endpoint, ServerId};
use crate::sync_check::{self, LockWrite, SyncState};
use crate::tls::TlsSettings;

/// What a blocking call runs once its connection is ready, right before it
/// sends its command (a waiter marks itself as queued: `local_turn.rs`).
pub(crate) type OnSent<'a> = &'a (dyn Fn() + Send + Sync);

/// The settings of every node's connection; see the module docs for what
/// the rounds rely on.
pub(crate) fn connection_config(connect_timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None)
}

/// Makes sure rustls has a crypto provider for `rediss://` nodes: the
/// process default when one is installed, otherwise ring.
pub(crate) fn ensure_tls_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// First and largest pause between two reconnect attempts.
const RECONNECT_MIN: Duration = Duration::from_millis(20);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// One node of the quorum.
pub(crate) struct Node {
    /// `host:port`, for messages (the URL may hold a password).
    addr: Box<str>,
    /// The URL without credentials, for naming the node in messages about
    /// its identity.
    url: Box<str>,
    /// Where the URL connects, normalised (to find identical URLs).
    endpoint: Endpoint,
    client: Client,
    /// Bound on every command's reply.
    timeout: Duration,
    /// Bound on establishing a connection (TCP, TLS, AUTH, setup).
    connect_timeout: Duration,
    /// A `rediss://` node.
    tls: bool,
    state: Mutex<ConnState>,
    /// Idle connections for blocking commands (`REDLOCK.WAIT`), which never
    /// go through the shared connection: a blocked command would stall
    /// every command queued behind it.
    blocking: Mutex<Vec<MultiplexedConnection>>,
    /// The replica-sync check: the R this node's member states, learned
    /// from the nodes (shared by every node a Sentinel member resolves).
    sync: Arc<SyncState>,
    /// While the check is on, the connections that carry the lock commands,
    /// each key over one of them ([`sync_check::lock_key`]); opened when
    /// first needed, forgotten when broken.
    shards: Mutex<[Option<MultiplexedConnection>; sync_check::SHARDS]>,
}

/// Most idle blocking connections kept per node.
const BLOCKING_POOL_MAX: usize = 64;

/// A blocking connection on loan: back to the pool when its command was
/// answered, closed otherwise (a waiter dropped mid-command must not leave
/// a blocked client on the node, nor a connection that would answer the
/// next user with the old reply).
struct BlockingLoan<'a> {
    node: &'a Node,
    conn: Option<MultiplexedConnection>,
    answered: bool,
}

impl Drop for BlockingLoan<'_> {
    fn drop(&mut self) {
        if let (true, Some(conn)) = (self.answered, self.conn.take()) {
            let mut pool = self.node.blocking.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < BLOCKING_POOL_MAX {
                pool.push(conn);
            }
        }
    }
}

#[derive(Default)]
struct ConnState {
    /// The live connection and its generation number.
    current: Option<(u64, MultiplexedConnection, Option<ServerId>)>,
    /// The identity learned on the latest connection, to log a change.
    last_id: Option<ServerId>,
    /// Bumped at every new connection, so that an error seen on an old
    /// connection never tears down a newer one.
    generation: u64,
    /// Why the node is down, for error messages.
    last_error: Option<String>,
    /// A reconnect task exists (see [`ReconnectTask`]).
    reconnecting: bool,
}

impl Node {
    /// Parses the URL (`redis://`, `rediss://`, `redis://user:pass@host:port/db`).
    /// Does not connect.
    pub(crate) fn new(
        url: &str,
        timeout: Duration,
        connect_timeout: Duration,
        tls_settings: Option<&TlsSettings>,
        sync: Arc<SyncState>,
    ) -> Result<Arc<Self>, Error> {
        crate::tls::check_url(url, &redact(url), tls_settings)?;
        if url
            .get(..9)
            .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
        {
            ensure_tls_provider();
        }
        let client = crate::tls::client(url, tls_settings)
            .map_err(|e| Error::InvalidArgument(format!("bad node URL {:?}: {e}", redact(url))))?;
        let info = client.get_connection_info();
        let addr = info.addr().to_string().into_boxed_str();
        let endpoint = Endpoint::of(info);
        let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        Ok(Arc::new(Node {
            addr,
            url: redact(url).into_boxed_str(),
            endpoint,
            client,
            timeout,
            connect_timeout,
            tls,
            state: Mutex::new(ConnState::default()),
            blocking: Mutex::new(Vec::new()),
            sync,
            shards: Mutex::new(Default::default()),
        }))
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The URL without credentials.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Where the URL connects, normalised.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The identity of the server behind the current connection, when
    /// connected and known.
    pub(crate) fn server_id(&self) -> Option<ServerId> {
        self.lock_state()
            .current
            .as_ref()
            .and_then(|(_, _, id)| id.clone())
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, ConnState> {
        // A panic while holding this lock cannot leave the state invalid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a connection now (used by `build`); on failure the node is left
    /// to the background reconnect.
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
        let config = connection_config(self.connect_timeout);
        let attempt = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let result = match tokio::time::timeout(self.connect_timeout, attempt).await {
            Err(_) => Err(format!(
                "connect timed out after {} ms",
                self.connect_timeout.as_millis()
            )),
            Ok(Err(e)) => Err(self.explain_connect_failure(&e).await),
            Ok(Ok(conn)) => Ok(conn),
        };
        let result = match result {
            Ok(mut conn) => self.learn_identity(&mut conn).await.map(|id| (conn, id)),
            Err(e) => Err(e),
        };
        let mut state = self.lock_state();
        match result {
            Ok((conn, id)) => {
                state.generation += 1;
                if state.last_id.is_some() && id.is_some() && state.last_id != id {
                    tracing::info!(node = %self.url, "the server's identity changed (restarted or replaced)");
                }
                state.last_id.clone_from(&id);
                state.current = Some((state.generation, conn, id));
                state.last_error = None;
                tracing::debug!(node = %self.addr, "connected");
                Ok(())
            }
            Err(e) => {
                state.last_error = Some(e.clone());
                Err(NodeFailure::NotConnected(e))
            }
        }
    }

    /// Why a connection attempt failed, in words that say what to do.
    ///
    /// A TLS server that refuses the client (no client certificate, one it
    /// does not trust) sends its alert after the handshake; the multiplexed
    /// connection then only reports that its driver stopped. One plain
    /// synchronous attempt, which reports the alert itself, finds the
    /// reason.
    async fn explain_connect_failure(&self, err: &redis::RedisError) -> String {
        let text = crate::tls::describe_connect_error(err);
        if !self.tls || !text.contains("unexpectedly terminated") {
            return text;
        }
        let client = self.client.clone();
        let timeout = self.connect_timeout;
        let attempt =
            tokio::task::spawn_blocking(move || client.get_connection_with_timeout(timeout).err());
        match attempt.await {
            Ok(Some(sync_err)) => crate::tls::describe_connect_error(&sync_err),
            _ => text,
        }
    }

    /// The `run_id` of the server behind a new connection (`INFO server`),
    /// within the connect timeout. `Ok(None)` when the server refuses INFO
    /// (an ACL user without `+info`): the node then cannot be told apart
    /// from the other members.
    async fn learn_identity(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<Option<ServerId>, String> {
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let reply =
            match tokio::time::timeout(self.connect_timeout, conn.send_packed_command(&info)).await
            {
                Err(_) => {
                    return Err(format!(
                        "no reply to INFO within {} ms",
                        self.connect_timeout.as_millis()
                    ))
                }
                Ok(reply) => reply.and_then(Value::extract_error),
            };
        let text = match reply {
            Ok(value) => redis::from_redis_value::<String>(value).map_err(|e| e.to_string())?,
            Err(e) => {
                let (failure, broken) = crate::classify::node_failure(&e);
                if broken {
                    return Err(failure.to_string());
                }
                tracing::warn!(node = %self.url, reason = %failure, "INFO refused: this node cannot be told apart from the other members (grant +info to detect one server listed twice)");
                return Ok(None);
            }
        };
        let id = parse_run_id(&text).map(ServerId::from);
        if id.is_none() {
            tracing::warn!(node = %self.url, "no run_id in INFO server: this node cannot be told apart from the other members");
        }
        Ok(id)
    }

    /// Starts the reconnect task unless one runs (or no tokio runtime is
    /// available, in which case the next call tries again).
    fn spawn_reconnect(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut state = self.lock_state();
            if state.reconnecting || state.current.is_some() {
                return;
            }
            state.reconnecting = true;
        }
        handle.spawn(reconnect_loop(ReconnectTask(Arc::downgrade(self))));
    }

    /// Forgets the connection of generation `generation` after it broke.
    fn mark_down(self: &Arc<Self>, generation: u64, reason: &NodeFailure) {
        {
            let mut state = self.lock_state();
            if matches!(state.current, Some((g, _, _)) if g == generation) {
                state.current = None;
                state.last_error = Some(match reason {
                    NodeFailure::Connection(e) => format!("connection lost: {e}"),
                    other => other.to_string(),
                });
                tracing::debug!(node = %self.addr, %reason, "connection lost; reconnecting in the background");
            }
        }
        self.spawn_reconnect();
    }

    /// The per-node timeout, and the replica-sync check's `WAIT` when it is
    /// on.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout + self.sync.extra()
    }

    /// Sends one command and waits at most the per-node timeout for its reply.
    /// Error replies come back as `Err` with their classification.
    pub(crate) async fn call(self: &Arc<Self>, cmd: &Cmd) -> Result<Value, NodeFailure> {
        self.call_within(cmd, Some(self.timeout)).await.1
    }

    /// [`Node::call`] without a timer of its own, for the quorum rounds:
    /// they bound all their calls with one timer per round (the calls all
    /// start in the same poll, so it is the same bound), which saves a
    /// timer registration per node and command. Also returns the identity
    /// of the server the command went to (see `identity.rs`).
    pub(crate) async fn call_untimed(
        self: &Arc<Self>,
        cmd: &Cmd,
    ) -> (Option<ServerId>, Result<Value, NodeFailure>) {
        self.call_within(cmd, None).await
    }

    /// Checks, within the connect timeout, that the node answers and runs
    /// the module: `REDLOCK.INSPECT` without a key gets a wrong-arity error
    /// from the module and "unknown command" from a server without it. Any
    /// error reply other than that proves the module; no reply in time, or
    /// no connection, is a failure.
    pub(crate) async fn check_module(self: &Arc<Self>) -> Result<(), NodeFailure> {
        let probe = redis::cmd("REDLOCK.INSPECT");
        match self.call_within(&probe, Some(self.connect_timeout)).await.1 {
            Ok(_)
            | Err(
                NodeFailure::Refused(_)
                | NodeFailure::BadArgument(_)
                | NodeFailure::Grace { .. }
                | NodeFailure::NoPermission(_),
            ) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Learns the node's R from [`sync_check::probe`] on the main
    /// connection, within the connect timeout (nothing learned on any
    /// failure: the first lock write learns it then).
    pub(crate) async fn learn_sync_replicas(self: &Arc<Self>) {
        let current = self
            .lock_state()
            .current
            .as_ref()
            .map(|(g, c, _)| (*g, c.clone()));
        let Some((generation, mut conn)) = current else {
            return;
        };
        let reply = self
            .send(
                &mut conn,
                Some(generation),
                &sync_check::probe(),
                Some(self.connect_timeout),
            )
            .await;
        if let Some(r) = sync_check::probed(&reply) {
            self.sync.learn(r);
        }
    }

    /// A `REDLOCK.WAIT` command (`key timeout QUEUE owner ticket`) on a
    /// connection of its own: `Ok(true)` when the lock is free on this node
    /// for the owner (at once, or when it frees and the owner is first in
    /// the node's queue), `Ok(false)` when the node's timeout passed first.
    /// Not bounded by the per-node timeout (the caller bounds the whole
    /// wait); dropping the future closes the connection, which ends the
    /// wait on the node.
    pub(crate) async fn wait_free(
        &self,
        cmd: &Cmd,
        on_sent: OnSent<'_>,
    ) -> Result<bool, NodeFailure> {
        match self.call_blocking(cmd, on_sent).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(NodeFailure::Unexpected(format!("{other:?}"))),
        }
    }

    /// A blocking command (`REDLOCK.WAIT`, `XREAD BLOCK`) on a pooled
    /// connection of its own, so that it never stalls the shared one. Not
    /// bounded by the per-node timeout; dropping the future closes the
    /// connection, which ends the block on the node. `on_sent` runs once the
    /// connection is ready, right before the command is sent.
    pub(crate) async fn call_blocking(
        &self,
        cmd: &Cmd,
        on_sent: OnSent<'_>,
    ) -> Result<Value, NodeFailure> {
        let idle = self
            .blocking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let config = connection_config(self.connect_timeout);
                let attempt = self
                    .client
                    .get_multiplexed_async_connection_with_config(&config);
                match tokio::time::timeout(self.connect_timeout, attempt).await {
                    Err(_) => {
                        return Err(NodeFailure::NotConnected(format!(
                            "connect timed out after {} ms",
                            self.connect_timeout.as_millis()
                        )))
                    }
                    Ok(Err(e)) => {
                        return Err(NodeFailure::NotConnected(
                            self.explain_connect_failure(&e).await,
                        ))
                    }
                    Ok(Ok(conn)) => conn,
                }
            }
        };
        let mut loan = BlockingLoan {
            node: self,
            conn: Some(conn),
            answered: false,
        };
        let Some(conn) = loan.conn.as_mut() else {
            return Err(NodeFailure::NotConnected("no connection".into()));
        };
        on_sent();
        let reply = conn.send_packed_command(cmd).await;
        match reply.and_then(Value::extract_error) {
            Ok(value) => {
                loan.answered = true;
                Ok(value)
            }
            Err(e) => {
                let (failure, broken) = crate::classify::node_failure(&e);
                loan.answered = !broken;
                Err(failure)
            }
        }
    }

    async fn call_within(
        self: &Arc<Self>,
        cmd: &Cmd,
        timeout: Option<Duration>,
    ) -> (Option<ServerId>, Result<Value, NodeFailure>) {
        let current = {
            let state = self.lock_state();
            match &state.current {
                Some((generation, conn, id)) => Ok((*generation, conn.clone(), id.clone())),
                None => Err(state
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "connecting".to_string())),
            }
        };
        let (generation, mut conn, id) = match current {
            Ok(c) => c,
            Err(reason) => {
                self.spawn_reconnect();
                return (None, Err(NodeFailure::NotConnected(reason)));
            }
        };
        // While the check is on, a key's lock commands have a connection of
        // their own among a few (see `sync_check::lock_key`); a broken one
        // is forgotten, never the main connection.
        let mut shard = None;
        let mut generation = Some(generation);
        if self.sync.r() > 0 {
            if let Some(key) = sync_check::lock_key(cmd) {
                let i = sync_check::shard_of(key);
                match self.shard_connection(i).await {
                    Ok(c) => (conn, shard, generation) = (c, Some(i), None),
                    Err(e) => return (id, Err(e)),
                }
            }
        }
        let Some(kind) = sync_check::lock_write(cmd) else {
            let reply = self.send(&mut conn, generation, cmd, timeout).await;
            if let (Some(i), Err(NodeFailure::Connection(_))) = (shard, &reply) {
                self.forget_shard(i);
            }
            return (id, reply);
        };
        // A lock write: stated with the R the nodes asked for, followed by
        // WAIT R (see `sync_check.rs`); sent again when the node states
        // another R (it changed nothing), on the key's connection for that R.
        let mut reply = Err(NodeFailure::SyncStated(0));
        for _ in 0..sync_check::RESTATE_TRIES {
            let r = self.sync.r();
            reply = if r == 0 {
                self.send(&mut conn, generation, cmd, timeout).await
            } else {
                self.send_synced(&mut conn, generation, kind, cmd, r, timeout)
                    .await
            };
            match reply {
                Err(NodeFailure::SyncStated(stated)) if stated != r => {
                    tracing::debug!(node = %self.addr, r = stated, "the node states another R");
                    self.sync.learn(stated);
                    let key = sync_check::lock_key(cmd).filter(|_| stated > 0);
                    match key.map(sync_check::shard_of) {
                        Some(i) => match self.shard_connection(i).await {
                            Ok(c) => (conn, shard, generation) = (c, Some(i), None),
                            Err(e) => return (id, Err(e)),
                        },
                        None => match &self.lock_state().current {
                            Some((g, c, _)) => {
                                (conn, shard, generation) = (c.clone(), None, Some(*g));
                            }
                            None => return (id, reply),
                        },
                    }
                }
                Err(NodeFailure::Connection(_)) => {
                    if let Some(i) = shard {
                        self.forget_shard(i);
                    }
                    break;
                }
                _ => break,
            }
        }
        (id, reply)
    }

    /// Lock-command connection `shard`, opened now when missing (within the
    /// connect timeout). Only while the node's main connection is up: a node
    /// that is down never makes a call wait.
    async fn shard_connection(&self, shard: usize) -> Result<MultiplexedConnection, NodeFailure> {
        if let Some(conn) = self.shards.lock().unwrap_or_else(|p| p.into_inner())[shard].clone() {
            return Ok(conn);
        }
        // In a task of its own: the calls' futures stay `Sync`.
        let (client, timeout) = (self.client.clone(), self.connect_timeout);
        let opened = tokio::spawn(async move {
            let config = connection_config(timeout);
            tokio::time::timeout(
                timeout,
                client.get_multiplexed_async_connection_with_config(&config),
            )
            .await
        });
        let conn = match opened.await {
            Err(e) => return Err(NodeFailure::NotConnected(e.to_string())),
            Ok(Err(_)) => {
                return Err(NodeFailure::NotConnected(format!(
                    "connect timed out after {} ms",
                    timeout.as_millis()
                )))
            }
            Ok(Ok(Err(e))) => return Err(NodeFailure::NotConnected(e.to_string())),
            Ok(Ok(Ok(conn))) => conn,
        };
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        // Another call may have opened it meanwhile: keep one, so that the
        // key's commands stay on a single connection.
        Ok(shards[shard].get_or_insert(conn).clone())
    }

    /// Forgets a broken lock-command connection.
    fn forget_shard(&self, shard: usize) {
        self.shards.lock().unwrap_or_else(|p| p.into_inner())[shard] = None;
    }

    /// One command on `conn` (of generation `generation`), bounded by
    /// `timeout` when given; a broken connection is marked down.
    async fn send(
        self: &Arc<Self>,
        conn: &mut MultiplexedConnection,
        generation: Option<u64>,
        cmd: &Cmd,
        timeout: Option<Duration>,
    ) -> Result<Value, NodeFailure> {
        let reply = match timeout {
            Some(timeout) => {
                match tokio::time::timeout(timeout, conn.send_packed_command(cmd)).await {
                    Err(_) => return Err(NodeFailure::Timeout(timeout)),
                    Ok(reply) => reply,
                }
            }
            None => conn.send_packed_command(cmd).await,
        };
        reply
            .and_then(Value::extract_error)
            .map_err(|e| self.failure(generation, &e))
    }

    /// `cmd SYNC r` and `WAIT r` in one write on `conn`, judged by
    /// [`sync_check::judge`].
    async fn send_synced(
        self: &Arc<Self>,
        conn: &mut MultiplexedConnection,
        generation: Option<u64>,
        kind: LockWrite,
        cmd: &Cmd,
        r: u64,
        timeout: Option<Duration>,
    ) -> Result<Value, NodeFailure> {
        let pipe = sync_check::synced_pipeline(cmd, r, self.sync.timeout());
        let replies = match timeout {
            Some(timeout) => {
                let timeout = timeout + self.sync.timeout();
                match tokio::time::timeout(timeout, conn.send_packed_commands(&pipe, 0, 2)).await {
                    Err(_) => return Err(NodeFailure::Timeout(timeout)),
                    Ok(replies) => replies,
                }
            }
            None => conn.send_packed_commands(&pipe, 0, 2).await,
        };
        let mut replies = replies
            .map_err(|e| self.failure(generation, &e))?
            .into_iter();
        match (replies.next(), replies.next()) {
            (Some(reply), Some(wait)) => {
                sync_check::judge(kind, reply, wait, r, self.sync.timeout())
            }
            other => Err(NodeFailure::Unexpected(format!("{other:?}"))),
        }
    }

    /// Classifies an error of the main connection of `generation` (`None`:
    /// a lock-command connection), and marks it down when it is broken.
    fn failure(self: &Arc<Self>, generation: Option<u64>, e: &redis::RedisError) -> NodeFailure {
        let (failure, broken) = crate::classify::node_failure(e);
        if let (true, Some(generation)) = (broken, generation) {
            self.mark_down(generation, &failure);
        }
        failure
    }
}

/// The reconnect task's claim on its node: clears the node's
/// `reconnecting` flag when the task ends, however it ends. A runtime that
/// shuts down drops its tasks (also tasks never polled: this is an argument
/// of the task's future, not a local), so a node whose reconnect task died
/// with its runtime starts a new one at its next call.
struct ReconnectTask(Weak<Node>);

impl Drop for ReconnectTask {
    fn drop(&mut self) {
        if let Some(node) = self.0.upgrade() {
            node.lock_state().reconnecting = false;
        }
    }
}

async fn reconnect_loop(task: ReconnectTask) {
    let mut pause = RECONNECT_MIN;
    loop {
        let Some(n) = task.0.upgrade() else { return };
        if n.try_connect().await.is_ok() {
            return;
        }
        drop(n);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

/// The URL with any `user:password@` part hidden.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("redis://user:secret@h:1/0"),
            "redis://***@h:1/0".to_string()
        );
        assert_eq!(redact("redis://h:1"), "redis://h:1".to_string());
    }

    #[test]
    fn bad_urls_are_invalid_arguments() {
        let err = Node::new(
            "http://x:pw@nowhere",
            Duration::from_millis(1),
            Duration::from_millis(1),
            None,
            Arc::new(SyncState::new(Duration::from_millis(1))),
        )
        .err()
        .expect("bad scheme");
        let text = err.to_string();
        assert!(text.starts_with("invalid argument: bad node URL"), "{text}");
        assert!(!text.contains("pw"), "{text}");
    }
}
