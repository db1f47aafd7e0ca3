//! One run of the matrix: five nodes behind fault proxies, the fenced
//! resource, worker processes, one fault injector; then the merged history
//! and the checker's report. Everything is on 127.0.0.1, on ports chosen at
//! run time, bounded in time (the workers stop at a deadline and are killed
//! 20 s after it at the latest) and in count (a fault budget per run).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redlock_testkit::proxy::{Fault, FaultProxy};
use redlock_testkit::{start_nodes, Cluster, Node, NodeBuilder, SentinelGroup};
use serde::{Deserialize, Serialize};

use crate::checker::{self, Report};
use crate::clock::mono_ns;
use crate::history::{self, Guarantees, Kind, Recorder};
use crate::resource::{Checking, ResourceKind, ResourceServer};
use crate::workload::{ClientOptions, LateCopyPlan, PausePlan, PausePoint, WorkerSpec};

/// Members of every run's quorum.
pub const NODES: usize = 5;

/// Members that are Redis Clusters in a [`FaultType::ClusterShards`] run
/// (the first ones of the quorum; the rest are single nodes).
pub const CLUSTER_MEMBERS: usize = 2;

/// Shards of each cluster member (three: a majority of masters must see a
/// killed master fail for its replica to take over).
pub const CLUSTER_SHARDS: usize = 3;

/// The fault types of the matrix (and two used only by mutation tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultType {
    /// No fault: the baseline.
    None,
    /// kill -9 and restart, no persistence (restart guard at its default).
    KillNone,
    /// kill -9 and restart, AOF `everysec` (restart guard at its default).
    KillEverysec,
    /// kill -9 and restart, AOF `always` (the guard does not apply).
    KillAlways,
    /// SIGSTOP a node longer than the lease.
    NodePause,
    /// A client task stalls after sending ACQUIRE.
    ClientPauseSend,
    /// A client task stalls after acquiring, before using the token.
    ClientPauseUse,
    /// A client task stalls between the resource read and write.
    ClientPauseWrite,
    /// SIGSTOP a whole worker process longer than the lease.
    ProcessPause,
    /// Proxy: added latency.
    ProxyDelay,
    /// Proxy: nothing goes through for a while.
    ProxyBlackhole,
    /// Proxy: connections reset with RST.
    ProxyReset,
    /// Proxy: requests applied, replies dropped.
    ProxyDropReplies,
    /// A node's wall clock jumps forward or backward; every third fault
    /// (the second, fifth, …) instead promotes a member's replica, whose
    /// wall clock is an hour off its master's.
    ClockJump,
    /// Every member has a replica whose wall clock is an hour off its
    /// master's. A member's replica falls behind (SIGSTOP) while two other
    /// members are cut off, its master is killed, and the replica is
    /// promoted and takes the member's place (the old master comes back as
    /// its replica).
    PromoteLaggingReplica,
    /// Like [`FaultType::PromoteLaggingReplica`], with every node durable
    /// (AOF `always`): the member's master is killed while it holds a grant
    /// its replica never received, the replica is promoted, and then, inside
    /// its promotion window, killed -9 and restarted from its own AOF (as a
    /// master: `replicaof no one`, as a failover that rewrote its config
    /// leaves it). The restart must not end the window the promotion opened.
    PromotedRestart,
    /// Every node durable (AOF `always`): a majority of nodes is killed -9
    /// while they hold a lease, and each comes back with its wall clock
    /// stepped 20–60 s further forward (the test build's
    /// `REDLOCK_TEST_WALL_OFFSET_MS`, read before the AOF is loaded). A
    /// lease loaded from disk must not end earlier than the time it had
    /// left when it was written.
    ClockStepRestart,
    /// Two of the five members are Redis Clusters of three shards with a
    /// replica each (the other three are single nodes). Faults, in turn:
    /// the slot of a lock name moves to another shard step by step
    /// (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE`) while it
    /// is in use; a shard fails over by `CLUSTER FAILOVER`; a shard's
    /// master is killed, a replica takes over, and the old master restarts
    /// empty as its replica.
    ClusterShards,
    /// The Redis server that holds the fenced resource is killed (`kill -9`)
    /// and restarted from its AOF (`appendfsync always`), again and again,
    /// while the workers use it; client tasks also stall before using their
    /// token, so that stale tokens reach the restarted resource.
    ResourceKill,
    /// [`FaultType::PromoteLaggingReplica`] on Valkey (the nodes of the
    /// quorum run [`RunConfig::server_bin`]), with every master's
    /// `redlock.max-ttl-ms` raised at run time above its replica's: Redis
    /// 7.2+ and Valkey write the node record through `aux_save2`, and a
    /// replica must learn its master's longer leases from the full sync
    /// (issue 39). The fenced resource stays on the default server.
    PromoteLaggingReplicaValkey,
    /// The quorum is one Sentinel member: a master with two replicas and
    /// three sentinels, `redlock.sync-replicas 2` (the replica-sync check).
    /// Faults, in turn: the master killed -9 (a supervisor restarts it as a
    /// replica of the new master); the master killed while both replicas
    /// lag (SIGSTOPped, so that the grants of that time exist on the master
    /// only); the master SIGSTOPped past Sentinel's down-after (it resumes
    /// and is pointed at the new master); `SENTINEL FAILOVER`; a replica
    /// restarted empty. After each failover the new master's view of every
    /// key is read: a hold still valid on its client's clock that the new
    /// master lacks is a lock lost by its holder (with the check: none).
    Sentinel,
    /// [`FaultType::Sentinel`] without the check (`redlock.sync-replicas 0`),
    /// with the crash faults only (see [`RunConfig::sentinel_live_failovers`]):
    /// a promoted replica keeps the guard, so the run stays safe, and the
    /// locks lost by their holders are counted.
    SentinelUnchecked,
    /// Mutation tests: two random nodes cut off, rotating quickly.
    PartitionRotate,
    /// Mutation tests: every node killed and restarted at once (empty
    /// without persistence).
    KillAll,
    /// Mutation tests: holders extend their lock beyond its first lease and
    /// then send the ACQUIRE they took it with to every node again (a late
    /// copy), and keep using the lock past the end of the first lease
    /// ([`crate::workload::LateCopyPlan`]). No fault on the nodes.
    LateAcquireCopy,
    /// The election workload ([`crate::election`]): five candidates, one
    /// per worker process, campaign for one name, and each leader writes
    /// through the fenced resource with its epoch. Faults, in turn: the
    /// leader's whole process SIGSTOPped longer than the lease (a leader
    /// paused past its lease must be fenced out by its epoch), nodes killed
    /// -9 and restarted (no persistence, the restart guard at its default),
    /// nodes SIGSTOPped longer than the lease.
    Election,
}

impl FaultType {
    /// The matrix `make safety` runs.
    pub const MATRIX: [FaultType; 23] = [
        FaultType::None,
        FaultType::KillNone,
        FaultType::KillEverysec,
        FaultType::KillAlways,
        FaultType::NodePause,
        FaultType::ClientPauseSend,
        FaultType::ClientPauseUse,
        FaultType::ClientPauseWrite,
        FaultType::ProcessPause,
        FaultType::ProxyDelay,
        FaultType::ProxyBlackhole,
        FaultType::ProxyReset,
        FaultType::ProxyDropReplies,
        FaultType::ClockJump,
        FaultType::PromoteLaggingReplica,
        FaultType::ClusterShards,
        FaultType::ResourceKill,
        // Last, so that the runs before them keep their seeds.
        FaultType::ClockStepRestart,
        FaultType::PromotedRestart,
        FaultType::PromoteLaggingReplicaValkey,
        FaultType::Sentinel,
        FaultType::SentinelUnchecked,
        FaultType::Election,
    ];

    /// Whether the quick run (`safety --quick`, part of `make test`) has a
    /// share of this fault type. [`FaultType::PromotedRestart`] has none:
    /// each of its faults takes 1–3.5 s (it waits for a free lock, then
    /// restarts two nodes and syncs a replica), so a share of a few seconds
    /// would carry one fault, too few to reach what it is for; it runs in
    /// the full matrix only.
    pub fn in_quick_run(self) -> bool {
        self != FaultType::PromotedRestart && self != FaultType::SentinelUnchecked
    }

    /// Name in tables and file names.
    pub fn name(self) -> &'static str {
        match self {
            FaultType::None => "none",
            FaultType::KillNone => "kill9_persist_none",
            FaultType::KillEverysec => "kill9_aof_everysec",
            FaultType::KillAlways => "kill9_aof_always",
            FaultType::NodePause => "node_sigstop",
            FaultType::ClientPauseSend => "client_pause_after_send",
            FaultType::ClientPauseUse => "client_pause_before_use",
            FaultType::ClientPauseWrite => "client_pause_read_write",
            FaultType::ProcessPause => "process_sigstop",
            FaultType::ProxyDelay => "proxy_delay",
            FaultType::ProxyBlackhole => "proxy_blackhole",
            FaultType::ProxyReset => "proxy_reset",
            FaultType::ProxyDropReplies => "proxy_drop_replies",
            FaultType::ClockJump => "clock_jump",
            FaultType::PromoteLaggingReplica => "promote_lagging_replica",
            FaultType::PromoteLaggingReplicaValkey => "promote_lagging_replica_valkey",
            FaultType::PromotedRestart => "promoted_replica_restart",
            FaultType::ClockStepRestart => "clock_step_durable_restart",
            FaultType::ClusterShards => "cluster_shards",
            FaultType::ResourceKill => "resource_kill9_aof_always",
            FaultType::Sentinel => "sentinel",
            FaultType::SentinelUnchecked => "sentinel_unchecked",
            FaultType::PartitionRotate => "partition_rotate",
            FaultType::KillAll => "kill9_all",
            FaultType::LateAcquireCopy => "late_acquire_copy",
            FaultType::Election => "election",
        }
    }

    /// Whether the quorum is one Sentinel member (and with the replica-sync
    /// check when [`FaultType::Sentinel`]).
    pub fn is_sentinel(self) -> bool {
        matches!(self, FaultType::Sentinel | FaultType::SentinelUnchecked)
    }

    /// Node persistence for this fault type.
    pub fn persistence(self) -> Persistence {
        match self {
            FaultType::KillEverysec => Persistence::AofEverysec,
            FaultType::KillAlways | FaultType::PromotedRestart | FaultType::ClockStepRestart => {
                Persistence::AofAlways
            }
            _ => Persistence::None,
        }
    }

    /// Whether every member runs with a replica.
    pub fn with_replicas(self) -> bool {
        matches!(
            self,
            FaultType::PromoteLaggingReplica
                | FaultType::PromoteLaggingReplicaValkey
                | FaultType::PromotedRestart
                | FaultType::ClockJump
        )
    }

    /// Whether this fault type runs its quorum on Valkey
    /// ([`RunConfig::server_bin`] must name a `valkey-server`).
    pub fn on_valkey(self) -> bool {
        self == FaultType::PromoteLaggingReplicaValkey
    }

    /// Whether the workers hold each lock for a while (a fault must find a
    /// lease running to void it).
    fn long_holds(self) -> bool {
        matches!(
            self,
            FaultType::PromoteLaggingReplica
                | FaultType::PromoteLaggingReplicaValkey
                | FaultType::PromotedRestart
                | FaultType::ClockStepRestart
                | FaultType::ClusterShards
                | FaultType::Sentinel
                | FaultType::SentinelUnchecked
        )
    }

    fn pause_point(self) -> Option<PausePoint> {
        match self {
            FaultType::ClientPauseSend => Some(PausePoint::AfterSendAcquire),
            FaultType::ClientPauseUse => Some(PausePoint::BeforeUse),
            FaultType::ClientPauseWrite => Some(PausePoint::BetweenReadAndWrite),
            // Stale tokens must reach the resource around its restarts.
            FaultType::ResourceKill => Some(PausePoint::BeforeUse),
            _ => None,
        }
    }
}

/// How nodes persist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// No RDB, no AOF: a restart comes back empty.
    None,
    /// `appendonly yes`, `appendfsync everysec`.
    AofEverysec,
    /// `appendonly yes`, `appendfsync always`.
    AofAlways,
}

impl Persistence {
    /// Name in the history.
    pub fn name(self) -> &'static str {
        match self {
            Persistence::None => "none",
            Persistence::AofEverysec => "everysec",
            Persistence::AofAlways => "always",
        }
    }
}

/// One run's parameters.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Run name (file names).
    pub name: String,
    /// Fault injected.
    pub fault: FaultType,
    /// Wall time of the workload.
    pub duration: Duration,
    /// Number of keys.
    pub keys: usize,
    /// Worker processes.
    pub workers: usize,
    /// Client tasks in total.
    pub tasks: usize,
    /// Seed.
    pub seed: u64,
    /// Lease of each acquisition.
    pub ttl_ms: u64,
    /// `redlock.max-ttl-ms` of the nodes; the restart guard lasts as long.
    pub max_ttl_ms: u64,
    /// Most faults the injector starts.
    pub fault_budget: u32,
    /// Client options (mutation switches included).
    pub client: ClientOptions,
    /// Resource checking (mutation switch). With the Redis-held resource,
    /// [`Checking::WritesOnly`] sends reads unfenced.
    pub checking: Checking,
    /// Where the fenced resource lives (default: a Redis server).
    pub resource: ResourceKind,
    /// Mutant (Redis-held resource): FENCED never refuses a stale token
    /// (`REDLOCK.TESTHOOK FENCED-CHECK 0`).
    pub fenced_check_off: bool,
    /// Mutant (Redis-held resource): FENCED never raises its guard
    /// (`REDLOCK.TESTHOOK FENCED-RAISE 0`).
    pub fenced_raise_off: bool,
    /// Mutant: nodes skip replicating effects to the AOF.
    pub no_aof_propagation: bool,
    /// Mutant: replicas grant at once when promoted (no promotion guard).
    pub no_promotion_guard: bool,
    /// Sentinel runs: the faults taken in turn (see [`SentinelFault`]).
    /// With the check, all of them; without it, the crashes and the empty
    /// replica only: the failovers that leave the old master running
    /// (`SENTINEL FAILOVER`, a SIGSTOPped master) give two holders without
    /// the check (the old master grants to the clients that still talk to
    /// it after the promotion, past the guard window), which a mutation
    /// check shows.
    pub sentinel_faults: &'static [SentinelFault],
    /// Mutants of the module switched on at every start of every node,
    /// through [`crate::mutants::MODULE_MUTANTS_ENV`] (names in
    /// [`crate::mutants`]).
    pub module_mutants: Vec<String>,
    /// Half the worker processes (odd indexes) acquire with the client's
    /// clock floor off (`clock_floor(false)`), the others with it on, on the
    /// same keys: tokens must keep increasing for every client of a key.
    pub mixed_floor: bool,
    /// Reclamation of idle records: the nodes' `redlock.reclaim-after-ms`,
    /// and the key phase of the short-lived names workload (see
    /// [`WorkerSpec::key_phase_ms`]). `None`: the default (one day), keys
    /// picked at random.
    pub reclaim: Option<Reclaim>,
    /// The server binary of the quorum's nodes and replicas (the fenced
    /// resource keeps the default); `None`: the test kit's
    /// (`REDLOCK_SERVER_BIN`, else `redis-server`).
    pub server_bin: Option<PathBuf>,
    /// The `safety` binary, re-executed as worker processes.
    pub worker_exe: PathBuf,
    /// Folder for histories.
    pub out: PathBuf,
}

impl RunConfig {
    /// Defaults for `fault`: 8 tasks in 2 processes (the election: five
    /// candidates, one per process), one key, ttl 400 ms
    /// (1 s for the restarts that must find a lease still running on the
    /// restarted node: a restart takes a good part of 400 ms).
    pub fn new(fault: FaultType, duration: Duration, worker_exe: PathBuf, out: PathBuf) -> Self {
        let ttl_ms = match fault {
            FaultType::PromotedRestart | FaultType::ClockStepRestart => 1_000,
            // A hold must outlive a failover (Sentinel takes 2–3 s) for the
            // new master's view of it to say anything.
            FaultType::Sentinel | FaultType::SentinelUnchecked => 8_000,
            _ => 400,
        };
        let (workers, tasks) = if fault == FaultType::Election {
            (Election::CANDIDATES, Election::CANDIDATES)
        } else {
            (2, 8)
        };
        RunConfig {
            name: fault.name().to_string(),
            fault,
            duration,
            keys: 1,
            workers,
            tasks,
            seed: 1,
            ttl_ms,
            max_ttl_ms: ttl_ms.max(2_000),
            fault_budget: 30,
            client: ClientOptions::default(),
            checking: Checking::ReadsAndWrites,
            resource: ResourceKind::Redis,
            fenced_check_off: false,
            fenced_raise_off: false,
            no_aof_propagation: false,
            no_promotion_guard: false,
            sentinel_faults: if fault == FaultType::Sentinel {
                &SentinelFault::ALL
            } else {
                &SentinelFault::CRASHES
            },
            module_mutants: Vec::new(),
            mixed_floor: false,
            reclaim: None,
            server_bin: None,
            worker_exe,
            out,
        }
    }
}

/// Settings of the election workload's runs ([`FaultType::Election`]).
pub struct Election;

impl Election {
    /// The faults an election run takes in turn (the leader's pause first:
    /// the quick run has room for two or three faults).
    pub const FAULTS: [FaultType; 3] = [
        FaultType::ProcessPause,
        FaultType::KillNone,
        FaultType::NodePause,
    ];

    /// Candidates: one per worker process, so that a process pause stops
    /// one candidate (often the leader) and no other.
    pub const CANDIDATES: usize = 5;
}

/// Settings of a run that reclaims idle records.
#[derive(Clone, Copy, Debug)]
pub struct Reclaim {
    /// `redlock.reclaim-after-ms` of every node.
    pub after_ms: u64,
    /// How long each half of the names lies idle, ms.
    pub phase_ms: u64,
}

impl Reclaim {
    /// A few seconds' cycle: reclaim-after 1 s (max-ttl 1 s, leases of
    /// 400 ms), names idle for 2 s at a time, so every name is reclaimed
    /// and reused every 4 s.
    pub const SHORT: Reclaim = Reclaim {
        after_ms: 1_000,
        phase_ms: 2_000,
    };

    /// Fault types combined with reclamation in the full matrix.
    pub const FAULTS: [FaultType; 6] = [
        FaultType::None,
        FaultType::KillNone,
        FaultType::KillEverysec,
        FaultType::NodePause,
        FaultType::ClockJump,
        FaultType::PromoteLaggingReplica,
    ];

    /// Fault types combined with reclamation in the quick run.
    pub const QUICK_FAULTS: [FaultType; 1] = [FaultType::KillNone];

    /// Fault types combined with reclamation and a mixed workload (clients
    /// with and without the clock floor, see [`RunConfig::mixed_floor`]) in
    /// the full matrix. Only faults under which every node keeps its
    /// counters: that is what the README's guarantees promise a client
    /// without the floor, and kill -9 without persistence or with
    /// `everysec`, or a promoted replica that missed grants, break it on
    /// their own, with or without reclamation.
    pub const MIXED_FAULTS: [FaultType; 3] =
        [FaultType::None, FaultType::NodePause, FaultType::KillAlways];

    /// Fault types of the mixed workload with reclamation in the quick run.
    pub const QUICK_MIXED_FAULTS: [FaultType; 1] = [FaultType::None];

    /// Names used by a reclaim run.
    pub const KEYS: usize = 16;

    /// Applies the settings to a run: many names, the nodes' max-ttl no
    /// longer than reclaim-after.
    pub fn apply(self, cfg: &mut RunConfig) {
        cfg.reclaim = Some(self);
        cfg.keys = Self::KEYS;
        cfg.max_ttl_ms = cfg.max_ttl_ms.min(self.after_ms).max(cfg.ttl_ms);
    }
}

/// The outcome of one run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The checker's report.
    pub report: Report,
    /// The merged history.
    pub history: PathBuf,
    /// Records the nodes reclaimed (read at the end, from the nodes in
    /// service; a node killed during the run loses its count).
    pub reclaimed: u64,
}

struct Deployment {
    /// The single-node members (all five, except in cluster runs).
    nodes: Vec<Node>,
    /// Cluster members ([`FaultType::ClusterShards`] only).
    clusters: Vec<Cluster>,
    /// Why a cluster fault could not be carried out (the run fails).
    fault_error: Option<String>,
    /// One replica per member, for fault types that use them.
    replicas: Vec<Node>,
    /// The replication link of each replica runs through a proxy, so that
    /// a replica can fall behind its master.
    links: Vec<FaultProxy>,
    proxies: Vec<FaultProxy>,
    keys: Vec<String>,
    /// The Redis server that holds the fenced resource (Redis-held runs).
    resource_node: Option<Node>,
    /// The Sentinel group that is the quorum's one member (Sentinel runs).
    group: Option<SentinelGroup>,
    /// The election workload's note of the leading worker (see
    /// [`WorkerSpec::leader_file`]).
    leader_file: Option<PathBuf>,
}

/// Starts the Redis server of the fenced resource: the module, AOF
/// `always` (so that a kill -9 loses nothing acknowledged), and the
/// mutants' switches.
fn start_resource_node(cfg: &RunConfig) -> Result<Node, String> {
    let node = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    prepare_resource_node(cfg, &node)?;
    Ok(node)
}

/// Sets the mutants' switches on the resource server (again after each
/// restart: they are not persisted).
fn prepare_resource_node(cfg: &RunConfig, node: &Node) -> Result<(), String> {
    let mut con = direct(node).ok_or("resource connection")?;
    for (on, hook) in [
        (cfg.fenced_check_off, "FENCED-CHECK"),
        (cfg.fenced_raise_off, "FENCED-RAISE"),
    ] {
        if on {
            crate::mutants::fenced_hook(&mut con, hook)?;
        }
    }
    Ok(())
}

/// Environment variable of the module's test build with a wall-clock
/// offset in ms, applied when the module loads, before the data is (the
/// module's `clock::WALL_OFFSET_ENV`).
pub const WALL_OFFSET_ENV: &str = "REDLOCK_TEST_WALL_OFFSET_MS";

/// Wall-clock skew of member `i`'s replica: an hour ahead or behind.
fn replica_skew_ms(i: usize) -> i64 {
    if i.is_multiple_of(2) {
        3_600_000
    } else {
        -3_600_000
    }
}

/// Settings of a replica that reaches its master through `link`, with the
/// restart guard at its default: what a promotion starts.
fn replica_configs(link: &FaultProxy) -> [(&'static str, String); 2] {
    [
        ("replicaof", format!("127.0.0.1 {}", link.addr().port())),
        ("redlock.restart-grace-ms", "-1".to_string()),
    ]
}

/// Sets the replica's skewed clock (and the mutant switch), then waits for
/// its link to the master.
fn prepare_replica(cfg: &RunConfig, replica: &Node, i: usize) -> Result<(), String> {
    let mut con = direct(replica).ok_or("replica connection")?;
    redis::cmd("REDLOCK.TESTHOOK")
        .arg("WALLCLOCK-OFFSET")
        .arg(replica_skew_ms(i))
        .query::<()>(&mut con)
        .map_err(|e| format!("replica clock: {e}"))?;
    if cfg.no_promotion_guard {
        crate::mutants::disable_promotion_guard(&mut con)?;
    }
    let deadline = mono_ns() + 10_000_000_000;
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut con)
            .unwrap_or_default();
        if info.contains("master_link_status:up") {
            return Ok(());
        }
        if mono_ns() > deadline {
            return Err(format!("replica {i}: no link to its master"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`FaultType::PromoteLaggingReplicaValkey`]: a master's `max-ttl-ms`,
/// raised at run time to twice its replica's (which keeps the configured
/// one), as an operator raises it on the member's master after a failover.
fn raise_master_max_ttl(cfg: &RunConfig, node: &Node) -> Result<(), String> {
    let mut con = direct(node).ok_or("master connection")?;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg(cfg.max_ttl_ms * 2)
        .query::<()>(&mut con)
        .map_err(|e| format!("raise max-ttl-ms: {e}"))
}

fn direct(node: &Node) -> Option<redis::Connection> {
    let c = redis::Client::open(node.url()).ok()?;
    let con = c
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    Some(con)
}

fn counter(node: &Node, key: &str) -> Option<u64> {
    inspect_field(node, key, "token")
}

/// One field of `REDLOCK.INSPECT key` on `node` (0 for a missing key).
fn inspect_field(node: &Node, key: &str, field: &str) -> Option<u64> {
    inspect_reply_field(&mut direct(node)?, key, field)
}

/// One field of `REDLOCK.INSPECT key` on an open connection (0 for a
/// missing key).
fn inspect_reply_field(con: &mut redis::Connection, key: &str, field: &str) -> Option<u64> {
    let v: redis::Value = redis::cmd("REDLOCK.INSPECT").arg(key).query(con).ok()?;
    let items = match v {
        redis::Value::Nil => return Some(0),
        redis::Value::Array(items) => items,
        redis::Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => return None,
    };
    let mut it = items.into_iter();
    while let Some(k) = it.next() {
        let name: Option<String> = redis::from_redis_value(k).ok();
        let val = it.next()?;
        if name.as_deref() == Some(field) {
            return redis::from_redis_value(val).ok();
        }
    }
    None
}

/// Runs one configuration to its end and checks it.
pub fn run(cfg: &RunConfig) -> Result<RunResult, String> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    let parts = cfg.out.join(format!("{}.parts", cfg.name));
    let _ = std::fs::remove_dir_all(&parts);
    std::fs::create_dir_all(&parts).map_err(|e| e.to_string())?;
    let persistence = cfg.fault.persistence();
    let mut builder = Node::builder()
        .config("redlock.max-ttl-ms", &cfg.max_ttl_ms.to_string())
        // A fresh cluster has granted nothing yet: no guard at the first start.
        // Restarts bring the guard back at its default (see `inject`).
        .config("redlock.restart-grace-ms", "0")
        .config("repl-diskless-sync-delay", "0");
    if let Some(reclaim) = cfg.reclaim {
        builder = builder.config("redlock.reclaim-after-ms", &reclaim.after_ms.to_string());
    }
    if let Some(bin) = &cfg.server_bin {
        builder = builder.server(bin.clone());
    }
    if !cfg.module_mutants.is_empty() {
        builder = builder.env(
            crate::mutants::MODULE_MUTANTS_ENV,
            &cfg.module_mutants.join(","),
        );
    }
    builder = match persistence {
        Persistence::None => builder.config("appendonly", "no"),
        Persistence::AofEverysec => builder
            .config("appendonly", "yes")
            .config("appendfsync", "everysec"),
        Persistence::AofAlways => builder
            .config("appendonly", "yes")
            .config("appendfsync", "always"),
    };
    let cluster_members = if cfg.fault == FaultType::ClusterShards {
        CLUSTER_MEMBERS
    } else {
        0
    };
    let group = cfg.fault.is_sentinel().then(|| start_group(cfg, &builder));
    let nodes = if group.is_some() {
        Vec::new()
    } else {
        start_nodes(NODES - cluster_members, &builder)
    };
    let clusters = start_clusters(cluster_members, &builder)?;
    let mut replicas = Vec::new();
    let mut links = Vec::new();
    if cfg.fault.with_replicas() {
        links = nodes
            .iter()
            .map(|n| FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], n.port()))))
            .collect();
        let starts: Vec<_> = links
            .iter()
            .map(|link| {
                let mut b = builder.clone();
                for (name, value) in replica_configs(link) {
                    b = b.config(name, &value);
                }
                std::thread::spawn(move || b.start())
            })
            .collect();
        for (i, start) in starts.into_iter().enumerate() {
            let replica = start.join().map_err(|_| "replica start")?;
            prepare_replica(cfg, &replica, i)?;
            replicas.push(replica);
        }
    }
    if cfg.no_aof_propagation {
        for n in &nodes {
            let mut con = direct(n).ok_or("node connection")?;
            crate::mutants::disable_aof_propagation(&mut con)?;
        }
    }
    if cfg.fault.on_valkey() {
        for n in &nodes {
            raise_master_max_ttl(cfg, n)?;
        }
    }
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|n| FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], n.port()))))
        .collect();
    let keys: Vec<String> = (0..cfg.keys).map(|i| format!("k{i}")).collect();
    let control =
        Arc::new(Recorder::create(&parts.join("controller.jsonl")).map_err(|e| e.to_string())?);
    control.record(Kind::RunStart {
        run: cfg.name.clone(),
        fault: cfg.fault.name().to_string(),
        persistence: persistence.name().to_string(),
        seed: cfg.seed,
        ttl_ms: cfg.ttl_ms,
        nodes: if group.is_some() { 1 } else { NODES },
        keys: keys.clone(),
        guarantees: Guarantees {
            durable_counters: persistence == Persistence::AofAlways,
        },
    });
    let res_rec =
        Arc::new(Recorder::create(&parts.join("resource.jsonl")).map_err(|e| e.to_string())?);
    let (resource, resource_node) = match cfg.resource {
        ResourceKind::InProcess => (
            Some(
                ResourceServer::start(cfg.checking, Some(Arc::clone(&res_rec)))
                    .map_err(|e| e.to_string())?,
            ),
            None,
        ),
        ResourceKind::Redis => (None, Some(start_resource_node(cfg)?)),
    };

    let start = mono_ns();
    let deadline = start + cfg.duration.as_nanos() as u64;
    let mut children: Vec<Child> = Vec::new();
    let per = cfg.tasks.div_ceil(cfg.workers.max(1));
    let mut left = cfg.tasks;
    for w in 0..cfg.workers {
        let tasks = per.min(left);
        left -= tasks;
        if tasks == 0 {
            break;
        }
        let mut client = cfg.client.clone();
        if cfg.mixed_floor && w % 2 == 1 {
            client.clock_floor = false;
        }
        let spec = WorkerSpec {
            index: w,
            tasks,
            nodes: proxies.iter().map(FaultProxy::url).collect(),
            clusters: clusters.iter().map(Cluster::seed_urls).collect(),
            resource: resource.as_ref().map(ResourceServer::addr),
            resource_url: resource_node.as_ref().map(Node::url),
            fenced_reads: cfg.checking == Checking::ReadsAndWrites,
            keys: keys.clone(),
            ttl_ms: cfg.ttl_ms,
            // Sentinel runs: every hold extends, so that extensions, too,
            // meet failovers.
            extend_percent: if cfg.fault.is_sentinel() { 100 } else { 10 },
            // Failovers and restarts only void a lock that is held across
            // them; in a Sentinel run, across a whole failover (2–3 s).
            hold_ms: if cfg.fault.is_sentinel() {
                Some((cfg.ttl_ms / 2, cfg.ttl_ms * 3 / 4))
            } else {
                cfg.fault
                    .long_holds()
                    .then_some((cfg.ttl_ms / 8, cfg.ttl_ms / 2))
            },
            seed: cfg.seed.wrapping_mul(31).wrapping_add(w as u64),
            deadline_ns: deadline,
            out: parts.join(format!("worker{w}.jsonl")),
            client,
            late_copies: (cfg.fault == FaultType::LateAcquireCopy).then_some(LateCopyPlan {
                extend_ms: cfg.ttl_ms * 4,
                hold_ms: cfg.ttl_ms * 2,
                percent: 25,
            }),
            pauses: cfg.fault.pause_point().map(|point| PausePlan {
                point,
                ms: (cfg.ttl_ms + 100, cfg.ttl_ms * 3),
                gap_ms: 900,
                max: u64::from(cfg.fault_budget).div_ceil(cfg.workers as u64),
            }),
            fault_id_base: 1_000_000 * (w as u64 + 1),
            key_phase_ms: cfg.reclaim.map(|r| r.phase_ms),
            sentinel: group
                .as_ref()
                .map(|g| (g.name().to_string(), g.sentinel_urls())),
            election: cfg.fault == FaultType::Election,
            leader_file: (cfg.fault == FaultType::Election).then(|| parts.join("leader")),
        };
        let json = serde_json::to_string(&spec).map_err(|e| e.to_string())?;
        let child = Command::new(&cfg.worker_exe)
            .arg("worker")
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", cfg.worker_exe.display()))?;
        children.push(child);
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();

    let mut deployment = Deployment {
        nodes,
        clusters,
        fault_error: None,
        replicas,
        links,
        proxies,
        keys,
        resource_node,
        group,
        leader_file: (cfg.fault == FaultType::Election).then(|| parts.join("leader")),
    };
    // Let the workers connect before the first fault.
    std::thread::sleep(Duration::from_millis(300));
    inject(cfg, &mut deployment, &control, &pids, deadline);

    // Wait for the workers; kill them 20 s after the deadline at the latest.
    let mut errors = Vec::new();
    for mut child in children {
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if mono_ns() > deadline + 20_000_000_000 => {
                    // SAFETY: SIGCONT then SIGKILL to our own child's pid.
                    unsafe {
                        libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break None,
            }
        };
        if status.is_none_or(|s| !s.success()) {
            let mut msg = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut msg);
            }
            errors.push(format!("worker {}: {status:?} {}", child.id(), msg.trim()));
        }
    }
    drop(resource);
    res_rec.flush().map_err(|e| e.to_string())?;
    control.flush().map_err(|e| e.to_string())?;
    let reclaimed = deployment.nodes.iter().filter_map(reclaimed_on).sum();
    if let Some(e) = deployment.fault_error.take() {
        errors.push(e);
    }
    drop(deployment);
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    let events = history::load(&parts).map_err(|e| e.to_string())?;
    let merged = cfg.out.join(format!("{}.jsonl", cfg.name));
    history::save(&merged, &events).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&parts);
    Ok(RunResult {
        report: checker::check(&events),
        history: merged,
        reclaimed,
    })
}

/// Starts `n` cluster members of [`CLUSTER_SHARDS`] shards with one
/// replica each, with the nodes' options of `builder`. Like the single
/// nodes, they start with no restart guard (they have granted nothing);
/// once formed, every node gets the guard back at its default, which is
/// also the window a promoted replica opens.
fn start_clusters(n: usize, builder: &NodeBuilder) -> Result<Vec<Cluster>, String> {
    let starts: Vec<_> = (0..n)
        .map(|_| {
            let b = Cluster::builder()
                .shards(CLUSTER_SHARDS)
                .replicas(1)
                .node(builder.clone());
            std::thread::spawn(move || b.start())
        })
        .collect();
    let mut clusters = Vec::with_capacity(n);
    for start in starts {
        let cluster = start
            .join()
            .map_err(|p| format!("cluster start: {}", panic_text(&*p)))?;
        for shard in 0..CLUSTER_SHARDS {
            for node in cluster.shard_nodes(shard) {
                let mut con = direct(node).ok_or("cluster node connection")?;
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("redlock.restart-grace-ms")
                    .arg(-1)
                    .query::<()>(&mut con)
                    .map_err(|e| format!("cluster node restart guard: {e}"))?;
            }
        }
        clusters.push(cluster);
    }
    Ok(clusters)
}

/// The message of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// One fault on cluster member `m` (see [`FaultType::ClusterShards`]):
/// `turn` 0 moves the slot of a lock name, 1 fails a shard over by hand,
/// 2 kills a shard's master. Records its start; the caller records its
/// end. Not a timing fault: no overlap of holders is excused.
fn cluster_fault(
    c: &mut Deployment,
    m: usize,
    turn: u32,
    id: u64,
    rec: &Recorder,
    rng: &mut ChaCha8Rng,
) {
    let pause = |rng: &mut ChaCha8Rng| Duration::from_millis(rng.gen_range(10..=150));
    let record = |kind: &str, target: String, detail: String| {
        rec.record(Kind::FaultStart {
            id,
            kind: kind.to_string(),
            target,
            detail,
            timing: false,
        });
    };
    match turn {
        0 => {
            let cluster = &c.clusters[m];
            let key = &c.keys[rng.gen_range(0..c.keys.len())];
            let slot = cluster.slot_of(key.as_bytes());
            let from = cluster.shard_of_slot(slot);
            let to = (from + rng.gen_range(1..CLUSTER_SHARDS)) % CLUSTER_SHARDS;
            record(
                "cluster_reshard",
                format!("c{m}"),
                format!("slot {slot} (name {key}) from shard {from} to shard {to}, step by step"),
            );
            let migration = cluster.begin_migration(slot, to);
            std::thread::sleep(pause(rng));
            while cluster.migrate_keys(&migration, 10) > 0 {}
            std::thread::sleep(pause(rng));
            cluster.finish_migration(&migration);
        }
        1 => {
            let shard = rng.gen_range(0..CLUSTER_SHARDS);
            record(
                "cluster_failover",
                format!("c{m}s{shard}"),
                "CLUSTER FAILOVER on the shard's replica".into(),
            );
            c.clusters[m].failover(shard);
        }
        _ => {
            let shard = rng.gen_range(0..CLUSTER_SHARDS);
            record(
                "cluster_kill_master",
                format!("c{m}s{shard}"),
                "master killed; a replica takes over; the old master restarts empty (restart guard on) as its replica".into(),
            );
            let cluster = &mut c.clusters[m];
            let killed = cluster.kill_master(shard);
            cluster
                .node_mut(shard, killed)
                .restart_with(&[("redlock.restart-grace-ms", "-1")]);
            cluster.wait_stable();
        }
    }
}

/// `redlock_reclaimed` of `INFO redlock` on `node`.
fn reclaimed_on(node: &Node) -> Option<u64> {
    let mut con = direct(node)?;
    let info: String = redis::cmd("INFO").arg("redlock").query(&mut con).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("redlock_reclaimed:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The lagging-replica setup of [`FaultType::PromoteLaggingReplica`] and
/// [`FaultType::PromotedRestart`]: holds member `i`'s replication link back
/// (and cuts the members `cut` off) from a moment the lock is free on the
/// master, then waits until the master holds a new grant (or, after a
/// while, whatever it holds). Leaves everything cut: the caller promotes
/// the replica and reconnects.
fn hold_back_replica_until_grant(
    c: &Deployment,
    i: usize,
    cut: &[usize],
    ttl: u64,
    rng: &mut ChaCha8Rng,
) {
    // The danger: a lock granted by a quorum that includes member i, while
    // i's replica falls behind (its link holds everything back) and is then
    // promoted. Two members are cut off meanwhile, so that such a grant
    // lands on a bare quorum. Start from a lock that is free on the master
    // and on its replica (so that the replica missed a grant, not a
    // release), then return as soon as the master holds a new grant.
    let cut_now = |on: bool| {
        let fault = if on { Fault::Blackhole } else { Fault::None };
        if !on {
            for &j in cut {
                c.proxies[j].reset_connections();
            }
            c.links[i].reset_connections();
        }
        for &j in cut {
            c.proxies[j].set(fault);
        }
        c.links[i].set(fault);
    };
    let Some(mut con) = direct(&c.nodes[i]) else {
        cut_now(true);
        return;
    };
    let any_held = |con: &mut redis::Connection| {
        c.keys
            .iter()
            .any(|key| inspect_reply_field(con, key, "held") == Some(1))
    };
    let give_up = mono_ns() + 3 * ttl * 1_000_000;
    let mut tokens = None;
    while tokens.is_none() && mono_ns() < give_up {
        if any_held(&mut con) {
            std::thread::sleep(Duration::from_micros(500));
            continue;
        }
        // The replica has everything up to the free lock.
        let _ = redis::cmd("WAIT").arg(1).arg(200).query::<i64>(&mut con);
        cut_now(true);
        if any_held(&mut con) {
            // Taken in between, possibly before the cut: again.
            cut_now(false);
            continue;
        }
        tokens = Some(
            c.keys
                .iter()
                .map(|key| inspect_reply_field(&mut con, key, "token"))
                .collect::<Vec<Option<u64>>>(),
        );
    }
    if tokens.is_none() {
        cut_now(true);
    }
    let tokens = tokens.unwrap_or_default();
    let lag_until = mono_ns() + rng.gen_range(300..=600u64) * 1_000_000;
    while mono_ns() < lag_until {
        let held = c.keys.iter().zip(&tokens).any(|(key, before)| {
            inspect_reply_field(&mut con, key, "held") == Some(1)
                && inspect_reply_field(&mut con, key, "token") > *before
        });
        if held {
            break;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// [`FaultType::PromotedRestart`]: member `i`'s replica was just promoted;
/// kill it -9 and start it again from its own AOF, as a master (`replicaof
/// no one`: what a failover that rewrote its config leaves), with its
/// skewed wall clock from the start (so that the leases it did receive
/// come back as long as they were), and the restart guard at its default.
fn restart_promoted(c: &mut Deployment, i: usize) {
    let replica = &mut c.replicas[i];
    replica.kill();
    replica.set_env(WALL_OFFSET_ENV, &replica_skew_ms(i).to_string());
    replica.restart_with(&[("replicaof", "no one"), ("redlock.restart-grace-ms", "-1")]);
}

/// [`FaultType::ClockStepRestart`]: waits (at most three leases) until one
/// key is held on every node of `targets`, and returns the counters of
/// every key on those nodes, read at that moment, as `(node, key, counter)`.
fn wait_for_held_lease(c: &Deployment, targets: &[usize], ttl: u64) -> Vec<(usize, String, u64)> {
    let mut cons: Vec<(usize, redis::Connection)> = targets
        .iter()
        .filter_map(|&j| direct(&c.nodes[j]).map(|con| (j, con)))
        .collect();
    let give_up = mono_ns() + 3 * ttl * 1_000_000;
    while mono_ns() < give_up {
        let held = c.keys.iter().any(|key| {
            cons.iter_mut()
                .all(|(_, con)| inspect_reply_field(con, key, "held") == Some(1))
        });
        if held {
            break;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let mut counters = Vec::new();
    for (j, con) in &mut cons {
        for key in &c.keys {
            if let Some(v) = inspect_reply_field(con, key, "token") {
                counters.push((*j, key.clone(), v));
            }
        }
    }
    counters
}

/// Member `i`'s master is gone: its replica (reached through the link,
/// whose held-back bytes are dropped) becomes master and the member's proxy
/// sends clients to it.
fn promote(c: &mut Deployment, i: usize) {
    c.links[i].reset_connections();
    c.links[i].set(Fault::None);
    if let Some(mut con) = direct(&c.replicas[i]) {
        let _ = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query::<()>(&mut con);
    }
    c.proxies[i].set_upstream(SocketAddr::from(([127, 0, 0, 1], c.replicas[i].port())));
    c.proxies[i].reset_connections();
}

/// After [`promote`]: the promoted replica is the member now, and the old
/// master comes back (empty) as its replica, with the member's skewed clock.
fn replace_replica(cfg: &RunConfig, c: &mut Deployment, i: usize) {
    std::mem::swap(&mut c.nodes[i], &mut c.replicas[i]);
    c.links[i].set_upstream(SocketAddr::from(([127, 0, 0, 1], c.nodes[i].port())));
    let configs = replica_configs(&c.links[i]);
    let configs: Vec<(&str, &str)> = configs.iter().map(|(n, v)| (*n, v.as_str())).collect();
    c.replicas[i].restart_with(&configs);
    let _ = prepare_replica(cfg, &c.replicas[i], i);
}

fn sleep_until(t: u64) {
    let now = mono_ns();
    if t > now {
        std::thread::sleep(Duration::from_nanos(t - now));
    }
}

fn pick(rng: &mut ChaCha8Rng, n: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    for i in 0..k.min(n) {
        let j = rng.gen_range(i..n);
        all.swap(i, j);
    }
    all.truncate(k.min(n));
    all
}

/// Minority mostly, a majority now and then.
fn how_many(rng: &mut ChaCha8Rng, count: u32) -> usize {
    if count % 4 == 3 {
        3
    } else {
        rng.gen_range(1..=2)
    }
}

/// Injects `cfg.fault` until shortly before `deadline`, at most
/// `cfg.fault_budget` times. Every fault is over when this returns.
fn inject(cfg: &RunConfig, c: &mut Deployment, rec: &Recorder, pids: &[u32], deadline: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xfa17);
    let ttl = cfg.ttl_ms;
    // Leave time at the end for every fault to be over and the workload to settle.
    let end = deadline.saturating_sub(1_500_000_000);
    let mut id = 0u64;
    let mut count = 0u32;
    // Each node's wall-clock step so far ([`FaultType::ClockStepRestart`]):
    // a stepped clock stays stepped, and the next step adds to it.
    let mut wall_offsets = [0i64; NODES];
    let ms = |a: u64, b: u64, rng: &mut ChaCha8Rng| Duration::from_millis(rng.gen_range(a..=b));
    let start = |rec: &Recorder, id: u64, kind: &str, target: String, detail: String, timing| {
        rec.record(Kind::FaultStart {
            id,
            kind: kind.to_string(),
            target,
            detail,
            timing,
        });
    };
    let names = |v: &[usize], p: &str| {
        v.iter()
            .map(|i| format!("{p}{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    if matches!(cfg.fault, FaultType::None | FaultType::LateAcquireCopy)
        || (cfg.fault.pause_point().is_some() && cfg.fault != FaultType::ResourceKill)
    {
        sleep_until(deadline);
        return;
    }
    while mono_ns() < end && count < cfg.fault_budget {
        let gap = match cfg.fault {
            // Nodes come back in their guard window: leave it time to end.
            FaultType::KillNone | FaultType::KillEverysec | FaultType::KillAlways => {
                ms(cfg.max_ttl_ms / 2, cfg.max_ttl_ms, &mut rng)
            }
            // Nodes in their guard window stop everything: wait it out.
            FaultType::KillAll => ms(cfg.max_ttl_ms + 300, 2 * cfg.max_ttl_ms, &mut rng),
            FaultType::PartitionRotate => ms(20, 60, &mut rng),
            // A restart breaks the workers' connections, and an operation
            // cut off by it is not recorded: leave room between restarts
            // for stalled clients to come back with their stale tokens.
            FaultType::ResourceKill => ms(1_000, 2_000, &mut rng),
            // Room for grants between failovers: without the check, a
            // promoted replica refuses them for the longest lease.
            FaultType::Sentinel => ms(1_000, 3_000, &mut rng),
            FaultType::SentinelUnchecked => {
                ms(cfg.max_ttl_ms + 500, cfg.max_ttl_ms + 3_000, &mut rng)
            }
            _ => ms(200, 900, &mut rng),
        };
        std::thread::sleep(gap);
        if mono_ns() >= end {
            break;
        }
        id += 1;
        // The election workload takes the node and process faults in turn.
        let fault = match cfg.fault {
            FaultType::Election => Election::FAULTS[count as usize % Election::FAULTS.len()],
            other => other,
        };
        match fault {
            FaultType::ResourceKill => {
                let Some(node) = c.resource_node.as_mut() else {
                    break;
                };
                node.kill();
                start(
                    rec,
                    id,
                    "resource_kill",
                    "resource".into(),
                    "kill -9 of the resource server (AOF always), restart".into(),
                    false,
                );
                std::thread::sleep(ms(50, 300, &mut rng));
                node.restart();
                rec.record(Kind::FaultStop { id });
                if let Err(e) = prepare_resource_node(cfg, node) {
                    c.fault_error = Some(e);
                    break;
                }
            }
            FaultType::KillNone
            | FaultType::KillEverysec
            | FaultType::KillAlways
            | FaultType::KillAll => {
                let k = if cfg.fault == FaultType::KillAll {
                    NODES
                } else {
                    how_many(&mut rng, count)
                };
                let targets = pick(&mut rng, NODES, k);
                for &i in &targets {
                    for key in &c.keys {
                        if let Some(v) = counter(&c.nodes[i], key) {
                            rec.record(Kind::NodeCounter {
                                node: i,
                                key: key.clone(),
                                counter: v,
                                phase: "before_kill".into(),
                            });
                        }
                    }
                    c.nodes[i].kill();
                }
                start(
                    rec,
                    id,
                    "node_kill",
                    names(&targets, "n"),
                    format!("kill -9, {}", cfg.fault.persistence().name()),
                    false,
                );
                std::thread::sleep(ms(50, 300, &mut rng));
                for &i in &targets {
                    // The restart guard at its default (-1: as long as
                    // max-ttl); durable nodes (AOF always) skip it by themselves.
                    c.nodes[i].restart_with(&[("redlock.restart-grace-ms", "-1")]);
                }
                rec.record(Kind::FaultStop { id });
                for &i in &targets {
                    for key in &c.keys {
                        // With reclamation on, a missing record is the
                        // sweep's doing (it may run the moment the node is
                        // back), not a lost counter: nothing to compare.
                        let v =
                            counter(&c.nodes[i], key).filter(|&v| v > 0 || cfg.reclaim.is_none());
                        if let Some(v) = v {
                            rec.record(Kind::NodeCounter {
                                node: i,
                                key: key.clone(),
                                counter: v,
                                phase: "after_restart".into(),
                            });
                        }
                    }
                    if cfg.no_aof_propagation {
                        if let Some(mut con) = direct(&c.nodes[i]) {
                            let _ = crate::mutants::disable_aof_propagation(&mut con);
                        }
                    }
                }
            }
            FaultType::NodePause => {
                let k = how_many(&mut rng, count);
                let targets = pick(&mut rng, NODES, k);
                let d = ms(ttl + 200, ttl * 3 + 300, &mut rng);
                for &i in &targets {
                    c.nodes[i].pause();
                }
                start(
                    rec,
                    id,
                    "node_pause",
                    names(&targets, "n"),
                    format!("SIGSTOP {} ms", d.as_millis()),
                    true,
                );
                std::thread::sleep(d);
                for &i in &targets {
                    c.nodes[i].resume();
                }
                rec.record(Kind::FaultStop { id });
            }
            FaultType::ProcessPause => {
                // An election run pauses the leader's process when it can
                // tell which it is (a paused leader must be fenced out).
                let leader = c
                    .leader_file
                    .as_ref()
                    .and_then(|f| std::fs::read_to_string(f).ok())
                    .and_then(|w| w.trim().parse::<usize>().ok())
                    .filter(|&w| w < pids.len());
                let w = leader.unwrap_or_else(|| rng.gen_range(0..pids.len().max(1)));
                let Some(&pid) = pids.get(w) else { break };
                let d = ms(ttl + 100, ttl * 3, &mut rng);
                // SAFETY: signals to our own worker child.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGSTOP);
                }
                start(
                    rec,
                    id,
                    "process_pause",
                    format!("w{w}"),
                    format!("SIGSTOP {} ms", d.as_millis()),
                    true,
                );
                std::thread::sleep(d);
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGCONT);
                }
                rec.record(Kind::FaultStop { id });
            }
            FaultType::ProxyDelay | FaultType::ProxyBlackhole | FaultType::ProxyDropReplies => {
                let k = how_many(&mut rng, count);
                let targets = pick(&mut rng, NODES, k);
                let (fault, kind, d) = match cfg.fault {
                    FaultType::ProxyDelay => {
                        let delay = ms(5, 150, &mut rng);
                        (Fault::Delay(delay), "proxy_delay", ms(300, 1000, &mut rng))
                    }
                    FaultType::ProxyBlackhole => {
                        (Fault::Blackhole, "proxy_blackhole", ms(200, 1000, &mut rng))
                    }
                    _ => (
                        Fault::DropReplies,
                        "proxy_drop_replies",
                        ms(200, 800, &mut rng),
                    ),
                };
                for &i in &targets {
                    c.proxies[i].set(fault);
                }
                let timing = !matches!(fault, Fault::DropReplies);
                start(
                    rec,
                    id,
                    kind,
                    names(&targets, "n"),
                    format!("{fault:?} for {} ms", d.as_millis()),
                    timing,
                );
                std::thread::sleep(d);
                let drop_held = rng.gen_bool(0.5);
                for &i in &targets {
                    if fault == Fault::Blackhole && drop_held {
                        c.proxies[i].reset_connections();
                    }
                    c.proxies[i].set(Fault::None);
                }
                rec.record(Kind::FaultStop { id });
            }
            FaultType::ProxyReset => {
                let k = how_many(&mut rng, count);
                let targets = pick(&mut rng, NODES, k);
                start(
                    rec,
                    id,
                    "proxy_reset",
                    names(&targets, "n"),
                    "RST".into(),
                    false,
                );
                for &i in &targets {
                    c.proxies[i].reset_connections();
                }
                rec.record(Kind::FaultStop { id });
            }
            FaultType::ClockJump if count % 3 == 1 => {
                // A replica whose wall clock is an hour off its master's
                // takes over its member (a failover with nothing lost).
                let i = rng.gen_range(0..NODES);
                start(
                    rec,
                    id,
                    "skewed_replica_promoted",
                    format!("n{i}"),
                    format!(
                        "master killed, replica (clock {:+} ms) promoted",
                        replica_skew_ms(i)
                    ),
                    // Not a timing fault: the replica times leases on its own
                    // clock from the remaining time, so no overlap is excused.
                    false,
                );
                if let Some(mut con) = direct(&c.nodes[i]) {
                    let _ = redis::cmd("WAIT").arg(1).arg(200).query::<i64>(&mut con);
                }
                c.nodes[i].kill();
                promote(c, i);
                rec.record(Kind::FaultStop { id });
                replace_replica(cfg, c, i);
            }
            FaultType::ClockJump => {
                let i = rng.gen_range(0..NODES);
                let secs: i64 = rng.gen_range(1..=120);
                let offset = if (count & 1) == 0 {
                    secs * 1000
                } else {
                    -secs * 1000
                };
                let d = ms(500, 2000, &mut rng);
                let set = |node: &Node, off: i64| {
                    direct(node).and_then(|mut con| {
                        redis::cmd("REDLOCK.TESTHOOK")
                            .arg("WALLCLOCK-OFFSET")
                            .arg(off)
                            .query::<()>(&mut con)
                            .ok()
                    })
                };
                if set(&c.nodes[i], offset).is_none() {
                    id -= 1;
                    continue;
                }
                start(
                    rec,
                    id,
                    "clock_jump",
                    format!("n{i}"),
                    format!("wall clock {offset:+} ms"),
                    true,
                );
                std::thread::sleep(d);
                let _ = set(&c.nodes[i], 0);
                rec.record(Kind::FaultStop { id });
            }
            FaultType::PromoteLaggingReplica
            | FaultType::PromoteLaggingReplicaValkey
            | FaultType::PromotedRestart => {
                let order = pick(&mut rng, NODES, 3);
                let (i, cut) = (order[0], &order[1..]);
                let restart = cfg.fault == FaultType::PromotedRestart;
                start(
                    rec,
                    id,
                    cfg.fault.name(),
                    format!("n{i}"),
                    format!(
                        "replica link held back, master killed, replica (clock {:+} ms) promoted{}; {} cut off meanwhile",
                        replica_skew_ms(i),
                        if restart {
                            ", then killed -9 and restarted from its AOF (always) inside its promotion window"
                        } else {
                            ""
                        },
                        names(cut, "n")
                    ),
                    false,
                );
                hold_back_replica_until_grant(c, i, cut, ttl, &mut rng);
                if restart {
                    // The old master is gone for good: nothing it granted
                    // reaches anyone any more.
                    c.nodes[i].kill();
                }
                promote(c, i);
                if cfg.fault.on_valkey() {
                    let _ = raise_master_max_ttl(cfg, &c.replicas[i]);
                }
                if restart {
                    restart_promoted(c, i);
                }
                for &j in cut {
                    c.proxies[j].reset_connections();
                    c.proxies[j].set(Fault::None);
                }
                rec.record(Kind::FaultStop { id });
                replace_replica(cfg, c, i);
            }
            FaultType::ClockStepRestart => {
                let targets = pick(&mut rng, NODES, NODES / 2 + 1);
                let steps: Vec<i64> = targets
                    .iter()
                    .map(|_| rng.gen_range(20_000..=60_000))
                    .collect();
                start(
                    rec,
                    id,
                    "clock_step_durable_restart",
                    names(&targets, "n"),
                    format!(
                        "kill -9 while a lease runs, AOF always; restarted with the wall clock stepped forward {} ms",
                        steps
                            .iter()
                            .map(|s| format!("{s:+}"))
                            .collect::<Vec<_>>()
                            .join("/")
                    ),
                    false,
                );
                let before = wait_for_held_lease(c, &targets, ttl);
                for (j, key, counter) in before {
                    rec.record(Kind::NodeCounter {
                        node: j,
                        key,
                        counter,
                        phase: "before_kill".into(),
                    });
                }
                for &j in &targets {
                    c.nodes[j].kill();
                }
                for (&j, &step) in targets.iter().zip(&steps) {
                    wall_offsets[j] += step;
                    c.nodes[j].set_env(WALL_OFFSET_ENV, &wall_offsets[j].to_string());
                }
                // In parallel: each restart loads an AOF and waits for PING,
                // and the leases must still be running when they are back.
                std::thread::scope(|s| {
                    for (j, node) in c.nodes.iter_mut().enumerate() {
                        if targets.contains(&j) {
                            s.spawn(move || {
                                node.restart_with(&[("redlock.restart-grace-ms", "-1")])
                            });
                        }
                    }
                });
                rec.record(Kind::FaultStop { id });
                for &j in &targets {
                    for key in &c.keys {
                        if let Some(v) = counter(&c.nodes[j], key) {
                            rec.record(Kind::NodeCounter {
                                node: j,
                                key: key.clone(),
                                counter: v,
                                phase: "after_restart".into(),
                            });
                        }
                    }
                }
            }
            FaultType::ClusterShards => {
                let m = rng.gen_range(0..c.clusters.len().max(1));
                let turn = count % 3;
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    cluster_fault(c, m, turn, id, rec, &mut rng)
                }));
                rec.record(Kind::FaultStop { id });
                if let Err(p) = outcome {
                    c.fault_error = Some(format!("cluster fault {id}: {}", panic_text(&*p)));
                    break;
                }
            }
            FaultType::Sentinel | FaultType::SentinelUnchecked => {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let faults = cfg.sentinel_faults;
                    let fault = faults[count as usize % faults.len().max(1)];
                    sentinel_fault(c, fault, id, rec, &mut rng, ttl)
                }));
                rec.record(Kind::FaultStop { id });
                if let Err(p) = outcome {
                    c.fault_error = Some(format!("sentinel fault {id}: {}", panic_text(&*p)));
                    break;
                }
            }
            FaultType::PartitionRotate => {
                let targets = pick(&mut rng, NODES, 2);
                for (i, p) in c.proxies.iter().enumerate() {
                    if targets.contains(&i) {
                        p.set(Fault::Blackhole);
                        p.reset_connections();
                    } else {
                        p.set(Fault::None);
                    }
                }
                start(
                    rec,
                    id,
                    "partition",
                    names(&targets, "n"),
                    "2 nodes cut off".into(),
                    false,
                );
                std::thread::sleep(ms(30, 120, &mut rng));
                rec.record(Kind::FaultStop { id });
            }
            FaultType::None
            | FaultType::LateAcquireCopy
            | FaultType::ClientPauseSend
            | FaultType::ClientPauseUse
            | FaultType::ClientPauseWrite
            | FaultType::Election => {}
        }
        count += 1;
    }
    for p in &c.proxies {
        p.set(Fault::None);
    }
    sleep_until(deadline);
}

/// Starts the Sentinel group of a Sentinel run: the nodes' options of
/// `builder`, R = 2 (or 0 without the check), the guard on at the replicas
/// (the nodes start with it off: they have granted nothing yet).
fn start_group(cfg: &RunConfig, builder: &NodeBuilder) -> SentinelGroup {
    let r = if cfg.fault == FaultType::Sentinel {
        "2"
    } else {
        "0"
    };
    let group = SentinelGroup::builder()
        .node(builder.clone().config("redlock.sync-replicas", r))
        .start();
    for i in 0..group.nodes().len() {
        guard_on_if_replica(&group, i);
    }
    group
}

/// Turns the promotion guard on at node `i` when it is a replica (on a
/// master it would reopen the window of its own start).
fn guard_on_if_replica(group: &SentinelGroup, i: usize) {
    if group.role(i).as_deref() == Some("slave") {
        let _: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("redlock.restart-grace-ms")
            .arg(-1)
            .query(&mut group.connection(i));
    }
}

/// Records the new master's view of every key right after a failover.
fn record_after_failover(group: &SentinelGroup, master: usize, keys: &[String], rec: &Recorder) {
    let Ok(mut con) = redis::Client::open(group.node(master).url())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
    else {
        return;
    };
    for key in keys {
        let held = inspect_reply_field(&mut con, key, "held");
        let token = inspect_reply_field(&mut con, key, "token");
        // -1 (not held) does not read as a u64.
        let pttl = inspect_reply_field(&mut con, key, "pttl").filter(|&p| p <= 86_400_000);
        rec.record(Kind::LockAfterFailover {
            key: key.clone(),
            held: held == Some(1),
            token: token.unwrap_or(0),
            pttl_ms: pttl,
        });
    }
}

/// The faults of a Sentinel run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentinelFault {
    /// kill -9 of the master; a supervisor restarts it as a replica of the
    /// new master.
    KillMaster,
    /// kill -9 of the master once it took a lock write both its replicas
    /// lack (they are SIGSTOPped, a ballast fills the sockets).
    KillLagging,
    /// SIGSTOP of the master past `down-after`; resumed, pointed at the new
    /// master.
    StopMaster,
    /// `SENTINEL FAILOVER`.
    Failover,
    /// A replica killed and restarted empty.
    EmptyReplica,
}

impl SentinelFault {
    /// Every fault.
    pub const ALL: [SentinelFault; 5] = [
        SentinelFault::KillMaster,
        SentinelFault::KillLagging,
        SentinelFault::StopMaster,
        SentinelFault::Failover,
        SentinelFault::EmptyReplica,
    ];
    /// The faults after which the old master is gone or a replica.
    pub const CRASHES: [SentinelFault; 3] = [
        SentinelFault::KillMaster,
        SentinelFault::KillLagging,
        SentinelFault::EmptyReplica,
    ];
    /// The failovers that leave the old master running.
    pub const LIVE_OLD_MASTER: [SentinelFault; 2] =
        [SentinelFault::Failover, SentinelFault::StopMaster];
}

/// Bytes written past a frozen replica's socket buffers (loopback buffers
/// hold a few MB each way).
const BALLAST_BYTES: usize = 48 << 20;

/// Waits (at most `max_ms`) until node `i` takes a lock write on one of
/// `keys`: a new token, or a lease lengthened by an extension.
fn wait_for_lock_write(g: &SentinelGroup, i: usize, keys: &[String], max_ms: u64) {
    let Ok(mut con) = redis::Client::open(g.node(i).url())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
    else {
        return;
    };
    let read = |con: &mut redis::Connection| -> Vec<(u64, u64)> {
        keys.iter()
            .map(|k| {
                (
                    inspect_reply_field(con, k, "token").unwrap_or(0),
                    inspect_reply_field(con, k, "pttl")
                        .filter(|&p| p <= 86_400_000)
                        .unwrap_or(0),
                )
            })
            .collect()
    };
    let began = std::time::Instant::now();
    let before = read(&mut con);
    while began.elapsed() < Duration::from_millis(max_ms) {
        std::thread::sleep(Duration::from_millis(20));
        let elapsed = began.elapsed().as_millis() as u64;
        let now = read(&mut con);
        let written = before
            .iter()
            .zip(&now)
            .any(|(&(t0, p0), &(t1, p1))| t1 > t0 || p1 > p0.saturating_sub(elapsed) + 300);
        if written {
            return;
        }
    }
}

/// One fault of a Sentinel run; panics (caught by the caller) when the
/// group does not do what it must.
fn sentinel_fault(
    c: &mut Deployment,
    fault: SentinelFault,
    id: u64,
    rec: &Recorder,
    rng: &mut ChaCha8Rng,
    ttl: u64,
) {
    let Some(g) = c.group.as_mut() else {
        return;
    };
    let keys = c.keys.clone();
    let old = g.master_index();
    let replicas: Vec<usize> = (0..g.nodes().len()).filter(|&i| i != old).collect();
    let start = |kind: &str, target: String, detail: &str| {
        rec.record(Kind::FaultStart {
            id,
            kind: kind.to_string(),
            target,
            detail: detail.to_string(),
            timing: false,
        });
    };
    match fault {
        SentinelFault::KillMaster => {
            start(
                "sentinel_kill_master",
                format!("n{old}"),
                "kill -9 of the master; restarted as a replica of the new one",
            );
            g.kill(old);
            let new = g.wait_master_change(old);
            record_after_failover(g, new, &keys, rec);
            g.restart_as_replica(old);
            guard_on_if_replica(g, old);
        }
        SentinelFault::KillLagging => {
            start(
                "sentinel_kill_lagging",
                format!("n{old}"),
                "both replicas SIGSTOPped, the master killed -9 once it took a lock write they lack, then resumed",
            );
            for &r in &replicas {
                g.node(r).pause();
            }
            // A frozen replica still receives: the kernel keeps what the
            // master writes in the socket's buffers, and the replica reads it
            // when it resumes, also after the master died. A ballast larger
            // than those buffers keeps the rest of the stream in the
            // master's own output buffer, which dies with it.
            let ballast = vec![b'x'; BALLAST_BYTES];
            let _: redis::RedisResult<()> = redis::cmd("SET")
                .arg("ballast")
                .arg(ballast)
                .query(&mut g.connection(old));
            // Until the master takes a lock write its replicas lack (a
            // grant, or an extension), for at most a lease.
            wait_for_lock_write(g, old, &keys, ttl);
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..=50)));
            g.kill(old);
            for &r in &replicas {
                g.node(r).resume();
            }
            let new = g.wait_master_change(old);
            record_after_failover(g, new, &keys, rec);
            g.restart_as_replica(old);
            guard_on_if_replica(g, old);
        }
        SentinelFault::StopMaster => {
            start(
                "sentinel_sigstop_master",
                format!("n{old}"),
                "SIGSTOP of the master past down-after; resumed and pointed at the new master",
            );
            g.node(old).pause();
            let new = g.wait_master_change(old);
            record_after_failover(g, new, &keys, rec);
            g.node(old).resume();
            let port = g.node(new).port();
            let _: redis::RedisResult<()> = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(port)
                .query(&mut g.connection(old));
            guard_on_if_replica(g, old);
        }
        SentinelFault::Failover => {
            start("sentinel_failover", format!("n{old}"), "SENTINEL FAILOVER");
            let new = g.failover();
            record_after_failover(g, new, &keys, rec);
            guard_on_if_replica(g, old);
        }
        SentinelFault::EmptyReplica => {
            let r = replicas[rng.gen_range(0..replicas.len())];
            start(
                "sentinel_replica_empty",
                format!("n{r}"),
                "a replica killed and restarted with an empty folder",
            );
            g.restart_empty_as_replica(r);
            guard_on_if_replica(g, r);
        }
    }
    g.settle();
}

/// Where a run's history goes.
pub fn history_path(out: &Path, name: &str) -> PathBuf {
    out.join(format!("{name}.jsonl"))
}
