//! What every clone of a [`Redlock`](crate::Redlock) and every
//! [`Lock`](crate::Lock) share ([`Inner`]), and the lease arithmetic they
//! both use.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::core::error::Error;
#[cfg(feature = "danger-test-switches")]
use crate::defaults::DangerSwitches;
use crate::defaults::RetryPolicy;
use crate::quorum::Quorum;

/// Fixed part of the drift margin.
const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// What every clone of a [`Redlock`](crate::Redlock) and every
/// [`Lock`](crate::Lock) share.
pub(crate) struct Inner {
    pub(crate) quorum: Quorum,
    pub(crate) retry: RetryPolicy,
    pub(crate) drift_factor: f64,
    pub(crate) clock_floor: bool,
    #[cfg(feature = "danger-test-switches")]
    pub(crate) danger: DangerSwitches,
}

impl Inner {
    /// Step 5: how long a lease of `ttl_ms` (what the nodes were sent) can
    /// be used after a round that took `elapsed`: ttl − elapsed − (ttl ×
    /// drift + 2 ms), measured from the start of the round. `None` when
    /// nothing is left. Returns the usable span from the start of the round.
    pub(crate) fn usable(&self, ttl_ms: u64, elapsed: Duration) -> Option<Duration> {
        usable(ttl_ms, self.drift_factor, elapsed)
    }

    /// Whether step 5 runs (always, unless a test switched it off).
    pub(crate) fn validity_check(&self) -> bool {
        #[cfg(feature = "danger-test-switches")]
        if self.danger.no_validity_check {
            return false;
        }
        true
    }
}

/// See [`Inner::usable`].
fn usable(ttl_ms: u64, drift_factor: f64, elapsed: Duration) -> Option<Duration> {
    let ttl = Duration::from_millis(ttl_ms);
    ttl.checked_sub(ttl.mul_f64(drift_factor) + DRIFT_FIXED)
        .filter(|usable| *usable > elapsed)
}

/// The lease the nodes are sent for `ttl`: whole milliseconds, at least 1.
pub(crate) fn ttl_millis(ttl: Duration) -> Result<u64, Error> {
    let ms = ttl.as_millis();
    if ms == 0 {
        return Err(Error::InvalidArgument(format!(
            "ttl {ttl:?} is below 1 ms: locks need a lease of at least 1 ms"
        )));
    }
    Ok(ms.min(i64::MAX as u128) as u64)
}

/// The wall clock in microseconds since the epoch: the acquire `FLOOR` and
/// the waiting ticket.
pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros().min(i64::MAX as u128) as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_is_computed_from_the_whole_milliseconds_sent() {
        // 2.9 ms sends 2 ms; with no drift factor the 2 ms fixed margin
        // leaves nothing, whatever the fraction of a millisecond dropped.
        let ttl = Duration::from_micros(2_900);
        let sent = ttl_millis(ttl).expect("valid ttl");
        assert_eq!(sent, 2);
        assert_eq!(usable(sent, 0.0, Duration::ZERO), None);
        // 1000.9 ms: 1000 ms sent, 1000 − 10 − 2 = 988 ms usable.
        let sent = ttl_millis(Duration::from_micros(1_000_900)).expect("valid ttl");
        assert_eq!(
            usable(sent, 0.01, Duration::from_millis(1)),
            Some(Duration::from_millis(988))
        );
    }

    #[test]
    fn nothing_usable_once_the_round_took_the_margin() {
        assert_eq!(usable(100, 0.01, Duration::from_millis(97)), None);
        assert_eq!(
            usable(100, 0.01, Duration::from_millis(96)),
            Some(Duration::from_millis(97))
        );
    }

    #[test]
    fn ttls_below_a_millisecond_are_refused() {
        assert!(matches!(
            ttl_millis(Duration::from_micros(999)),
            Err(Error::InvalidArgument(_))
        ));
    }
}
