//! Percentiles and medians.

use std::time::Duration;

/// Latency samples of one measurement, in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    ns: Vec<u64>,
}

impl Samples {
    /// An empty set with room for `n` samples.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            ns: Vec::with_capacity(n),
        }
    }

    /// Records one latency.
    pub fn push(&mut self, d: Duration) {
        self.ns
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds all samples of `other`.
    pub fn merge(&mut self, other: Samples) {
        self.ns.extend(other.ns);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }

    /// p50, p99 and p99.9 in microseconds (nearest-rank), `None` when empty.
    pub fn percentiles(&mut self) -> Option<Percentiles> {
        if self.ns.is_empty() {
            return None;
        }
        self.ns.sort_unstable();
        Some(Percentiles {
            p50: self.rank(0.50),
            p99: self.rank(0.99),
            p999: self.rank(0.999),
        })
    }

    fn rank(&self, q: f64) -> f64 {
        let n = self.ns.len();
        let idx = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        self.ns[idx] as f64 / 1_000.0
    }
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// The median of `values` (mean of the two middle ones for an even count),
/// `None` when empty or when a value is not finite.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Per-round percentiles reduced to their medians.
pub fn median_percentiles(rounds: &[Percentiles]) -> Option<Percentiles> {
    let pick = |f: fn(&Percentiles) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    Some(Percentiles {
        p50: pick(|p| p.p50)?,
        p99: pick(|p| p.p99)?,
        p999: pick(|p| p.p999)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::default();
        for us in 1..=1000u64 {
            s.push(Duration::from_micros(us));
        }
        let p = s.percentiles().unwrap();
        assert_eq!(p.p50, 500.0);
        assert_eq!(p.p99, 990.0);
        assert_eq!(p.p999, 999.0);
    }
}
