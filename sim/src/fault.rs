//! The fault schedule: every kind the seed enables fires at random moments
//! of the fault phase, at its rate, on random targets (the message-level
//! kinds are decided per message in `net.rs` and `node.rs`).

use rand::Rng;

use crate::rng::{between, chance, skewed};
use crate::scenario::FaultKind;
use crate::time::{Time, MS, SEC};
use crate::world::{Ev, Fault, RaiseWatch, Repoint, RepointStage, World};

impl World {
    pub(crate) fn fault_rng(&mut self, k: FaultKind) -> &mut crate::rng::SimRng {
        &mut self.fault_rng[k.index()]
    }

    /// Schedules the next fault of kind `k` (exponential gaps at its rate).
    pub fn schedule_fault(&mut self, k: FaultKind) {
        let per_second = matches!(
            k,
            FaultKind::Reset
                | FaultKind::Partition
                | FaultKind::Crash
                | FaultKind::Pause
                | FaultKind::ClockForward
                | FaultKind::ClockBack
                | FaultKind::DiskLoss
                | FaultKind::ReplBreak
                | FaultKind::Switchover
                | FaultKind::ConfigRaise
                | FaultKind::ClientPause
                | FaultKind::ClientCrash
                | FaultKind::ClientClockStep
                | FaultKind::Duplicate
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
        if !per_second {
            return;
        }
        let mut rate = self.sc.rate(k);
        if rate <= 0.0 {
            return;
        }
        if k == FaultKind::Duplicate {
            // Per message above; bursts of a client's copies at this rate.
            rate *= 20.0;
        }
        let u: f64 = self.fault_rng(k).gen_range(1e-9..1.0);
        let gap = (-u.ln() / rate * SEC as f64) as Time;
        let at = self.now + gap.max(1);
        if at < self.sc.fault_phase {
            self.at(at, Ev::Fault(Fault::Next(k)));
        }
    }

    fn pick(&mut self, k: FaultKind, n: usize) -> usize {
        between(self.fault_rng(k), 0, n as u64 - 1) as usize
    }

    /// A scheduled fault, or its end.
    pub fn fault(&mut self, f: Fault) {
        match f {
            Fault::Next(k) => {
                if !self.healed {
                    self.inject(k);
                    self.schedule_fault(k);
                }
            }
            Fault::Restart { node, empty } => {
                let n = node as usize;
                if !self.nodes[n].up {
                    self.node_start(n, empty);
                }
            }
            Fault::Resume { node } => self.node_resume(node as usize),
            Fault::ClientResume { client } => self.client_resume(client as usize),
            Fault::ClientRestart { client } => self.client_restart(client as usize),
            Fault::ReplRejoin { node } => {
                let n = node as usize;
                if self.nodes[n].link_down {
                    self.nodes[n].link_down = false;
                    self.replica_connect(n);
                }
            }
            Fault::Switch {
                member,
                to,
                give_up,
            } => self.switchover_step(member as usize, to as usize, give_up),
            Fault::CrashMaster { member } => {
                let n = self.members[member as usize].master as usize;
                if self.nodes[n].up && !self.healed {
                    let down = between(&mut self.repl_rng, 1_000, 3_000) * MS;
                    self.crash_for(n, down, false);
                }
            }
            Fault::WatchLonger { member } => self.watch_longer(member as usize),
            Fault::NewDisk { node } => {
                let n = node as usize;
                if self.nodes[n].up && !self.nodes[n].replica && !self.healed {
                    let down = skewed(self.fault_rng(FaultKind::NewDiskPromoted), MS, 300 * MS);
                    self.crash_for(n, down, true);
                }
            }
            Fault::Repoint { member } => self.repoint_step(member as usize),
            Fault::Teach { node } => self.teach_step(node as usize),
            Fault::Bounce { node } => {
                let n = node as usize;
                if self.nodes[n].up && !self.healed {
                    self.node_crash(n);
                    self.node_start(n, false);
                }
            }
        }
    }

    fn inject(&mut self, k: FaultKind) {
        let nodes = self.nodes.len();
        let clients = self.sc.clients;
        match k {
            FaultKind::Reset => {
                let c = self.pick(k, clients);
                let m = self.pick(k, self.sc.members);
                if self.clients[c].alive {
                    self.stats.fault(k);
                    self.reset_connection(c, m);
                }
            }
            FaultKind::Partition => {
                let n = self.pick(k, nodes);
                let mask = between(self.fault_rng(k), 1, (1u64 << clients) - 1) as u32;
                let d = skewed(self.fault_rng(k), 20 * MS, 2 * SEC);
                self.stats.fault(k);
                for c in 0..clients {
                    if mask & (1 << c) != 0 {
                        self.cut[n][c] = self.cut[n][c].max(self.now + d);
                    }
                }
            }
            FaultKind::Crash | FaultKind::DiskLoss => {
                let n = self.pick(k, nodes);
                if !self.nodes[n].up {
                    return;
                }
                let empty = k == FaultKind::DiskLoss;
                self.stats.fault(k);
                let down = skewed(self.fault_rng(k), MS, 800 * MS);
                self.crash_for(n, down, empty);
            }
            FaultKind::Failover => {
                // A master dies; the sentinel replaces it with its most
                // advanced replica.
                let m = self.pick(k, self.sc.members);
                let n = self.members[m].master as usize;
                if !self.nodes[n].up || self.nodes[n].failing_over {
                    return;
                }
                self.stats.fault(k);
                let down = between(self.fault_rng(k), 1_000, 3_000) * MS;
                self.crash_for(n, down, false);
            }
            FaultKind::LaggingPromotion => {
                // The master's stream is held back while the members a
                // quorum can do without are cut off, so that grants land on
                // a bare quorum its replicas never see; then it dies and the
                // sentinel promotes its least advanced replica (sometimes
                // restarted inside its promotion window).
                let m = self.pick(k, self.sc.members);
                if !self.may_fail_over(m) {
                    return;
                }
                self.stats.fault(k);
                let hold = skewed(self.fault_rng(k), 20 * MS, 600 * MS);
                self.hold_and_cut(k, m, hold);
                self.after(hold, Ev::Fault(Fault::CrashMaster { member: m as u8 }));
            }
            FaultKind::RaiseFailover => {
                // The operator raises `redlock.max-ttl-ms` on every master
                // (not on the replicas first, as the README asks) while one
                // master's replicas lag behind; the application asks for
                // the longer leases it was raised for at once. That master
                // dies before its replicas applied the announcement of the
                // longer lease or a grant of one, and the sentinel promotes
                // the least advanced: it knows only the older, shorter
                // longest lease (`core/lease_ack_rule.rs` is what stops
                // the longer grants until the replicas acknowledged).
                let m = self.pick(k, self.sc.members);
                let cap = 4 * self.sc.max_ttl_ms;
                if !self.may_fail_over(m) || self.ttl_ceiling_ms >= cap || !self.settled() {
                    return;
                }
                self.stats.fault(k);
                // A replica lagging by up to a few seconds (a slow link, a
                // burst of writes): the master's stream is held that long.
                let hold = skewed(self.fault_rng(k), 100 * MS, 3 * SEC);
                let before = self.ttl_ceiling_ms;
                let raise = between(self.fault_rng(k), before, 3 * before).min(cap - before);
                // The stream is held first: the announcement of the raise
                // waits behind it.
                let n = self.members[m].master as usize;
                self.nodes[n].repl_hold_until = self.now + hold;
                self.promote_lagging[m] = true;
                let cut = self.spares(k, m);
                self.raise_max_ttl(raise);
                let clients = self.sc.clients;
                let longer = between(self.fault_rng(k), 1, (1 << clients) - 2) as u32;
                self.ttl_split = Some((before, longer));
                self.raise_watch[m] = Some(RaiseWatch {
                    node: n as u16,
                    longer_than_ms: before,
                    until: self.now + hold,
                    cut,
                    kind: k,
                });
                self.watch_longer(m);
            }
            FaultKind::NewDiskPromoted => {
                // The operator raises `redlock.max-ttl-ms` on every master
                // only; the application asks for the longer leases at once.
                // Once one master holds a longer lease (its replicas then
                // acknowledged knowing it, the lease-ack rule) it dies, on
                // a bare quorum; the replica promoted in its place loses its
                // disk soon after (`Fault::NewDisk`).
                let m = self.pick(k, self.sc.members);
                let cap = 4 * self.sc.max_ttl_ms;
                if !self.may_fail_over(m)
                    || self.ttl_ceiling_ms >= cap
                    || !self.settled()
                    || self.raise_watch[m].is_some()
                {
                    return;
                }
                self.stats.fault(k);
                let n = self.members[m].master as usize;
                let before = self.ttl_ceiling_ms;
                let raise = between(self.fault_rng(k), before, 3 * before).min(cap - before);
                let cut = self.spares(k, m);
                self.raise_max_ttl(raise);
                let clients = self.sc.clients;
                let longer = between(self.fault_rng(k), 1, (1 << clients) - 2) as u32;
                self.ttl_split = Some((before, longer));
                self.new_disk_next[m] = true;
                self.raise_watch[m] = Some(RaiseWatch {
                    node: n as u16,
                    longer_than_ms: before,
                    until: self.now + 3 * SEC,
                    cut,
                    kind: k,
                });
                self.watch_longer(m);
            }
            FaultKind::SwitchBack
            | FaultKind::SlowRepoint
            | FaultKind::RepointNewDisk
            | FaultKind::SwitchBackNewDisk
            | FaultKind::UntaughtTeaches => self.start_repoint(k),
            FaultKind::LateReplica => self.start_late_replicas(),
            FaultKind::Pause => {
                let n = self.pick(k, nodes);
                if !self.nodes[n].up || self.nodes[n].paused_until.is_some() {
                    return;
                }
                let longest = self.ttl_ceiling_ms * MS * 2;
                let d = skewed(self.fault_rng(k), 5 * MS, longest);
                self.stats.fault(k);
                self.nodes[n].paused_until = Some(self.now + d);
                self.after(d, Ev::Fault(Fault::Resume { node: n as u16 }));
            }
            FaultKind::ClockForward | FaultKind::ClockBack => {
                let n = self.pick(k, nodes);
                let step = skewed(self.fault_rng(k), MS, 3_600 * SEC) as i64;
                let step = if k == FaultKind::ClockForward {
                    step
                } else {
                    -step
                };
                self.stats.fault(k);
                let restart = chance(self.fault_rng(k), 0.4);
                if restart && self.nodes[n].up {
                    // Stepped while the node was down: a restart (a durable
                    // one keeps its leases) on the stepped clock.
                    self.node_crash(n);
                    self.nodes[n].clock.step_wall(step);
                    let down = skewed(self.fault_rng(k), MS, 100 * MS);
                    self.after(
                        down,
                        Ev::Fault(Fault::Restart {
                            node: n as u16,
                            empty: false,
                        }),
                    );
                } else {
                    self.nodes[n].clock.step_wall(step);
                }
            }
            FaultKind::ReplBreak => {
                let n = self.pick(k, nodes);
                let node = &self.nodes[n];
                if !node.up || !node.replica || node.link_down {
                    return;
                }
                self.stats.fault(k);
                let link = self.id();
                self.nodes[n].link = link;
                self.nodes[n].link_down = true;
                let d = skewed(self.fault_rng(k), 10 * MS, SEC);
                self.after(d, Ev::Fault(Fault::ReplRejoin { node: n as u16 }));
            }
            FaultKind::Switchover => {
                let m = self.pick(k, self.sc.members);
                let master = self.members[m].master as usize;
                if !self.nodes[master].up
                    || self.nodes[master].paused_until.is_some()
                    || self.nodes[master].failing_over
                {
                    return;
                }
                let candidates: Vec<usize> = self.members[m]
                    .nodes
                    .iter()
                    .map(|&x| x as usize)
                    .filter(|&x| x != master && self.nodes[x].up && self.nodes[x].replica)
                    .collect();
                if candidates.is_empty() {
                    return;
                }
                let to = candidates[self.pick(k, candidates.len())];
                self.stats.fault(k);
                // FAILOVER: the master holds its clients' writes until the
                // replica has caught up, then they swap.
                self.nodes[master].failing_over = true;
                let give_up = self.now + SEC;
                self.switchover_step(m, to, give_up);
            }
            FaultKind::ConfigRaise => {
                // The operator raises `redlock.max-ttl-ms` on every master
                // (replicas keep theirs); clients then ask for longer
                // leases. A master that is down gets it when it is back.
                if self.ttl_ceiling_ms >= 4 * self.sc.max_ttl_ms {
                    return;
                }
                self.stats.fault(k);
                let most = self.sc.max_ttl_ms;
                let raise = between(self.fault_rng(k), most / 4, most);
                self.raise_max_ttl(raise);
            }
            FaultKind::Duplicate => {
                // A burst: every request of one client gets a late copy
                // (a resending proxy, an alias of the servers).
                let c = self.pick(k, clients);
                let lasting = skewed(self.fault_rng(k), 5 * MS, SEC);
                let late = skewed(self.fault_rng(k), MS, 1_500 * MS);
                self.dup_burst[c] = Some((self.now + lasting, late));
            }
            FaultKind::ClientPause => {
                let c = self.pick(k, clients);
                if !self.clients[c].alive || self.clients[c].paused_until.is_some() {
                    return;
                }
                let longest = 2 * self.ttl_ceiling_ms * MS;
                let d = skewed(self.fault_rng(k), MS, longest);
                self.stats.fault(k);
                self.clients[c].paused_until = Some(self.now + d);
                self.after(d, Ev::Fault(Fault::ClientResume { client: c as u32 }));
            }
            FaultKind::ClientCrash => {
                let c = self.pick(k, clients);
                if !self.clients[c].alive {
                    return;
                }
                self.stats.fault(k);
                self.client_crash(c);
                let d = skewed(self.fault_rng(k), 10 * MS, 500 * MS);
                self.after(d, Ev::Fault(Fault::ClientRestart { client: c as u32 }));
            }
            FaultKind::ClientClockStep => {
                let c = self.pick(k, clients);
                // Within what the clock floor assumes of client clocks: a
                // step lands within 30 ms of the true time (NTP's steps).
                let offset = between(self.fault_rng(k), 0, 60_000) as i64 - 30_000;
                self.stats.fault(k);
                self.clients[c].io.set_wall_offset(offset);
            }
            _ => {}
        }
    }

    /// [`FaultKind::UntaughtTeaches`], after the untaught promotion of node
    /// `s`: its other replica is replaced by a new node (a new disk and a
    /// new configuration, as a replacement machine: it knows only its own
    /// `max-ttl-ms`), which syncs from `s`; once it is online on `s` (taught
    /// by it), `s` dies (and any other replica with it), and the sentinel
    /// promotes the new node.
    fn teach_step(&mut self, s: usize) {
        let k = FaultKind::UntaughtTeaches;
        let m = self.nodes[s].member as usize;
        if self.healed
            || !self.nodes[s].up
            || self.nodes[s].replica
            || self.members[m].master as usize != s
        {
            self.teach[m] = None;
            return;
        }
        let again = Ev::Fault(Fault::Teach { node: s as u16 });
        match self.teach[m] {
            None => {
                let Some(x) = self.members[m]
                    .nodes
                    .iter()
                    .map(|&x| x as usize)
                    .find(|&x| x != s && self.nodes[x].up && self.nodes[x].replica)
                else {
                    return;
                };
                self.node_crash(x);
                let node = &mut self.nodes[x];
                node.max_ttl = self.sc.replica_max_ttl_ms;
                node.promoted_acked = None;
                node.untaught_configured = false;
                node.longest_configured = 0;
                self.node_start(x, true);
                self.teach[m] = Some(x as u16);
                self.heal_not_before = self.heal_not_before.max(self.now + 10 * SEC);
                self.after(5 * MS, again);
            }
            Some(x) => {
                let x = x as usize;
                if !self.nodes[x].up {
                    self.teach[m] = None;
                    return;
                }
                if !self.online_replicas(m, s).contains(&x) {
                    self.after(5 * MS, again);
                    return;
                }
                self.teach[m] = None;
                // The sentinel sees the master down within 100 ms and
                // promotes after `down-after-milliseconds`: any other
                // replica is down until just after that (then it follows the
                // new master, and acknowledges what it grants).
                let down_after = self.sc.down_after_ms * MS;
                let down = down_after + skewed(self.fault_rng(k), 500 * MS, 2 * SEC);
                let others = down_after + 250 * MS + skewed(self.fault_rng(k), MS, 300 * MS);
                self.crash_for(s, down, false);
                for y in self.members[m].nodes.clone() {
                    let y = y as usize;
                    if y != x && y != s && self.nodes[y].up {
                        self.crash_for(y, others, false);
                    }
                }
            }
        }
    }

    /// Whether member `m`'s master may be made to fail over now: it is up,
    /// not switching over, and no lagging promotion is pending for it.
    fn may_fail_over(&self, m: usize) -> bool {
        let n = self.members[m].master as usize;
        self.nodes[n].up && !self.nodes[n].failing_over && !self.promote_lagging[m]
    }

    /// Every master is up and outside its restart or promotion window: a
    /// deployment in its steady state, where an operator changes its
    /// configuration (a raise inside a window lengthens the window).
    fn settled(&self) -> bool {
        self.members.iter().all(|member| {
            let n = member.master as usize;
            let node = &self.nodes[n];
            node.up
                && node
                    .guard
                    .state(self.settings(n), node.mono(self.now))
                    .is_none()
        })
    }

    /// Member `m`'s master holds its replication stream back for `hold`
    /// while the members a quorum can do without are cut off from every
    /// client (so grants land on a bare quorum its replicas never see); the
    /// sentinel will promote its least advanced replica.
    fn hold_and_cut(&mut self, k: FaultKind, m: usize, hold: Time) {
        let clients = self.sc.clients;
        let n = self.members[m].master as usize;
        self.nodes[n].repl_hold_until = self.now + hold;
        let spare = self.sc.members - (self.sc.members / 2 + 1);
        let mut others: Vec<usize> = (0..self.sc.members).filter(|&x| x != m).collect();
        for _ in 0..spare {
            let i = self.pick(k, others.len());
            let x = others.swap_remove(i);
            let node = self.members[x].master as usize;
            let extra = skewed(self.fault_rng(k), MS, 500 * MS);
            for c in 0..clients {
                self.cut[node][c] = self.cut[node][c].max(self.now + hold + extra);
            }
        }
        self.promote_lagging[m] = true;
    }

    /// The members a quorum can do without, other than `m`, as a bit set.
    fn spares(&mut self, k: FaultKind, m: usize) -> u32 {
        let spare = self.sc.members - (self.sc.members / 2 + 1);
        let mut others: Vec<usize> = (0..self.sc.members).filter(|&x| x != m).collect();
        let mut set = 0;
        for _ in 0..spare {
            let i = self.pick(k, others.len());
            set |= 1 << others.swap_remove(i);
        }
        set
    }

    /// Cuts the masters of the members in `set` off from every client
    /// until `until` at least.
    fn cut_members(&mut self, set: u32, until: Time) {
        for x in (0..self.sc.members).filter(|x| set & 1 << x != 0) {
            let node = self.members[x].master as usize;
            for c in 0..self.sc.clients {
                self.cut[node][c] = self.cut[node][c].max(until);
            }
        }
    }

    /// The watch of [`FaultKind::RaiseFailover`] on member `m`, every 5 ms
    /// while the master's replicas lag (the members cut off stay cut off):
    /// once the master holds a lease longer than the longest before the
    /// raise, it dies within a replication lag (before its replicas heard
    /// of it), and the members cut off come back a little later; it dies
    /// anyway when its replicas would catch up.
    fn watch_longer(&mut self, m: usize) {
        const EVERY: Time = 5 * MS;
        let Some(w) = self.raise_watch[m] else {
            return;
        };
        let n = w.node as usize;
        if self.healed || !self.nodes[n].up || self.members[m].master != w.node {
            self.raise_watch[m] = None;
            if matches!(
                w.kind,
                FaultKind::NewDiskPromoted | FaultKind::SwitchBackNewDisk
            ) {
                self.new_disk_next[m] = false;
            }
            if w.kind == FaultKind::UntaughtTeaches {
                self.teach_next[m] = false;
            }
            return;
        }
        let mono = self.nodes[n].mono(self.now);
        let longer = self.nodes[n].keys.iter().flatten().any(|lock| {
            lock.live_deadline(mono)
                .is_some_and(|end| end > mono + w.longer_than_ms)
        });
        // An untaught promotion teaches on what it never heard of only if
        // a client holds that longer lease on a quorum: the watch waits for
        // a validity that lasts longer than the longest before the raise,
        // and its holders pause (a GC pause) until it ends, so that they
        // neither release nor extend while the hole is open.
        let holders = if w.kind == FaultKind::UntaughtTeaches {
            self.checker.claimed_past(self.now + w.longer_than_ms * MS)
        } else {
            Vec::new()
        };
        let longer = longer && (w.kind != FaultKind::UntaughtTeaches || !holders.is_empty());
        if longer {
            for (owner, until) in holders {
                let c = World::client_of(owner);
                if self.clients[c].alive && self.clients[c].paused_until.is_none() {
                    self.clients[c].paused_until = Some(until);
                    let d = until - self.now;
                    self.after(d, Ev::Fault(Fault::ClientResume { client: c as u32 }));
                }
            }
        }
        if !longer && self.now < w.until {
            self.cut_members(w.cut, self.now + EVERY + 1);
            self.after(EVERY, Ev::Fault(Fault::WatchLonger { member: m as u8 }));
            return;
        }
        self.raise_watch[m] = None;
        let k = w.kind;
        let lag = skewed(self.fault_rng(k), MS, 200 * MS).min(w.until.saturating_sub(self.now));
        let back = self.now + lag + skewed(self.fault_rng(k), MS, 300 * MS);
        self.cut_members(w.cut, back);
        self.after(lag, Ev::Fault(Fault::CrashMaster { member: m as u8 }));
    }

    /// `redlock.max-ttl-ms` raised by `raise` on every master (`CONFIG
    /// SET`); a master that is down gets it when it is back.
    fn raise_max_ttl(&mut self, raise: u64) {
        self.ttl_ceiling_ms += raise;
        for m in 0..self.sc.members {
            let n = self.members[m].master as usize;
            self.nodes[n].max_ttl = self.nodes[n].max_ttl.max(self.ttl_ceiling_ms);
            // The raise is written with the copy of the longest lease.
            self.nodes[n].longest_configured =
                self.nodes[n].longest_configured.max(self.nodes[n].max_ttl);
            if self.nodes[n].up {
                self.config_changed(n);
            }
        }
    }

    /// Kills node `n`; it comes back after `down` (on an empty disk when
    /// `empty`).
    fn crash_for(&mut self, n: usize, down: Time, empty: bool) {
        self.node_crash(n);
        self.after(
            down,
            Ev::Fault(Fault::Restart {
                node: n as u16,
                empty,
            }),
        );
    }

    /// A switchover in progress: once the replica has every effect of the
    /// master, they swap; if it cannot catch up in time, the master takes
    /// its clients back.
    fn switchover_step(&mut self, member: usize, to: usize, give_up: Time) {
        let master = self.members[member].master as usize;
        if !self.nodes[master].failing_over {
            return;
        }
        let repl_id = self.nodes[master].repl_id;
        let caught_up = self.nodes[to].up
            && self.nodes[to].replica
            && !self.nodes[to].link_down
            && self.nodes[to].paused_until.is_none()
            && self.nodes[to].following == Some((repl_id, self.nodes[master].backlog.len() as u64));
        if caught_up && self.nodes[master].up {
            self.nodes[master].failing_over = false;
            self.promote(member, to, master);
            self.node_resume_held(master);
        } else if self.now >= give_up || !self.nodes[master].up {
            self.nodes[master].failing_over = false;
            self.node_resume_held(master);
        } else {
            self.after(
                5 * MS,
                Ev::Fault(Fault::Switch {
                    member: member as u8,
                    to: to as u16,
                    give_up,
                }),
            );
        }
    }

    /// What a node held while it was switching over runs now.
    fn node_resume_held(&mut self, n: usize) {
        if self.nodes[n].paused_until.is_some() {
            return;
        }
        self.nodes[n].paused_until = Some(self.now);
        self.node_resume(n);
    }

    /// Starts a sequence of [`FaultKind::SwitchBack`] or
    /// [`FaultKind::SlowRepoint`] on a member whose master is settled with
    /// two replicas online: a switchover to one of them, or its master's
    /// death (down until after the second promotion).
    fn start_repoint(&mut self, k: FaultKind) {
        let m = self.pick(k, self.sc.members);
        let cap = 4 * self.sc.max_ttl_ms;
        if !self.may_fail_over(m)
            || self.repoint[m].is_some()
            || self.raise_watch[m].is_some()
            || self.ttl_ceiling_ms >= cap
            || !self.settled()
        {
            return;
        }
        let master = self.members[m].master as usize;
        let online = self.online_replicas(m, master);
        if online.len() < 2 || self.nodes[master].paused_until.is_some() {
            return;
        }
        self.stats.fault(k);
        let longest = self.ttl_ceiling_ms * MS;
        // Seconds: a full sync that waits for `repl-diskless-sync-delay`
        // and a large snapshot, or Sentinel repointing replicas one at a
        // time (`parallel-syncs 1`); long enough for the new master's
        // window and the raise.
        let slow_for = longest + skewed(self.fault_rng(k), 500 * MS, 3 * SEC);
        let give_up = self.now + 2 * longest + 4 * SEC;
        let last = give_up + slow_for + self.sc.down_after_ms * MS + 500 * MS;
        self.heal_not_before = self.heal_not_before.max(last);
        if matches!(
            k,
            FaultKind::SwitchBack | FaultKind::SwitchBackNewDisk | FaultKind::UntaughtTeaches
        ) {
            let to = online[self.pick(k, online.len())];
            self.repoint[m] = Some(Repoint {
                kind: k,
                stage: RepointStage::Away,
                master: master as u16,
                slow: to as u16,
                slow_for,
                give_up,
                disk_lost: false,
            });
            self.nodes[master].failing_over = true;
            self.switchover_step(m, to, self.now + SEC);
        } else {
            self.repoint[m] = Some(Repoint {
                kind: k,
                stage: RepointStage::Failing,
                master: master as u16,
                slow: master as u16,
                slow_for,
                give_up,
                disk_lost: false,
            });
            let down = slow_for + skewed(self.fault_rng(k), 1_500 * MS, 3 * SEC);
            self.crash_for(master, down, false);
        }
        self.after(5 * MS, Ev::Fault(Fault::Repoint { member: m as u8 }));
    }

    /// [`FaultKind::LateReplica`]: the replicas of the member that started
    /// without them start, once its master is settled; their first full
    /// sync takes seconds (`repl-diskless-sync-delay`, a large snapshot).
    fn start_late_replicas(&mut self) {
        let k = FaultKind::LateReplica;
        let Some(m) = self.late_member else {
            return;
        };
        let cap = 4 * self.sc.max_ttl_ms;
        let master = self.members[m].master as usize;
        if !self.may_fail_over(m)
            || self.repoint[m].is_some()
            || self.raise_watch[m].is_some()
            || self.late_watch.is_some()
            || self.ttl_ceiling_ms >= cap
            || !self.settled()
            || self.nodes[master].paused_until.is_some()
        {
            return;
        }
        self.late_member = None;
        let late: Vec<usize> = self.members[m]
            .nodes
            .iter()
            .map(|&x| x as usize)
            .filter(|&x| x != master && !self.nodes[x].up)
            .collect();
        if late.is_empty() {
            return;
        }
        self.stats.fault(k);
        let sync = skewed(self.fault_rng(k), 300 * MS, 3 * SEC);
        for &r in &late {
            self.sync_extra[r] = sync;
            self.node_start(r, false);
        }
        let give_up = self.now + 100 * MS;
        let last = self.now + sync + 3 * SEC + self.sc.down_after_ms * MS;
        self.heal_not_before = self.heal_not_before.max(last);
        self.repoint[m] = Some(Repoint {
            kind: k,
            stage: RepointStage::Joining,
            master: master as u16,
            slow: late[0] as u16,
            slow_for: sync,
            give_up,
            disk_lost: false,
        });
        self.after(2 * MS, Ev::Fault(Fault::Repoint { member: m as u8 }));
    }

    /// A late replica's first full sync landed on replica `r` (its data
    /// loaded, before it comes online): if its master holds a lease longer
    /// than before the raise, the master dies before the rest of its
    /// stream (its next announcement) reaches the replica.
    pub fn late_sync_landed(&mut self, r: usize) {
        let Some((m, longer_than_ms)) = self.late_watch else {
            return;
        };
        if self.nodes[r].member as usize != m {
            return;
        }
        self.late_watch = None;
        let n = self.members[m].master as usize;
        if !self.nodes[n].up || self.healed {
            return;
        }
        let mono = self.nodes[n].mono(self.now);
        let longer = self.nodes[n].keys.iter().flatten().any(|lock| {
            lock.live_deadline(mono)
                .is_some_and(|end| end > mono + longer_than_ms)
        });
        if longer {
            // It dies as the snapshot lands: the stream it buffered for the
            // replica behind the snapshot (the announcement of the raise)
            // is lost with it.
            self.fault(Fault::CrashMaster { member: m as u8 });
        }
    }

    /// The replicas of member `m` online on master `n`'s stream now.
    fn online_replicas(&self, m: usize, n: usize) -> Vec<usize> {
        let repl_id = self.nodes[n].repl_id;
        self.members[m]
            .nodes
            .iter()
            .map(|&x| x as usize)
            .filter(|&x| {
                let r = &self.nodes[x];
                x != n
                    && r.up
                    && r.replica
                    && !r.link_down
                    && r.paused_until.is_none()
                    && r.acked.is_some_and(|(id, _)| id == repl_id)
            })
            .collect()
    }

    /// A sequence of [`FaultKind::SwitchBack`] or [`FaultKind::SlowRepoint`]
    /// looks at its member again (every 5 ms): the switchover back once the
    /// old master follows the new one, then, after the promotion that
    /// leaves a replica slow to follow, the raise of `max-ttl-ms` and the
    /// watch of [`FaultKind::RaiseFailover`] (the master dies soon after a
    /// longer lease, or when the slow replica would catch up; the sentinel
    /// promotes the least advanced replica, the slow one).
    fn repoint_step(&mut self, m: usize) {
        let Some(mut p) = self.repoint[m] else {
            return;
        };
        if self.healed || self.now > p.give_up {
            self.repoint[m] = None;
            return;
        }
        let again = Ev::Fault(Fault::Repoint { member: m as u8 });
        let (a, b) = (p.slow as usize, p.master as usize);
        match p.stage {
            RepointStage::Joining => {
                // Once a late replica's sync is under way (its snapshot
                // forked), `max-ttl-ms` is raised and the members a quorum
                // can do without are cut off until the sync lands.
                let n = b;
                let repl_id = self.nodes[n].repl_id;
                let syncing = self.nodes[a].up
                    && self.nodes[a].acked.is_none()
                    && self.nodes[a].following.is_some_and(|(id, _)| id == repl_id);
                if !syncing {
                    self.after(MS, again);
                    return;
                }
                self.repoint[m] = None;
                let k = p.kind;
                let cap = 4 * self.sc.max_ttl_ms;
                let before = self.ttl_ceiling_ms;
                if before >= cap {
                    return;
                }
                let raise = between(self.fault_rng(k), before, 3 * before).min(cap - before);
                let cut = self.spares(k, m);
                let back = self.nodes[a].link_last + skewed(self.fault_rng(k), 50 * MS, 300 * MS);
                self.cut_members(cut, back);
                self.raise_max_ttl(raise);
                let clients = self.sc.clients;
                let longer = between(self.fault_rng(k), 1, (1 << clients) - 2) as u32;
                self.ttl_split = Some((before, longer));
                self.late_watch = Some((m, before));
            }
            RepointStage::Away => {
                if self.members[m].master as usize != a {
                    if !self.nodes[b].failing_over {
                        // The switchover gave up.
                        self.repoint[m] = None;
                    } else {
                        self.after(5 * MS, again);
                    }
                    return;
                }
                let repl_id = self.nodes[a].repl_id;
                let len = self.nodes[a].backlog.len() as u64;
                let ready = self.nodes[a].up
                    && !self.nodes[a].failing_over
                    && self.nodes[a].paused_until.is_none()
                    && self.nodes[b].up
                    && self.nodes[b].replica
                    && !self.nodes[b].link_down
                    && self.nodes[b].paused_until.is_none()
                    && self.nodes[b].following == Some((repl_id, len));
                if ready {
                    p.stage = RepointStage::Back;
                    self.repoint[m] = Some(p);
                    self.nodes[a].failing_over = true;
                    self.switchover_step(m, b, self.now + SEC);
                }
                self.after(5 * MS, again);
            }
            RepointStage::Back => {
                // The promotion moves the stage on (`repoint_promoted`).
                if !self.nodes[a].failing_over {
                    self.repoint[m] = None;
                } else {
                    self.after(5 * MS, again);
                }
            }
            RepointStage::Failing => self.after(5 * MS, again),
            RepointStage::Promoted => {
                let n = b;
                // Down for its new disk: waited for (the sequence goes on
                // once it is back, unless the sentinel promoted another).
                let back_soon = p.disk_lost && !self.nodes[n].up;
                if self.members[m].master as usize != n || !(self.nodes[n].up || back_soon) {
                    self.repoint[m] = None;
                    return;
                }
                if p.kind == FaultKind::RepointNewDisk && !p.disk_lost {
                    // The new master loses its disk before the raise.
                    p.disk_lost = true;
                    self.repoint[m] = Some(p);
                    let k = p.kind;
                    let after = skewed(self.fault_rng(k), MS, 300 * MS);
                    self.after(after, Ev::Fault(Fault::NewDisk { node: n as u16 }));
                    self.after(after + 5 * MS, again);
                    return;
                }
                let waits = back_soon
                    || self.nodes[n].in_window(self.settings(n), self.now)
                    || self.nodes[n].paused_until.is_some()
                    || (matches!(
                        p.kind,
                        FaultKind::SwitchBack
                            | FaultKind::SwitchBackNewDisk
                            | FaultKind::UntaughtTeaches
                    ) && self.online_replicas(m, n).is_empty());
                if waits {
                    self.after(5 * MS, again);
                    return;
                }
                self.repoint[m] = None;
                let k = p.kind;
                let cap = 4 * self.sc.max_ttl_ms;
                let before = self.ttl_ceiling_ms;
                if before >= cap || self.raise_watch[m].is_some() {
                    return;
                }
                let raise = between(self.fault_rng(k), before, 3 * before).min(cap - before);
                self.promote_lagging[m] = true;
                let cut = self.spares(k, m);
                self.raise_max_ttl(raise);
                let clients = self.sc.clients;
                let longer = between(self.fault_rng(k), 1, (1 << clients) - 2) as u32;
                self.ttl_split = Some((before, longer));
                // The replica promoted next (the slow one, in its full
                // sync) loses its disk soon after.
                self.new_disk_next[m] = k == FaultKind::SwitchBackNewDisk;
                // Or its other replica is replaced by a new node that it
                // teaches (`Fault::Teach`).
                self.teach_next[m] = k == FaultKind::UntaughtTeaches;
                self.raise_watch[m] = Some(RaiseWatch {
                    node: n as u16,
                    longer_than_ms: before,
                    until: self.slow_until[a].max(self.now),
                    cut,
                    kind: k,
                });
                self.watch_longer(m);
            }
        }
    }

    /// Node `to` is promoted in place of `old` on member `m`: when that is
    /// the promotion of a sequence under way, the replica it leaves slow to
    /// follow (connecting no earlier than `slow_until`), and whether that
    /// replica is pointed at `to` already (a switch-back: it names its new
    /// master while its full sync waits) or still names `old` (Sentinel
    /// has not repointed it yet).
    pub fn repoint_promoted(&mut self, m: usize, to: usize, old: usize) -> Option<(usize, bool)> {
        let mut p = self.repoint[m]?;
        let (slow, pointed) = match p.stage {
            RepointStage::Back if to == p.master as usize && old == p.slow as usize => (old, true),
            RepointStage::Failing if old == p.master as usize => {
                let other = self.members[m]
                    .nodes
                    .iter()
                    .map(|&x| x as usize)
                    .find(|&x| x != to && x != old && self.nodes[x].up);
                match other {
                    Some(x) => (x, false),
                    None => {
                        self.repoint[m] = None;
                        return None;
                    }
                }
            }
            _ => return None,
        };
        p.stage = RepointStage::Promoted;
        p.master = to as u16;
        p.slow = slow as u16;
        self.slow_until[slow] = self.now + p.slow_for;
        self.repoint[m] = Some(p);
        Some((slow, pointed))
    }

    /// `CONFIG SET redlock.max-ttl-ms` raised it (`events.rs::on_config_change`):
    /// the new length is recorded and announced.
    fn config_changed(&mut self, n: usize) {
        let durable = self.nodes[n].durable();
        if let Some(record) = self.nodes[n].guard.on_config_change(durable) {
            self.nodes[n].disk.run_state = Some(record);
        }
        let max_ttl = self.nodes[n].max_ttl;
        self.record_lease_now(n, max_ttl);
    }
}
