//! This client's own waiters of a lock name, in call order: a waiting
//! acquire ([`Redlock::acquire_wait`](crate::Redlock::acquire_wait)) does not
//! overtake the earlier callers of the same name on the same client while
//! none of them has reached the nodes' queues yet.
//!
//! The nodes' queues order waiters once their `REDLOCK.WAIT`s are there. A
//! waiter reaches them only after its busy attempt and, the first time,
//! after opening its blocking connections. A worker that releases and asks
//! again at once is faster than that: it took its own lock back (a
//! "re-take") while the other workers of its process were still on their way
//! to the queues, typically at the start of a process. So a new caller whose
//! earlier callers of that name on this client all still wait and none of
//! them is "queued" (its `WAIT`s sent to a quorum of nodes and unanswered
//! for [`BLOCKED_AFTER`]: blocked there, not answered "free" at once, which
//! reserves nothing) starts its first attempt only once one of them is
//! queued or has left (with the lock or without), or [`TURN_LIMIT`] has
//! passed, or its own deadline. Once an
//! earlier caller is queued the nodes keep the order (a freed lock is
//! reserved for the first ticket queued there), so nobody waits here then:
//! a caller never waits for a departure that an earlier caller's turn at the
//! nodes would bring (which let another client's later caller overtake it).
//!
//! This orders attempts only; it changes nothing of what the nodes decide,
//! so neither mutual exclusion nor token order depends on it. The limit
//! keeps a caller from waiting long on an earlier one that is not making
//! progress (a future polled once and then neither polled nor dropped), and
//! stays well below the 1 s the nodes count a ticket's age at most, so that
//! a caller that waited it out still queues by its own call time. A set
//! waiter (`acquire_many_wait`) takes a place under each of its names.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The longest a caller lets earlier callers of its name go first: far
/// more than an attempt and the opening of the blocking connections take
/// (the window of a re-take), far less than the nodes' 1 s ticket reach.
pub(crate) const TURN_LIMIT: Duration = Duration::from_millis(100);

/// How long a waiter's `WAIT`s, sent to a quorum of nodes, stay unanswered
/// before it counts as queued there: a `WAIT` that finds the lock free
/// answers within a round trip and reserves nothing.
pub(crate) const BLOCKED_AFTER: Duration = Duration::from_millis(10);

/// The waiters of every name of one client.
#[derive(Default)]
pub(crate) struct LocalTurns {
    names: Mutex<HashMap<String, Waiting>>,
}

/// The callers of one name: by call order, whether each is queued at the
/// nodes; a signal sent each time one is queued or leaves.
struct Waiting {
    next: u64,
    callers: BTreeMap<u64, bool>,
    moved: watch::Sender<u64>,
}

impl Waiting {
    /// Whether the caller `seq` lets earlier callers go: some wait, and
    /// none of them is queued at the nodes.
    fn defers(&self, seq: u64) -> bool {
        let mut earlier = self.callers.range(..seq).map(|(_, &queued)| queued);
        earlier.next().is_some_and(|first| !first) && earlier.all(|queued| !queued)
    }

    fn moved(&self) {
        self.moved.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl LocalTurns {
    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a caller of `key`, last in call order; it counts as
    /// waiting until the returned [`Turn`] is dropped.
    pub(crate) fn join(self: &Arc<Self>, key: &str) -> Turn {
        let mut names = self.names();
        let waiting = names.entry(key.to_string()).or_insert_with(|| Waiting {
            next: 0,
            callers: BTreeMap::new(),
            moved: watch::channel(0).0,
        });
        let seq = waiting.next;
        waiting.next += 1;
        waiting.callers.insert(seq, false);
        Turn {
            turns: Arc::clone(self),
            key: key.to_string(),
            seq,
        }
    }

    /// How many callers of `key` wait now.
    #[cfg(test)]
    fn callers(&self, key: &str) -> usize {
        self.names().get(key).map_or(0, |w| w.callers.len())
    }
}

/// A caller's place among the waiters of its name; dropping it (the call
/// returned, with or without the lock, or was dropped) lets the later
/// callers go.
pub(crate) struct Turn {
    turns: Arc<LocalTurns>,
    key: String,
    seq: u64,
}

impl Turn {
    /// Waits while this caller lets earlier ones go (see the module's
    /// doc): until one of them is queued or leaves, `until`, or
    /// [`TURN_LIMIT`] from now, whichever comes first.
    pub(crate) async fn after_earlier(&self, until: Instant) {
        let limit = until.min(Instant::now() + TURN_LIMIT);
        let mut moved = {
            let names = self.turns.names();
            match names.get(&self.key) {
                Some(waiting) if waiting.defers(self.seq) => waiting.moved.subscribe(),
                _ => return,
            }
        };
        loop {
            // Subscribed (or marked seen) under the lock, right after the
            // check: any change after it wakes this caller.
            if tokio::time::timeout_at(limit, moved.changed())
                .await
                .is_err()
            {
                return;
            }
            let names = self.turns.names();
            match names.get(&self.key) {
                Some(waiting) if waiting.defers(self.seq) => {
                    moved.borrow_and_update();
                }
                _ => return,
            }
        }
    }

    /// What marks this caller as queued (see [`Queued::mark`]); it may
    /// outlive the turn.
    pub(crate) fn queued(&self) -> Queued {
        Queued {
            turns: Arc::clone(&self.turns),
            key: self.key.clone(),
            seq: self.seq,
        }
    }
}

/// Marks a caller as queued at the nodes.
#[derive(Clone)]
pub(crate) struct Queued {
    turns: Arc<LocalTurns>,
    key: String,
    seq: u64,
}

impl Queued {
    /// The caller sent its `WAIT`s to a quorum of nodes: it is in their
    /// queues, and later callers need not let it go first any more. Does
    /// nothing once the caller left.
    pub(crate) fn mark(&self) {
        let mut names = self.turns.names();
        if let Some(waiting) = names.get_mut(&self.key) {
            if let Some(queued) = waiting.callers.get_mut(&self.seq) {
                if !*queued {
                    *queued = true;
                    waiting.moved();
                }
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut names = self.turns.names();
        let Some(waiting) = names.get_mut(&self.key) else {
            return;
        };
        waiting.callers.remove(&self.seq);
        waiting.moved();
        if waiting.callers.is_empty() {
            names.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAR: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn the_first_caller_goes_at_once_and_a_later_one_after_a_departure() {
        let turns = Arc::new(LocalTurns::default());
        let first = turns.join("k");
        let started = Instant::now();
        first.after_earlier(started + FAR).await;
        assert_eq!(started.elapsed(), Duration::ZERO, "nobody waits before it");
        let other_name = turns.join("other");
        other_name.after_earlier(started + FAR).await;
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "names do not wait for each other"
        );
        let second = turns.join("k");
        let waiting = tokio::spawn(async move {
            second.after_earlier(Instant::now() + FAR).await;
            second
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "went before the earlier caller left"
        );
        drop(first);
        let second = waiting.await.unwrap();
        // Woken by the departure, not by the limit.
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        assert_eq!(turns.callers("k"), 1);
        drop(second);
        assert_eq!(turns.callers("k"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_goes_once_an_earlier_one_is_queued_and_at_once_after_that() {
        let turns = Arc::new(LocalTurns::default());
        let first = turns.join("k");
        let second = turns.join("k");
        let third = turns.join("k");
        let waiting = tokio::spawn(async move {
            second.after_earlier(Instant::now() + FAR).await;
            second
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        let started = Instant::now();
        first.queued().mark();
        let _second = waiting.await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO);
        // The first is queued: the third goes at once although the second
        // is not queued yet.
        third.after_earlier(started + FAR).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_lets_earlier_ones_go_for_at_most_the_limit_or_its_deadline() {
        let turns = Arc::new(LocalTurns::default());
        let _stuck = turns.join("k");
        let late = turns.join("k");
        let started = Instant::now();
        late.after_earlier(started + FAR).await;
        assert_eq!(started.elapsed(), TURN_LIMIT);
        let later = turns.join("k");
        let started = Instant::now();
        later
            .after_earlier(started + Duration::from_millis(100))
            .await;
        assert_eq!(started.elapsed(), Duration::from_millis(100));
    }

    #[test]
    fn the_limit_stays_well_below_the_age_the_nodes_count_a_ticket_at_most() {
        // A caller that waited the limit out queues by its own call time
        // (module `queue.rs`: TICKET_REACH_US, 1 s).
        assert!(TURN_LIMIT * 2 <= Duration::from_secs(1));
    }
}
