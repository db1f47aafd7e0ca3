//! The network between clients and nodes: latency, and during the fault
//! phase the faults the seed enables (a message held up, lost, copied late,
//! overtaken, a connection reset, a node cut off from some clients).
//!
//! Each client has one connection per member, which delivers in order
//! (TCP): a message held up holds up the ones behind it. A reset makes a new
//! connection; what was in flight on the old one may still land (it reached
//! the server's socket) or be lost, and its replies are lost. `REDLOCK.WAIT`
//! goes on connections of its own. A late copy of a request (a resending
//! cluster connection, an alias of the server) and a request overtaken by
//! later ones do not keep the order.

use crate::rng::{between, chance, skewed};
use crate::scenario::FaultKind;
use crate::time::{Time, MS, SEC};
use crate::world::{Cmd, Ev, Reply, Req, World};

/// The latest a held-up message or a late copy lands after it was sent.
pub const MAX_LATE: Time = 3 * SEC;

impl World {
    fn latency(&mut self) -> Time {
        let (lo, hi) = self.sc.latency_us;
        skewed(&mut self.net_rng, lo, hi)
    }

    fn faulty(&self) -> bool {
        !self.healed
    }

    /// Client `c` sends `cmd` to member `member` for its round `round`, on
    /// its connection to that member (`blocking`: on a connection of its
    /// own, as `REDLOCK.WAIT`). Returns the connection used.
    pub fn send(
        &mut self,
        c: usize,
        life: u32,
        member: usize,
        round: u64,
        cmd: Cmd,
        blocking: bool,
    ) -> u64 {
        self.stats.commands_sent += 1;
        let node = self.members[member].master;
        let conn = if blocking {
            self.id()
        } else {
            self.conns[c][member].id
        };
        let req = Req {
            client: c as u32,
            life,
            round,
            member: member as u8,
            node,
            conn,
            cmd,
            copy: false,
            blocking,
        };
        let mut arrival = self.now + self.latency();
        if self.faulty() {
            if self.cut[node as usize][c] > self.now {
                return conn;
            }
            if chance(&mut self.net_rng, self.sc.rate(FaultKind::DropRequest)) {
                self.stats.fault(FaultKind::DropRequest);
                return conn;
            }
            if chance(&mut self.net_rng, self.sc.rate(FaultKind::Duplicate)) {
                self.stats.fault(FaultKind::Duplicate);
                let late = skewed(&mut self.net_rng, MS, MAX_LATE);
                self.at(arrival + late, Ev::AtNode(Req { copy: true, ..req }));
            }
            if let Some((until, late)) = self.dup_burst[c] {
                if self.now < until && !blocking {
                    self.stats.fault(FaultKind::Duplicate);
                    let jitter = between(&mut self.net_rng, 0, 500);
                    self.at(
                        arrival + late + jitter,
                        Ev::AtNode(Req { copy: true, ..req }),
                    );
                }
            }
            if chance(&mut self.net_rng, self.sc.rate(FaultKind::Reorder)) && !blocking {
                // Sent over an older connection: later requests overtake it.
                self.stats.fault(FaultKind::Reorder);
                let late = skewed(&mut self.net_rng, 100, 50 * MS);
                self.at(arrival + late, Ev::AtNode(req));
                return conn;
            }
            if chance(&mut self.net_rng, self.sc.rate(FaultKind::Delay)) {
                self.stats.fault(FaultKind::Delay);
                arrival += skewed(&mut self.net_rng, MS, MAX_LATE / 2);
            }
        }
        if !blocking {
            let slot = &mut self.conns[c][member];
            arrival = arrival.max(slot.last_request + 1);
            slot.last_request = arrival;
        }
        self.at(arrival, Ev::AtNode(req));
        conn
    }

    /// A node answers `req`.
    pub fn reply(&mut self, req: &Req, reply: Reply) {
        if req.copy {
            return;
        }
        let c = req.client as usize;
        let m = req.member as usize;
        if !req.blocking && req.conn != self.conns[c][m].id {
            // The connection is gone.
            return;
        }
        let mut arrival = self.now + self.latency();
        if self.faulty() {
            if self.cut[req.node as usize][c] > self.now {
                return;
            }
            if chance(&mut self.net_rng, self.sc.rate(FaultKind::DropReply)) {
                self.stats.fault(FaultKind::DropReply);
                return;
            }
            if chance(&mut self.net_rng, self.sc.rate(FaultKind::Delay)) {
                self.stats.fault(FaultKind::Delay);
                arrival += skewed(&mut self.net_rng, MS, MAX_LATE / 2);
            }
        }
        if !req.blocking {
            let slot = &mut self.conns[c][m];
            arrival = arrival.max(slot.last_reply + 1);
            slot.last_reply = arrival;
        }
        self.at(
            arrival,
            Ev::AtClient {
                client: req.client,
                life: req.life,
                round: req.round,
                member: req.member,
                conn: req.conn,
                reply,
            },
        );
    }

    /// Whether a request that reaches its node on a connection that was
    /// reset meanwhile runs (it reached the server before the reset) or is
    /// lost.
    pub fn stale_request_runs(&mut self, req: &Req) -> bool {
        if req.blocking || req.copy {
            return true;
        }
        let current = self.conns[req.client as usize][req.member as usize].id;
        req.conn == current || between(&mut self.net_rng, 0, 1) == 0
    }

    /// Resets client `c`'s connection to member `m`: a new connection;
    /// what was in flight on the old one fails at the client (or is resent
    /// by a member that resends).
    pub fn reset_connection(&mut self, c: usize, m: usize) {
        let id = self.id();
        let slot = &mut self.conns[c][m];
        slot.id = id;
        slot.last_request = self.now;
        slot.last_reply = self.now;
        self.client_connection_reset(c, m);
    }
}
