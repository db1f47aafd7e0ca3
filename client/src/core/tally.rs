//! The quorum decisions of DESIGN.md section 4, apart from any I/O.
//!
//! A round feeds each node's reply into a tally as it arrives; the tally
//! says whether the outcome is decided and what it is. Nothing here reads a
//! clock or touches a connection: the round's timer is one more event
//! ([`AcquireTally::expire`]), which turns every missing reply into a
//! failure. `quorum.rs` runs the rounds and feeds these tallies.
//!
//! The rules, with `N` nodes and `Q = N / 2 + 1`:
//!
//! - **Acquire** ([`AcquireTally`]). Stop at `Q` grants. `T` is the highest
//!   granted token; a node counts for `T` when it replied `T`. `Q` nodes
//!   count: acquired with `T`. Fewer: write `T` back with FENCE on the
//!   other granted nodes ([`WriteBackTally`]), and a node counts when its
//!   FENCE answers `T`. When `Q` grants can no longer come, the attempt is
//!   *busy* once the "held by another owner" answers plus the grants make
//!   `Q`, and *no quorum* (every failing node with its reason) once even
//!   the replies still missing could not make `Q` usable answers.
//! - **Release after a failed attempt** ([`AcquireTally::may_hold`]): every
//!   node that granted, has not answered, or failed in a way that may
//!   have run the command.
//! - **Release and extend** ([`ConfirmationTally`]): `Q` nodes answering 1
//!   confirm; once that is impossible, a quorum of answers (1 or 0) means
//!   "not held", fewer means no quorum.

use std::fmt;

use crate::core::error::NodeFailure;

/// One node's answer to `REDLOCK.ACQUIRE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireReply {
    /// Granted; the node's counter is now this token.
    Granted(u64),
    /// Held by another owner (nil).
    Held,
    /// No usable answer.
    Failed(NodeFailure),
}

/// One node's answer to `REDLOCK.FENCE` during the write-back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceReply {
    /// The node's counter after the FENCE.
    Counter(u64),
    /// The lock was no longer held there for this owner (nil).
    NotHeld,
    /// No usable answer.
    Failed(NodeFailure),
}

/// One node's answer to `REDLOCK.RELEASE` or `REDLOCK.EXTEND`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confirmation {
    /// 1: the owner held the lock there (and it is now released/extended).
    Held,
    /// 0: the owner did not hold the lock there.
    NotHeld,
    /// No usable answer.
    Failed(NodeFailure),
}

impl fmt::Display for AcquireReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireReply::Granted(t) => write!(f, "{t}"),
            AcquireReply::Held => f.write_str("held"),
            AcquireReply::Failed(e) => write!(f, "[{e}]"),
        }
    }
}

impl fmt::Display for FenceReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceReply::Counter(t) => write!(f, "{t}"),
            FenceReply::NotHeld => f.write_str("not-held"),
            FenceReply::Failed(e) => write!(f, "[{e}]"),
        }
    }
}

impl fmt::Display for Confirmation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Confirmation::Held => f.write_str("1"),
            Confirmation::NotHeld => f.write_str("0"),
            Confirmation::Failed(e) => write!(f, "[{e}]"),
        }
    }
}

/// Every failing node of a round, in node order, with its reason.
pub type Failures = Vec<(usize, NodeFailure)>;

/// How an ACQUIRE round ended.
#[derive(Debug)]
pub enum AcquireOutcome {
    /// A quorum of nodes replied this token: the lock is ours with it.
    Acquired {
        /// The fencing token.
        token: u64,
    },
    /// A quorum granted, but fewer than a quorum replied the highest token:
    /// FENCE it on the tally's targets and feed their replies to it.
    WriteBack(WriteBackTally),
    /// Another owner holds the lock: no quorum of grants was possible, and
    /// the "held" answers plus the grants made a quorum.
    Busy {
        /// How many nodes answered "held by another owner".
        holders: usize,
    },
    /// Too few usable answers (grants or "held") for a quorum.
    NoQuorum {
        /// How many nodes gave a usable answer.
        answered: usize,
        /// Every node that failed, with its reason.
        failures: Failures,
    },
}

/// The replies of one ACQUIRE round: see the [module docs](self).
#[derive(Debug)]
pub struct AcquireTally {
    quorum: usize,
    replies: Vec<Option<AcquireReply>>,
}

impl AcquireTally {
    /// A round over `nodes` nodes that needs `quorum` of them.
    pub fn new(nodes: usize, quorum: usize) -> Self {
        AcquireTally {
            quorum,
            replies: vec![None; nodes],
        }
    }

    /// Records node `node`'s reply. `Some` once the outcome is decided;
    /// later replies do not change what a decided round does.
    pub fn record(&mut self, node: usize, reply: AcquireReply) -> Option<AcquireOutcome> {
        self.replies[node] = Some(reply);
        self.decide()
    }

    /// The round's timer ran out: every node that has not answered failed
    /// with `failure`. Always decided.
    pub fn expire(&mut self, failure: NodeFailure) -> AcquireOutcome {
        for reply in self.replies.iter_mut().filter(|r| r.is_none()) {
            *reply = Some(AcquireReply::Failed(failure.clone()));
        }
        self.decide().unwrap_or_else(|| self.no_quorum())
    }

    /// The replies so far, in node order (`None`: not answered).
    pub fn replies(&self) -> &[Option<AcquireReply>] {
        &self.replies
    }

    /// How many nodes granted the lock so far.
    pub fn grants(&self) -> usize {
        self.count(|r| matches!(r, Some(AcquireReply::Granted(_))))
    }

    /// The nodes that may hold the lock for this owner and must get a
    /// RELEASE when the attempt fails: those that granted, those that have
    /// not answered, and those whose failure may have come after the node
    /// ran the command (timeout, broken connection).
    pub fn may_hold(&self) -> Vec<usize> {
        self.replies
            .iter()
            .enumerate()
            .filter(|(_, r)| match r {
                None | Some(AcquireReply::Granted(_)) => true,
                Some(AcquireReply::Held) => false,
                Some(AcquireReply::Failed(e)) => e.maybe_executed(),
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn granted(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(AcquireReply::Granted(t)) => Some((i, *t)),
                _ => None,
            })
    }

    fn count(&self, pred: impl Fn(&Option<AcquireReply>) -> bool) -> usize {
        self.replies.iter().filter(|r| pred(r)).count()
    }

    fn decide(&self) -> Option<AcquireOutcome> {
        let q = self.quorum;
        let grants = self.count(|r| matches!(r, Some(AcquireReply::Granted(_))));
        let held = self.count(|r| matches!(r, Some(AcquireReply::Held)));
        let pending = self.count(Option::is_none);
        if grants >= q {
            let token = self.granted().map(|(_, t)| t).max().unwrap_or(0);
            let counting = self.granted().filter(|(_, t)| *t == token).count();
            if counting >= q {
                return Some(AcquireOutcome::Acquired { token });
            }
            let targets = self
                .granted()
                .filter(|(_, t)| *t < token)
                .map(|(i, _)| i)
                .collect();
            return Some(AcquireOutcome::WriteBack(WriteBackTally::new(
                q,
                self.replies.len(),
                token,
                counting,
                targets,
            )));
        }
        if grants + pending >= q {
            return None;
        }
        if held + grants >= q {
            return Some(AcquireOutcome::Busy { holders: held });
        }
        if held + grants + pending < q {
            return Some(self.no_quorum());
        }
        None
    }

    fn no_quorum(&self) -> AcquireOutcome {
        AcquireOutcome::NoQuorum {
            answered: self
                .count(|r| matches!(r, Some(AcquireReply::Granted(_) | AcquireReply::Held))),
            failures: self
                .replies
                .iter()
                .enumerate()
                .filter_map(|(i, r)| match r {
                    Some(AcquireReply::Failed(e)) => Some((i, e.clone())),
                    _ => None,
                })
                .collect(),
        }
    }
}

/// How a write-back round ended.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteBackOutcome {
    /// A quorum now holds the token.
    Acquired {
        /// The fencing token.
        token: u64,
    },
    /// A quorum can no longer hold the token.
    NoQuorum {
        /// How many nodes hold the token.
        answered: usize,
        /// Every FENCE that did not leave its node at the token.
        failures: Failures,
    },
}

/// Step 4 of the algorithm: FENCE replies from the granted nodes that
/// replied less than the token.
#[derive(Debug)]
pub struct WriteBackTally {
    quorum: usize,
    token: u64,
    /// Nodes that replied the token to the ACQUIRE.
    counting: usize,
    targets: Vec<usize>,
    replies: Vec<Option<FenceReply>>,
}

impl WriteBackTally {
    fn new(quorum: usize, nodes: usize, token: u64, counting: usize, targets: Vec<usize>) -> Self {
        WriteBackTally {
            quorum,
            token,
            counting,
            targets,
            replies: vec![None; nodes],
        }
    }

    /// The token to write back.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The nodes to send the FENCE to: granted with a lower token.
    pub fn targets(&self) -> &[usize] {
        &self.targets
    }

    /// The FENCE replies so far, in node order.
    pub fn replies(&self) -> &[Option<FenceReply>] {
        &self.replies
    }

    /// Records target `node`'s FENCE reply; `Some` once decided.
    pub fn record(&mut self, node: usize, reply: FenceReply) -> Option<WriteBackOutcome> {
        self.replies[node] = Some(reply);
        self.decide()
    }

    /// The round's timer ran out: every target that has not answered
    /// failed with `failure`. Always decided.
    pub fn expire(&mut self, failure: NodeFailure) -> WriteBackOutcome {
        for &i in &self.targets {
            if self.replies[i].is_none() {
                self.replies[i] = Some(FenceReply::Failed(failure.clone()));
            }
        }
        self.decide().unwrap_or_else(|| self.no_quorum())
    }

    fn counting(&self) -> usize {
        self.counting
            + self
                .replies
                .iter()
                .filter(|r| matches!(r, Some(FenceReply::Counter(t)) if *t == self.token))
                .count()
    }

    fn decide(&self) -> Option<WriteBackOutcome> {
        let counting = self.counting();
        let pending = self
            .targets
            .iter()
            .filter(|&&i| self.replies[i].is_none())
            .count();
        if counting >= self.quorum {
            Some(WriteBackOutcome::Acquired { token: self.token })
        } else if counting + pending < self.quorum {
            Some(self.no_quorum())
        } else {
            None
        }
    }

    fn no_quorum(&self) -> WriteBackOutcome {
        let token = self.token;
        WriteBackOutcome::NoQuorum {
            answered: self.counting(),
            failures: self
                .replies
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let reason = match r.as_ref()? {
                        FenceReply::Counter(t) if *t == token => return None,
                        FenceReply::Counter(t) => format!("FENCE answered {t}, not {token}"),
                        FenceReply::NotHeld => "the lock was no longer held there".to_string(),
                        FenceReply::Failed(e) => e.to_string(),
                    };
                    Some((i, NodeFailure::WriteBack(reason)))
                })
                .collect(),
        }
    }
}

/// How a RELEASE or EXTEND round ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfirmationOutcome {
    /// A quorum answered 1.
    Confirmed,
    /// A quorum answered, but fewer than a quorum answered 1.
    NotHeld {
        /// How many nodes answered 1.
        confirmed: usize,
    },
    /// Too few nodes answered at all.
    NoQuorum {
        /// How many nodes answered 1 or 0.
        answered: usize,
        /// Every node that failed, with its reason.
        failures: Failures,
    },
}

/// The replies of one RELEASE or EXTEND round.
#[derive(Debug)]
pub struct ConfirmationTally {
    quorum: usize,
    replies: Vec<Option<Confirmation>>,
}

impl ConfirmationTally {
    /// A round over `nodes` nodes that needs `quorum` of them.
    pub fn new(nodes: usize, quorum: usize) -> Self {
        ConfirmationTally {
            quorum,
            replies: vec![None; nodes],
        }
    }

    /// Records node `node`'s reply; `Some` once decided.
    pub fn record(&mut self, node: usize, reply: Confirmation) -> Option<ConfirmationOutcome> {
        self.replies[node] = Some(reply);
        self.decide()
    }

    /// The round's timer ran out: every node that has not answered failed
    /// with `failure`. Always decided.
    pub fn expire(&mut self, failure: NodeFailure) -> ConfirmationOutcome {
        for reply in self.replies.iter_mut().filter(|r| r.is_none()) {
            *reply = Some(Confirmation::Failed(failure.clone()));
        }
        self.decide().unwrap_or_else(|| self.no_quorum())
    }

    /// The replies so far, in node order.
    pub fn replies(&self) -> &[Option<Confirmation>] {
        &self.replies
    }

    fn count(&self, pred: impl Fn(&Option<Confirmation>) -> bool) -> usize {
        self.replies.iter().filter(|r| pred(r)).count()
    }

    fn decide(&self) -> Option<ConfirmationOutcome> {
        let q = self.quorum;
        let ones = self.count(|r| matches!(r, Some(Confirmation::Held)));
        let zeros = self.count(|r| matches!(r, Some(Confirmation::NotHeld)));
        let pending = self.count(Option::is_none);
        let answered = ones + zeros;
        if ones >= q {
            Some(ConfirmationOutcome::Confirmed)
        } else if ones + pending >= q {
            None
        } else if answered >= q {
            Some(ConfirmationOutcome::NotHeld { confirmed: ones })
        } else if answered + pending < q {
            Some(self.no_quorum())
        } else {
            None
        }
    }

    fn no_quorum(&self) -> ConfirmationOutcome {
        ConfirmationOutcome::NoQuorum {
            answered: self.count(|r| matches!(r, Some(Confirmation::Held | Confirmation::NotHeld))),
            failures: self
                .replies
                .iter()
                .enumerate()
                .filter_map(|(i, r)| match r {
                    Some(Confirmation::Failed(e)) => Some((i, e.clone())),
                    _ => None,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
