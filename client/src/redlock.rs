//! [`Redlock`]: the client, its acquire paths and `release_owner`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::core::error::Error;
use crate::core::waiting::Retry;
use crate::lock::{Lock, OwnerId};
use crate::metrics::Outcome;
use crate::quorum::{Leftover, Unanswered};
use crate::shared::{now_micros, ttl_millis, Inner};

/// The `redlock.acquire` span of one acquisition: `owner` is the owner id
/// of its one attempt, or recorded by each attempt when there may be several
/// (`None`); the token is recorded once known.
fn acquire_span(key: &str, owner: Option<OwnerId>, ttl: Duration) -> tracing::Span {
    tracing::debug_span!(
        "redlock.acquire",
        key,
        owner = owner.as_ref().map(OwnerId::as_str),
        ttl_ms = ttl.as_millis() as u64,
        token = tracing::field::Empty
    )
}

/// A Redlock client over N independent Redis masters that run the redlock
/// module. Cheap to clone (all clones share the connections).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_client::Redlock;
///
/// # async fn run() -> Result<(), redlock_client::Error> {
/// let redlock = Redlock::builder([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
///     "redis://10.0.0.4:6379",
///     "redis://10.0.0.5:6379",
/// ])
/// .build()
/// .await?;
/// let lock = redlock.acquire("invoices", Duration::from_secs(5)).await?;
/// println!("token {}", lock.token());
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.nodes())
            .field("quorum", &self.quorum())
            .finish()
    }
}

impl Redlock {
    /// The members' addresses, in the order given: `host:port` for a node,
    /// `cluster(host:port,…)` (its seeds) for a cluster.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_client::Redlock) {
    /// for node in redlock.nodes() {
    ///     println!("{node}");
    /// }
    /// # }
    /// ```
    pub fn nodes(&self) -> Vec<String> {
        self.inner
            .quorum
            .nodes
            .iter()
            .map(|n| n.addr().to_string())
            .collect()
    }

    /// How many nodes must agree: `N / 2 + 1`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_client::Redlock) {
    /// assert_eq!(redlock.quorum(), redlock.nodes().len() / 2 + 1);
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.inner.quorum.quorum
    }

    /// Takes the lock for `ttl`, retrying per the [`RetryPolicy`](crate::RetryPolicy) while it
    /// is busy (or no quorum answers, or nodes are in their restart grace
    /// window).
    ///
    /// Every attempt uses an owner id of its own, and every failed attempt
    /// is released on every node that may have granted it before the next
    /// attempt starts. The nodes get the lease in whole
    /// milliseconds (`ttl` rounded down); the validity is computed from
    /// that.
    ///
    /// # Errors
    ///
    /// The last attempt's error: [`Error::Busy`], [`Error::NoQuorum`],
    /// [`Error::RestartGuard`], [`Error::ModuleNotLoaded`],
    /// [`Error::ExpiredBeforeUse`] when the round ate the whole lease, or
    /// [`Error::InvalidArgument`] (a ttl below 1 ms, or one the nodes
    /// refuse).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("reports", Duration::from_secs(30)).await?;
    /// // … pass lock.token() with every write to the protected resource …
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Lock, Error> {
        let span = acquire_span(key, None, ttl);
        let attempt_span = span.clone();
        async {
            let called = Instant::now();
            let policy = self.inner.retry;
            let mut retry = Retry::new(policy.attempts, policy.base_delay, policy.jitter);
            loop {
                // A fresh owner id per attempt, never one across attempts: a
                // failed attempt's RELEASE can reach a member after the next
                // attempt's ACQUIRE (its connection broke with the RELEASE on
                // the way, and the next attempt went over a new connection;
                // a cluster member's connection even resends it there). With
                // the same owner, that RELEASE would free the next attempt's
                // grant while the caller believes it holds the lock
                // (`client/tests/stale_release.rs`); with another owner it is
                // refused. The cost: a node where a failed attempt's grant
                // was not released yet answers "held" to the next attempt
                // instead of renewing it.
                let owner = OwnerId::new();
                attempt_span.record("owner", owner.as_str());
                let settled = ReleaseIfDropped::new(&self.inner, key, owner);
                match self.attempt(key, ttl, owner).await {
                    Ok(lock) => {
                        settled.disarm();
                        let waited = lock.started_at().saturating_duration_since(called);
                        self.inner.quorum.metrics.waited(key, waited);
                        return Ok(lock);
                    }
                    Err((error, leftovers)) => {
                        let attempt = retry.attempt();
                        let pause = retry.after_failure(&error, &mut rand::thread_rng());
                        let Some(delay) = pause else {
                            self.inner
                                .quorum
                                .release_on(key, owner.as_str(), &leftovers.nodes)
                                .await;
                            settled.disarm();
                            return Err(error);
                        };
                        tracing::debug!(attempt, %error, "attempt failed; retrying");
                        tokio::join!(
                            async {
                                self.inner
                                    .quorum
                                    .release_on(key, owner.as_str(), &leftovers.nodes)
                                    .await;
                                settled.disarm();
                            },
                            tokio::time::sleep(delay)
                        );
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Makes one attempt: `Ok(None)` when another owner holds the lock.
    ///
    /// A failed attempt is released on the nodes that may have granted it
    /// (those that did not answer yet, timed out, or granted). When busy,
    /// the round first waits a little for the nodes that have not answered
    /// (at most as long again as it took to decide; under contention they
    /// answer "held" and need no RELEASE), then queues the RELEASE on the
    /// rest before returning and collects their replies in the background;
    /// otherwise the release completes before this returns.
    ///
    /// # Errors
    ///
    /// As [`Redlock::acquire`], except that busy is `Ok(None)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// match redlock.try_acquire("reports", Duration::from_secs(30)).await? {
    ///     Some(lock) => {
    ///         println!("mine, token {}", lock.token());
    ///         lock.release().await?;
    ///     }
    ///     None => println!("someone else holds it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lock>, Error> {
        let owner = OwnerId::new();
        let span = acquire_span(key, Some(owner), ttl);
        async {
            let settled = ReleaseIfDropped::new(&self.inner, key, owner);
            let outcome = match self.attempt(key, ttl, owner).await {
                Ok(lock) => Ok(Some(lock)),
                Err((Error::Busy { .. }, leftovers)) => {
                    self.inner
                        .quorum
                        .release_queued(
                            key,
                            owner.as_str(),
                            &leftovers.nodes,
                            leftovers._unanswered,
                        )
                        .await;
                    Ok(None)
                }
                Err((error, leftovers)) => {
                    self.inner
                        .quorum
                        .release_on(key, owner.as_str(), &leftovers.nodes)
                        .await;
                    Err(error)
                }
            };
            settled.disarm();
            outcome
        }
        .instrument(span)
        .await
    }

    /// One attempt: steps 1–6 of the algorithm, as `owner`, which no other
    /// attempt may use (see [`Redlock::acquire`]). On failure, the error
    /// and the nodes to release, which the caller releases under a
    /// [`ReleaseIfDropped`].
    pub(crate) async fn attempt(
        &self,
        key: &str,
        ttl: Duration,
        owner: OwnerId,
    ) -> Result<Lock, (Error, Leftover)> {
        let start = Instant::now();
        let result = self.attempt_round(key, ttl, owner).await;
        let outcome = match &result {
            Ok(_) => Outcome::Granted,
            Err((error, _)) => Outcome::of(error),
        };
        self.inner
            .quorum
            .metrics
            .attempt(key, outcome, start.elapsed());
        result
    }

    /// [`Redlock::attempt`] without its metrics.
    async fn attempt_round(
        &self,
        key: &str,
        ttl: Duration,
        owner: OwnerId,
    ) -> Result<Lock, (Error, Leftover)> {
        let inner = &self.inner;
        let ttl_ms = ttl_millis(ttl).map_err(|e| {
            let nothing = Leftover {
                nodes: Vec::new(),
                granted: 0,
                _unanswered: Unanswered::default(),
            };
            (e, nothing)
        })?;
        let start = Instant::now();
        let floor = inner.clock_floor.then(now_micros);
        let (token, deadline, unanswered) = inner
            .quorum
            .attempt(&inner.rules, key, owner.as_str(), ttl, ttl_ms, floor, start)
            .await?;
        tracing::debug!(
            token,
            validity_ms = deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
            "acquired"
        );
        tracing::Span::current().record("token", token);
        Ok(Lock::new(
            Arc::clone(inner),
            key,
            owner,
            token,
            start,
            deadline,
            unanswered,
        ))
    }

    /// Releases `key` for the owner id `owner` (as printed by
    /// [`LockInfo::owner`](crate::LockInfo::owner) or `redlock acquire`),
    /// e.g. from another process. Anyone who knows the owner id can release
    /// the lock: treat it as a secret.
    ///
    /// Returns `Ok(true)` when a quorum confirmed that `owner` held the lock
    /// and it is now free, `Ok(false)` when it was no longer held by `owner`
    /// (expired or already released).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or over-long owner id;
    /// [`Error::NoQuorum`] when too few nodes answered.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let freed = redlock
    ///     .release_owner("reports", "5c0e9f5e-1d7a-4b8e-9a56-3f1f0f6c2d11")
    ///     .await?;
    /// println!("{}", if freed { "released" } else { "was not held by that owner" });
    /// # Ok(()) }
    /// ```
    pub async fn release_owner(&self, key: &str, owner: &str) -> Result<bool, Error> {
        if owner.is_empty() || owner.len() > 256 {
            return Err(Error::InvalidArgument(format!(
                "owner id must be 1 to 256 bytes, got {} bytes",
                owner.len()
            )));
        }
        let span = tracing::debug_span!("redlock.release", key, owner);
        self.inner.quorum.release(key, owner).instrument(span).await
    }
}

/// Releases an attempt's owner on every node when the caller is dropped
/// before the attempt was settled (a `Lock` handed out, or the leftovers of
/// a failed attempt released): dropping an acquire leaves no grant behind
/// (DESIGN §6). The RELEASEs are queued behind the attempt's own commands on
/// each node's connection (property 2 in `node.rs`); an ACQUIRE dropped
/// before it was written is never sent (property 3).
pub(crate) struct ReleaseIfDropped<'a> {
    inner: &'a Arc<Inner>,
    key: &'a str,
    owner: OwnerId,
    armed: bool,
}

impl<'a> ReleaseIfDropped<'a> {
    /// Armed for `owner`'s attempt on `key`.
    pub(crate) fn new(inner: &'a Arc<Inner>, key: &'a str, owner: OwnerId) -> Self {
        ReleaseIfDropped {
            inner,
            key,
            owner,
            armed: true,
        }
    }

    /// The attempt is settled: nothing to release on drop.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for ReleaseIfDropped<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(self.inner);
        let key = self.key.to_string();
        let owner = self.owner;
        let span = tracing::debug_span!("redlock.release", key = key.as_str(), dropped = true);
        handle.spawn(
            async move {
                let _ = inner.quorum.release(&key, owner.as_str()).await;
            }
            .instrument(span),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The futures of the public API may be spawned on a multi-threaded
    /// runtime, and the quorum rounds' may be held behind shared references
    /// too: `Send + Sync`. A type check: this does not build when a round's
    /// calls stop being either. `acquire_wait` is `Send` only: it opens
    /// connections of its own for `REDLOCK.WAIT`, and the `redis` crate's
    /// connect future is not `Sync`.
    #[allow(dead_code)]
    fn public_futures_are_send_and_sync(redlock: &Redlock, mut lock: Lock, other: Lock) {
        fn send_sync<T: Send + Sync>(_: T) {}
        fn send<T: Send>(_: T) {}
        let ttl = Duration::from_secs(1);
        send_sync(redlock.acquire("k", ttl));
        send_sync(redlock.try_acquire("k", ttl));
        send(redlock.acquire_wait("k", ttl, ttl));
        send_sync(redlock.release_owner("k", "owner"));
        send_sync(lock.extend(ttl));
        send_sync(other.release());
    }
}
