//! A Redis Cluster of real `redis-server` processes with the module loaded:
//! S shards of one master and 0..R replicas each, on free loopback ports,
//! for tests of the module and of the quorum client in cluster mode.
//!
//! ```no_run
//! use redlock_testkit::Cluster;
//! let cluster = Cluster::builder().shards(3).replicas(1).start();
//! let slot = cluster.slot_of(b"lock:a");
//! let mut con = cluster.master_for_slot(slot).connection();
//! let token: i64 = redis::cmd("REDLOCK.ACQUIRE").arg("lock:a").arg("me").arg(1000)
//!     .query(&mut con).unwrap();
//! assert_eq!(token, 1);
//! ```
//!
//! A *shard* here is the group of nodes started together: its first master
//! and the replicas that first followed it. Failovers swap roles inside the
//! group (replica migration between groups is off), so shard `i` always
//! means the same nodes; [`Cluster::master`] tells which of them is the
//! master now.
//!
//! Every wait has a deadline and panics with what was seen when it passes.
//! Nodes stop on drop (like [`Node`]). A node frozen with [`Node::pause`]
//! must be resumed before a call that waits for the cluster to settle.
//! Nodes serve plain TCP (a TLS cluster is not supported here).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::{Node, NodeBuilder};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How long the cluster may take to settle after a start, a failover or a
/// slot move.
pub const SETTLE_DEADLINE: Duration = Duration::from_secs(45);

/// How long a cluster start waits for a handshake before it meets the
/// missing nodes again.
const MEET_AGAIN_AFTER: Duration = Duration::from_secs(3);

/// How to start a cluster.
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    shards: usize,
    replicas: usize,
    node_timeout_ms: u64,
    node: NodeBuilder,
}

impl ClusterBuilder {
    /// Number of shards (masters owning slots); at least 1. Default 3.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.max(1);
        self
    }

    /// Replicas per shard. Default 0.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// `cluster-node-timeout` in ms: how soon an unreachable master is
    /// failed over. Default 1000.
    pub fn node_timeout_ms(mut self, ms: u64) -> Self {
        self.node_timeout_ms = ms;
        self
    }

    /// The options of every node (module, configs, environment). Default
    /// [`Node::builder`]; the cluster options are added on top.
    pub fn node(mut self, node: NodeBuilder) -> Self {
        self.node = node;
        self
    }

    /// Adds a `--name value` option to every node.
    pub fn config(mut self, name: &str, value: &str) -> Self {
        self.node = self.node.config(name, value);
        self
    }

    /// Starts every node, assigns the slots evenly over the shards' masters,
    /// joins the nodes, attaches the replicas and waits until every node
    /// reports `cluster_state:ok` and all agree on the slot map.
    pub fn start(self) -> Cluster {
        let per_shard = 1 + self.replicas;
        let total = self.shards * per_shard;
        let node_timeout = self.node_timeout_ms.to_string();
        // Each node gets its own bus port: the default (port + 10000) may
        // be taken or above 65535 for an ephemeral port.
        let handles: Vec<_> = (0..total)
            .map(|_| {
                let builder = self
                    .node
                    .clone()
                    .config("cluster-enabled", "yes")
                    .config("cluster-config-file", "nodes.conf")
                    .config("cluster-node-timeout", &node_timeout)
                    .free_port_config("cluster-port")
                    // Failover is allowed however long the replica's link was
                    // down, and replicas stay in their group.
                    .config("cluster-replica-validity-factor", "0")
                    .config("cluster-allow-replica-migration", "no")
                    // Replicas sync at once (the default waits 5 s for more),
                    // and a master pings them every second: `CLUSTER SLOTS`
                    // lists a replica only once its replication offset is
                    // not 0, which on an idle master takes the first ping.
                    .config("repl-diskless-sync-delay", "0")
                    .config("repl-ping-replica-period", "1");
                std::thread::spawn(move || builder.start())
            })
            .collect();
        let mut flat: Vec<Node> = handles
            .into_iter()
            .map(|h| h.join().expect("cluster node start thread"))
            .collect();
        let mut shards = Vec::with_capacity(self.shards);
        let mut ids = Vec::with_capacity(self.shards);
        for _ in 0..self.shards {
            let group: Vec<Node> = flat.drain(..per_shard).collect();
            let group_ids: Vec<String> = group.iter().map(node_id).collect();
            shards.push(group);
            ids.push(group_ids);
        }
        let cluster = Cluster {
            shards,
            ids,
            node_timeout_ms: self.node_timeout_ms,
        };
        cluster.form();
        cluster
    }
}

/// A running cluster. See the module documentation.
pub struct Cluster {
    /// `shards[i][0]` started as the master of shard `i`.
    shards: Vec<Vec<Node>>,
    /// The cluster node ids, parallel to `shards`.
    ids: Vec<Vec<String>>,
    node_timeout_ms: u64,
}

/// A slot being moved, between [`Cluster::begin_migration`] and
/// [`Cluster::finish_migration`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The slot.
    pub slot: u16,
    /// The shard that owned it.
    pub from: usize,
    /// The shard that takes it.
    pub to: usize,
}

/// One node's entry in a `CLUSTER NODES` view.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    master: bool,
    /// The master's id for a replica.
    replica_of: Option<String>,
    slots: Vec<(u16, u16)>,
    failed: bool,
    handshake: bool,
}

type View = BTreeMap<String, Entry>;

impl Cluster {
    /// A builder: 3 shards, no replicas, 1000 ms node timeout.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            shards: 3,
            replicas: 0,
            node_timeout_ms: 1000,
            node: Node::builder(),
        }
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// `cluster-node-timeout` of the nodes, in ms.
    pub fn node_timeout_ms(&self) -> u64 {
        self.node_timeout_ms
    }

    /// URLs of every running node: seeds for a cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.all_nodes()
            .filter(|(_, _, n)| n.pid().is_some())
            .map(|(_, _, n)| n.url())
            .collect()
    }

    /// Every node of shard `shard`, in start order (index 0 started as its
    /// master).
    pub fn shard_nodes(&self, shard: usize) -> &[Node] {
        &self.shards[shard]
    }

    /// A node of shard `shard`, mutable (to kill, stop or restart it).
    pub fn node_mut(&mut self, shard: usize, index: usize) -> &mut Node {
        &mut self.shards[shard][index]
    }

    /// The cluster node id of node `index` of shard `shard`.
    pub fn node_id(&self, shard: usize, index: usize) -> &str {
        &self.ids[shard][index]
    }

    /// Index (in [`Cluster::shard_nodes`]) of the running master of
    /// `shard`, as the cluster sees it now.
    pub fn master_index(&self, shard: usize) -> usize {
        let view = self.agreed_view();
        self.master_index_in(&view, shard)
            .unwrap_or_else(|| panic!("shard {shard} has no running master: {view:?}"))
    }

    /// The running master of `shard`.
    pub fn master(&self, shard: usize) -> &Node {
        &self.shards[shard][self.master_index(shard)]
    }

    /// The current master of every shard, in shard order.
    pub fn masters(&self) -> Vec<&Node> {
        let view = self.agreed_view();
        (0..self.shards.len())
            .map(|s| {
                let i = self
                    .master_index_in(&view, s)
                    .unwrap_or_else(|| panic!("shard {s} has no running master: {view:?}"));
                &self.shards[s][i]
            })
            .collect()
    }

    /// The running replicas of `shard`.
    pub fn replicas(&self, shard: usize) -> Vec<&Node> {
        let view = self.agreed_view();
        self.shards[shard]
            .iter()
            .zip(&self.ids[shard])
            .filter(|(n, id)| {
                n.pid().is_some() && view.get(*id).is_some_and(|e| e.replica_of.is_some())
            })
            .map(|(n, _)| n)
            .collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &[u8]) -> u16 {
        let node = self.any_running();
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut admin(node))
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT: {e}"))
    }

    /// The shard whose master serves `slot` now.
    pub fn shard_of_slot(&self, slot: u16) -> usize {
        let view = self.agreed_view();
        self.shard_of_slot_in(&view, slot)
            .unwrap_or_else(|| panic!("no shard serves slot {slot}: {view:?}"))
    }

    /// The master that serves `slot` now.
    pub fn master_for_slot(&self, slot: u16) -> &Node {
        self.master(self.shard_of_slot(slot))
    }

    /// The shard of the node listening on `port` (e.g. from a `MOVED`
    /// reply).
    pub fn shard_of_port(&self, port: u16) -> Option<usize> {
        self.all_nodes()
            .find(|(_, _, n)| n.port() == port)
            .map(|(s, _, _)| s)
    }

    /// A slot owned by `shard` now (its first one), e.g. to build keys that
    /// land on a given shard.
    pub fn a_slot_of(&self, shard: usize) -> u16 {
        let view = self.agreed_view();
        let id = &self.ids[shard][self.master_index_in(&view, shard).expect("master")];
        view[id]
            .slots
            .first()
            .map(|r| r.0)
            .expect("shard owns no slot")
    }

    /// Moves `slot` to shard `to` with its keys, as `redis-cli --cluster
    /// reshard` does, and waits until every node agrees.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let migration = self.begin_migration(slot, to);
        while self.migrate_keys(&migration, 100) > 0 {}
        self.finish_migration(&migration);
    }

    /// First step of a slot move: `CLUSTER SETSLOT slot IMPORTING` on the
    /// target's master, then `MIGRATING` on the source's. From here the
    /// source answers `-ASK` for keys of the slot it no longer has.
    pub fn begin_migration(&self, slot: u16, to: usize) -> Migration {
        let from = self.shard_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is already on shard {to}");
        let from_id = self.master_id(from);
        let to_id = self.master_id(to);
        setslot(self.master(to), slot, "IMPORTING", Some(&from_id));
        setslot(self.master(from), slot, "MIGRATING", Some(&to_id));
        Migration { slot, from, to }
    }

    /// Second step: moves at most `max` keys of the slot from the source to
    /// the target with `MIGRATE … KEYS` (DUMP/RESTORE under the hood).
    /// Returns how many moved; 0 once the source has none left.
    pub fn migrate_keys(&self, migration: &Migration, max: usize) -> usize {
        let source = self.master(migration.from);
        let target = self.master(migration.to);
        let mut con = admin(source);
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(migration.slot)
            .arg(max.max(1))
            .query(&mut con)
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT: {e}"));
        if keys.is_empty() {
            return 0;
        }
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1")
            .arg(target.port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys);
        let reply: String = cmd
            .query(&mut con)
            .unwrap_or_else(|e| panic!("MIGRATE of slot {}: {e}", migration.slot));
        assert_eq!(reply, "OK", "MIGRATE of slot {}", migration.slot);
        keys.len()
    }

    /// Last step: `CLUSTER SETSLOT slot NODE target` on the target, the
    /// source and every other master, then waits until every node agrees.
    pub fn finish_migration(&self, migration: &Migration) {
        let to_id = self.master_id(migration.to);
        setslot(
            self.master(migration.to),
            migration.slot,
            "NODE",
            Some(&to_id),
        );
        setslot(
            self.master(migration.from),
            migration.slot,
            "NODE",
            Some(&to_id),
        );
        for shard in 0..self.shards.len() {
            if shard != migration.to && shard != migration.from {
                setslot(self.master(shard), migration.slot, "NODE", Some(&to_id));
            }
        }
        self.wait_stable();
        assert_eq!(
            self.shard_of_slot(migration.slot),
            migration.to,
            "slot {} did not move",
            migration.slot
        );
    }

    /// Manual failover of `shard`: `CLUSTER FAILOVER` on its first running
    /// replica, then waits until that replica is the master and every node
    /// agrees. Returns the index of the new master in the shard.
    pub fn failover(&self, shard: usize) -> usize {
        let view = self.agreed_view();
        let index = self
            .replica_index_in(&view, shard)
            .unwrap_or_else(|| panic!("shard {shard} has no running replica"));
        let node = &self.shards[shard][index];
        // The replica refuses while its link is still catching up.
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            let reply: redis::RedisResult<String> = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query(&mut admin(node));
            match reply {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => panic!("CLUSTER FAILOVER: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        self.wait_for_master(shard, index);
        index
    }

    /// Kills (SIGKILL) the master of `shard` and waits for the automatic
    /// failover to one of its replicas (needs a replica, and at least three
    /// shards so that a majority of masters can declare the failure).
    /// Returns the index of the killed node; the new master is
    /// [`Cluster::master`].
    pub fn kill_master(&mut self, shard: usize) -> usize {
        let view = self.agreed_view();
        let index = self
            .master_index_in(&view, shard)
            .unwrap_or_else(|| panic!("shard {shard} has no running master"));
        assert!(
            self.replica_index_in(&view, shard).is_some(),
            "shard {shard} has no replica to fail over to"
        );
        self.shards[shard][index].kill();
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            if let Some(view) = self.try_agreed_view() {
                if self
                    .master_index_in(&view, shard)
                    .is_some_and(|i| i != index)
                {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "shard {shard}: no replica took over within {SETTLE_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_stable();
        index
    }

    /// Starts a stopped or killed node of `shard` again (same port, folder
    /// and `nodes.conf`) and waits until the cluster is stable with it. A
    /// master that was failed over while it was down comes back as a
    /// replica of the shard's new master.
    pub fn restart_node(&mut self, shard: usize, index: usize) {
        self.shards[shard][index].restart();
        self.wait_stable();
    }

    /// Waits until every running node reports `cluster_state:ok`, they all
    /// agree on roles and slots, every slot is served by a running master,
    /// no running node is flagged failing, and every running replica's link
    /// to its master is up. Panics after [`SETTLE_DEADLINE`].
    pub fn wait_stable(&self) {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            let Err(why) = self.check_stable() else {
                return;
            };
            assert!(
                Instant::now() < deadline,
                "the cluster did not settle within {SETTLE_DEADLINE:?}: {why}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for_master(&self, shard: usize, index: usize) {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            if let Some(view) = self.try_agreed_view() {
                if self.master_index_in(&view, shard) == Some(index) {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "shard {shard}: node {index} did not become master within {SETTLE_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_stable();
    }

    fn form(&self) {
        let masters: Vec<&Node> = self.shards.iter().map(|g| &g[0]).collect();
        // Distinct config epochs before the nodes meet, as redis-cli does.
        // A node that already has one (it heard from another cluster's node
        // that once used its port) keeps it: Redis resolves equal epochs by
        // itself, so this only speeds the start up.
        for (i, (_, _, node)) in self.all_nodes().enumerate() {
            let reply: redis::RedisResult<String> = redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(i + 1)
                .query(&mut admin(node));
            if let Err(e) = reply {
                assert!(
                    e.to_string().contains("already non-zero"),
                    "CLUSTER SET-CONFIG-EPOCH: {e}"
                );
            }
        }
        let count = masters.len() as u32;
        for (i, master) in masters.iter().enumerate() {
            let first = (SLOTS as u32 * i as u32 / count) as u16;
            let last = (SLOTS as u32 * (i as u32 + 1) / count - 1) as u16;
            let _: String = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut admin(master))
                .unwrap_or_else(|e| panic!("CLUSTER ADDSLOTSRANGE: {e}"));
        }
        let first = &self.shards[0][0];
        let mut con = admin(first);
        for (_, _, node) in self.all_nodes().skip(1) {
            let _: String = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .arg(bus_port(node))
                .query(&mut con)
                .unwrap_or_else(|e| panic!("CLUSTER MEET: {e}"));
        }
        // A replica can only follow a master it knows.
        let total = self.all_nodes().count();
        let deadline = Instant::now() + SETTLE_DEADLINE;
        let mut met = Instant::now();
        for (_, _, node) in self.all_nodes() {
            loop {
                let view = read_view(node);
                let known = view
                    .as_ref()
                    .map(|v| v.values().filter(|e| !e.handshake).count())
                    .unwrap_or(0);
                if known == total {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {} knows {known} of {total} nodes",
                    node.port()
                );
                // Redis drops a handshake that timed out (a loaded machine)
                // and never tries it again: meet the missing nodes again.
                if met.elapsed() > MEET_AGAIN_AFTER {
                    self.meet_missing(node, view.as_ref().ok());
                    met = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for (s, group) in self.shards.iter().enumerate() {
            for replica in &group[1..] {
                let _: String = redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&self.ids[s][0])
                    .query(&mut admin(replica))
                    .unwrap_or_else(|e| panic!("CLUSTER REPLICATE: {e}"));
            }
        }
        self.wait_stable();
    }

    fn check_stable(&self) -> Result<(), String> {
        let mut agreed: Option<View> = None;
        for (_, _, node) in self.all_nodes().filter(|(_, _, n)| n.pid().is_some()) {
            let mut con = try_admin(node).map_err(|e| format!("{}: {e}", node.port()))?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .map_err(|e| format!("{}: CLUSTER INFO: {e}", node.port()))?;
            if !info.contains("cluster_state:ok") {
                return Err(format!("{}: cluster_state is not ok", node.port()));
            }
            let view = read_view(node)?;
            match &agreed {
                None => agreed = Some(view),
                Some(first) if *first != view => {
                    return Err(format!(
                        "{} sees {view:?}, another node {first:?}",
                        node.port()
                    ))
                }
                Some(_) => {}
            }
        }
        let view = agreed.ok_or("no node runs")?;
        // `CLUSTER SLOTS` (what cluster clients read) lists a replica only
        // once it has gossiped a replication offset.
        let replica_rows: usize = view
            .iter()
            .filter(|(_, e)| e.master)
            .map(|(id, e)| {
                let running = self
                    .all_nodes()
                    .filter(|(s, i, n)| {
                        n.pid().is_some()
                            && view
                                .get(&self.ids[*s][*i])
                                .is_some_and(|r| r.replica_of.as_ref() == Some(id))
                    })
                    .count();
                e.slots.len() * running
            })
            .sum();
        for (_, _, node) in self.all_nodes().filter(|(_, _, n)| n.pid().is_some()) {
            let rows: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut try_admin(node).map_err(|e| e.to_string())?)
                .map_err(|e| format!("{}: CLUSTER SLOTS: {e}", node.port()))?;
            let listed: usize = rows.iter().map(|r| r.len().saturating_sub(3)).sum();
            if listed != replica_rows {
                return Err(format!(
                    "{}: CLUSTER SLOTS lists {listed} replica entries, expected {replica_rows}",
                    node.port()
                ));
            }
        }
        for (s, i, node) in self.all_nodes() {
            let id = &self.ids[s][i];
            let entry = view.get(id).ok_or(format!("node {id} is unknown"))?;
            if node.pid().is_some() {
                if entry.failed || entry.handshake {
                    return Err(format!("running node {} is flagged failing", node.port()));
                }
                if entry.replica_of.is_some() {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut admin(node))
                        .map_err(|e| format!("{}: INFO: {e}", node.port()))?;
                    if !info.contains("master_link_status:up") {
                        return Err(format!("replica {}: link not up", node.port()));
                    }
                }
            } else if entry.master && !entry.slots.is_empty() {
                return Err(format!("stopped node {} still serves slots", node.port()));
            }
        }
        Ok(())
    }

    fn try_agreed_view(&self) -> Option<View> {
        let mut agreed: Option<View> = None;
        for (_, _, node) in self.all_nodes().filter(|(_, _, n)| n.pid().is_some()) {
            let view = read_view(node).ok()?;
            match &agreed {
                None => agreed = Some(view),
                Some(first) if *first != view => return None,
                Some(_) => {}
            }
        }
        agreed
    }

    fn agreed_view(&self) -> View {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            if let Some(view) = self.try_agreed_view() {
                return view;
            }
            assert!(
                Instant::now() < deadline,
                "the nodes did not agree on a view within {SETTLE_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn master_index_in(&self, view: &View, shard: usize) -> Option<usize> {
        self.shards[shard]
            .iter()
            .zip(&self.ids[shard])
            .position(|(n, id)| n.pid().is_some() && view.get(id).is_some_and(|e| e.master))
    }

    fn replica_index_in(&self, view: &View, shard: usize) -> Option<usize> {
        self.shards[shard]
            .iter()
            .zip(&self.ids[shard])
            .position(|(n, id)| {
                n.pid().is_some() && view.get(id).is_some_and(|e| e.replica_of.is_some())
            })
    }

    fn shard_of_slot_in(&self, view: &View, slot: u16) -> Option<usize> {
        let (id, _) = view
            .iter()
            .find(|(_, e)| e.master && e.slots.iter().any(|&(a, b)| a <= slot && slot <= b))?;
        self.ids.iter().position(|g| g.contains(id))
    }

    fn master_id(&self, shard: usize) -> String {
        self.ids[shard][self.master_index(shard)].clone()
    }

    /// `node` meets every node its `view` does not know yet (a failed
    /// read: every node); a refused MEET is left to the next round.
    fn meet_missing(&self, node: &Node, view: Option<&View>) {
        let Ok(mut con) = try_admin(node) else {
            return;
        };
        for (s, i, other) in self.all_nodes() {
            let known = view
                .and_then(|v| v.get(&self.ids[s][i]))
                .is_some_and(|e| !e.handshake);
            if known || other.port() == node.port() {
                continue;
            }
            let _: redis::RedisResult<String> = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(other.port())
                .arg(bus_port(other))
                .query(&mut con);
        }
    }

    fn all_nodes(&self) -> impl Iterator<Item = (usize, usize, &Node)> {
        self.shards
            .iter()
            .enumerate()
            .flat_map(|(s, g)| g.iter().enumerate().map(move |(i, n)| (s, i, n)))
    }

    fn any_running(&self) -> &Node {
        self.all_nodes()
            .map(|(_, _, n)| n)
            .find(|n| n.pid().is_some())
            .expect("no node of the cluster runs")
    }
}

/// The node's cluster bus port (`cluster-port`).
fn bus_port(node: &Node) -> u16 {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-port")
        .query(&mut admin(node))
        .unwrap_or_else(|e| panic!("CONFIG GET cluster-port: {e}"));
    pair.get(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("cluster-port of {}: {pair:?}", node.port()))
}

fn node_id(node: &Node) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut admin(node))
        .unwrap_or_else(|e| panic!("CLUSTER MYID: {e}"))
}

fn setslot(node: &Node, slot: u16, how: &str, id: Option<&str>) {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SETSLOT").arg(slot).arg(how);
    if let Some(id) = id {
        cmd.arg(id);
    }
    let _: String = cmd
        .query(&mut admin(node))
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {how} on {}: {e}", node.port()));
}

fn try_admin(node: &Node) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(node.url())?;
    let con = client.get_connection_with_timeout(Duration::from_secs(2))?;
    con.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(con)
}

/// A connection for the test kit's own commands, with a read timeout so
/// that a frozen node cannot hang a wait.
fn admin(node: &Node) -> redis::Connection {
    try_admin(node).unwrap_or_else(|e| panic!("connect to {}: {e}", node.port()))
}

/// The node's `CLUSTER NODES`, as id → entry.
fn read_view(node: &Node) -> Result<View, String> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut try_admin(node).map_err(|e| e.to_string())?)
        .map_err(|e| format!("{}: CLUSTER NODES: {e}", node.port()))?;
    Ok(parse_nodes(&text))
}

/// Parses `CLUSTER NODES`: `id addr flags master ping pong epoch link
/// slot…`; the `[slot->-id]` / `[slot-<-id]` migration marks are left out.
fn parse_nodes(text: &str) -> View {
    let mut view = View::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            continue;
        }
        let flags: Vec<&str> = fields[2].split(',').collect();
        let mut slots = Vec::new();
        for range in &fields[8..] {
            if range.starts_with('[') {
                continue;
            }
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                slots.push((a, b));
            }
        }
        view.insert(
            fields[0].to_string(),
            Entry {
                master: flags.contains(&"master"),
                replica_of: (fields[3] != "-").then(|| fields[3].to_string()),
                slots,
                failed: flags.contains(&"fail") || flags.contains(&"fail?"),
                handshake: flags.contains(&"handshake") || flags.contains(&"noaddr"),
            },
        );
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
a1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 [5461->-b2]
b2 127.0.0.1:30002@40002 master,fail - 0 0 2 connected 5461-10922
c3 127.0.0.1:30003@40003 slave a1 0 0 1 connected
";
        let view = parse_nodes(text);
        assert_eq!(view.len(), 3);
        assert!(view["a1"].master && view["a1"].slots == [(0, 5460)]);
        assert!(view["b2"].failed);
        assert_eq!(view["c3"].replica_of.as_deref(), Some("a1"));
        assert!(!view["c3"].master && view["c3"].slots.is_empty());
    }
}
