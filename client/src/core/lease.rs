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
//!
//! An extension only continues a validity that still runs: it must start,
//! and a quorum must confirm it, before the deadline it found
//! ([`Unconfirmed::Lapsed`]). Once the validity has ended another owner may
//! have taken the lock on a quorum, and a node can forget that grant (a
//! restart that lost its last writes) while it still has this owner's
//! older lease (read back from its files, kept at least its remaining
//! time after a reboot): EXTENDs that succeed on a quorum then prove
//! nothing, and two holders would overlap. Before the deadline no other
//! owner holds a quorum, so every node that confirms still had this lease
//! in force.

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
    /// The validity the extension continues: a confirmation at or after it
    /// comes too late.
    pub lapses: M,
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

    /// An extension to `ttl_ms` starts at `start`, on a lock valid until
    /// `deadline`; [`Unconfirmed::Lapsed`] (nothing to send) when that has
    /// passed.
    pub fn begin(
        &mut self,
        rules: &Rules,
        ttl_ms: u64,
        start: M,
        deadline: M,
    ) -> Result<Extending<M>, Unconfirmed> {
        if start >= deadline && rules.lapse_check() {
            return Err(Unconfirmed::Lapsed {
                late: start - deadline,
            });
        }
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
        Ok(Extending {
            start,
            bound,
            ttl_ms,
            counted_ms,
            lapses: deadline,
            #[cfg(feature = "danger-test-switches")]
            cap_before,
        })
    }

    /// A quorum confirmed the extension at `now`: the new deadline, or why
    /// the lock must not be used (the validity ended first, or the
    /// extension ate its whole lease).
    pub fn confirmed(
        &mut self,
        rules: &Rules,
        ext: &Extending<M>,
        now: M,
    ) -> Result<M, Unconfirmed> {
        if !rules.validity_check() {
            // Deliberately broken (mutation checks): the full ttl from the
            // end of the extension.
            return Ok(now + Duration::from_millis(ext.ttl_ms));
        }
        if now >= ext.lapses && rules.lapse_check() {
            return Err(Unconfirmed::Lapsed {
                late: now - ext.lapses,
            });
        }
        let elapsed = now - ext.start;
        let usable = rules
            .usable(ext.counted_ms, elapsed)
            .ok_or(Unconfirmed::Elapsed(elapsed))?;
        let end = ext.start + usable;
        #[cfg(feature = "danger-test-switches")]
        if rules.switches.extend_cap {
            self.cap = ext.cap_before;
            return Ok(ext.cap_before.map_or(end, |c| c.min(end)));
        }
        Ok(end)
    }
}

/// Why an extension does not make the lock valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unconfirmed {
    /// The lock's validity ended this long before the extension started or
    /// was confirmed: the lock is lost.
    Lapsed {
        /// How late the extension was.
        late: Duration,
    },
    /// The extension took this long, which ate its whole lease.
    Elapsed(Duration),
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
        let short = rule.begin(&rules, 100, t0, t0 + ms(1_000)).unwrap();
        assert_eq!(short.bound, t0 + ms(98));
        // The short extension failed (or its replies were lost); a longer
        // one later counts with 100 ms: the short EXTEND may land after it.
        let long = rule
            .begin(&rules, 10_000, t0 + ms(50), t0 + ms(1_000))
            .unwrap();
        assert_eq!(long.counted_ms, 100);
        assert_eq!(
            rule.confirmed(&rules, &long, t0 + ms(60)),
            Ok(t0 + ms(50) + ms(98))
        );
        // A confirmed short extension is remembered the same way.
        let mut rule = ExtendRule::new();
        let short = rule.begin(&rules, 100, t0, t0 + ms(1_000)).unwrap();
        assert!(rule.confirmed(&rules, &short, t0 + ms(1)).is_ok());
        let long = rule
            .begin(&rules, 10_000, t0 + ms(10), t0 + ms(1_000))
            .unwrap();
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
        let ext = rule.begin(&rules, 100, t0, t0 + ms(1_000)).unwrap();
        assert_eq!(
            rule.confirmed(&rules, &ext, t0 + ms(99)),
            Err(Unconfirmed::Elapsed(ms(99)))
        );
    }

    #[test]
    fn an_extension_continues_only_a_validity_that_still_runs() {
        let rules = Rules::new(5, 0.0);
        let t0 = T::now();
        let deadline = t0 + ms(50);
        // Started after the validity ended: nothing is sent.
        let mut rule = ExtendRule::new();
        assert_eq!(
            rule.begin(&rules, 1_000, t0 + ms(60), deadline).err(),
            Some(Unconfirmed::Lapsed { late: ms(10) })
        );
        // Started in time, confirmed after the validity ended: a quorum of
        // EXTENDs that succeeded does not revive it, whatever its own ttl
        // leaves.
        let ext = rule.begin(&rules, 1_000, t0 + ms(40), deadline).unwrap();
        assert_eq!(
            rule.confirmed(&rules, &ext, t0 + ms(55)),
            Err(Unconfirmed::Lapsed { late: ms(5) })
        );
        // Confirmed in time: the validity counts from the start.
        let ext = rule.begin(&rules, 1_000, t0 + ms(45), deadline).unwrap();
        assert_eq!(
            rule.confirmed(&rules, &ext, t0 + ms(49)),
            Ok(t0 + ms(45) + ms(998))
        );
    }

    #[test]
    fn lowering_never_raises() {
        let t0 = T::now();
        assert_eq!(lower(t0 + ms(5), t0 + ms(9)), t0 + ms(5));
        assert_eq!(lower(t0 + ms(9), t0 + ms(5)), t0 + ms(5));
    }
}
