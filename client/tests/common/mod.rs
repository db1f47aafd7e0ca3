//! Helpers shared by the client's integration tests: five real nodes from
//! the test kit, clients with short timeouts, and freeze guards.
#![allow(dead_code)]

use std::time::Duration;

use redlock_client::{NodeState, Redlock, RedlockBuilder, RetryPolicy};
use redlock_testkit::{start_nodes, Node, NodeBuilder};

/// Per-node timeout used by the tests (loopback replies take well under a
/// millisecond; the margin is for a loaded machine).
pub const NODE_TIMEOUT: Duration = Duration::from_millis(300);

/// Five nodes with the module and the test kit's defaults.
pub fn five() -> Vec<Node> {
    start_nodes(5, &Node::builder())
}

/// Five nodes built with `builder`.
pub fn five_with(builder: &NodeBuilder) -> Vec<Node> {
    start_nodes(5, builder)
}

/// The nodes' URLs.
pub fn urls(nodes: &[Node]) -> Vec<String> {
    nodes.iter().map(Node::url).collect()
}

/// `127.0.0.1:PORT`, as the client names a node.
pub fn addr(node: &Node) -> String {
    format!("127.0.0.1:{}", node.port())
}

/// Connect timeout used by the tests (generous: a loaded machine is slow).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A client with short timeouts and one attempt per acquire.
pub async fn client(nodes: &[Node]) -> Redlock {
    Redlock::builder(urls(nodes))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build client")
}

/// How many nodes report the key as held. Panics when a node does not
/// answer INSPECT (so that a slow node is never mistaken for "not held").
pub async fn held_on(redlock: &Redlock, key: &str) -> usize {
    held_on_reachable(redlock, key, redlock.nodes().len()).await
}

/// How many nodes still hold the key once a release had its chance to
/// reach them all: a release returns when a quorum confirmed it, and a node
/// slower than that (a loaded machine) gets it in the background, so this
/// asks again for up to 1 s (inside the tests' leases, so a grant left
/// behind is still seen).
pub async fn held_after_release(redlock: &Redlock, key: &str) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        let held = held_on(redlock, key).await;
        if held == 0 || std::time::Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Like [`held_on`], for a cluster where only `reachable` nodes answer.
pub async fn held_on_reachable(redlock: &Redlock, key: &str, reachable: usize) -> usize {
    // A loaded machine can make a node miss the timeout: ask again.
    let mut tries = 0;
    let views = loop {
        let views = redlock.inspect(key).await;
        let answered = views
            .iter()
            .filter(|v| !matches!(v.state, NodeState::Error(_)))
            .count();
        tries += 1;
        if answered == reachable {
            break views;
        }
        assert!(tries < 10, "INSPECT {key}: {views:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    views
        .iter()
        .filter(|v| matches!(v.state, NodeState::Present { held: true, .. }))
        .count()
}

/// Freezes nodes with SIGSTOP and thaws them when dropped, whatever the
/// test's outcome.
pub struct Frozen<'a>(Vec<&'a Node>);

impl<'a> Frozen<'a> {
    /// Freezes every node in `nodes`.
    pub fn new(nodes: impl IntoIterator<Item = &'a Node>) -> Self {
        let nodes: Vec<&Node> = nodes.into_iter().collect();
        for n in &nodes {
            n.pause();
        }
        Frozen(nodes)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        for n in &self.0 {
            n.resume();
        }
    }
}

/// Runs the divergent-counter trace of DESIGN.md section 4 and returns the
/// tokens L1..L5. Nodes keep their counters across kills (AOF, fsync always);
/// a killed node is "unreachable". Clock floor off: counters count 1, 2, 3.
/// `configure` adjusts each client's builder.
pub async fn divergent_trace(configure: fn(RedlockBuilder) -> RedlockBuilder) -> Vec<u64> {
    let builder = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always");
    let mut n = five_with(&builder);
    const A: usize = 0;
    const B: usize = 1;
    const C: usize = 2;
    const D: usize = 3;
    const E: usize = 4;

    async fn take(nodes: &[Node], configure: fn(RedlockBuilder) -> RedlockBuilder) -> u64 {
        let builder = Redlock::builder(urls(nodes))
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .retry(RetryPolicy::no_retry())
            .clock_floor(false);
        let redlock = configure(builder).build().await.unwrap();
        let lock = redlock
            .try_acquire("trace", Duration::from_secs(10))
            .await
            .unwrap()
            .expect("lock is free");
        let token = lock.token();
        assert!(lock.release().await.unwrap());
        token
    }

    let mut tokens = Vec::new();
    // L1 on {A, B, C}.
    n[D].kill();
    n[E].kill();
    tokens.push(take(&n, configure).await);
    // L2 and L3 on {A, D, E}.
    n[D].restart();
    n[E].restart();
    n[B].kill();
    n[C].kill();
    tokens.push(take(&n, configure).await);
    tokens.push(take(&n, configure).await);
    // L4 on {A, B, C}.
    n[B].restart();
    n[C].restart();
    n[D].kill();
    n[E].kill();
    tokens.push(take(&n, configure).await);
    // L5 on {B, C, D}.
    n[D].restart();
    n[A].kill();
    tokens.push(take(&n, configure).await);
    tokens
}

/// One command of a RESP request (an array of bulk strings) at the start of
/// `buf`: its arguments and its length in bytes, or `None` when incomplete.
pub fn parse_command(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    }
    let (head, mut at) = line(buf, 0)?;
    let count: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, next) = line(buf, at)?;
        let len: usize = std::str::from_utf8(len.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        let data = buf.get(next..next + len)?;
        args.push(data.to_vec());
        at = next + len + 2;
        if buf.len() < at {
            return None;
        }
    }
    Some((args, at))
}

/// `INFO section` field `field` of `node`, as a number.
pub fn info_u64(node: &Node, section: &str, field: &str) -> u64 {
    let mut con = node.connection();
    let info: String = redis::cmd("INFO").arg(section).query(&mut con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
}
