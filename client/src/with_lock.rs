//! [`Redlock::with_lock`]: run work under a lock that a background task
//! keeps alive, with a [`LockGuard`] that says when it is lost.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::core::error::Error;
use crate::core::keep_alive::{Action, Event, KeepAlive, LostBecause};
use crate::lock::{Lock, LockInfo};
use crate::redlock::Redlock;

impl Redlock {
    /// Runs `f` while holding `key`, and releases the lock when `f`'s future
    /// ends, whatever it returned (also when it panics or is dropped).
    ///
    /// A background task extends the lock to `ttl` about every `ttl / 3`.
    /// An extension that too few members answered (a failover inside a
    /// Sentinel member, a replica-sync check that failed) is tried again
    /// every 100 ms while the validity lasts. If an extension finds the lock
    /// no longer held by a quorum, or the validity runs out before an
    /// extension succeeds, [`LockGuard::lost`] fires at once: stop using the
    /// token then. Returns `f`'s value.
    ///
    /// Needs a tokio runtime with the `time` driver (the extension runs as a
    /// spawned task).
    ///
    /// # Errors
    ///
    /// The acquisition's error, after the retries of [`Redlock::acquire`];
    /// `f` does not run then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn copy_files(_token: u64) {}
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let finished = redlock
    ///     .with_lock("nightly-backup", Duration::from_secs(30), |guard| async move {
    ///         tokio::select! {
    ///             () = copy_files(guard.token()) => true,
    ///             () = guard.lost() => false,
    ///         }
    ///     })
    ///     .await?;
    /// # let _ = finished; Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, key: &str, ttl: Duration, f: F) -> Result<T, Error>
    where
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.acquire(key, ttl).await?;
        Ok(run_locked(lock, ttl, f).await)
    }

    /// [`Redlock::with_lock`] that waits up to `max_wait` for a busy lock,
    /// woken by the nodes as [`Redlock::acquire_wait`] is.
    ///
    /// # Errors
    ///
    /// The acquisition's error ([`Error::Busy`] when the lock was still held
    /// after `max_wait`); `f` does not run then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn rotate_logs(_token: u64) {}
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// redlock
    ///     .with_lock_wait(
    ///         "log-rotation",
    ///         Duration::from_secs(30),
    ///         Duration::from_secs(120),
    ///         |guard| async move { rotate_logs(guard.token()).await },
    ///     )
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock_wait<F, Fut, T>(
        &self,
        key: &str,
        ttl: Duration,
        max_wait: Duration,
        f: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.acquire_wait(key, ttl, max_wait).await?;
        Ok(run_locked(lock, ttl, f).await)
    }
}

/// Runs `f` under `lock`, kept alive by [`keep_alive`] and released when
/// `f`'s future ends, panics or is dropped.
async fn run_locked<F, Fut, T>(lock: Lock, ttl: Duration, f: F) -> T
where
    F: FnOnce(LockGuard) -> Fut,
    Fut: Future<Output = T>,
{
    {
        let lost = CancellationToken::new();
        let done = CancellationToken::new();
        let guard = LockGuard {
            info: Arc::clone(lock.info()),
            lost: lost.clone(),
        };
        let keeper = tokio::spawn(keep_alive(lock, ttl, lost, done.clone()));
        // Stops the keeper (which then releases) if `f` panics or this
        // future is dropped.
        let stop = done.drop_guard();
        let value = f(guard).await;
        drop(stop);
        let _ = keeper.await;
        value
    }
}

/// The background task of [`Redlock::with_lock`]: carries out the
/// [`KeepAlive`] machine (`core/keep_alive.rs`): extends every `ttl / 3`
/// (sooner again after an extension no quorum answered), fires `lost` when
/// an extension finds the lock no longer held or when the validity runs
/// out, and releases the lock when `done` fires.
pub(crate) async fn keep_alive(
    mut lock: Lock,
    ttl: Duration,
    lost: CancellationToken,
    done: CancellationToken,
) {
    let token = lock.token();
    let key = lock.key().to_string();
    let mut machine = KeepAlive::new(ttl, Instant::now());
    let mut action = machine.first();
    loop {
        let deadline = tokio::time::Instant::from_std(lock.info().deadline());
        let event = match action {
            Action::Sleep { next } => tokio::select! {
                _ = done.cancelled() => Event::Done,
                _ = tokio::time::sleep_until(deadline) => Event::ValidityEnded,
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => Event::Due,
            },
            Action::Extend => tokio::select! {
                _ = done.cancelled() => Event::Done,
                _ = tokio::time::sleep_until(deadline) => Event::ValidityEnded,
                result = lock.extend(ttl) => match result {
                    Ok(()) => Event::Extended(true),
                    Err(error) if error.is_transient() => {
                        tracing::info!(key, token, %error, "extension failed; trying again while the lease lasts");
                        Event::Unanswered
                    }
                    Err(error) => {
                        tracing::warn!(key, token, %error, "extension failed: lock lost");
                        Event::Extended(false)
                    }
                }
            },
            Action::Lost(because) => {
                if because == LostBecause::ValidityEnded {
                    tracing::warn!(
                        key,
                        token,
                        "validity ran out before an extension succeeded: lock lost"
                    );
                }
                // The deadline first, so that a guard never sees a validity
                // left on a lock it reports lost.
                lock.info().lower_deadline(Instant::now());
                lock.info().note_lost();
                lost.cancel();
                done.cancelled().await;
                Event::Done
            }
            Action::AwaitDone => {
                done.cancelled().await;
                Event::Done
            }
            Action::Release => break,
        };
        action = machine.on(event, Instant::now());
    }
    let _ = lock.release().await;
}

/// What the closure of [`Redlock::with_lock`] gets: the lock's
/// [`LockInfo`] (it dereferences to it; the validity follows the
/// extensions) and a signal that fires when the lock is lost.
#[derive(Clone)]
pub struct LockGuard {
    info: Arc<LockInfo>,
    lost: CancellationToken,
}

impl Deref for LockGuard {
    type Target = LockInfo;

    fn deref(&self) -> &LockInfo {
        &self.info
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("token", &self.token())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// Completes when the lock is lost (an extension failed or the validity
    /// ran out first). Use it in `tokio::select!` next to the work.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn work() {}
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// redlock
    ///     .with_lock("job", Duration::from_secs(5), |guard| async move {
    ///         tokio::select! {
    ///             () = work() => {}
    ///             () = guard.lost() => eprintln!("lock lost: work abandoned"),
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lost.cancelled()
    }

    /// A token that is cancelled when the lock is lost, to move into other
    /// tasks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// redlock
    ///     .with_lock("job", Duration::from_secs(5), |guard| async move {
    ///         let lost = guard.lost_token();
    ///         let worker = tokio::spawn(async move {
    ///             while !lost.is_cancelled() {
    ///                 tokio::time::sleep(Duration::from_millis(10)).await;
    ///             }
    ///         });
    ///         let _ = worker.await;
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the lock was lost.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// redlock
    ///     .with_lock("job", Duration::from_secs(5), |guard| async move {
    ///         for step in 0..10 {
    ///             if guard.is_lost() {
    ///                 break;
    ///             }
    ///             println!("step {step} under token {}", guard.token());
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}
