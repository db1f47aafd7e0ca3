//! A Redis node running the module, as the host code runs it: every
//! decision is the module's own pure code (`src/core`: the lock state
//! machine, the waiter queue and its hand-off, the restart and promotion
//! guard, the persisted form and how a load times a lease, what a load learns
//! of the node record, reclamation and its floor); what is simulated here is
//! what Redis and the disk do around them (command dispatch, the blocked
//! clients of `REDLOCK.WAIT`, the AOF and its fsync, RDB files, the
//! replication stream and full syncs, role changes).

use std::collections::VecDeque;

use redlock_module_rules::core::guard_rule::{
    max_ttl_to_cover, recorded_at_load, untaught_at_load, untaught_to_configure, Guard, Settings,
};
use redlock_module_rules::core::lease_ack_rule::{waited_for, Kept, LeaseAck};
use redlock_module_rules::core::lease_time::BootStamp;
use redlock_module_rules::core::lock::{
    token_within_reach, Acquired, LockState, MonoMillis, OwnerHash, ReclaimRule,
};
use redlock_module_rules::core::mutant::Mutant;
use redlock_module_rules::core::node_record::{
    self, announce_to_new_replica, aux_save2_writes, missing_record, Load, LoadKind,
};
use redlock_module_rules::core::persisted::{
    persist_at, restamp_needed, restore, NodeRecord, Persisted, Source,
};
use redlock_module_rules::core::queue::{self, Place, Queue, Ready};
use redlock_module_rules::core::run_state::RunState;
use redlock_module_rules::core::sync_rule::{taught_at_promotion, Promotion};
use redlock_module_rules::core::teacher::Taught;
use std::collections::BTreeSet;

use crate::rng::{between, chance, skewed};
use crate::scenario::{FaultKind, Persistence, Scenario};
use crate::time::{Clock, Time, MS, SEC};
use crate::world::{Cmd, Effect, Ev, Owner, Reply, Req, World};

/// Where the module's monotonic clock starts in a new process
/// (`host/clock.rs::MONO_BASE`).
pub const MONO_BASE: MonoMillis = 1 << 40;

/// The owner hash the module would keep for an owner id.
pub fn owner_hash(owner: Owner) -> OwnerHash {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&owner.to_le_bytes());
    h[8] = 0x5a;
    h
}

/// The `ip:port` a master sees node `id` at as its replica (`INFO
/// replication`): one address per node, with a listening port, as the
/// lease-ack rule needs to tell replicas apart
/// (`core/lease_ack_rule.rs::ambiguous_identity`).
pub fn replica_address(id: u16) -> String {
    format!("10.0.0.{}:{}", id / 250 + 1, 7000 + u32::from(id))
}

/// What a snapshot (RDB file, AOF preamble, full sync) holds.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The node record, when the writer wrote it (`aux_save` / `aux_save2`).
    pub record: Option<NodeRecord>,
    /// The lock records.
    pub keys: Vec<(u8, Persisted)>,
}

/// One AOF entry.
#[derive(Clone, Debug)]
pub enum Entry {
    /// The RDB preamble of a rewritten AOF.
    Preamble(Snapshot),
    /// A `REDLOCK.APPLY`.
    Effect(Effect),
}

/// What survives a crash.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    /// The AOF.
    pub aof: Vec<Entry>,
    /// Entries fsynced (a crash keeps these).
    pub synced: usize,
    /// The last RDB snapshot.
    pub rdb: Option<Snapshot>,
    /// `redlock-longest-lease-ms`.
    pub longest_file: u64,
    /// `redlock-lease-learned-PORT`: which master taught the node its
    /// longest lease (`core/teacher.rs`), written at each change before
    /// the node goes on (so the disk is the state).
    pub taught: Taught,
    /// `redlock-untaught-window`: the window open is an untaught promotion's.
    pub untaught_file: bool,
    /// `redlock-lease-acked-PORT`: the longest lease the master's replicas
    /// acknowledged knowing, and whether its life is held.
    pub lease_acked: Option<Kept>,
    /// `redlock-run-state-APPENDFILENAME` (in the AOF directory).
    pub run_state: Option<RunState>,
    /// `redlock-reclaimed-counter`.
    pub reclaimed_file: u64,
}

/// A blocked `REDLOCK.WAIT`.
#[derive(Clone, Debug)]
pub struct Blocked {
    /// Its id (for its timeout).
    pub id: u64,
    /// The request, to answer it.
    pub req: Req,
    /// Its place and owner in the queue.
    pub queued: Option<(Place, OwnerHash)>,
}

/// One key's waiters on one node (`host/wait.rs`'s entry).
#[derive(Clone, Debug, Default)]
pub struct KeyWaiters {
    /// The queue and the reservation (`core/queue.rs`).
    pub queue: Queue,
    /// The blocked clients, in the order they blocked.
    pub blocked: Vec<Blocked>,
    /// The key's timer: its tag and the monotonic moment it fires at.
    pub timer: Option<(u64, MonoMillis)>,
}

/// A node.
pub struct Node {
    /// Its index.
    pub id: u16,
    /// The member it belongs to.
    pub member: u8,
    /// The process runs.
    pub up: bool,
    /// The process's number (a restart makes a new one; old timers die).
    pub boot: u32,
    /// It is a replica (else a master).
    pub replica: bool,
    /// Stopped until then (SIGSTOP).
    pub paused_until: Option<Time>,
    /// What arrived while stopped.
    pub held: VecDeque<Ev>,
    /// Its clock.
    pub clock: Clock,
    boot_local: u64,
    /// The machine's boot (its boot id); a reboot makes a new one.
    pub machine_boot: u32,
    /// The local clock when the machine booted (its `CLOCK_MONOTONIC` is 0).
    machine_local: u64,
    /// Keys a load from disk timed by a rule a later load would apply
    /// again: written again with this boot's stamp once the load ends.
    restamp: Vec<u8>,
    /// `redlock.max-ttl-ms`.
    pub max_ttl: u64,
    /// `redlock.promoted-acked-ms` (`None`: -1): what the configuration
    /// file keeps of a life begun by promotion (`LeaseAck::configured_hold`);
    /// like `max_ttl`, it survives a lost disk.
    pub promoted_acked: Option<u64>,
    /// `redlock.promoted-untaught`: the configuration file's copy of the
    /// untaught-window marker (`host/config_file.rs::keep_untaught`); like
    /// `max_ttl`, it survives a lost disk.
    pub untaught_configured: bool,
    /// `redlock.longest-lease-ms`: the configuration file's copy of the
    /// longest lease, written with every raise the module writes
    /// (`host/config_file.rs`); like `max_ttl`, it survives a lost disk. The
    /// simulated nodes never lower `max-ttl-ms`, so it never says more than
    /// `max_ttl` here; a load reads it as the module does
    /// (`guard_rule::recorded_at_load`).
    pub longest_configured: u64,
    /// Its persistence.
    pub persistence: Persistence,
    /// The lock records, by key.
    pub keys: Vec<Option<LockState>>,
    /// The waiters, by key.
    pub waits: Vec<KeyWaiters>,
    next_place: u64,
    /// The restart and promotion guard (`core/guard_rule.rs`).
    pub guard: Guard,
    /// The load in progress (`core/node_record.rs`).
    pub load: Load,
    /// The highest reclaimed counter.
    pub reclaimed: u64,
    /// Its disk.
    pub disk: Disk,
    /// Master: its stream's identity (a restart or a promotion makes a new
    /// one) and the stream itself.
    pub repl_id: u64,
    /// Master: every effect sent, by offset.
    pub backlog: Vec<Effect>,
    /// Replica: the link to its master now.
    pub link: u64,
    /// Replica: the link is broken.
    pub link_down: bool,
    /// Replica: the stream it follows and the next offset it expects.
    pub following: Option<(u64, u64)>,
    /// Replica: when the last effect on its link lands (in order).
    pub link_last: Time,
    /// Switchover: writes wait until the replica caught up.
    pub failing_over: bool,
    /// Master: its replication stream is held back until then (a lagging
    /// link), and lost with the master if it dies first.
    pub repl_hold_until: Time,
    /// Master: the longest lease its replicas acknowledged knowing
    /// (`core/lease_ack_rule.rs`).
    pub lease_ack: LeaseAck,
    /// Master: the replicas of its life (`host/sync.rs`'s replica set,
    /// kept across restarts, forgotten when it becomes a replica).
    pub life_replicas: BTreeSet<String>,
    /// Replica: the stream and the next offset it acknowledged (applied),
    /// `None` until its full sync is applied.
    pub acked: Option<(u64, u64)>,
    /// Replica: the master it is pointed at (`replicaof`, kept across a
    /// restart), set when it connects.
    pub master_node: Option<u16>,
    /// Replica: the end of the hold (guard window) its master announced,
    /// on this node's clock (`host/sync.rs`'s `HOLD_UNTIL` while
    /// `CURRENT`); `None` since it started, was pointed at another master
    /// or began a full sync, until the master's announcement.
    pub sync_hold_until: Option<MonoMillis>,
}

impl Node {
    /// Node `id` of `member`.
    pub fn new(id: u16, member: u8, replica: bool, rate_ppm: i64, sc: &Scenario) -> Node {
        Node {
            id,
            member,
            up: false,
            boot: 0,
            replica,
            paused_until: None,
            held: VecDeque::new(),
            clock: Clock::new(rate_ppm, 0),
            boot_local: 0,
            machine_boot: 0,
            machine_local: 0,
            restamp: Vec::new(),
            max_ttl: if replica {
                sc.replica_max_ttl_ms
            } else {
                sc.max_ttl_ms
            },
            promoted_acked: None,
            untaught_configured: false,
            longest_configured: 0,
            persistence: sc.persistence[id as usize],
            keys: vec![None; sc.keys],
            waits: vec![KeyWaiters::default(); sc.keys],
            next_place: 1,
            guard: Guard::new(),
            load: Load::default(),
            reclaimed: 0,
            disk: Disk::default(),
            repl_id: 0,
            backlog: Vec::new(),
            link: 0,
            link_down: false,
            following: None,
            link_last: 0,
            failing_over: false,
            repl_hold_until: 0,
            lease_ack: LeaseAck::new(),
            life_replicas: BTreeSet::new(),
            acked: None,
            master_node: None,
            sync_hold_until: None,
        }
    }

    /// The module's monotonic clock (ms) at true time `t`.
    pub fn mono(&self, t: Time) -> MonoMillis {
        MONO_BASE + (self.clock.local_us(t).saturating_sub(self.boot_local)) / 1_000
    }

    /// The machine's boot clock at true time `t` (`CLOCK_MONOTONIC` with its
    /// boot id: it runs on across process restarts, from 0 after a reboot).
    pub fn boot_stamp(&self, t: Time) -> Option<BootStamp> {
        let mut id = [0u8; 16];
        id[..2].copy_from_slice(&self.id.to_le_bytes());
        id[2..6].copy_from_slice(&self.machine_boot.to_le_bytes());
        Some(BootStamp {
            id,
            ms: self.clock.local_us(t).saturating_sub(self.machine_local) / 1_000,
        })
    }

    /// The true time at which the monotonic clock reads `m`.
    pub fn true_at(&self, m: MonoMillis) -> Time {
        self.clock
            .true_at(self.boot_local + (m.saturating_sub(MONO_BASE)) * 1_000)
    }

    /// Whether the node is durable (`appendonly yes`, `appendfsync always`).
    pub fn durable(&self) -> bool {
        self.persistence == Persistence::AofAlways
    }

    fn aof_on(&self) -> bool {
        matches!(
            self.persistence,
            Persistence::AofAlways | Persistence::AofEverysec
        )
    }

    /// The longest lease the node knows of.
    pub fn longest_known_ms(&self) -> u64 {
        self.guard.recorded_longest().max(self.max_ttl)
    }

    /// Whether the key is held at true time `t`, and by whom.
    pub fn holder(&self, key: usize, t: Time) -> Option<OwnerHash> {
        let now = self.mono(t);
        self.keys[key].as_ref().and_then(|s| s.holder(now).copied())
    }

    /// Whether the guard refuses ACQUIREs at true time `t`.
    pub fn in_window(&self, settings: Settings, t: Time) -> bool {
        self.guard.state(settings, self.mono(t)).is_some()
    }
}

impl World {
    /// The guard's settings of node `n`.
    pub fn settings(&self, n: usize) -> Settings {
        Settings {
            max_ttl_ms: self.nodes[n].max_ttl,
            restart_grace_ms: -1,
            mutants: self.setup.mutants,
        }
    }

    fn mono(&self, n: usize) -> MonoMillis {
        self.nodes[n].mono(self.now)
    }

    fn wall_ms(&self, n: usize) -> u64 {
        self.nodes[n].clock.wall_ms(self.now)
    }

    fn boot_stamp(&self, n: usize) -> Option<BootStamp> {
        self.nodes[n].boot_stamp(self.now)
    }

    fn wall_us(&self, n: usize) -> u64 {
        self.nodes[n].clock.wall_us(self.now)
    }

    /// The module loads on node `n` (a start or a restart), then the node
    /// loads its data; `empty`: on a new disk.
    pub fn node_start(&mut self, n: usize, empty: bool) {
        let now = self.now;
        let repl_id = self.id();
        let node = &mut self.nodes[n];
        node.up = true;
        node.boot += 1;
        node.paused_until = None;
        node.held.clear();
        node.boot_local = node.clock.local_us(now);
        // The machine reboots with a lost disk (a new machine) and at every
        // third restart; otherwise the process restarts on the same boot,
        // and a lease read from its files is timed on the boot clock.
        if empty || node.boot == 1 || node.boot.is_multiple_of(3) {
            node.machine_boot += 1;
            node.machine_local = node.boot_local;
        }
        node.restamp.clear();
        node.keys.iter_mut().for_each(|k| *k = None);
        node.waits
            .iter_mut()
            .for_each(|w| *w = KeyWaiters::default());
        node.guard = Guard::new();
        node.load = Load::default();
        node.reclaimed = 0;
        node.backlog.clear();
        node.repl_id = repl_id;
        node.following = None;
        node.link_down = false;
        node.failing_over = false;
        node.repl_hold_until = 0;
        node.lease_ack = LeaseAck::new();
        node.acked = None;
        node.sync_hold_until = None;
        if node.replica {
            node.life_replicas.clear();
        }
        if empty {
            node.disk = Disk::default();
        }
        // OnLoad: the guard (host/guard.rs::on_load).
        let s = self.settings(n);
        let mono = self.mono(n);
        let node = &mut self.nodes[n];
        node.guard.load_recorded(recorded_at_load(
            node.disk.longest_file,
            node.longest_configured,
            s.mutants,
        ));
        node.guard.load_untaught_window(untaught_at_load(
            node.disk.untaught_file,
            node.untaught_configured,
            s.mutants,
        ));
        // A window opened from the marker alone is copied to the
        // configuration (`host/guard.rs::on_load`; the module writes it from
        // a timer once the load is over, before it grants anything: the
        // window is open).
        if let Some(v) = untaught_to_configure(
            node.guard.untaught_window(),
            node.untaught_configured,
            s.mutants,
        ) {
            node.untaught_configured = v;
        }
        node.disk.untaught_file = node.guard.untaught_window();
        let startup = node.max_ttl;
        if node.guard.needs_record(startup) {
            node.disk.longest_file = node.disk.longest_file.max(startup);
            node.guard.raise_longest(startup, s, mono);
        }
        let durable = node.durable();
        let record =
            node.guard
                .open_after_load(s, node.disk.run_state, durable, node.replica, mono);
        node.disk.run_state = Some(record);
        // The sweep's counter file.
        node.reclaimed = node.reclaimed.max(node.disk.reclaimed_file);
        // The data.
        if node.aof_on() && !node.disk.aof.is_empty() {
            let aof = std::mem::take(&mut node.disk.aof);
            self.load_aof(n, &aof);
            self.nodes[n].disk.aof = aof;
        } else if node.persistence == Persistence::Rdb {
            if let Some(rdb) = node.disk.rdb.clone() {
                self.load_snapshot(n, &rdb, LoadKind::Rdb);
            }
        } else if !node.aof_on() {
            // Without an AOF a new run starts a new (empty) one.
            node.disk.aof.clear();
            node.disk.synced = 0;
        }
        // Leases timed by a rule a later load would apply again are written
        // again with this boot's stamp (host/restamp.rs).
        for key in std::mem::take(&mut self.nodes[n].restamp) {
            self.persist_effect(n, key as usize);
        }
        // A life as master starts from what its replicas acknowledged in
        // the run before (`host/lease_ack.rs::on_load`).
        let longest = self.nodes[n].guard.longest_lease(self.settings(n));
        let node = &mut self.nodes[n];
        // Held by the configuration file when the files are lost
        // (`LeaseAck::held_by_configuration`, seed 3,098,182).
        // A node that starts as a replica resets its file, as a demotion
        // does (`host/lease_ack.rs::on_load`).
        let kept = node.disk.lease_acked.take();
        node.lease_ack = if node.replica && !self.setup.mutants.on(Mutant::HeldLostWithDisk) {
            LeaseAck::new()
        } else {
            LeaseAck::at_load(
                kept,
                !node.life_replicas.is_empty(),
                longest,
                self.setup.mutants,
            )
            .held_by_configuration(node.promoted_acked, self.setup.mutants)
        };
        // A hold read from the data directory alone is copied to the
        // configuration (`host/lease_ack.rs::on_load`).
        if let Some(ms) = node
            .lease_ack
            .hold_to_configure(node.promoted_acked, self.setup.mutants)
        {
            node.promoted_acked = Some(ms);
        }
        node.disk.lease_acked = Some(node.lease_ack.kept());
        let boot = self.nodes[n].boot;
        if self.sc.reclaim_after_ms > 0 {
            self.after(
                100 * MS,
                Ev::Sweep {
                    node: n as u16,
                    boot,
                },
            );
        }
        match self.nodes[n].persistence {
            Persistence::AofEverysec => self.after(
                SEC,
                Ev::Persist {
                    node: n as u16,
                    boot,
                },
            ),
            Persistence::Rdb | Persistence::AofAlways => {
                let every = between(&mut self.repl_rng, 300, 1_500) * MS;
                self.after(
                    every,
                    Ev::Persist {
                        node: n as u16,
                        boot,
                    },
                )
            }
            Persistence::None => {}
        }
        if self.nodes[n].replica {
            self.after(MS, Ev::ReplConnect { to: n as u16 });
        } else {
            // Its replicas find it back (a new stream: a full sync).
            let member = self.nodes[n].member as usize;
            for x in self.members[member].nodes.clone() {
                if x as usize != n && self.nodes[x as usize].up {
                    self.after(MS, Ev::ReplConnect { to: x });
                }
            }
        }
    }

    fn load_aof(&mut self, n: usize, aof: &[Entry]) {
        self.nodes[n].load.started(LoadKind::Aof);
        for entry in aof {
            match entry {
                Entry::Preamble(snap) => self.load_records(n, snap, false),
                Entry::Effect(e) => self.apply_effect(n, *e, true),
            }
        }
        let m = self.setup.mutants;
        if let Some(r) = self.nodes[n].load.ended(m) {
            self.learn_node_record(n, r, false);
        }
    }

    fn load_snapshot(&mut self, n: usize, snap: &Snapshot, kind: LoadKind) {
        self.nodes[n].load.started(kind);
        // A full sync's record teaches; a file's does not (`core/teacher.rs`).
        let from_master = kind == LoadKind::Replication;
        self.load_records(n, snap, from_master);
        let m = self.setup.mutants;
        if let Some(r) = self.nodes[n].load.ended(m) {
            self.learn_node_record(n, r, from_master);
        }
    }

    /// The records of an RDB payload, as the type callbacks read them
    /// (`aux_load`, then `rdb_load` per record).
    fn load_records(&mut self, n: usize, snap: &Snapshot, from_master: bool) {
        let m = self.setup.mutants;
        if let Some(record) = snap.record {
            self.nodes[n].load.record_read();
            self.learn_node_record(n, record, from_master);
        }
        for &(key, p) in &snap.keys {
            if let Some(r) = self.nodes[n].load.unwritten_to_learn(m) {
                self.learn_node_record(n, r, from_master);
            }
            let (learn, p) = self.nodes[n].load.record(p, m);
            if let Some(ms) = learn {
                self.learn_lease(n, ms);
            }
            let clamp = self.nodes[n].guard.longest_lease(self.settings(n));
            let source = self.nodes[n].load.source(clamp);
            self.note_restamp(n, key, &p, source);
            let state = restore(
                &p,
                source,
                self.mono(n),
                self.wall_ms(n),
                self.boot_stamp(n),
            );
            self.nodes[n].keys[key as usize] = Some(state);
        }
    }

    /// A record read from disk whose lease must be written again with this
    /// boot's stamp once the load ends (`lease_time::restamp_needed`).
    fn note_restamp(&mut self, n: usize, key: u8, p: &Persisted, source: Source) {
        let boot = self.boot_stamp(n);
        let needed = restamp_needed(p, source, self.wall_ms(n), boot);
        let list = &mut self.nodes[n].restamp;
        if needed {
            if !list.contains(&key) {
                list.push(key);
            }
        } else if matches!(source, Source::Disk { .. }) {
            // A later record of the key in the same load states its end.
            list.retain(|&k| k != key);
        }
    }

    /// `REDLOCK.APPLY` from the AOF (`loading`) or from the master.
    fn apply_effect(&mut self, n: usize, e: Effect, loading: bool) {
        let m = self.setup.mutants;
        match e {
            Effect::State { key, p } => {
                let (learn, p) = node_record::applied(p, loading, m);
                if let Some(ms) = learn {
                    self.learn_lease(n, ms);
                }
                // The clamp after what was learned (host: `apply`).
                let clamp = self.nodes[n].guard.longest_lease(self.settings(n));
                let source = node_record::applied_source(loading, clamp);
                self.note_restamp(n, key, &p, source);
                let state = restore(
                    &p,
                    source,
                    self.mono(n),
                    self.wall_ms(n),
                    self.boot_stamp(n),
                );
                self.nodes[n].keys[key as usize] = Some(state);
                if !loading {
                    self.state_changed(n, key as usize);
                    self.persist_effect(n, key as usize);
                }
            }
            Effect::Node(record) => {
                self.learn_node_record(n, record, !loading);
                if !loading {
                    self.write_effect(n, e);
                }
            }
            Effect::Acked(ms) => {
                // From the master only (never in an AOF), never passed on.
                if let (false, Some(master)) = (loading, self.master_id(n)) {
                    self.nodes[n].disk.taught.acked_from(&master, ms);
                }
            }
            Effect::Reclaimed { key, counter } => {
                let node = &mut self.nodes[n];
                node.reclaimed = node.reclaimed.max(counter);
                node.keys[key as usize] = None;
                if !loading {
                    self.state_changed(n, key as usize);
                    self.write_effect(n, e);
                }
            }
        }
    }

    /// Node-wide values from a master (`from_master`: its stream or a full
    /// sync, which makes it the node's teacher) or a file of the node's own
    /// (`host/node.rs`).
    fn learn_node_record(&mut self, n: usize, record: NodeRecord, from_master: bool) {
        let node = &mut self.nodes[n];
        node.reclaimed = node.reclaimed.max(record.reclaimed);
        self.learn_lease(n, record.longest_lease_ms);
        let m = self.setup.mutants;
        if from_master {
            if let Some(master) = self.master_id(n) {
                self.nodes[n].disk.taught.record_from(&master);
            }
        } else {
            self.nodes[n].disk.taught.record_from_file(m);
        }
    }

    /// The address of the master node `n` is pointed at (`None`: none).
    fn master_id(&self, n: usize) -> Option<String> {
        self.nodes[n].master_node.map(|m| format!("node-{m}"))
    }

    /// A lease length received (`host/guard.rs::learn_lease`): recorded,
    /// then raised.
    fn learn_lease(&mut self, n: usize, ms: u64) {
        let s = self.settings(n);
        let mono = self.mono(n);
        let node = &mut self.nodes[n];
        // A lease teaches nothing of the master's longest lease; under the
        // `taught-by-any` mutant it counts (`host/teacher.rs::lease_applied`).
        node.disk.taught.record_from_file(s.mutants);
        if let Some(ms) = node.guard.to_learn(ms, s) {
            node.disk.longest_file = node.disk.longest_file.max(ms);
            node.guard.raise_longest(ms, s, mono);
        }
        // Its own `max-ttl-ms` covers the lease, in its configuration file
        // (`host/config_file.rs::cover_learned`): the simulated nodes all
        // have one, off the disk a disk loss erases, as behind Sentinel.
        if let Some(raised) = max_ttl_to_cover(ms, node.max_ttl, s.mutants) {
            node.max_ttl = raised;
            node.longest_configured = node.longest_configured.max(raised);
        }
    }

    /// The node's state of `key` changed here: its effect goes to the AOF
    /// and the replicas as `REDLOCK.APPLY` with the resulting state.
    fn persist_effect(&mut self, n: usize, key: usize) {
        let p = self.nodes[n].keys[key]
            .as_ref()
            .map(|s| persist_at(s, self.mono(n), self.wall_ms(n), self.boot_stamp(n)));
        if let Some(p) = p {
            self.write_effect(n, Effect::State { key: key as u8, p });
        }
    }

    /// An effect to this node's AOF and, on a master, to its replicas.
    fn write_effect(&mut self, n: usize, e: Effect) {
        if self.setup.mutants.on(Mutant::SkipReplication) {
            return;
        }
        let node = &mut self.nodes[n];
        // The acknowledged length goes to replicas only.
        if node.aof_on() && !matches!(e, Effect::Acked(_)) {
            node.disk.aof.push(Entry::Effect(e));
            if node.persistence == Persistence::AofAlways {
                node.disk.synced = node.disk.aof.len();
            }
        }
        if !node.replica {
            node.backlog.push(e);
            let offset = node.backlog.len() as u64 - 1;
            let repl_id = node.repl_id;
            let hold = node.repl_hold_until;
            let member = node.member as usize;
            for r in self.members[member].nodes.clone() {
                let r = r as usize;
                let follows = self.nodes[r].up
                    && self.nodes[r].replica
                    && !self.nodes[r].link_down
                    && self.nodes[r].following.is_some_and(|(id, _)| id == repl_id);
                if follows {
                    self.stream_to(r, offset, e, hold);
                }
            }
        }
    }

    fn stream_to(&mut self, r: usize, offset: u64, effect: Effect, hold_until: Time) {
        // The acknowledged length travels right behind the node record it
        // follows (one write to the link): no lag of its own.
        let lag = if matches!(effect, Effect::Acked(_)) {
            0
        } else {
            let (lo, hi) = self.sc.repl_lag_us;
            let mut lag = skewed(&mut self.repl_rng, lo, hi);
            if !self.healed && chance(&mut self.repl_rng, self.sc.rate(FaultKind::ReplLag)) {
                self.stats.fault(FaultKind::ReplLag);
                lag += skewed(&mut self.repl_rng, 10 * MS, 2 * SEC);
            }
            lag
        };
        let node = &mut self.nodes[r];
        let at = (self.now.max(hold_until) + lag).max(node.link_last + 1);
        node.link_last = at;
        let link = node.link;
        self.at(
            at,
            Ev::Repl {
                to: r as u16,
                link,
                offset,
                effect,
            },
        );
    }

    /// The node's snapshot now (a fork: an RDB save, an AOF rewrite, a full
    /// sync), with the node record as the server's version writes it.
    fn snapshot(&mut self, n: usize) -> Snapshot {
        let mono = self.mono(n);
        let wall = self.wall_ms(n);
        let boot = self.boot_stamp(n);
        let s = self.settings(n);
        let node = &mut self.nodes[n];
        let record = NodeRecord {
            reclaimed: node_record::missing_record(node.reclaimed, s.mutants).counter(),
            longest_lease_ms: node.guard.longest_lease(s),
        };
        let written = !self.sc.redis72 || aux_save2_writes(&record, node.max_ttl, s.mutants);
        // The sweep's counter goes to its file at every fork.
        node.disk.reclaimed_file = node.disk.reclaimed_file.max(node.reclaimed);
        Snapshot {
            record: written.then_some(record),
            keys: node
                .keys
                .iter()
                .enumerate()
                .filter_map(|(k, s)| {
                    s.as_ref()
                        .map(|s| (k as u8, persist_at(s, mono, wall, boot)))
                })
                .collect(),
        }
    }

    /// The AOF's fsync (`everysec`), or an RDB save; now and then an AOF
    /// rewrite.
    pub fn node_persist_tick(&mut self, n: usize, boot: u32) {
        if !self.nodes[n].up || self.nodes[n].boot != boot {
            return;
        }
        if self.nodes[n].paused_until.is_some() {
            self.nodes[n].held.push_back(Ev::Persist {
                node: n as u16,
                boot,
            });
            return;
        }
        match self.nodes[n].persistence {
            Persistence::AofEverysec | Persistence::AofAlways => {
                if self.nodes[n].disk.aof.len() > 48 {
                    let snap = self.snapshot(n);
                    let disk = &mut self.nodes[n].disk;
                    disk.aof = vec![Entry::Preamble(snap)];
                }
                let disk = &mut self.nodes[n].disk;
                disk.synced = disk.aof.len();
            }
            Persistence::Rdb => {
                let snap = self.snapshot(n);
                self.nodes[n].disk.rdb = Some(snap);
            }
            Persistence::None => return,
        }
        let every = if self.nodes[n].persistence == Persistence::AofEverysec {
            SEC
        } else {
            between(&mut self.repl_rng, 300, 1_500) * MS
        };
        let local = self.nodes[n].clock.local_us(self.now) + every;
        let at = self.nodes[n].clock.true_at(local);
        self.at(
            at,
            Ev::Persist {
                node: n as u16,
                boot,
            },
        );
    }

    /// A request reaches node `n`.
    pub fn node_receive(&mut self, req: Req) {
        let n = req.node as usize;
        if !self.nodes[n].up {
            if !req.copy {
                self.reply(&req, Reply::Down);
            }
            return;
        }
        if self.nodes[n].paused_until.is_some() || self.nodes[n].failing_over {
            self.nodes[n].held.push_back(Ev::AtNode(req));
            return;
        }
        if !self.stale_request_runs(&req) {
            return;
        }
        self.stats.node_commands += 1;
        if req.copy {
            self.stats.copies_landed += 1;
        }
        if let Cmd::Close { key } = req.cmd {
            self.wait_disconnect(n, key as usize, req.conn);
            return;
        }
        if let Cmd::Wait {
            key,
            timeout_ms,
            owner,
            ticket,
        } = req.cmd
        {
            self.node_wait(n, req, key as usize, timeout_ms, owner, ticket);
            return;
        }
        if self.nodes[n].replica {
            self.reply(&req, Reply::ReadOnly);
            return;
        }
        let reply = self.node_command(n, req.cmd);
        self.reply(&req, reply);
    }

    /// A lock command on a master (`host/commands.rs`).
    fn node_command(&mut self, n: usize, cmd: Cmd) -> Reply {
        let s = self.settings(n);
        let mono = self.mono(n);
        let wall_us = self.wall_us(n);
        let mutants = self.setup.mutants;
        match cmd {
            Cmd::Acquire {
                key,
                owner,
                ttl,
                floor,
            } => {
                let k = key as usize;
                if ttl == 0 || ttl > self.nodes[n].max_ttl {
                    return Reply::BadArg;
                }
                if floor > 0 && !token_within_reach(floor, wall_us) {
                    return Reply::BadArg;
                }
                let durable = self.nodes[n].durable();
                let (checked, record) = self.nodes[n].guard.check(s, mono, false, durable);
                if let Some(record) = record {
                    self.nodes[n].disk.run_state = Some(record);
                    self.nodes[n].disk.untaught_file = self.nodes[n].guard.untaught_window();
                    self.nodes[n].untaught_configured = self.nodes[n].guard.untaught_window();
                }
                if let Err(refusal) = checked {
                    self.stats.grace_refused += 1;
                    return Reply::Grace {
                        remaining_ms: refusal.remaining_ms,
                    };
                }
                self.record_lease_now(n, ttl);
                if !self.lease_ack_check(n, ttl) {
                    return Reply::NoSync;
                }
                let oh = owner_hash(owner);
                let reservation = self.reservation(n, k, &oh, mono);
                let node = &mut self.nodes[n];
                let mut state = node.keys[k]
                    .clone()
                    .unwrap_or_else(|| missing_record(node.reclaimed, mutants));
                let before = state.live_deadline(mono);
                let outcome = state.acquire_reserved_mutated(
                    mutants,
                    reservation,
                    &oh,
                    ttl,
                    floor,
                    mono,
                    wall_us,
                );
                match outcome {
                    Ok(Acquired::Busy) => Reply::Nil,
                    Ok(Acquired::Renewed { .. }) if before.is_some_and(|d| d > mono + ttl) => {
                        self.stats.renewals_shorter += 1;
                        if std::env::var("SIMDEBUG").is_ok() {
                            eprintln!(
                                "t={} renewal node {} key {} owner {:#x} deadline {:?} -> {}",
                                self.now,
                                n,
                                k,
                                owner,
                                before.map(|d| d - mono),
                                ttl
                            );
                        }
                        let token = state.counter();
                        self.store(n, k, state);
                        Reply::Int(token)
                    }
                    Ok(Acquired::Granted { token, .. }) | Ok(Acquired::Renewed { token }) => {
                        self.store(n, k, state);
                        self.stats.grants += 1;
                        Reply::Int(token)
                    }
                    Err(_) => Reply::BadArg,
                }
            }
            Cmd::Release { key, owner } => {
                let k = key as usize;
                let mut state = self.current(n, k);
                if state.release(&owner_hash(owner), mono) {
                    self.store(n, k, state);
                    Reply::Int(1)
                } else {
                    Reply::Int(0)
                }
            }
            Cmd::Extend { key, owner, ttl } => {
                let k = key as usize;
                if ttl == 0 || ttl > self.nodes[n].max_ttl {
                    return Reply::BadArg;
                }
                self.record_lease_now(n, ttl);
                if !self.lease_ack_check(n, ttl) {
                    return Reply::NoSync;
                }
                let mut state = self.current(n, k);
                if state.live_deadline(mono).is_some_and(|d| d > mono + ttl) {
                    self.stats.extends_shorter += 1;
                }
                if state.extend(&owner_hash(owner), ttl, mono) {
                    self.store(n, k, state);
                    Reply::Int(1)
                } else {
                    Reply::Int(0)
                }
            }
            Cmd::Fence { key, owner, token } => {
                let k = key as usize;
                if token > 0 && !token_within_reach(token, wall_us) {
                    return Reply::BadArg;
                }
                let mut state = self.current(n, k);
                let before = state.counter();
                match state.fence(&owner_hash(owner), Some(token), mono) {
                    Some(counter) => {
                        if counter != before {
                            self.store(n, k, state);
                        }
                        Reply::Int(counter)
                    }
                    None => Reply::Nil,
                }
            }
            Cmd::Wait { .. } | Cmd::Close { .. } => Reply::BadArg,
        }
    }

    fn current(&self, n: usize, k: usize) -> LockState {
        let node = &self.nodes[n];
        node.keys[k]
            .clone()
            .unwrap_or_else(|| missing_record(node.reclaimed, self.setup.mutants))
    }

    /// A changed lock is stored, replicated and its waiters told.
    fn store(&mut self, n: usize, k: usize, state: LockState) {
        self.nodes[n].keys[k] = Some(state);
        self.persist_effect(n, k);
        self.state_changed(n, k);
    }

    /// A lease longer than any recorded is recorded first (the file, then
    /// memory), and the node record announced before the lease itself.
    pub fn record_lease_now(&mut self, n: usize, ttl: u64) {
        if !self.nodes[n].guard.needs_record(ttl) {
            return;
        }
        let s = self.settings(n);
        let mono = self.mono(n);
        let node = &mut self.nodes[n];
        node.disk.longest_file = node.disk.longest_file.max(ttl);
        node.guard.raise_longest(ttl, s, mono);
        self.announce_node_record(n);
    }

    /// The master's check of a lease of `ttl` against what its replicas
    /// acknowledged knowing (`host/sync.rs::lease_check`): the replicas'
    /// acknowledged offsets are read as `INFO replication` shows them (an
    /// online replica's applied offset on this master's stream).
    fn lease_ack_check(&mut self, n: usize, ttl: u64) -> bool {
        let repl_id = self.nodes[n].repl_id;
        let member = self.nodes[n].member as usize;
        let acks: Vec<(String, bool, u64)> = self.members[member]
            .nodes
            .iter()
            .map(|&r| &self.nodes[r as usize])
            .filter(|r| r.up && r.replica && !r.link_down)
            .filter_map(|r| match r.acked {
                Some((id, next)) if id == repl_id => Some((replica_address(r.id), true, next)),
                _ => None,
            })
            .collect();
        let mutants = self.setup.mutants;
        // With replicas that join late ([`FaultKind::LateReplica`]), those
        // connected and still in their first sync are waited for too
        // (`host/lease_ack.rs::check`).
        let known = if self.sc.rate(FaultKind::LateReplica) > 0.0 {
            let syncing: Vec<String> = self.members[member]
                .nodes
                .iter()
                .map(|&r| &self.nodes[r as usize])
                .filter(|r| r.up && r.replica && !r.link_down && r.acked.is_none())
                .filter(|r| r.following.is_some_and(|(id, _)| id == repl_id))
                .map(|r| replica_address(r.id))
                .collect();
            waited_for(&self.nodes[n].life_replicas, &syncing, mutants)
        } else {
            self.nodes[n].life_replicas.clone()
        };
        let node = &mut self.nodes[n];
        let before = node.lease_ack.acked_ms();
        let refused = node.lease_ack.check(ttl, &known, &acks, mutants).is_err();
        if node.lease_ack.acked_ms() > before {
            node.disk.lease_acked = Some(node.lease_ack.kept());
        }
        if refused {
            self.stats.lease_ack_refused += 1;
            // Nothing announced to wait for: the master announces its
            // record (`host/node.rs::announce_soon`).
            if self.nodes[n].lease_ack.pending().is_none() {
                self.announce_node_record(n);
            }
        }
        !refused
    }

    /// `REDLOCK.APPLY … node` to the AOF and the replicas; a master waits
    /// for its replicas to acknowledge the offset past it.
    fn announce_node_record(&mut self, n: usize) {
        let s = self.settings(n);
        let node = &self.nodes[n];
        let record = NodeRecord {
            reclaimed: missing_record(node.reclaimed, s.mutants).counter(),
            longest_lease_ms: node.guard.longest_lease(s),
        };
        self.write_effect(n, Effect::Node(record));
        if !self.nodes[n].replica {
            let acked = self.nodes[n].lease_ack.acked_ms();
            self.write_effect(n, Effect::Acked(acked));
        }
        let node = &mut self.nodes[n];
        if !node.replica {
            let target = node.backlog.len() as u64;
            node.lease_ack.announced(record.longest_lease_ms, target);
        }
    }

    /// The hand-off reservation an ACQUIRE meets (`host/wait.rs::reservation`).
    fn reservation(
        &mut self,
        n: usize,
        k: usize,
        owner: &OwnerHash,
        mono: MonoMillis,
    ) -> redlock_module_rules::core::lock::Reservation {
        let entry = &mut self.nodes[n].waits[k];
        let seen = entry.queue.take(owner, mono);
        if entry.blocked.is_empty() && entry.queue.is_idle(mono) {
            entry.timer = None;
        }
        seen
    }

    /// `REDLOCK.WAIT key timeout QUEUE owner ticket` (`host/wait.rs::wait`).
    fn node_wait(
        &mut self,
        n: usize,
        req: Req,
        k: usize,
        timeout_ms: u64,
        owner: Owner,
        ticket: u64,
    ) {
        let mono = self.mono(n);
        let wall_us = self.wall_us(n);
        let deadline = self.nodes[n].keys[k]
            .as_ref()
            .and_then(|s| s.live_deadline(mono));
        let node = &mut self.nodes[n];
        let place = (queue::rank(ticket, wall_us), node.next_place);
        node.next_place += 1;
        let oh = owner_hash(owner);
        let mut signal = false;
        if deadline.is_none() {
            let entry = &node.waits[k];
            let at_once = (entry.blocked.is_empty() && entry.queue.is_idle(mono))
                || entry.queue.free_at_once(Some(&oh), mono);
            if at_once {
                self.reply(&req, Reply::Int(1));
                return;
            }
            signal = true;
        }
        let id = self.id();
        let node = &mut self.nodes[n];
        let entry = &mut node.waits[k];
        entry.blocked.push(Blocked {
            id,
            req,
            queued: Some((place, oh)),
        });
        entry.queue.join(place, oh);
        let wake_at = deadline.unwrap_or_else(|| entry.queue.reservation_end(mono).unwrap_or(mono));
        let timeout_at = node.true_at(mono + timeout_ms);
        let boot = node.boot;
        self.at(
            timeout_at,
            Ev::WaitTimeout {
                node: n as u16,
                boot,
                waiter: id,
            },
        );
        self.arm_wait_timer(n, k, wake_at);
        if signal {
            self.serve_ready(n, k);
        }
    }

    fn arm_wait_timer(&mut self, n: usize, k: usize, at: MonoMillis) {
        if matches!(self.nodes[n].waits[k].timer, Some((_, t)) if t == at) {
            return;
        }
        let tag = self.id();
        let node = &mut self.nodes[n];
        node.waits[k].timer = Some((tag, at));
        // One millisecond past the deadline: the lease is over when it fires.
        let fire = node.true_at(at + 1);
        let boot = node.boot;
        self.at(
            fire,
            Ev::WaitTimer {
                node: n as u16,
                boot,
                key: k as u8,
                tag,
            },
        );
    }

    /// The key's waiters look at the lock again, in the order they blocked
    /// (Redis serving a key signalled ready; on 7.0 the module's timer
    /// serves a missing key the same way).
    fn serve_ready(&mut self, n: usize, k: usize) {
        let mono = self.mono(n);
        let handoff = self.sc.handoff_ms;
        let deadline = self.nodes[n].keys[k]
            .as_ref()
            .and_then(|s| s.live_deadline(mono));
        let mut i = 0;
        let mut wake: Option<MonoMillis> = None;
        while i < self.nodes[n].waits[k].blocked.len() {
            let entry = &mut self.nodes[n].waits[k];
            let queued = entry.blocked[i].queued;
            match entry.queue.on_ready(queued, deadline, mono, handoff) {
                Ready::Go => {
                    let b = entry.blocked.remove(i);
                    if let Some((place, _)) = b.queued {
                        entry.queue.leave(place);
                    }
                    self.stats.wakeups += 1;
                    self.reply(&b.req, Reply::Int(1));
                }
                Ready::Stay { wake_at } => {
                    if let Some(at) = wake_at {
                        wake = Some(wake.map_or(at, |w: MonoMillis| w.min(at)));
                    }
                    i += 1;
                }
            }
        }
        if let Some(at) = wake {
            self.arm_wait_timer(n, k, at);
        }
        self.after_waiter_left(n, k);
    }

    /// After a waiter left: with the last one the timer moves to the end
    /// of a live reservation, or the entry goes.
    fn after_waiter_left(&mut self, n: usize, k: usize) {
        let mono = self.mono(n);
        let entry = &self.nodes[n].waits[k];
        if !entry.blocked.is_empty() {
            return;
        }
        match entry.queue.reservation_end(mono) {
            Some(end) => self.arm_wait_timer(n, k, end),
            None => self.nodes[n].waits[k].timer = None,
        }
    }

    /// After a command changed the lock: the key's waiters' timer moves to
    /// the new end of the lease, or, free now, they look again.
    fn state_changed(&mut self, n: usize, k: usize) {
        if self.nodes[n].waits[k].blocked.is_empty() {
            return;
        }
        let mono = self.mono(n);
        let deadline = self.nodes[n].keys[k]
            .as_ref()
            .and_then(|s| s.live_deadline(mono));
        match deadline {
            Some(d) => self.arm_wait_timer(n, k, d),
            None => {
                self.nodes[n].waits[k].timer = None;
                self.serve_ready(n, k);
            }
        }
    }

    /// A key's timer fires (lease end, reservation end).
    pub fn node_wait_timer(&mut self, n: usize, boot: u32, key: u8, tag: u64) {
        if !self.nodes[n].up || self.nodes[n].boot != boot {
            return;
        }
        if self.nodes[n].paused_until.is_some() {
            self.nodes[n].held.push_back(Ev::WaitTimer {
                node: n as u16,
                boot,
                key,
                tag,
            });
            return;
        }
        let k = key as usize;
        if !matches!(self.nodes[n].waits[k].timer, Some((t, _)) if t == tag) {
            return;
        }
        self.nodes[n].waits[k].timer = None;
        if self.nodes[n].waits[k].blocked.is_empty() {
            self.after_waiter_left(n, k);
            return;
        }
        self.serve_ready(n, k);
    }

    /// A blocked WAIT's timeout: answered 0.
    pub fn node_wait_timeout(&mut self, n: usize, boot: u32, waiter: u64) {
        if !self.nodes[n].up || self.nodes[n].boot != boot {
            return;
        }
        if self.nodes[n].paused_until.is_some() {
            self.nodes[n].held.push_back(Ev::WaitTimeout {
                node: n as u16,
                boot,
                waiter,
            });
            return;
        }
        for k in 0..self.nodes[n].waits.len() {
            let entry = &mut self.nodes[n].waits[k];
            if let Some(i) = entry.blocked.iter().position(|b| b.id == waiter) {
                let b = entry.blocked.remove(i);
                if let Some((place, _)) = b.queued {
                    entry.queue.leave(place);
                }
                self.reply(&b.req, Reply::Int(0));
                self.after_waiter_left(n, k);
                return;
            }
        }
    }

    /// A WAIT's connection closed: the waiter leaves (`free_waiter`).
    fn wait_disconnect(&mut self, n: usize, k: usize, conn: u64) {
        let entry = &mut self.nodes[n].waits[k];
        if let Some(i) = entry.blocked.iter().position(|b| b.req.conn == conn) {
            let b = entry.blocked.remove(i);
            if let Some((place, _)) = b.queued {
                entry.queue.leave(place);
            }
            self.after_waiter_left(n, k);
        }
    }

    /// Every waiter of client `c` leaves (the client died).
    pub fn drop_waiters_of(&mut self, c: u32) {
        for n in 0..self.nodes.len() {
            for k in 0..self.nodes[n].waits.len() {
                let entry = &mut self.nodes[n].waits[k];
                let before = entry.blocked.len();
                let mut left = Vec::new();
                entry.blocked.retain(|b| {
                    let keep = b.req.client != c;
                    if !keep {
                        left.extend(b.queued.map(|(p, _)| p));
                    }
                    keep
                });
                for place in left {
                    entry.queue.leave(place);
                }
                if entry.blocked.len() != before {
                    self.after_waiter_left(n, k);
                }
            }
        }
    }

    /// The reclamation sweep's tick (`host/reclaim.rs`): only a master
    /// sweeps; each record the rule lets go is deleted, the node's highest
    /// reclaimed counter raised, the delete replicated.
    pub fn node_sweep(&mut self, n: usize, boot: u32) {
        if !self.nodes[n].up || self.nodes[n].boot != boot {
            return;
        }
        let next = self.nodes[n]
            .clock
            .true_at(self.nodes[n].clock.local_us(self.now) + 100 * MS);
        self.at(
            next,
            Ev::Sweep {
                node: n as u16,
                boot,
            },
        );
        if self.nodes[n].paused_until.is_some() || self.nodes[n].replica {
            return;
        }
        let s = self.settings(n);
        let rule = ReclaimRule {
            after_ms: self.sc.reclaim_after_ms,
            longest_lease_ms: self.nodes[n].guard.longest_lease(s),
        };
        let mono = self.mono(n);
        let wall_us = self.wall_us(n);
        for k in 0..self.nodes[n].keys.len() {
            let gone = self.nodes[n].keys[k]
                .as_ref()
                .filter(|st| st.reclaimable(rule, mono, wall_us))
                .map(LockState::counter);
            if let Some(counter) = gone {
                let node = &mut self.nodes[n];
                node.keys[k] = None;
                node.reclaimed = node.reclaimed.max(counter);
                self.stats.reclaimed += 1;
                self.write_effect(
                    n,
                    Effect::Reclaimed {
                        key: k as u8,
                        counter,
                    },
                );
                self.state_changed(n, k);
            }
        }
    }

    /// Node `n` is killed: what was not fsynced is lost, its blocked
    /// clients' connections break.
    pub fn node_crash(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if !node.up {
            return;
        }
        node.up = false;
        node.paused_until = None;
        let held: Vec<Ev> = node.held.drain(..).collect();
        let synced = node.disk.synced;
        node.disk.aof.truncate(synced);
        let blocked: Vec<Req> = node
            .waits
            .iter_mut()
            .flat_map(|w| w.blocked.drain(..).map(|b| b.req))
            .collect();
        for req in blocked {
            self.reply(&req, Reply::Broken);
        }
        // Requests it had not read yet: the connections broke.
        for ev in held {
            if let Ev::AtNode(req) = ev {
                if !req.copy {
                    self.reply(&req, Reply::Broken);
                }
            }
        }
        let member = self.nodes[n].member as usize;
        if self.members[member].master == n as u16 {
            self.members[member].master_down_since = Some(self.now);
            // Its replicas' links break; what it had not sent is lost.
            for x in self.members[member].nodes.clone() {
                let x = x as usize;
                if x != n && self.nodes[x].up && self.nodes[x].replica {
                    let link = self.id();
                    self.nodes[x].link = link;
                    self.after(100 * MS, Ev::ReplConnect { to: x as u16 });
                }
            }
        }
    }

    /// A stopped node resumes: what arrived meanwhile runs, in order.
    pub fn node_resume(&mut self, n: usize) {
        if self.nodes[n].paused_until.take().is_none() {
            return;
        }
        while let Some(ev) = self.nodes[n].held.pop_front() {
            if self.nodes[n].paused_until.is_some() || self.nodes[n].failing_over {
                self.nodes[n].held.push_front(ev);
                break;
            }
            match ev {
                Ev::AtNode(req) => self.node_receive(req),
                Ev::WaitTimer {
                    node,
                    boot,
                    key,
                    tag,
                } => self.node_wait_timer(node as usize, boot, key, tag),
                Ev::WaitTimeout { node, boot, waiter } => {
                    self.node_wait_timeout(node as usize, boot, waiter)
                }
                Ev::Persist { node, boot } => self.node_persist_tick(node as usize, boot),
                Ev::Repl {
                    to,
                    link,
                    offset,
                    effect,
                } => self.replica_apply(to as usize, link, offset, effect),
                Ev::FullSync {
                    to,
                    link,
                    offset,
                    snapshot,
                } => self.replica_full_sync(to as usize, link, offset, *snapshot),
                _ => {}
            }
        }
    }

    /// A replica connects to its member's master: a partial resync when it
    /// follows the master's stream, else a full sync.
    pub fn replica_connect(&mut self, r: usize) {
        if !self.nodes[r].up || !self.nodes[r].replica {
            return;
        }
        if self.nodes[r].paused_until.is_some() {
            self.nodes[r]
                .held
                .push_back(Ev::ReplConnect { to: r as u16 });
            return;
        }
        // A replica slow to follow its new master ([`FaultKind::SwitchBack`],
        // [`FaultKind::SlowRepoint`]) connects no earlier than then.
        if self.now < self.slow_until[r] {
            self.at(self.slow_until[r], Ev::ReplConnect { to: r as u16 });
            return;
        }
        let member = self.nodes[r].member as usize;
        let m = self.members[member].master as usize;
        if m == r || !self.nodes[m].up || self.nodes[m].replica {
            self.after(200 * MS, Ev::ReplConnect { to: r as u16 });
            return;
        }
        let link = self.id();
        self.nodes[r].link = link;
        self.nodes[r].link_down = false;
        if self.nodes[r].master_node != Some(m as u16) {
            // Pointed at another master (`REPLICAOF`): not current.
            self.nodes[r].sync_hold_until = None;
        }
        self.nodes[r].master_node = Some(m as u16);
        self.nodes[r].link_last = self.now;
        let repl_id = self.nodes[m].repl_id;
        match self.nodes[r].following {
            Some((id, next)) if id == repl_id && next <= self.nodes[m].backlog.len() as u64 => {
                // Partial resync: the backlog from where it stopped.
                let tail: Vec<(u64, Effect)> = self.nodes[m].backlog[next as usize..]
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (next + i as u64, *e))
                    .collect();
                let hold = self.nodes[m].repl_hold_until;
                for (offset, e) in tail {
                    self.stream_to(r, offset, e, hold);
                }
                self.replica_online(m, r);
            }
            _ => {
                self.nodes[r].acked = None;
                let snapshot = self.snapshot(m);
                let offset = self.nodes[m].backlog.len() as u64;
                self.nodes[r].following = Some((repl_id, offset));
                let (lo, hi) = self.sc.repl_lag_us;
                let extra = std::mem::take(&mut self.sync_extra[r]);
                let delay = skewed(&mut self.repl_rng, lo, hi) + 2 * MS + extra;
                let at = self.now + delay;
                self.nodes[r].link_last = at;
                self.at(
                    at,
                    Ev::FullSync {
                        to: r as u16,
                        link,
                        offset,
                        snapshot: Box::new(snapshot),
                    },
                );
            }
        }
    }

    /// A replica came online on master `m`: the master announces its node
    /// record (`on_replica_change`).
    fn replica_online(&mut self, m: usize, r: usize) {
        if self.nodes[m].up && !self.nodes[m].replica {
            let id = replica_address(self.nodes[r].id);
            self.nodes[m].life_replicas.insert(id);
        }
        if self.nodes[m].up && !self.nodes[m].replica && announce_to_new_replica(self.setup.mutants)
        {
            self.announce_node_record(m);
        }
        // And its hold (`host/sync.rs::announce`, sent right behind the
        // sync, also with `sync-replicas` 0): modelled as arriving at once
        // (no event, no draw: kept seeds replay as before).
        if self.nodes[m].up && !self.nodes[m].replica {
            let s = self.settings(m);
            let mono_m = self.mono(m);
            let left = self.nodes[m]
                .guard
                .state(s, mono_m)
                .map_or(0, |(_, left)| left);
            let mono_r = self.mono(r);
            self.nodes[r].sync_hold_until = Some(mono_r.saturating_add(left));
        }
    }

    /// A full sync's snapshot reaches replica `r`: it replaces the data.
    pub fn replica_full_sync(&mut self, r: usize, link: u64, offset: u64, snapshot: Snapshot) {
        if !self.nodes[r].up || self.nodes[r].link != link || self.nodes[r].link_down {
            return;
        }
        if self.nodes[r].paused_until.is_some() {
            self.nodes[r].held.push_back(Ev::FullSync {
                to: r as u16,
                link,
                offset,
                snapshot: Box::new(snapshot),
            });
            return;
        }
        self.nodes[r].keys.iter_mut().for_each(|k| *k = None);
        // A full sync begins: not current until the announcement after it.
        self.nodes[r].sync_hold_until = None;
        self.load_snapshot(r, &snapshot, LoadKind::Replication);
        if let Some((id, _)) = self.nodes[r].following {
            self.nodes[r].following = Some((id, offset));
            self.nodes[r].acked = Some((id, offset));
        }
        // A replica with an AOF rewrites it from the new data.
        if self.nodes[r].aof_on() {
            let snap = self.snapshot(r);
            let disk = &mut self.nodes[r].disk;
            disk.aof = vec![Entry::Preamble(snap)];
            disk.synced = disk.aof.len();
        }
        for k in 0..self.nodes[r].keys.len() {
            self.state_changed(r, k);
        }
        let member = self.nodes[r].member as usize;
        let m = self.members[member].master as usize;
        self.late_sync_landed(r);
        self.replica_online(m, r);
    }

    /// A stream effect reaches replica `r`.
    pub fn replica_apply(&mut self, r: usize, link: u64, offset: u64, effect: Effect) {
        if !self.nodes[r].up || self.nodes[r].link != link || self.nodes[r].link_down {
            return;
        }
        if self.nodes[r].paused_until.is_some() {
            self.nodes[r].held.push_back(Ev::Repl {
                to: r as u16,
                link,
                offset,
                effect,
            });
            return;
        }
        let Some((id, next)) = self.nodes[r].following else {
            return;
        };
        if offset != next {
            return;
        }
        self.nodes[r].following = Some((id, next + 1));
        self.stats.repl_applied += 1;
        self.apply_effect(r, effect, false);
        self.nodes[r].acked = Some((id, next + 1));
    }

    /// The sentinel looks at member `m`: a master down for long enough is
    /// replaced by one of its replicas, when the seed lets it fail over.
    pub fn sentinel(&mut self, member: usize) {
        self.after(
            100 * MS,
            Ev::Sentinel {
                member: member as u8,
            },
        );
        let master = self.members[member].master as usize;
        if self.nodes[master].up {
            self.members[member].master_down_since = None;
            return;
        }
        let Some(since) = self.members[member].master_down_since else {
            self.members[member].master_down_since = Some(self.now);
            return;
        };
        let failover = self.sc.rate(FaultKind::Failover) > 0.0;
        let lagging = self.sc.rate(FaultKind::LaggingPromotion) > 0.0
            || self.sc.rate(FaultKind::RaiseFailover) > 0.0
            || self.sc.rate(FaultKind::SwitchBack) > 0.0
            || self.sc.rate(FaultKind::SlowRepoint) > 0.0
            || self.sc.rate(FaultKind::LateReplica) > 0.0
            || self.sc.rate(FaultKind::NewDiskPromoted) > 0.0
            || self.sc.rate(FaultKind::RepointNewDisk) > 0.0
            || self.sc.rate(FaultKind::SwitchBackNewDisk) > 0.0
            || self.sc.rate(FaultKind::UntaughtTeaches) > 0.0;
        let down_after = self.sc.down_after_ms * MS;
        if self.healed || (!failover && !lagging) || self.now < since + down_after {
            return;
        }
        let candidates: Vec<usize> = self.members[member]
            .nodes
            .iter()
            .map(|&x| x as usize)
            .filter(|&x| x != master && self.nodes[x].up && self.nodes[x].replica)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let pick_lagging = std::mem::take(&mut self.promote_lagging[member]);
        let offset = |w: &World, x: usize| w.nodes[x].following.map_or(0, |(_, o)| o);
        let chosen = if pick_lagging {
            *candidates
                .iter()
                .min_by_key(|&&x| (offset(self, x), x))
                .unwrap_or(&candidates[0])
        } else {
            *candidates
                .iter()
                .max_by_key(|&&x| (offset(self, x), std::cmp::Reverse(x)))
                .unwrap_or(&candidates[0])
        };
        self.promote(member, chosen, master);
    }

    /// Node `to` becomes member `member`'s master in place of `old`.
    pub fn promote(&mut self, member: usize, to: usize, old: usize) {
        let s = self.settings(to);
        let mono = self.mono(to);
        let repl_id = self.id();
        // Taught by the master it followed, and what that master's replicas
        // acknowledged knowing (`host/teacher.rs::on_promotion`).
        let was = self.master_id(to);
        let node = &mut self.nodes[to];
        let taught = node.disk.taught.taught_by(was.as_deref(), s.mutants);
        // Untaught when its teacher's announced hold reaches past its own
        // longest lease, or none arrived (`host/events.rs`).
        let taught = taught_at_promotion(
            taught,
            node.sync_hold_until.take(),
            node.guard.longest_lease(s),
            mono,
            s.mutants,
        );
        let learned_acked = node.disk.taught.acked_ms(was.as_deref(), s.mutants);
        // A life as master forgets the teacher (`Taught::became_master`).
        node.disk.taught.became_master(s.mutants);
        node.master_node = None;
        node.replica = false;
        node.following = None;
        node.repl_id = repl_id;
        node.backlog.clear();
        node.acked = None;
        // No replica of a replica here: nothing inherited.
        node.lease_ack = LeaseAck::promoted(
            learned_acked,
            node.guard.longest_lease(s),
            BTreeSet::new(),
            s.mutants,
        );
        node.disk.lease_acked = Some(node.lease_ack.kept());
        // Written to the configuration file too (`CONFIG REWRITE`,
        // `host/config_file.rs::keep_promoted_acked`), before any command.
        node.promoted_acked = node.lease_ack.configured_hold();
        // The marker and its configuration copy follow the guard also when
        // no window opens (`host/guard.rs::on_promotion`).
        let record = node.guard.on_promotion(s, Promotion::Guard, mono, taught);
        node.disk.untaught_file = node.guard.untaught_window();
        node.untaught_configured = node.guard.untaught_window();
        if let Some(record) = record {
            node.disk.run_state = Some(record);
        }
        if node.guard.longest_lease(s) < self.ttl_ceiling_ms {
            self.stats.short_windows += 1;
            if std::env::var("SIMDEBUG").is_ok() {
                eprintln!(
                    "t={} promote node {} longest {} ceiling {} max_ttl {} recorded {} file {}",
                    self.now,
                    to,
                    node.guard.longest_lease(s),
                    self.ttl_ceiling_ms,
                    node.max_ttl,
                    node.guard.recorded_longest(),
                    node.disk.longest_file
                );
            }
        }
        self.stats.promotions += 1;
        if std::mem::take(&mut self.new_disk_next[member]) {
            let k = FaultKind::NewDiskPromoted;
            let after = skewed(self.fault_rng(k), MS, 500 * MS);
            self.after(
                after,
                Ev::Fault(crate::world::Fault::NewDisk { node: to as u16 }),
            );
        }
        // An untaught promotion teaches a new node next.
        let untaught = self.nodes[to].guard.untaught_window();
        if std::mem::take(&mut self.teach_next[member]) && untaught {
            let k = FaultKind::UntaughtTeaches;
            let after = skewed(self.fault_rng(k), MS, 300 * MS);
            self.after(
                after,
                Ev::Fault(crate::world::Fault::Teach { node: to as u16 }),
            );
        }
        if self.sc.rate(FaultKind::LaggingPromotion) > 0.0 && chance(&mut self.repl_rng, 0.3) {
            // Restarted inside its promotion window (the window must
            // survive the restart, also a durable one).
            let after = skewed(&mut self.repl_rng, MS, 300 * MS);
            self.after(
                after,
                Ev::Fault(crate::world::Fault::Bounce { node: to as u16 }),
            );
        }
        self.members[member].master = to as u16;
        self.members[member].master_down_since = None;
        // The old master comes back (or is already) a replica of the new.
        let old_node = &mut self.nodes[old];
        old_node.replica = true;
        old_node.life_replicas.clear();
        old_node.acked = None;
        if old_node.up {
            let record = old_node.guard.on_demotion();
            old_node.disk.run_state = Some(record);
            // Redis unblocks every blocked client of a master that becomes
            // a replica (`disconnectAllBlockedClients`), and the module
            // forgets each waiter and its place in the queue as it is freed
            // (`host/wait.rs::free_waiter`).
            let blocked: Vec<Req> = old_node
                .waits
                .iter_mut()
                .flat_map(|w| {
                    let gone: Vec<Blocked> = w.blocked.drain(..).collect();
                    for b in &gone {
                        if let Some((place, _)) = b.queued {
                            w.queue.leave(place);
                        }
                    }
                    gone.into_iter().map(|b| b.req)
                })
                .collect();
            for req in blocked {
                self.reply(&req, Reply::Broken);
            }
        }
        // A replica left slow to follow (a sequence of `fault.rs`): pointed
        // at the new master already, or still naming the old one.
        let slow = self.repoint_promoted(member, to, old);
        for x in self.members[member].nodes.clone() {
            let x = x as usize;
            if x != to && self.nodes[x].up {
                let link = self.id();
                self.nodes[x].following = None;
                self.nodes[x].link = link;
                if slow == Some((x, true)) {
                    self.nodes[x].master_node = Some(to as u16);
                    self.nodes[x].sync_hold_until = None;
                }
                self.after(MS, Ev::ReplConnect { to: x as u16 });
            }
        }
    }
}
