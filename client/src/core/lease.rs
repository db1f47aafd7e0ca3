//! The validity of a held lock across extensions, and the lost signal.
//!
//! An EXTEND can reach a node late: to a node that had not answered, over a
//! connection that broke, or as a second copy (a cluster connection that
//! resends, an alias of the server). It then lands after a later EXTEND,
//! and that node's lease ends at the later one's start plus the *earlier*
//! one's ttl at the soonest. So an extension counts its validity from its
//! own start with the shortest ttl any extension of the lock has sent
//! ([`ExtendRule`]); and since the nodes may apply an extension whatever
//! its call returns, a shorter ttl cuts the validity before it is sent.
//!
//! A release, and a lock reported lost, leave no validity: the deadline
//! drops to the moment of the call, never later ([`lower`]).

use std::time::Duration;

use crate::core::rules::{Moment, Rules};

/// What one lock remembers of its extensions.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExtendRule<M> {
    /// The shortest lease (ms) any extension so far sent.
    shortest_ms: Option<u64>,
    /// Mutant `extend_cap`: the cap of the extensions that failed.
    #[cfg(feature = "danger-test-switches")]
    cap: Option<M>,
    #[cfg(not(feature = "danger-test-switches"))]
    _moment: std::marker::PhantomData<M>,
}

/// An extension in flight, from [`ExtendRule::begin`].
#[derive(Clone, Copy, Debug)]
pub struct Extending<M> {
    /// When the extension started (its EXTENDs were sent).
    pub start: M,
    /// The deadline must drop to this before the EXTENDs go out (the nodes
    /// may apply a shorter lease whatever the call returns).
    pub bound: M,
    /// The ttl sent.
    pub ttl_ms: u64,
    /// The ttl the validity is counted with if the extension succeeds.
    pub counted_ms: u64,
    #[cfg(feature = "danger-test-switches")]
    cap_before: Option<M>,
}

impl<M: Moment> ExtendRule<M> {
    /// A lock that was never extended.
    pub fn new() -> Self {
        ExtendRule {
            shortest_ms: None,
            #[cfg(feature = "danger-test-switches")]
            cap: None,
            #[cfg(not(feature = "danger-test-switches"))]
            _moment: std::marker::PhantomData,
        }
    }

    /// An extension to `ttl_ms` starts at `start`.
    pub fn begin(&mut self, rules: &Rules, ttl_ms: u64, start: M) -> Extending<M> {
        let bound = start + rules.usable(ttl_ms, Duration::ZERO).unwrap_or_default();
        // Any earlier EXTEND may still land after this one: count the
        // validity from this start with the shortest lease sent so far.
        let mut counted_ms = self.shortest_ms.map_or(ttl_ms, |s| s.min(ttl_ms));
        self.shortest_ms = Some(counted_ms);
        #[cfg(feature = "danger-test-switches")]
        let cap_before = self.cap;
        #[cfg(feature = "danger-test-switches")]
        {
            if rules.switches.late_extend || rules.switches.extend_cap {
                counted_ms = ttl_ms;
            }
            if rules.switches.extend_cap {
                // Until it succeeds this extension caps every later one.
                self.cap = Some(cap_before.map_or(bound, |c| c.min(bound)));
            }
        }
        #[cfg(not(feature = "danger-test-switches"))]
        let _ = &mut counted_ms;
        Extending {
            start,
            bound,
            ttl_ms,
            counted_ms,
            #[cfg(feature = "danger-test-switches")]
            cap_before,
        }
    }

    /// A quorum confirmed the extension at `now`: the new deadline, or the
    /// time it took when that ate the whole lease (the lock must not be
    /// used then).
    pub fn confirmed(&mut self, rules: &Rules, ext: &Extending<M>, now: M) -> Result<M, Duration> {
        if !rules.validity_check() {
            // Deliberately broken (mutation checks): the full ttl from the
            // end of the extension.
            return Ok(now + Duration::from_millis(ext.ttl_ms));
        }
        let elapsed = now - ext.start;
        let usable = rules.usable(ext.counted_ms, elapsed).ok_or(elapsed)?;
        let end = ext.start + usable;
        #[cfg(feature = "danger-test-switches")]
        if rules.switches.extend_cap {
            self.cap = ext.cap_before;
            return Ok(ext.cap_before.map_or(end, |c| c.min(end)));
        }
        Ok(end)
    }
}

/// The deadline moved to `bound` when that is earlier, never later: what a
/// release, a lost lock and an extension that starts do to the validity.
pub fn lower<M: Moment>(deadline: M, bound: M) -> M {
    deadline.min(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    type T = std::time::Instant;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_extension_counts_the_shortest_lease_any_extension_sent() {
        let rules = Rules::new(5, 0.0);
        let t0 = T::now();
        let mut rule = ExtendRule::new();
        let short = rule.begin(&rules, 100, t0);
        assert_eq!(short.bound, t0 + ms(98));
        // The short extension failed (or its replies were lost); a longer
        // one later counts with 100 ms: the short EXTEND may land after it.
        let long = rule.begin(&rules, 10_000, t0 + ms(50));
        assert_eq!(long.counted_ms, 100);
        assert_eq!(
            rule.confirmed(&rules, &long, t0 + ms(60)),
            Ok(t0 + ms(50) + ms(98))
        );
        // A confirmed short extension is remembered the same way.
        let mut rule = ExtendRule::new();
        let short = rule.begin(&rules, 100, t0);
        assert!(rule.confirmed(&rules, &short, t0 + ms(1)).is_ok());
        let long = rule.begin(&rules, 10_000, t0 + ms(10));
        assert_eq!(
            rule.confirmed(&rules, &long, t0 + ms(20)),
            Ok(t0 + ms(10) + ms(98))
        );
    }

    #[test]
    fn an_extension_that_ate_its_lease_reports_the_time_it_took() {
        let rules = Rules::new(5, 0.0);
        let t0 = T::now();
        let mut rule = ExtendRule::new();
        let ext = rule.begin(&rules, 100, t0);
        assert_eq!(rule.confirmed(&rules, &ext, t0 + ms(99)), Err(ms(99)));
    }

    #[test]
    fn lowering_never_raises() {
        let t0 = T::now();
        assert_eq!(lower(t0 + ms(5), t0 + ms(9)), t0 + ms(5));
        assert_eq!(lower(t0 + ms(9), t0 + ms(5)), t0 + ms(5));
    }
}
