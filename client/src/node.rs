//! One Redis master: a persistent multiplexed connection, a per-node timeout
//! on every call (one timer per round for the quorum rounds), and a
//! background reconnect when the connection is missing
//! or breaks.
//!
//! A node that is down never makes a call wait: with no connection, a call
//! fails at once (and makes sure a reconnect task runs); with a connection to
//! a frozen or partitioned node, a call fails after the per-node timeout.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, Value};

use crate::error::{Error, NodeFailure};
use crate::tls::TlsSettings;

/// First and largest pause between two reconnect attempts.
const RECONNECT_MIN: Duration = Duration::from_millis(20);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// One node of the quorum.
pub(crate) struct Node {
    /// `host:port`, for messages (the URL may hold a password).
    addr: Box<str>,
    client: Client,
    /// Bound on every command's reply.
    timeout: Duration,
    /// Bound on establishing a connection (TCP, TLS, AUTH, setup).
    connect_timeout: Duration,
    /// A `rediss://` node.
    tls: bool,
    state: Mutex<ConnState>,
}

#[derive(Default)]
struct ConnState {
    /// The live connection and its generation number.
    current: Option<(u64, MultiplexedConnection)>,
    /// Bumped at every new connection, so that an error seen on an old
    /// connection never tears down a newer one.
    generation: u64,
    /// Why the node is down, for error messages.
    last_error: Option<String>,
    /// A reconnect task is running.
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
    ) -> Result<Arc<Self>, Error> {
        crate::tls::check_url(url, &redact(url), tls_settings)?;
        let client = crate::tls::client(url, tls_settings)
            .map_err(|e| Error::InvalidArgument(format!("bad node URL {:?}: {e}", redact(url))))?;
        let addr = client
            .get_connection_info()
            .addr
            .to_string()
            .into_boxed_str();
        let tls = matches!(
            client.get_connection_info().addr,
            redis::ConnectionAddr::TcpTls { .. }
        );
        Ok(Arc::new(Node {
            addr,
            client,
            timeout,
            connect_timeout,
            tls,
            state: Mutex::new(ConnState::default()),
        }))
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
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
        let config = AsyncConnectionConfig::new().set_connection_timeout(self.connect_timeout);
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
        let mut state = self.lock_state();
        match result {
            Ok(conn) => {
                state.generation += 1;
                state.current = Some((state.generation, conn));
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
        handle.spawn(reconnect_loop(Arc::downgrade(self)));
    }

    /// Forgets the connection of generation `generation` after it broke.
    fn mark_down(self: &Arc<Self>, generation: u64, reason: &NodeFailure) {
        {
            let mut state = self.lock_state();
            if matches!(state.current, Some((g, _)) if g == generation) {
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

    /// The per-node timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one command and waits at most the per-node timeout for its reply.
    /// Error replies come back as `Err` with their classification.
    pub(crate) async fn call(self: &Arc<Self>, cmd: &Cmd) -> Result<Value, NodeFailure> {
        self.call_within(cmd, Some(self.timeout)).await
    }

    /// [`Node::call`] without a timer of its own, for the quorum rounds:
    /// they bound all their calls with one timer per round (the calls all
    /// start in the same poll, so it is the same bound), which saves a
    /// timer registration per node and command.
    pub(crate) async fn call_untimed(self: &Arc<Self>, cmd: &Cmd) -> Result<Value, NodeFailure> {
        self.call_within(cmd, None).await
    }

    /// Checks, within the connect timeout, that the node answers and runs
    /// the module: `REDLOCK.INSPECT` without a key gets a wrong-arity error
    /// from the module and "unknown command" from a server without it. Any
    /// error reply other than that proves the module; no reply in time, or
    /// no connection, is a failure.
    pub(crate) async fn check_module(self: &Arc<Self>) -> Result<(), NodeFailure> {
        let probe = redis::cmd("REDLOCK.INSPECT");
        match self.call_within(&probe, Some(self.connect_timeout)).await {
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

    async fn call_within(
        self: &Arc<Self>,
        cmd: &Cmd,
        timeout: Option<Duration>,
    ) -> Result<Value, NodeFailure> {
        let current = {
            let state = self.lock_state();
            match &state.current {
                Some((generation, conn)) => Ok((*generation, conn.clone())),
                None => Err(state
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "connecting".to_string())),
            }
        };
        let (generation, mut conn) = match current {
            Ok(c) => c,
            Err(reason) => {
                self.spawn_reconnect();
                return Err(NodeFailure::NotConnected(reason));
            }
        };
        let reply = match timeout {
            Some(timeout) => {
                match tokio::time::timeout(timeout, conn.send_packed_command(cmd)).await {
                    Err(_) => return Err(NodeFailure::Timeout(timeout)),
                    Ok(reply) => reply,
                }
            }
            None => conn.send_packed_command(cmd).await,
        };
        match reply.and_then(Value::extract_error) {
            Ok(value) => Ok(value),
            Err(e) => {
                let (failure, broken) = NodeFailure::from_redis(&e);
                if broken {
                    self.mark_down(generation, &failure);
                }
                Err(failure)
            }
        }
    }
}

async fn reconnect_loop(node: Weak<Node>) {
    let mut pause = RECONNECT_MIN;
    loop {
        let Some(n) = node.upgrade() else { return };
        if n.try_connect().await.is_ok() {
            n.lock_state().reconnecting = false;
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
        )
        .err()
        .expect("bad scheme");
        let text = err.to_string();
        assert!(text.starts_with("invalid argument: bad node URL"), "{text}");
        assert!(!text.contains("pw"), "{text}");
    }
}
