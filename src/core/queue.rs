//! The queue of one lock's waiters on one node and its hand-off rule,
//! independent of Redis (time passed in).
//!
//! A client that waits with `REDLOCK.WAIT key timeout QUEUE owner ticket`
//! and finds the lock busy joins the queue; `ticket` orders it (the
//! client's wall clock when it started waiting, so that every node orders
//! the same waiters the same way), brought within [`TICKET_REACH_US`] of
//! the node's clock ([`rank`]). When the lock frees under queued waiters
//! (a release, a lease end, the end of an unused reservation), the node
//! *reserves* it for the first waiter in ticket order for a short hand-off
//! window: only that waiter is woken, and an ACQUIRE by any other owner is
//! answered as busy until the reserved owner takes the lock or the window
//! passes (then the next waiter gets it). So a waiter that queued first
//! wins over a newcomer, and the waiters do not all race for the lock at
//! once.
//!
//! Only a waiter that waited is ever reserved for: a WAIT that finds the
//! lock free and nobody queued is answered at once and leaves nothing here
//! ([`Queue::free_at_once`] never reserves), so repeated WAITs on a free
//! lock cannot keep it from other owners.
//!
//! A reservation ends when its owner takes the lock: its ACQUIRE is granted
//! (or renews), [`Queue::used_by`]; an ACQUIRE of its owner that is refused
//! (a bad argument, WRONGTYPE, busy) leaves it in place, since the owner
//! still has the lock to take. On a replica the owner's ACQUIRE goes to the
//! master, and what arrives is the master's grant (`REDLOCK.APPLY`): a lock
//! held again ends the reservation, [`Queue::end_reservation`], so waiters
//! on the replica are not kept waiting for the rest of the window after the
//! lock is freed again.
//!
//! Safety: a reservation only ever refuses an ACQUIRE that would otherwise
//! succeed; it never grants anything. Leases, counters and tokens follow
//! the lock's own rules ([`crate::core::lock`]).

use std::collections::BTreeMap;

use crate::core::lock::{MonoMillis, OwnerHash, Reservation};

/// A waiter's place: its rank ([`rank`] of its ticket), and the order it
/// joined in (ties).
pub type Place = (u64, u64);

/// How far (µs) a ticket counts from the node's wall clock, either way.
///
/// A ticket is the client's clock when it started waiting, so an honest
/// one is close to the node's clock when the waiter first joins. Without a
/// bound, ticket 0 (or a client clock far behind) would always go first,
/// and two such clients would starve everyone. Clamped, a ticket buys at
/// most this much seniority: a waiter that joins with an older ticket ranks
/// as if it had started waiting this long ago, so it still goes before
/// every honest newcomer, and waiters whose tickets are all that old rank
/// among themselves by the moment they joined.
pub const TICKET_REACH_US: u64 = 1_000_000;

/// The rank of `ticket` on a node whose wall clock reads `wall_us`: the
/// ticket brought within [`TICKET_REACH_US`] of that clock.
pub fn rank(ticket: u64, wall_us: u64) -> u64 {
    ticket.clamp(
        wall_us.saturating_sub(TICKET_REACH_US),
        wall_us.saturating_add(TICKET_REACH_US),
    )
}

/// The queued waiters of one key and the current reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queue {
    waiters: BTreeMap<Place, OwnerHash>,
    /// The owner the free lock is reserved for, and until when.
    reservation: Option<(OwnerHash, MonoMillis)>,
}

impl Queue {
    /// A waiter that blocked joins at `place`.
    pub fn join(&mut self, place: Place, owner: OwnerHash) {
        self.waiters.insert(place, owner);
    }

    /// A waiter leaves (answered, timed out or disconnected).
    pub fn leave(&mut self, place: Place) {
        self.waiters.remove(&place);
    }

    /// No waiter and no reservation: nothing to keep.
    pub fn is_idle(&self, now: MonoMillis) -> bool {
        self.waiters.is_empty() && self.reserved(now).is_none()
    }

    /// The live reservation at `now`.
    pub fn reserved(&self, now: MonoMillis) -> Option<(OwnerHash, MonoMillis)> {
        self.reservation.filter(|&(_, until)| now < until)
    }

    /// Whether a WAIT that finds the lock free at `now` is answered at once
    /// (`owner`: its queue owner, none for a plain WAIT): when the lock is
    /// reserved for that owner, or when nothing is reserved and nobody is
    /// queued. Otherwise the caller waits (and joins the queue). Never
    /// reserves anything: a reservation only follows a wait.
    pub fn free_at_once(&self, owner: Option<&OwnerHash>, now: MonoMillis) -> bool {
        match self.reserved(now) {
            Some((reserved, _)) => owner == Some(&reserved),
            None => self.waiters.is_empty(),
        }
    }

    /// The free lock passes on at `now`: when nothing is reserved, it is
    /// reserved for the first waiter for `handoff_ms`. Returns the live
    /// reservation, if any.
    fn hand_off(&mut self, now: MonoMillis, handoff_ms: u64) -> Option<(OwnerHash, MonoMillis)> {
        if self.reserved(now).is_none() {
            self.reservation = self
                .waiters
                .values()
                .next()
                .map(|first| (*first, now.saturating_add(handoff_ms.max(1))));
        }
        self.reserved(now)
    }

    /// Whether the queued waiter at `place` may be told the lock is free
    /// now (the lock is free at `now` and the waiter waited). When nothing
    /// is reserved, the lock is reserved for the first waiter for
    /// `handoff_ms`; the waiter may go when the reservation is its own.
    pub fn may_go(
        &mut self,
        place: Place,
        owner: &OwnerHash,
        now: MonoMillis,
        handoff_ms: u64,
    ) -> bool {
        match self.hand_off(now, handoff_ms) {
            Some((reserved, _)) => reserved == *owner && self.waiters.contains_key(&place),
            None => false,
        }
    }

    /// Whether a plain waiter (no `QUEUE`) may be told the lock is free now
    /// (the lock is free at `now`): only when it is not reserved, since an
    /// ACQUIRE would get nil meanwhile. Queued waiters go first: when
    /// nothing is reserved, the lock is reserved for the first of them.
    pub fn lets_plain_waiter_go(&mut self, now: MonoMillis, handoff_ms: u64) -> bool {
        self.hand_off(now, handoff_ms).is_none()
    }

    /// The reservation an ACQUIRE by `owner` at `now` meets, the input of
    /// the acquire decision ([`crate::core::lock::LockState::acquire_reserved`]).
    /// Reading it changes nothing: the reservation ends only when its owner
    /// took the lock ([`Queue::used_by`]).
    pub fn peek(&self, owner: &OwnerHash, now: MonoMillis) -> Reservation {
        match self.reserved(now) {
            Some((reserved, _)) if reserved == *owner => Reservation::ForCaller,
            Some(_) => Reservation::ForOther,
            None => Reservation::None,
        }
    }

    /// `owner` took the lock at `now` (its ACQUIRE was granted or renewed):
    /// a reservation for it is over. One for another owner stays.
    pub fn used_by(&mut self, owner: &OwnerHash, now: MonoMillis) {
        if self.peek(owner, now) == Reservation::ForCaller {
            self.reservation = None;
        }
    }

    /// The lock is held again by a grant this node did not decide (a
    /// replica's `REDLOCK.APPLY` of its master's grant): whoever the
    /// reservation was for, the hand-off is over.
    pub fn end_reservation(&mut self) {
        self.reservation = None;
    }

    /// [`Queue::peek`], then, for the reserved owner, [`Queue::used_by`]:
    /// an ACQUIRE that is granted.
    pub fn take(&mut self, owner: &OwnerHash, now: MonoMillis) -> Reservation {
        let seen = self.peek(owner, now);
        if seen == Reservation::ForCaller {
            self.used_by(owner, now);
        }
        seen
    }

    /// Whether an ACQUIRE by `owner` at `now` must be answered as busy
    /// because the free lock is reserved for someone else ([`Queue::take`]).
    pub fn bars(&mut self, owner: &OwnerHash, now: MonoMillis) -> bool {
        self.take(owner, now) == Reservation::ForOther
    }

    /// The end of the live reservation, when one is live at `now`.
    pub fn reservation_end(&self, now: MonoMillis) -> Option<MonoMillis> {
        self.reserved(now).map(|(_, until)| until)
    }

    /// A blocked waiter looks at the lock again at `now` (its key was
    /// signalled, or its key's timer fired): `queued` is its place and owner
    /// when it waits in the queue, `deadline` the end of the live lease
    /// (`None`: the lock is free). A plain waiter goes when an ACQUIRE would
    /// succeed; a queued one when the lock is reserved for it. Otherwise it
    /// stays, and the key's timer should fire at the returned moment (the
    /// lease's end, or the end of a reservation for someone else).
    pub fn on_ready(
        &mut self,
        queued: Option<(Place, OwnerHash)>,
        deadline: Option<MonoMillis>,
        now: MonoMillis,
        handoff_ms: u64,
    ) -> Ready {
        if let Some(deadline) = deadline {
            return Ready::Stay {
                wake_at: Some(deadline),
            };
        }
        let go = match queued {
            None => self.lets_plain_waiter_go(now, handoff_ms),
            Some((place, owner)) => self.may_go(place, &owner, now, handoff_ms),
        };
        if go {
            Ready::Go
        } else {
            Ready::Stay {
                wake_at: self.reservation_end(now),
            }
        }
    }
}

/// What a blocked waiter is told when it looks at the lock again
/// ([`Queue::on_ready`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Answer 1: the lock is free for it.
    Go,
    /// Stay blocked; look again at `wake_at` (when known).
    Stay {
        /// The lease's end or the end of a reservation for someone else.
        wake_at: Option<MonoMillis>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::{Acquired, LockState};
    use proptest::prelude::*;

    fn o(c: u8) -> OwnerHash {
        [c; 16]
    }

    #[test]
    fn the_first_ticket_gets_the_lock_and_newcomers_wait() {
        let mut q = Queue::default();
        q.join((30, 1), o(3));
        q.join((10, 2), o(1));
        q.join((20, 3), o(2));
        // Called in the order the clients blocked: only ticket 10 goes.
        assert!(!q.may_go((30, 1), &o(3), 100, 50));
        assert!(q.may_go((10, 2), &o(1), 100, 50));
        assert!(!q.may_go((20, 3), &o(2), 100, 50));
        // A newcomer (no place) is barred; the reserved owner is not.
        assert!(q.bars(&o(9), 120));
        assert!(q.bars(&o(3), 120));
        q.leave((10, 2));
        assert!(!q.bars(&o(1), 120));
        // The reservation ended with its owner's ACQUIRE.
        assert_eq!(q.reserved(120), None);
    }

    #[test]
    fn an_unused_reservation_passes_to_the_next_waiter() {
        let mut q = Queue::default();
        q.join((10, 1), o(1));
        q.join((20, 2), o(2));
        assert!(q.may_go((10, 1), &o(1), 100, 50));
        q.leave((10, 1)); // answered, but never came to ACQUIRE
        assert!(q.bars(&o(2), 149));
        assert!(!q.may_go((20, 2), &o(2), 149, 50));
        assert_eq!(q.reservation_end(149), Some(150));
        // Window over: the next waiter's turn.
        assert!(q.may_go((20, 2), &o(2), 150, 50));
        assert!(q.bars(&o(1), 151));
    }

    #[test]
    fn an_empty_queue_reserves_nothing() {
        let mut q = Queue::default();
        assert!(!q.bars(&o(1), 5));
        assert!(!q.may_go((1, 1), &o(1), 5, 50));
        assert!(q.is_idle(5));
        q.join((1, 1), o(1));
        assert!(!q.is_idle(5));
    }

    #[test]
    fn a_wait_on_a_free_lock_reserves_nothing() {
        // `WAIT k 0 QUEUE squatter 0` on a free lock, repeated: answered at
        // once every time, and other owners' ACQUIREs go through.
        let mut q = Queue::default();
        for now in 0..100 {
            assert!(q.free_at_once(Some(&o(9)), now));
            assert!(q.free_at_once(None, now));
            assert!(!q.bars(&o(1), now));
            assert_eq!(q.reserved(now), None);
            assert!(q.is_idle(now));
        }
    }

    #[test]
    fn newcomers_wait_behind_a_reservation_or_queued_waiters() {
        let mut q = Queue::default();
        q.join((10, 1), o(1));
        // Queued waiters and no reservation yet (it is being handed on):
        // nobody is answered at once.
        assert!(!q.free_at_once(Some(&o(2)), 100));
        assert!(!q.free_at_once(None, 100));
        assert!(q.may_go((10, 1), &o(1), 100, 50));
        q.leave((10, 1));
        // Reserved for o(1): only o(1) is answered at once.
        assert!(q.free_at_once(Some(&o(1)), 120));
        assert!(!q.free_at_once(Some(&o(2)), 120));
        assert!(!q.free_at_once(None, 120));
        // Window over, nobody queued: free for all again.
        assert!(q.free_at_once(Some(&o(2)), 150));
        assert!(q.free_at_once(None, 150));
        assert!(q.is_idle(150));
    }

    #[test]
    fn plain_waiters_wait_while_the_lock_is_reserved() {
        let mut q = Queue::default();
        assert!(q.lets_plain_waiter_go(100, 50));
        assert_eq!(q.reserved(100), None, "a plain waiter reserves nothing");
        q.join((10, 1), o(1));
        // A plain waiter woken first hands the lock to the queued waiter.
        assert!(!q.lets_plain_waiter_go(100, 50));
        assert_eq!(q.reserved(100), Some((o(1), 150)));
        assert!(q.may_go((10, 1), &o(1), 101, 50));
        q.leave((10, 1));
        assert!(!q.lets_plain_waiter_go(149, 50));
        assert!(q.lets_plain_waiter_go(150, 50));
        // Taken by its owner: the reservation ends at once.
        q.join((20, 2), o(2));
        assert!(q.may_go((20, 2), &o(2), 200, 50));
        q.leave((20, 2));
        assert!(!q.bars(&o(2), 201));
        assert!(q.lets_plain_waiter_go(201, 50));
    }

    #[test]
    fn a_refused_acquire_keeps_the_reservation_and_a_grant_ends_it() {
        let mut q = Queue::default();
        q.join((10, 1), o(1));
        assert!(q.may_go((10, 1), &o(1), 100, 50));
        q.leave((10, 1));
        // The reserved owner's ACQUIRE is read, then refused (WRONGTYPE, a
        // bad argument, busy): still reserved for it.
        for now in [100, 120, 149] {
            assert_eq!(q.peek(&o(1), now), Reservation::ForCaller);
            assert_eq!(q.peek(&o(2), now), Reservation::ForOther);
        }
        assert_eq!(q.reserved(149), Some((o(1), 150)));
        // Another owner's grant (not possible while reserved here) leaves it.
        q.used_by(&o(2), 120);
        assert_eq!(q.reserved(120), Some((o(1), 150)));
        // Granted: over.
        q.used_by(&o(1), 120);
        assert_eq!(q.reserved(120), None);
        assert!(q.lets_plain_waiter_go(121, 50));
    }

    #[test]
    fn the_masters_grant_ends_a_replicas_reservation() {
        // On a replica: the queued waiter was woken and reserved for; its
        // ACQUIRE went to the master, whose grant arrives as an APPLY.
        let mut q = Queue::default();
        q.join((10, 1), o(1));
        q.join((20, 2), o(2));
        assert!(q.may_go((10, 1), &o(1), 100, 5_000));
        q.leave((10, 1));
        q.end_reservation();
        assert_eq!(q.reserved(101), None);
        // The lock frees again: the next queued waiter's turn at once, and
        // a plain waiter goes once nobody is queued.
        assert!(q.may_go((20, 2), &o(2), 200, 5_000));
        q.leave((20, 2));
        q.end_reservation();
        assert!(q.lets_plain_waiter_go(300, 5_000));
    }

    #[test]
    fn tickets_count_only_near_the_node_clock() {
        let wall = 1_700_000_000_000_000u64;
        assert_eq!(rank(wall - 5, wall), wall - 5);
        assert_eq!(rank(wall + 5, wall), wall + 5);
        assert_eq!(rank(0, wall), wall - TICKET_REACH_US);
        assert_eq!(rank(u64::MAX, wall), wall + TICKET_REACH_US);
        assert_eq!(rank(0, 5), 0);
        // An honest waiter that started waiting long ago (and joins again
        // after a lost race) still goes before a squatter with ticket 0 that
        // joins after it, and before every honest newcomer.
        let mut q = Queue::default();
        q.join((rank(wall - 30_000_000, wall), 1), o(1));
        q.join((rank(0, wall + 1), 2), o(2));
        q.join((rank(wall + 2, wall + 2), 3), o(3));
        assert!(!q.may_go((rank(0, wall + 1), 2), &o(2), 10, 50));
        assert_eq!(q.reserved(10), Some((o(1), 60)));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Join { ticket: u64, owner: u8 },
        Leave { nth: usize },
        Ready { nth: usize },
        Acquire { owner: u8 },
        Refused { owner: u8 },
        Applied,
        Arrive { owner: Option<u8> },
        PlainReady,
        Advance { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..20, 0u8..6).prop_map(|(ticket, owner)| Op::Join { ticket, owner }),
            (0usize..8).prop_map(|nth| Op::Leave { nth }),
            (0usize..8).prop_map(|nth| Op::Ready { nth }),
            (0u8..8).prop_map(|owner| Op::Acquire { owner }),
            (0u8..8).prop_map(|owner| Op::Refused { owner }),
            Just(Op::Applied),
            proptest::option::of(0u8..8).prop_map(|owner| Op::Arrive { owner }),
            Just(Op::PlainReady),
            (0u64..80).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    proptest! {
        /// At any moment at most one owner may take the free lock: every
        /// waiter that may go and every ACQUIRE that is not barred is that
        /// one owner; and a reservation never outlives its window.
        #[test]
        fn at_most_one_owner_is_let_through(ops in proptest::collection::vec(op(), 1..150)) {
            let mut q = Queue::default();
            let mut now: MonoMillis = 1;
            let mut seq = 0u64;
            let mut places: Vec<(Place, OwnerHash)> = Vec::new();
            for op in ops {
                match op {
                    Op::Join { ticket, owner } => {
                        seq += 1;
                        q.join((ticket, seq), o(owner));
                        places.push(((ticket, seq), o(owner)));
                    }
                    Op::Leave { nth } => {
                        if !places.is_empty() {
                            let (place, _) = places.remove(nth % places.len());
                            q.leave(place);
                        }
                    }
                    Op::Ready { nth } => {
                        if !places.is_empty() {
                            let (place, owner) = places[nth % places.len()];
                            if q.may_go(place, &owner, now, 50) {
                                let (reserved, _) = q.reserved(now).expect("a waiter goes only with a reservation");
                                prop_assert_eq!(reserved, owner);
                                // Every other owner is barred meanwhile.
                                for other in 0..8u8 {
                                    if o(other) != owner {
                                        prop_assert!(q.clone().bars(&o(other), now));
                                    }
                                }
                            }
                        }
                    }
                    Op::Acquire { owner } => {
                        let live = q.reserved(now);
                        let barred = q.bars(&o(owner), now);
                        prop_assert_eq!(barred, live.is_some_and(|(r, _)| r != o(owner)));
                    }
                    Op::Refused { owner } => {
                        // An ACQUIRE read the reservation and was refused
                        // after: nothing changes.
                        let before = q.clone();
                        let _ = q.peek(&o(owner), now);
                        prop_assert_eq!(&q, &before);
                    }
                    Op::Applied => {
                        q.end_reservation();
                        prop_assert_eq!(q.reserved(now), None);
                    }
                    Op::Arrive { owner } => {
                        // A WAIT finding the lock free never reserves, and is
                        // answered at once only when no other owner is
                        // reserved for and nobody queued would be.
                        let before = q.clone();
                        let owner = owner.map(o);
                        let at_once = q.free_at_once(owner.as_ref(), now);
                        prop_assert_eq!(&q, &before);
                        match q.reserved(now) {
                            Some((r, _)) => prop_assert_eq!(at_once, owner == Some(r)),
                            None => prop_assert_eq!(at_once, places.is_empty()),
                        }
                    }
                    Op::PlainReady => {
                        if q.lets_plain_waiter_go(now, 50) {
                            prop_assert!(q.reserved(now).is_none());
                            prop_assert!(places.is_empty());
                        } else {
                            prop_assert!(q.reserved(now).is_some());
                        }
                    }
                    Op::Advance { ms } => now += ms,
                }
                if let Some((_, until)) = q.reserved(now) {
                    prop_assert!(until > now && until <= now + 50);
                }
            }
        }
    }

    proptest! {
        /// The acquire decision with the queue's reservation as input: while
        /// the free lock is reserved for a queued waiter, any other owner's
        /// ACQUIRE is busy and changes nothing; the reserved owner's is
        /// granted (and ends the reservation); after the window anyone's is.
        #[test]
        fn the_decision_grants_only_the_reserved_owner_while_reserved(
            counter in 0u64..1_000,
            reserved in 0u8..8,
            other in 0u8..8,
            start in 1u64..1_000_000,
            handoff in 1u64..500,
            into in 0u64..1_000,
            ttl in 1u64..10_000,
        ) {
            prop_assume!(reserved != other);
            let free = LockState::missing(counter);
            let mut q = Queue::default();
            q.join((1, 1), o(reserved));
            prop_assert!(q.may_go((1, 1), &o(reserved), start, handoff));
            q.leave((1, 1));
            let now = start + into;
            let live = now < start + handoff;

            let mut state = free.clone();
            let seen = q.clone().take(&o(other), now);
            let decided = state.acquire_reserved(seen, &o(other), ttl, 0, now, 0);
            if live {
                prop_assert_eq!(seen, Reservation::ForOther);
                prop_assert_eq!(decided, Ok(Acquired::Busy));
                prop_assert_eq!(&state, &free);
            } else {
                prop_assert_eq!(seen, Reservation::None);
                prop_assert_eq!(decided, Ok(Acquired::Granted { token: counter + 1, took_over_expired: false }));
            }

            let mut state = free.clone();
            let seen = q.take(&o(reserved), now);
            let decided = state.acquire_reserved(seen, &o(reserved), ttl, 0, now, 0);
            prop_assert_eq!(seen, if live { Reservation::ForCaller } else { Reservation::None });
            prop_assert_eq!(decided, Ok(Acquired::Granted { token: counter + 1, took_over_expired: false }));
            prop_assert_eq!(state.holder(now), Some(&o(reserved)));
            // Taken: nothing is reserved any more.
            prop_assert_eq!(q.reserved(now), None);
        }
    }

    proptest! {
        /// A rank is within reach of the node's clock, keeps the order of
        /// tickets, and leaves a ticket near the clock as it is.
        #[test]
        fn ranks_stay_near_the_clock_and_keep_order(
            a in any::<u64>(),
            b in any::<u64>(),
            wall in 0u64..(u64::MAX / 2),
            near in 0u64..=TICKET_REACH_US,
        ) {
            let ra = rank(a, wall);
            prop_assert!(ra.abs_diff(wall) <= TICKET_REACH_US);
            if a <= b {
                prop_assert!(ra <= rank(b, wall));
            }
            prop_assert_eq!(rank(wall + near, wall), wall + near);
            prop_assert_eq!(rank(wall.saturating_sub(near), wall), wall.saturating_sub(near));
        }
    }
}
