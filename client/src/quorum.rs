//! The quorum rounds: send one command to every node at once, stop waiting
//! as soon as the outcome is decided, and turn the replies into a result.
//!
//! Every command goes to all nodes in the first poll of the round (each
//! node's multiplexed connection queues it at once), so a round costs one
//! round trip to the quorum-th fastest node, and a dead or frozen node costs
//! at most the per-node timeout (one timer per round). Calls the round did
//! not wait for are dropped (FENCE), kept unpolled by the caller (ACQUIRE)
//! or finished by a background task (RELEASE, EXTEND): see [`Leftovers`].
//! What this needs from the connection is stated once, in `node.rs` ("What
//! the quorum rounds rely on from the connection"); the decisions are the
//! tallies' (`core/tally.rs`).

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use crate::core::attempt::{
    attempt_error, failure_error, Acquired, Attempt, AttemptStep, FailReason,
};
use crate::core::error::{Error, NodeFailure};
use crate::core::rules::Rules;
use crate::core::tally::{
    AcquireReply, Confirmation, ConfirmationOutcome, ConfirmationTally, Failures, FenceReply,
};
use crate::identity::{OneVotePerServer, ServerId};
use crate::member::Voter;
use crate::metrics::{self as client_metrics, LockMetrics};
use crate::round_calls::RoundCalls;

/// Calls of an ACQUIRE round that it did not wait for, kept alive but never
/// polled again: their commands are queued on the connections, and a queued
/// command is written only while its caller still exists (property 3 in
/// `node.rs`; see [`Leftovers::Return`]). Replies that arrive are discarded.
#[derive(Default)]
pub(crate) struct Unanswered {
    _calls: Option<Mutex<Box<dyn Send>>>,
}

/// What a failed acquire attempt leaves: the nodes that may hold the lock
/// for the owner and must get a RELEASE, how many of them are known to
/// have granted it, and the unanswered calls, to keep until that release is
/// queued.
pub(crate) struct Leftover {
    pub(crate) nodes: Vec<usize>,
    pub(crate) granted: usize,
    pub(crate) _unanswered: Unanswered,
}

/// The nodes and the majority.
pub(crate) struct Quorum {
    /// Shared, so that a round's background end can name its nodes.
    pub(crate) nodes: Arc<[Voter]>,
    pub(crate) quorum: usize,
    /// The labels of the client's metrics.
    pub(crate) metrics: LockMetrics,
}

/// The replies of one round, for tracing: `addr=reply` for every node
/// (`-` for a node the round did not wait for).
pub(crate) struct Outcomes<'a, R>(pub(crate) &'a [Voter], pub(crate) &'a [Option<R>]);

impl<R: fmt::Display> fmt::Display for Outcomes<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (node, reply)) in self.0.iter().zip(self.1).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            match reply {
                None => write!(f, "{}=-", node.addr())?,
                Some(r) => write!(f, "{}={r}", node.addr())?,
            }
        }
        Ok(())
    }
}

/// `name key owner`, with room for `arg_count` arguments in all and two
/// numbers after the owner: the command is built without reallocating as
/// its arguments are appended.
fn lock_cmd(name: &str, key: &str, owner: &str, arg_count: usize) -> Cmd {
    // Two numbers of at most 20 digits and a `FLOOR`.
    const NUMBERS: usize = 2 * 20 + 5;
    let mut cmd = Cmd::with_capacity(arg_count, name.len() + key.len() + owner.len() + NUMBERS);
    cmd.arg(name).arg(key).arg(owner);
    cmd
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
    /// are already queued (property 1 in `node.rs`); keeping the calls
    /// alive matters because a queued command whose caller is gone is
    /// skipped (property 3), and then a slow node never gets the ACQUIRE
    /// and a held lock sits on a
    /// bare quorum, one failure from lost (measured with plain dropping:
    /// `acquire_extend_release_busy_and_increasing_tokens` failed in 1 of
    /// 12 runs). Dropping them would still be safe: a dropped ACQUIRE was
    /// either never written, or is written before any later command of ours
    /// on that node's connection (property 2: one connection per node,
    /// written in queue order), in
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

/// Sends `cmd` to the nodes named by `targets`, all at once, and feeds each
/// reply to `on_reply(node, server, reply)` (`server`: the identity of the
/// server the command went to, when known) until it returns true (the round is
/// decided), every target has answered, or the per-node timeout (one timer
/// for the whole round) ran out. Returns how the round ended (after the
/// timer, the caller fails the targets that did not answer) and the calls still
/// pending when the round was decided, which are dropped, returned or
/// finished in the background, per `leftovers`.
pub(crate) async fn fan_out(
    nodes: &Arc<[Voter]>,
    targets: impl Iterator<Item = usize> + Clone,
    cmd: Cmd,
    leftovers: Leftovers,
    mut on_reply: impl FnMut(usize, Option<ServerId>, Result<Value, NodeFailure>) -> Next,
) -> (RoundEnd, Unanswered) {
    let mut on_reply = |i: usize, id: Option<ServerId>, reply: Result<Value, NodeFailure>| {
        if let Err(failure) = &reply {
            client_metrics::node_error(nodes[i].url(), failure);
        }
        on_reply(i, id, reply)
    };
    // The targets whose call is still pending (for the node-error metric;
    // only after the timer or for the leftovers): call `j` went to the
    // `j`-th target.
    let pending = |calls: &RoundCalls<_>| -> Vec<usize> {
        targets
            .clone()
            .enumerate()
            .filter(|&(j, _)| calls.is_pending(j))
            .map(|(_, i)| i)
            .collect()
    };
    let (mut calls, state, deadline, timeout) =
        start_calls(nodes, targets.clone(), cmd, &mut on_reply).await;
    if !calls.is_empty() && state != Next::Done {
        // One timer for the round instead of one per call: every call was
        // started above, in the same poll, so this is the same bound.
        let timer = tokio::time::sleep_until(deadline);
        tokio::pin!(timer);
        // Set once the round is decided but lingers (see [`Next::Linger`]).
        let mut lingering = false;
        if let Next::Linger(until) = state {
            lingering = true;
            timer.as_mut().reset(until.min(deadline));
        }
        loop {
            tokio::select! {
                biased;
                next = calls.next() => {
                    let Some((i, id, reply)) = next else { break };
                    match on_reply(i, id, reply) {
                        Next::Done => break,
                        Next::Wait => {}
                        Next::Linger(until) => {
                            if !lingering {
                                lingering = true;
                                timer.as_mut().reset(until.min(deadline));
                            }
                        }
                    }
                }
                () = &mut timer => {
                    if lingering {
                        // Decided; the calls still pending are leftovers.
                        break;
                    }
                    // Past the bound: nothing left to finish.
                    let end = RoundEnd::TimedOut(timeout);
                    for i in pending(&calls) {
                        client_metrics::node_error(nodes[i].url(), &end.failure());
                    }
                    return (end, Unanswered::default());
                }
            }
        }
    }
    if calls.is_empty() {
        return (RoundEnd::Replied, Unanswered::default());
    }
    match leftovers {
        Leftovers::Drop => {}
        Leftovers::Return => {
            let unanswered = Unanswered {
                _calls: Some(Mutex::new(Box::new(calls))),
            };
            return (RoundEnd::Replied, unanswered);
        }
        Leftovers::Finish => {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                // The nodes still pending, for the node-error metric: a
                // node slower than the quorum (frozen, overloaded) shows
                // there although the round did not wait for it. A bit set
                // rather than a list: no allocation on every release.
                let mut waiting = PendingNodes::default();
                for (j, i) in targets.enumerate() {
                    if calls.is_pending(j) {
                        waiting.insert(i);
                    }
                }
                let nodes = Arc::clone(nodes);
                handle.spawn(async move {
                    let rest = async {
                        while let Some((i, _, reply)) = calls.next().await {
                            waiting.remove(i);
                            if let Err(failure) = &reply {
                                client_metrics::node_error(nodes[i].url(), failure);
                            }
                        }
                    };
                    if tokio::time::timeout_at(deadline, rest).await.is_err() {
                        let failure = NodeFailure::Timeout(timeout);
                        for i in waiting.iter() {
                            client_metrics::node_error(nodes[i].url(), &failure);
                        }
                    }
                });
            }
        }
    }
    (RoundEnd::Replied, Unanswered::default())
}

/// The nodes of a round still pending, as bits: members 0 to 127 (a
/// quorum of more members is no deployment; later ones are not tracked).
#[derive(Clone, Copy, Default)]
struct PendingNodes(u128);

impl PendingNodes {
    fn insert(&mut self, node: usize) {
        if node < 128 {
            self.0 |= 1 << node;
        }
    }

    fn remove(&mut self, node: usize) {
        if node < 128 {
            self.0 &= !(1 << node);
        }
    }

    fn iter(self) -> impl Iterator<Item = usize> {
        (0..128).filter(move |&i| self.0 & (1 << i) != 0)
    }
}

/// What one node's call of a round gives: the node's index, its server
/// identity when known, and the reply.
type CallOutput = (usize, Option<ServerId>, Result<Value, NodeFailure>);

/// The first half of [`fan_out`]: starts every call in one poll, in target
/// order, and feeds the replies that are ready at once to `on_reply`.
/// Returns the pending calls, what `on_reply` said last (`Done` wins), and the
/// round's deadline and timeout (the largest per-node timeout of the
/// targets). Once this returned, every command is queued on its node's
/// connection.
async fn start_calls(
    nodes: &[Voter],
    targets: impl Iterator<Item = usize> + Clone,
    cmd: Cmd,
    on_reply: &mut impl FnMut(usize, Option<ServerId>, Result<Value, NodeFailure>) -> Next,
) -> (
    RoundCalls<impl Future<Output = CallOutput> + Send + 'static>,
    Next,
    tokio::time::Instant,
    Duration,
) {
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
    let mut calls = RoundCalls::new(targets.map(|i| {
        let node = nodes[i].clone();
        let cmd = Arc::clone(&cmd);
        tokio::task::unconstrained(async move {
            let (id, reply) = node.call_untimed(&cmd).await;
            (i, id, reply)
        })
    }));
    let mut state = Next::Wait;
    // Start every call here, in this one poll and in target order, before
    // anything else: a call that was not polled has not queued its command
    // (see `node.rs`, "What the rounds rely on"). Calls that finish at once
    // (no connection) are recorded now.
    std::future::poll_fn(|cx| {
        let _same_order = queueing_lock(&cmd);
        calls.poll_each(cx, |(i, id, reply)| {
            state = match (state, on_reply(i, id, reply)) {
                (Next::Done, _) | (_, Next::Done) => Next::Done,
                (Next::Linger(until), _) | (_, Next::Linger(until)) => Next::Linger(until),
                (Next::Wait, Next::Wait) => Next::Wait,
            }
        });
        Poll::Ready(())
    })
    .await;
    (calls, state, deadline, timeout)
}

/// Serialises the queueing of rounds on the same lock name within this
/// process (striped by a hash of the name: rounds on other names almost
/// never wait), so that every node's connection queues them in the same
/// order.
///
/// Why: the first round on a freed lock wins it on every node only if
/// every node sees the same ACQUIRE first. Two rounds queued at the same
/// time from two worker threads interleave per node (A before B on one
/// node, B before A on another), and so do an ACQUIRE and the holder's
/// RELEASE: the nodes then split their grants between attempts that all
/// fail. Under contention (16 tasks on one key) such split votes decided
/// whether a run reached about 4,000 or about 2,600 successes/s
/// (`bench/examples/contention_probe.rs`: 0.02 against 0.12–0.15 grants to
/// failed attempts per failed attempt). Only an ordering aid: a command
/// whose channel is full is queued later, outside the lock, and rounds from
/// other processes interleave anyway; safety never depends on it.
fn queueing_lock(cmd: &Cmd) -> std::sync::MutexGuard<'static, ()> {
    const STRIPES: usize = 256;
    static QUEUEING: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];
    // FNV-1a over the lock name (the argument after the command name).
    let mut hash: u32 = 0x811c_9dc5;
    if let Some(redis::Arg::Simple(name)) = cmd.args_iter().nth(1) {
        for &b in name {
            hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
    }
    QUEUEING[hash as usize % STRIPES]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// What a round does after a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Not decided: wait for more replies (up to the round's timer).
    Wait,
    /// Decided: stop waiting.
    Done,
    /// Decided, but keep collecting replies until every target answered or
    /// this instant (bounded by the round's timer) passed, whichever comes
    /// first; what is still pending then is a leftover.
    Linger(tokio::time::Instant),
}

impl From<bool> for Next {
    fn from(decided: bool) -> Self {
        if decided {
            Next::Done
        } else {
            Next::Wait
        }
    }
}

impl From<crate::core::attempt::Next<Instant>> for Next {
    fn from(next: crate::core::attempt::Next<Instant>) -> Self {
        use crate::core::attempt::Next as Decided;
        match next {
            Decided::Wait => Next::Wait,
            Decided::Done => Next::Done,
            Decided::Linger(until) => Next::Linger(tokio::time::Instant::from_std(until)),
        }
    }
}

/// How [`fan_out`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RoundEnd {
    /// Decided, or every target answered.
    Replied,
    /// The round's timer ran out after this long.
    TimedOut(Duration),
}

impl RoundEnd {
    /// The failure of a target that did not answer before the timer.
    pub(crate) fn failure(self) -> NodeFailure {
        match self {
            RoundEnd::TimedOut(d) => NodeFailure::Timeout(d),
            RoundEnd::Replied => NodeFailure::Timeout(Duration::ZERO),
        }
    }
}

/// An ACQUIRE reply as the tally sees it.
fn acquire_reply(reply: Result<Value, NodeFailure>) -> AcquireReply {
    match reply {
        Ok(Value::Int(n)) if n > 0 => AcquireReply::Granted(n as u64),
        Ok(Value::Nil) => AcquireReply::Held,
        Ok(v) => AcquireReply::Failed(NodeFailure::Unexpected(format!("{v:?}"))),
        Err(e) => AcquireReply::Failed(e),
    }
}

/// A FENCE reply as the tally sees it.
pub(crate) fn fence_reply(reply: Result<Value, NodeFailure>) -> FenceReply {
    match reply {
        Ok(Value::Int(n)) if n >= 0 => FenceReply::Counter(n as u64),
        Ok(Value::Nil) => FenceReply::NotHeld,
        Ok(v) => FenceReply::Failed(NodeFailure::Unexpected(format!("{v:?}"))),
        Err(e) => FenceReply::Failed(e),
    }
}

/// A RELEASE or EXTEND reply as the tally sees it.
fn confirmation(reply: Result<Value, NodeFailure>) -> Confirmation {
    match reply {
        Ok(Value::Int(1)) => Confirmation::Held,
        Ok(Value::Int(0)) => Confirmation::NotHeld,
        Ok(v) => Confirmation::Failed(NodeFailure::Unexpected(format!("{v:?}"))),
        Err(e) => Confirmation::Failed(e),
    }
}

impl Quorum {
    fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// One server, one vote: a reply from the same server as a member that
    /// already counted in this round becomes a [`NodeFailure::SameServer`]
    /// (and an error event naming both members). Failures claim no vote.
    pub(crate) fn one_vote(
        &self,
        votes: &mut OneVotePerServer,
        node: usize,
        server: Option<ServerId>,
        reply: Result<Value, NodeFailure>,
    ) -> Result<Value, NodeFailure> {
        let Ok(value) = reply else { return reply };
        match votes.admit(node, server.as_ref()) {
            Ok(()) => Ok(value),
            Err(twin) => {
                let (node, twin) = (&self.nodes[node], &self.nodes[twin]);
                let failure = NodeFailure::SameServer {
                    twin: twin.url().to_string(),
                };
                client_metrics::node_error(node.url(), &failure);
                tracing::error!(
                    node = node.url(),
                    same_server_as = twin.url(),
                    run_id = server.as_deref().unwrap_or(""),
                    "two members of the quorum are the same Redis server: it is counted once; list each server once"
                );
                Err(failure)
            }
        }
    }

    /// The error for a round that did not reach a quorum and was not "busy"
    /// (`core/attempt.rs::failure_error`, with the nodes' addresses).
    pub(crate) fn failure_error(&self, failed: Failures, answered: usize) -> Error {
        for (i, e) in &failed {
            tracing::trace!(node = self.nodes[*i].addr(), reason = %e, "node failed");
        }
        failure_error(self.node_count(), self.quorum, failed, answered, &|i| {
            self.nodes[i].addr().to_string()
        })
    }

    /// Steps 2–5 of the algorithm (DESIGN.md section 4) for one attempt
    /// that started at `start`, carried out for the pure [`Attempt`]
    /// machine: the ACQUIRE round on every node, then the write-back round
    /// when the machine asks for one, then the validity check. Returns the
    /// token and the end of the validity, or the error together with the
    /// nodes that may hold the lock for `owner` and must get a RELEASE.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn attempt(
        &self,
        rules: &Rules,
        key: &str,
        owner: &str,
        ttl: Duration,
        ttl_ms: u64,
        floor: Option<u64>,
        start: Instant,
    ) -> Result<(u64, Instant, Unanswered), (Error, Leftover)> {
        let mut cmd = lock_cmd("REDLOCK.ACQUIRE", key, owner, 6);
        cmd.arg(ttl_ms);
        if let Some(floor) = floor {
            cmd.arg("FLOOR").arg(floor);
        }
        let mut attempt = Attempt::new(*rules, ttl_ms, start);
        let mut votes = OneVotePerServer::new(self.node_count());
        let (end, unanswered) = fan_out(
            &self.nodes,
            0..self.node_count(),
            cmd,
            Leftovers::Return,
            |i, id, reply| {
                let reply = self.one_vote(&mut votes, i, id, reply);
                attempt
                    .on_acquire_reply(i, acquire_reply(reply), Instant::now())
                    .into()
            },
        )
        .await;
        let step = attempt.acquire_round_ended(end.failure(), Instant::now());
        tracing::debug!(outcomes = %Outcomes(&self.nodes, attempt.acquire_replies()), "acquire replies");
        let done = match step {
            AttemptStep::Done(done) => done,
            AttemptStep::WriteBack { token, targets } => {
                self.metrics.write_back(key);
                let mut fence = lock_cmd("REDLOCK.FENCE", key, owner, 4);
                fence.arg(token);
                let (end, _) = fan_out(
                    &self.nodes,
                    targets.into_iter(),
                    fence,
                    Leftovers::Drop,
                    |i, id, reply| {
                        let reply = self.one_vote(&mut votes, i, id, reply);
                        attempt.on_fence_reply(i, fence_reply(reply)).into()
                    },
                )
                .await;
                let done = attempt.fence_round_ended(end.failure(), Instant::now());
                tracing::debug!(token, outcomes = %Outcomes(&self.nodes, attempt.fence_replies()), "write-back replies");
                done
            }
        };
        match done {
            Ok(Acquired { token, deadline }) => Ok((token, deadline, unanswered)),
            Err(failed) => {
                let error = match failed.reason {
                    FailReason::NoQuorum { answered, failures } => {
                        self.failure_error(failures, answered)
                    }
                    reason => {
                        attempt_error(rules, reason, ttl, &|i| self.nodes[i].addr().to_string())
                    }
                };
                let leftover = Leftover {
                    nodes: failed.release,
                    granted: failed.granted,
                    _unanswered: unanswered,
                };
                Err((error, leftover))
            }
        }
    }

    /// RELEASE on the given nodes, waiting for all of them (each bounded by
    /// the per-node timeout). Used after a failed attempt.
    pub(crate) async fn release_on(&self, key: &str, owner: &str, targets: &[usize]) {
        if targets.is_empty() {
            return;
        }
        let cmd = lock_cmd("REDLOCK.RELEASE", key, owner, 3);
        let mut replies: Vec<Option<Confirmation>> = vec![None; self.node_count()];
        fan_out(
            &self.nodes,
            targets.iter().copied(),
            cmd,
            Leftovers::Finish,
            |i, _, reply| {
                replies[i] = Some(confirmation(reply));
                Next::Wait
            },
        )
        .await;
        tracing::debug!(outcomes = %Outcomes(&self.nodes, &replies), "release of a failed attempt");
    }

    /// RELEASE on `targets` without waiting for a reply (a busy
    /// `try_acquire`). Every command is queued on its node's connection
    /// before this returns, so whatever this client sends a node next (in
    /// particular the caller's next attempt) reaches it after the RELEASE
    /// (property 2 in `node.rs`); a background task collects the replies,
    /// bounded by the per-node timeout. `unanswered` (the attempt's own
    /// unanswered ACQUIREs) is kept until then, so the RELEASE is queued
    /// behind them.
    ///
    /// Why not a background task for the whole release: that task runs only
    /// after the caller moved on, and a caller retrying at once (a
    /// `try_acquire` loop) queued its next ACQUIRE first, which then found
    /// the lock held by its own previous attempt on every node that granted
    /// it; under contention that turned every split vote into another
    /// busy round (measured in `docs/performance.md`, contended row).
    pub(crate) async fn release_queued(
        &self,
        key: &str,
        owner: &str,
        targets: &[usize],
        unanswered: Unanswered,
    ) {
        if targets.is_empty() {
            return;
        }
        let cmd = lock_cmd("REDLOCK.RELEASE", key, owner, 3);
        let (mut calls, _, deadline, _) =
            start_calls(&self.nodes, targets.iter().copied(), cmd, &mut |_, _, _| {
                Next::Wait
            })
            .await;
        drop(unanswered);
        if calls.is_empty() {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let rest = async { while calls.next().await.is_some() {} };
                let _ = tokio::time::timeout_at(deadline, rest).await;
            });
        }
    }

    /// A RELEASE or EXTEND round on every node (replies 1 or 0), finished
    /// in the background past the point where the [`ConfirmationTally`]
    /// decided it.
    async fn confirmation_round(&self, cmd: Cmd, what: &str) -> ConfirmationOutcome {
        let mut tally = ConfirmationTally::new(self.node_count(), self.quorum);
        let mut votes = OneVotePerServer::new(self.node_count());
        let mut decided = None;
        let (end, _) = fan_out(
            &self.nodes,
            0..self.node_count(),
            cmd,
            Leftovers::Finish,
            |i, id, reply| {
                let reply = self.one_vote(&mut votes, i, id, reply);
                decided = tally.record(i, confirmation(reply));
                decided.is_some().into()
            },
        )
        .await;
        let outcome = match decided {
            Some(outcome) => outcome,
            None => tally.expire(end.failure()),
        };
        tracing::debug!(outcomes = %Outcomes(&self.nodes, tally.replies()), "{what} replies");
        outcome
    }

    /// RELEASE on every node. Returns once a quorum confirmed the release
    /// (`Ok(true)`), or once that became impossible: `Ok(false)` when a
    /// quorum answered but fewer than a quorum still had the lock for
    /// `owner`, `NoQuorum` when too few nodes answered at all. Slow nodes
    /// still get the release in the background.
    pub(crate) async fn release(&self, key: &str, owner: &str) -> Result<bool, Error> {
        let cmd = lock_cmd("REDLOCK.RELEASE", key, owner, 3);
        match self.confirmation_round(cmd, "release").await {
            ConfirmationOutcome::Confirmed => Ok(true),
            ConfirmationOutcome::NotHeld { .. } => Ok(false),
            ConfirmationOutcome::NoQuorum { answered, failures } => {
                Err(self.failure_error(failures, answered))
            }
        }
    }

    /// EXTEND on every node; `Ok(())` once a quorum confirmed. When a
    /// quorum answered but fewer than a quorum still had the lock:
    /// [`Error::Lost`]; when too few answered at all: `NoQuorum`.
    pub(crate) async fn extend(&self, key: &str, owner: &str, ttl_ms: u64) -> Result<(), Error> {
        let mut cmd = lock_cmd("REDLOCK.EXTEND", key, owner, 4);
        cmd.arg(ttl_ms);
        match self.confirmation_round(cmd, "extend").await {
            ConfirmationOutcome::Confirmed => Ok(()),
            ConfirmationOutcome::NotHeld { confirmed } => Err(Error::Lost {
                key: key.to_string(),
                confirmed,
                nodes: self.node_count(),
                quorum: self.quorum,
            }),
            ConfirmationOutcome::NoQuorum { answered, failures } => {
                Err(self.failure_error(failures, answered))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_nodes_are_a_bit_set() {
        let mut pending = PendingNodes::default();
        for i in [0, 4, 127, 128, 300] {
            pending.insert(i);
        }
        pending.remove(4);
        pending.remove(9);
        assert_eq!(pending.iter().collect::<Vec<_>>(), [0, 127]);
    }

    #[test]
    fn replies_are_classified_for_the_tallies() {
        assert_eq!(acquire_reply(Ok(Value::Int(7))), AcquireReply::Granted(7));
        assert_eq!(acquire_reply(Ok(Value::Nil)), AcquireReply::Held);
        assert!(matches!(
            acquire_reply(Ok(Value::Int(0))),
            AcquireReply::Failed(NodeFailure::Unexpected(_))
        ));
        assert_eq!(fence_reply(Ok(Value::Int(7))), FenceReply::Counter(7));
        assert_eq!(fence_reply(Ok(Value::Nil)), FenceReply::NotHeld);
        assert_eq!(confirmation(Ok(Value::Int(1))), Confirmation::Held);
        assert_eq!(confirmation(Ok(Value::Int(0))), Confirmation::NotHeld);
        assert!(matches!(
            confirmation(Ok(Value::Okay)),
            Confirmation::Failed(NodeFailure::Unexpected(_))
        ));
        let timeout = NodeFailure::Timeout(Duration::from_millis(5));
        assert_eq!(
            confirmation(Err(timeout.clone())),
            Confirmation::Failed(timeout)
        );
    }
}
