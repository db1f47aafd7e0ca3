//! [`Lock`], a held lock, and [`LockInfo`], what it shares with a
//! [`LockGuard`](crate::LockGuard): key, owner id, token and validity.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::core::error::Error;
use crate::core::lease::{lower, ExtendRule, Unconfirmed};
use crate::metrics::LockMetrics;
use crate::quorum::Unanswered;
use crate::shared::{ttl_millis, Inner};

/// A fresh owner id: a hyphenated UUID v4, kept inline (36 ASCII bytes).
#[derive(Clone, Copy)]
pub(crate) struct OwnerId([u8; 36]);

impl OwnerId {
    pub(crate) fn new() -> Self {
        let mut buf = [0u8; 36];
        uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
        OwnerId(buf)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Always ASCII: written by encode_lower.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

/// One acquisition as its holder sees it: key, owner id, fencing token and
/// what is left of the validity. [`Lock`] and [`LockGuard`](crate::LockGuard)
/// both dereference to it, so `lock.token()` and `guard.token()` are this
/// type's methods.
pub struct LockInfo {
    key: String,
    owner: OwnerId,
    token: u64,
    /// Start of the acquisition round that got the lock.
    started: Instant,
    /// End of the validity on the local monotonic clock.
    deadline: Mutex<Instant>,
    /// The labels of the client's metrics.
    pub(crate) metrics: LockMetrics,
    /// Set once the lock was found lost (counted once).
    lost: AtomicBool,
}

impl std::fmt::Debug for LockInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockInfo")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl LockInfo {
    /// The fencing token: higher than every token handed out earlier for
    /// this key, by a quorum the client could reach. Pass it to the
    /// protected resource with every operation.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("reports", Duration::from_secs(10)).await?;
    /// let token: u64 = lock.token();
    /// # let _ = token; Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("reports", Duration::from_secs(10)).await?;
    /// assert_eq!(lock.key(), "reports");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id (a UUID v4) this acquisition used. Anyone who knows it
    /// can release the lock: see [`Redlock::release_owner`](crate::Redlock::release_owner).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("reports", Duration::from_secs(10)).await?;
    /// assert_eq!(lock.owner().len(), 36);
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &str {
        self.owner.as_str()
    }

    /// What is left of the validity now, on the local monotonic clock:
    /// ttl − time since the start of the acquisition (or of the last
    /// extension) − drift margin. Zero once it ran out, and zero once a
    /// [`LockGuard`](crate::LockGuard) reported the lock lost.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("reports", Duration::from_secs(10)).await?;
    /// assert!(lock.validity() < Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// When the acquisition round that got the lock started, on the local
    /// monotonic clock: the nodes' leases (and the validity) count from
    /// there. For [`Redlock::acquire_wait`](crate::Redlock::acquire_wait)
    /// it is the end of the wait, not the call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::{Duration, Instant};
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let called = Instant::now();
    /// let lock = redlock
    ///     .acquire_wait("reports", Duration::from_secs(10), Duration::from_secs(60))
    ///     .await?;
    /// println!("waited {:?}", lock.started_at() - called);
    /// # Ok(()) }
    /// ```
    pub fn started_at(&self) -> Instant {
        self.started
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = deadline;
    }

    /// The lock was found lost: counted in the metrics the first time only
    /// (an extension and `with_lock`'s keeper may both find it).
    pub(crate) fn note_lost(&self) {
        if !self.lost.swap(true, Ordering::Relaxed) {
            self.metrics.lost(&self.key);
        }
    }

    /// Records how long the lock was held, at its release or drop.
    fn note_released(&self) {
        self.metrics.held(&self.key, self.started.elapsed());
    }

    /// Moves the deadline to `bound` when that is earlier (never later).
    pub(crate) fn lower_deadline(&self, bound: Instant) {
        let mut deadline = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        *deadline = lower(*deadline, bound);
    }
}

/// A held lock: its key, owner id and fencing token (see [`LockInfo`], which
/// it dereferences to).
///
/// Pass [`LockInfo::token`] to the protected resource with every operation
/// (see the crate docs). Dropping a `Lock` that was not released releases it
/// in the background when a tokio runtime is available (and does nothing
/// otherwise: the lease then simply runs out).
pub struct Lock {
    inner: Arc<Inner>,
    info: Arc<LockInfo>,
    released: bool,
    /// The ACQUIREs the acquisition did not wait for, kept until a release
    /// is queued behind them (see `quorum::Leftovers::Return`).
    unanswered: Unanswered,
    /// What the validity of the next extension counts with: an EXTEND can
    /// reach a node late (to a node that had not answered, or over a
    /// connection that broke), after a later one (`core/lease.rs`).
    extend_rule: ExtendRule<Instant>,
}

impl Deref for Lock {
    type Target = LockInfo;

    fn deref(&self) -> &LockInfo {
        &self.info
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.info.key)
            .field("token", &self.info.token)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(
        inner: Arc<Inner>,
        key: &str,
        owner: OwnerId,
        token: u64,
        started: Instant,
        deadline: Instant,
        unanswered: Unanswered,
    ) -> Self {
        let metrics = inner.quorum.metrics;
        Lock {
            inner,
            info: Arc::new(LockInfo {
                key: key.to_string(),
                owner,
                started,
                token,
                deadline: Mutex::new(deadline),
                metrics,
                lost: AtomicBool::new(false),
            }),
            released: false,
            unanswered,
            extend_rule: ExtendRule::new(),
        }
    }

    /// The shared part (what [`LockGuard`](crate::LockGuard) holds): key,
    /// owner, token and validity, for code that uses the lock from another
    /// task than the one that owns it (e.g. fenced writes).
    pub fn info(&self) -> &Arc<LockInfo> {
        &self.info
    }

    /// Extends the lease to `ttl` from now on a quorum of nodes. The new
    /// validity is measured from the start of this call, with the shortest
    /// lease any extension of this lock sent (an earlier EXTEND can reach a
    /// node after this one). A lock whose lease ran out is never revived.
    /// After any error, stop using the token: the nodes may have applied
    /// the new lease, so a shorter `ttl` has already cut
    /// [`validity`](LockInfo::validity) to what it would leave.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when a quorum answered but fewer than a quorum still
    /// had the lock; [`Error::Lapsed`] when its validity had ended before
    /// the extension started or was confirmed (then nothing is sent, or the
    /// nodes' answers do not count: another owner may have held it since);
    /// [`Error::NoQuorum`] when too few nodes answered;
    /// [`Error::ExpiredBeforeUse`] when the extension took longer than
    /// `ttl` minus the drift margin; [`Error::InvalidArgument`] for a ttl
    /// below 1 ms.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let mut lock = redlock.acquire("reports", Duration::from_secs(10)).await?;
    /// // … half of the work …
    /// lock.extend(Duration::from_secs(10)).await?;
    /// // … the other half …
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = ttl_millis(ttl)?;
        let span = tracing::debug_span!(
            "redlock.extend",
            key = self.info.key.as_str(),
            token = self.info.token,
            ttl_ms
        );
        async {
            let result = self.extend_round(ttl, ttl_ms).await;
            self.info.metrics.extension(&self.info.key, result.is_ok());
            if let Err(Error::Lost { .. } | Error::Lapsed { .. } | Error::ExpiredBeforeUse { .. }) =
                &result
            {
                // A lock reported lost leaves no validity (core/lease.rs).
                self.info.lower_deadline(Instant::now());
                self.info.note_lost();
            }
            result
        }
        .instrument(span)
        .await
    }

    /// [`Lock::extend`] without its span and metrics.
    async fn extend_round(&mut self, ttl: Duration, ttl_ms: u64) -> Result<(), Error> {
        let start = Instant::now();
        // The nodes may apply the new lease whatever this call returns
        // (a failed round, lost replies, a cancelled call): a shorter one
        // ends the validity before the EXTEND is sent, never later. Any
        // earlier EXTEND may still land after this one: the validity
        // counts from this start with the shortest lease sent so far.
        let rules = &self.inner.rules;
        let extending = self
            .extend_rule
            .begin(rules, ttl_ms, start, self.info.deadline())
            .map_err(|why| self.unconfirmed(ttl, why))?;
        self.info.lower_deadline(extending.bound);
        self.inner
            .quorum
            .extend(&self.info.key, self.info.owner.as_str(), ttl_ms)
            .await?;
        match self
            .extend_rule
            .confirmed(rules, &extending, Instant::now())
        {
            Ok(deadline) => {
                self.info.set_deadline(deadline);
                tracing::debug!(
                    validity_ms = deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis() as u64,
                    "extended"
                );
                Ok(())
            }
            Err(why) => Err(self.unconfirmed(ttl, why)),
        }
    }

    /// The error of an extension to `ttl` that does not make the lock valid.
    fn unconfirmed(&self, ttl: Duration, why: Unconfirmed) -> Error {
        match why {
            Unconfirmed::Lapsed { late } => Error::Lapsed {
                key: self.info.key.clone(),
                late,
            },
            Unconfirmed::Elapsed(elapsed) => Error::ExpiredBeforeUse { ttl, elapsed },
        }
    }

    /// Releases the lock on every node (from the call on, the lock's
    /// [`validity`](LockInfo::validity) is zero wherever its info is shared).
    /// Returns once a quorum answered:
    /// `Ok(true)` when it was still held and is now free, `Ok(false)` when
    /// its lease had already run out (the token may have been superseded).
    /// Nodes slower than the quorum get the release in the background.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when too few nodes answered (the lease then runs
    /// out on its own).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("reports", Duration::from_secs(10)).await?;
    /// if !lock.release().await? {
    ///     eprintln!("the lease had run out before the release");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        // From the first RELEASE a node may free the lock: no validity is
        // left for anyone holding this lock's info (a `LockGuard`, `info()`).
        self.info.lower_deadline(Instant::now());
        self.info.note_released();
        let span = tracing::debug_span!(
            "redlock.release",
            key = self.info.key.as_str(),
            token = self.info.token
        );
        self.inner
            .quorum
            .release(&self.info.key, self.info.owner.as_str())
            .instrument(span)
            .await
    }

    /// Stops tracking the lock without releasing it: it stays held until its
    /// lease runs out or someone calls
    /// [`Redlock::release_owner`](crate::Redlock::release_owner) with the
    /// returned owner id. Used by `redlock acquire`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("reports", Duration::from_secs(60)).await?;
    /// let owner = lock.detach();
    /// // Later, possibly from another process:
    /// redlock.release_owner("reports", &owner).await?;
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) -> String {
        self.released = true;
        self.info.owner.as_str().to_string()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.info.note_released();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.info.lower_deadline(Instant::now());
        let inner = Arc::clone(&self.inner);
        let info = Arc::clone(&self.info);
        // Kept until the release is queued behind them.
        let unanswered = std::mem::take(&mut self.unanswered);
        let span = tracing::debug_span!(
            "redlock.release",
            key = info.key.as_str(),
            token = info.token,
            dropped = true
        );
        handle.spawn(
            async move {
                let _ = inner.quorum.release(&info.key, info.owner.as_str()).await;
                drop(unanswered);
            }
            .instrument(span),
        );
    }
}
