//! This client's own waiters of a lock name, in call order: a waiting
//! acquire ([`Redlock::acquire_wait`](crate::Redlock::acquire_wait)) lets the
//! callers of the same name on the same client that came before it go first.
//!
//! The nodes' queues order waiters once their `REDLOCK.WAIT`s are blocked
//! there. A waiter reaches them only after its busy attempt and, the first
//! time, after opening its blocking connections. A worker that releases and
//! asks again at once is faster than that: it took its own lock back (a
//! "re-take") while the other workers of its process were still on their way
//! to the queues, typically at the start of a process. Here the worker sees
//! them first: while an earlier caller of that name on this client still
//! waits, a new caller starts its first attempt only once one of them has
//! taken the lock or given up, or [`TURN_LIMIT`] has passed.
//!
//! This orders attempts only; it changes nothing of what the nodes decide,
//! so neither mutual exclusion nor token order depends on it. The limit
//! keeps a caller from waiting on an earlier one that is not making progress
//! (a future polled once and then neither polled nor dropped).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The longest a caller lets earlier callers of its name go first.
pub(crate) const TURN_LIMIT: Duration = Duration::from_secs(1);

/// Per lock name: how many callers wait, and a signal sent each time one of
/// them leaves (with the lock or without it).
#[derive(Default)]
pub(crate) struct LocalTurns {
    names: Mutex<HashMap<String, Waiting>>,
}

struct Waiting {
    callers: usize,
    left: watch::Sender<u64>,
}

impl LocalTurns {
    /// Registers a caller of `key`. Returns its registration (the caller
    /// counts as waiting until it is dropped) and, when earlier callers of
    /// `key` wait, a receiver that changes as soon as one of them leaves.
    pub(crate) fn join(self: &Arc<Self>, key: &str) -> (Turn, Option<watch::Receiver<u64>>) {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting = names.entry(key.to_string()).or_insert_with(|| Waiting {
            callers: 0,
            left: watch::channel(0).0,
        });
        // Subscribed under the lock: a departure after this line changes it.
        let earlier = (waiting.callers > 0).then(|| waiting.left.subscribe());
        waiting.callers += 1;
        let turn = Turn {
            turns: Arc::clone(self),
            key: key.to_string(),
        };
        (turn, earlier)
    }

    fn leave(&self, key: &str) {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(waiting) = names.get_mut(key) else {
            return;
        };
        waiting.callers = waiting.callers.saturating_sub(1);
        waiting.left.send_modify(|n| *n = n.wrapping_add(1));
        if waiting.callers == 0 {
            names.remove(key);
        }
    }

    /// How many callers of `key` wait now.
    #[cfg(test)]
    fn callers(&self, key: &str) -> usize {
        let names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        names.get(key).map_or(0, |w| w.callers)
    }
}

/// A caller's place among the waiters of its name; dropping it (the call
/// returned, with or without the lock, or was dropped) lets the later
/// callers go.
pub(crate) struct Turn {
    turns: Arc<LocalTurns>,
    key: String,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.turns.leave(&self.key);
    }
}

/// Waits until an earlier caller left (`earlier` changed), `until`, or
/// [`TURN_LIMIT`] from now, whichever comes first.
pub(crate) async fn after_earlier(earlier: Option<watch::Receiver<u64>>, until: Instant) {
    let Some(mut earlier) = earlier else {
        return;
    };
    let limit = until.min(Instant::now() + TURN_LIMIT);
    // An error means the sender is gone: nobody is waiting any more.
    let _ = tokio::time::timeout_at(limit, earlier.changed()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_caller_goes_at_once_and_a_later_one_after_a_departure() {
        let turns = Arc::new(LocalTurns::default());
        let (first, none) = turns.join("k");
        assert!(none.is_none(), "nobody waits before the first caller");
        let (second, earlier) = turns.join("k");
        assert!(earlier.is_some());
        let (_other_name, none) = turns.join("other");
        assert!(none.is_none(), "names do not wait for each other");
        let far = Instant::now() + Duration::from_secs(60);
        let started = Instant::now();
        let waiting = tokio::spawn(after_earlier(earlier, far));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "went before the earlier caller left"
        );
        drop(first);
        waiting.await.unwrap();
        assert!(started.elapsed() < TURN_LIMIT);
        assert_eq!(turns.callers("k"), 1);
        drop(second);
        assert_eq!(turns.callers("k"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_lets_earlier_ones_go_for_at_most_the_limit_or_its_deadline() {
        let turns = Arc::new(LocalTurns::default());
        let (_stuck, _) = turns.join("k");
        let (_late, earlier) = turns.join("k");
        let started = Instant::now();
        after_earlier(earlier, started + Duration::from_secs(60)).await;
        assert_eq!(started.elapsed(), TURN_LIMIT);
        let (_later, earlier) = turns.join("k");
        let started = Instant::now();
        after_earlier(earlier, started + Duration::from_millis(200)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(200));
    }
}
