//! The world: one event queue on true time, the nodes, the clients, the
//! network between them, the protected resources, the fault schedule and the
//! checkers. [`World::run`] plays one seed to its end.
//!
//! Everything that happens is an [`Ev`] taken off the queue in time order
//! (ties in the order they were scheduled), so one seed always plays the
//! same way; every event taken is fed to the trace hash.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use redlock_client_rules::core::rules::Switches;
use redlock_module_rules::core::mutant::Mutants;
use redlock_module_rules::core::persisted::{NodeRecord, Persisted};

use crate::check::{Checker, Violation};
use crate::client::Client;
use crate::node::{Node, Snapshot};
use crate::resource::Resource;
use crate::rng::{between, stream, SimRng, Stream};
use crate::scenario::{FaultKind, Scenario};
use crate::stats::Stats;
use crate::time::{Time, MS, SEC};
use crate::trace::Trace;

/// A lock owner id (what the client's UUID is to the module: a capability,
/// here a number).
pub type Owner = u64;

/// A lock command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    /// `REDLOCK.ACQUIRE key owner ttl [FLOOR floor]` (`floor` 0: none).
    Acquire {
        /// Lock name.
        key: u8,
        /// Owner id.
        owner: Owner,
        /// Lease in ms.
        ttl: u64,
        /// `FLOOR` (0: not sent).
        floor: u64,
    },
    /// `REDLOCK.RELEASE key owner`.
    Release {
        /// Lock name.
        key: u8,
        /// Owner id.
        owner: Owner,
    },
    /// `REDLOCK.EXTEND key owner ttl`.
    Extend {
        /// Lock name.
        key: u8,
        /// Owner id.
        owner: Owner,
        /// Lease in ms.
        ttl: u64,
    },
    /// `REDLOCK.FENCE key owner token`.
    Fence {
        /// Lock name.
        key: u8,
        /// Owner id.
        owner: Owner,
        /// Token to write back.
        token: u64,
    },
    /// The client closes a `REDLOCK.WAIT` connection it stopped waiting on.
    Close {
        /// Lock name.
        key: u8,
    },
    /// `REDLOCK.WAIT key timeout QUEUE owner ticket`.
    Wait {
        /// Lock name.
        key: u8,
        /// Timeout in ms.
        timeout_ms: u64,
        /// The owner of the attempt that follows.
        owner: Owner,
        /// The waiter's ticket (its wall clock when it started waiting).
        ticket: u64,
    },
}

impl Cmd {
    /// The lock name.
    pub fn key(&self) -> u8 {
        match *self {
            Cmd::Acquire { key, .. }
            | Cmd::Release { key, .. }
            | Cmd::Extend { key, .. }
            | Cmd::Fence { key, .. }
            | Cmd::Close { key }
            | Cmd::Wait { key, .. } => key,
        }
    }

    fn code(&self) -> u64 {
        match self {
            Cmd::Acquire { .. } => 1,
            Cmd::Release { .. } => 2,
            Cmd::Extend { .. } => 3,
            Cmd::Fence { .. } => 4,
            Cmd::Wait { .. } => 5,
            Cmd::Close { .. } => 6,
        }
    }
}

/// A node's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// An integer.
    Int(u64),
    /// Nil.
    Nil,
    /// `GRACE …`: the restart or promotion guard refused an ACQUIRE.
    Grace {
        /// Ms left in the window.
        remaining_ms: u64,
    },
    /// `NOSYNC …`: a lease longer than the master's replicas acknowledged
    /// knowing (`core/lease_ack_rule.rs`).
    NoSync,
    /// `READONLY`: the node is a replica.
    ReadOnly,
    /// `ERR invalid …` (a ttl above the node's `max-ttl-ms`, a FLOOR out of
    /// reach).
    BadArg,
    /// No connection: the node is down.
    Down,
    /// The connection broke with the call in flight (it may have run).
    Broken,
}

impl Reply {
    fn code(&self) -> u64 {
        match *self {
            Reply::Int(n) => n.wrapping_mul(16) | 1,
            Reply::Nil => 2,
            Reply::Grace { .. } => 3,
            Reply::ReadOnly => 4,
            Reply::BadArg => 5,
            Reply::Down => 6,
            Reply::Broken => 7,
            Reply::NoSync => 8,
        }
    }
}

/// A request in flight to a node.
#[derive(Clone, Copy, Debug)]
pub struct Req {
    /// The sending client.
    pub client: u32,
    /// The client's incarnation (a crashed client's requests still land).
    pub life: u32,
    /// The client's round the reply belongs to.
    pub round: u64,
    /// The quorum member it was sent to.
    pub member: u8,
    /// The node it goes to.
    pub node: u16,
    /// The connection it travels on (replies on an older one are lost).
    pub conn: u64,
    /// The command.
    pub cmd: Cmd,
    /// A late second copy: its reply goes nowhere.
    pub copy: bool,
    /// On a connection of its own (`REDLOCK.WAIT`).
    pub blocking: bool,
}

/// One replication effect (`REDLOCK.APPLY`).
#[derive(Clone, Copy, Debug)]
pub enum Effect {
    /// A key's resulting state.
    State {
        /// Lock name.
        key: u8,
        /// Its persisted form.
        p: Persisted,
    },
    /// The node record (`REDLOCK.APPLY key node …`).
    Node(NodeRecord),
    /// What the master's replicas acknowledged knowing of its longest
    /// lease (`REDLOCK.APPLY key acked ms`, replicas only).
    Acked(u64),
    /// The sweep deleted a key (`REDLOCK.APPLY key reclaimed counter`).
    Reclaimed {
        /// Lock name.
        key: u8,
        /// Its counter.
        counter: u64,
    },
}

/// Something that happens.
#[derive(Clone, Debug)]
pub enum Ev {
    /// A request reaches its node.
    AtNode(Req),
    /// A reply reaches its client.
    AtClient {
        /// The client.
        client: u32,
        /// Its incarnation.
        life: u32,
        /// The round.
        round: u64,
        /// The member that answered.
        member: u8,
        /// The connection it came back on.
        conn: u64,
        /// The reply.
        reply: Reply,
    },
    /// A client's timer.
    ClientTimer {
        /// The client.
        client: u32,
        /// Its incarnation.
        life: u32,
        /// Which timer (a stale one is ignored).
        tag: u64,
    },
    /// A node's timer for one key's waiters (lease end, reservation end).
    WaitTimer {
        /// The node.
        node: u16,
        /// The node's process (a restart drops old timers).
        boot: u32,
        /// Lock name.
        key: u8,
        /// Which timer (a moved one is ignored).
        tag: u64,
    },
    /// A blocked WAIT's timeout.
    WaitTimeout {
        /// The node.
        node: u16,
        /// The node's process.
        boot: u32,
        /// The waiter.
        waiter: u64,
    },
    /// The reclamation sweep's tick.
    Sweep {
        /// The node.
        node: u16,
        /// The node's process.
        boot: u32,
    },
    /// `appendfsync everysec`'s fsync, or an RDB save.
    Persist {
        /// The node.
        node: u16,
        /// The node's process.
        boot: u32,
    },
    /// A replication effect reaches a replica.
    Repl {
        /// The replica.
        to: u16,
        /// The link it travels on.
        link: u64,
        /// Its offset in the master's stream.
        offset: u64,
        /// The effect.
        effect: Effect,
    },
    /// A full sync's snapshot reaches a replica.
    FullSync {
        /// The replica.
        to: u16,
        /// The link.
        link: u64,
        /// The stream offset the snapshot stands at.
        offset: u64,
        /// The snapshot.
        snapshot: Box<Snapshot>,
    },
    /// A replica (re)connects to its master.
    ReplConnect {
        /// The replica.
        to: u16,
    },
    /// A fenced operation reaches the protected resource.
    AtResource {
        /// The client.
        client: u32,
        /// Lock name.
        key: u8,
        /// The token shown.
        token: u64,
        /// A write (else a read).
        write: bool,
    },
    /// A scheduled fault or its end.
    Fault(Fault),
    /// The sentinel looks at a member.
    Sentinel {
        /// The member.
        member: u8,
    },
    /// The fault phase ends: every fault is healed.
    Heal,
    /// A liveness check.
    Check(CheckEv),
    /// The run ends.
    End,
}

/// Scheduled faults.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// The next fault of a kind is due (the kind schedules itself).
    Next(FaultKind),
    /// A crashed node comes back.
    Restart {
        /// The node.
        node: u16,
        /// On an empty disk.
        empty: bool,
    },
    /// A paused node resumes.
    Resume {
        /// The node.
        node: u16,
    },
    /// A paused client resumes.
    ClientResume {
        /// The client.
        client: u32,
    },
    /// A crashed client starts again (a new incarnation).
    ClientRestart {
        /// The client.
        client: u32,
    },
    /// A broken replication link comes back.
    ReplRejoin {
        /// The replica.
        node: u16,
    },
    /// The master of a member crashes (a failover follows).
    CrashMaster {
        /// The member.
        member: u8,
    },
    /// A master whose replicas lag after a raise of `max-ttl-ms`
    /// ([`FaultKind::RaiseFailover`]) is looked at: it dies soon after it
    /// granted a lease longer than before the raise, or when its replicas
    /// would catch up.
    WatchLonger {
        /// The member.
        member: u8,
    },
    /// [`FaultKind::UntaughtTeaches`]: the next step after the untaught
    /// promotion of the node.
    Teach {
        /// The promoted node.
        node: u16,
    },
    /// A node promoted after [`FaultKind::NewDiskPromoted`] loses its disk:
    /// killed, it restarts on an empty one.
    NewDisk {
        /// The node.
        node: u16,
    },
    /// A node is killed and started again at once (inside a window).
    Bounce {
        /// The node.
        node: u16,
    },
    /// A sequence of [`FaultKind::SwitchBack`] or
    /// [`FaultKind::SlowRepoint`] looks at its member again.
    Repoint {
        /// The member.
        member: u8,
    },
    /// A switchover waits for its replica to catch up.
    Switch {
        /// The member.
        member: u8,
        /// The replica taking over.
        to: u16,
        /// When the master takes its clients back if it has not.
        give_up: Time,
    },
}

/// Liveness checks.
#[derive(Clone, Copy, Debug)]
pub enum CheckEv {
    /// A released lock must be free of its owner on every member now.
    Released {
        /// Lock name.
        key: u8,
        /// The owner that released.
        owner: Owner,
    },
    /// The periodic look at waiters and free locks.
    Waiters,
}

impl Ev {
    /// Words for the trace hash.
    fn words(&self) -> [u64; 4] {
        match self {
            Ev::AtNode(r) => [
                1,
                u64::from(r.client) << 32 | u64::from(r.node),
                r.round << 8 | r.cmd.code(),
                r.conn << 1 | u64::from(r.copy),
            ],
            Ev::AtClient {
                client,
                round,
                member,
                reply,
                ..
            } => [
                2,
                u64::from(*client) << 8 | u64::from(*member),
                *round,
                reply.code(),
            ],
            Ev::ClientTimer { client, tag, .. } => [3, u64::from(*client), *tag, 0],
            Ev::WaitTimer { node, key, tag, .. } => [4, u64::from(*node), u64::from(*key), *tag],
            Ev::WaitTimeout { node, waiter, .. } => [5, u64::from(*node), *waiter, 0],
            Ev::Sweep { node, .. } => [6, u64::from(*node), 0, 0],
            Ev::Persist { node, .. } => [7, u64::from(*node), 0, 0],
            Ev::Repl { to, offset, .. } => [8, u64::from(*to), *offset, 0],
            Ev::FullSync { to, offset, .. } => [9, u64::from(*to), *offset, 0],
            Ev::ReplConnect { to } => [10, u64::from(*to), 0, 0],
            Ev::AtResource {
                client, key, token, ..
            } => [11, u64::from(*client), u64::from(*key), *token],
            Ev::Fault(f) => [12, fault_word(f), 0, 0],
            Ev::Sentinel { member } => [13, u64::from(*member), 0, 0],
            Ev::Heal => [14, 0, 0, 0],
            Ev::Check(_) => [15, 0, 0, 0],
            Ev::End => [16, 0, 0, 0],
        }
    }
}

fn fault_word(f: &Fault) -> u64 {
    match *f {
        Fault::Next(k) => k.index() as u64,
        Fault::Restart { node, empty } => 100 + u64::from(node) * 2 + u64::from(empty),
        Fault::Resume { node } => 300 + u64::from(node),
        Fault::ClientResume { client } => 500 + u64::from(client),
        Fault::ClientRestart { client } => 600 + u64::from(client),
        Fault::ReplRejoin { node } => 700 + u64::from(node),
        Fault::Switch { member, to, .. } => 800 + u64::from(member) * 64 + u64::from(to),
        Fault::CrashMaster { member } => 1_200 + u64::from(member),
        Fault::Bounce { node } => 1_300 + u64::from(node),
        Fault::WatchLonger { member } => 1_400 + u64::from(member),
        Fault::Repoint { member } => 1_500 + u64::from(member),
        Fault::NewDisk { node } => 1_600 + u64::from(node),
        Fault::Teach { node } => 1_700 + u64::from(node),
    }
}

struct Queued {
    at: Time,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        // Earliest first out of a max-heap.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A quorum member: a master and its replicas, and which one clients use.
#[derive(Clone, Debug)]
pub struct Member {
    /// Its nodes, the first one the master at the start.
    pub nodes: Vec<u16>,
    /// The master now (what the sentinel names).
    pub master: u16,
    /// The master went down at this time (the sentinel acts on it).
    pub master_down_since: Option<Time>,
}

/// How a run is set up beyond its scenario.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// The module's mutants.
    pub mutants: Mutants,
    /// The client's switches.
    pub switches: Switches,
    /// The resource's broken variants.
    pub resource: crate::resource::ResourceMutant,
    /// Every client sends no `FLOOR`.
    pub no_floor: bool,
    /// Every client waits as `acquire_wait` did before a busy waiter
    /// queued at once: it awaits the RELEASEs of its busy attempt before
    /// its WAIT. Replays the worlds of the seeds kept before that change
    /// (`sim/tests/quick.rs`).
    pub release_before_wait: bool,
    /// Record a readable trace.
    pub record: bool,
    /// Stop at the first violation.
    pub stop_at_first: bool,
}

/// What a run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The violations, the first one first.
    pub violations: Vec<Violation>,
    /// The trace hash.
    pub hash: [u8; 32],
    /// Events taken off the queue.
    pub events: u64,
    /// Counts.
    pub stats: Stats,
    /// The readable trace (when recorded).
    pub trace: Option<Vec<String>>,
    /// True time at the end.
    pub end: Time,
}

impl Outcome {
    /// The trace hash in hex (16 digits).
    pub fn hash_hex(&self) -> String {
        self.hash[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The simulated world.
pub struct World {
    /// True time now.
    pub now: Time,
    /// The seed's scenario.
    pub sc: Scenario,
    /// How the run is set up.
    pub setup: Setup,
    queue: BinaryHeap<Queued>,
    seq: u64,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// The quorum members.
    pub members: Vec<Member>,
    /// The clients.
    pub clients: Vec<Client>,
    /// One protected resource per lock name.
    pub resources: Vec<Resource>,
    /// The network's randomness.
    pub net_rng: SimRng,
    /// Replication's and the sentinel's randomness.
    pub repl_rng: SimRng,
    /// Each fault kind's randomness.
    pub fault_rng: Vec<SimRng>,
    /// Per (client, member): the connection now, and when the last message
    /// on it arrives (FIFO).
    pub conns: Vec<Vec<Conn>>,
    /// Per (node, client): cut off until this time.
    pub cut: Vec<Vec<Time>>,
    /// The fault phase is over.
    pub healed: bool,
    /// When the fault phase ended.
    pub heal_at: Time,
    /// Liveness is checked from here on.
    pub live_from: Time,
    /// Clients start no new operation from here on.
    pub ops_until: Time,
    /// The run ends here.
    pub end_at: Time,
    /// The checkers.
    pub checker: Checker,
    /// Counts.
    pub stats: Stats,
    /// The trace.
    pub trace: Trace,
    /// Ids for owners, waiters, rounds, links.
    pub next_id: u64,
    /// The `REDLOCK.WAIT` connections open: client, round, member, connection.
    pub wait_conns: Vec<(usize, u64, usize, u64)>,
    /// Per client: its requests get late copies until then, this late.
    pub dup_burst: Vec<Option<(Time, Time)>>,
    /// Per member: the sentinel promotes its least advanced replica next.
    pub promote_lagging: Vec<bool>,
    /// The longest ttl clients ask for: the masters' `max-ttl-ms`, raised
    /// when the operator raises it on every master.
    pub ttl_ceiling_ms: u64,
    /// Per member: a master watched after a raise of `max-ttl-ms`
    /// ([`FaultKind::RaiseFailover`]).
    pub raise_watch: Vec<Option<RaiseWatch>>,
    /// Per member: the replica promoted next loses its disk soon after
    /// ([`FaultKind::NewDiskPromoted`]).
    pub new_disk_next: Vec<bool>,
    /// Per member: the replica promoted next, if untaught, teaches a new
    /// node ([`FaultKind::UntaughtTeaches`]).
    pub teach_next: Vec<bool>,
    /// Per member: the new node being taught
    /// ([`FaultKind::UntaughtTeaches`]).
    pub teach: Vec<Option<u16>>,
    /// After a raise of `max-ttl-ms` ([`FaultKind::RaiseFailover`]): the
    /// longest lease before it, and the clients (a bit set) that now ask
    /// for longer leases (the part of the application the raise was for);
    /// the others go on asking for leases as long as before.
    pub ttl_split: Option<(u64, u32)>,
    /// Per member: a sequence of [`FaultKind::SwitchBack`] or
    /// [`FaultKind::SlowRepoint`] under way.
    pub repoint: Vec<Option<Repoint>>,
    /// Per node: a replica slow to follow its new master connects no
    /// earlier than then (its full sync, or Sentinel's repointing, takes
    /// that long).
    pub slow_until: Vec<Time>,
    /// The fault phase ends no earlier than then: a sequence of
    /// [`FaultKind::SwitchBack`] or [`FaultKind::SlowRepoint`] runs to its
    /// last promotion.
    pub heal_not_before: Time,
    /// [`FaultKind::LateReplica`]: the member whose replicas start late.
    pub late_member: Option<usize>,
    /// Per node: the next full sync takes that much longer.
    pub sync_extra: Vec<Time>,
    /// [`FaultKind::LateReplica`]: the member, and the longest lease before
    /// the raise: its master dies right after a late replica loaded its
    /// snapshot if it holds a longer lease by then.
    pub late_watch: Option<(usize, u64)>,
    events: u64,
}

/// Where a sequence of [`FaultKind::SwitchBack`] or
/// [`FaultKind::SlowRepoint`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepointStage {
    /// Late-replica: the late replicas are to start their first sync.
    Joining,
    /// Switch-back: the switchover to the replica is under way.
    Away,
    /// Switch-back: the switchover back to the old master is under way.
    Back,
    /// Slow-repoint: the master is down, the sentinel is to promote one of
    /// its replicas.
    Failing,
    /// The promotion of the sequence happened: once its master is out of
    /// its window (and, for a switch-back, the other replica acknowledged
    /// its record), `max-ttl-ms` is raised.
    Promoted,
}

/// A sequence of [`FaultKind::SwitchBack`] or [`FaultKind::SlowRepoint`].
#[derive(Clone, Copy, Debug)]
pub struct Repoint {
    /// Which kind.
    pub kind: FaultKind,
    /// Where it stands.
    pub stage: RepointStage,
    /// The master it returns to (switch-back) or the one that dies first
    /// (slow-repoint); after the promotion, the new master.
    pub master: u16,
    /// Switch-back: the replica switched to and back from; after the
    /// promotion, the replica slow to follow.
    pub slow: u16,
    /// How long that replica is slow to follow.
    pub slow_for: Time,
    /// The sequence is dropped if it has not reached its raise by then.
    pub give_up: Time,
    /// [`FaultKind::RepointNewDisk`]: the new master has lost its disk.
    pub disk_lost: bool,
}

/// A master whose replicas lag behind a raise of `max-ttl-ms`
/// ([`FaultKind::RaiseFailover`]).
#[derive(Clone, Copy, Debug)]
pub struct RaiseWatch {
    /// The master.
    pub node: u16,
    /// The longest lease before the raise, in ms.
    pub longer_than_ms: u64,
    /// When its replicas would catch up: it dies then at the latest.
    pub until: Time,
    /// The members cut off from the clients meanwhile, as a bit set.
    pub cut: u32,
    /// The kind that set the watch (its random stream).
    pub kind: FaultKind,
}

/// One client's connection to one member.
#[derive(Clone, Copy, Debug, Default)]
pub struct Conn {
    /// The connection's number (a reset makes a new one).
    pub id: u64,
    /// When the last request sent on it arrives.
    pub last_request: Time,
    /// When the last reply sent on it arrives.
    pub last_reply: Time,
}

impl World {
    /// The world of `sc`, set up as `setup`.
    pub fn new(sc: Scenario, setup: Setup) -> World {
        let seed = sc.seed;
        let mut world = World {
            now: 0,
            setup,
            queue: BinaryHeap::with_capacity(1024),
            seq: 0,
            nodes: Vec::new(),
            members: Vec::new(),
            clients: Vec::new(),
            resources: (0..sc.keys).map(|_| Resource::default()).collect(),
            net_rng: stream(seed, Stream::Net),
            repl_rng: stream(seed, Stream::Replication),
            fault_rng: FaultKind::ALL
                .iter()
                .map(|k| stream(seed, Stream::Fault(k.index() as u32)))
                .collect(),
            conns: vec![vec![Conn::default(); sc.members]; sc.clients],
            cut: Vec::new(),
            healed: false,
            heal_at: sc.fault_phase,
            live_from: Time::MAX,
            ops_until: Time::MAX,
            end_at: Time::MAX,
            checker: Checker::new(sc.keys, sc.members),
            stats: Stats::default(),
            trace: Trace::new(false),
            next_id: 1,
            wait_conns: Vec::new(),
            dup_burst: vec![None; sc.clients],
            promote_lagging: vec![false; sc.members],
            ttl_ceiling_ms: sc.max_ttl_ms,
            ttl_split: None,
            raise_watch: vec![None; sc.members],
            new_disk_next: vec![false; sc.members],
            teach_next: vec![false; sc.members],
            teach: vec![None; sc.members],
            repoint: vec![None; sc.members],
            slow_until: vec![0; sc.nodes()],
            heal_not_before: 0,
            late_member: None,
            sync_extra: vec![0; sc.nodes()],
            late_watch: None,
            events: 0,
            sc,
        };
        world.trace = Trace::new(world.setup.record);
        world.build();
        world
    }

    /// A fresh id.
    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Schedules `ev` at true time `at` (never before now).
    pub fn at(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at: at.max(self.now),
            seq: self.seq,
            ev,
        });
    }

    /// Schedules `ev` `delay` µs from now.
    pub fn after(&mut self, delay: Time, ev: Ev) {
        self.at(self.now + delay, ev);
    }

    fn build(&mut self) {
        let sc = self.sc.clone();
        let mut drift_rng = stream(
            sc.seed,
            Stream::Fault(FaultKind::Drift.index() as u32 + 100),
        );
        let drift = |rng: &mut SimRng| -> i64 {
            if sc.drift_ppm == 0 {
                0
            } else {
                use rand::Rng;
                rng.gen_range(-sc.drift_ppm..=sc.drift_ppm)
            }
        };
        // The canary: nodes fast, clients slow, as far as it goes.
        let canary = |node: bool, drawn: i64| -> i64 {
            match (sc.canary, node) {
                (false, _) => drawn,
                (true, true) => sc.drift_ppm,
                (true, false) => -sc.drift_ppm,
            }
        };
        for m in 0..sc.members {
            let mut ids = Vec::new();
            for r in 0..=sc.replicas {
                let id = self.nodes.len();
                let rate = canary(true, drift(&mut drift_rng));
                if rate != 0 {
                    self.stats.fault(FaultKind::Drift);
                }
                let node = Node::new(id as u16, m as u8, r > 0, rate, &sc);
                self.nodes.push(node);
                ids.push(id as u16);
            }
            self.members.push(Member {
                master: ids[0],
                nodes: ids,
                master_down_since: None,
            });
        }
        self.cut = vec![vec![0; sc.clients]; self.nodes.len()];
        for c in 0..sc.clients {
            let rate = canary(false, drift(&mut drift_rng));
            if rate != 0 {
                self.stats.fault(FaultKind::Drift);
            }
            let client = Client::new(c as u32, rate, &sc, &self.setup);
            self.clients.push(client);
        }
        // Start every node (module load), then attach replicas.
        // A member whose replicas start late ([`FaultKind::LateReplica`]).
        if sc.rate(FaultKind::LateReplica) > 0.0 {
            let rng = &mut self.fault_rng[FaultKind::LateReplica.index()];
            self.late_member = Some(between(rng, 0, sc.members as u64 - 1) as usize);
        }
        for n in 0..self.nodes.len() {
            let late = self.late_member.is_some_and(|m| {
                self.members[m].nodes.contains(&(n as u16)) && self.members[m].master != n as u16
            });
            if !late {
                self.node_start(n, false);
            }
        }
        for c in 0..sc.clients {
            self.client_start(c);
        }
        for k in FaultKind::ALL {
            if sc.faults.has(k) {
                self.schedule_fault(k);
            }
        }
        self.at(sc.fault_phase, Ev::Heal);
        for m in 0..sc.members {
            if sc.replicas > 0 {
                self.after(50 * MS, Ev::Sentinel { member: m as u8 });
            }
        }
    }

    /// Plays the run to its end.
    pub fn run(mut self) -> Outcome {
        while let Some(q) = self.queue.pop() {
            self.now = q.at;
            self.events += 1;
            self.trace.event(self.now, &q.ev.words());
            if self.trace.recording() {
                let line = format!("{:>9} {:?}", self.now, q.ev);
                self.trace.line(line);
            }
            if matches!(q.ev, Ev::End) {
                self.final_check();
                break;
            }
            self.dispatch(q.ev);
            if self.setup.stop_at_first && !self.checker.violations.is_empty() {
                break;
            }
            if self.now > 600 * SEC {
                // A run that never ends is a bug of the simulator.
                self.checker.violate(
                    self.now,
                    "the run did not end within 600 s of simulated time".into(),
                );
                break;
            }
        }
        let end = self.now;
        let mut checker = self.checker;
        checker.finish(end);
        let hash = self.trace.finish();
        Outcome {
            seed: self.sc.seed,
            violations: checker.violations,
            hash,
            events: self.events,
            stats: self.stats,
            trace: self.trace.take_lines(),
            end,
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::AtNode(req) => self.node_receive(req),
            Ev::AtClient {
                client,
                life,
                round,
                member,
                conn,
                reply,
            } => self.client_reply(client, life, round, member, conn, reply),
            Ev::ClientTimer { client, life, tag } => self.client_timer(client, life, tag),
            Ev::WaitTimer {
                node,
                boot,
                key,
                tag,
            } => self.node_wait_timer(node as usize, boot, key, tag),
            Ev::WaitTimeout { node, boot, waiter } => {
                self.node_wait_timeout(node as usize, boot, waiter)
            }
            Ev::Sweep { node, boot } => self.node_sweep(node as usize, boot),
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
            Ev::ReplConnect { to } => self.replica_connect(to as usize),
            Ev::AtResource {
                client,
                key,
                token,
                write,
            } => self.resource_op(client, key, token, write),
            Ev::Fault(f) => self.fault(f),
            Ev::Sentinel { member } => self.sentinel(member as usize),
            Ev::Heal => self.heal(),
            Ev::Check(c) => self.liveness_check(c),
            Ev::End => {}
        }
    }

    /// The fault phase ends: crashed nodes restart, paused ones resume,
    /// partitions and broken links heal; from a moment when everything in
    /// flight has landed and every guard window and lease has run out, the
    /// liveness checks start.
    fn heal(&mut self) {
        // A sequence of [`FaultKind::SwitchBack`] or
        // [`FaultKind::SlowRepoint`] under way plays to its end first (no
        // other fault starts meanwhile).
        if self.now < self.heal_not_before {
            self.at(self.heal_not_before, Ev::Heal);
            return;
        }
        self.healed = true;
        self.heal_at = self.now;
        for n in 0..self.nodes.len() {
            if !self.nodes[n].up {
                self.at(
                    self.now,
                    Ev::Fault(Fault::Restart {
                        node: n as u16,
                        empty: false,
                    }),
                );
            }
            if self.nodes[n].paused_until.is_some() {
                self.at(self.now, Ev::Fault(Fault::Resume { node: n as u16 }));
            }
            for c in 0..self.sc.clients {
                self.cut[n][c] = 0;
            }
            if self.nodes[n].link_down {
                self.at(self.now, Ev::Fault(Fault::ReplRejoin { node: n as u16 }));
            }
        }
        for c in 0..self.sc.clients {
            if self.clients[c].paused_until.is_some() {
                self.at(
                    self.now,
                    Ev::Fault(Fault::ClientResume { client: c as u32 }),
                );
            }
            if !self.clients[c].alive {
                self.at(
                    self.now,
                    Ev::Fault(Fault::ClientRestart { client: c as u32 }),
                );
            }
        }
        // Late copies and held-up messages land within this, restarts and
        // syncs are over, and the longest window or lease any node may have
        // opened since has run out.
        let longest_ms = self
            .nodes
            .iter()
            .map(|n| n.longest_known_ms())
            .max()
            .unwrap_or(0)
            .max(self.ttl_ceiling_ms);
        let settle = crate::net::MAX_LATE + 2 * SEC + 3 * longest_ms * MS;
        self.live_from = self.now + settle;
        self.ops_until = self.live_from + 2 * SEC;
        self.end_at = self.ops_until + 4 * SEC + 3 * longest_ms * MS;
        self.at(self.live_from, Ev::Check(CheckEv::Waiters));
        self.at(self.end_at, Ev::End);
    }

    /// The client an owner id belongs to (its top 16 bits).
    pub fn client_of(owner: Owner) -> usize {
        (owner >> 48) as usize
    }

    /// A client id's bit.
    pub fn client_bit(c: usize) -> u32 {
        1 << c
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Defers an event for a paused process: it runs when the process
    /// resumes, in order.
    pub fn hold(queue: &mut VecDeque<Ev>, ev: Ev) {
        queue.push_back(ev);
    }
}
