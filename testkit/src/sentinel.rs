//! One master with replicas watched by Sentinel, all real processes on free
//! loopback ports: the group a Sentinel member of the quorum client talks to
//! (DESIGN §13).
//!
//! ```no_run
//! use redlock_testkit::SentinelGroup;
//! let group = SentinelGroup::builder()
//!     .config("redlock.sync-replicas", "2")
//!     .start();
//! let master = group.master_index();
//! let mut con = group.node(master).connection();
//! let token: i64 = redis::cmd("REDLOCK.ACQUIRE").arg("k").arg("me").arg(1000)
//!     .arg("SYNC").arg(2).query(&mut con).unwrap();
//! assert_eq!(token, 1);
//! ```
//!
//! Node `0` starts as the master and nodes `1..` as its replicas; after a
//! failover [`SentinelGroup::master_index`] says which node is the master.
//! A killed node comes back with [`SentinelGroup::restart_as_replica`], as a
//! supervisor that asks Sentinel for the current master at start would bring
//! it back. Every wait has a deadline and panics with what it saw. Processes
//! stop on drop, by their own pid.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, server_bin, Node, NodeBuilder, START_DEADLINE};

/// How long a group may take to form, fail over or settle.
pub const GROUP_DEADLINE: Duration = Duration::from_secs(45);

/// How to start a group.
#[derive(Clone, Debug)]
pub struct SentinelGroupBuilder {
    name: String,
    replicas: usize,
    sentinels: usize,
    down_after_ms: u64,
    failover_timeout_ms: u64,
    node: NodeBuilder,
    sentinel_password: Option<String>,
}

impl SentinelGroupBuilder {
    /// The master's name in Sentinel. Default `redlock`.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Replicas of the master. Default 2.
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// Sentinels (quorum: a majority of them). Default 3.
    pub fn sentinels(mut self, n: usize) -> Self {
        self.sentinels = n.max(1);
        self
    }

    /// `down-after-milliseconds`: how long a master may be unreachable before
    /// a sentinel considers it down. Default 1000.
    pub fn down_after_ms(mut self, ms: u64) -> Self {
        self.down_after_ms = ms;
        self
    }

    /// The options of every data node. Default [`Node::builder`].
    pub fn node(mut self, node: NodeBuilder) -> Self {
        self.node = node;
        self
    }

    /// Adds a `--name value` option to every data node.
    pub fn config(mut self, name: &str, value: &str) -> Self {
        self.node = self.node.config(name, value);
        self
    }

    /// The sentinels require this password (`requirepass`).
    pub fn sentinel_password(mut self, password: &str) -> Self {
        self.sentinel_password = Some(password.to_string());
        self
    }

    /// Starts the master, its replicas and the sentinels, and waits until
    /// every replica is online and every sentinel sees every replica and
    /// every other sentinel.
    pub fn start(self) -> SentinelGroup {
        let node = self.node.clone();
        let master = node.clone().start();
        let master_port = master.port();
        let replica_builder = node.clone().replica_of(master_port);
        let mut nodes = vec![master];
        nodes.extend(crate::start_nodes(self.replicas, &replica_builder));
        let mut group = SentinelGroup {
            name: self.name.clone(),
            nodes,
            sentinels: Vec::new(),
            down_after_ms: self.down_after_ms,
        };
        group.wait_online(0, self.replicas);
        let quorum = self.sentinels / 2 + 1;
        for _ in 0..self.sentinels {
            let s = Sentinel::start(&self, master_port, quorum);
            group.sentinels.push(s);
        }
        group.wait_sentinels_formed();
        group
    }
}

/// A running group: data nodes and sentinels.
pub struct SentinelGroup {
    name: String,
    nodes: Vec<Node>,
    sentinels: Vec<Sentinel>,
    down_after_ms: u64,
}

impl SentinelGroup {
    /// A builder: master + 2 replicas + 3 sentinels, `down-after-milliseconds`
    /// 1000, the module loaded as [`Node::builder`] does.
    pub fn builder() -> SentinelGroupBuilder {
        SentinelGroupBuilder {
            name: "redlock".into(),
            replicas: 2,
            sentinels: 3,
            down_after_ms: 1000,
            failover_timeout_ms: 4000,
            node: Node::builder(),
            sentinel_password: None,
        }
    }

    /// The master's name in Sentinel.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `down-after-milliseconds`.
    pub fn down_after_ms(&self) -> u64 {
        self.down_after_ms
    }

    /// Every data node (index 0 was the first master).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Data node `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Data node `i`, to stop, pause or restart it.
    pub fn node_mut(&mut self, i: usize) -> &mut Node {
        &mut self.nodes[i]
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[Sentinel] {
        &self.sentinels
    }

    /// `redis://127.0.0.1:PORT` of every sentinel (with the sentinel password
    /// when one is set: `redis://:pw@…`).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.url()).collect()
    }

    /// The index of the data node on `port`.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// A connection to data node `i` as the default user (data nodes keep
    /// it open for the test kit; give the client an ACL user of its own with
    /// [`NodeBuilder::acl_user`]).
    pub fn connection(&self, i: usize) -> redis::Connection {
        self.nodes[i].connection()
    }

    /// What data node `i` says its role is (`ROLE`'s first word), or `None`
    /// when it does not answer.
    pub fn role(&self, i: usize) -> Option<String> {
        let node = &self.nodes[i];
        node.pid()?;
        let mut con = redis::Client::open(node.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(300))
            .ok()?;
        let _ = con.set_read_timeout(Some(Duration::from_millis(500)));
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).ok()?;
        match role.first()? {
            redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            redis::Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The master's port as a majority of the sentinels report it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`), when they agree.
    pub fn sentinel_master_port(&self) -> Option<u16> {
        let mut votes: Vec<u16> = Vec::new();
        for s in &self.sentinels {
            if let Some(port) = s.master_port(&self.name) {
                votes.push(port);
            }
        }
        let majority = self.sentinels.len() / 2 + 1;
        votes
            .iter()
            .copied()
            .find(|p| votes.iter().filter(|q| *q == p).count() >= majority)
    }

    /// The index of the master: the node the sentinels report, once it says
    /// it is a master. Waits (with a deadline) for both to hold.
    pub fn master_index(&self) -> usize {
        self.wait_until("the sentinels to agree on a master that says so", || {
            let port = self.sentinel_master_port()?;
            let i = self.index_of_port(port)?;
            (self.role(i).as_deref() == Some("master")).then_some(i)
        })
    }

    /// Waits until the sentinels report a master other than node `old` and
    /// that node says it is a master; returns its index.
    pub fn wait_master_change(&self, old: usize) -> usize {
        self.wait_until("a failover to another master", || {
            let port = self.sentinel_master_port()?;
            let i = self.index_of_port(port)?;
            (i != old && self.role(i).as_deref() == Some("master")).then_some(i)
        })
    }

    /// Waits until master `master` has at least `n` replicas online.
    pub fn wait_online(&self, master: usize, n: usize) {
        self.wait_until(&format!("{n} replicas online at node {master}"), || {
            (self.online_replicas(master)? >= n).then_some(())
        });
    }

    /// How many replicas data node `i` lists online (`None`: unreachable).
    fn online_replicas(&self, i: usize) -> Option<usize> {
        let mut con = self.try_connection(i)?;
        let info: String = redis::cmd("INFO").arg("replication").query(&mut con).ok()?;
        Some(
            info.lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .count(),
        )
    }

    fn try_connection(&self, i: usize) -> Option<redis::Connection> {
        let node = &self.nodes[i];
        node.pid()?;
        let con = redis::Client::open(node.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
        Some(con)
    }

    /// Kills data node `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts data node `i` again as a replica of the current master (asked
    /// of the sentinels), with its data folder as it was.
    pub fn restart_as_replica(&mut self, i: usize) {
        let master = self.master_index();
        assert_ne!(master, i, "node {i} is the master");
        let port = self.nodes[master].port();
        self.nodes[i].set_replica_of(Some(port));
        self.nodes[i].restart();
    }

    /// Like [`SentinelGroup::restart_as_replica`], with the node's data
    /// folder emptied first (a replica replaced by an empty one, keeping its
    /// address).
    pub fn restart_empty_as_replica(&mut self, i: usize) {
        if self.nodes[i].pid().is_some() {
            self.nodes[i].kill();
        }
        let dir = self.nodes[i].dir().to_path_buf();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let path = e.path();
                if path.file_name().is_some_and(|n| n == "redis.log") {
                    continue;
                }
                if path.is_dir() {
                    let _ = std::fs::remove_dir_all(&path);
                } else {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        self.restart_as_replica(i);
    }

    /// Asks the sentinels for a failover (`SENTINEL FAILOVER`, retried while
    /// one is in progress or no replica is ready) and waits until it is done;
    /// returns the new master's index.
    pub fn failover(&self) -> usize {
        let old = self.master_index();
        let deadline = Instant::now() + GROUP_DEADLINE;
        let mut last = String::new();
        loop {
            let mut asked = false;
            for s in &self.sentinels {
                match s.command(&["SENTINEL", "FAILOVER", &self.name]) {
                    Ok(_) => {
                        asked = true;
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            if asked {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "SENTINEL FAILOVER kept failing: {last}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        self.wait_master_change(old)
    }

    /// Waits until every sentinel sees the other sentinels and every running
    /// replica of the master.
    fn wait_sentinels_formed(&self) {
        let others = self.sentinels.len() - 1;
        let replicas = self.nodes.len() - 1;
        self.wait_until("the sentinels to see each other and the replicas", || {
            for s in &self.sentinels {
                let sentinels = s.count(&["SENTINEL", "SENTINELS", &self.name])?;
                let seen = s.count(&["SENTINEL", "REPLICAS", &self.name])?;
                if sentinels < others || seen < replicas {
                    return None;
                }
            }
            Some(())
        });
    }

    /// Waits until the sentinels agree on a master that says so and every
    /// running data node is its replica, online. The master is asked again
    /// at every look: under load the sentinels may fail over once more
    /// while the replicas catch up.
    pub fn settle(&self) -> usize {
        self.wait_until(
            "every running node a replica, online, of the master",
            || {
                let port = self.sentinel_master_port()?;
                let master = self.index_of_port(port)?;
                if self.role(master).as_deref() != Some("master") {
                    return None;
                }
                let running = self
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, n)| *i != master && n.pid().is_some())
                    .count();
                (self.online_replicas(master)? >= running).then_some(master)
            },
        )
    }

    fn wait_until<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + GROUP_DEADLINE;
        loop {
            if let Some(v) = check() {
                return v;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .sentinels
                    .iter()
                    .map(|s| s.log_tail())
                    .chain(self.nodes.iter().map(Node::log_tail))
                    .collect();
                panic!(
                    "waited {GROUP_DEADLINE:?} for {what}; logs:\n{}",
                    logs.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One `redis-server --sentinel` process in its own folder.
pub struct Sentinel {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    password: Option<String>,
}

impl Sentinel {
    fn start(spec: &SentinelGroupBuilder, master_port: u16, quorum: usize) -> Sentinel {
        let mut last = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("redlock-sentinel-")
                .tempdir()
                .expect("temp dir");
            let mut s = Sentinel {
                port: free_port(),
                dir,
                child: None,
                password: spec.sentinel_password.clone(),
            };
            let mut conf = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile {log}\ndir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {name} {down}\n\
                 sentinel failover-timeout {name} {failover}\n\
                 sentinel parallel-syncs {name} 4\n",
                port = s.port,
                log = s.dir.path().join("sentinel.log").display(),
                dir = s.dir.path().display(),
                name = spec.name,
                down = spec.down_after_ms,
                failover = spec.failover_timeout_ms,
            );
            if let Some(pw) = &spec.sentinel_password {
                conf.push_str(&format!("requirepass {pw}\n"));
            }
            std::fs::write(s.conf(), conf).expect("sentinel.conf");
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last = e,
            }
        }
        panic!("could not start a sentinel: {last}");
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("sentinel.conf")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let bin = server_bin();
        let child = Command::new(&bin)
            .current_dir(self.dir.path())
            .arg(self.conf())
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!("exited with {status}: {}", self.log_tail()));
            }
            if self.command(&["PING"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("no PING reply within {START_DEADLINE:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The sentinel's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (`redis://:pw@…` with a password).
    pub fn url(&self) -> String {
        match &self.password {
            None => format!("redis://127.0.0.1:{}", self.port),
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
        }
    }

    /// Runs one command on the sentinel.
    pub fn command(&self, args: &[&str]) -> Result<redis::Value, String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let mut con = client
            .get_connection_with_timeout(Duration::from_millis(500))
            .map_err(|e| e.to_string())?;
        let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query::<redis::Value>(&mut con)
            .map_err(|e| e.to_string())
    }

    fn count(&self, args: &[&str]) -> Option<usize> {
        match self.command(args).ok()? {
            redis::Value::Array(items) => Some(items.len()),
            _ => None,
        }
    }

    /// The master's port this sentinel reports.
    pub fn master_port(&self, name: &str) -> Option<u16> {
        match self
            .command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])
            .ok()?
        {
            redis::Value::Array(items) => match items.get(1)? {
                redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// The end of the sentinel's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
