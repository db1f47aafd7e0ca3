//! One server, one vote: telling the quorum's members apart.
//!
//! Two members that are the same Redis server (the same URL twice, a DNS
//! alias, `127.0.0.1` next to `localhost`, two forwarded ports, a load
//! balancer that changed its target) must not both count for a quorum:
//! otherwise one server is a majority of its own. Two checks, both pure
//! here:
//!
//! - [`identical_urls`]: at build time, the same endpoint given twice
//!   (host case, the default port 6379 and database 0 normalised).
//! - [`OneVotePerServer`]: in every round, a reply counts only if no other
//!   member's reply already counted for the same server identity (its
//!   `run_id`, learned on every connect, so also after every reconnect).
//!   A server that restarted has a new `run_id`, which is fine.
//!
//! A cluster member counts as one server made of all its nodes: at build
//! time the `run_id` of every node of every cluster is learned, and two
//! members that share one (the same cluster given twice, a cluster next to
//! one of its own nodes) are refused ([`shared_server`]), as are two
//! members with a seed or URL in common. Its replies carry no identity in
//! the rounds (they may come from any shard).

use std::sync::Arc;

use redis::{ConnectionAddr, ConnectionInfo};

/// A server's identity: the `run_id` from `INFO server`.
pub(crate) type ServerId = Arc<str>;

/// The `run_id` field of an `INFO server` reply.
pub(crate) fn parse_run_id(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix("run_id:"))
        .filter(|id| !id.is_empty())
}

/// Where a URL connects, normalised: host in lower case (the port and the
/// database are filled in by the URL parser: 6379 and 0 when absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// A TCP endpoint (plain or TLS: the same server either way).
    Tcp {
        /// The host, in lower case.
        host: String,
        /// The port.
        port: u16,
        /// The database.
        db: i64,
    },
    /// A Unix socket.
    Unix {
        /// The socket's path.
        path: String,
        /// The database.
        db: i64,
    },
}

impl Endpoint {
    /// The endpoint of a parsed URL.
    pub(crate) fn of(info: &ConnectionInfo) -> Self {
        let db = info.redis_settings().db();
        match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                Endpoint::Tcp {
                    host: host.to_ascii_lowercase(),
                    port: *port,
                    db,
                }
            }
            ConnectionAddr::Unix(path) => Endpoint::Unix {
                path: path.display().to_string(),
                db,
            },
            other => Endpoint::Unix {
                path: other.to_string(),
                db,
            },
        }
    }
}

/// Every pair `(first, later)` of members with the same endpoint, in member
/// order (each later duplicate paired with the first occurrence).
pub(crate) fn identical_urls(endpoints: &[Endpoint]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (j, e) in endpoints.iter().enumerate() {
        if let Some(i) = endpoints[..j].iter().position(|f| f == e) {
            pairs.push((i, j));
        }
    }
    pairs
}

/// The first pair `(first, later)` of members that share a known server
/// identity, with that identity. A member has one identity (a node) or one
/// per node (a cluster: a cluster listed twice, or a cluster that contains
/// a node also listed on its own, shares one).
pub(crate) fn shared_server(ids: &[Vec<ServerId>]) -> Option<(usize, usize, ServerId)> {
    for (j, later) in ids.iter().enumerate() {
        for id in later {
            if let Some(i) = ids[..j].iter().position(|first| first.contains(id)) {
                return Some((i, j, id.clone()));
            }
        }
    }
    None
}

/// The members that counted in one round, by server: a reply counts only
/// if no other member counted for the same server before it.
#[derive(Debug, Default)]
pub(crate) struct OneVotePerServer {
    counted: Vec<(ServerId, usize)>,
}

impl OneVotePerServer {
    /// For a round over `nodes` members.
    pub(crate) fn new(nodes: usize) -> Self {
        OneVotePerServer {
            counted: Vec::with_capacity(nodes),
        }
    }

    /// Whether member `node`, whose reply came over a connection to the
    /// server `id`, may count: `Err(twin)` when member `twin` already
    /// counted for that server. A member whose identity is unknown counts
    /// (it cannot be told apart); so does a member counted again for the
    /// same server (a later round phase on the same node).
    pub(crate) fn admit(&mut self, node: usize, id: Option<&ServerId>) -> Result<(), usize> {
        let Some(id) = id else { return Ok(()) };
        match self
            .counted
            .iter()
            .find(|(seen, _)| Arc::ptr_eq(seen, id) || seen == id)
        {
            Some(&(_, twin)) if twin != node => Err(twin),
            Some(_) => Ok(()),
            None => {
                self.counted.push((Arc::clone(id), node));
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::of(
            &redis::Client::open(url)
                .expect("url")
                .get_connection_info()
                .clone(),
        )
    }

    #[test]
    fn identical_urls_are_found_after_normalising() {
        let urls = [
            "redis://127.0.0.1:7201",
            "redis://127.0.0.1:7201/0",
            "redis://LocalHost:7201",
            "redis://localhost:7201",
            "redis://10.0.0.1",
            "redis://10.0.0.1:6379",
            "rediss://user:pw@10.0.0.1:6379/0",
            "redis://10.0.0.1:6379/1",
            "redis://127.0.0.1:7202",
        ];
        let endpoints: Vec<Endpoint> = urls.iter().map(|u| endpoint(u)).collect();
        assert_eq!(
            identical_urls(&endpoints),
            vec![(0, 1), (2, 3), (4, 5), (4, 6)]
        );
    }

    #[test]
    fn run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:6b1c3e0f9d\r\ntcp_port:7201\r\n";
        assert_eq!(parse_run_id(info), Some("6b1c3e0f9d"));
        assert_eq!(parse_run_id("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(parse_run_id("redis_version:7.0.15"), None);
    }

    #[test]
    fn shared_servers_pair_a_later_member_with_the_first() {
        let id = |s: &str| -> ServerId { Arc::from(s) };
        // Nodes: a twice.
        let ids = [vec![id("a")], vec![], vec![id("b")], vec![id("a")]];
        assert_eq!(shared_server(&ids), Some((0, 3, id("a"))));
        // A cluster {c, d, e} and a node that is one of its nodes.
        let ids = [
            vec![id("a")],
            vec![id("c"), id("d"), id("e")],
            vec![id("d")],
        ];
        assert_eq!(shared_server(&ids), Some((1, 2, id("d"))));
        // The same cluster twice (seen through other seeds: same nodes).
        let ids = [
            vec![id("c"), id("d")],
            vec![id("x")],
            vec![id("d"), id("c")],
        ];
        assert_eq!(shared_server(&ids), Some((0, 2, id("d"))));
        // Distinct members; unknown identities never match.
        let ids = [vec![id("c"), id("d")], vec![], vec![], vec![id("a")]];
        assert_eq!(shared_server(&ids), None);
    }

    #[test]
    fn one_vote_per_server() {
        let a: ServerId = Arc::from("a");
        let b: ServerId = Arc::from("b");
        let mut votes = OneVotePerServer::default();
        assert_eq!(votes.admit(2, Some(&a)), Ok(()));
        assert_eq!(votes.admit(0, Some(&a)), Err(2));
        assert_eq!(votes.admit(1, Some(&b)), Ok(()));
        assert_eq!(votes.admit(3, None), Ok(()));
        assert_eq!(votes.admit(4, None), Ok(()));
        // The write-back phase hears from node 2 again: same server, same vote.
        assert_eq!(votes.admit(2, Some(&a)), Ok(()));
    }

    proptest! {
        /// However members map to servers and in whatever order they
        /// answer, the admitted members are on distinct servers, and every
        /// server that answered has one admitted member.
        #[test]
        fn admitted_members_are_distinct_servers(
            servers in proptest::collection::vec(proptest::option::of(0u8..4), 1..8),
            order in Just(()).prop_flat_map(|_| proptest::collection::vec(0usize..8, 0..16)),
        ) {
            let ids: Vec<Option<ServerId>> = servers
                .iter()
                .map(|s| s.map(|s| Arc::from(format!("server-{s}").as_str())))
                .collect();
            let mut votes = OneVotePerServer::default();
            let mut admitted: Vec<usize> = Vec::new();
            for &k in &order {
                let node = k % ids.len();
                if votes.admit(node, ids[node].as_ref()).is_ok() && !admitted.contains(&node) {
                    admitted.push(node);
                }
            }
            let known: Vec<&ServerId> = admitted.iter().filter_map(|&n| ids[n].as_ref()).collect();
            for (x, a) in known.iter().enumerate() {
                prop_assert!(known[x + 1..].iter().all(|b| a != b), "{:?}", admitted);
            }
            for &k in &order {
                let node = k % ids.len();
                if let Some(id) = &ids[node] {
                    prop_assert!(admitted.iter().any(|&n| ids[n].as_ref() == Some(id)));
                }
            }
        }
    }
}
