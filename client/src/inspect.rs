//! [`Redlock::inspect`]: every node's view of a lock, read-only.

use std::time::Duration;

use redis::Value;

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

/// One node's view of a lock: see [`Redlock::inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// The node's address (`host:port`).
    pub node: String,
    /// What the node reports.
    pub state: NodeState,
}

impl Redlock {
    /// Every node's view of `key` (held, time left, counter), in node order.
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
