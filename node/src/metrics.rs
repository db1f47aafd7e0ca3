//! `metrics()`: the client's metrics (`redlock_client::metrics`) as kept by
//! the summary recorder this addon installs when it loads.

use std::collections::HashMap;

use napi_derive::napi;
use redlock_client::summary::{self, SeriesValue};

/// One histogram bucket: samples at or below `le` seconds (cumulative).
#[napi(object, object_from_js = false)]
pub struct NativeBucket {
    pub le: f64,
    pub count: f64,
}

/// One series of a metric.
#[napi(object, object_from_js = false)]
pub struct NativeSeries {
    /// The metric's name, e.g. `redlock_acquisitions_total`.
    pub name: String,
    pub labels: HashMap<String, String>,
    /// A counter's total, or a histogram's number of samples.
    pub value: f64,
    /// A histogram's sum of samples (seconds).
    pub sum: Option<f64>,
    /// A histogram's buckets, without the last (`+Inf`, which is `value`).
    pub buckets: Option<Vec<NativeBucket>>,
}

/// Installs the summary recorder as the addon's global recorder (the addon
/// is its own library: nothing else in the process records into it).
pub(crate) fn install() {
    let _ = summary::install_global();
}

/// Every series recorded so far, sorted by name and labels.
#[napi]
pub fn metrics() -> Vec<NativeSeries> {
    let Some(recorder) = summary::install_global() else {
        return Vec::new();
    };
    recorder
        .snapshot()
        .into_iter()
        .map(|series| {
            let labels = series.labels.into_iter().collect();
            match series.value {
                SeriesValue::Counter(n) => NativeSeries {
                    name: series.name,
                    labels,
                    value: n as f64,
                    sum: None,
                    buckets: None,
                },
                SeriesValue::Histogram {
                    count,
                    sum,
                    buckets,
                } => NativeSeries {
                    name: series.name,
                    labels,
                    value: count as f64,
                    sum: Some(sum),
                    buckets: Some(
                        buckets
                            .into_iter()
                            .map(|(le, count)| NativeBucket {
                                le,
                                count: count as f64,
                            })
                            .collect(),
                    ),
                },
            }
        })
        .collect()
}
