//! One acquire attempt as a state machine: steps 2–5 of DESIGN.md section
//! 4, events in (node replies, the end of a round), decisions out (the next
//! round, the lock with its deadline, or what to release).
//!
//! The attempt runs up to two rounds. The ACQUIRE round goes to every node;
//! [`Attempt::on_acquire_reply`] says after each reply whether the round is
//! decided ([`Next`]), and [`Attempt::acquire_round_ended`] what comes
//! next: the lock, a write-back round (FENCE to some nodes) or a failure.
//! The write-back round is fed through [`Attempt::on_fence_reply`] and
//! [`Attempt::fence_round_ended`]. The validity check (step 5) runs when
//! the last round ends, with the time passed in.
//!
//! Two drivers carry it out: `quorum.rs`/`redlock.rs` over tokio and the
//! redis crate, and the simulator (`sim/`) over a simulated network. The
//! tallies that decide each round are [`crate::core::tally`]'s.

use std::time::Duration;

use crate::core::error::{Error, NodeFailure};
use crate::core::rules::{Moment, Rules};
use crate::core::tally::{
    AcquireOutcome, AcquireReply, AcquireTally, Failures, FenceReply, WriteBackOutcome,
    WriteBackTally,
};

/// What a round does after a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next<M> {
    /// Not decided: wait for more replies (up to the round's timer).
    Wait,
    /// Decided: stop waiting.
    Done,
    /// Decided, but keep collecting replies until every target answered or
    /// this instant (bounded by the round's timer) passed, whichever comes
    /// first; what is still pending then is a leftover.
    Linger(M),
}

impl<M> From<bool> for Next<M> {
    fn from(decided: bool) -> Self {
        if decided {
            Next::Done
        } else {
            Next::Wait
        }
    }
}

/// Why an attempt failed.
#[derive(Debug)]
pub enum FailReason {
    /// Another owner holds the lock.
    Busy {
        /// How many nodes answered "held by another owner".
        holders: usize,
    },
    /// Too few usable answers (in the ACQUIRE round or the write-back).
    NoQuorum {
        /// How many nodes gave a usable answer.
        answered: usize,
        /// Every failing node with its reason.
        failures: Failures,
    },
    /// The round ate the whole lease (step 5).
    ExpiredBeforeUse {
        /// How long the attempt took.
        elapsed: Duration,
    },
}

/// A failed attempt: why, and what to release.
#[derive(Debug)]
pub struct Failed {
    /// Why it failed.
    pub reason: FailReason,
    /// The nodes that may hold the lock for the attempt's owner and must
    /// get a RELEASE.
    pub release: Vec<usize>,
    /// How many of them are known to have granted it.
    pub granted: usize,
}

/// What comes after a round of the attempt.
#[derive(Debug)]
pub enum AttemptStep<M> {
    /// Step 4: FENCE `token` on `targets` (a round of its own, whose
    /// pending calls are dropped once it is decided), then
    /// [`Attempt::fence_round_ended`].
    WriteBack {
        /// The token to write back.
        token: u64,
        /// The granted nodes that replied a lower token.
        targets: Vec<usize>,
    },
    /// The attempt is over.
    Done(Result<Acquired<M>, Failed>),
}

/// A successful attempt: the lock is ours with `token`, usable until
/// `deadline`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired<M> {
    /// The fencing token.
    pub token: u64,
    /// The end of the validity on the client's clock.
    pub deadline: M,
}

/// One attempt: see the [module docs](self).
#[derive(Debug)]
pub struct Attempt<M> {
    rules: Rules,
    ttl_ms: u64,
    start: M,
    tally: AcquireTally,
    decided: Option<AcquireOutcome>,
    busy_linger: Option<M>,
    fencing: Option<(WriteBackTally, Option<WriteBackOutcome>)>,
}

impl<M: Moment> Attempt<M> {
    /// An attempt for a lease of `ttl_ms` that starts at `start` (the
    /// driver sends the ACQUIRE to every node now).
    pub fn new(rules: Rules, ttl_ms: u64, start: M) -> Self {
        Attempt {
            rules,
            ttl_ms,
            start,
            tally: AcquireTally::new(rules.nodes, rules.quorum),
            decided: None,
            busy_linger: None,
            fencing: None,
        }
    }

    /// The ACQUIRE replies so far, in node order (`None`: not answered).
    pub fn acquire_replies(&self) -> &[Option<AcquireReply>] {
        self.tally.replies()
    }

    /// The write-back replies so far, in node order.
    pub fn fence_replies(&self) -> &[Option<FenceReply>] {
        self.fencing.as_ref().map_or(&[], |(f, _)| f.replies())
    }

    /// Node `node` answered the ACQUIRE at `now`. Busy is decided as soon
    /// as it is certain, but the round then waits a little for the nodes
    /// that have not answered (they would need a RELEASE, and under
    /// contention they answer "held" a moment later): never longer than
    /// the round took to decide.
    pub fn on_acquire_reply(&mut self, node: usize, reply: AcquireReply, now: M) -> Next<M> {
        let decided_now = self.tally.record(node, reply);
        if self.decided.is_none() {
            self.decided = decided_now;
            if matches!(self.decided, Some(AcquireOutcome::Busy { .. })) {
                self.busy_linger = Some(now + (now - self.start));
            }
        }
        match (&self.decided, self.busy_linger) {
            (Some(_), Some(until)) if self.tally.replies().iter().any(Option::is_none) => {
                Next::Linger(until)
            }
            (Some(_), _) => Next::Done,
            (None, _) => Next::Wait,
        }
    }

    /// The ACQUIRE round ended at `now`: decided, every node answered, or
    /// the round's timer ran out (then every node that has not answered
    /// failed with `unanswered`).
    pub fn acquire_round_ended(&mut self, unanswered: NodeFailure, now: M) -> AttemptStep<M> {
        let outcome = match self.decided.take() {
            Some(outcome) => outcome,
            None => self.tally.expire(unanswered),
        };
        match outcome {
            AcquireOutcome::Acquired { token } => AttemptStep::Done(self.validate(token, now)),
            AcquireOutcome::Busy { holders } => {
                AttemptStep::Done(Err(self.failed(FailReason::Busy { holders })))
            }
            AcquireOutcome::NoQuorum { answered, failures } => {
                AttemptStep::Done(Err(self.failed(FailReason::NoQuorum { answered, failures })))
            }
            AcquireOutcome::WriteBack(fencing) => {
                let token = fencing.token();
                if !self.rules.write_back() {
                    // Deliberately broken: use the maximum anyway, which is
                    // exactly what makes tokens go backwards.
                    return AttemptStep::Done(self.validate(token, now));
                }
                // Step 4. Why: after failures the nodes' counters drift
                // apart, and "max over a majority" alone can go backwards
                // (A..E at 0; {A,B,C} → 1; {A,D,E} → 2 and 3; {A,B,C} → 4;
                // {B,C,D} → max(3,3,3) = 3 < 4). Raising the counter of the
                // other granted nodes to T (FENCE, only accepted while we
                // hold the lock there) means that every majority that
                // completes holds counter ≥ T before T is used; any later
                // majority intersects it, so the next token is > T. A node
                // reports T only for the one owner that moved its counter to
                // T, so two holders never share a token.
                let targets = fencing.targets().to_vec();
                self.fencing = Some((fencing, None));
                AttemptStep::WriteBack { token, targets }
            }
        }
    }

    /// Target `node` answered the write-back's FENCE.
    pub fn on_fence_reply(&mut self, node: usize, reply: FenceReply) -> Next<M> {
        let Some((fencing, decided)) = self.fencing.as_mut() else {
            return Next::Done;
        };
        let now = fencing.record(node, reply);
        if decided.is_none() {
            *decided = now;
        }
        decided.is_some().into()
    }

    /// The write-back round ended at `now` (as
    /// [`Attempt::acquire_round_ended`]): the attempt is over.
    pub fn fence_round_ended(
        &mut self,
        unanswered: NodeFailure,
        now: M,
    ) -> Result<Acquired<M>, Failed> {
        let Some((mut fencing, decided)) = self.fencing.take() else {
            return Err(self.failed(FailReason::NoQuorum {
                answered: 0,
                failures: Vec::new(),
            }));
        };
        let outcome = match decided {
            Some(outcome) => outcome,
            None => fencing.expire(unanswered),
        };
        let done = match outcome {
            WriteBackOutcome::Acquired { token } => self.validate(token, now),
            WriteBackOutcome::NoQuorum { answered, failures } => {
                Err(self.failed(FailReason::NoQuorum { answered, failures }))
            }
        };
        self.fencing = Some((fencing, None));
        done
    }

    /// Step 5: validity = ttl − elapsed − (ttl × drift + 2 ms). Nothing
    /// left: the lock may be held on every node, all of them are released.
    fn validate(&self, token: u64, now: M) -> Result<Acquired<M>, Failed> {
        if !self.rules.validity_check() {
            // Deliberately broken (mutation checks): the full ttl from the
            // end of the acquisition.
            return Ok(Acquired {
                token,
                deadline: now + Duration::from_millis(self.ttl_ms),
            });
        }
        let elapsed = now - self.start;
        match self.rules.usable(self.ttl_ms, elapsed) {
            Some(usable) => Ok(Acquired {
                token,
                deadline: self.start + usable,
            }),
            None => Err(Failed {
                reason: FailReason::ExpiredBeforeUse { elapsed },
                release: (0..self.rules.nodes).collect(),
                // At least a quorum granted it.
                granted: self.rules.quorum,
            }),
        }
    }

    fn failed(&self, reason: FailReason) -> Failed {
        Failed {
            reason,
            release: self.tally.may_hold(),
            granted: self.tally.grants(),
        }
    }
}

/// The error for a round that did not reach a quorum and was not "busy":
/// a specific variant when every failing node failed for the same specific
/// reason, otherwise [`Error::NoQuorum`] listing them all. `addr` names a
/// node in messages.
pub fn failure_error(
    nodes: usize,
    quorum: usize,
    failed: Failures,
    answered: usize,
    addr: &dyn Fn(usize) -> String,
) -> Error {
    if !failed.is_empty() {
        if failed
            .iter()
            .all(|(_, e)| matches!(e, NodeFailure::ModuleNotLoaded))
        {
            return Error::ModuleNotLoaded {
                node: addr(failed[0].0),
            };
        }
        if let Some((_, NodeFailure::NoPermission(detail))) = failed.first() {
            if failed
                .iter()
                .all(|(_, e)| matches!(e, NodeFailure::NoPermission(_)))
            {
                return Error::PermissionDenied {
                    nodes: failed.iter().map(|(i, _)| addr(*i)).collect(),
                    detail: detail.clone(),
                };
            }
        }
        if failed
            .iter()
            .all(|(_, e)| matches!(e, NodeFailure::Grace { .. }))
        {
            let retry_after = failed
                .iter()
                .filter_map(|(_, e)| match e {
                    NodeFailure::Grace { remaining, .. } => *remaining,
                    _ => None,
                })
                .min();
            return Error::RestartGuard {
                nodes: failed.iter().map(|(i, _)| addr(*i)).collect(),
                retry_after,
            };
        }
        if let Some((_, NodeFailure::BadArgument(text))) = failed.first() {
            if failed
                .iter()
                .all(|(_, e)| matches!(e, NodeFailure::BadArgument(_)))
            {
                return Error::InvalidArgument(format!("the nodes refused it: {text}"));
            }
        }
    }
    Error::NoQuorum {
        nodes,
        quorum,
        answered,
        errors: failed
            .into_iter()
            .map(|(i, e)| (addr(i), e.to_string()))
            .collect(),
    }
}

/// The error of a failed attempt (`ttl` as the caller asked for it).
pub fn attempt_error(
    rules: &Rules,
    reason: FailReason,
    ttl: Duration,
    addr: &dyn Fn(usize) -> String,
) -> Error {
    match reason {
        FailReason::Busy { holders } => Error::Busy {
            holders,
            nodes: rules.nodes,
        },
        FailReason::NoQuorum { answered, failures } => {
            failure_error(rules.nodes, rules.quorum, failures, answered, addr)
        }
        FailReason::ExpiredBeforeUse { elapsed } => Error::ExpiredBeforeUse { ttl, elapsed },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type T = std::time::Instant;

    fn rules() -> Rules {
        Rules::new(5, 0.01)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_quorum_of_one_token_acquires_with_the_validity_from_the_start() {
        let t0 = T::now();
        let mut a = Attempt::new(rules(), 1_000, t0);
        assert_eq!(
            a.on_acquire_reply(0, AcquireReply::Granted(7), t0 + ms(1)),
            Next::Wait
        );
        assert_eq!(
            a.on_acquire_reply(1, AcquireReply::Granted(7), t0 + ms(2)),
            Next::Wait
        );
        assert_eq!(
            a.on_acquire_reply(2, AcquireReply::Granted(7), t0 + ms(3)),
            Next::Done
        );
        match a.acquire_round_ended(NodeFailure::Timeout(ms(100)), t0 + ms(3)) {
            AttemptStep::Done(Ok(Acquired { token, deadline })) => {
                assert_eq!(token, 7);
                assert_eq!(deadline, t0 + ms(988));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn busy_lingers_as_long_as_it_took_to_decide_and_releases_what_may_hold() {
        let t0 = T::now();
        let mut a = Attempt::new(rules(), 1_000, t0);
        a.on_acquire_reply(0, AcquireReply::Held, t0 + ms(1));
        a.on_acquire_reply(1, AcquireReply::Held, t0 + ms(2));
        assert_eq!(
            a.on_acquire_reply(2, AcquireReply::Held, t0 + ms(4)),
            Next::Linger(t0 + ms(8))
        );
        assert_eq!(
            a.on_acquire_reply(3, AcquireReply::Granted(3), t0 + ms(5)),
            Next::Linger(t0 + ms(8))
        );
        match a.acquire_round_ended(NodeFailure::Timeout(ms(100)), t0 + ms(8)) {
            AttemptStep::Done(Err(Failed {
                reason: FailReason::Busy { holders: 3 },
                release,
                granted: 1,
            })) => assert_eq!(release, vec![3, 4]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_write_back_round_follows_split_tokens() {
        let t0 = T::now();
        let mut a = Attempt::new(rules(), 1_000, t0);
        a.on_acquire_reply(0, AcquireReply::Granted(4), t0);
        a.on_acquire_reply(1, AcquireReply::Granted(3), t0);
        a.on_acquire_reply(2, AcquireReply::Granted(3), t0);
        match a.acquire_round_ended(NodeFailure::Timeout(ms(100)), t0 + ms(1)) {
            AttemptStep::WriteBack { token: 4, targets } => assert_eq!(targets, vec![1, 2]),
            other => panic!("{other:?}"),
        }
        assert_eq!(a.on_fence_reply(1, FenceReply::Counter(4)), Next::Wait);
        assert_eq!(a.on_fence_reply(2, FenceReply::Counter(4)), Next::Done);
        match a.fence_round_ended(NodeFailure::Timeout(ms(100)), t0 + ms(2)) {
            Ok(Acquired { token: 4, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_round_that_ate_the_lease_releases_every_node() {
        let t0 = T::now();
        let mut a = Attempt::new(rules(), 100, t0);
        for i in 0..3 {
            a.on_acquire_reply(i, AcquireReply::Granted(1), t0 + ms(97));
        }
        match a.acquire_round_ended(NodeFailure::Timeout(ms(100)), t0 + ms(97)) {
            AttemptStep::Done(Err(Failed {
                reason: FailReason::ExpiredBeforeUse { .. },
                release,
                granted: 3,
            })) => assert_eq!(release, vec![0, 1, 2, 3, 4]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn grace_everywhere_is_the_restart_guard_error() {
        let failures = vec![
            (
                0,
                NodeFailure::Grace {
                    message: "GRACE".into(),
                    remaining: Some(ms(30)),
                },
            ),
            (
                1,
                NodeFailure::Grace {
                    message: "GRACE".into(),
                    remaining: Some(ms(20)),
                },
            ),
        ];
        let e = failure_error(3, 2, failures, 1, &|i| format!("n{i}"));
        assert!(matches!(
            e,
            Error::RestartGuard { retry_after: Some(d), ref nodes } if d == ms(20) && nodes.len() == 2
        ));
        assert!(e.is_transient());
    }
}
