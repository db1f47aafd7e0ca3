//! What every decision of the client needs: the time it is passed
//! ([`Moment`]), the settings of one client ([`Rules`]), the lease
//! arithmetic of step 5 ([`usable`]) and the retry pause.
//!
//! Nothing here reads a clock: the tokio code passes `std::time::Instant`
//! readings, the simulator (`sim/`) readings of a simulated clock. Where a
//! decision needs chance (the retry jitter, the pause after a split vote) it
//! is passed a random source.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

use rand::Rng;

/// A reading of a monotonic clock: `std::time::Instant` in the client,
/// `tokio::time::Instant` in its timers, a simulated clock in the simulator.
pub trait Moment:
    Copy + Ord + fmt::Debug + Add<Duration, Output = Self> + Sub<Self, Output = Duration>
{
}

impl<T> Moment for T where
    T: Copy + Ord + fmt::Debug + Add<Duration, Output = T> + Sub<T, Output = Duration>
{
}

/// Fixed part of the drift margin.
pub const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// Step 5: how long a lease of `ttl_ms` (what the nodes were sent) can be
/// used after a round that took `elapsed`: ttl − elapsed − (ttl × drift +
/// 2 ms), measured from the start of the round. `None` when nothing is
/// left. Returns the usable span from the start of the round.
pub fn usable(ttl_ms: u64, drift_factor: f64, elapsed: Duration) -> Option<Duration> {
    let ttl = Duration::from_millis(ttl_ms);
    ttl.checked_sub(ttl.mul_f64(drift_factor) + DRIFT_FIXED)
        .filter(|usable| *usable > elapsed)
}

/// Switches that put back holes the client's rules close, for the tests
/// and the simulator that show each rule is needed (feature
/// `danger-test-switches`; all off by default).
#[cfg(feature = "danger-test-switches")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Switches {
    /// Step 4 (the write-back) is skipped: the highest granted token is
    /// used even when fewer than a quorum replied it.
    pub no_write_back: bool,
    /// Step 5 (the validity check) is skipped: the deadline is the end of
    /// the round plus the full ttl.
    pub no_validity_check: bool,
    /// An extension counts its validity with its own ttl only, forgetting
    /// that an earlier EXTEND with a shorter ttl can land after it (the rule
    /// before the extension cap).
    pub late_extend: bool,
    /// The cap of a failed or cancelled extension, lifted by the next
    /// success: a successful extension's late EXTEND is not covered (the
    /// rule before the shortest-lease rule).
    pub extend_cap: bool,
    /// An extension that starts, or is confirmed, after the lock's validity
    /// ended still makes it valid (the rule before the lapse check).
    pub lapsed_extend: bool,
}

/// The settings of one client that its decisions read.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Members of the quorum.
    pub nodes: usize,
    /// The majority: `nodes / 2 + 1`.
    pub quorum: usize,
    /// The clock drift factor of step 5.
    pub drift_factor: f64,
    /// Deliberately broken rules (tests and the simulator only).
    #[cfg(feature = "danger-test-switches")]
    pub switches: Switches,
}

impl Rules {
    /// The rules of a client of `nodes` members.
    pub fn new(nodes: usize, drift_factor: f64) -> Self {
        Rules {
            nodes,
            quorum: nodes / 2 + 1,
            drift_factor,
            #[cfg(feature = "danger-test-switches")]
            switches: Switches::default(),
        }
    }

    /// Whether step 5 runs (always, unless a test switched it off).
    pub fn validity_check(&self) -> bool {
        #[cfg(feature = "danger-test-switches")]
        if self.switches.no_validity_check {
            return false;
        }
        true
    }

    /// Whether an extension must start and be confirmed while the lock is
    /// still valid (always, unless a test switched it off).
    pub fn lapse_check(&self) -> bool {
        #[cfg(feature = "danger-test-switches")]
        if self.switches.lapsed_extend {
            return false;
        }
        self.validity_check()
    }

    /// Whether step 4 runs (always, unless a test switched it off).
    pub fn write_back(&self) -> bool {
        #[cfg(feature = "danger-test-switches")]
        if self.switches.no_write_back {
            return false;
        }
        true
    }

    /// See [`usable`], with this client's drift factor.
    pub fn usable(&self, ttl_ms: u64, elapsed: Duration) -> Option<Duration> {
        usable(ttl_ms, self.drift_factor, elapsed)
    }
}

/// The pause before the next attempt: `base` plus a uniformly random
/// `0..=jitter` (whole microseconds), so that contending clients do not
/// retry in lock step.
pub fn retry_pause(base: Duration, jitter: Duration, rng: &mut impl Rng) -> Duration {
    let jitter_us = jitter.as_micros().min(u64::MAX as u128) as u64;
    let extra = if jitter_us == 0 {
        0
    } else {
        rng.gen_range(0..=jitter_us)
    };
    base + Duration::from_micros(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_usable_once_the_round_took_the_margin() {
        assert_eq!(usable(100, 0.01, Duration::from_millis(97)), None);
        assert_eq!(
            usable(100, 0.01, Duration::from_millis(96)),
            Some(Duration::from_millis(97))
        );
        // 1000 ms: 1000 − 10 − 2 = 988 ms usable.
        assert_eq!(
            usable(1_000, 0.01, Duration::from_millis(1)),
            Some(Duration::from_millis(988))
        );
        // 2 ms with no drift factor: the fixed margin leaves nothing.
        assert_eq!(usable(2, 0.0, Duration::ZERO), None);
    }

    #[test]
    fn the_retry_pause_stays_within_its_jitter() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let base = Duration::from_millis(100);
        for _ in 0..1_000 {
            let p = retry_pause(base, Duration::from_millis(5), &mut rng);
            assert!(p >= base && p <= base + Duration::from_millis(5), "{p:?}");
        }
        assert_eq!(retry_pause(base, Duration::ZERO, &mut rng), base);
    }
}
