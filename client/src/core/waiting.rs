//! What comes after a failed attempt: another attempt after a pause
//! (`Redlock::acquire`'s retries, [`Retry`]), or, for
//! `Redlock::acquire_wait`, a round of `REDLOCK.WAIT` on every node that
//! ends once a quorum says the lock is free ([`WakeTally`]), with the
//! decisions of the wait loop ([`after_failed_attempt`], [`after_wake`]).
//!
//! Events in, decisions out: the tokio code (`redlock.rs`, `waiting.rs`)
//! and the simulator carry them out. A failed attempt's grants are always
//! released before any of this: the driver sends the RELEASEs first (for a
//! wait, without waiting for their replies: see [`AfterAttempt::Wait`]).
//!
//! A waiter is known to a node only while its `REDLOCK.WAIT` is blocked
//! there: a lock freed on a node with nobody queued is free for the first
//! ACQUIRE to arrive, and the worker that just released it sends its next
//! ACQUIRE at once. So a busy waiter queues at once: the RELEASE of a busy
//! attempt's leftovers is not awaited before the WAIT (a lagging node would
//! keep the waiter out of every queue for up to the per-node timeout while
//! the other workers take the lock in turns without it).

use std::time::Duration;

use rand::Rng;

use crate::core::error::{Error, NodeFailure};
use crate::core::rules::Moment;

/// Longest random pause after a split vote.
pub const SPLIT_PAUSE_MAX: Duration = Duration::from_millis(10);

/// Longest timeout a node accepts for `REDLOCK.WAIT` (one day).
pub const NODE_WAIT_MAX_MS: u64 = 86_400_000;

/// The retries of `Redlock::acquire`: `attempts` in all.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    attempts: u32,
    attempt: u32,
    base: Duration,
    jitter: Duration,
}

impl Retry {
    /// `attempts` attempts (at least one), `base` plus up to `jitter`
    /// apart.
    pub fn new(attempts: u32, base: Duration, jitter: Duration) -> Self {
        Retry {
            attempts: attempts.max(1),
            attempt: 1,
            base,
            jitter,
        }
    }

    /// The attempt that is about to run or ran last (1-based).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// An attempt failed with `error`: the pause before the next one, or
    /// `None` to give up (the last attempt, or an error that retrying
    /// cannot cure).
    pub fn after_failure(&mut self, error: &Error, rng: &mut impl Rng) -> Option<Duration> {
        if self.attempt >= self.attempts || !error.is_transient() {
            return None;
        }
        self.attempt += 1;
        Some(crate::core::rules::retry_pause(self.base, self.jitter, rng))
    }
}

/// Whether a busy round was a split vote, worth a random pause before the
/// next attempt: fewer than `quorum` nodes said "held by another owner", or
/// the round got `granted` grants and still lost (nodes that did not answer
/// in time are not counted: under load they are mostly slow "held"
/// answers). "Every node answered" does not rule a split out: a node whose
/// free lock is reserved for another waiter answers nil like a held one,
/// so in a 2/2/1 split between three waiters each of them counts three
/// "held" answers. A round that lost to a new holder with some grants of
/// its own pauses too, at little cost: at most [`SPLIT_PAUSE_MAX`], before
/// a wait that blocks on that holder anyway.
pub fn split_vote(holders: usize, granted: usize, quorum: usize) -> bool {
    holders < quorum || granted > 0
}

/// What the wait loop does after a failed attempt (its grants released).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterAttempt<M> {
    /// Return the attempt's error.
    GiveUp,
    /// Busy: pause until `pause_until` (a split vote; `None`: no pause),
    /// then wait for the lock to be free ([`WakeTally`]).
    ///
    /// The attempt's leftovers are released first, but the WAIT does not
    /// wait for the RELEASE replies. Sound: the RELEASEs are queued on the
    /// nodes' connections before the WAIT is sent, and a WAIT that reaches
    /// a node before the RELEASE of the waiter's own grant there finds the
    /// lock held and blocks until that RELEASE (or the lease end) frees it,
    /// which wakes the queue as any release does: no wake-up is lost, and a
    /// WAIT never grants anything. A RELEASE that gets lost leaves the grant
    /// to its lease end, as an awaited one that fails does.
    ///
    /// The pause after a split vote stays before the WAIT: the split's
    /// waiters then queue once the lock's state has settled (the round's
    /// leftovers released, or one of them ahead). Measured: a WAIT sent
    /// during the split, with the lock free on some nodes and still granted
    /// on others, joined the nodes' queues in different orders, and the
    /// reservations lapsed one hand-off window after another (a p99 hand-off
    /// wait of 95–400 ms instead of 24–30 ms in the Rust bench's waiting
    /// section, 8 tasks).
    Wait {
        /// The end of the pause after a split vote.
        pause_until: Option<M>,
    },
    /// A transient failure (no quorum, the restart guard): try again at
    /// this moment.
    Retry {
        /// When to try again.
        at: M,
    },
}

/// The wait loop's decision after an attempt that failed with `error` at
/// `now` (its round got `granted` grants), waiting until `until`.
pub fn after_failed_attempt<M: Moment>(
    error: &Error,
    granted: usize,
    quorum: usize,
    until: M,
    now: M,
    retry: (Duration, Duration),
    rng: &mut impl Rng,
) -> AfterAttempt<M> {
    if now >= until {
        return AfterAttempt::GiveUp;
    }
    match error {
        Error::Busy { holders, .. } => {
            let pause_until = split_vote(*holders, granted, quorum).then(|| {
                let pause = rng.gen_range(Duration::ZERO..=SPLIT_PAUSE_MAX);
                (now + pause).min(until)
            });
            AfterAttempt::Wait { pause_until }
        }
        e if e.is_transient() => {
            let pause = crate::core::rules::retry_pause(retry.0, retry.1, rng);
            AfterAttempt::Retry {
                at: (now + pause).min(until),
            }
        }
        _ => AfterAttempt::GiveUp,
    }
}

/// The timeout of the `REDLOCK.WAIT` sent at `now` for a wait that ends
/// at `until`, in what the nodes accept.
pub fn wait_timeout_ms<M: Moment>(until: M, now: M) -> u64 {
    let left = if until > now {
        until - now
    } else {
        Duration::ZERO
    };
    (left.as_millis() as u64).clamp(1, NODE_WAIT_MAX_MS)
}

/// When a round of `REDLOCK.WAIT` stops waiting for the nodes: they answer
/// at `until`; a node that does not is frozen or cut off.
pub fn wait_gives_up_at<M: Moment>(until: M, node_timeout: Duration) -> M {
    until + node_timeout
}

/// How a round of `REDLOCK.WAIT` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// A quorum of nodes said the lock is free.
    Free,
    /// The wait ran out first.
    TimedOut,
    /// Too few nodes can answer at all.
    Unreachable(Vec<(usize, NodeFailure)>),
}

/// The replies of one round of `REDLOCK.WAIT`.
#[derive(Debug)]
pub struct WakeTally {
    quorum: usize,
    nodes: usize,
    pending: usize,
    free: usize,
    failed: Vec<(usize, NodeFailure)>,
}

impl WakeTally {
    /// A round over `nodes` nodes that needs `quorum` of them.
    pub fn new(nodes: usize, quorum: usize) -> Self {
        WakeTally {
            quorum,
            nodes,
            pending: nodes,
            free: 0,
            failed: Vec::new(),
        }
    }

    /// Node `node` answered: `Ok(true)` free, `Ok(false)` still held at
    /// its timeout. `Some` once decided.
    pub fn record(&mut self, node: usize, reply: Result<bool, NodeFailure>) -> Option<Wake> {
        self.pending = self.pending.saturating_sub(1);
        match reply {
            Ok(true) => self.free += 1,
            Ok(false) => {}
            Err(e) => self.failed.push((node, e)),
        }
        if self.free >= self.quorum {
            return Some(Wake::Free);
        }
        if self.free + self.pending < self.quorum {
            return Some(if self.failed.len() > self.nodes - self.quorum {
                Wake::Unreachable(std::mem::take(&mut self.failed))
            } else {
                Wake::TimedOut
            });
        }
        None
    }
}

/// What the wait loop does after a round of `REDLOCK.WAIT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterWake<M> {
    /// The lock is free on a quorum: the next attempt.
    Attempt,
    /// The wait ran out: return the last attempt's error.
    GiveUp,
    /// Too few nodes answer: try again at this moment.
    Retry {
        /// When to try again.
        at: M,
    },
}

/// The wait loop's decision after a round of `REDLOCK.WAIT` that ended at
/// `now` with `wake`.
pub fn after_wake<M: Moment>(
    wake: &Wake,
    until: M,
    now: M,
    retry: (Duration, Duration),
    rng: &mut impl Rng,
) -> AfterWake<M> {
    match wake {
        Wake::Free => AfterWake::Attempt,
        Wake::TimedOut => AfterWake::GiveUp,
        Wake::Unreachable(_) => {
            let pause = crate::core::rules::retry_pause(retry.0, retry.1, rng);
            AfterWake::Retry {
                at: (now + pause).min(until),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_where_every_node_answered_pauses() {
        // Five nodes, quorum 3. A 2/2/1 split between three waiters (each
        // node reserved for, or granted to, one of them): the waiters with
        // two grants and the one with one grant each see three nils.
        assert!(split_vote(3, 2, 3));
        assert!(split_vote(4, 1, 3));
        // Too few "held" answers: a split whatever was granted.
        assert!(split_vote(2, 0, 3));
        // Held everywhere, nothing granted: a real holder, no pause.
        assert!(!split_vote(5, 0, 3));
        assert!(!split_vote(3, 0, 3));
    }

    #[test]
    fn a_wait_round_is_free_on_a_quorum_and_unreachable_without_one() {
        let mut t = WakeTally::new(5, 3);
        assert_eq!(t.record(0, Ok(true)), None);
        assert_eq!(t.record(1, Ok(false)), None);
        assert_eq!(t.record(2, Ok(true)), None);
        assert_eq!(t.record(3, Ok(true)), Some(Wake::Free));
        let down = || Err(NodeFailure::NotConnected("refused".into()));
        let mut t = WakeTally::new(5, 3);
        assert_eq!(t.record(0, down()), None);
        assert_eq!(t.record(1, down()), None);
        assert!(matches!(t.record(2, down()), Some(Wake::Unreachable(f)) if f.len() == 3));
        // Answers of "still held" that leave too few: the wait ran out.
        let mut t = WakeTally::new(5, 3);
        t.record(0, Ok(false));
        t.record(1, Ok(false));
        assert_eq!(t.record(2, Ok(false)), Some(Wake::TimedOut));
    }

    #[test]
    fn the_wait_loop_gives_up_at_its_end_and_retries_transient_failures() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let t0 = std::time::Instant::now();
        let until = t0 + Duration::from_millis(50);
        let busy = Error::Busy {
            holders: 5,
            nodes: 5,
        };
        let retry = (Duration::from_millis(100), Duration::ZERO);
        assert_eq!(
            after_failed_attempt(&busy, 0, 3, until, t0, retry, &mut rng),
            AfterAttempt::Wait { pause_until: None }
        );
        assert_eq!(
            after_failed_attempt(&busy, 0, 3, until, until, retry, &mut rng),
            AfterAttempt::GiveUp
        );
        let no_quorum = Error::NoQuorum {
            nodes: 5,
            quorum: 3,
            answered: 0,
            errors: Vec::new(),
        };
        // The retry pause never runs past the end of the wait.
        assert_eq!(
            after_failed_attempt(&no_quorum, 0, 3, until, t0, retry, &mut rng),
            AfterAttempt::Retry { at: until }
        );
        let bad = Error::InvalidArgument("ttl".into());
        assert_eq!(
            after_failed_attempt(&bad, 0, 3, until, t0, retry, &mut rng),
            AfterAttempt::GiveUp
        );
        assert_eq!(wait_timeout_ms(until, t0), 50);
        assert_eq!(wait_timeout_ms(t0, until), 1);
    }

    #[test]
    fn retries_stop_after_the_last_attempt_or_a_permanent_error() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let busy = Error::Busy {
            holders: 3,
            nodes: 5,
        };
        let mut r = Retry::new(3, Duration::from_millis(10), Duration::ZERO);
        assert_eq!(
            r.after_failure(&busy, &mut rng),
            Some(Duration::from_millis(10))
        );
        assert_eq!(r.attempt(), 2);
        assert!(r.after_failure(&busy, &mut rng).is_some());
        assert_eq!(r.after_failure(&busy, &mut rng), None);
        let mut r = Retry::new(3, Duration::from_millis(10), Duration::ZERO);
        assert_eq!(
            r.after_failure(&Error::InvalidArgument("x".into()), &mut rng),
            None
        );
    }
}
