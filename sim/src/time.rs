//! Time in the simulated world.
//!
//! [`Time`] is true time, in microseconds since the start of the run: the
//! event queue runs on it and the checkers judge against it. Every process
//! sees it through a [`Clock`] of its own, which drifts (a rate off by a few
//! parts per thousand) and whose wall-clock reading can step either way.
//! A client's monotonic readings are [`At`], the `Moment` the client's rules
//! take (as the tokio code passes `Instant`).

use std::ops::{Add, Sub};
use std::time::Duration;

/// True time: microseconds since the start of the run.
pub type Time = u64;

/// One millisecond of true time.
pub const MS: Time = 1_000;
/// One second of true time.
pub const SEC: Time = 1_000_000;

/// The wall clock's reading at the start of every run (ms since the Unix
/// epoch, late 2026): the same for every seed, so that replays agree.
pub const WALL_EPOCH_MS: u64 = 1_796_000_000_000;

/// A process's clock: a drift rate against true time, and a wall-clock
/// offset that steps.
#[derive(Clone, Debug)]
pub struct Clock {
    /// Parts per million the clock runs fast (negative: slow).
    rate_ppm: i64,
    /// Wall-clock offset from true time, in µs (steps move it).
    wall_offset_us: i64,
}

impl Clock {
    /// A clock that runs `rate_ppm` fast and whose wall clock reads
    /// `wall_offset_us` ahead of true time.
    pub fn new(rate_ppm: i64, wall_offset_us: i64) -> Self {
        Clock {
            rate_ppm,
            wall_offset_us,
        }
    }

    /// The clock's rate error.
    pub fn rate_ppm(&self) -> i64 {
        self.rate_ppm
    }

    /// Microseconds on this clock's monotonic scale at true time `t`
    /// (runs from 0 at the start of the run, at the clock's rate).
    pub fn local_us(&self, t: Time) -> u64 {
        let scaled = t as i128 * (1_000_000 + self.rate_ppm as i128) / 1_000_000;
        scaled.max(0) as u64
    }

    /// The first true time at which the monotonic scale reads `local` or
    /// more.
    pub fn true_at(&self, local: u64) -> Time {
        let rate = 1_000_000 + self.rate_ppm as i128;
        let t = (local as i128 * 1_000_000 + rate - 1) / rate;
        let mut t = t.max(0) as u64;
        // Integer rounding: step to the first reading that is there.
        while self.local_us(t) < local {
            t += 1;
        }
        t
    }

    /// The wall clock at true time `t`, in µs since the Unix epoch. It
    /// does not drift (NTP keeps it on time between steps); only its steps
    /// move it off.
    pub fn wall_us(&self, t: Time) -> u64 {
        let base = WALL_EPOCH_MS as i128 * 1_000;
        (base + t as i128 + self.wall_offset_us as i128).max(0) as u64
    }

    /// The wall clock at true time `t`, in ms since the Unix epoch.
    pub fn wall_ms(&self, t: Time) -> u64 {
        self.wall_us(t) / 1_000
    }

    /// Steps the wall clock by `step_us` (either way).
    pub fn step_wall(&mut self, step_us: i64) {
        self.wall_offset_us += step_us;
    }

    /// Sets the wall clock's offset from true time.
    pub fn set_wall_offset(&mut self, offset_us: i64) {
        self.wall_offset_us = offset_us;
    }
}

/// A client's monotonic reading: microseconds on its clock's scale. The
/// `Moment` the client's rules take in the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct At(pub u64);

impl Add<Duration> for At {
    type Output = At;

    fn add(self, d: Duration) -> At {
        At(self
            .0
            .saturating_add(d.as_micros().min(u64::MAX as u128) as u64))
    }
}

impl Sub<At> for At {
    type Output = Duration;

    /// Saturating, as `Instant`'s.
    fn sub(self, earlier: At) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// Whole microseconds of `d`.
pub fn us(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drifting_clock_inverts_exactly() {
        for rate in [-3_000, -1, 0, 7, 2_500] {
            let c = Clock::new(rate, 0);
            for local in [0, 1, 999, 1_000_000, 123_456_789] {
                let t = c.true_at(local);
                assert!(c.local_us(t) >= local);
                assert!(
                    t == 0 || c.local_us(t - 1) < local,
                    "rate {rate} local {local}"
                );
            }
        }
    }

    #[test]
    fn steps_move_the_wall_clock_only() {
        let mut c = Clock::new(1_000, 0);
        let before = (c.local_us(SEC), c.wall_us(SEC));
        c.step_wall(-5 * (SEC as i64));
        assert_eq!(c.local_us(SEC), before.0);
        assert_eq!(c.wall_us(SEC), before.1 - 5 * SEC);
    }
}
