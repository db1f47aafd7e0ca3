//! The keep-alive of `Redlock::with_lock` and its lost signal, as a state
//! machine: it extends the lock every `ttl / 3` (sooner again after an
//! extension no quorum answered) and reports it lost when an extension finds
//! the lock no longer held or the validity runs out before one succeeds;
//! once the work is done (or the lock lost and the work done), the lock is
//! released.
//!
//! The driver waits for whichever comes first of what [`KeepAlive::waits`]
//! names (the work done, the end of the validity, the next extension or the
//! extension in flight) and reports it with [`KeepAlive::on`]; the answer
//! says what to do. To report the lock lost, the driver first lowers the
//! deadline to now ([`crate::core::lease::lower`]), then signals: a guard
//! never sees validity left on a lock it reports lost.

use std::time::Duration;

use crate::core::rules::Moment;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The work under the lock is done (or its future was dropped).
    Done,
    /// The validity ran out.
    ValidityEnded,
    /// It is time for the next extension.
    Due,
    /// The extension in flight returned: `true` when it succeeded, `false`
    /// when it found the lock no longer held.
    Extended(bool),
    /// The extension in flight returned without a quorum's answer (a
    /// failover inside a Sentinel member, a replica-sync check that failed,
    /// nodes restarting: an error that `is_transient`). The lease the last
    /// extension confirmed still runs, so the next try comes soon
    /// ([`RETRY_PAUSE`]); the validity running out is what ends the lock.
    Unanswered,
}

/// Pause before the next extension after one that no quorum answered
/// (at most the interval).
pub const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What to do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<M> {
    /// Wait for the work to be done, the end of the validity, or `next`.
    Sleep {
        /// When the next extension is due.
        next: M,
    },
    /// Extend the lock to the ttl, waiting also for the work to be done
    /// and the end of the validity.
    Extend,
    /// Report the lock lost (deadline to now, then the signal), then wait
    /// for the work to be done.
    Lost(LostBecause),
    /// Wait for the work to be done (the lock is lost).
    AwaitDone,
    /// Release the lock; the keep-alive is over.
    Release,
}

/// Why the lock was reported lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostBecause {
    /// The validity ran out before an extension succeeded.
    ValidityEnded,
    /// An extension failed.
    ExtensionFailed,
}

/// The keep-alive of one lock.
#[derive(Clone, Copy, Debug)]
pub struct KeepAlive<M> {
    interval: Duration,
    next: M,
    extending: bool,
    lost: bool,
}

impl<M: Moment> KeepAlive<M> {
    /// The keep-alive of a lock of `ttl`, starting at `now`.
    pub fn new(ttl: Duration, now: M) -> Self {
        let interval = (ttl / 3).max(Duration::from_millis(1));
        KeepAlive {
            interval,
            next: now + interval,
            extending: false,
            lost: false,
        }
    }

    /// What to wait for first: the next extension, when one is due later.
    pub fn first(&self) -> Action<M> {
        Action::Sleep { next: self.next }
    }

    /// `event` happened at `now`.
    pub fn on(&mut self, event: Event, now: M) -> Action<M> {
        match event {
            Event::Done => Action::Release,
            _ if self.lost => Action::AwaitDone,
            Event::ValidityEnded => self.lose(LostBecause::ValidityEnded),
            Event::Due if !self.extending => {
                self.next = now + self.interval;
                self.extending = true;
                Action::Extend
            }
            Event::Due => Action::Extend,
            Event::Extended(true) => {
                self.extending = false;
                Action::Sleep { next: self.next }
            }
            Event::Extended(false) => self.lose(LostBecause::ExtensionFailed),
            Event::Unanswered => {
                self.extending = false;
                self.next = now + RETRY_PAUSE.min(self.interval);
                Action::Sleep { next: self.next }
            }
        }
    }

    fn lose(&mut self, because: LostBecause) -> Action<M> {
        self.extending = false;
        self.lost = true;
        Action::Lost(because)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type T = std::time::Instant;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn extends_every_third_of_the_ttl_and_is_lost_on_a_failure() {
        let t0 = T::now();
        let mut k = KeepAlive::new(ms(300), t0);
        assert_eq!(k.first(), Action::Sleep { next: t0 + ms(100) });
        assert_eq!(k.on(Event::Due, t0 + ms(100)), Action::Extend);
        // The next one is due an interval after this one started.
        assert_eq!(
            k.on(Event::Extended(true), t0 + ms(110)),
            Action::Sleep { next: t0 + ms(200) }
        );
        assert_eq!(k.on(Event::Due, t0 + ms(200)), Action::Extend);
        assert_eq!(
            k.on(Event::Extended(false), t0 + ms(210)),
            Action::Lost(LostBecause::ExtensionFailed)
        );
        assert_eq!(k.on(Event::Due, t0 + ms(300)), Action::AwaitDone);
        assert_eq!(k.on(Event::Done, t0 + ms(400)), Action::Release);
    }

    #[test]
    fn an_unanswered_extension_is_tried_again_soon_while_the_validity_lasts() {
        let t0 = T::now();
        let mut k = KeepAlive::new(ms(3_000), t0);
        assert_eq!(k.on(Event::Due, t0 + ms(1_000)), Action::Extend);
        assert_eq!(
            k.on(Event::Unanswered, t0 + ms(1_050)),
            Action::Sleep {
                next: t0 + ms(1_150)
            }
        );
        assert_eq!(k.on(Event::Due, t0 + ms(1_150)), Action::Extend);
        assert_eq!(
            k.on(Event::Extended(true), t0 + ms(1_160)),
            Action::Sleep {
                next: t0 + ms(2_150)
            }
        );
        // Unanswered until the validity runs out: lost then.
        assert_eq!(k.on(Event::Due, t0 + ms(2_150)), Action::Extend);
        assert_eq!(
            k.on(Event::Unanswered, t0 + ms(2_200)),
            Action::Sleep {
                next: t0 + ms(2_300)
            }
        );
        assert_eq!(
            k.on(Event::ValidityEnded, t0 + ms(2_250)),
            Action::Lost(LostBecause::ValidityEnded)
        );
        // A short ttl retries no later than its interval.
        let mut short = KeepAlive::new(ms(30), t0);
        assert_eq!(short.on(Event::Due, t0 + ms(10)), Action::Extend);
        assert_eq!(
            short.on(Event::Unanswered, t0 + ms(11)),
            Action::Sleep { next: t0 + ms(21) }
        );
    }

    #[test]
    fn the_validity_running_out_first_is_a_loss() {
        let t0 = T::now();
        let mut k = KeepAlive::new(ms(3), t0);
        assert_eq!(k.first(), Action::Sleep { next: t0 + ms(1) });
        assert_eq!(k.on(Event::Due, t0 + ms(1)), Action::Extend);
        assert_eq!(
            k.on(Event::ValidityEnded, t0 + ms(2)),
            Action::Lost(LostBecause::ValidityEnded)
        );
        assert_eq!(k.on(Event::Done, t0 + ms(5)), Action::Release);
    }
}
