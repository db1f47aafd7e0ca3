//! The liveness checks of the quiet phase (see `check.rs`), which need the
//! nodes' true state.

use crate::node::owner_hash;
use crate::time::{Time, MS};
use crate::world::{CheckEv, Ev, World};

impl World {
    /// Whether member `m` would grant `key` at true time `t`: its master is
    /// up, outside its guard window, and the key is not held there.
    fn member_free(&self, m: usize, key: usize, t: Time) -> bool {
        let n = self.members[m].master as usize;
        let node = &self.nodes[n];
        // A master configured for shorter leases than the clients ask for
        // (a replica promoted with its own smaller max-ttl-ms) refuses them.
        node.up
            && node.max_ttl >= self.ttl_ceiling_ms
            && !node.replica
            && node.paused_until.is_none()
            && !node.in_window(self.settings(n), t)
            && node.holder(key, t).is_none()
    }

    /// A liveness check.
    pub fn liveness_check(&mut self, c: CheckEv) {
        match c {
            CheckEv::Released { key, owner } => {
                let hash = owner_hash(owner);
                let now = self.now;
                let holding = (0..self.sc.members)
                    .filter(|&m| {
                        let n = self.members[m].master as usize;
                        self.nodes[n].holder(key as usize, now) == Some(hash)
                    })
                    .count();
                self.checker.released(key, owner, holding, now);
            }
            CheckEv::Waiters => {
                let q = self.sc.members / 2 + 1;
                let now = self.now;
                let free: Vec<bool> = (0..self.sc.keys)
                    .map(|k| {
                        (0..self.sc.members)
                            .filter(|&m| self.member_free(m, k, now))
                            .count()
                            >= q
                    })
                    .collect();
                self.checker.waiters(&free, now);
                if now + 20 * MS < self.end_at {
                    self.after(20 * MS, Ev::Check(CheckEv::Waiters));
                }
            }
        }
    }

    /// At the end: no member holds a lease that no client claims.
    pub fn final_check(&mut self) {
        let now = self.now;
        for k in 0..self.sc.keys {
            for m in 0..self.sc.members {
                let n = self.members[m].master as usize;
                let Some(holder) = self.nodes[n].holder(k, now) else {
                    continue;
                };
                let claimed = self
                    .checker
                    .claims(k, |owner| owner_hash(owner) == holder, now);
                if !claimed {
                    self.checker.violate_kind(
                        now,
                        "lease left",
                        format!(
                            "key {k}: member {m} still holds a lease at the end of the run that no client claims"
                        ),
                    );
                }
            }
        }
    }
}
