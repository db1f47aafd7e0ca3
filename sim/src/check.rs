//! The checkers, online, against true time.
//!
//! Safety, at every step:
//! - **overlap**: at no moment do two owners of one lock both hold a
//!   validity that has not run out (a client's validity is its deadline on
//!   its own clock, read in true time; a release, a report of loss or a
//!   crash ends it);
//! - **revived**: a validity that has run out never comes back (an
//!   extension confirmed after it would make the lock valid again after a
//!   gap in which another owner may have held it);
//! - **token order**: an acquisition whose attempt started after another
//!   acquisition of the same lock completed gets a higher token, and no
//!   token is issued to two acquisitions;
//! - **resource**: the protected resource never accepts a token lower than
//!   one it accepted.
//!
//! Liveness, once the faults have healed and everything in flight has
//! landed:
//! - **wake-up**: while a client waits and the lock is free on a quorum of
//!   members that grant, a waiter gets the lock within a bound (no lost
//!   wake-up);
//! - **release**: once a release (or the release of a failed attempt's
//!   grants) is done, no member holds the lock for that owner;
//! - **end**: at the end of the run no member holds a lease nobody claims.

use std::collections::BTreeMap;

use crate::time::{Time, MS, SEC};
use crate::world::Owner;

/// A violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// When it was seen (true time).
    pub at: Time,
    /// Which checker.
    pub kind: &'static str,
    /// What was seen.
    pub what: String,
}

/// A holder's claim: from its acquisition to the end of its validity.
#[derive(Clone, Debug)]
struct Claim {
    owner: Owner,
    token: u64,
    from: Time,
    until: Time,
}

/// The bound on a lost wake-up: a waiter gets a lock that is free on a
/// quorum within this.
pub const WAKE_BOUND: Time = 2 * SEC;

/// The checkers' state.
#[derive(Debug, Default)]
pub struct Checker {
    claims: Vec<Vec<Claim>>,
    attempts: BTreeMap<Owner, Time>,
    owners: BTreeMap<Owner, u8>,
    /// Per key: (completed at, token) in completion order, with the running
    /// maximum of the tokens.
    completed: Vec<Vec<(Time, u64, u64)>>,
    tokens: Vec<BTreeMap<u64, Owner>>,
    resource_high: Vec<u64>,
    waiting: Vec<Vec<usize>>,
    free_since: Vec<Option<Time>>,
    last_acquired: Vec<Time>,
    /// What was found, the first first.
    pub violations: Vec<Violation>,
}

impl Checker {
    /// Checkers for `keys` lock names over `members` members.
    pub fn new(keys: usize, _members: usize) -> Checker {
        Checker {
            claims: vec![Vec::new(); keys],
            completed: vec![Vec::new(); keys],
            tokens: vec![BTreeMap::new(); keys],
            resource_high: vec![0; keys],
            waiting: vec![Vec::new(); keys],
            free_since: vec![None; keys],
            last_acquired: vec![0; keys],
            ..Checker::default()
        }
    }

    /// Records a violation.
    pub fn violate(&mut self, at: Time, what: String) {
        self.push(at, "simulator", what);
    }

    /// Records a violation of the checker `kind`.
    pub fn violate_kind(&mut self, at: Time, kind: &'static str, what: String) {
        self.push(at, kind, what);
    }

    fn push(&mut self, at: Time, kind: &'static str, what: String) {
        if self.violations.len() < 50 {
            self.violations.push(Violation { at, kind, what });
        }
    }

    /// An attempt of `owner` on `key` starts at `now`.
    pub fn attempt_start(&mut self, key: u8, owner: Owner, now: Time) {
        self.attempts.insert(owner, now);
        self.owners.insert(owner, key);
    }

    /// `owner` acquired `key` with `token` at `now`, valid until `until`.
    pub fn acquired(&mut self, key: u8, owner: Owner, token: u64, now: Time, until: Time) {
        let k = key as usize;
        self.last_acquired[k] = now;
        self.free_since[k] = None;
        // Token order: every acquisition that completed before this attempt
        // started has a lower token.
        let started = self.attempts.get(&owner).copied().unwrap_or(now);
        let done = &self.completed[k];
        let before = done.partition_point(|&(at, _, _)| at < started);
        let earlier = (before > 0).then(|| done[before - 1]);
        let high_so_far = done.last().map_or(token, |&(_, _, h)| h.max(token));
        if let Some((at, _, high)) = earlier {
            if high >= token {
                self.push(
                    now,
                    "token order",
                    format!(
                        "key {k}: owner {owner:#x} got token {token}, but token {high} was handed out by an acquisition completed at {at} µs, before this attempt started at {started} µs"
                    ),
                );
            }
        }
        if let Some(other) = self.tokens[k].insert(token, owner) {
            self.push(
                now,
                "duplicate token",
                format!(
                    "key {k}: token {token} issued to owner {other:#x} and to owner {owner:#x}"
                ),
            );
        }
        self.completed[k].push((now, token, high_so_far));
        // Claims that ended long ago go; a recent one is kept to tell a
        // late extension that would revive it ("revived").
        self.claims[k].retain(|c| c.until + 10 * SEC > now);
        self.claims[k].push(Claim {
            owner,
            token,
            from: now,
            until,
        });
        self.check_overlap(k, owner, now);
    }

    /// `owner`'s validity ends at `until` from `now` on.
    pub fn deadline(&mut self, owner: Owner, now: Time, until: Time) {
        let Some(&key) = self.owners.get(&owner) else {
            return;
        };
        let k = key as usize;
        let Some(claim) = self.claims[k].iter_mut().find(|c| c.owner == owner) else {
            return;
        };
        let raised = until > claim.until;
        let ended = claim.until;
        claim.until = until;
        if raised && until > now && ended <= now {
            // A validity that ended may not come back: in the gap another
            // owner may have held the lock, on nodes that have forgotten
            // it since (client/src/core/lease.rs, the lapse rule).
            let token = claim.token;
            self.push(
                now,
                "revived",
                format!(
                    "key {k}: owner {owner:#x} (token {token}) had no validity left from {ended} µs, and an extension confirmed at {now} µs gave it validity until {until} µs"
                ),
            );
        }
        if raised && until > now {
            self.check_overlap(k, owner, now);
        }
    }

    fn check_overlap(&mut self, k: usize, owner: Owner, now: Time) {
        let Some(mine) = self.claims[k].iter().find(|c| c.owner == owner).cloned() else {
            return;
        };
        if mine.until <= now {
            return;
        }
        let others: Vec<Claim> = self.claims[k]
            .iter()
            .filter(|c| c.owner != owner && c.until > now)
            .cloned()
            .collect();
        for other in others {
            self.push(
                now,
                "overlap",
                format!(
                    "key {k}: owner {:#x} (token {}) holds a validity until {} µs while owner {:#x} (token {}, since {} µs) still holds one until {} µs",
                    mine.owner, mine.token, mine.until, other.owner, other.token, other.from, other.until
                ),
            );
        }
    }

    /// Client `c` is gone: it uses nothing any more.
    pub fn client_gone(&mut self, c: usize, now: Time) {
        for claims in &mut self.claims {
            for claim in claims.iter_mut() {
                if crate::world::World::client_of(claim.owner) == c && claim.until > now {
                    claim.until = now;
                }
            }
        }
        for w in &mut self.waiting {
            w.retain(|&x| x != c);
        }
    }

    /// The resource saw `token` for `key` and accepted it or not.
    pub fn resource(&mut self, key: u8, token: u64, accepted: bool, now: Time) {
        let k = key as usize;
        if !accepted {
            return;
        }
        if token < self.resource_high[k] {
            self.push(
                now,
                "stale accepted",
                format!(
                    "key {k}: the resource accepted token {token} after it had accepted {}",
                    self.resource_high[k]
                ),
            );
        }
        self.resource_high[k] = self.resource_high[k].max(token);
    }

    /// Client `c` starts or stops waiting for `key`.
    pub fn waiting(&mut self, key: u8, c: usize, on: bool, _now: Time) {
        let w = &mut self.waiting[key as usize];
        if on {
            if !w.contains(&c) {
                w.push(c);
            }
        } else {
            w.retain(|&x| x != c);
        }
    }

    /// The periodic liveness look: `free[k]` says whether key `k` is free
    /// on a quorum of members that grant now.
    pub fn waiters(&mut self, free: &[bool], now: Time) {
        for (k, &is_free) in free.iter().enumerate() {
            let waiting = !self.waiting[k].is_empty();
            if !(is_free && waiting) {
                self.free_since[k] = None;
                continue;
            }
            let since = *self.free_since[k].get_or_insert(now);
            if now >= since + WAKE_BOUND && self.last_acquired[k] < since {
                self.push(
                    now,
                    "lost wake-up",
                    format!(
                        "key {k}: free on a quorum since {since} µs while clients {:?} wait, and nobody got it for {} ms",
                        self.waiting[k],
                        (now - since) / MS
                    ),
                );
                self.free_since[k] = None;
            }
        }
    }

    /// After a release by `owner` (quiet phase): `holding` members still
    /// hold `key` for it.
    pub fn released(&mut self, key: u8, owner: Owner, holding: usize, now: Time) {
        if holding > 0 {
            self.push(
                now,
                "grant left",
                format!(
                    "key {key}: {holding} member(s) still hold the lock for owner {owner:#x} after its release"
                ),
            );
        }
    }

    /// The owners that claim a validity lasting past `t`, with its end.
    pub fn claimed_past(&self, t: Time) -> Vec<(Owner, Time)> {
        self.claims
            .iter()
            .flatten()
            .filter(|c| c.until > t)
            .map(|c| (c.owner, c.until))
            .collect()
    }

    /// Whether `owner` claims a validity at `now`.
    pub fn claims(
        &self,
        key: usize,
        owner_hash_matches: impl Fn(Owner) -> bool,
        now: Time,
    ) -> bool {
        self.claims[key]
            .iter()
            .any(|c| c.until > now && owner_hash_matches(c.owner))
    }

    /// The run ended at `end`.
    pub fn finish(&mut self, _end: Time) {}
}
