//! Counts of one run, added up over a swarm.

use crate::scenario::FaultKind;

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Faults injected, by kind.
    pub faults: [u64; FaultKind::ALL.len()],
    /// Lock commands the clients sent.
    pub commands_sent: u64,
    /// Lock commands the nodes ran (ACQUIRE, RELEASE, EXTEND, FENCE, WAIT).
    pub node_commands: u64,
    /// Grants and renewals on the nodes.
    pub grants: u64,
    /// Acquisitions that succeeded at a client.
    pub acquisitions: u64,
    /// ACQUIREs refused by the restart or promotion guard.
    pub grace_refused: u64,
    /// Lock writes a master refused for a lease longer than its replicas
    /// acknowledged knowing.
    pub lease_ack_refused: u64,
    /// Blocked waiters woken.
    pub wakeups: u64,
    /// Replicas promoted.
    pub promotions: u64,
    /// Records reclaimed.
    pub reclaimed: u64,
    /// Replication effects applied by replicas.
    pub repl_applied: u64,
    /// Fenced operations the resource accepted.
    pub resource_accepted: u64,
    /// Fenced operations the resource refused (stale tokens).
    pub resource_refused: u64,
    /// Renewals (the holder's ACQUIRE again) that found a longer lease.
    pub renewals_shorter: u64,
    /// EXTENDs that shortened a live lease.
    pub extends_shorter: u64,
    /// Duplicate copies that reached a node.
    pub copies_landed: u64,
    /// Promotions whose window is shorter than the leases clients ask for.
    pub short_windows: u64,
}

impl Stats {
    /// One fault of kind `k`.
    pub fn fault(&mut self, k: FaultKind) {
        self.faults[k.index()] += 1;
    }

    /// Adds `other` to these.
    pub fn add(&mut self, other: &Stats) {
        for (a, b) in self.faults.iter_mut().zip(other.faults) {
            *a += b;
        }
        self.commands_sent += other.commands_sent;
        self.node_commands += other.node_commands;
        self.grants += other.grants;
        self.acquisitions += other.acquisitions;
        self.grace_refused += other.grace_refused;
        self.lease_ack_refused += other.lease_ack_refused;
        self.wakeups += other.wakeups;
        self.promotions += other.promotions;
        self.reclaimed += other.reclaimed;
        self.repl_applied += other.repl_applied;
        self.resource_accepted += other.resource_accepted;
        self.resource_refused += other.resource_refused;
        self.renewals_shorter += other.renewals_shorter;
        self.extends_shorter += other.extends_shorter;
        self.copies_landed += other.copies_landed;
        self.short_windows += other.short_windows;
    }
}
