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
//! its own lock, and waiters do not all race at each release. Before the
//! nodes know a waiter (its busy attempt and its first `WAIT` are under
//! way), the callers of one client are kept in call order by
//! `local_turn.rs`.
//!
//! Races remain possible (nodes that saw different waiters, a waiter whose
//! reservation lapsed): a waiter that finds the lock busy releases what it
//! got and waits again, keeping its ticket. After a split vote (a lost
//! round that got grants: see [`split_vote`]), a random pause before the
//! next wait lets one get ahead. A node knows a waiter only while its WAIT
//! is blocked there, so the RELEASE of a busy attempt's leftovers is not
//! awaited before the WAIT (see `core::waiting`).
//!
//! Dropping the future stops everything: connections blocked in WAIT are
//! closed (which ends the wait on the node), and an attempt in flight is
//! released like any unused grant.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;
use tracing::Instrument;

use crate::core::error::Error;
use crate::core::waiting::{
    after_failed_attempt, after_wake, wait_gives_up_at, wait_timeout_ms, AfterAttempt, AfterWake,
    Wake, WakeTally,
};
use crate::local_turn::{self, Queued};
use crate::lock::{Lock, OwnerId};
use crate::quorum::Quorum;
use crate::redlock::{Redlock, ReleaseIfDropped};
use crate::shared::now_micros;

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
            // Earlier callers of this name on this client go first (a
            // worker that released must not take its lock back while they
            // are on their way to the nodes' queues: `local_turn.rs`).
            let turn = self.inner.local_turns.join(key);
            turn.after_earlier(until).await;
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
                let now = Instant::now();
                let next = after_failed_attempt(
                    &error,
                    leftovers.granted,
                    self.inner.quorum.quorum,
                    until,
                    now,
                    self.inner.retry_pause(),
                    &mut rand::thread_rng(),
                );
                // What this attempt got goes back at once, before waiting:
                // the other waiters must not find it in their way. Before a
                // WAIT the RELEASEs are only queued, not awaited: the waiter
                // must be in the nodes' queues as soon as possible, or the
                // worker that releases next takes its lock back (see
                // `AfterAttempt::Wait` for why this is sound).
                if matches!(next, AfterAttempt::Wait { .. }) {
                    self.inner
                        .quorum
                        .release_queued(
                            key,
                            owner.as_str(),
                            &leftovers.nodes,
                            leftovers._unanswered,
                        )
                        .await;
                } else {
                    self.inner
                        .quorum
                        .release_on(key, owner.as_str(), &leftovers.nodes)
                        .await;
                }
                settled.disarm();
                owner = OwnerId::new();
                match next {
                    AfterAttempt::GiveUp => {
                        // The wait ran out (otherwise the error ends it).
                        if now >= until {
                            timed_out();
                        }
                        return Err(error);
                    }
                    AfterAttempt::Retry { at } => {
                        tracing::debug!(%error, pause = ?(at - now), "attempt failed; retrying");
                        tokio::time::sleep_until(at).await;
                    }
                    AfterAttempt::Wait { pause_until } => {
                        if let Some(at) = pause_until {
                            tracing::debug!(pause = ?(at - now), "split vote; pausing");
                            tokio::time::sleep_until(at).await;
                        }
                        let wake = wait_for_free(
                            &self.inner.quorum,
                            key,
                            until,
                            owner,
                            ticket,
                            Some(turn.queued()),
                        )
                        .await;
                        let next = after_wake(
                            &wake,
                            until,
                            Instant::now(),
                            self.inner.retry_pause(),
                            &mut rand::thread_rng(),
                        );
                        match next {
                            AfterWake::Attempt => {}
                            AfterWake::GiveUp => {
                                timed_out();
                                return Err(error);
                            }
                            AfterWake::Retry { at } => {
                                if let Wake::Unreachable(failed) = &wake {
                                    tracing::debug!(
                                        failed = failed.len(),
                                        "too few nodes to wait on"
                                    );
                                }
                                tokio::time::sleep_until(at).await;
                            }
                        }
                    }
                }
            }
        }
        .instrument(span)
        .await
    }
}

/// Sends `REDLOCK.WAIT` to every node and returns once a quorum said the
/// lock is free, the wait ran out, or too few nodes can still answer.
pub(crate) async fn wait_for_free(
    quorum: &Quorum,
    key: &str,
    until: Instant,
    owner: OwnerId,
    ticket: u64,
    queued: Option<Queued>,
) -> Wake {
    let timeout_ms = wait_timeout_ms(until, Instant::now());
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
    // This waiter is in the nodes' queues once its WAIT went to a quorum of
    // nodes and did not come back "free" at once (a WAIT that finds the lock
    // free reserves nothing: the waiter still has to win an ACQUIRE). Then
    // later callers of this client need not let it go first (`local_turn.rs`).
    let sent = Arc::new(AtomicUsize::new(0));
    let quorum_sent = Arc::new(tokio::sync::Notify::new());
    let needed = quorum.quorum;
    let on_sent: Arc<dyn Fn() + Send + Sync> = {
        let quorum_sent = Arc::clone(&quorum_sent);
        Arc::new(move || {
            if sent.fetch_add(1, Ordering::Relaxed) + 1 == needed {
                quorum_sent.notify_one();
            }
        })
    };
    let blocked = async {
        quorum_sent.notified().await;
        tokio::time::sleep(local_turn::BLOCKED_AFTER).await;
    };
    tokio::pin!(blocked);
    let mut queued = queued;
    let mut calls = FuturesUnordered::new();
    for (i, node) in quorum.nodes.iter().enumerate() {
        let (node, cmd, key) = (node.clone(), Arc::clone(&cmd), Arc::clone(&shared_key));
        let on_sent = Arc::clone(&on_sent);
        calls.push(async move { (i, node.wait_free(&key, &cmd, &*on_sent).await) });
    }
    let mut tally = WakeTally::new(quorum.nodes.len(), quorum.quorum);
    let give_up = tokio::time::sleep_until(wait_gives_up_at(until, node_timeout));
    tokio::pin!(give_up);
    loop {
        let wake = tokio::select! {
            next = calls.next() => match next {
                None => return Wake::TimedOut,
                Some((i, reply)) => tally.record(i, reply),
            },
            () = &mut give_up => return Wake::TimedOut,
            () = &mut blocked, if queued.is_some() => {
                if let Some(queued) = queued.take() {
                    queued.mark();
                }
                continue;
            }
        };
        let Some(wake) = wake else { continue };
        if wake == Wake::Free && !calls.is_empty() {
            // The lock is free on a quorum; the other nodes answer about as
            // soon. Let them, so that their connections go back to the pool,
            // but not for long: a connection dropped mid-wait is closed.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let rest = async { while calls.next().await.is_some() {} };
                    let _ = tokio::time::timeout(node_timeout, rest).await;
                });
            }
        }
        return wake;
    }
}
