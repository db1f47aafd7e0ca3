//! Waiting for a busy lock set: [`Redlock::acquire_many_wait`], woken by
//! the nodes as [`Redlock::acquire_wait`] is for one name.
//!
//! A busy attempt at the set queues the release of what it got (without
//! awaiting the replies), then sends
//! `REDLOCK.WAIT name timeout QUEUE owner ticket` for every name of the set
//! to every node (each on a connection of its own), and tries the set
//! again once every name was free on a quorum. While a name stays held,
//! nothing is sent. Every WAIT carries the owner id of the attempt that
//! follows and one ticket for the whole wait, so each node hands a freed
//! name to the set waiter (or single-lock waiter) that queued first:
//! waiters are served in the order they started waiting.
//!
//! No deadlock: a waiter holds nothing while it waits (its attempt took
//! the whole set or nothing on each node, and a failed attempt is released
//! before the wait), so two waiters with overlapping sets never wait on
//! each other's grants. A name reserved for a waiter whose other names are
//! still held goes to the next waiter when the node's hand-off window
//! ends, so a set waiter does not keep a name from others for long.
//!
//! Dropping the future stops everything: the blocked WAITs' connections are
//! closed, and an attempt in flight is released like any unused grant.

use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;
use tracing::Instrument;

use crate::core::error::Error;
use crate::core::many::SetWake;
use crate::core::waiting::{after_failed_attempt, after_wake, AfterAttempt, AfterWake, Wake};
use crate::local_turn::{self, Turn};
use crate::lock::OwnerId;
use crate::lock_set::{checked_names, LockSet, ReleaseSetIfDropped};
use crate::quorum::Quorum;
use crate::redlock::Redlock;
use crate::shared::now_micros;
use crate::waiting::wait_for_free;

impl Redlock {
    /// Takes a lock over every name of `names` at once for `ttl`, waiting
    /// up to `max_wait` for the set to be free: as [`Redlock::acquire_many`]
    /// (all or none on each node, one token per name), woken by the nodes
    /// as [`Redlock::acquire_wait`] is. Waiters are served in the order
    /// they started waiting; two waiters with overlapping sets, in any
    /// order, never deadlock. Dropping the future leaves no grant and no
    /// blocked connection behind.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when some name is still held after `max_wait`;
    /// [`Error::NoQuorum`] when too few nodes answer and `max_wait` has
    /// passed; otherwise as [`Redlock::acquire_many`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// // Wait up to 30 s for both accounts, then hold them for 10 s.
    /// let set = redlock
    ///     .acquire_many_wait(
    ///         &["account:1", "account:2"],
    ///         Duration::from_secs(10),
    ///         Duration::from_secs(30),
    ///     )
    ///     .await?;
    /// set.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_many_wait<S: AsRef<str>>(
        &self,
        names: &[S],
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<LockSet, Error> {
        let names = checked_names(&self.inner.quorum.nodes, names)?;
        let until = Instant::now() + max_wait;
        let span = tracing::debug_span!(
            "redlock.acquire_many_wait",
            ?names,
            ttl_ms = ttl.as_millis() as u64,
            max_wait_ms = max_wait.as_millis() as u64
        );
        async {
            // One ticket for the whole wait, a fresh owner per attempt; the
            // WAITs before an attempt queue as that attempt's owner (as in
            // `acquire_wait`).
            let ticket = now_micros();
            let quorum = &self.inner.quorum;
            // A place among this client's waiters of each name, as a
            // single-name waiter takes one (`local_turn.rs`); all the
            // names' earlier callers within one turn limit.
            let turns: Vec<Turn> = names
                .iter()
                .map(|name| self.inner.local_turns.join(name))
                .collect();
            let turn_until = until.min(Instant::now() + local_turn::TURN_LIMIT);
            for turn in &turns {
                turn.after_earlier(turn_until).await;
            }
            let mut owner = OwnerId::new();
            loop {
                let settled = ReleaseSetIfDropped::new(&self.inner, &names, owner);
                let (error, leftover) = match self.attempt_many(&names, ttl, owner).await {
                    Ok(set) => {
                        settled.disarm();
                        return Ok(set);
                    }
                    Err(failed) => failed,
                };
                let now = Instant::now();
                let next = after_failed_attempt(
                    &error,
                    leftover.nodes.len(),
                    quorum.quorum,
                    until,
                    now,
                    self.inner.retry_pause(),
                    &mut rand::thread_rng(),
                );
                // What the attempt got goes back before the wait: the other
                // waiters must not find it in their way. Before a wait the
                // RELEASEs are only queued, not awaited, as for one name
                // (`waiting.rs`): the waiter is in the nodes' queues at once.
                if matches!(next, AfterAttempt::Wait { .. }) {
                    quorum
                        .release_set_queued(
                            &names,
                            owner.as_str(),
                            &leftover.nodes,
                            leftover._unanswered,
                        )
                        .await;
                } else {
                    quorum
                        .release_set_on(&names, owner.as_str(), &leftover.nodes)
                        .await;
                }
                settled.disarm();
                owner = OwnerId::new();
                match next {
                    AfterAttempt::GiveUp => return Err(error),
                    AfterAttempt::Retry { at } => {
                        tracing::debug!(%error, "set attempt failed; retrying");
                        tokio::time::sleep_until(at).await;
                    }
                    AfterAttempt::Wait { pause_until } => {
                        if let Some(at) = pause_until {
                            tokio::time::sleep_until(at).await;
                        }
                        let wake = wait_for_set(quorum, &names, until, owner, ticket, &turns).await;
                        let next = after_wake(
                            &wake,
                            until,
                            Instant::now(),
                            self.inner.retry_pause(),
                            &mut rand::thread_rng(),
                        );
                        match next {
                            AfterWake::Attempt => {}
                            AfterWake::GiveUp => return Err(error),
                            AfterWake::Retry { at } => tokio::time::sleep_until(at).await,
                        }
                    }
                }
            }
        }
        .instrument(span)
        .await
    }
}

/// Waits on every name of the set at once (see [`wait_for_free`]) until
/// each was free on a quorum, the wait ran out, or too few nodes answer.
async fn wait_for_set(
    quorum: &Quorum,
    names: &[String],
    until: Instant,
    owner: OwnerId,
    ticket: u64,
    turns: &[Turn],
) -> Wake {
    let mut round = SetWake::new(names.len());
    let mut waits: FuturesUnordered<_> = names
        .iter()
        .zip(turns)
        .map(|(name, turn)| wait_for_free(quorum, name, until, owner, ticket, Some(turn.queued())))
        .collect();
    while let Some(wake) = waits.next().await {
        if let Some(decided) = round.record(wake) {
            return decided;
        }
    }
    Wake::TimedOut
}
