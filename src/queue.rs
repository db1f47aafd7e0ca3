//! The queue of one lock's waiters on one node and its hand-off rule,
//! independent of Redis (time passed in).
//!
//! A client that waits with `REDLOCK.WAIT key timeout QUEUE owner ticket`
//! joins the queue; `ticket` orders it (the client's wall clock when it
//! started waiting, so that every node orders the same waiters the same
//! way). When the lock is free, the node *reserves* it for the first waiter
//! in ticket order for a short hand-off window: only that waiter is woken,
//! and an ACQUIRE by any other owner is answered as busy until the
//! reserved owner takes the lock or the window passes (then the next waiter
//! gets it). So a waiter that queued first wins over a newcomer, and the
//! waiters do not all race for the lock at once.
//!
//! Safety: a reservation only ever refuses an ACQUIRE that would otherwise
//! succeed; it never grants anything. Leases, counters and tokens follow
//! the lock's own rules ([`crate::lock`]).

use std::collections::BTreeMap;

use crate::lock::{MonoMillis, OwnerHash};

/// A waiter's place: its ticket, and the order it joined in (ties).
pub type Place = (u64, u64);

/// The queued waiters of one key and the current reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queue {
    waiters: BTreeMap<Place, OwnerHash>,
    /// The owner the free lock is reserved for, and until when.
    reservation: Option<(OwnerHash, MonoMillis)>,
}

impl Queue {
    /// A waiter joins at `place`.
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

    /// Whether the waiter at `place` may be told the lock is free now (the
    /// lock is free at `now`). When nothing is reserved, the lock is
    /// reserved for the first waiter for `handoff_ms`; the waiter may go
    /// when the reservation is its own.
    pub fn may_go(
        &mut self,
        place: Place,
        owner: &OwnerHash,
        now: MonoMillis,
        handoff_ms: u64,
    ) -> bool {
        if self.reserved(now).is_none() {
            self.reservation = self
                .waiters
                .values()
                .next()
                .map(|first| (*first, now.saturating_add(handoff_ms.max(1))));
        }
        match self.reserved(now) {
            Some((reserved, _)) => reserved == *owner && self.waiters.contains_key(&place),
            None => false,
        }
    }

    /// Whether an ACQUIRE by `owner` at `now` must be answered as busy
    /// because the free lock is reserved for someone else. The reserved
    /// owner's own ACQUIRE ends the reservation.
    pub fn bars(&mut self, owner: &OwnerHash, now: MonoMillis) -> bool {
        match self.reserved(now) {
            Some((reserved, _)) if reserved == *owner => {
                self.reservation = None;
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The end of the live reservation, when one is live at `now`.
    pub fn reservation_end(&self, now: MonoMillis) -> Option<MonoMillis> {
        self.reserved(now).map(|(_, until)| until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[derive(Clone, Debug)]
    enum Op {
        Join { ticket: u64, owner: u8 },
        Leave { nth: usize },
        Ready { nth: usize },
        Acquire { owner: u8 },
        Advance { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..20, 0u8..6).prop_map(|(ticket, owner)| Op::Join { ticket, owner }),
            (0usize..8).prop_map(|nth| Op::Leave { nth }),
            (0usize..8).prop_map(|nth| Op::Ready { nth }),
            (0u8..8).prop_map(|owner| Op::Acquire { owner }),
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
                    Op::Advance { ms } => now += ms,
                }
                if let Some((_, until)) = q.reserved(now) {
                    prop_assert!(until > now && until <= now + 50);
                }
            }
        }
    }
}
