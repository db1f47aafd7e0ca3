//! [`Redlock::with_lock_set`]: run work under a [`LockSet`] that a
//! background task keeps alive (the keep-alive rules of
//! [`Redlock::with_lock`], `core/keep_alive.rs`), with a [`LockSetGuard`]
//! that says when the set is lost.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::core::error::Error;
use crate::core::keep_alive::{Action, Event, KeepAlive};
use crate::lock_set::LockSet;
use crate::redlock::Redlock;

impl Redlock {
    /// Takes the set with [`Redlock::acquire_many`], runs `f` while a
    /// background task extends every name about every `ttl / 3`, then
    /// releases the set (also when `f` panics or the future is dropped).
    /// When an extension finds the set lost, or its validity runs out
    /// first, the guard's [`lost`](LockSetGuard::lost) fires: stop using
    /// the tokens.
    ///
    /// # Errors
    ///
    /// As [`Redlock::acquire_many`]; `f`'s own result is returned inside.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// redlock
    ///     .with_lock_set(&["a", "b"], Duration::from_secs(10), |guard| async move {
    ///         tokio::select! {
    ///             () = tokio::time::sleep(Duration::from_secs(30)) => println!("{:?}", guard.tokens()),
    ///             _ = guard.lost() => eprintln!("lost the set"),
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock_set<S, F, Fut, T>(
        &self,
        names: &[S],
        ttl: Duration,
        f: F,
    ) -> Result<T, Error>
    where
        S: AsRef<str>,
        F: FnOnce(LockSetGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let set = self.acquire_many(names, ttl).await?;
        Ok(hold_set(set, ttl, f).await)
    }

    /// As [`Redlock::with_lock_set`], taking the set with
    /// [`Redlock::acquire_many_wait`]: waits up to `max_wait` for it, woken
    /// by the nodes.
    ///
    /// # Errors
    ///
    /// As [`Redlock::acquire_many_wait`]; `f`'s own result is returned
    /// inside.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let ttl = Duration::from_secs(10);
    /// redlock
    ///     .with_lock_set_wait(&["a", "b"], ttl, Duration::from_secs(60), |guard| async move {
    ///         println!("{:?}", guard.tokens());
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock_set_wait<S, F, Fut, T>(
        &self,
        names: &[S],
        ttl: Duration,
        max_wait: Duration,
        f: F,
    ) -> Result<T, Error>
    where
        S: AsRef<str>,
        F: FnOnce(LockSetGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let set = self.acquire_many_wait(names, ttl, max_wait).await?;
        Ok(hold_set(set, ttl, f).await)
    }
}

/// Runs `f` while a background task keeps `set` alive, then releases it.
async fn hold_set<F, Fut, T>(set: LockSet, ttl: Duration, f: F) -> T
where
    F: FnOnce(LockSetGuard) -> Fut,
    Fut: Future<Output = T>,
{
    let done = CancellationToken::new();
    let guard = LockSetGuard {
        tokens: set
            .tokens()
            .map(|(name, token)| (name.to_string(), token))
            .collect(),
        owner: set.owner().to_string(),
        lost: set.lost_token(),
    };
    let keeper = tokio::spawn(keep_alive(set, ttl, done.clone()));
    let stop = done.drop_guard();
    let value = f(guard).await;
    drop(stop);
    let _ = keeper.await;
    value
}

/// Extends `set` per the [`KeepAlive`] machine until `done`, fires its lost
/// signal when it is lost, and releases it at the end.
async fn keep_alive(mut set: LockSet, ttl: Duration, done: CancellationToken) {
    let lost = set.lost_token();
    let mut machine = KeepAlive::new(ttl, Instant::now());
    let mut action = machine.first();
    loop {
        let deadline = tokio::time::Instant::now() + set.validity();
        let event = match action {
            Action::Sleep { next } => tokio::select! {
                _ = done.cancelled() => Event::Done,
                _ = tokio::time::sleep_until(deadline) => Event::ValidityEnded,
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => Event::Due,
            },
            Action::Extend => tokio::select! {
                _ = done.cancelled() => Event::Done,
                _ = tokio::time::sleep_until(deadline) => Event::ValidityEnded,
                result = set.extend(ttl) => match result {
                    Ok(()) => Event::Extended(true),
                    Err(error) if error.is_transient() => {
                        tracing::info!(names = ?set.names(), %error, "extension of a lock set failed; trying again while the lease lasts");
                        Event::Unanswered
                    }
                    Err(error) => {
                        tracing::warn!(names = ?set.names(), %error, "extension of a lock set failed: set lost");
                        Event::Extended(false)
                    }
                }
            },
            Action::Lost(_) => {
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
    let _ = set.release().await;
}

/// What [`Redlock::with_lock_set`] hands its work: the set's tokens and
/// its lost signal.
#[derive(Clone, Debug)]
pub struct LockSetGuard {
    tokens: Vec<(String, u64)>,
    owner: String,
    lost: CancellationToken,
}

impl LockSetGuard {
    /// Every `(name, token)` pair, in byte order of the names.
    pub fn tokens(&self) -> &[(String, u64)] {
        &self.tokens
    }

    /// The token of `name`, or `None` when it is not in the set.
    pub fn token(&self, name: &str) -> Option<u64> {
        self.tokens
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, token)| token)
    }

    /// The owner id the set was taken with (see [`LockSet::owner`]).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Completes once the set is lost (an extension found a name lost, or
    /// the validity ran out before one succeeded).
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lost.cancelled()
    }

    /// The lost signal as a token of its own (for another task).
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the set was found lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}
