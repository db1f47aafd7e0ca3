//! [`Member`]: one member of the quorum, a single Redis master or a Redis
//! Cluster; and [`Voter`], its connection, which the rounds talk to.
//!
//! The quorum is over members, never over the shards of one cluster: a
//! cluster member has one vote, whichever of its shards holds the key.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::cluster::Cluster;
use crate::core::error::NodeFailure;
use crate::identity::ServerId;
use crate::node::OnSent;
use crate::node::{redact, Node};
use crate::sentinel::{SentinelMember, SentinelSpec};

/// One member of the quorum: a single Redis master given by its URL, or a
/// Redis Cluster (or Valkey cluster) given by the URLs of some of its nodes
/// (seeds; one reachable seed is enough to find the others).
///
/// Strings convert into single-node members, so
/// `Redlock::builder(["redis://a:6379", …])` keeps working; mix in clusters
/// with [`Member::cluster`]. A cluster member has one vote, like a node:
/// the quorum is over members (independent failure domains), never over
/// the shards of one cluster. Each lock key lives on the shard that owns its
/// hash slot; resharding and failover inside a cluster are followed by the
/// client (redirects, topology refresh).
///
/// # Examples
///
/// ```
/// use redlock_client::{Member, Redlock};
///
/// let builder = Redlock::builder([
///     Member::cluster(["redis://10.0.1.1:7000", "redis://10.0.1.2:7000"]),
///     Member::cluster(["redis://10.0.2.1:7000", "redis://10.0.2.2:7000"]),
///     Member::node("redis://10.0.3.1:6379"),
///     "redis://10.0.4.1:6379".into(),
///     "redis://10.0.5.1:6379".into(),
/// ]);
/// # let _ = builder;
/// assert!(Member::cluster(["redis://10.0.1.1:7000"]).is_cluster());
/// assert!(!Member::from("redis://10.0.3.1:6379").is_cluster());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Member(pub(crate) MemberKind);

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum MemberKind {
    /// A single master's URL.
    Node(String),
    /// A cluster's seed URLs.
    Cluster(Vec<String>),
    /// One master with replicas behind Sentinel.
    Sentinel(SentinelSpec),
    /// A Sentinel-only setting was applied to another kind of member
    /// (building fails, naming the setting).
    Misused(&'static str),
}

impl Member {
    /// A single Redis master (`redis://host:port`, `rediss://…` for TLS,
    /// `redis://user:password@host:port` for an ACL user).
    ///
    /// # Examples
    ///
    /// ```
    /// let member = redlock_client::Member::node("redis://10.0.0.1:6379");
    /// assert!(!member.is_cluster());
    /// ```
    pub fn node(url: impl Into<String>) -> Self {
        Member(MemberKind::Node(url.into()))
    }

    /// A Redis Cluster, given by the URLs of one or more of its nodes (all
    /// with the same scheme and credentials). Every master of the cluster
    /// must load the module.
    ///
    /// # Examples
    ///
    /// ```
    /// let member = redlock_client::Member::cluster([
    ///     "redis://10.0.1.1:7000",
    ///     "redis://10.0.1.2:7000",
    /// ]);
    /// assert!(member.is_cluster());
    /// ```
    pub fn cluster<I, S>(seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Member(MemberKind::Cluster(
            seeds.into_iter().map(Into::into).collect(),
        ))
    }

    /// One master with replicas behind Redis Sentinel (or Valkey Sentinel):
    /// `master_name` as in the sentinels' `sentinel monitor NAME …`, and the
    /// URLs of some of the sentinels (`redis://host:26379`, `rediss://…`,
    /// `redis://user:password@…` for the sentinels' own credentials). The
    /// client asks the sentinels for the master, checks that it says it is
    /// one (`ROLE`), and follows failovers: it asks again when the master
    /// stops answering or refuses a write as a replica. The data nodes'
    /// credentials and TLS are their own: [`Member::data_credentials`],
    /// [`Member::data_tls`].
    ///
    /// One vote, like a node: alone (N = 1, the common deployment) or as one
    /// member of a quorum. With `redlock.sync-replicas` set on its nodes,
    /// every lock write is confirmed by every replica before it counts, and
    /// a failover keeps the locks (DESIGN §13); without it, a promoted
    /// replica refuses new locks for the longest lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use redlock_client::Member;
    ///
    /// let member = Member::sentinel("locks", ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"])
    ///     .data_credentials(Some("locker"), "secret");
    /// assert!(member.is_sentinel());
    /// ```
    pub fn sentinel<I, S>(master_name: impl Into<String>, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Member(MemberKind::Sentinel(SentinelSpec {
            name: master_name.into(),
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            data_user: None,
            data_password: None,
            data_tls: false,
        }))
    }

    /// The credentials of a Sentinel member's data nodes (an ACL user, or
    /// `None` for the default user, and its password); the sentinels keep
    /// the ones in their URLs. Building fails when this member is not a
    /// Sentinel member.
    ///
    /// # Examples
    ///
    /// ```
    /// let member = redlock_client::Member::sentinel("locks", ["redis://:sentinel-pw@10.0.0.1:26379"])
    ///     .data_credentials(None, "data-pw");
    /// # let _ = member;
    /// ```
    pub fn data_credentials(mut self, user: Option<&str>, password: &str) -> Self {
        match &mut self.0 {
            MemberKind::Sentinel(spec) => {
                spec.data_user = user.map(str::to_string);
                spec.data_password = Some(password.to_string());
            }
            _ => self.0 = MemberKind::Misused("data_credentials"),
        }
        self
    }

    /// A Sentinel member's data nodes serve TLS (`rediss://`; the
    /// builder's [`tls_ca_file`](crate::RedlockBuilder::tls_ca_file) and
    /// client certificate apply). The sentinels use TLS when their URLs say
    /// `rediss://`. Building fails when this member is not a Sentinel
    /// member.
    ///
    /// # Examples
    ///
    /// ```
    /// let member = redlock_client::Member::sentinel("locks", ["redis://10.0.0.1:26379"]).data_tls();
    /// # let _ = member;
    /// ```
    pub fn data_tls(mut self) -> Self {
        match &mut self.0 {
            MemberKind::Sentinel(spec) => spec.data_tls = true,
            _ => self.0 = MemberKind::Misused("data_tls"),
        }
        self
    }

    /// Whether this member is a Sentinel member.
    ///
    /// # Examples
    ///
    /// ```
    /// use redlock_client::Member;
    /// assert!(Member::sentinel("locks", ["redis://10.0.0.1:26379"]).is_sentinel());
    /// assert!(!Member::node("redis://10.0.0.1:6379").is_sentinel());
    /// ```
    pub fn is_sentinel(&self) -> bool {
        matches!(self.0, MemberKind::Sentinel(_))
    }

    /// Whether this member is a cluster.
    ///
    /// # Examples
    ///
    /// ```
    /// use redlock_client::Member;
    /// assert!(Member::cluster(["redis://10.0.1.1:7000"]).is_cluster());
    /// ```
    pub fn is_cluster(&self) -> bool {
        matches!(self.0, MemberKind::Cluster(_))
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a password.
        match &self.0 {
            MemberKind::Node(url) => f.debug_tuple("Node").field(&redact(url)).finish(),
            MemberKind::Cluster(seeds) => f
                .debug_tuple("Cluster")
                .field(&seeds.iter().map(|s| redact(s)).collect::<Vec<_>>())
                .finish(),
            MemberKind::Sentinel(spec) => f
                .debug_struct("Sentinel")
                .field("name", &spec.name)
                .field(
                    "sentinels",
                    &spec.sentinels.iter().map(|s| redact(s)).collect::<Vec<_>>(),
                )
                .field("data_user", &spec.data_user)
                .field("data_tls", &spec.data_tls)
                .finish_non_exhaustive(),
            MemberKind::Misused(what) => f.debug_tuple("Misused").field(what).finish(),
        }
    }
}

impl From<&str> for Member {
    fn from(url: &str) -> Self {
        Member::node(url)
    }
}

impl From<String> for Member {
    fn from(url: String) -> Self {
        Member::node(url)
    }
}

impl From<&String> for Member {
    fn from(url: &String) -> Self {
        Member::node(url.as_str())
    }
}

/// A member's connection: a node's, or a cluster's. An enum, so that the
/// single-node path pays one match per call and nothing else.
#[derive(Clone)]
pub(crate) enum Voter {
    Node(Arc<Node>),
    Cluster(Arc<Cluster>),
    Sentinel(Arc<SentinelMember>),
}

impl Voter {
    /// `host:port` for a node, `cluster(host:port,…)` (the seeds) for a
    /// cluster: how messages name the member.
    pub(crate) fn addr(&self) -> &str {
        match self {
            Voter::Node(n) => n.addr(),
            Voter::Cluster(c) => c.addr(),
            Voter::Sentinel(s) => s.addr(),
        }
    }

    /// The URL(s) without credentials.
    pub(crate) fn url(&self) -> &str {
        match self {
            Voter::Node(n) => n.url(),
            Voter::Cluster(c) => c.url(),
            Voter::Sentinel(s) => s.addr(),
        }
    }

    /// The per-member timeout.
    pub(crate) fn timeout(&self) -> Duration {
        match self {
            Voter::Node(n) => n.timeout(),
            Voter::Cluster(c) => c.timeout(),
            Voter::Sentinel(s) => s.timeout(),
        }
    }

    /// See [`Node::call_untimed`]; a cluster member reports no server
    /// identity (its members are told apart at build time).
    pub(crate) async fn call_untimed(
        &self,
        cmd: &Cmd,
    ) -> (Option<ServerId>, Result<Value, NodeFailure>) {
        match self {
            Voter::Node(n) => n.call_untimed(cmd).await,
            // Boxed: a round keeps its calls side by side, each in a slot
            // the size of the largest, and this keeps the single-node one
            // as small as it was.
            Voter::Cluster(c) => (None, Box::pin(c.call(cmd)).await),
            Voter::Sentinel(s) => Box::pin(s.call_untimed(cmd)).await,
        }
    }

    /// One command, bounded by the per-member timeout.
    pub(crate) async fn call(&self, cmd: &Cmd) -> Result<Value, NodeFailure> {
        match self {
            Voter::Node(n) => n.call(cmd).await,
            Voter::Cluster(c) => match tokio::time::timeout(c.timeout(), c.call(cmd)).await {
                Ok(reply) => reply,
                Err(_) => Err(NodeFailure::Timeout(c.timeout())),
            },
            Voter::Sentinel(s) => s.call(cmd).await,
        }
    }

    /// Connects and checks for the module (every master of a cluster).
    pub(crate) async fn connect_and_check(&self) -> Result<(), NodeFailure> {
        match self {
            Voter::Node(n) => {
                n.connect().await?;
                n.check_module().await?;
                n.learn_sync_replicas().await;
                Ok(())
            }
            Voter::Cluster(c) => {
                c.connect().await?;
                c.check_module().await?;
                c.learn_sync_replicas().await;
                Ok(())
            }
            Voter::Sentinel(s) => s.connect_and_check().await,
        }
    }

    /// The identities of the servers behind this member, when known: the
    /// node's `run_id`, or the `run_id` of every node of the cluster.
    pub(crate) fn server_ids(&self) -> Vec<ServerId> {
        match self {
            Voter::Node(n) => n.server_id().into_iter().collect(),
            Voter::Cluster(c) => c.server_ids(),
            Voter::Sentinel(s) => s.server_ids(),
        }
    }

    /// A blocking command on a connection of its own (see
    /// [`Node::call_blocking`]); not offered on a cluster member.
    pub(crate) async fn call_blocking(&self, cmd: &Cmd) -> Result<Value, NodeFailure> {
        let on_sent: OnSent<'_> = &|| {};
        match self {
            Voter::Node(n) => n.call_blocking(cmd, on_sent).await,
            Voter::Sentinel(s) => s.call_blocking(cmd, on_sent).await,
            Voter::Cluster(_) => Err(NodeFailure::Unexpected(
                "blocking reads other than REDLOCK.WAIT are not supported on a cluster member"
                    .into(),
            )),
        }
    }

    /// A `REDLOCK.WAIT` for `key` on a connection of its own (see
    /// [`Node::wait_free`]; a cluster member sends it to the shard that owns
    /// the key's slot).
    pub(crate) async fn wait_free(
        &self,
        key: &str,
        cmd: &Cmd,
        on_sent: OnSent<'_>,
    ) -> Result<bool, NodeFailure> {
        match self {
            Voter::Node(n) => n.wait_free(cmd, on_sent).await,
            Voter::Cluster(c) => c.wait_free(key, cmd, on_sent).await,
            Voter::Sentinel(s) => s.wait_free(cmd, on_sent).await,
        }
    }
}
