//! The lock state machine, independent of Redis.
//!
//! Every operation takes the current time as a number of milliseconds on a
//! monotonic clock (`now`). A lease is a deadline on that clock. The caller
//! (the command layer) owns the clock; tests drive it by hand.
//!
//! Invariants kept by every method:
//! - `counter` never decreases, and grows by at least 1 at every free → held
//!   transition, so every grant carries a token no other grant of this key had;
//! - at most one owner holds the lock at any instant;
//! - a refused operation (error or no-op reply) leaves the state untouched.

use crate::core::mutant::{Mutant, Mutants};
pub use crate::core::owner::OwnerHash;

/// Largest token the counter may reach (tokens are RESP integers).
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// Longest accepted owner id, in bytes.
pub const MAX_OWNER_LEN: usize = 256;

/// How far a `FLOOR` or FENCE token may be ahead of the node's wall clock in
/// microseconds (one day). A client whose clock is broken must not be able
/// to push a key's counter to the end of its range; counters that are not
/// clock readings (1, 2, 3, …) stay far below this.
pub const MAX_AHEAD_US: u64 = 86_400_000_000;

/// Whether a `FLOOR` or FENCE token is acceptable at node wall clock
/// `wall_us` (microseconds since the epoch): at most [`MAX_AHEAD_US`] ahead.
pub fn token_within_reach(token: u64, wall_us: u64) -> bool {
    token <= wall_us.saturating_add(MAX_AHEAD_US)
}

/// How far behind the node's wall clock a `FLOOR` may be and still count as
/// a clock reading (one day, as far as it may be ahead).
pub const MAX_BEHIND_US: u64 = 86_400_000_000;

/// Whether `floor` is a clock reading at node wall clock `wall_us`: within
/// [`MAX_BEHIND_US`] behind it (it is never more than [`MAX_AHEAD_US`] ahead,
/// see [`token_within_reach`]). Only a grant with such a floor marks a record
/// reclaimable: a small floor (5) says nothing about later clients' floors.
pub fn clock_like(floor: u64, wall_us: u64) -> bool {
    floor > 0 && floor.saturating_add(MAX_BEHIND_US) >= wall_us
}

/// A point in time, in milliseconds on the node's monotonic clock.
pub type MonoMillis = u64;

/// The state of one lock name: the fencing counter, the current lease, and
/// what reclaiming an idle record needs (see [`LockState::reclaimable`]).
///
/// No heap: the owner is kept as its fixed-size hash. What Redis stores is
/// the compact form of [`crate::core::record`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockState {
    counter: u64,
    /// Monotonic deadline of the lease; 0 when released (or never held).
    deadline: MonoMillis,
    /// Hash of the holder; all zero when released.
    owner: OwnerHash,
    /// When a RELEASE freed the lock (monotonic); meaningful only without a lease.
    freed_at: MonoMillis,
    /// The last grant carried a clock-like `FLOOR` ([`clock_like`]).
    floored: bool,
}

/// The thresholds of the reclamation rule (DESIGN §8), in force now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclaimRule {
    /// `redlock.reclaim-after-ms`; 0 = never reclaim.
    pub after_ms: u64,
    /// The longest lease this node may have granted (at least `redlock.max-ttl-ms`).
    pub longest_lease_ms: u64,
}

/// What an ACQUIRE did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lock was free: a new token was issued.
    Granted {
        /// The new token.
        token: u64,
        /// The lock was taken over from a lease that had run out unreleased.
        took_over_expired: bool,
    },
    /// The caller already held the lock: the lease was renewed, same token.
    Renewed {
        /// The current token.
        token: u64,
    },
    /// Another owner holds a live lease.
    Busy,
}

/// The hand-off reservation an ACQUIRE meets on this node: the glue reads it
/// from the lock's waiter queue ([`crate::core::queue::Queue::take`]) and passes it
/// to [`LockState::acquire_reserved`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// No live reservation.
    None,
    /// The free lock is reserved for the caller (its ACQUIRE ends the
    /// reservation).
    ForCaller,
    /// The free lock is reserved for another owner, a queued waiter.
    ForOther,
}

/// A refused lock operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockError {
    /// The counter would pass [`MAX_TOKEN`].
    CounterExhausted,
}

/// What INSPECT shows: never the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// A live lease exists.
    pub held: bool,
    /// Milliseconds left on the lease, `None` when not held.
    pub pttl: Option<u64>,
    /// The fencing counter.
    pub token: u64,
}

impl LockState {
    /// Rebuilds a state from its parts (loading, replication). `None` as
    /// owner means free; `deadline` is ignored then. A free lock counts as
    /// idle since `idle_since` (monotonic); a leased one is idle from the
    /// end of its lease.
    pub fn from_parts(
        counter: u64,
        owner: Option<OwnerHash>,
        deadline: MonoMillis,
        idle_since: MonoMillis,
        floored: bool,
    ) -> Self {
        match owner {
            Some(owner) if deadline != 0 => Self {
                counter,
                deadline,
                owner,
                freed_at: 0,
                floored,
            },
            _ => Self {
                counter,
                deadline: 0,
                owner: OwnerHash::default(),
                freed_at: idle_since,
                floored,
            },
        }
    }

    /// A lock name that has no record on this node, where records with
    /// counters up to `reclaimed` were deleted by reclamation (0 when none
    /// was): its first grant issues a token above `reclaimed`, whatever FLOOR
    /// the client sends, so reclamation never lets a token go back on this
    /// node (DESIGN §8).
    pub fn missing(reclaimed: u64) -> Self {
        Self {
            counter: reclaimed.min(MAX_TOKEN),
            ..Self::default()
        }
    }

    /// Whether the last grant carried a clock-like `FLOOR`.
    pub fn floored(&self) -> bool {
        self.floored
    }

    /// The owner hash and deadline of the lease (live or run out) that was
    /// granted and neither released nor taken over since.
    pub fn lease(&self) -> Option<(&OwnerHash, MonoMillis)> {
        self.has_lease().then_some((&self.owner, self.deadline))
    }

    /// The monotonic instant from which the lock counts as unchanged: the
    /// end of its lease, or the RELEASE that freed it. Every change (grant,
    /// renewal, EXTEND, FENCE under a lease, RELEASE) moves it forward or
    /// happens before it.
    pub fn idle_since(&self) -> MonoMillis {
        if self.has_lease() {
            self.deadline
        } else {
            self.freed_at
        }
    }

    /// DESIGN §8: may this record be deleted at monotonic `now` and node
    /// wall clock `wall_us` (microseconds)? Only when every condition holds:
    /// free; unchanged for `after_ms` and for the longest lease; the last
    /// grant carried a FLOOR; the counter at most `wall_us - after_ms·1000`.
    ///
    /// Why it is safe: the next acquisition's FLOOR is its client's clock,
    /// so it exceeds this counter unless clocks disagree by `after_ms`; a
    /// grant whose floor was read before the lock went idle is covered by
    /// the idle time exceeding every lease (its validity check fails first).
    pub fn reclaimable(&self, rule: ReclaimRule, now: MonoMillis, wall_us: u64) -> bool {
        if rule.after_ms == 0 || !self.floored || self.is_held(now) {
            return false;
        }
        let idle = now.saturating_sub(self.idle_since());
        let after_us = rule.after_ms.saturating_mul(1000);
        idle >= rule.after_ms
            && idle >= rule.longest_lease_ms
            && wall_us >= after_us
            && self.counter <= wall_us - after_us
    }

    /// The fencing counter: the highest token issued or fenced in.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// The holder, when a lease is live at `now`.
    pub fn holder(&self, now: MonoMillis) -> Option<&OwnerHash> {
        self.is_held(now).then_some(&self.owner)
    }

    /// The lease deadline, when a lease is live at `now`.
    pub fn live_deadline(&self, now: MonoMillis) -> Option<MonoMillis> {
        self.is_held(now).then_some(self.deadline)
    }

    /// A live lease exists at `now`.
    pub fn is_held(&self, now: MonoMillis) -> bool {
        now < self.deadline
    }

    fn is_held_by(&self, owner: &OwnerHash, now: MonoMillis) -> bool {
        self.is_held(now) && self.owner == *owner
    }

    /// A lease was granted and neither released nor taken over since
    /// (it may have run out).
    fn has_lease(&self) -> bool {
        self.deadline != 0
    }

    /// ACQUIRE: take a free lock with a new token `max(counter + 1, floor)`,
    /// renew the caller's own live lease (same token, `counter = max(counter,
    /// floor)`, the lease never shorter than it was),
    /// or report [`Acquired::Busy`]. `wall_us` is the node's wall clock in
    /// microseconds: a grant marks the record reclaimable only when its floor
    /// is a clock reading ([`clock_like`]).
    pub fn acquire(
        &mut self,
        owner: &OwnerHash,
        ttl: u64,
        floor: u64,
        now: MonoMillis,
        wall_us: u64,
    ) -> Result<Acquired, LockError> {
        self.acquire_mutated(Mutants::NONE, owner, ttl, floor, now, wall_us)
    }

    /// [`LockState::acquire`] with the mutants of a test build or the
    /// simulator ([`Mutant::RenewalShortens`]).
    pub fn acquire_mutated(
        &mut self,
        mutants: Mutants,
        owner: &OwnerHash,
        ttl: u64,
        floor: u64,
        now: MonoMillis,
        wall_us: u64,
    ) -> Result<Acquired, LockError> {
        let deadline = now.saturating_add(ttl);
        if self.is_held_by(owner, now) {
            self.counter = self.counter.max(floor.min(MAX_TOKEN));
            // A renewal never shortens a live lease: a late copy of the
            // holder's own ACQUIRE (resent by a cluster connection, or sent
            // to an alias of this server) must not end a lease the holder
            // has extended since. EXTEND still sets any length.
            self.deadline = if mutants.on(Mutant::RenewalShortens) {
                deadline
            } else {
                self.deadline.max(deadline)
            };
            return Ok(Acquired::Renewed {
                token: self.counter,
            });
        }
        if self.is_held(now) {
            return Ok(Acquired::Busy);
        }
        if self.counter >= MAX_TOKEN {
            return Err(LockError::CounterExhausted);
        }
        let took_over_expired = self.has_lease();
        self.counter = (self.counter + 1).max(floor.min(MAX_TOKEN));
        self.owner = *owner;
        self.floored = clock_like(floor, wall_us);
        // `now` is at least 1 on the module's clock, so the deadline is never
        // 0 (which means released).
        self.deadline = deadline.max(1);
        Ok(Acquired::Granted {
            token: self.counter,
            took_over_expired,
        })
    }

    /// ACQUIRE on a node with a waiter queue: [`LockState::acquire`], except
    /// that a lock reserved for another owner is [`Acquired::Busy`] and the
    /// state is left untouched. A reservation only ever refuses an ACQUIRE
    /// that would otherwise be granted; it never grants anything, and never
    /// refuses the holder of a live lease its renewal (a held record can
    /// arrive under a reservation by RENAME, RESTORE, COPY, MOVE or SWAPDB).
    pub fn acquire_reserved(
        &mut self,
        reservation: Reservation,
        owner: &OwnerHash,
        ttl: u64,
        floor: u64,
        now: MonoMillis,
        wall_us: u64,
    ) -> Result<Acquired, LockError> {
        self.acquire_reserved_mutated(Mutants::NONE, reservation, owner, ttl, floor, now, wall_us)
    }

    /// [`LockState::acquire_reserved`] with the mutants of a test build or
    /// the simulator.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_reserved_mutated(
        &mut self,
        mutants: Mutants,
        reservation: Reservation,
        owner: &OwnerHash,
        ttl: u64,
        floor: u64,
        now: MonoMillis,
        wall_us: u64,
    ) -> Result<Acquired, LockError> {
        if reservation == Reservation::ForOther && !self.is_held_by(owner, now) {
            return Ok(Acquired::Busy);
        }
        self.acquire_mutated(mutants, owner, ttl, floor, now, wall_us)
    }

    /// RELEASE: free the lock when `owner` holds the live lease. The counter stays.
    pub fn release(&mut self, owner: &OwnerHash, now: MonoMillis) -> bool {
        if !self.is_held_by(owner, now) {
            return false;
        }
        self.owner = OwnerHash::default();
        self.deadline = 0;
        self.freed_at = now;
        true
    }

    /// EXTEND: the holder's lease becomes `ttl` from `now`. An expired lease
    /// is never revived.
    pub fn extend(&mut self, owner: &OwnerHash, ttl: u64, now: MonoMillis) -> bool {
        if !self.is_held_by(owner, now) {
            return false;
        }
        self.deadline = now.saturating_add(ttl);
        true
    }

    /// FENCE: while `owner` holds the live lease, raise the counter to `token`
    /// (never lower it) and return the counter; `None` for anyone else.
    pub fn fence(&mut self, owner: &OwnerHash, token: Option<u64>, now: MonoMillis) -> Option<u64> {
        if !self.is_held_by(owner, now) {
            return None;
        }
        if let Some(token) = token {
            self.counter = self.counter.max(token.min(MAX_TOKEN));
        }
        Some(self.counter)
    }

    /// INSPECT: held, time left and counter; never the owner.
    pub fn inspect(&self, now: MonoMillis) -> Inspection {
        let held = self.is_held(now);
        Inspection {
            held,
            pttl: held.then(|| self.deadline - now),
            token: self.counter,
        }
    }

    /// The same lock with an expired lease dropped (idle since the lease
    /// ended): what gets persisted.
    pub fn settled(&self, now: MonoMillis) -> Self {
        if self.is_held(now) {
            self.clone()
        } else {
            Self::from_parts(self.counter, None, 0, self.idle_since(), self.floored)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn o(c: u8) -> OwnerHash {
        [c; 16]
    }

    fn granted(token: u64) -> Result<Acquired, LockError> {
        Ok(Acquired::Granted {
            token,
            took_over_expired: false,
        })
    }

    #[test]
    fn tokens_increase_across_holders() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 0, wall_us(0)), granted(1));
        assert!(s.release(&o(b'a'), 10));
        assert_eq!(s.acquire(&o(b'b'), 100, 0, 20, wall_us(20)), granted(2));
        assert_eq!(s.counter(), 2);
    }

    #[test]
    fn same_owner_reacquire_renews_without_new_token() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 0, wall_us(0)), granted(1));
        assert_eq!(
            s.acquire(&o(b'a'), 500, 0, 50, wall_us(50)),
            Ok(Acquired::Renewed { token: 1 })
        );
        assert_eq!(s.inspect(60).pttl, Some(490));
        assert_eq!(
            s.acquire(&o(b'a'), 500, 7, 60, wall_us(60)),
            Ok(Acquired::Renewed { token: 7 })
        );
    }

    #[test]
    fn floor_lifts_the_counter_and_next_grant_follows() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 100, 1000, 0, wall_us(0)), granted(1000));
        assert!(s.release(&o(b'a'), 1));
        assert_eq!(s.acquire(&o(b'b'), 100, 0, 2, wall_us(2)), granted(1001));
        assert!(s.release(&o(b'b'), 3));
        assert_eq!(s.acquire(&o(b'c'), 100, 5, 4, wall_us(4)), granted(1002));
    }

    #[test]
    fn busy_while_another_owner_holds() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 0, wall_us(0)), granted(1));
        let before = s.clone();
        assert_eq!(
            s.acquire(&o(b'b'), 100, 0, 99, wall_us(99)),
            Ok(Acquired::Busy)
        );
        assert_eq!(s, before);
        assert_eq!(
            s.acquire(&o(b'b'), 100, 0, 100, wall_us(100)),
            Ok(Acquired::Granted {
                token: 2,
                took_over_expired: true
            })
        );
    }

    #[test]
    fn extend_keeps_and_never_revives() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 0, wall_us(0)), granted(1));
        assert!(s.extend(&o(b'a'), 100, 90));
        assert!(s.is_held(150));
        assert!(!s.extend(&o(b'b'), 100, 150));
        assert!(!s.extend(&o(b'a'), 100, 190));
        assert!(!s.is_held(190));
        assert!(!s.release(&o(b'a'), 191));
    }

    #[test]
    fn fence_only_for_holder_and_never_lowers() {
        let mut s = LockState::default();
        assert_eq!(s.fence(&o(b'a'), Some(10), 0), None);
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 0, wall_us(0)), granted(1));
        assert_eq!(s.fence(&o(b'b'), Some(10), 1), None);
        assert_eq!(s.fence(&o(b'a'), Some(10), 1), Some(10));
        assert_eq!(s.fence(&o(b'a'), Some(3), 1), Some(10));
        assert_eq!(s.fence(&o(b'a'), None, 1), Some(10));
        assert_eq!(s.fence(&o(b'a'), Some(11), 100), None);
        assert_eq!(s.counter(), 10);
    }

    #[test]
    fn counter_exhaustion_is_an_error_not_a_wrap() {
        let mut s = LockState::default();
        assert_eq!(
            s.acquire(&o(b'a'), 10, MAX_TOKEN, 0, wall_us(0)),
            granted(MAX_TOKEN)
        );
        assert!(s.release(&o(b'a'), 1));
        let before = s.clone();
        assert_eq!(
            s.acquire(&o(b'b'), 10, 0, 2, wall_us(2)),
            Err(LockError::CounterExhausted)
        );
        assert_eq!(s, before);
    }

    #[test]
    fn inspect_reports_time_left() {
        let mut s = LockState::default();
        assert_eq!(
            s.inspect(0),
            Inspection {
                held: false,
                pttl: None,
                token: 0
            }
        );
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 10, wall_us(10)), granted(1));
        assert_eq!(
            s.inspect(40),
            Inspection {
                held: true,
                pttl: Some(70),
                token: 1
            }
        );
        assert!(!s.inspect(110).held);
    }

    #[test]
    fn tokens_far_ahead_of_the_node_clock_are_out_of_reach() {
        let wall_us = 1_796_000_000_000_000;
        assert!(token_within_reach(0, wall_us));
        assert!(token_within_reach(7, wall_us));
        assert!(token_within_reach(wall_us + 3_600_000_000, wall_us));
        assert!(token_within_reach(wall_us + MAX_AHEAD_US, wall_us));
        assert!(!token_within_reach(wall_us + MAX_AHEAD_US + 1, wall_us));
        assert!(!token_within_reach(MAX_TOKEN, wall_us));
    }

    #[test]
    fn a_released_lock_keeps_no_owner_hash() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 0, wall_us(0)), granted(1));
        assert!(s.release(&o(b'a'), 1));
        assert_eq!(s, LockState::from_parts(1, None, 0, 1, false));
    }

    #[test]
    fn settled_drops_expired_leases_only() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 100, 0, 0, wall_us(0)), granted(1));
        assert_eq!(s.settled(50), s);
        assert_eq!(
            s.settled(100),
            LockState::from_parts(1, None, 0, 100, false)
        );
    }

    const RULE: ReclaimRule = ReclaimRule {
        after_ms: 10_000,
        longest_lease_ms: 1_000,
    };
    /// Node wall clock (µs) at monotonic `now` in these tests.
    fn wall_us(now: MonoMillis) -> u64 {
        1_796_000_000_000_000 + now * 1000
    }

    /// A lock released at monotonic 100 after a FLOOR grant at wall_us(0).
    fn released_floored() -> LockState {
        let mut s = LockState::default();
        assert_eq!(
            s.acquire(&o(b'a'), 500, wall_us(0), 1, wall_us(1)),
            granted(wall_us(0))
        );
        assert!(s.release(&o(b'a'), 100));
        s
    }

    #[test]
    fn a_free_floored_idle_record_is_reclaimable_after_the_period() {
        let s = released_floored();
        assert!(!s.reclaimable(RULE, 100 + 9_999, wall_us(100 + 9_999)));
        assert!(s.reclaimable(RULE, 100 + 10_000, wall_us(100 + 10_000)));
        let never = ReclaimRule {
            after_ms: 0,
            ..RULE
        };
        assert!(!s.reclaimable(never, 1 << 40, wall_us(1 << 40)));
    }

    #[test]
    fn a_held_record_is_never_reclaimable() {
        let mut s = LockState::default();
        assert_eq!(
            s.acquire(&o(b'a'), 500, wall_us(0), 1, wall_us(1)),
            granted(wall_us(0))
        );
        assert!(!s.reclaimable(RULE, 400, wall_us(1_000_000)));
        // Run out unreleased: idle from the end of the lease.
        assert!(!s.reclaimable(RULE, 501 + 9_999, wall_us(20_000)));
        assert!(s.reclaimable(RULE, 501 + 10_000, wall_us(20_000)));
    }

    #[test]
    fn a_recent_change_restarts_the_idle_clock() {
        let mut s = released_floored();
        assert_eq!(
            s.acquire(&o(b'b'), 500, 0, 5_000, wall_us(5_000)),
            granted(wall_us(0) + 1)
        );
        // The plain re-grant also drops the floor mark; a floored one restores it.
        assert!(!s.reclaimable(RULE, 5_500 + 10_000, wall_us(5_500 + 10_000)));
        assert!(s.release(&o(b'b'), 5_100));
        assert_eq!(
            s.acquire(&o(b'c'), 500, wall_us(6_000), 6_000, wall_us(6_000)),
            granted(wall_us(6_000))
        );
        assert!(s.release(&o(b'c'), 6_100));
        assert!(!s.reclaimable(RULE, 6_100 + 9_999, wall_us(6_100 + 9_999)));
        assert!(s.reclaimable(RULE, 6_100 + 10_000, wall_us(6_100 + 10_000)));
    }

    #[test]
    fn a_grant_without_floor_keeps_the_record_for_ever() {
        let mut s = LockState::default();
        assert_eq!(s.acquire(&o(b'a'), 500, 0, 1, wall_us(1)), granted(1));
        assert!(s.release(&o(b'a'), 2));
        assert!(!s.reclaimable(RULE, 1 << 40, wall_us(1 << 40)));
    }

    #[test]
    fn only_a_clock_like_floor_marks_a_record_reclaimable() {
        for floor in [5, wall_us(0) - MAX_BEHIND_US - 1] {
            let mut s = LockState::default();
            assert_eq!(
                s.acquire(&o(b'a'), 500, floor, 1, wall_us(1)),
                granted(floor)
            );
            assert!(s.release(&o(b'a'), 2));
            assert!(!s.floored(), "floor {floor}");
            assert!(!s.reclaimable(RULE, 1 << 40, wall_us(1 << 40)));
        }
        assert!(clock_like(wall_us(0) - MAX_BEHIND_US, wall_us(0)));
        assert!(!clock_like(0, 0));
    }

    #[test]
    fn a_missing_record_grants_above_every_reclaimed_counter() {
        let reclaimed = wall_us(0);
        for floor in [0, 1, 5, reclaimed, reclaimed + 7] {
            let mut s = LockState::missing(reclaimed);
            let want = (reclaimed + 1).max(floor);
            assert_eq!(
                s.acquire(&o(b'a'), 500, floor, 1, wall_us(1)),
                granted(want)
            );
        }
        assert_eq!(LockState::missing(0), LockState::default());
    }

    #[test]
    fn a_counter_ahead_of_the_node_clock_keeps_the_record() {
        let mut s = LockState::default();
        let ahead = wall_us(0) + 3_600_000_000;
        assert_eq!(
            s.acquire(&o(b'a'), 500, ahead, 1, wall_us(1)),
            granted(ahead)
        );
        assert!(s.release(&o(b'a'), 2));
        let now = 2 + 10_000;
        assert!(!s.reclaimable(RULE, now, wall_us(now)));
        // Once the node's clock is reclaim-after past the counter, it goes.
        let later = 3_600_000 + 10_000;
        assert!(s.reclaimable(RULE, later, wall_us(later)));
    }

    #[test]
    fn a_renewal_never_shortens_a_live_lease() {
        let holder = o(1);
        let mut s = LockState::missing(0);
        assert_eq!(
            s.acquire(&holder, 5_000, 0, 10, 0),
            Ok(Acquired::Granted {
                token: 1,
                took_over_expired: false
            })
        );
        assert!(s.extend(&holder, 60_000, 20));
        // A late copy of the ACQUIRE (ttl 5 s) renews without shortening.
        assert_eq!(
            s.acquire(&holder, 5_000, 0, 30, 0),
            Ok(Acquired::Renewed { token: 1 })
        );
        assert_eq!(s.inspect(30).pttl, Some(59_990));
        // A longer renewal lengthens it; EXTEND sets any length.
        assert_eq!(
            s.acquire(&holder, 90_000, 0, 40, 0),
            Ok(Acquired::Renewed { token: 1 })
        );
        assert_eq!(s.inspect(40).pttl, Some(90_000));
        assert!(s.extend(&holder, 100, 50));
        assert_eq!(s.inspect(50).pttl, Some(100));
    }

    #[test]
    fn a_reservation_for_another_refuses_grants_but_not_the_holders_renewal() {
        let (holder, other) = (o(1), o(2));
        let mut free = LockState::missing(4);
        let before = free.clone();
        assert_eq!(
            free.acquire_reserved(Reservation::ForOther, &other, 1_000, 0, 10, 0),
            Ok(Acquired::Busy)
        );
        assert_eq!(free, before, "a refused ACQUIRE changes nothing");
        let mut held = LockState::missing(4);
        assert_eq!(
            held.acquire(&holder, 1_000, 0, 10, 0),
            Ok(Acquired::Granted {
                token: 5,
                took_over_expired: false
            })
        );
        // A held record under a reservation for another owner (it arrived
        // by RENAME, RESTORE, ...): the holder renews, the same token.
        assert_eq!(
            held.acquire_reserved(Reservation::ForOther, &holder, 2_000, 0, 500, 0),
            Ok(Acquired::Renewed { token: 5 })
        );
        assert_eq!(held.inspect(600).pttl, Some(1_900));
        // Anyone else stays refused, as without the reservation.
        assert_eq!(
            held.acquire_reserved(Reservation::ForOther, &other, 1_000, 0, 600, 0),
            Ok(Acquired::Busy)
        );
        // Once the lease has run out, the holder is one owner among others.
        assert_eq!(
            held.acquire_reserved(Reservation::ForOther, &holder, 1_000, 0, 2_600, 0),
            Ok(Acquired::Busy)
        );
    }

    #[test]
    fn the_idle_time_must_also_cover_the_longest_lease() {
        let s = released_floored();
        let long = ReclaimRule {
            after_ms: 10_000,
            longest_lease_ms: 60_000,
        };
        assert!(!s.reclaimable(long, 100 + 59_999, wall_us(100 + 59_999)));
        assert!(s.reclaimable(long, 100 + 60_000, wall_us(100 + 60_000)));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Acquire { owner: u8, ttl: u64, floor: u64 },
        Release { owner: u8 },
        Extend { owner: u8, ttl: u64 },
        Fence { owner: u8, token: Option<u64> },
        Advance { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let owner = 0u8..4;
        prop_oneof![
            (owner.clone(), 1u64..200, prop_oneof![Just(0u64), 0u64..50])
                .prop_map(|(owner, ttl, floor)| Op::Acquire { owner, ttl, floor }),
            owner.clone().prop_map(|owner| Op::Release { owner }),
            (owner.clone(), 1u64..200).prop_map(|(owner, ttl)| Op::Extend { owner, ttl }),
            (owner, proptest::option::of(0u64..60))
                .prop_map(|(owner, token)| Op::Fence { owner, token }),
            (0u64..150).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    #[derive(Clone, Debug)]
    enum ReclaimOp {
        /// An acquisition; with a FLOOR = the client's clock (node clock + skew µs).
        Acquire {
            owner: u8,
            ttl: u64,
            floor: bool,
            skew_us: i64,
        },
        Release {
            owner: u8,
        },
        Advance {
            ms: u64,
        },
        /// A sweep visits the record.
        Sweep,
    }

    fn reclaim_op() -> impl Strategy<Value = ReclaimOp> {
        prop_oneof![
            (0u8..3, 1u64..1_000, any::<bool>(), -1_000_000i64..1_000_000).prop_map(
                |(owner, ttl, floor, skew_us)| ReclaimOp::Acquire {
                    owner,
                    ttl,
                    floor,
                    skew_us
                }
            ),
            (0u8..3).prop_map(|owner| ReclaimOp::Release { owner }),
            (0u64..6_000).prop_map(|ms| ReclaimOp::Advance { ms }),
            Just(ReclaimOp::Sweep),
        ]
    }

    proptest! {
        /// The rule only ever deletes free records, and with client clocks
        /// within reclaim-after of the node's, a FLOOR grant after any number
        /// of reclamations still gets a token above every earlier token.
        #[test]
        fn reclamation_never_lets_a_floored_token_go_back(
            ops in proptest::collection::vec(reclaim_op(), 1..300),
            after_ms in 1u64..5_000,
        ) {
            let rule = ReclaimRule { after_ms, longest_lease_ms: 1_000 };
            let mut record: Option<LockState> = None;
            let mut now: MonoMillis = 1;
            let mut highest = 0u64;
            for op in ops {
                let wall = wall_us(now);
                match op {
                    ReclaimOp::Acquire { owner, ttl, floor, skew_us } => {
                        // A skew below reclaim-after: what the safety argument assumes.
                        let skew = skew_us.clamp(-(after_ms as i64) * 1000 + 1, after_ms as i64 * 1000 - 1);
                        let floor = if floor { wall.saturating_add_signed(skew) } else { 0 };
                        let s = record.get_or_insert_with(LockState::default);
                        if let Ok(Acquired::Granted { token, .. }) = s.acquire(&o(owner), ttl, floor, now, wall_us(now)) {
                            if floor > 0 {
                                prop_assert!(token > highest, "token {} not above {}", token, highest);
                            }
                            highest = highest.max(token);
                        }
                    }
                    ReclaimOp::Release { owner } => {
                        if let Some(s) = record.as_mut() {
                            s.release(&o(owner), now);
                        }
                    }
                    ReclaimOp::Advance { ms } => now += ms,
                    ReclaimOp::Sweep => {
                        if record.as_ref().is_some_and(|s| s.reclaimable(rule, now, wall)) {
                            prop_assert!(!record.as_ref().is_some_and(|s| s.is_held(now)));
                            record = None;
                        }
                    }
                }
            }
        }
    }

    proptest! {
        /// Any mix of floors (none, small numbers, clock readings with any
        /// skew) and node clock steps: with the node's highest reclaimed
        /// counter as the counter of a missing record, every grant issues a
        /// token above every earlier one, however often the record is
        /// reclaimed.
        #[test]
        fn reclamation_never_lets_any_token_go_back(
            ops in proptest::collection::vec(reclaim_op(), 1..300),
            small_floors in proptest::collection::vec(0u64..20, 1..8),
            after_ms in 1u64..5_000,
            clock_step_us in -(after_ms_bound() as i64)..(after_ms_bound() as i64),
        ) {
            let rule = ReclaimRule { after_ms, longest_lease_ms: 1_000 };
            let mut record: Option<LockState> = None;
            let mut reclaimed = 0u64;
            let mut now: MonoMillis = 1;
            let mut highest = 0u64;
            let mut small = small_floors.iter().cycle();
            for (i, op) in ops.into_iter().enumerate() {
                // Halfway through, the node's wall clock steps (either way).
                let step = if i > 150 { clock_step_us } else { 0 };
                let wall = wall_us(now).saturating_add_signed(step);
                match op {
                    ReclaimOp::Acquire { owner, ttl, floor, skew_us } => {
                        let floor = match (floor, skew_us % 3) {
                            (true, _) => wall.saturating_add_signed(skew_us * 1_000_000),
                            (false, 0) => 0,
                            _ => *small.next().unwrap_or(&0),
                        };
                        let s = record.get_or_insert_with(|| LockState::missing(reclaimed));
                        if let Ok(Acquired::Granted { token, .. }) = s.acquire(&o(owner), ttl, floor, now, wall) {
                            prop_assert!(token > highest, "token {} not above {}", token, highest);
                            highest = token;
                        }
                    }
                    ReclaimOp::Release { owner } => {
                        if let Some(s) = record.as_mut() {
                            s.release(&o(owner), now);
                        }
                    }
                    ReclaimOp::Advance { ms } => now += ms,
                    ReclaimOp::Sweep => {
                        if let Some(s) = record.as_ref().filter(|s| s.reclaimable(rule, now, wall)) {
                            prop_assert!(!s.is_held(now));
                            reclaimed = reclaimed.max(s.counter());
                            record = None;
                        }
                    }
                }
            }
        }
    }

    fn after_ms_bound() -> u64 {
        3_600_000_000
    }

    proptest! {
        /// Random operations and clock advances: the counter never decreases,
        /// every free → held transition issues a token above every earlier one,
        /// and two owners never hold at once.
        #[test]
        fn counter_strictly_increases_and_holds_are_exclusive(ops in proptest::collection::vec(op(), 1..200)) {
            let mut s = LockState::default();
            let mut now: MonoMillis = 0;
            let mut issued: Vec<u64> = Vec::new();
            for op in ops {
                let counter_before = s.counter();
                let holder_before = s.holder(now).copied();
                match op {
                    Op::Acquire { owner, ttl, floor } => {
                        match s.acquire(&o(owner), ttl, floor, now, wall_us(now)) {
                            Ok(Acquired::Granted { token, .. }) => {
                                prop_assert!(holder_before.is_none(), "granted while held");
                                prop_assert!(issued.iter().all(|&t| t < token));
                                prop_assert!(token > counter_before);
                                issued.push(token);
                            }
                            Ok(Acquired::Renewed { token }) => {
                                prop_assert_eq!(holder_before, Some(o(owner)));
                                prop_assert!(token >= counter_before);
                            }
                            Ok(Acquired::Busy) => {
                                prop_assert!(holder_before.is_some());
                                prop_assert_ne!(holder_before, Some(o(owner)));
                            }
                            Err(e) => prop_assert!(false, "unexpected {:?}", e),
                        }
                    }
                    Op::Release { owner } => {
                        let released = s.release(&o(owner), now);
                        prop_assert_eq!(released, holder_before == Some(o(owner)));
                        prop_assert!(!s.is_held(now) || !released);
                    }
                    Op::Extend { owner, ttl } => {
                        let extended = s.extend(&o(owner), ttl, now);
                        prop_assert_eq!(extended, holder_before == Some(o(owner)));
                        if !extended {
                            prop_assert_eq!(s.holder(now).copied(), holder_before);
                        }
                    }
                    Op::Fence { owner, token } => {
                        let reply = s.fence(&o(owner), token, now);
                        prop_assert_eq!(reply.is_some(), holder_before == Some(o(owner)));
                    }
                    Op::Advance { ms } => now += ms,
                }
                prop_assert!(s.counter() >= counter_before, "counter went down");
                // Exclusivity: at any instant the state names at most one live holder,
                // and a live holder only changes through a release or expiry.
                if let (Some(before), Some(after)) = (holder_before, s.holder(now).copied()) {
                    prop_assert_eq!(before, after, "holder replaced while its lease was live");
                }
            }
        }
    }
}
