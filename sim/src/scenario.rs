//! What one seed runs: the swarm's draw (TigerBeetle's and FoundationDB's
//! "swarm testing"). Every seed picks its own world (members, replicas,
//! persistence, clients, keys, lease lengths) and its own mix of fault kinds,
//! each with a rate of its own, so that some seeds hammer one kind of fault
//! and others combine many. [`Overrides`] narrow the draw (a shorter
//! reproduction, or a run aimed at one part of the protocol).

use std::fmt;

use crate::rng::{between, chance, skewed, stream, SimRng, Stream};
use crate::time::{Time, MS, SEC};

/// The kinds of fault the world injects. Each seed enables a random subset
/// (every kind in about half of the seeds) with random rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A message held up far longer than usual (its connection's later
    /// messages wait behind it).
    Delay,
    /// A request lost on the way to a node.
    DropRequest,
    /// A reply lost on the way back (the node ran the command).
    DropReply,
    /// A late second copy of a request (a resending cluster connection, an
    /// alias of the server).
    Duplicate,
    /// A request overtaken by later ones on the same path (sent over an
    /// older connection).
    Reorder,
    /// A connection reset: calls in flight fail (they may have run), a
    /// cluster-like member resends.
    Reset,
    /// A node cut off from some clients for a while.
    Partition,
    /// A node killed (`kill -9`) and restarted: what survives is what its
    /// persistence mode keeps.
    Crash,
    /// A node stopped (SIGSTOP) for a while, longer than leases.
    Pause,
    /// A node's wall clock stepped forward.
    ClockForward,
    /// A node's wall clock stepped back.
    ClockBack,
    /// A node restarted on an empty disk (no data, no records).
    DiskLoss,
    /// The replication stream held back.
    ReplLag,
    /// A replica's link broken (partial or full resync after).
    ReplBreak,
    /// A crashed master replaced by its most advanced replica.
    Failover,
    /// A crashed master replaced by a lagging replica.
    LaggingPromotion,
    /// A graceful switchover (`FAILOVER`): master and replica swap.
    Switchover,
    /// `redlock.max-ttl-ms` raised at run time on a master.
    ConfigRaise,
    /// A client stopped (a GC pause) past its lease, also between checking
    /// its validity and using the token.
    ClientPause,
    /// A client dies holding (or acquiring) a lock.
    ClientCrash,
    /// A client's wall clock stepped (within what the clock floor assumes).
    ClientClockStep,
    /// Clocks that drift (within the drift factor).
    Drift,
    /// The operator raises `redlock.max-ttl-ms` on every master (not on
    /// the replicas) while one master's replicas lag: clients take the
    /// longer lease at once, the master dies before its replicas heard of
    /// the raise or the grant, and the sentinel promotes its least advanced
    /// replica.
    RaiseFailover,
    /// A switchover to a replica and back (Sentinel's `FAILOVER` twice):
    /// the replica that was master meanwhile is pointed back at its old
    /// master and its full sync takes seconds; `redlock.max-ttl-ms` is
    /// raised, the master grants a longer lease once its other replica
    /// acknowledged it, dies, and the sentinel promotes the replica still in
    /// its full sync (`core/teacher.rs`: a teacher from an earlier life as
    /// replica must not teach its later life).
    SwitchBack,
    /// After a failover, the sentinel repoints one of the old master's
    /// replicas only seconds later (it still names the old master);
    /// `redlock.max-ttl-ms` is raised on the new master, which dies, and the
    /// sentinel promotes that replica (`LeaseAck::promoted`: a promoted
    /// master is held while its replica set is empty).
    SlowRepoint,
    /// A replica added to a master that never had one (its replicas start
    /// late, their first full sync takes seconds; the master's lease-ack
    /// check then waits for replicas in their first sync,
    /// `lease_ack_rule::waited_for`): `redlock.max-ttl-ms` is raised right
    /// after the sync's snapshot is forked, and the master dies right after
    /// the replica loaded it, before its next announcement reaches it.
    LateReplica,
    /// `redlock.max-ttl-ms` is raised on every master (not on the replicas
    /// first); a master grants a longer lease once its replicas
    /// acknowledged knowing it, dies, and the replica promoted in its place
    /// loses its disk soon after (finding L: a node on a new disk knows
    /// nothing but its configuration, `host/config_file.rs`).
    NewDiskPromoted,
    /// A slow-repoint sequence in which the promoted master loses its disk
    /// before `redlock.max-ttl-ms` is raised on it (seed 3,098,182: its
    /// hold, kept for the replica still naming the old master, must survive
    /// the lost disk).
    RepointNewDisk,
    /// A switch-back sequence in which the replica promoted during its full
    /// sync (untaught: it guards a day) loses its disk soon after (seed
    /// 3,508,262: its untaught window must survive the lost disk).
    SwitchBackNewDisk,
    /// A switch-back sequence in which, after the untaught promotion, the
    /// other replica is replaced by a new node (a new disk and a new
    /// configuration) that syncs from the untaught master, which then dies:
    /// the new node, taught by it, is promoted while the old master's
    /// longer lease runs (the adversarial read of the untaught day: the
    /// day must reach the replica it teaches).
    UntaughtTeaches,
}

impl FaultKind {
    /// Every kind, in table order.
    pub const ALL: [FaultKind; 30] = [
        FaultKind::Delay,
        FaultKind::DropRequest,
        FaultKind::DropReply,
        FaultKind::Duplicate,
        FaultKind::Reorder,
        FaultKind::Reset,
        FaultKind::Partition,
        FaultKind::Crash,
        FaultKind::Pause,
        FaultKind::ClockForward,
        FaultKind::ClockBack,
        FaultKind::DiskLoss,
        FaultKind::ReplLag,
        FaultKind::ReplBreak,
        FaultKind::Failover,
        FaultKind::LaggingPromotion,
        FaultKind::Switchover,
        FaultKind::ConfigRaise,
        FaultKind::ClientPause,
        FaultKind::ClientCrash,
        FaultKind::ClientClockStep,
        FaultKind::Drift,
        FaultKind::RaiseFailover,
        FaultKind::SwitchBack,
        FaultKind::SlowRepoint,
        FaultKind::LateReplica,
        FaultKind::NewDiskPromoted,
        FaultKind::RepointNewDisk,
        FaultKind::SwitchBackNewDisk,
        FaultKind::UntaughtTeaches,
    ];

    /// Its index in [`FaultKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Delay => "delay",
            FaultKind::DropRequest => "drop-request",
            FaultKind::DropReply => "drop-reply",
            FaultKind::Duplicate => "duplicate",
            FaultKind::Reorder => "reorder",
            FaultKind::Reset => "reset",
            FaultKind::Partition => "partition",
            FaultKind::Crash => "crash",
            FaultKind::Pause => "pause",
            FaultKind::ClockForward => "clock-forward",
            FaultKind::ClockBack => "clock-back",
            FaultKind::DiskLoss => "disk-loss",
            FaultKind::ReplLag => "repl-lag",
            FaultKind::ReplBreak => "repl-break",
            FaultKind::Failover => "failover",
            FaultKind::LaggingPromotion => "lagging-promotion",
            FaultKind::Switchover => "switchover",
            FaultKind::ConfigRaise => "config-raise",
            FaultKind::ClientPause => "client-pause",
            FaultKind::ClientCrash => "client-crash",
            FaultKind::ClientClockStep => "client-clock-step",
            FaultKind::Drift => "drift",
            FaultKind::RaiseFailover => "raise-failover",
            FaultKind::SwitchBack => "switch-back",
            FaultKind::SlowRepoint => "slow-repoint",
            FaultKind::LateReplica => "late-replica",
            FaultKind::NewDiskPromoted => "new-disk-promoted",
            FaultKind::RepointNewDisk => "repoint-new-disk",
            FaultKind::SwitchBackNewDisk => "switch-back-new-disk",
            FaultKind::UntaughtTeaches => "untaught-teaches",
        }
    }

    /// The kind of that name.
    pub fn named(name: &str) -> Option<FaultKind> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// Kinds that need replicas to mean anything.
    pub fn needs_replicas(self) -> bool {
        matches!(
            self,
            FaultKind::ReplLag
                | FaultKind::ReplBreak
                | FaultKind::Failover
                | FaultKind::LaggingPromotion
                | FaultKind::Switchover
                | FaultKind::RaiseFailover
                | FaultKind::SwitchBack
                | FaultKind::SlowRepoint
                | FaultKind::LateReplica
                | FaultKind::NewDiskPromoted
                | FaultKind::RepointNewDisk
                | FaultKind::SwitchBackNewDisk
                | FaultKind::UntaughtTeaches
        )
    }

    /// Kinds that play a master with two replicas.
    pub fn needs_two_replicas(self) -> bool {
        matches!(self, FaultKind::SwitchBack | FaultKind::SlowRepoint)
    }
}

/// A set of fault kinds.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Kinds(pub u32);

impl Kinds {
    /// Every kind.
    pub const ALL: Kinds = Kinds((1 << FaultKind::ALL.len()) - 1);

    /// Whether `k` is in the set.
    pub fn has(self, k: FaultKind) -> bool {
        self.0 & (1 << k.index()) != 0
    }

    /// The set with `k` added or removed.
    pub fn with(self, k: FaultKind, on: bool) -> Kinds {
        if on {
            Kinds(self.0 | 1 << k.index())
        } else {
            Kinds(self.0 & !(1 << k.index()))
        }
    }

    /// The kinds in the set.
    pub fn iter(self) -> impl Iterator<Item = FaultKind> {
        FaultKind::ALL.into_iter().filter(move |k| self.has(*k))
    }

    /// How many kinds.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// No kind.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Parses `a,b,c`, `none`, `all`, or `all,-a,-b` (every kind but those).
    pub fn parse(text: &str) -> Result<Kinds, String> {
        if text == "none" {
            return Ok(Kinds(0));
        }
        let mut k = Kinds(0);
        for name in text.split(',').filter(|n| !n.is_empty()) {
            if name == "all" {
                k = Kinds::ALL;
                continue;
            }
            let (name, on) = match name.strip_prefix('-') {
                Some(name) => (name, false),
                None => (name, true),
            };
            let kind = FaultKind::named(name).ok_or_else(|| {
                format!(
                    "unknown fault kind {name:?}; kinds: {}",
                    FaultKind::ALL.map(FaultKind::name).join(", ")
                )
            })?;
            k = k.with(kind, on);
        }
        Ok(k)
    }
}

impl fmt::Debug for Kinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Kinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<_> = self.iter().map(FaultKind::name).collect();
        f.write_str(&names.join(","))
    }
}

/// A node's persistence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// No AOF, no snapshots: a restart loses everything.
    None,
    /// RDB snapshots every so often (`save`), no AOF.
    Rdb,
    /// AOF with `appendfsync everysec`: a crash loses up to about a second.
    AofEverysec,
    /// AOF with `appendfsync always`: nothing acknowledged is lost.
    AofAlways,
}

/// Narrows a seed's draw: for a shorter reproduction, or a run aimed at one
/// part of the protocol. `None` leaves the draw as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Only these fault kinds may be enabled (those the seed draws among
    /// them).
    pub faults: Option<Kinds>,
    /// Clients.
    pub clients: Option<usize>,
    /// Lock names.
    pub keys: Option<usize>,
    /// Length of the fault phase, in ms.
    pub fault_ms: Option<u64>,
}

impl Overrides {
    /// The command-line arguments that give these overrides.
    pub fn args(&self) -> String {
        let mut out = String::new();
        if let Some(k) = self.faults {
            out.push_str(&format!(" --faults {k}"));
        }
        if let Some(c) = self.clients {
            out.push_str(&format!(" --clients {c}"));
        }
        if let Some(k) = self.keys {
            out.push_str(&format!(" --keys {k}"));
        }
        if let Some(ms) = self.fault_ms {
            out.push_str(&format!(" --fault-ms {ms}"));
        }
        out
    }
}

/// A per-event probability or a per-second rate, by kind.
#[derive(Clone, Debug)]
pub struct Rates([f64; FaultKind::ALL.len()]);

impl Rates {
    /// The rate of `k` (0 when the kind is off).
    pub fn of(&self, k: FaultKind) -> f64 {
        self.0[k.index()]
    }
}

/// What one seed runs.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed.
    pub seed: u64,
    /// Members of the quorum (independent masters or master groups).
    pub members: usize,
    /// Replicas of each member's master.
    pub replicas: usize,
    /// Lock names the clients contend for.
    pub keys: usize,
    /// Clients.
    pub clients: usize,
    /// The fault kinds this seed enables.
    pub faults: Kinds,
    /// Their rates: per message for the network's kinds, per second of the
    /// fault phase otherwise.
    pub rates: Rates,
    /// Length of the fault phase.
    pub fault_phase: Time,
    /// `redlock.max-ttl-ms` of the masters (what clients ask for at most).
    pub max_ttl_ms: u64,
    /// `redlock.max-ttl-ms` of the replicas (may be smaller: issue 39).
    pub replica_max_ttl_ms: u64,
    /// Persistence of each node, by node index.
    pub persistence: Vec<Persistence>,
    /// The nodes run Redis 7.2+ / Valkey (`aux_save2`) rather than 7.0.
    pub redis72: bool,
    /// `redlock.reclaim-after-ms` (0: off).
    pub reclaim_after_ms: u64,
    /// `redlock.handoff-ms`.
    pub handoff_ms: u64,
    /// The clients' per-node timeout.
    pub node_timeout_ms: u64,
    /// Usual one-way message latency, in µs (lowest, highest).
    pub latency_us: (u64, u64),
    /// Replication lag, in µs (lowest, highest).
    pub repl_lag_us: (u64, u64),
    /// Largest clock drift, in parts per million (within the drift factor).
    pub drift_ppm: i64,
    /// Members whose connection resends a command after a reset (like a
    /// cluster connection), as a bit set.
    pub resending: u32,
    /// Clients that send no `FLOOR` (the clock floor off), as a bit set.
    pub no_floor: u32,
    /// The canary: clocks drift far beyond the drift factor, which the
    /// protocol does not survive; the checkers must notice.
    pub canary: bool,
    /// How long the sentinel waits before it replaces a master that is
    /// down, in ms.
    pub down_after_ms: u64,
}

impl Scenario {
    /// The scenario of `seed`, narrowed by `o`.
    pub fn draw(seed: u64, o: &Overrides) -> Scenario {
        let mut rng = stream(seed, Stream::Scenario);
        let r = &mut rng;
        let members = if chance(r, 0.8) { 5 } else { 3 };
        let replicas = match between(r, 0, 99) {
            0..=44 => 0,
            45..=84 => 1,
            _ => 2,
        };
        // Every draw is made whatever the overrides say, so that an override
        // leaves the rest of the seed's draw unchanged.
        let keys_drawn = between(r, 1, 3) as usize;
        let keys = o.keys.unwrap_or(keys_drawn);
        let clients_drawn = between(r, 2, 6) as usize;
        let clients = o.clients.unwrap_or(clients_drawn);
        let max_ttl_ms = *pick(r, &[200, 400, 700, 1_000, 1_500]);
        let replica_max_ttl_ms = if chance(r, 0.4) {
            (max_ttl_ms / between(r, 2, 5)).max(50)
        } else {
            max_ttl_ms
        };
        let nodes = members * (1 + replicas);
        let mixed_floors = chance(r, 0.25);
        let mix = between(r, 0, 9);
        let persistence = (0..nodes)
            .map(|_| {
                let roll = if mix < 4 { mix } else { between(r, 0, 3) };
                match roll {
                    // Clients without FLOOR rely on counters that survive:
                    // the protocol promises token order to them only then.
                    _ if mixed_floors => Persistence::AofAlways,
                    0 => Persistence::None,
                    1 => Persistence::Rdb,
                    2 => Persistence::AofEverysec,
                    _ => Persistence::AofAlways,
                }
            })
            .collect();
        let redis72 = chance(r, 0.5);
        let reclaim_after_ms = if chance(r, 0.35) {
            between(r, 300, 2_000)
        } else {
            0
        };
        let node_timeout_ms = between(r, 15, 80);
        let lat_hi = skewed(r, 100, 3_000);
        let latency_us = (between(r, 20, lat_hi.min(500)), lat_hi);
        let repl_lag_us = (between(r, 50, 500), skewed(r, 500, 20_000));
        let drift_ppm = if chance(r, 0.8) {
            between(r, 1, 2_500) as i64
        } else {
            0
        };
        let fault_ms_drawn = between(r, 1_500, 5_000);
        let fault_phase = o.fault_ms.unwrap_or(fault_ms_drawn) * MS;
        // Each kind in about half the seeds; the swarm's point is that some
        // seeds get few kinds at high rates.
        let allowed = o.faults.unwrap_or(Kinds::ALL);
        let mut faults = Kinds(0);
        let mut rates = [0.0; FaultKind::ALL.len()];
        let usable = |k: FaultKind| {
            // Clients without FLOOR: no fault that loses counters (a lost
            // disk, a replica promoted without its master's last writes).
            let loses_counters = matches!(
                k,
                FaultKind::DiskLoss
                    | FaultKind::Failover
                    | FaultKind::LaggingPromotion
                    | FaultKind::RaiseFailover
                    | FaultKind::SwitchBack
                    | FaultKind::SlowRepoint
                    | FaultKind::LateReplica
                    | FaultKind::NewDiskPromoted
                    | FaultKind::RepointNewDisk
                    | FaultKind::SwitchBackNewDisk
                    | FaultKind::UntaughtTeaches
            );
            // (A kind that needs two replicas gets its second below.)
            let pointless =
                (k.needs_replicas() && replicas == 0) || (k == FaultKind::Drift && drift_ppm == 0);
            let refused = mixed_floors && loses_counters;
            !(pointless || refused)
        };
        // Whether a seed enables `k`, and at what rate.
        let draw = |r: &mut SimRng, k: FaultKind| {
            let on = chance(r, 0.5);
            let rate = rate_drawn(r, k);
            (on && usable(k) && allowed.has(k)).then_some(rate)
        };
        let mut enable = |r: &mut SimRng, k: FaultKind| {
            if let Some(rate) = draw(r, k) {
                faults = faults.with(k, true);
                rates[k.index()] = rate;
            }
        };
        for k in FaultKind::ALL {
            if !DRAWN_LAST.contains(&k) && !DRAWN_AFTER_REPLICAS.contains(&k) {
                enable(r, k);
            }
        }
        let resending = (0..5)
            .filter(|_| chance(r, 0.3))
            .fold(0u32, |acc, m| acc | 1 << m);
        let no_floor = (0..8)
            .filter(|_| chance(r, 0.5))
            .fold(0u32, |acc, c| acc | 1 << c);
        let no_floor = if mixed_floors { no_floor } else { 0 };
        let down_after_ms = skewed(r, 20, 400);
        // The kinds added later are drawn after everything else: a seed that
        // leaves them off draws and plays what it did before they existed
        // (the seeds kept as regression cases).
        for k in DRAWN_LAST {
            enable(r, k);
        }
        // A seed with one replica per master that draws a kind playing two
        // gets a second replica per master (drawn last too).
        let mut replicas = replicas;
        let mut persistence: Vec<Persistence> = persistence;
        if replicas == 1 && faults.iter().any(FaultKind::needs_two_replicas) {
            replicas = 2;
            let roll = |r: &mut SimRng| match if mix < 4 { mix } else { between(r, 0, 3) } {
                _ if mixed_floors => Persistence::AofAlways,
                0 => Persistence::None,
                1 => Persistence::Rdb,
                2 => Persistence::AofEverysec,
                _ => Persistence::AofAlways,
            };
            for _ in 0..members {
                persistence.push(roll(r));
            }
        }
        for k in DRAWN_AFTER_REPLICAS {
            if let Some(rate) = draw(r, k) {
                faults = faults.with(k, true);
                rates[k.index()] = rate;
            }
        }
        Scenario {
            seed,
            members,
            replicas,
            keys,
            clients,
            faults,
            rates: Rates(rates),
            fault_phase,
            max_ttl_ms,
            replica_max_ttl_ms,
            persistence,
            redis72,
            reclaim_after_ms,
            handoff_ms: 50,
            node_timeout_ms,
            latency_us,
            repl_lag_us,
            drift_ppm,
            resending,
            no_floor,
            canary: false,
            down_after_ms,
        }
    }

    /// The canary: `seed`'s scenario with clocks that drift 8 % (the
    /// client's drift factor is 1 %), no other fault: two holders must be
    /// seen.
    pub fn canary(seed: u64) -> Scenario {
        let mut s = Scenario::draw(
            seed,
            &Overrides {
                faults: Some(Kinds(0)),
                ..Overrides::default()
            },
        );
        s.canary = true;
        s.drift_ppm = 80_000;
        s.faults = Kinds(0).with(FaultKind::Drift, true);
        s
    }

    /// Nodes in all.
    pub fn nodes(&self) -> usize {
        self.members * (1 + self.replicas)
    }

    /// The rate of `k` in this seed (0 when off).
    pub fn rate(&self, k: FaultKind) -> f64 {
        if self.faults.has(k) {
            self.rates.of(k)
        } else {
            0.0
        }
    }

    /// A one-line summary.
    pub fn summary(&self) -> String {
        format!(
            "{} members x {} replicas, {} clients, {} keys, max-ttl {} ms (replicas {} ms), {}, reclaim {} ms, node timeout {} ms, fault phase {} ms, faults [{}]",
            self.members,
            self.replicas,
            self.clients,
            self.keys,
            self.max_ttl_ms,
            self.replica_max_ttl_ms,
            if self.redis72 { "Redis 7.2+" } else { "Redis 7.0" },
            self.reclaim_after_ms,
            self.node_timeout_ms,
            self.fault_phase / MS,
            self.faults
        )
    }
}

/// Fault kinds drawn after the rest of a seed's scenario (added after seeds
/// were kept as regression cases), in this order.
const DRAWN_LAST: [FaultKind; 4] = [
    FaultKind::RaiseFailover,
    FaultKind::SwitchBack,
    FaultKind::SlowRepoint,
    FaultKind::LateReplica,
];

/// Fault kinds drawn after everything else, also after the second replica
/// of the kinds that play two (added after seeds that draw those were
/// kept).
/// (`repoint-new-disk`, `switch-back-new-disk` and `untaught-teaches`
/// play where the seed has two replicas per master; `untaught-teaches`
/// came after seeds drawing the others were kept: last.)
const DRAWN_AFTER_REPLICAS: [FaultKind; 4] = [
    FaultKind::NewDiskPromoted,
    FaultKind::RepointNewDisk,
    FaultKind::SwitchBackNewDisk,
    FaultKind::UntaughtTeaches,
];

/// The rate of kind `k` in a seed that enables it: per message for the
/// network's kinds, per second of the fault phase otherwise.
fn rate_drawn(r: &mut SimRng, k: FaultKind) -> f64 {
    match k {
        FaultKind::Delay => log_between(r, 0.002, 0.05),
        FaultKind::DropRequest | FaultKind::DropReply => log_between(r, 0.001, 0.03),
        FaultKind::Duplicate => log_between(r, 0.002, 0.08),
        FaultKind::Reorder => log_between(r, 0.002, 0.05),
        FaultKind::Reset => log_between(r, 0.2, 4.0),
        FaultKind::Partition => log_between(r, 0.2, 2.0),
        FaultKind::Crash => log_between(r, 0.2, 2.0),
        FaultKind::Pause => log_between(r, 0.2, 2.0),
        FaultKind::ClockForward | FaultKind::ClockBack => log_between(r, 0.2, 2.0),
        FaultKind::DiskLoss => log_between(r, 0.05, 0.5),
        FaultKind::ReplLag => log_between(r, 0.005, 0.2),
        FaultKind::ReplBreak => log_between(r, 0.2, 2.0),
        FaultKind::Failover | FaultKind::LaggingPromotion => log_between(r, 0.2, 1.5),
        FaultKind::Switchover => log_between(r, 0.1, 1.0),
        FaultKind::ConfigRaise => log_between(r, 0.1, 1.0),
        FaultKind::ClientPause => log_between(r, 0.2, 3.0),
        FaultKind::ClientCrash => log_between(r, 0.05, 0.5),
        FaultKind::ClientClockStep => log_between(r, 0.2, 2.0),
        FaultKind::Drift => 1.0,
        FaultKind::RaiseFailover | FaultKind::NewDiskPromoted => log_between(r, 0.3, 1.5),
        FaultKind::SwitchBack
        | FaultKind::SlowRepoint
        | FaultKind::LateReplica
        | FaultKind::RepointNewDisk
        | FaultKind::SwitchBackNewDisk
        | FaultKind::UntaughtTeaches => log_between(r, 0.5, 2.0),
    }
}

fn pick<'a, T>(rng: &mut SimRng, items: &'a [T]) -> &'a T {
    &items[between(rng, 0, items.len() as u64 - 1) as usize]
}

fn log_between(rng: &mut SimRng, lo: f64, hi: f64) -> f64 {
    use rand::Rng;
    rng.gen_range(lo.ln()..=hi.ln()).exp()
}

/// A second of the fault phase.
pub const PER_SEC: Time = SEC;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_names_all_and_removals() {
        let k = Kinds::parse("all,-raise-failover").expect("parses");
        assert!(!k.has(FaultKind::RaiseFailover));
        assert_eq!(k.len(), FaultKind::ALL.len() - 1);
        assert_eq!(Kinds::parse("crash,pause").expect("parses").len(), 2);
        assert_eq!(Kinds::parse("none").expect("parses"), Kinds(0));
        assert!(Kinds::parse("all,-nonsense").is_err());
    }

    /// The kinds drawn last leave the rest of every seed's draw as it was
    /// without them: a seed kept as a regression case before a kind
    /// existed plays its old world with the kind filtered out.
    #[test]
    fn the_kinds_drawn_last_leave_the_rest_of_the_draw_unchanged() {
        let mut later = Vec::new();
        for &k in DRAWN_LAST.iter().chain(&DRAWN_AFTER_REPLICAS) {
            later.push(k);
            // The kinds drawn after the second replica's draws depend on
            // whether one is drawn: always left out of the comparison.
            let mut names = String::from("all");
            for k in later.iter().chain(&DRAWN_AFTER_REPLICAS) {
                names.push_str(&format!(",-{}", k.name()));
            }
            let without = Overrides {
                faults: Some(Kinds::parse(&names).expect("parses")),
                ..Overrides::default()
            };
            let mut seen_on = 0;
            for seed in 0..400 {
                let mut full = Scenario::draw(seed, &Overrides::default());
                let filtered = Scenario::draw(seed, &without);
                let two = full.faults.iter().any(FaultKind::needs_two_replicas);
                for &k in &later {
                    seen_on += u32::from(full.faults.has(k));
                }
                for &k in later.iter().chain(&DRAWN_AFTER_REPLICAS) {
                    full.faults = full.faults.with(k, false);
                    full.rates.0[k.index()] = 0.0;
                }
                if full.replicas != filtered.replicas {
                    // The second replica a two-replica kind brings, drawn last.
                    assert!(two && full.replicas == 2 && filtered.replicas == 1);
                    full.replicas = 1;
                    full.persistence.truncate(filtered.persistence.len());
                }
                assert_eq!(format!("{full:?}"), format!("{filtered:?}"), "seed {seed}");
            }
            assert!(seen_on > 40, "{names}: on in {seen_on} of 400 seeds");
        }
    }
}
