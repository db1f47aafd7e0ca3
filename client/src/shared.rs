//! What every clone of a [`Redlock`](crate::Redlock) and every
//! [`Lock`](crate::Lock) share ([`Inner`]), the lease the nodes are sent
//! and the wall clock of the `FLOOR`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::core::error::Error;
use crate::core::rules::Rules;
use crate::defaults::RetryPolicy;
use crate::quorum::Quorum;

/// What every clone of a [`Redlock`](crate::Redlock) and every
/// [`Lock`](crate::Lock) share.
pub(crate) struct Inner {
    pub(crate) quorum: Quorum,
    pub(crate) retry: RetryPolicy,
    pub(crate) clock_floor: bool,
    /// What the pure decisions read: node count, quorum, drift factor and
    /// the test switches (`core/rules.rs`).
    pub(crate) rules: Rules,
    /// This client's waiters per lock name, in call order (`local_turn.rs`).
    pub(crate) local_turns: std::sync::Arc<crate::local_turn::LocalTurns>,
}

impl Inner {
    /// The retry policy's pause, as the pure decisions take it.
    pub(crate) fn retry_pause(&self) -> (Duration, Duration) {
        (self.retry.base_delay, self.retry.jitter)
    }
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
        use crate::core::rules::usable;
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
    fn ttls_below_a_millisecond_are_refused() {
        assert!(matches!(
            ttl_millis(Duration::from_micros(999)),
            Err(Error::InvalidArgument(_))
        ));
    }
}
