//! [`LockSet`]: one lock over several names at once
//! ([`Redlock::acquire_many`], [`Redlock::try_acquire_many`]).
//!
//! # The per-node step
//!
//! Each node takes the whole set or nothing, in one atomic step: a Lua
//! script ([`ACQUIRE_SET`], sent with `EVAL`) calls `REDLOCK.ACQUIRE` for
//! each name in byte order and, as soon as one name is held by another
//! owner (or a call fails), releases the names it took in this step and
//! answers nil (or the error). Redis runs a script without interleaving
//! any other command, so no other client ever sees part of a set on a
//! node, and two callers with overlapping sets never hold part of each
//! other's set there: neither waits on the other, so there is no deadlock
//! whatever order they list their names in. A script rather than a new
//! module command: the module's ACQUIRE (its clock floor, restart guard,
//! counters, replication and RDB) stays the one code path that grants a
//! name, and the script runs on every server that loads the module.
//! `EVAL` rather than `EVALSHA`: a restarted or failed-over node forgets
//! loaded scripts, and `EVAL` needs no `NOSCRIPT` retry path (Redis caches
//! the compiled script by its SHA either way).
//!
//! Across the nodes it is the quorum of a single lock, per name: each
//! name's [`Attempt`] tallies its own tokens (the node's reply split per
//! name, `core/many.rs`), writes back its own highest token, and the set
//! is held when every name is; the set's validity is the earliest of the
//! names'. A failed set is released on every node that may hold any of it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::{Cmd, Value};
use tokio_util::sync::CancellationToken;

use crate::cluster::key_slot;
use crate::core::attempt::{attempt_error, Acquired, Attempt, AttemptStep, FailReason};
use crate::core::error::{Error, NodeFailure};
use crate::core::lease::{lower, ExtendRule, Unconfirmed};
use crate::core::many::{combine_next, sorted_names, SetReply, ACQUIRE_SET};
use crate::core::rules::Rules;
use crate::core::waiting::Retry;
use crate::identity::OneVotePerServer;
use crate::lock::OwnerId;
use crate::member::Voter;
use crate::quorum::{fan_out, fence_reply, Leftovers, Quorum, Unanswered};
use crate::redlock::Redlock;
use crate::shared::{now_micros, ttl_millis, Inner};

/// A node's reply to [`ACQUIRE_SET`] as the names' tallies see it.
fn set_reply(reply: Result<Value, NodeFailure>) -> SetReply {
    match reply {
        Ok(Value::Nil) => SetReply::Held,
        Ok(Value::Array(items)) => {
            let mut tokens = Vec::with_capacity(items.len());
            for item in &items {
                match item {
                    Value::Int(n) if *n > 0 => tokens.push(*n as u64),
                    other => {
                        return SetReply::Failed(NodeFailure::Unexpected(format!("{other:?}")))
                    }
                }
            }
            SetReply::Granted(tokens)
        }
        Ok(v) => SetReply::Failed(NodeFailure::Unexpected(format!("{v:?}"))),
        Err(e) => SetReply::Failed(e),
    }
}

/// The set's names, sorted, or the error that names what is wrong with
/// them: none, a duplicate, or (with a cluster member) names in different
/// hash slots.
pub(crate) fn checked_names<S: AsRef<str>>(
    nodes: &[Voter],
    names: &[S],
) -> Result<Vec<String>, Error> {
    let sorted = sorted_names(names).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    if let Some(cluster) = nodes.iter().find(|v| matches!(v, Voter::Cluster(_))) {
        let first = &sorted[0];
        let slot = key_slot(first.as_bytes());
        let others: Vec<String> = sorted
            .iter()
            .filter(|n| key_slot(n.as_bytes()) != slot)
            .map(|n| format!("{n:?} (slot {})", key_slot(n.as_bytes())))
            .collect();
        if !others.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the names of a lock set must share a hash slot on cluster member {}: {} is in slot {slot}, but {} differ; give them a common hash tag, e.g. {{orders}}a and {{orders}}b",
                cluster.addr(),
                format_args!("{first:?}"),
                others.join(", ")
            )));
        }
    }
    Ok(sorted)
}

/// What a failed set attempt leaves to release: its nodes, and the
/// unanswered calls to keep until the release is queued.
pub(crate) struct SetLeftover {
    pub(crate) nodes: Vec<usize>,
    busy: bool,
    pub(crate) _unanswered: Unanswered,
}

impl Quorum {
    /// One attempt at a set: the [`ACQUIRE_SET`] round on every node, each
    /// name's write-back round when its attempt asks for one, then each
    /// name's validity check. Returns the tokens (in `names` order) and
    /// the earliest deadline, or the error with what to release.
    #[allow(clippy::too_many_arguments)]
    async fn attempt_set(
        &self,
        rules: &Rules,
        names: &[String],
        owner: &str,
        ttl: Duration,
        ttl_ms: u64,
        floor: Option<u64>,
        start: Instant,
    ) -> Result<(Vec<u64>, Instant, Unanswered), (Error, SetLeftover)> {
        let count = names.len();
        let mut cmd = Cmd::new();
        cmd.arg("EVAL").arg(ACQUIRE_SET).arg(count);
        for name in names {
            cmd.arg(name.as_str());
        }
        cmd.arg(owner).arg(ttl_ms);
        if let Some(floor) = floor {
            cmd.arg("FLOOR").arg(floor);
        }
        let mut attempts: Vec<Attempt<Instant>> = (0..count)
            .map(|_| Attempt::new(*rules, ttl_ms, start))
            .collect();
        let mut votes = OneVotePerServer::new(self.nodes.len());
        let (end, unanswered) = fan_out(
            &self.nodes,
            0..self.nodes.len(),
            cmd,
            Leftovers::Return,
            |i, id, reply| {
                let reply = set_reply(self.one_vote(&mut votes, i, id, reply));
                let now = Instant::now();
                combine_next(
                    attempts
                        .iter_mut()
                        .enumerate()
                        .map(|(n, a)| a.on_acquire_reply(i, reply.for_name(n, count), now)),
                )
                .into()
            },
        )
        .await;
        let now = Instant::now();
        let steps: Vec<AttemptStep<Instant>> = attempts
            .iter_mut()
            .map(|a| a.acquire_round_ended(end.failure(), now))
            .collect();
        // Each name's write-back round, side by side.
        let rounds = steps.into_iter().zip(attempts.iter_mut()).zip(names).map(
            |((step, attempt), name)| async move {
                match step {
                    AttemptStep::Done(done) => done,
                    AttemptStep::WriteBack { token, targets } => {
                        self.metrics.write_back(name);
                        let mut fence = Cmd::new();
                        fence
                            .arg("REDLOCK.FENCE")
                            .arg(name.as_str())
                            .arg(owner)
                            .arg(token);
                        let mut votes = OneVotePerServer::new(self.nodes.len());
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
                        attempt.fence_round_ended(end.failure(), Instant::now())
                    }
                }
            },
        );
        let results = join_all(rounds).await;
        let mut tokens = Vec::with_capacity(count);
        let mut deadline: Option<Instant> = None;
        let mut first_error = None;
        let mut release: Vec<usize> = Vec::new();
        let mut all_failed = true;
        for result in results {
            match result {
                Ok(Acquired { token, deadline: d }) => {
                    all_failed = false;
                    tokens.push(token);
                    deadline = Some(deadline.map_or(d, |prev| lower(prev, d)));
                }
                Err(failed) => {
                    release.extend(failed.release.iter().copied());
                    if first_error.is_none() {
                        first_error = Some(failed.reason);
                    }
                }
            }
        }
        let Some(reason) = first_error else {
            let deadline = deadline.unwrap_or(start);
            return Ok((tokens, deadline, unanswered));
        };
        // A name that was granted is held wherever the set was granted:
        // release every node then, not only the failed names' nodes.
        if !all_failed {
            release = (0..self.nodes.len()).collect();
        }
        release.sort_unstable();
        release.dedup();
        let busy = matches!(reason, FailReason::Busy { .. });
        let error = match reason {
            FailReason::NoQuorum { answered, failures } => self.failure_error(failures, answered),
            reason => attempt_error(rules, reason, ttl, &|i| self.nodes[i].addr().to_string()),
        };
        Err((
            error,
            SetLeftover {
                nodes: release,
                busy,
                _unanswered: unanswered,
            },
        ))
    }

    /// RELEASE of every name of a set for `owner` on `targets`, waiting
    /// for the replies (bounded by the per-node timeout).
    pub(crate) async fn release_set_on(&self, names: &[String], owner: &str, targets: &[usize]) {
        if targets.is_empty() {
            return;
        }
        join_all(
            names
                .iter()
                .map(|name| self.release_on(name, owner, targets)),
        )
        .await;
    }

    /// RELEASE of every name of a set for `owner` on `targets`, queued on
    /// each node's connection behind the attempt's `unanswered` calls but
    /// not awaited ([`Quorum::release_queued`] for each name): a set waiter
    /// sends its WAITs at once (see `AfterAttempt::Wait` for why that is
    /// sound).
    pub(crate) async fn release_set_queued(
        &self,
        names: &[String],
        owner: &str,
        targets: &[usize],
        unanswered: Unanswered,
    ) {
        for name in names {
            self.release_queued(name, owner, targets, Unanswered::default())
                .await;
        }
        drop(unanswered);
    }
}

/// A lock over several names, held together: one fencing token per name
/// (each name's own counter), one validity for the set. Made by
/// [`Redlock::acquire_many`] or [`Redlock::try_acquire_many`].
///
/// Pass each name's token to what that name protects. Dropping a set that
/// was not released releases it in the background when a tokio runtime is
/// available.
pub struct LockSet {
    inner: Arc<Inner>,
    /// The names in byte order, as the nodes take them.
    names: Vec<String>,
    /// One token per name, in `names` order.
    tokens: Vec<u64>,
    owner: OwnerId,
    started: Instant,
    deadline: Mutex<Instant>,
    lost: CancellationToken,
    released: bool,
    /// The ACQUIRE steps the acquisition did not wait for, kept until a
    /// release is queued behind them (as for a `Lock`).
    _unanswered: Unanswered,
    extend_rule: ExtendRule<Instant>,
}

impl std::fmt::Debug for LockSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockSet")
            .field("names", &self.names)
            .field("tokens", &self.tokens)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl LockSet {
    /// The names, in byte order (the order every node takes them in).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The fencing token of `name`, or `None` when it is not in the set.
    /// Each name has its own counter: the token is higher than every token
    /// handed out earlier for that name.
    pub fn token(&self, name: &str) -> Option<u64> {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .ok()
            .and_then(|i| self.tokens.get(i).copied())
    }

    /// Every `(name, token)` pair, in byte order of the names.
    pub fn tokens(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.names
            .iter()
            .map(String::as_str)
            .zip(self.tokens.iter().copied())
    }

    /// The owner id (a UUID v4) the set was taken with, the same for every
    /// name.
    pub fn owner(&self) -> &str {
        self.owner.as_str()
    }

    /// What is left of the set's validity (the earliest of its names'),
    /// on the local monotonic clock; zero once it ran out, was released or
    /// was found lost.
    pub fn validity(&self) -> Duration {
        if self.lost.is_cancelled() {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// When the acquisition round that got the set started.
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// The lost signal: cancelled once an extension found any name of the
    /// set lost (or its validity over). Stop using every token then.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the set was found lost (see [`LockSet::lost_token`]).
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_deadline(&self, deadline: Instant) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = deadline;
    }

    fn lower_deadline(&self, bound: Instant) {
        let mut deadline = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        *deadline = lower(*deadline, bound);
    }

    /// Extends every name's lease to `ttl` from now on a quorum of nodes,
    /// with the rules of [`Lock::extend`](crate::Lock::extend): the set is
    /// extended when every name is.
    ///
    /// # Errors
    ///
    /// As [`Lock::extend`](crate::Lock::extend); [`Error::Lost`] names the
    /// first name found lost. After [`Error::Lost`], [`Error::Lapsed`] or
    /// [`Error::ExpiredBeforeUse`] the set is lost (its lost signal fires).
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = ttl_millis(ttl)?;
        let result = self.extend_round(ttl, ttl_ms).await;
        if let Err(Error::Lost { .. } | Error::Lapsed { .. } | Error::ExpiredBeforeUse { .. }) =
            &result
        {
            self.lost.cancel();
        }
        result
    }

    async fn extend_round(&mut self, ttl: Duration, ttl_ms: u64) -> Result<(), Error> {
        let start = Instant::now();
        let rules = &self.inner.rules;
        let unconfirmed = |why| match why {
            Unconfirmed::Lapsed { late } => Error::Lapsed {
                key: self.names.join(","),
                late,
            },
            Unconfirmed::Elapsed(elapsed) => Error::ExpiredBeforeUse { ttl, elapsed },
        };
        if self.lost.is_cancelled() {
            return Err(unconfirmed(Unconfirmed::Lapsed {
                late: Duration::ZERO,
            }));
        }
        let extending = self
            .extend_rule
            .begin(rules, ttl_ms, start, self.deadline())
            .map_err(unconfirmed)?;
        self.lower_deadline(extending.bound);
        let owner = self.owner.as_str();
        let quorum = &self.inner.quorum;
        let results = join_all(
            self.names
                .iter()
                .map(|name| quorum.extend(name, owner, ttl_ms)),
        )
        .await;
        // Lost first: it says the set is gone whatever else failed.
        let mut results = results;
        if let Some(i) = results
            .iter()
            .position(|r| matches!(r, Err(Error::Lost { .. })))
        {
            return results.swap_remove(i);
        }
        for result in results {
            result?;
        }
        match self
            .extend_rule
            .confirmed(rules, &extending, Instant::now())
        {
            Ok(deadline) => {
                self.set_deadline(deadline);
                Ok(())
            }
            Err(why) => Err(unconfirmed(why)),
        }
    }

    /// Releases every name of the set on every node (from the call on the
    /// validity is zero). `Ok(true)` when a quorum confirmed every name
    /// was still held and is now free, `Ok(false)` when some name's lease
    /// had already run out.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when too few nodes answered for some name.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        self.lower_deadline(Instant::now());
        let owner = self.owner.as_str();
        let quorum = &self.inner.quorum;
        let results = join_all(self.names.iter().map(|name| quorum.release(name, owner))).await;
        let mut all_held = true;
        for result in results {
            all_held &= result?;
        }
        Ok(all_held)
    }

    /// Stops tracking the set without releasing it (its leases run out, or
    /// [`Redlock::release_owner`] frees each name with the returned owner
    /// id).
    pub fn detach(mut self) -> String {
        self.released = true;
        self.owner.as_str().to_string()
    }
}

impl Drop for LockSet {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        let names = std::mem::take(&mut self.names);
        let owner = self.owner;
        handle.spawn(async move {
            let quorum = &inner.quorum;
            join_all(names.iter().map(|n| quorum.release(n, owner.as_str()))).await;
        });
    }
}

impl Redlock {
    /// Takes a lock over every name of `names` at once for `ttl`, retrying
    /// per the [`RetryPolicy`](crate::RetryPolicy) while any of them is
    /// busy (as [`Redlock::acquire`]).
    ///
    /// Each node takes the whole set or nothing, in one atomic step, and
    /// in byte order of the names: two callers whose sets overlap never
    /// deadlock, whatever order they list the names in. Each name gets its
    /// own fencing token; the set has one validity.
    ///
    /// # Errors
    ///
    /// As [`Redlock::acquire`]; [`Error::InvalidArgument`] for an empty
    /// set, a name given twice, or (with a cluster member) names that do
    /// not share a hash slot (the message names them).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let set = redlock
    ///     .acquire_many(&["account:1", "account:2"], Duration::from_secs(10))
    ///     .await?;
    /// let from = set.token("account:1").unwrap_or_default();
    /// # let _ = from;
    /// set.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_many<S: AsRef<str>>(
        &self,
        names: &[S],
        ttl: Duration,
    ) -> Result<LockSet, Error> {
        let names = checked_names(&self.inner.quorum.nodes, names)?;
        let policy = self.inner.retry;
        let mut retry = Retry::new(policy.attempts, policy.base_delay, policy.jitter);
        loop {
            // A fresh owner per attempt, as for `acquire`.
            let owner = OwnerId::new();
            let settled = ReleaseSetIfDropped::new(&self.inner, &names, owner);
            match self.attempt_many(&names, ttl, owner).await {
                Ok(set) => {
                    settled.disarm();
                    return Ok(set);
                }
                Err((error, leftover)) => {
                    let pause = retry.after_failure(&error, &mut rand::thread_rng());
                    let release =
                        self.inner
                            .quorum
                            .release_set_on(&names, owner.as_str(), &leftover.nodes);
                    let Some(delay) = pause else {
                        release.await;
                        settled.disarm();
                        return Err(error);
                    };
                    tokio::join!(
                        async {
                            release.await;
                            settled.disarm();
                        },
                        tokio::time::sleep(delay)
                    );
                }
            }
        }
    }

    /// One attempt at the set: `Ok(None)` when another owner holds any of
    /// its names (on enough nodes that the set cannot be had now).
    ///
    /// # Errors
    ///
    /// As [`Redlock::acquire_many`], except that busy is `Ok(None)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// if let Some(set) = redlock
    ///     .try_acquire_many(&["a", "b"], Duration::from_secs(10))
    ///     .await?
    /// {
    ///     set.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_many<S: AsRef<str>>(
        &self,
        names: &[S],
        ttl: Duration,
    ) -> Result<Option<LockSet>, Error> {
        let names = checked_names(&self.inner.quorum.nodes, names)?;
        let owner = OwnerId::new();
        let settled = ReleaseSetIfDropped::new(&self.inner, &names, owner);
        let outcome = match self.attempt_many(&names, ttl, owner).await {
            Ok(set) => Ok(Some(set)),
            Err((error, leftover)) => {
                self.inner
                    .quorum
                    .release_set_on(&names, owner.as_str(), &leftover.nodes)
                    .await;
                if leftover.busy {
                    Ok(None)
                } else {
                    Err(error)
                }
            }
        };
        settled.disarm();
        outcome
    }

    pub(crate) async fn attempt_many(
        &self,
        names: &[String],
        ttl: Duration,
        owner: OwnerId,
    ) -> Result<LockSet, (Error, SetLeftover)> {
        let inner = &self.inner;
        let ttl_ms = ttl_millis(ttl).map_err(|e| {
            let nothing = SetLeftover {
                nodes: Vec::new(),
                busy: false,
                _unanswered: Unanswered::default(),
            };
            (e, nothing)
        })?;
        let start = Instant::now();
        let floor = inner.clock_floor.then(now_micros);
        let (tokens, deadline, unanswered) = inner
            .quorum
            .attempt_set(
                &inner.rules,
                names,
                owner.as_str(),
                ttl,
                ttl_ms,
                floor,
                start,
            )
            .await?;
        tracing::debug!(?names, ?tokens, "acquired a lock set");
        Ok(LockSet {
            inner: Arc::clone(inner),
            names: names.to_vec(),
            tokens,
            owner,
            started: start,
            deadline: Mutex::new(deadline),
            lost: CancellationToken::new(),
            released: false,
            _unanswered: unanswered,
            extend_rule: ExtendRule::new(),
        })
    }
}

/// Releases a set attempt's owner on every node when the caller is
/// dropped before the attempt was settled (as `ReleaseIfDropped` for one
/// name).
pub(crate) struct ReleaseSetIfDropped<'a> {
    inner: &'a Arc<Inner>,
    names: &'a [String],
    owner: OwnerId,
    armed: bool,
}

impl<'a> ReleaseSetIfDropped<'a> {
    pub(crate) fn new(inner: &'a Arc<Inner>, names: &'a [String], owner: OwnerId) -> Self {
        ReleaseSetIfDropped {
            inner,
            names,
            owner,
            armed: true,
        }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for ReleaseSetIfDropped<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(self.inner);
        let names = self.names.to_vec();
        let owner = self.owner;
        handle.spawn(async move {
            let quorum = &inner.quorum;
            join_all(names.iter().map(|n| quorum.release(n, owner.as_str()))).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replies_are_classified() {
        assert_eq!(
            set_reply(Ok(Value::Array(vec![Value::Int(3), Value::Int(8)]))),
            SetReply::Granted(vec![3, 8])
        );
        assert_eq!(set_reply(Ok(Value::Nil)), SetReply::Held);
        assert!(matches!(
            set_reply(Ok(Value::Array(vec![Value::Int(0)]))),
            SetReply::Failed(NodeFailure::Unexpected(_))
        ));
        assert!(matches!(
            set_reply(Ok(Value::Okay)),
            SetReply::Failed(NodeFailure::Unexpected(_))
        ));
    }
}
