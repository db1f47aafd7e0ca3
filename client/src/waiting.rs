//! Waiting for a busy lock: [`Redlock::acquire_wait`], woken by the nodes.
//!
//! A busy attempt releases what it got at once, then sends `REDLOCK.WAIT
//! key timeout` to every node, each on a connection of its own (a blocked
//! command must never stall the shared connection). A node answers when the
//! lock is free there: at once, when the holder releases, or when its lease
//! ends. Once a quorum of nodes said "free", the next attempt starts. While
//! the lock stays held nothing is sent: no polling.
//!
//! Waiters queue: every WAIT carries the owner id of the attempt that
//! follows it and a ticket (the waiter's wall clock when it started
//! waiting, kept across its attempts), and each node hands a freed lock to
//! the first waiter in ticket order, refusing other owners for a short
//! hand-off window (see the module's `queue.rs`).
//! So the waiter that came first gets the lock next, a worker that releases
//! and asks again at once queues behind the others instead of re-taking
//! its own lock, and waiters do not all race at each release.
//!
//! Races remain possible (nodes that saw different waiters, a waiter whose
//! reservation lapsed): a waiter that finds the lock busy releases what it
//! got and waits again, keeping its ticket. After a split vote (a lost
//! round that got grants: see [`split_vote`]), a random pause before the
//! next attempt lets one get ahead.
//!
//! Dropping the future stops everything: connections blocked in WAIT are
//! closed (which ends the wait on the node), and an attempt in flight is
//! released like any unused grant.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use rand::Rng;
use tokio::time::Instant;
use tracing::Instrument;

use crate::core::error::{Error, NodeFailure};
use crate::lock::{Lock, OwnerId};
use crate::quorum::Quorum;
use crate::redlock::{Redlock, ReleaseIfDropped};
use crate::shared::now_micros;

/// Longest random pause after a split vote.
const SPLIT_PAUSE_MAX: Duration = Duration::from_millis(10);

/// Longest timeout a node accepts for `REDLOCK.WAIT` (one day).
const NODE_WAIT_MAX_MS: u64 = 86_400_000;

/// How a round of `REDLOCK.WAIT` ended.
#[derive(Debug)]
enum Wake {
    /// A quorum of nodes said the lock is free.
    Free,
    /// The wait ran out first.
    TimedOut,
    /// Too few nodes can answer at all.
    Unreachable(Vec<(usize, NodeFailure)>),
}

impl Redlock {
    /// Takes the lock for `ttl`, waiting up to `max_wait` for it to be free.
    ///
    /// Unlike [`Redlock::acquire`], which retries a few times at fixed
    /// intervals, a waiting acquire is woken by the nodes when the lock frees
    /// (a release, or the end of the holder's lease) and sends nothing while
    /// the lock stays held. Blocking commands run on connections of their
    /// own, pooled per node, so other calls on this client are never held
    /// up. Dropping the future leaves no grant and no blocked connection
    /// behind.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when the lock is still held after `max_wait`;
    /// [`Error::NoQuorum`] when too few nodes answer and `max_wait` has
    /// passed; otherwise as [`Redlock::acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// // Wait up to 30 s for the nightly report lock, then hold it for 10 s.
    /// let lock = redlock
    ///     .acquire_wait("reports", Duration::from_secs(10), Duration::from_secs(30))
    ///     .await?;
    /// println!("token {}", lock.token());
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_wait(
        &self,
        key: &str,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        let until = Instant::now() + max_wait;
        let span = tracing::debug_span!(
            "redlock.acquire_wait",
            key,
            ttl_ms = ttl.as_millis() as u64,
            max_wait_ms = max_wait.as_millis() as u64,
            token = tracing::field::Empty
        );
        async {
            // One ticket for the whole wait (the nodes' queues order waiters
            // by it), but a fresh owner id per attempt, as in `acquire` (a
            // late RELEASE of one attempt must not free the next one's
            // grant). The WAIT before an attempt queues as that attempt's
            // owner, so a node reserves the freed lock for the owner that
            // will ACQUIRE it.
            let ticket = now_micros();
            let called = Instant::now();
            let metrics = self.inner.quorum.metrics;
            let timed_out = || metrics.wait_timed_out(key, called.elapsed());
            let mut owner = OwnerId::new();
            loop {
                let settled = ReleaseIfDropped::new(&self.inner, key, owner);
                let (error, leftovers) = match self.attempt(key, ttl, owner).await {
                    Ok(lock) => {
                        settled.disarm();
                        let started = Instant::from_std(lock.started_at());
                        metrics.waited(key, started.saturating_duration_since(called));
                        return Ok(lock);
                    }
                    Err(failed) => failed,
                };
                // What this attempt got goes back at once, before waiting:
                // the other waiters must not find it in their way.
                self.inner
                    .quorum
                    .release_on(key, owner.as_str(), &leftovers.nodes)
                    .await;
                settled.disarm();
                owner = OwnerId::new();
                let now = Instant::now();
                if now >= until {
                    timed_out();
                    return Err(error);
                }
                match &error {
                    Error::Busy { holders, .. } => {
                        if split_vote(*holders, leftovers.granted, self.inner.quorum.quorum) {
                            let pause =
                                rand::thread_rng().gen_range(Duration::ZERO..=SPLIT_PAUSE_MAX);
                            tracing::debug!(?pause, "split vote; pausing");
                            tokio::time::sleep_until((now + pause).min(until)).await;
                        }
                        match wait_for_free(&self.inner.quorum, key, until, owner, ticket).await {
                            Wake::Free => {}
                            Wake::TimedOut => {
                                timed_out();
                                return Err(error);
                            }
                            Wake::Unreachable(failed) => {
                                tracing::debug!(failed = failed.len(), "too few nodes to wait on");
                                let pause = self.inner.retry.delay();
                                tokio::time::sleep_until((Instant::now() + pause).min(until)).await;
                            }
                        }
                    }
                    e if e.is_transient() => {
                        let pause = self.inner.retry.delay();
                        tracing::debug!(%e, ?pause, "attempt failed; retrying");
                        tokio::time::sleep_until((now + pause).min(until)).await;
                    }
                    _ => return Err(error),
                }
            }
        }
        .instrument(span)
        .await
    }
}

/// Whether a busy round was a split vote, worth a random pause before the
/// next attempt: fewer than `quorum` nodes said "held by another owner", or
/// the round got `granted` grants and still lost (nodes that did not answer
/// in time are not counted: under load they are mostly slow "held"
/// answers). "Every node answered" does not rule a split out: a
/// node whose free lock is reserved for another waiter answers nil like a
/// held one, so in a 2/2/1 split between three waiters each of them counts
/// three "held" answers. A round that lost to a new holder with some
/// grants of its own pauses too, at little cost: at most
/// [`SPLIT_PAUSE_MAX`], before a wait that blocks on that holder anyway.
fn split_vote(holders: usize, granted: usize, quorum: usize) -> bool {
    holders < quorum || granted > 0
}

/// Sends `REDLOCK.WAIT` to every node and returns once a quorum said the
/// lock is free, the wait ran out, or too few nodes can still answer.
async fn wait_for_free(
    quorum: &Quorum,
    key: &str,
    until: Instant,
    owner: OwnerId,
    ticket: u64,
) -> Wake {
    let q = quorum.quorum;
    let left = until.saturating_duration_since(Instant::now());
    let timeout_ms = (left.as_millis() as u64).clamp(1, NODE_WAIT_MAX_MS);
    let node_timeout = quorum
        .nodes
        .iter()
        .map(|n| n.timeout())
        .max()
        .unwrap_or_default();
    // One command for every node.
    let mut cmd = redis::cmd("REDLOCK.WAIT");
    cmd.arg(key)
        .arg(timeout_ms)
        .arg("QUEUE")
        .arg(owner.as_str())
        .arg(ticket);
    let cmd = Arc::new(cmd);
    // The calls may outlive this function (finished in the background).
    let shared_key: Arc<str> = Arc::from(key);
    let mut calls = FuturesUnordered::new();
    for (i, node) in quorum.nodes.iter().enumerate() {
        let (node, cmd, key) = (node.clone(), Arc::clone(&cmd), Arc::clone(&shared_key));
        calls.push(async move { (i, node.wait_free(&key, &cmd).await) });
    }
    let (mut free, mut failed) = (0, Vec::new());
    // The nodes answer at `until`; a node that does not is frozen or cut off.
    let give_up = tokio::time::sleep_until(until + node_timeout);
    tokio::pin!(give_up);
    loop {
        tokio::select! {
            next = calls.next() => match next {
                None => return Wake::TimedOut,
                Some((_, Ok(true))) => free += 1,
                Some((_, Ok(false))) => {}
                Some((i, Err(e))) => failed.push((i, e)),
            },
            () = &mut give_up => return Wake::TimedOut,
        }
        if free >= q {
            // The lock is free on a quorum; the other nodes answer about as
            // soon. Let them, so that their connections go back to the pool,
            // but not for long: a connection dropped mid-wait is closed.
            if !calls.is_empty() {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move {
                        let rest = async { while calls.next().await.is_some() {} };
                        let _ = tokio::time::timeout(node_timeout, rest).await;
                    });
                }
            }
            return Wake::Free;
        }
        if free + calls.len() < q {
            return if failed.len() > quorum.nodes.len() - q {
                Wake::Unreachable(failed)
            } else {
                Wake::TimedOut
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_vote;

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
}
