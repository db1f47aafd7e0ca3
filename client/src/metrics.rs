//! The client's metrics, recorded through the [`metrics`] facade, and the
//! `tracing` events that carry the same facts.
//!
//! The library never installs a recorder: without one (the application's
//! choice: `metrics-exporter-prometheus`, StatsD, …) every call here is a
//! look at a thread-local and costs nothing more. Names and labels follow
//! Prometheus conventions; durations are in seconds. No metric carries the
//! lock's name unless the application opts in with
//! [`RedlockBuilder::metrics_lock_names`](crate::RedlockBuilder::metrics_lock_names)
//! (a `lock` label: one series per lock name, which can be many).
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | [`ACQUISITIONS`] | counter | `outcome` | acquisition attempts by outcome, and waits that ran out |
//! | [`ACQUIRE_SECONDS`] | histogram | `outcome` | how long one attempt (a quorum round) took |
//! | [`WAIT_SECONDS`] | histogram | | how long an acquisition waited before the attempt that got the lock |
//! | [`HOLD_SECONDS`] | histogram | | how long a lock was held, from its acquisition to its release |
//! | [`EXTENSIONS`] | counter | `outcome` | extensions, `ok` or `failed` |
//! | [`LOCKS_LOST`] | counter | | locks found lost while held |
//! | [`NODE_ERRORS`] | counter | `node`, `kind` | a node's failed or missing replies |
//! | [`WRITE_BACKS`] | counter | | acquisitions that needed the write-back (step 4) |
//! | [`STALE_REFUSALS`] | counter | | fenced calls refused as stale by a resource's guard |

use std::time::Duration;

use ::metrics::{Key, Label, SharedString};

use crate::core::error::{Error, NodeFailure};

/// Counter: one per acquisition attempt (one quorum round: ACQUIRE and the
/// write-back), labelled `outcome` = `granted`, `busy`, `no_quorum`,
/// `restart_guard`, `expired` (the round ate the lease) or `error` (module
/// missing, ACL refusal, bad argument); plus `timeout` once per waiting
/// acquisition (`acquire_wait`, `with_lock_wait`, `--wait`) that gave up at
/// its maximum wait. A `try_acquire` is one attempt; an `acquire` with
/// retries is one per try.
pub const ACQUISITIONS: &str = "redlock_acquisitions_total";

/// Histogram (seconds): the duration of every acquisition attempt, labelled
/// with its `outcome` as in [`ACQUISITIONS`].
pub const ACQUIRE_SECONDS: &str = "redlock_acquire_seconds";

/// Histogram (seconds): for every acquisition that got the lock through
/// `acquire` or `acquire_wait` (and the `with_lock` variants), the time
/// from the call to the start of the attempt that got it: zero when the
/// first attempt did, the retries' or the wait's time otherwise.
pub const WAIT_SECONDS: &str = "redlock_wait_seconds";

/// Histogram (seconds): how long each lock was held, from the start of the
/// round that got it to its release (explicit, by drop, or at the end of
/// `with_lock`). A detached lock (`Lock::detach`) is not counted.
pub const HOLD_SECONDS: &str = "redlock_hold_seconds";

/// Counter: extensions, labelled `outcome` = `ok` or `failed` (any error:
/// lost, no quorum, the validity used up by the round).
pub const EXTENSIONS: &str = "redlock_extensions_total";

/// Counter: locks found lost while held, at most once per lock: an
/// extension that a quorum answered "not held" or that used up the lease,
/// or a `with_lock` whose validity ran out before an extension succeeded
/// (its guard's `lost()` fires).
pub const LOCKS_LOST: &str = "redlock_locks_lost_total";

/// Counter: a node's failed or missing reply in a quorum round, labelled
/// `node` (its URL without credentials) and `kind` (`timeout`,
/// `not_connected`, `connection`, `module_not_loaded`, `grace`,
/// `bad_argument`, `no_permission`, `auth_failed`, `refused`,
/// `unexpected`, `same_server`, `sync_refused`, `not_synced`, …).
pub const NODE_ERRORS: &str = "redlock_node_errors_total";

/// Counter: acquisitions whose nodes disagreed on the token, so that the
/// highest one was written back to the others (step 4, `REDLOCK.FENCE`).
pub const WRITE_BACKS: &str = "redlock_write_backs_total";

/// Counter: fenced calls (`fenced`, `fenced_atomic`, `announce`) that a
/// resource's guard refused as stale: it had seen a newer token.
pub const STALE_REFUSALS: &str = "redlock_stale_refusals_total";

/// Histogram buckets (seconds) that suit the durations above, from a
/// loopback round (under a millisecond) to a long hold: what the CLI's
/// `--metrics-addr` and the Python and Node packages use.
pub const SECONDS_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Registers every metric's unit and description with the installed
/// recorder (exporters use them for `# HELP` lines). Call it once after
/// installing one; recording works without it.
///
/// # Examples
///
/// ```
/// // After installing a recorder (an exporter) of your choice:
/// redlock_client::metrics::describe();
/// ```
pub fn describe() {
    use ::metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(
        ACQUISITIONS,
        "Acquisition attempts by outcome, and waiting acquisitions that timed out"
    );
    describe_histogram!(
        ACQUIRE_SECONDS,
        Unit::Seconds,
        "Duration of one acquisition attempt (a quorum round)"
    );
    describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from an acquire call to the start of the attempt that got the lock"
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "How long a lock was held, acquisition to release"
    );
    describe_counter!(EXTENSIONS, "Lock extensions by outcome (ok, failed)");
    describe_counter!(LOCKS_LOST, "Locks found lost while held");
    describe_counter!(
        NODE_ERRORS,
        "Failed or missing node replies in quorum rounds, by node and kind"
    );
    describe_counter!(
        WRITE_BACKS,
        "Acquisitions that wrote the highest token back to other nodes"
    );
    describe_counter!(
        STALE_REFUSALS,
        "Fenced calls refused as stale by the resource's guard"
    );
}

/// How an acquisition attempt ended: the `outcome` label of
/// [`ACQUISITIONS`] and [`ACQUIRE_SECONDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Granted,
    Busy,
    NoQuorum,
    RestartGuard,
    Expired,
    Error,
    /// A waiting acquisition gave up at its maximum wait.
    Timeout,
}

impl Outcome {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::Busy => "busy",
            Outcome::NoQuorum => "no_quorum",
            Outcome::RestartGuard => "restart_guard",
            Outcome::Expired => "expired",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
        }
    }

    /// The outcome of an attempt that failed with `error`.
    pub(crate) fn of(error: &Error) -> Self {
        match error {
            Error::Busy { .. } => Outcome::Busy,
            Error::NoQuorum { .. } => Outcome::NoQuorum,
            Error::RestartGuard { .. } => Outcome::RestartGuard,
            Error::ExpiredBeforeUse { .. } => Outcome::Expired,
            _ => Outcome::Error,
        }
    }
}

/// The `kind` label of [`NODE_ERRORS`] for a node's failure.
pub(crate) fn failure_kind(failure: &NodeFailure) -> &'static str {
    match failure {
        NodeFailure::Timeout(_) => "timeout",
        NodeFailure::NotConnected(_) => "not_connected",
        NodeFailure::Connection(_) => "connection",
        NodeFailure::ModuleNotLoaded => "module_not_loaded",
        NodeFailure::Grace { .. } => "grace",
        NodeFailure::BadArgument(_) => "bad_argument",
        NodeFailure::NoPermission(_) => "no_permission",
        NodeFailure::AuthFailed(_) => "auth_failed",
        NodeFailure::Refused(_) => "refused",
        NodeFailure::Unexpected(_) => "unexpected",
        NodeFailure::WriteBack(_) => "write_back",
        NodeFailure::SameServer { .. } => "same_server",
        NodeFailure::SyncStated(_) => "sync_stated",
        NodeFailure::SyncRefused(_) => "sync_refused",
        NodeFailure::NotSynced { .. } => "not_synced",
    }
}

/// Records a node's failed or missing reply ([`NODE_ERRORS`]); `node` is
/// the member's URL without credentials.
pub(crate) fn node_error(node: &str, failure: &NodeFailure) {
    let kind = failure_kind(failure);
    tracing::trace!(node, kind, reason = %failure, "node error");
    let labels = vec![
        Label::new("node", SharedString::from(node.to_string())),
        Label::from_static_parts("kind", kind),
    ];
    count(&Key::from_parts(NODE_ERRORS, labels), 1);
}

/// The metadata of every metric the client records.
static METADATA: ::metrics::Metadata<'static> =
    ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));

/// `outcome="…"` labels, static so that recording them allocates nothing.
macro_rules! outcome_labels {
    ($($name:ident = $value:literal),* $(,)?) => {
        $(static $name: [Label; 1] = [Label::from_static_parts("outcome", $value)];)*
    };
}
outcome_labels!(
    GRANTED = "granted",
    BUSY = "busy",
    NO_QUORUM = "no_quorum",
    RESTART_GUARD = "restart_guard",
    EXPIRED = "expired",
    ERROR = "error",
    TIMEOUT = "timeout",
    OK = "ok",
    FAILED = "failed",
);

impl Outcome {
    /// The `outcome` label.
    fn labels(self) -> &'static [Label] {
        match self {
            Outcome::Granted => &GRANTED,
            Outcome::Busy => &BUSY,
            Outcome::NoQuorum => &NO_QUORUM,
            Outcome::RestartGuard => &RESTART_GUARD,
            Outcome::Expired => &EXPIRED,
            Outcome::Error => &ERROR,
            Outcome::Timeout => &TIMEOUT,
        }
    }
}

/// Adds `by` to the counter `key`.
fn count(key: &Key, by: u64) {
    ::metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(by));
}

/// Records `seconds` in the histogram `key`.
fn observe(key: &Key, seconds: Duration) {
    ::metrics::with_recorder(|r| {
        r.register_histogram(key, &METADATA)
            .record(seconds.as_secs_f64())
    });
}

/// What every metric of one client records besides its own labels: the
/// lock's name, when the application opted in.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LockMetrics {
    /// Whether the metrics carry a `lock` label.
    pub(crate) lock_names: bool,
}

impl LockMetrics {
    /// The key of `name` for a lock on `key`, with the static `labels`:
    /// built without allocating unless lock names are labels.
    fn key(self, name: &'static str, key: &str, labels: &'static [Label]) -> Key {
        if self.lock_names {
            let mut all = labels.to_vec();
            all.push(Label::new("lock", SharedString::from(key.to_string())));
            Key::from_parts(name, all)
        } else {
            Key::from_static_parts(name, labels)
        }
    }

    /// One acquisition attempt on `key` ended with `outcome` after
    /// `elapsed`.
    pub(crate) fn attempt(self, key: &str, outcome: Outcome, elapsed: Duration) {
        tracing::debug!(
            outcome = outcome.as_str(),
            elapsed_us = elapsed.as_micros() as u64,
            "acquisition attempt"
        );
        count(&self.key(ACQUISITIONS, key, outcome.labels()), 1);
        observe(&self.key(ACQUIRE_SECONDS, key, outcome.labels()), elapsed);
    }

    /// A waiting acquisition of `key` gave up at its maximum wait.
    pub(crate) fn wait_timed_out(self, key: &str, waited: Duration) {
        tracing::debug!(
            outcome = Outcome::Timeout.as_str(),
            waited_ms = waited.as_millis() as u64,
            "waiting acquisition gave up"
        );
        count(&self.key(ACQUISITIONS, key, Outcome::Timeout.labels()), 1);
    }

    /// An acquisition of `key` got the lock after waiting `waited`.
    pub(crate) fn waited(self, key: &str, waited: Duration) {
        tracing::debug!(waited_ms = waited.as_millis() as u64, "lock acquired");
        observe(&self.key(WAIT_SECONDS, key, &[]), waited);
    }

    /// A lock on `key` was released (or dropped) after being held `held`.
    pub(crate) fn held(self, key: &str, held: Duration) {
        tracing::debug!(held_ms = held.as_millis() as u64, "lock held");
        observe(&self.key(HOLD_SECONDS, key, &[]), held);
    }

    /// An extension of `key` succeeded (`ok`) or failed.
    pub(crate) fn extension(self, key: &str, ok: bool) {
        let labels: &'static [Label] = if ok { &OK } else { &FAILED };
        tracing::debug!(outcome = if ok { "ok" } else { "failed" }, "extension");
        count(&self.key(EXTENSIONS, key, labels), 1);
    }

    /// A lock on `key` was found lost (the caller makes sure it is once per
    /// lock).
    pub(crate) fn lost(self, key: &str) {
        tracing::warn!(key, "lock lost");
        count(&self.key(LOCKS_LOST, key, &[]), 1);
    }

    /// An acquisition of `key` wrote its token back to other nodes.
    pub(crate) fn write_back(self, key: &str) {
        tracing::debug!("write-back");
        count(&self.key(WRITE_BACKS, key, &[]), 1);
    }

    /// A fenced call under a lock on `key` was refused as stale.
    pub(crate) fn stale(self, key: &str, token: u64, highest: u64) {
        tracing::warn!(key, token, highest, "fenced call refused: stale token");
        count(&self.key(STALE_REFUSALS, key, &[]), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    /// `(name, sorted labels, value)`.
    type Recorded = (String, Vec<(String, String)>, u64);

    /// Every counter and histogram recorded; histograms as their sample
    /// count.
    fn recorded(recorder: &DebuggingRecorder) -> Vec<Recorded> {
        let mut out: Vec<_> = recorder
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let (_, key) = key.into_parts();
                let mut labels: Vec<_> = key
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect();
                labels.sort();
                let value = match value {
                    DebugValue::Counter(n) => n,
                    DebugValue::Histogram(samples) => samples.len() as u64,
                    DebugValue::Gauge(_) => u64::MAX,
                };
                (key.name().to_string(), labels, value)
            })
            .collect();
        out.sort();
        out
    }

    fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn lock_names_are_labels_only_when_asked_for() {
        let recorder = DebuggingRecorder::new();
        ::metrics::with_local_recorder(&recorder, || {
            let plain = LockMetrics { lock_names: false };
            plain.attempt("reports", Outcome::Busy, Duration::from_millis(2));
            plain.attempt("reports", Outcome::Granted, Duration::from_millis(1));
            plain.lost("reports");
            plain.stale("reports", 4, 5);
            let named = LockMetrics { lock_names: true };
            named.extension("reports", false);
            named.write_back("reports");
        });
        assert_eq!(
            recorded(&recorder),
            vec![
                (ACQUIRE_SECONDS.into(), l(&[("outcome", "busy")]), 1),
                (ACQUIRE_SECONDS.into(), l(&[("outcome", "granted")]), 1),
                (ACQUISITIONS.into(), l(&[("outcome", "busy")]), 1),
                (ACQUISITIONS.into(), l(&[("outcome", "granted")]), 1),
                (
                    EXTENSIONS.into(),
                    l(&[("lock", "reports"), ("outcome", "failed")]),
                    1
                ),
                (LOCKS_LOST.into(), vec![], 1),
                (STALE_REFUSALS.into(), vec![], 1),
                (WRITE_BACKS.into(), l(&[("lock", "reports")]), 1),
            ]
        );
    }

    #[test]
    fn node_errors_name_the_node_and_the_kind() {
        let recorder = DebuggingRecorder::new();
        ::metrics::with_local_recorder(&recorder, || {
            node_error(
                "redis://127.0.0.1:7001",
                &NodeFailure::Timeout(Duration::from_millis(5)),
            );
            node_error(
                "redis://127.0.0.1:7001",
                &NodeFailure::Timeout(Duration::from_millis(5)),
            );
            node_error("redis://127.0.0.1:7002", &NodeFailure::ModuleNotLoaded);
        });
        assert_eq!(
            recorded(&recorder),
            vec![
                (
                    NODE_ERRORS.into(),
                    l(&[
                        ("kind", "module_not_loaded"),
                        ("node", "redis://127.0.0.1:7002")
                    ]),
                    1
                ),
                (
                    NODE_ERRORS.into(),
                    l(&[("kind", "timeout"), ("node", "redis://127.0.0.1:7001")]),
                    2
                ),
            ]
        );
    }

    #[test]
    fn attempt_outcomes_follow_the_error() {
        assert_eq!(
            Outcome::of(&Error::Busy {
                holders: 3,
                nodes: 5
            }),
            Outcome::Busy
        );
        assert_eq!(
            Outcome::of(&Error::ExpiredBeforeUse {
                ttl: Duration::from_millis(5),
                elapsed: Duration::from_millis(6)
            }),
            Outcome::Expired
        );
        assert_eq!(
            Outcome::of(&Error::InvalidArgument("ttl".into())),
            Outcome::Error
        );
    }
}
