//! The quorum rounds: send one command to every node at once, stop waiting
//! as soon as the outcome is decided, and turn the replies into a result.
//!
//! Every command goes to all nodes in the first poll of the round (each
//! node's multiplexed connection queues it at once), so a round costs one
//! round trip to the quorum-th fastest node, and a dead or frozen node costs
//! at most the per-node timeout (one timer per round). Calls the round did
//! not wait for are dropped (FENCE), kept unpolled by the caller (ACQUIRE)
//! or finished by a background task (RELEASE, EXTEND): see [`Leftovers`].

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{Cmd, Value};

use crate::error::{Error, NodeFailure};
use crate::node::Node;

/// One node's part of a round: `None` when the round did not wait for it
/// (or did not send it anything).
pub(crate) type Reply = Option<Result<Value, NodeFailure>>;

/// Calls of an ACQUIRE round that it did not wait for, kept alive but never
/// polled again: their commands are queued on the connections, and redis-rs
/// writes a queued command only while its caller still exists (see
/// [`Leftovers::Return`]). Replies that arrive are discarded.
#[derive(Default)]
pub(crate) struct Unanswered {
    _calls: Option<Mutex<Box<dyn Send>>>,
}

/// What a failed acquire attempt leaves: the nodes that may hold the lock
/// for the owner and must get a RELEASE, and the unanswered calls, to keep
/// until that release is queued.
pub(crate) struct Leftover {
    pub(crate) nodes: Vec<usize>,
    pub(crate) _unanswered: Unanswered,
}

/// The nodes and the majority.
pub(crate) struct Quorum {
    pub(crate) nodes: Box<[Arc<Node>]>,
    pub(crate) quorum: usize,
}

/// The replies of one round, for tracing: `addr=reply` for every node.
pub(crate) struct Outcomes<'a>(pub(crate) &'a [Arc<Node>], pub(crate) &'a [Reply]);

impl fmt::Display for Outcomes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (node, reply)) in self.0.iter().zip(self.1).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}=", node.addr())?;
            match reply {
                None => f.write_str("-")?,
                Some(Ok(Value::Int(n))) => write!(f, "{n}")?,
                Some(Ok(Value::Nil)) => f.write_str("nil")?,
                Some(Ok(v)) => write!(f, "{v:?}")?,
                Some(Err(e)) => write!(f, "[{e}]")?,
            }
        }
        Ok(())
    }
}

/// What a round does with the calls still pending once it is decided.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leftovers {
    /// Drop them (FENCE): an unanswered FENCE is simply not counted (a
    /// FENCE is only accepted by a node where we hold the lock, and only
    /// raises that node's counter, so a late or missing one is harmless).
    Drop,
    /// Hand them back, unpolled, as [`Unanswered`] (ACQUIRE), instead of a
    /// background task (a `tokio::spawn` per acquisition). Their commands
    /// are already queued (see `fan_out`); keeping the calls alive matters
    /// because redis-rs skips a queued command whose caller is gone, and
    /// then a slow node never gets the ACQUIRE and a held lock sits on a
    /// bare quorum, one failure from lost (measured with plain dropping:
    /// `acquire_extend_release_busy_and_increasing_tokens` failed in 1 of
    /// 12 runs). Dropping them would still be safe: a dropped ACQUIRE was
    /// either never written, or is written before any later command of ours
    /// on that node's connection (one connection per node, FIFO), in
    /// particular before our RELEASE; and a node that did grant it is
    /// covered because every release goes to every node (a failed attempt
    /// releases the nodes that were not waited for; `Lock::release` and the
    /// drop of a `Lock` fan out to all nodes). So the caller keeps them
    /// until it queued that release (a detached lock drops them: its leases
    /// just run out).
    Return,
    /// Finish them in a background task, bounded by the per-node timeout
    /// from the start of the round:
    /// - RELEASE: the lock must be freed on every node, and a dropped call
    ///   might never be written at all;
    /// - EXTEND: dropping would be safe (an unanswered EXTEND only leaves
    ///   that node's lease shorter; the extension needs a quorum of
    ///   confirmations and the validity is measured from its start), but a
    ///   lock kept alive by `with_lock` would then, one skipped node after
    ///   another, end up leased on a bare quorum, where one more failure
    ///   loses it. Extends are rare (every ttl / 3), so the background task
    ///   costs nothing measurable.
    Finish,
}

/// Sends `cmd` to the nodes named by `targets`, all at once, and collects
/// replies until `done(replies, pending)` returns true, every target has
/// answered, or the per-node timeout (one timer for the whole round) ran
/// out; in the last case every target still pending gets
/// [`NodeFailure::Timeout`]. The calls still pending when the round is
/// decided are dropped, returned or finished in the background, per
/// `leftovers`.
pub(crate) async fn fan_out(
    nodes: &[Arc<Node>],
    targets: impl Iterator<Item = usize> + Clone,
    cmd: Cmd,
    leftovers: Leftovers,
    mut done: impl FnMut(&[Reply], usize) -> bool,
) -> (Vec<Reply>, Unanswered) {
    // All nodes of one client share the timeout; take the largest anyway.
    let timeout = targets
        .clone()
        .map(|i| nodes[i].timeout())
        .max()
        .unwrap_or_default();
    let deadline = tokio::time::Instant::now() + timeout;
    let cmd = Arc::new(cmd);
    // `unconstrained`: tokio's cooperative budget could otherwise make a
    // channel send return Pending in the first poll, so that a command is
    // queued only later, possibly after a command the caller sends next
    // (a RELEASE overtaken by its own ACQUIRE would leave the node locked).
    let mut calls = FuturesUnordered::new();
    let mut replies: Vec<Reply> = (0..nodes.len()).map(|_| None).collect();
    let mut pending = 0;
    // Start every call here, in this one poll and in target order, before
    // anything else: `FuturesUnordered` alone does not guarantee that. Its
    // first `poll_next` stops early when a reply already woke one of its
    // futures from another worker thread (measured: the first reply came
    // back while 4 of 5 calls had not been polled yet), and a call that was
    // not polled has not queued its command. Calls that finish at once
    // (no connection) are recorded now.
    std::future::poll_fn(|cx| {
        for i in targets.clone() {
            let node = Arc::clone(&nodes[i]);
            let cmd = Arc::clone(&cmd);
            let mut call = Box::pin(tokio::task::unconstrained(async move {
                (i, node.call_untimed(&cmd).await)
            }));
            match call.as_mut().poll(cx) {
                Poll::Ready((i, reply)) => replies[i] = Some(reply),
                Poll::Pending => {
                    calls.push(call);
                    pending += 1;
                }
            }
        }
        Poll::Ready(())
    })
    .await;
    if pending > 0 && !done(&replies, pending) {
        // One timer for the round instead of one per call: every call was
        // started above, in the same poll, so this is the same bound.
        let timer = tokio::time::sleep_until(deadline);
        tokio::pin!(timer);
        loop {
            tokio::select! {
                biased;
                next = calls.next() => {
                    let Some((i, reply)) = next else { break };
                    replies[i] = Some(reply);
                    pending -= 1;
                    if pending == 0 || done(&replies, pending) {
                        break;
                    }
                }
                () = &mut timer => {
                    for i in targets {
                        if replies[i].is_none() {
                            replies[i] = Some(Err(NodeFailure::Timeout(timeout)));
                        }
                    }
                    // Past the bound: nothing left to finish.
                    return (replies, Unanswered::default());
                }
            }
        }
    }
    if calls.is_empty() {
        return (replies, Unanswered::default());
    }
    match leftovers {
        Leftovers::Drop => {}
        Leftovers::Return => {
            let unanswered = Unanswered {
                _calls: Some(Mutex::new(Box::new(calls))),
            };
            return (replies, unanswered);
        }
        Leftovers::Finish => {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let rest = async { while calls.next().await.is_some() {} };
                    let _ = tokio::time::timeout_at(deadline, rest).await;
                });
            }
        }
    }
    (replies, Unanswered::default())
}

fn count(replies: &[Reply], pred: impl Fn(&Value) -> bool) -> usize {
    replies
        .iter()
        .filter(|r| matches!(r, Some(Ok(v)) if pred(v)))
        .count()
}

fn is_grant(v: &Value) -> bool {
    matches!(v, Value::Int(n) if *n > 0)
}

fn is_one(v: &Value) -> bool {
    matches!(v, Value::Int(1))
}

fn is_zero(v: &Value) -> bool {
    matches!(v, Value::Int(0))
}

/// Stop rule of a RELEASE or EXTEND round (replies 1 or 0): a quorum of 1s
/// is in, or that became impossible and either a quorum answered ("not
/// held") or too few nodes can still answer ("no quorum").
fn confirmation_decided(replies: &[Reply], pending: usize, q: usize) -> bool {
    let ones = count(replies, is_one);
    let answered = ones + count(replies, is_zero);
    ones >= q || (ones + pending < q && (answered >= q || answered + pending < q))
}

/// The reason list of a failed round: every node that failed, in node order.
/// Nodes that were not waited for are not failures.
fn failures(nodes: &[Arc<Node>], replies: &[Reply]) -> Vec<(usize, NodeFailure)> {
    replies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Some(Err(e)) => Some((i, e.clone())),
            Some(Ok(v)) if !matches!(v, Value::Int(_) | Value::Nil) => {
                Some((i, NodeFailure::Unexpected(format!("{v:?}"))))
            }
            _ => None,
        })
        .inspect(|(i, e)| tracing::trace!(node = nodes[*i].addr(), reason = %e, "node failed"))
        .collect()
}

impl Quorum {
    fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The error for a round that did not reach a quorum and was not "busy":
    /// a specific variant when every failing node failed for the same
    /// specific reason, otherwise [`Error::NoQuorum`] listing them all.
    pub(crate) fn failure_error(
        &self,
        failed: Vec<(usize, NodeFailure)>,
        answered: usize,
    ) -> Error {
        if !failed.is_empty() {
            if failed
                .iter()
                .all(|(_, e)| matches!(e, NodeFailure::ModuleNotLoaded))
            {
                return Error::ModuleNotLoaded {
                    node: self.nodes[failed[0].0].addr().to_string(),
                };
            }
            if let Some((_, NodeFailure::NoPermission(detail))) = failed.first() {
                if failed
                    .iter()
                    .all(|(_, e)| matches!(e, NodeFailure::NoPermission(_)))
                {
                    return Error::PermissionDenied {
                        nodes: failed
                            .iter()
                            .map(|(i, _)| self.nodes[*i].addr().to_string())
                            .collect(),
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
                    nodes: failed
                        .iter()
                        .map(|(i, _)| self.nodes[*i].addr().to_string())
                        .collect(),
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
            nodes: self.node_count(),
            quorum: self.quorum,
            answered,
            errors: failed
                .into_iter()
                .map(|(i, e)| (self.nodes[i].addr().to_string(), e.to_string()))
                .collect(),
        }
    }

    /// Steps 2–4 of the algorithm (DESIGN.md section 4) for one attempt:
    /// ACQUIRE on every node, then the write-back. Returns the token, or the
    /// error together with the nodes that may hold the lock for `owner` and
    /// must get a RELEASE.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        floor: Option<u64>,
        write_back: bool,
    ) -> Result<(u64, Unanswered), (Error, Leftover)> {
        let q = self.quorum;
        let mut cmd = redis::cmd("REDLOCK.ACQUIRE");
        cmd.arg(key).arg(owner).arg(ttl_ms);
        if let Some(floor) = floor {
            cmd.arg("FLOOR").arg(floor);
        }
        // Stop at a quorum of grants; when no quorum is possible any more,
        // stop as soon as "busy" or "no quorum" is decided.
        let (replies, unanswered) = fan_out(
            &self.nodes,
            0..self.node_count(),
            cmd,
            Leftovers::Return,
            |r, pending| {
                let grants = count(r, is_grant);
                let held = count(r, |v| matches!(v, Value::Nil));
                grants >= q
                    || (grants + pending < q && (held + grants >= q || held + grants + pending < q))
            },
        )
        .await;
        tracing::debug!(outcomes = %Outcomes(&self.nodes, &replies), "acquire replies");

        let grant = |r: &Reply| match r {
            Some(Ok(Value::Int(n))) if *n > 0 => Some(*n as u64),
            _ => None,
        };
        let granted = replies.iter().filter_map(grant).count();
        // Nodes that may hold the lock for us: grants, calls not waited for,
        // calls that timed out or broke after being sent.
        let leftovers = |unanswered| Leftover {
            nodes: replies
                .iter()
                .enumerate()
                .filter(|(_, r)| match r {
                    None => true,
                    Some(Ok(v)) => is_grant(v),
                    Some(Err(e)) => e.maybe_executed(),
                })
                .map(|(i, _)| i)
                .collect(),
            _unanswered: unanswered,
        };

        if granted < q {
            let held = count(&replies, |v| matches!(v, Value::Nil));
            let error = if held + granted >= q {
                Error::Busy {
                    holders: held,
                    nodes: self.node_count(),
                }
            } else {
                self.failure_error(failures(&self.nodes, &replies), held + granted)
            };
            return Err((error, leftovers(unanswered)));
        }

        // Step 4. T is the highest granted token; a node counts for T when it
        // replied T.
        let token = replies.iter().filter_map(grant).max().unwrap_or(0);
        let mut counting = replies.iter().filter(|r| grant(r) == Some(token)).count();
        if counting < q && write_back {
            // Why: after failures the nodes' counters drift apart, and "max
            // over a majority" alone can go backwards (A..E at 0; {A,B,C} → 1;
            // {A,D,E} → 2 and 3; {A,B,C} → 4; {B,C,D} → max(3,3,3) = 3 < 4).
            // Raising the counter of the other granted nodes to T (FENCE, only
            // accepted while we hold the lock there) means that every
            // majority that completes holds counter ≥ T before T is used; any
            // later majority intersects it, so the next token is > T. A node
            // reports T only for the one owner that moved its counter to T,
            // so two holders never share a token.
            let mut fence = redis::cmd("REDLOCK.FENCE");
            fence.arg(key).arg(owner).arg(token);
            let lagging = replies
                .iter()
                .enumerate()
                .filter(|(_, r)| grant(r).is_some_and(|t| t < token))
                .map(|(i, _)| i);
            let base = counting;
            let (fenced, _) = fan_out(&self.nodes, lagging, fence, Leftovers::Drop, |r, _| {
                base + count(r, |v| matches!(v, Value::Int(n) if *n as u64 == token)) >= q
            })
            .await;
            tracing::debug!(token, outcomes = %Outcomes(&self.nodes, &fenced), "write-back replies");
            counting += count(
                &fenced,
                |v| matches!(v, Value::Int(n) if *n as u64 == token),
            );
            if counting < q {
                let failed: Vec<(usize, NodeFailure)> = fenced
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| match r {
                        Some(Ok(Value::Int(n))) if *n as u64 == token => None,
                        Some(Ok(Value::Nil)) => Some((
                            i,
                            NodeFailure::WriteBack("the lock was no longer held there".into()),
                        )),
                        Some(Ok(v)) => Some((
                            i,
                            NodeFailure::WriteBack(format!("FENCE answered {v:?}, not {token}")),
                        )),
                        Some(Err(e)) => Some((i, NodeFailure::WriteBack(e.to_string()))),
                        None => None,
                    })
                    .collect();
                return Err((self.failure_error(failed, counting), leftovers(unanswered)));
            }
        }
        if counting < q {
            // Only with the write-back switched off (tests): use the maximum
            // anyway, which is exactly what makes tokens go backwards.
            tracing::warn!(
                token,
                counting,
                "write-back disabled: using a token fewer than a quorum agree on"
            );
        }
        Ok((token, unanswered))
    }

    /// RELEASE on the given nodes, waiting for all of them (each bounded by
    /// the per-node timeout). Used after a failed attempt.
    pub(crate) async fn release_on(&self, key: &str, owner: &str, targets: &[usize]) {
        if targets.is_empty() {
            return;
        }
        let mut cmd = redis::cmd("REDLOCK.RELEASE");
        cmd.arg(key).arg(owner);
        let (replies, _) = fan_out(
            &self.nodes,
            targets.iter().copied(),
            cmd,
            Leftovers::Finish,
            |_, _| false,
        )
        .await;
        tracing::debug!(outcomes = %Outcomes(&self.nodes, &replies), "release of a failed attempt");
    }

    /// A RELEASE or EXTEND round on every node (replies 1 or 0), finished
    /// in the background past the point where the outcome is decided.
    /// Returns the replies, the 1s and the nodes that answered 1 or 0.
    async fn confirmation_round(&self, cmd: Cmd, what: &str) -> (Vec<Reply>, usize, usize) {
        let q = self.quorum;
        let (replies, _) = fan_out(
            &self.nodes,
            0..self.node_count(),
            cmd,
            Leftovers::Finish,
            |r, pending| confirmation_decided(r, pending, q),
        )
        .await;
        tracing::debug!(outcomes = %Outcomes(&self.nodes, &replies), "{what} replies");
        let ones = count(&replies, is_one);
        let answered = ones + count(&replies, is_zero);
        (replies, ones, answered)
    }

    /// RELEASE on every node. Returns once a quorum confirmed the release
    /// (`Ok(true)`), or once that became impossible: `Ok(false)` when a
    /// quorum answered but fewer than a quorum still had the lock for
    /// `owner`, `NoQuorum` when too few nodes answered at all. Slow nodes
    /// still get the release in the background.
    pub(crate) async fn release(&self, key: &str, owner: &str) -> Result<bool, Error> {
        let q = self.quorum;
        let mut cmd = redis::cmd("REDLOCK.RELEASE");
        cmd.arg(key).arg(owner);
        let (replies, ones, answered) = self.confirmation_round(cmd, "release").await;
        if ones >= q {
            Ok(true)
        } else if answered >= q {
            Ok(false)
        } else {
            Err(self.failure_error(failures(&self.nodes, &replies), answered))
        }
    }

    /// EXTEND on every node; `Ok(())` once a quorum confirmed. When a
    /// quorum answered but fewer than a quorum still had the lock:
    /// [`Error::Lost`]; when too few answered at all: `NoQuorum`.
    pub(crate) async fn extend(&self, key: &str, owner: &str, ttl_ms: u64) -> Result<(), Error> {
        let q = self.quorum;
        let mut cmd = redis::cmd("REDLOCK.EXTEND");
        cmd.arg(key).arg(owner).arg(ttl_ms);
        let (replies, ones, answered) = self.confirmation_round(cmd, "extend").await;
        if ones >= q {
            Ok(())
        } else if answered >= q {
            Err(Error::Lost {
                key: key.to_string(),
                confirmed: ones,
                nodes: self.node_count(),
                quorum: q,
            })
        } else {
            Err(self.failure_error(failures(&self.nodes, &replies), answered))
        }
    }
}
