//! A member that is one master with replicas behind Redis Sentinel: the
//! master is found through the sentinels and followed across failovers.
//!
//! The redis crate resolves a Sentinel master once per connection and does
//! not follow failovers (redis-rs#1438), so this member asks the sentinels
//! itself with plain commands: `SENTINEL GET-MASTER-ADDR-BY-NAME name` on
//! each sentinel in turn (the one that answered moves to the front, as the
//! Sentinel client guidelines say), then `ROLE` on the address it got; only
//! a node that says `master` is used. It asks again when the master stops
//! answering (no connection, a broken one, a timeout) or refuses a lock
//! write with `READONLY` (it was demoted), and sends the command once more
//! to the new master within the same call: a failover inside the member
//! costs the calls in flight, not the lock of a holder whose lease is still
//! valid (its next extension reaches the new master).
//!
//! Sentinels and data nodes have settings of their own: the sentinel URLs
//! carry the sentinels' scheme and credentials, the data nodes get theirs
//! from [`Member::data_credentials`](crate::Member::data_credentials) and
//! [`Member::data_tls`](crate::Member::data_tls). The replica-sync check's
//! R, learned from the nodes, is kept across failovers (every node of the
//! group must have the same).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Cmd, Value};

use crate::core::error::{Error, NodeFailure};
use crate::identity::ServerId;
use crate::node::OnSent;
use crate::node::{redact, Node};
use crate::sync_check::SyncState;
use crate::tls::TlsSettings;

/// What a Sentinel member is made of (see [`crate::Member::sentinel`]).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SentinelSpec {
    /// The master's name in Sentinel.
    pub(crate) name: String,
    /// The sentinels' URLs.
    pub(crate) sentinels: Vec<String>,
    /// The data nodes' ACL user (`None`: the default user).
    pub(crate) data_user: Option<String>,
    /// The data nodes' password.
    pub(crate) data_password: Option<String>,
    /// The data nodes serve TLS (`rediss://`).
    pub(crate) data_tls: bool,
}

/// The member's connection state.
pub(crate) struct SentinelMember {
    spec: SentinelSpec,
    /// `sentinel(name@host:port,…)`, for messages.
    addr: Box<str>,
    /// The sentinels, in the order they are asked (the last one that
    /// answered first).
    sentinels: Mutex<Vec<(String, redis::Client)>>,
    timeout: Duration,
    connect_timeout: Duration,
    tls: Option<TlsSettings>,
    sync: Arc<SyncState>,
    /// The master in use, once resolved and checked.
    current: Mutex<Option<Arc<Node>>>,
    /// One resolution at a time.
    resolving: tokio::sync::Mutex<()>,
}

impl SentinelMember {
    /// Parses the sentinels' URLs; does not connect.
    pub(crate) fn new(
        spec: &SentinelSpec,
        timeout: Duration,
        connect_timeout: Duration,
        tls: Option<&TlsSettings>,
        sync: Arc<SyncState>,
    ) -> Result<Arc<Self>, Error> {
        if spec.name.is_empty() {
            return Err(Error::InvalidArgument(
                "a Sentinel member needs the master's name (as in `sentinel monitor NAME …`)"
                    .into(),
            ));
        }
        if spec.sentinels.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the Sentinel member {:?} has no sentinel URLs",
                spec.name
            )));
        }
        let mut sentinels = Vec::new();
        let mut shown = Vec::new();
        for url in &spec.sentinels {
            let is_tls = url
                .get(..9)
                .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"));
            let settings = if is_tls { tls } else { None };
            crate::tls::check_url(url, &redact(url), settings)?;
            if is_tls {
                crate::node::ensure_tls_provider();
            }
            let client = crate::tls::client(url, settings).map_err(|e| {
                Error::InvalidArgument(format!("bad sentinel URL {:?}: {e}", redact(url)))
            })?;
            shown.push(client.get_connection_info().addr().to_string());
            sentinels.push((client.get_connection_info().addr().to_string(), client));
        }
        if spec.data_tls && tls.is_none() {
            crate::node::ensure_tls_provider();
        }
        Ok(Arc::new(SentinelMember {
            addr: format!("sentinel({}@{})", spec.name, shown.join(",")).into_boxed_str(),
            spec: spec.clone(),
            sentinels: Mutex::new(sentinels),
            timeout,
            connect_timeout,
            tls: tls.cloned(),
            sync,
            current: Mutex::new(None),
            resolving: tokio::sync::Mutex::new(()),
        }))
    }

    /// `sentinel(name@host:port,…)`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The per-member timeout (and the sync check's `WAIT` when it is on).
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout + self.sync.extra()
    }

    fn current(&self) -> Option<Arc<Node>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Forgets `node` as the master (when it still is the one in use).
    fn invalidate(&self, node: &Arc<Node>) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, node)) {
            tracing::debug!(member = %self.addr, master = node.addr(), "master unusable: asking the sentinels again");
            *current = None;
        }
    }

    /// The master, resolving it when none is in use.
    async fn master(self: &Arc<Self>) -> Result<Arc<Node>, NodeFailure> {
        match self.current() {
            Some(node) => Ok(node),
            None => self.resolve(None).await,
        }
    }

    /// Asks the sentinels for the master and checks that it says so (in a
    /// task of its own: a call dropped meanwhile does not cut a resolution
    /// short, and the calls' futures stay `Sync`). When `failed` is given, a
    /// master other than it that another call resolved meanwhile is taken as
    /// it is.
    async fn resolve(
        self: &Arc<Self>,
        failed: Option<Arc<Node>>,
    ) -> Result<Arc<Node>, NodeFailure> {
        let me = Arc::clone(self);
        match tokio::spawn(async move { me.resolve_now(failed).await }).await {
            Ok(result) => result,
            Err(e) => Err(NodeFailure::NotConnected(format!(
                "the resolution through the sentinels stopped: {e}"
            ))),
        }
    }

    async fn resolve_now(&self, failed: Option<Arc<Node>>) -> Result<Arc<Node>, NodeFailure> {
        let _one = self.resolving.lock().await;
        if let Some(node) = self.current() {
            if failed.as_ref().is_none_or(|f| !Arc::ptr_eq(f, &node)) {
                return Ok(node);
            }
        }
        let sentinels: Vec<(String, redis::Client)> = self
            .sentinels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut reasons = Vec::new();
        for (i, (addr, client)) in sentinels.iter().enumerate() {
            let master = match self.ask(client).await {
                Ok(Some(master)) => master,
                Ok(None) => {
                    reasons.push(format!("{addr}: does not know master {:?}", self.spec.name));
                    continue;
                }
                Err(e) => {
                    reasons.push(format!("{addr}: {e}"));
                    continue;
                }
            };
            match self.check_master(&master).await {
                Ok(node) => {
                    if i > 0 {
                        let mut order = self.sentinels.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some(at) = order.iter().position(|(a, _)| a == addr) {
                            let first = order.remove(at);
                            order.insert(0, first);
                        }
                    }
                    tracing::debug!(member = %self.addr, master = node.addr(), "master resolved");
                    *self.current.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(Arc::clone(&node));
                    return Ok(node);
                }
                Err(e) => reasons.push(format!("{addr} named {master}: {e}")),
            }
        }
        Err(NodeFailure::NotConnected(format!(
            "no master for {:?} from the sentinels: {}",
            self.spec.name,
            reasons.join("; ")
        )))
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME name` on one sentinel: `host:port`.
    async fn ask(&self, client: &redis::Client) -> Result<Option<String>, String> {
        let config = crate::node::connection_config(self.connect_timeout);
        let mut conn = match tokio::time::timeout(
            self.connect_timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        {
            Err(_) => {
                return Err(format!(
                    "connect timed out after {} ms",
                    self.connect_timeout.as_millis()
                ))
            }
            Ok(Err(e)) => return Err(crate::tls::describe_connect_error(&e)),
            Ok(Ok(conn)) => conn,
        };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.spec.name);
        let reply = tokio::time::timeout(self.connect_timeout, conn.send_packed_command(&cmd))
            .await
            .map_err(|_| "no reply in time".to_string())?
            .and_then(Value::extract_error)
            .map_err(|e| e.to_string())?;
        match reply {
            Value::Nil => Ok(None),
            Value::Array(items) => match items.as_slice() {
                [host, port] => {
                    let host: String =
                        redis::from_redis_value_ref(host).map_err(|e| e.to_string())?;
                    let port: u16 = redis::from_redis_value_ref(port).map_err(|e| e.to_string())?;
                    Ok(Some(if host.contains(':') {
                        format!("[{host}]:{port}")
                    } else {
                        format!("{host}:{port}")
                    }))
                }
                _ => Err(format!("unexpected reply {items:?}")),
            },
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    /// A node for `host:port` with the data nodes' settings, connected,
    /// whose `ROLE` says `master`.
    async fn check_master(&self, host_port: &str) -> Result<Arc<Node>, String> {
        let url = self.data_url(host_port);
        let node = Node::new(
            &url,
            self.timeout,
            self.connect_timeout,
            self.tls.as_ref().filter(|_| self.spec.data_tls),
            Arc::clone(&self.sync),
        )
        .map_err(|e| e.to_string())?;
        node.connect().await.map_err(|e| e.to_string())?;
        let reply = node
            .call(&redis::cmd("ROLE"))
            .await
            .map_err(|e| e.to_string())?;
        let first = match &reply {
            Value::Array(items) => items
                .first()
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok()),
            _ => None,
        };
        match first.as_deref() {
            Some("master") => Ok(node),
            Some(other) => Err(format!("it says it is a {other}, not a master")),
            None => Err(format!("unexpected ROLE reply {reply:?}")),
        }
    }

    /// The data node URL for `host:port`.
    fn data_url(&self, host_port: &str) -> String {
        let scheme = if self.spec.data_tls {
            "rediss"
        } else {
            "redis"
        };
        let auth = match (&self.spec.data_user, &self.spec.data_password) {
            (Some(user), Some(pw)) => format!("{}:{}@", encode(user), encode(pw)),
            (None, Some(pw)) => format!(":{}@", encode(pw)),
            (Some(user), None) => format!("{}@", encode(user)),
            (None, None) => String::new(),
        };
        format!("{scheme}://{auth}{host_port}")
    }

    /// One command on the master, resolved first when needed; when the
    /// master turns out gone or demoted, the sentinels are asked again and
    /// the command goes once more to the new master.
    pub(crate) async fn call_untimed(
        self: &Arc<Self>,
        cmd: &Cmd,
    ) -> (Option<ServerId>, Result<Value, NodeFailure>) {
        let node = match self.master().await {
            Ok(node) => node,
            Err(e) => return (None, Err(e)),
        };
        let (id, reply) = node.call_untimed(cmd).await;
        if !needs_new_master(&reply) {
            return (id, reply);
        }
        self.invalidate(&node);
        match self.resolve(Some(Arc::clone(&node))).await {
            Ok(next) if !Arc::ptr_eq(&next, &node) => next.call_untimed(cmd).await,
            _ => (id, reply),
        }
    }

    /// [`SentinelMember::call_untimed`] bounded by the member's timeout.
    pub(crate) async fn call(self: &Arc<Self>, cmd: &Cmd) -> Result<Value, NodeFailure> {
        let timeout = self.timeout();
        match tokio::time::timeout(timeout, self.call_untimed(cmd)).await {
            Ok((_, reply)) => reply,
            Err(_) => Err(NodeFailure::Timeout(timeout)),
        }
    }

    /// Resolves the master and checks for the module.
    pub(crate) async fn connect_and_check(self: &Arc<Self>) -> Result<(), NodeFailure> {
        let node = self.master().await?;
        node.check_module().await?;
        node.learn_sync_replicas().await;
        Ok(())
    }

    /// The identity of the master in use, when known.
    pub(crate) fn server_ids(&self) -> Vec<ServerId> {
        self.current()
            .and_then(|n| n.server_id())
            .into_iter()
            .collect()
    }

    /// `REDLOCK.WAIT` on the master (see [`Node::wait_free`]).
    pub(crate) async fn wait_free(
        self: &Arc<Self>,
        cmd: &Cmd,
        on_sent: OnSent<'_>,
    ) -> Result<bool, NodeFailure> {
        match self.call_blocking(cmd, on_sent).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(NodeFailure::Unexpected(format!("{other:?}"))),
        }
    }

    /// A blocking command on the master (see [`Node::call_blocking`]).
    pub(crate) async fn call_blocking(
        self: &Arc<Self>,
        cmd: &Cmd,
        on_sent: OnSent<'_>,
    ) -> Result<Value, NodeFailure> {
        let node = self.master().await?;
        let reply = node.call_blocking(cmd, on_sent).await;
        if let Err(e) = &reply {
            if needs_new_master(&Err(e.clone())) {
                self.invalidate(&node);
            }
        }
        reply
    }
}

/// Whether a reply says the master in use is gone or no longer a master.
fn needs_new_master(reply: &Result<Value, NodeFailure>) -> bool {
    match reply {
        Ok(_) => false,
        Err(
            NodeFailure::NotConnected(_) | NodeFailure::Connection(_) | NodeFailure::Timeout(_),
        ) => true,
        Err(NodeFailure::Refused(text)) => {
            text.starts_with("READONLY")
                || text.starts_with("LOADING")
                || text.starts_with("MASTERDOWN")
        }
        // WAIT refused on a node that became a replica meanwhile.
        Err(NodeFailure::NotSynced { error: Some(e), .. }) => e.contains("replica"),
        Err(_) => false,
    }
}

/// Percent-encodes a URL's user or password part.
fn encode(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for b in part.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demotions_and_outages_ask_the_sentinels_again() {
        let t = Duration::from_millis(5);
        assert!(needs_new_master(&Err(NodeFailure::Timeout(t))));
        assert!(needs_new_master(&Err(NodeFailure::NotConnected(
            "x".into()
        ))));
        assert!(needs_new_master(&Err(NodeFailure::Connection("x".into()))));
        assert!(needs_new_master(&Err(NodeFailure::Refused(
            "READONLY You can't write against a read only replica.".into()
        ))));
        assert!(needs_new_master(&Err(NodeFailure::NotSynced {
            required: 2,
            acks: 0,
            waited_ms: 5,
            error: Some("ERR WAIT cannot be used with replica instances.".into()),
        })));
        assert!(!needs_new_master(&Err(NodeFailure::NotSynced {
            required: 2,
            acks: 1,
            waited_ms: 5,
            error: None,
        })));
        assert!(!needs_new_master(&Ok(Value::Nil)));
        assert!(!needs_new_master(&Err(NodeFailure::Grace {
            message: "GRACE".into(),
            remaining: None
        })));
    }

    #[test]
    fn data_urls_carry_the_data_nodes_settings() {
        let spec = SentinelSpec {
            name: "m".into(),
            sentinels: vec!["redis://127.0.0.1:26379".into()],
            data_user: Some("locker".into()),
            data_password: Some("p@ss word".into()),
            data_tls: false,
        };
        let member = SentinelMember::new(
            &spec,
            Duration::from_millis(5),
            Duration::from_millis(5),
            None,
            Arc::new(SyncState::new(Duration::from_millis(5))),
        )
        .unwrap();
        assert_eq!(
            member.data_url("10.0.0.1:6379"),
            "redis://locker:p%40ss%20word@10.0.0.1:6379"
        );
        assert_eq!(member.addr(), "sentinel(m@127.0.0.1:26379)");
    }
}
