//! The client's defaults and the option types they fill in: the node and
//! connect timeouts, the drift factor, [`RetryPolicy`], and the test
//! switches (all off). [`crate::RedlockBuilder`] starts from them.

use std::time::Duration;

/// Default bound on one node's reply.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default bound on opening a connection to a node.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default bound on the replica-sync check's `WAIT` (DESIGN §13): how long
/// a lock write on a master with replicas may wait for them to acknowledge
/// it, on top of the node timeout.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_millis(250);
/// Default clock drift factor: 1 % of the TTL (plus 2 ms) is kept as margin.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// How [`Redlock::acquire`](crate::Redlock::acquire) retries when the lock is busy, no quorum
/// answered or nodes are in their restart grace window.
///
/// Attempt `n + 1` starts `base_delay` plus a uniformly random
/// `0..=jitter` after attempt `n` failed (the random part keeps contending
/// clients from retrying in lock step).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use redlock_client::RetryPolicy;
///
/// let patient = RetryPolicy {
///     attempts: 10,
///     base_delay: Duration::from_millis(200),
///     jitter: Duration::from_millis(50),
/// };
/// assert_eq!(RetryPolicy::no_retry().attempts, 1);
/// # let _ = patient;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, at least 1.
    pub attempts: u32,
    /// Fixed pause between attempts.
    pub base_delay: Duration,
    /// Upper bound of the random pause added to `base_delay`.
    pub jitter: Duration,
}

impl Default for RetryPolicy {
    /// 3 attempts, 100 ms apart plus up to 100 ms of jitter.
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            base_delay: Duration::from_millis(100),
            jitter: Duration::from_millis(100),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    ///
    /// # Examples
    ///
    /// ```
    /// use redlock_client::{Redlock, RetryPolicy};
    /// let builder = Redlock::builder(["redis://127.0.0.1:7001"]).retry(RetryPolicy::no_retry());
    /// # let _ = builder;
    /// ```
    pub fn no_retry() -> Self {
        RetryPolicy {
            attempts: 1,
            ..Self::default()
        }
    }
}

/// Switches that break the algorithm on purpose, for tests that show why a
/// step is needed (feature `danger-test-switches`): the pure rules' own
/// (`core/rules.rs`).
#[cfg(feature = "danger-test-switches")]
pub(crate) type DangerSwitches = crate::core::rules::Switches;
