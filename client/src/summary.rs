//! [`SummaryRecorder`]: a `metrics` recorder that keeps every counter and
//! a bucketed summary of every histogram in memory, read back as a
//! [`Series`] list. For programs that want the client's metrics
//! ([`crate::metrics`]) without an exporter: the Python and Node packages'
//! `metrics()`. Storage is fixed per series (a histogram is a count, a sum
//! and one counter per bucket of [`SECONDS_BUCKETS`]), whatever the number
//! of samples.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_util::registry::{Registry, Storage};

use crate::metrics::SECONDS_BUCKETS;

/// A histogram as count, sum and counts per bucket of [`SECONDS_BUCKETS`].
#[derive(Debug)]
pub struct BucketedHistogram {
    count: AtomicU64,
    /// The sum, as `f64` bits.
    sum: AtomicU64,
    /// Samples at or below each bound and above the one before.
    buckets: [AtomicU64; SECONDS_BUCKETS.len()],
}

impl BucketedHistogram {
    fn new() -> Self {
        BucketedHistogram {
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl HistogramFn for BucketedHistogram {
    fn record(&self, value: f64) {
        if let Some(i) = SECONDS_BUCKETS.iter().position(|bound| value <= *bound) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// The storage of [`SummaryRecorder`]'s registry.
#[derive(Debug)]
pub struct SummaryStorage;

impl Storage<Key> for SummaryStorage {
    type Counter = Arc<AtomicU64>;
    type Gauge = Arc<AtomicU64>;
    type Histogram = Arc<BucketedHistogram>;

    fn counter(&self, _: &Key) -> Self::Counter {
        Arc::new(AtomicU64::new(0))
    }

    fn gauge(&self, _: &Key) -> Self::Gauge {
        Arc::new(AtomicU64::new(0))
    }

    fn histogram(&self, _: &Key) -> Self::Histogram {
        Arc::new(BucketedHistogram::new())
    }
}

/// Keeps the client's metrics in memory; [`SummaryRecorder::snapshot`]
/// reads them.
///
/// # Examples
///
/// ```
/// use redlock_client::summary::{SeriesValue, SummaryRecorder};
///
/// let recorder = SummaryRecorder::new();
/// metrics::with_local_recorder(&recorder, || {
///     metrics::counter!(redlock_client::metrics::LOCKS_LOST).increment(1);
/// });
/// let series = recorder.snapshot();
/// assert_eq!(series[0].name, "redlock_locks_lost_total");
/// assert_eq!(series[0].value, SeriesValue::Counter(1));
/// ```
pub struct SummaryRecorder {
    registry: Registry<Key, SummaryStorage>,
}

impl std::fmt::Debug for SummaryRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryRecorder").finish_non_exhaustive()
    }
}

impl Default for SummaryRecorder {
    fn default() -> Self {
        Self::new()
    }
}

/// One series: a metric's name, its labels and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The metric's name (one of [`crate::metrics`]' constants).
    pub name: String,
    /// The labels, sorted by name.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: SeriesValue,
}

/// A series' value.
#[derive(Clone, Debug, PartialEq)]
pub enum SeriesValue {
    /// A counter's total.
    Counter(u64),
    /// A histogram's summary.
    Histogram {
        /// How many samples.
        count: u64,
        /// Their sum.
        sum: f64,
        /// `(upper bound, samples at or below it)` for each bound of
        /// [`SECONDS_BUCKETS`] (cumulative, as Prometheus buckets; the
        /// `+Inf` bucket is `count`).
        buckets: Vec<(f64, u64)>,
    },
}

impl SummaryRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        SummaryRecorder {
            registry: Registry::new(SummaryStorage),
        }
    }

    /// Every counter and histogram recorded so far, sorted by name and
    /// labels (gauges are left out: the client records none).
    pub fn snapshot(&self) -> Vec<Series> {
        let mut out = Vec::new();
        let labels = |key: &Key| {
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            labels.sort();
            labels
        };
        self.registry.visit_counters(|key, counter| {
            out.push(Series {
                name: key.name().to_string(),
                labels: labels(key),
                value: SeriesValue::Counter(counter.load(Ordering::Relaxed)),
            });
        });
        self.registry.visit_histograms(|key, histogram| {
            let mut below = 0;
            let buckets = SECONDS_BUCKETS
                .iter()
                .zip(&histogram.buckets)
                .map(|(bound, n)| {
                    below += n.load(Ordering::Relaxed);
                    (*bound, below)
                })
                .collect();
            out.push(Series {
                name: key.name().to_string(),
                labels: labels(key),
                value: SeriesValue::Histogram {
                    count: histogram.count.load(Ordering::Relaxed),
                    sum: f64::from_bits(histogram.sum.load(Ordering::Relaxed)),
                    buckets,
                },
            });
        });
        out.sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
        out
    }
}

impl Recorder for SummaryRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.registry
            .get_or_create_counter(key, |c| Counter::from_arc(Arc::clone(c)))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.registry
            .get_or_create_gauge(key, |g| Gauge::from_arc(Arc::clone(g)))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.registry
            .get_or_create_histogram(key, |h| Histogram::from_arc(Arc::clone(h)))
    }
}

/// A [`SummaryRecorder`] installed as the process's global recorder (once;
/// later calls return the same one), or `None` when another recorder was
/// installed first.
pub fn install_global() -> Option<&'static SummaryRecorder> {
    static INSTALLED: std::sync::OnceLock<Option<&'static SummaryRecorder>> =
        std::sync::OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let recorder: &'static SummaryRecorder = Box::leak(Box::new(SummaryRecorder::new()));
        metrics::set_global_recorder(recorder)
            .ok()
            .map(|()| recorder)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_keep_count_sum_and_cumulative_buckets() {
        let recorder = SummaryRecorder::new();
        metrics::with_local_recorder(&recorder, || {
            let h = metrics::histogram!(crate::metrics::HOLD_SECONDS);
            h.record(0.0002);
            h.record(0.003);
            h.record(0.004);
            h.record(1000.0);
            metrics::counter!(crate::metrics::ACQUISITIONS, "outcome" => "busy").increment(2);
        });
        let series = recorder.snapshot();
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].name, crate::metrics::ACQUISITIONS);
        assert_eq!(series[0].labels, vec![("outcome".into(), "busy".into())]);
        assert_eq!(series[0].value, SeriesValue::Counter(2));
        let SeriesValue::Histogram {
            count,
            sum,
            buckets,
        } = &series[1].value
        else {
            panic!("{series:?}")
        };
        assert_eq!(*count, 4);
        assert!((sum - 1000.0072).abs() < 1e-9, "{sum}");
        let at = |bound: f64| buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(at(0.0005), 1);
        assert_eq!(at(0.0025), 1);
        assert_eq!(at(0.005), 3);
        assert_eq!(at(60.0), 3, "1000 s is above every bound but +Inf");
    }
}
