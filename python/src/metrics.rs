//! `metrics()`: the client's metrics (`redlock_client::metrics`) as kept by
//! the summary recorder this extension installs when it is imported.

use pyo3::prelude::*;
use redlock_client::summary::{self, SeriesValue, SummaryRecorder};

/// Installs the summary recorder as this extension's global recorder (the
/// extension is its own library: nothing else in the process records into
/// it).
pub(crate) fn install() -> Option<&'static SummaryRecorder> {
    summary::install_global()
}

/// One histogram's `(count, sum, [(upper bound, cumulative count), …])`.
type HistogramTuple = (u64, f64, Vec<(f64, u64)>);

/// One series: `(name, [(label, value), …], counter, histogram)`, one of
/// the last two `None`.
type SeriesTuple = (
    String,
    Vec<(String, String)>,
    Option<u64>,
    Option<HistogramTuple>,
);

/// Every series, sorted by name and labels.
#[pyfunction]
pub(crate) fn metrics() -> Vec<SeriesTuple> {
    let Some(recorder) = install() else {
        return Vec::new();
    };
    recorder
        .snapshot()
        .into_iter()
        .map(|series| match series.value {
            SeriesValue::Counter(n) => (series.name, series.labels, Some(n), None),
            SeriesValue::Histogram {
                count,
                sum,
                buckets,
            } => (
                series.name,
                series.labels,
                None,
                Some((count, sum, buckets)),
            ),
        })
        .collect()
}
