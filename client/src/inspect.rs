//! [`Redlock::inspect`]: every node's view of a lock, read-only.

use std::time::Duration;

use redis::Value;

use crate::member::Voter;
use crate::redlock::Redlock;

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

/// One member's view of a lock: see [`Redlock::inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// The member's address: `host:port` for a node, `cluster(host:port,…)`
    /// (its seeds) for a cluster.
    pub node: String,
    /// For a cluster member, the shard that holds the key (the master of
    /// the key's hash slot, which answered); `None` for a node, or when the
    /// cluster did not answer.
    pub shard: Option<Shard>,
    /// What the member reports.
    pub state: NodeState,
}

/// The shard of a cluster member that holds a key: see [`NodeView::shard`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The shard master's address (`host:port`, as the cluster announces it).
    pub addr: String,
    /// The master's cluster node id (`CLUSTER MYID`).
    pub node_id: String,
}

impl Redlock {
    /// Every member's view of `key` (held, time left, counter), in member
    /// order; for a cluster member, also which shard holds the key.
    /// Read-only; waits for every node (each bounded by the node timeout).
    /// A node that does not answer usably is reported as
    /// [`NodeState::Error`], so this never fails as a whole.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use redlock_client::NodeState;
    /// # async fn run(redlock: redlock_client::Redlock) {
    /// for view in redlock.inspect("reports").await {
    ///     match view.state {
    ///         NodeState::Present { held, token, .. } => println!("{}: held={held} token={token}", view.node),
    ///         NodeState::Missing => println!("{}: never locked", view.node),
    ///         NodeState::Error(reason) => println!("{}: {reason}", view.node),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn inspect(&self, key: &str) -> Vec<NodeView> {
        let nodes = &self.inner.quorum.nodes;
        let mut cmd = redis::cmd("REDLOCK.INSPECT");
        cmd.arg(key);
        let cmd = &cmd;
        let replies = futures_util::future::join_all(nodes.iter().map(|member| async move {
            match member {
                Voter::Node(_) | Voter::Sentinel(_) => (member.call(cmd).await, None),
                Voter::Cluster(c) => match c.inspect(key).await {
                    Ok((value, shard)) => (Ok(value), shard),
                    Err(e) => (Err(e), None),
                },
            }
        }))
        .await;
        nodes
            .iter()
            .zip(replies)
            .map(|(node, (reply, shard))| NodeView {
                node: node.addr().to_string(),
                shard: shard.map(|(addr, node_id)| Shard { addr, node_id }),
                state: match reply {
                    Err(e) => NodeState::Error(e.to_string()),
                    Ok(v) => parse_inspect(v),
                },
            })
            .collect()
    }
}

/// An INSPECT reply (RESP2 flat array or RESP3 map) as a [`NodeState`].
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_and_resp3_replies_read_the_same() {
        let fields = [("held", 1), ("pttl", 1500), ("token", 42), ("other", 7)];
        let flat = Value::Array(
            fields
                .iter()
                .flat_map(|(k, v)| [bulk(k), Value::Int(*v)])
                .collect(),
        );
        let map = Value::Map(
            fields
                .iter()
                .map(|(k, v)| (bulk(k), Value::Int(*v)))
                .collect(),
        );
        let expected = NodeState::Present {
            held: true,
            pttl: Some(Duration::from_millis(1500)),
            token: 42,
        };
        assert_eq!(parse_inspect(flat), expected);
        assert_eq!(parse_inspect(map), expected);
    }

    #[test]
    fn a_released_lock_has_no_pttl_and_a_missing_key_is_nil() {
        let released = Value::Array(vec![
            bulk("held"),
            Value::Int(0),
            bulk("pttl"),
            Value::Int(-1),
            bulk("token"),
            Value::Int(9),
        ]);
        assert_eq!(
            parse_inspect(released),
            NodeState::Present {
                held: false,
                pttl: None,
                token: 9
            }
        );
        assert_eq!(parse_inspect(Value::Nil), NodeState::Missing);
        assert!(matches!(parse_inspect(Value::Okay), NodeState::Error(_)));
    }
}
