//! The restart and promotion guard as a pure state machine: antirez's
//! "delayed restart", built in (DESIGN §2, §7, §12).
//!
//! A node that lost grants it acknowledged (a crash without `appendfsync
//! always`, a replica promoted before its master's last grants reached it)
//! must not hand the same lock to someone else while a lease it granted may
//! still run. So for a window after the module loads, and again after the
//! node is promoted from replica to master, ACQUIRE is refused with `GRACE`;
//! RELEASE, EXTEND, FENCE and INSPECT keep working.
//!
//! The window is as long as the longest lease the node may have granted.
//! `redlock.max-ttl-ms` alone is not enough: it can be raised at run time and
//! come back smaller after a crash. So a grant longer than every lease
//! recorded so far is first recorded durably ([`Guard::needs_record`], the
//! host writes the file, then [`Guard::raise_longest`]), and the window and
//! the clamp of leases loaded from disk cover that length too. A replica
//! learns the longest lease of its master from what it receives
//! ([`Guard::to_learn`]), so its promotion window covers its master's leases.
//!
//! Whether a restart may skip the window is decided once, at load, from the
//! record the previous run left ([`crate::core::run_state`]): today's
//! configuration alone says nothing about what the previous run may have
//! lost. The window of a promotion survives a restart the same way.
//!
//! The host (`host/guard.rs`) keeps one [`Guard`], reads the files and the
//! server's flags, writes what the guard asks for, and passes the time and
//! the settings in; the simulator does the same with its simulated disk.

use crate::core::lock::MonoMillis;
use crate::core::mutant::{Mutant, Mutants};
use crate::core::run_state::{self, RunState};
use crate::core::sync_rule::Promotion;

/// The longest lease any node accepts (one day, the largest
/// `redlock.max-ttl-ms`): the most a recorded or learned lease can say.
pub const LEASE_LIMIT_MS: u64 = 86_400_000;

/// What opened the current window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The module loaded (a start or restart of the server).
    Restart,
    /// The server became a master after being a replica.
    Promotion,
}

impl Reason {
    /// The words of the `GRACE` error.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::Restart => "restarted",
            Reason::Promotion => "was promoted to master",
        }
    }
}

/// The node's settings the guard reads, passed at every call (they change
/// at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `redlock.max-ttl-ms` now.
    pub max_ttl_ms: u64,
    /// `redlock.restart-grace-ms` now (-1: the longest lease).
    pub restart_grace_ms: i64,
    /// The mutants switched on (test builds and the simulator only).
    pub mutants: Mutants,
}

/// An ACQUIRE refused by the guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What opened the window.
    pub reason: Reason,
    /// How long the window has been open.
    pub elapsed_ms: u64,
    /// How long it stays open.
    pub remaining_ms: u64,
}

/// The guard of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    /// Start of the current window on the monotonic clock; 0 before the
    /// load.
    window_start: MonoMillis,
    /// The window length when `restart-grace-ms` is -1, fixed when the
    /// window opens (and raised by leases learned while it is open).
    window_default_len: u64,
    reason: Reason,
    /// The longest lease this node may have granted, as recorded.
    longest_lease: u64,
    /// This start may skip the restart window (decided at load).
    exempt_restart: bool,
    /// This run has been durable since it started.
    durable_run: bool,
    /// The run record says a window is open.
    window_marked_open: bool,
    /// The most the window may last: set by a promotion that only guards
    /// for the rest of its master's hold (DESIGN §13); `u64::MAX` otherwise.
    window_cap: u64,
    /// Bumped whenever a window opens, closes early or lengthens: what a
    /// master announced to its replicas about its window is then out of
    /// date (`host/sync.rs`).
    epoch: u64,
    /// The window open now (or at the previous run's end, as its disk
    /// says) is the promotion window of a node that had learned nothing: it
    /// lasts [`LEASE_LIMIT_MS`], also across a restart.
    untaught_window: bool,
}

impl Default for Guard {
    fn default() -> Self {
        Self::new()
    }
}

impl Guard {
    /// The guard before the module loaded: no window, nothing recorded.
    pub const fn new() -> Self {
        Guard {
            window_start: 0,
            window_default_len: 0,
            reason: Reason::Restart,
            longest_lease: 0,
            exempt_restart: false,
            durable_run: false,
            window_marked_open: false,
            window_cap: u64::MAX,
            epoch: 0,
            untaught_window: false,
        }
    }

    /// At load, the longest lease the node's record file holds (0 when
    /// there is none).
    pub fn load_recorded(&mut self, recorded_ms: u64) {
        self.longest_lease = self.longest_lease.max(recorded_ms.min(LEASE_LIMIT_MS));
    }

    /// At load, after the record (and the startup `max-ttl-ms`, which is
    /// recorded like any lease: a restart that brings a smaller one back
    /// must still cover this run's leases): decides whether this start is
    /// exempt and opens the restart window at `now`. `previous` is the
    /// previous run's record, `durable` whether this run is durable now,
    /// `replica` whether it starts as a replica. Returns this run's record,
    /// which the host writes (fsynced) before the run depends on it.
    pub fn open_after_load(
        &mut self,
        s: Settings,
        previous: Option<RunState>,
        durable: bool,
        replica: bool,
        now: MonoMillis,
    ) -> RunState {
        // A replica's data may lack its master's last grants: if it later
        // starts as a master (its config changed), that start must wait.
        let exempt = run_state::restart_exempt(previous, durable) && !replica;
        self.durable_run = durable;
        self.exempt_restart = exempt;
        self.open_window(Reason::Restart, s, now);
        if self.untaught_window {
            // Restarted inside an untaught promotion's window.
            self.window_default_len = LEASE_LIMIT_MS;
        }
        let window_open = replica || (!exempt && self.window_len(s) > 0);
        self.window_marked_open = window_open;
        RunState {
            durable,
            window_open,
        }
    }

    /// Whether this start was exempt from the restart window.
    pub fn restart_exempt(&self) -> bool {
        self.exempt_restart
    }

    /// Whether this run has been durable since it started.
    pub fn durable_run(&self) -> bool {
        self.durable_run
    }

    /// The server became a master at `now` after being a replica: opens
    /// the window the promotion rule decided ([`crate::core::sync_rule::promotion`]),
    /// and the record says so (returned for the host to write), so that a
    /// restart inside it waits for a full window. A replica that every
    /// condition of the replica-sync check vouches for holds every lock
    /// write a client relied on: it starts without a window (also without
    /// what is left of the window of its own last start as a replica, which
    /// covered nothing it lacks); one whose master was still inside a hold
    /// guards for the rest of it; any other guards for the longest lease
    /// (DESIGN §7). `taught`: the node learned its longest lease from the
    /// master it followed until now ([`crate::core::teacher::Taught`]); its
    /// own record file alone says nothing (it holds its own `max-ttl-ms`).
    pub fn on_promotion(
        &mut self,
        s: Settings,
        promotion: Promotion,
        now: MonoMillis,
        taught: bool,
    ) -> Option<RunState> {
        if s.mutants.on(Mutant::NoPromotionGuard) {
            return None;
        }
        match promotion {
            Promotion::AtOnce => {
                self.window_start = 0;
                self.window_cap = u64::MAX;
                self.epoch += 1;
                return None;
            }
            Promotion::Rest(ms) => {
                self.open_window(Reason::Promotion, s, now);
                self.window_cap = ms;
            }
            Promotion::Guard => self.open_window(Reason::Promotion, s, now),
        }
        // A replica that learned nothing from a master nor from its disk (a
        // new disk, promoted before its first full sync) knows nothing of
        // the leases its master granted: its own `max-ttl-ms` may be shorter
        // than its master's. It guards for the longest lease any node
        // grants (simulator seeds 352,891 and 503,818). An operator who
        // knows better ends it with `restart-grace-ms`.
        if !taught && !s.mutants.on(Mutant::NoLeaseAck) {
            self.window_default_len = LEASE_LIMIT_MS;
            self.untaught_window = true;
        }
        (self.window_len(s) > 0).then(|| {
            self.window_marked_open = true;
            self.record()
        })
    }

    /// The node became a replica: its data may from now on lack grants its
    /// master made, so the record says a window is open until, as a master
    /// again, it has passed a whole guard window.
    pub fn on_demotion(&mut self) -> RunState {
        self.window_marked_open = true;
        self.record()
    }

    /// After a configuration change: a run that stops being durable says
    /// so in its record at once (returned), so the next start is not
    /// exempt. Becoming durable later changes nothing.
    pub fn on_config_change(&mut self, durable_now: bool) -> Option<RunState> {
        (self.durable_run && !durable_now).then(|| {
            self.durable_run = false;
            self.record()
        })
    }

    fn record(&self) -> RunState {
        RunState {
            durable: self.durable_run,
            window_open: self.window_marked_open,
        }
    }

    fn open_window(&mut self, reason: Reason, s: Settings, now: MonoMillis) {
        self.window_default_len = self.longest_lease(s);
        self.window_cap = u64::MAX;
        self.reason = reason;
        self.window_start = now.max(1);
        self.epoch += 1;
    }

    /// Changes whenever the window opens, closes early or lengthens.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the run record says a window is open.
    pub fn window_marked_open(&self) -> bool {
        self.window_marked_open
    }

    /// What opened the current (or last) window.
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// The length of the window in ms, as configured now. By default, as
    /// long as the longest lease known now: one learned after the window
    /// opened (from the data loaded, from a master) lengthens it.
    ///
    /// An explicit `restart-grace-ms` (the operator's length of the longest
    /// lease) replaces that, but not an untaught promotion's day: such a
    /// node does not know the leases of its old master, which may be
    /// longer than anything its own configuration says (the guide's example
    /// pins `restart-grace-ms` to `max-ttl-ms`). 0 still turns the guard
    /// off; `CONFIG SET redlock.promoted-untaught 0` ends the day
    /// ([`Guard::end_untaught`]).
    pub fn window_len(&self, s: Settings) -> u64 {
        let day_stands = self.untaught_window
            && s.restart_grace_ms > 0
            && !s.mutants.on(Mutant::ExplicitGraceEndsDay);
        let len = if s.restart_grace_ms >= 0 && !day_stands {
            s.restart_grace_ms as u64
        } else {
            self.window_default_len
        };
        len.min(self.window_cap)
    }

    /// The operator says no lease of the old master outlasts this node's
    /// own longest lease (`CONFIG SET redlock.promoted-untaught 0`): the
    /// untaught window becomes an ordinary one, as long as the longest
    /// lease this node knows, from when it opened (it may be over at once).
    /// Whether it was untaught (the host then removes the marker and
    /// writes the configuration file).
    pub fn end_untaught(&mut self, s: Settings) -> bool {
        if !self.untaught_window {
            return false;
        }
        self.untaught_window = false;
        self.window_default_len = self.longest_lease(s);
        self.epoch += 1;
        true
    }

    /// `(elapsed, remaining)` ms when `now` is inside the window.
    pub fn state(&self, s: Settings, now: MonoMillis) -> Option<(u64, u64)> {
        if self.window_start == 0 {
            return None;
        }
        let elapsed = now.saturating_sub(self.window_start);
        let window = self.window_len(s);
        (elapsed < window).then(|| (elapsed, window - elapsed))
    }

    /// The guard for an ACQUIRE at `now`. A restart whose previous run was
    /// durable for its whole life lost nothing it acknowledged and is
    /// exempt. A promoted replica never is: replication is asynchronous, so
    /// it may never have received its old master's last grants, whatever its
    /// own fsync policy. `replica` and `durable_now` are the server's state
    /// now. The record to write, when the check saw a window end.
    pub fn check(
        &mut self,
        s: Settings,
        now: MonoMillis,
        replica: bool,
        durable_now: bool,
    ) -> (Result<(), Refusal>, Option<RunState>) {
        let Some((elapsed_ms, remaining_ms)) = self.state(s, now) else {
            let ended = self.window_marked_open && !replica;
            if ended {
                self.window_marked_open = false;
                self.untaught_window = false;
            }
            return (Ok(()), ended.then(|| self.record()));
        };
        let exempt = if s.mutants.on(Mutant::ConfigExemption) {
            durable_now
        } else {
            self.exempt_restart
        };
        if self.reason == Reason::Restart && (exempt || s.mutants.on(Mutant::NoRestartGuard)) {
            return (Ok(()), None);
        }
        let refusal = Refusal {
            reason: self.reason,
            elapsed_ms,
            remaining_ms,
        };
        (Err(refusal), None)
    }

    /// The longest lease this node may have granted: what a lease loaded
    /// from disk is clamped to.
    pub fn longest_lease(&self, s: Settings) -> u64 {
        self.longest_lease.max(s.max_ttl_ms)
    }

    /// The longest lease as recorded (without the configuration).
    pub fn recorded_longest(&self) -> u64 {
        self.longest_lease
    }

    /// Whether a lease of `ttl_ms` must be recorded durably before it is
    /// granted: it is longer than any recorded so far (only after
    /// `max-ttl-ms` was raised above every earlier value, so the hot path is
    /// one comparison).
    pub fn needs_record(&self, ttl_ms: u64) -> bool {
        ttl_ms > self.longest_lease
    }

    /// A longer lease became known at `now` (recorded, or learned from the
    /// data or a master): a window still open covers it too; one already
    /// over does not open again.
    pub fn raise_longest(&mut self, ms: u64, s: Settings, now: MonoMillis) {
        let ms = ms.min(LEASE_LIMIT_MS);
        self.longest_lease = self.longest_lease.max(ms);
        if self.state(s, now).is_some() && self.window_default_len < ms {
            self.window_default_len = ms;
            self.epoch += 1;
        }
    }

    /// At load: the node's disk says the previous run stopped inside the
    /// promotion window of a node that had learned nothing (the host's
    /// marker file): the restart window lasts as long.
    pub fn load_untaught_window(&mut self, marked: bool) {
        self.untaught_window = marked;
    }

    /// Whether the disk must say that the window open is an untaught
    /// promotion's (the host writes or removes its marker file to match).
    pub fn untaught_window(&self) -> bool {
        self.untaught_window
    }

    /// A lease length received from the master (or a file from one): the
    /// length to record and raise to ([`Guard::raise_longest`]), when it is
    /// longer than the longest known.
    pub fn to_learn(&self, ms: u64, s: Settings) -> Option<u64> {
        if s.mutants.on(Mutant::ReplicaOwnLease) || ms <= self.longest_lease {
            return None;
        }
        Some(ms.min(LEASE_LIMIT_MS))
    }
}

/// Whether a load opens its window as an untaught promotion's (a day):
/// when the marker file on the data disk says so, or the configuration
/// file's copy of it (`redlock.promoted-untaught`), which a new disk keeps
/// (simulator seed 3,508,262: a promoted, untaught master that loses its
/// disk inside that window must not wait only its `max-ttl-ms` while a
/// lease of its old master runs). Sound: every lease the old master
/// granted was granted before the promotion and lasts at most
/// [`LEASE_LIMIT_MS`], so a window of that length opened at any later
/// moment covers it.
pub fn untaught_at_load(marker_file: bool, configured: bool, mutants: Mutants) -> bool {
    marker_file || (configured && !mutants.on(Mutant::UntaughtLostWithDisk))
}

/// What the configuration file must say after a load that opened its
/// window as untaught or not (`untaught`, [`untaught_at_load`]), when it
/// says `configured` now: a window opened from the marker file alone is
/// copied to it (`redlock.promoted-untaught 1`), so that a later new disk
/// inside it still waits the day (a node promoted under a release without
/// the copy, or whose write of it failed). `None`: nothing to write.
pub fn untaught_to_configure(untaught: bool, configured: bool, mutants: Mutants) -> Option<bool> {
    (untaught && !configured && !mutants.on(Mutant::LoadedNotConfigured)).then_some(true)
}

/// The longest lease a load starts from: the larger of its data
/// directory's record (`file_ms`, 0 when there is none) and the
/// configuration file's copy of it (`redlock.longest-lease-ms`,
/// `configured_ms`). The record alone is lost with a new disk, and
/// `redlock.max-ttl-ms` alone may say less than a lease that still runs: it
/// may have been lowered since (and the lower value written by the next
/// `CONFIG REWRITE`, Sentinel's included), or be given again on the command
/// line over the file. The copy only grows, like the record.
pub fn recorded_at_load(file_ms: u64, configured_ms: u64, mutants: Mutants) -> u64 {
    if mutants.on(Mutant::LongestLostWithDisk) {
        return file_ms;
    }
    file_ms.max(configured_ms)
}

/// The `redlock.longest-lease-ms` to write so that the configuration file
/// covers the longest lease recorded (`recorded_ms`) when its own
/// `redlock.max-ttl-ms` (`max_ttl_ms`, as a rewrite would write it now) does
/// not, and its copy (`configured_ms`) is shorter; `None`: it covers it.
pub fn longest_to_configure(recorded_ms: u64, max_ttl_ms: u64, configured_ms: u64) -> Option<u64> {
    (recorded_ms > max_ttl_ms && recorded_ms > configured_ms).then_some(recorded_ms)
}

/// A lease length received (from the master, or a file): the
/// `redlock.max-ttl-ms` the node must be configured for from now on, when
/// its own is shorter (finding L).
///
/// Why: a node restarted on a new disk knows nothing but its configuration,
/// and waits its `max-ttl-ms` before it grants. A replica configured for
/// less than its master learns (and the master grants once it acknowledged)
/// a longer lease; promoted, then restarted on a new disk, it would wait
/// too short while that lease runs. So it raises its own setting to the
/// length learned, and the host writes it to the configuration file (`CONFIG
/// REWRITE`) before the stream goes on, so before the replica acknowledges
/// the offset the master waits for. The file is what a new disk keeps.
pub fn max_ttl_to_cover(learned_ms: u64, own_max_ttl_ms: u64, mutants: Mutants) -> Option<u64> {
    let learned_ms = learned_ms.min(LEASE_LIMIT_MS);
    // Under `replica-own-lease` a replica takes in nothing it received.
    let ignored = mutants.on(Mutant::LearnedNotConfigured) || mutants.on(Mutant::ReplicaOwnLease);
    if ignored || learned_ms <= own_max_ttl_ms {
        return None;
    }
    Some(learned_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untaught_window_survives_in_the_configuration_file() {
        assert!(untaught_at_load(true, false, Mutants::NONE));
        assert!(untaught_at_load(false, true, Mutants::NONE));
        assert!(!untaught_at_load(false, false, Mutants::NONE));
    }

    #[test]
    fn a_lease_longer_than_the_own_max_ttl_raises_it_and_only_then() {
        assert_eq!(max_ttl_to_cover(3_000, 400, Mutants::NONE), Some(3_000));
        assert_eq!(max_ttl_to_cover(400, 400, Mutants::NONE), None);
        assert_eq!(max_ttl_to_cover(300, 400, Mutants::NONE), None);
        // Never above the longest lease any node accepts.
        assert_eq!(
            max_ttl_to_cover(u64::MAX, 400, Mutants::NONE),
            Some(LEASE_LIMIT_MS)
        );
        assert_eq!(
            max_ttl_to_cover(u64::MAX, LEASE_LIMIT_MS, Mutants::NONE),
            None
        );
    }

    fn settings(max_ttl_ms: u64) -> Settings {
        Settings {
            max_ttl_ms,
            restart_grace_ms: -1,
            mutants: Mutants::NONE,
        }
    }

    const DURABLE_CLEAN: RunState = RunState {
        durable: true,
        window_open: false,
    };

    #[test]
    fn a_restart_waits_for_the_longest_lease_unless_the_previous_run_was_durable() {
        let s = settings(1_000);
        let mut g = Guard::new();
        g.load_recorded(5_000);
        let rs = g.open_after_load(s, None, true, false, 100);
        assert!(rs.window_open);
        assert!(matches!(g.check(s, 100, false, true).0, Err(r) if r.remaining_ms == 5_000));
        assert_eq!(
            g.check(s, 5_099, false, true).0.map_err(|r| r.remaining_ms),
            Err(1)
        );
        // The window's end is written to the record once.
        assert_eq!(
            g.check(s, 5_100, false, true),
            (
                Ok(()),
                Some(RunState {
                    durable: true,
                    window_open: false
                })
            )
        );
        assert_eq!(g.check(s, 5_101, false, true), (Ok(()), None));
        // A durable previous run without a window: exempt.
        let mut g = Guard::new();
        let rs = g.open_after_load(s, Some(DURABLE_CLEAN), true, false, 100);
        assert!(!rs.window_open);
        assert_eq!(g.check(s, 100, false, true).0, Ok(()));
    }

    #[test]
    fn a_promotion_opens_a_window_that_survives_a_restart() {
        let s = settings(1_000);
        let mut g = Guard::new();
        g.open_after_load(s, Some(DURABLE_CLEAN), true, true, 1);
        let rs = g
            .on_promotion(s, Promotion::Guard, 10, true)
            .expect("a window opens");
        assert!(rs.window_open);
        assert!(g.check(s, 500, false, true).0.is_err());
        // Restarted inside it, durable all along: not exempt.
        let mut restarted = Guard::new();
        restarted.open_after_load(s, Some(rs), true, false, 1);
        assert!(restarted.check(s, 2, false, true).0.is_err());
    }

    #[test]
    fn a_lease_learned_while_the_window_is_open_lengthens_it() {
        let s = settings(1_000);
        let mut g = Guard::new();
        g.open_after_load(s, None, false, false, 1);
        assert_eq!(g.to_learn(3_000, s), Some(3_000));
        g.raise_longest(3_000, s, 500);
        assert!(g.check(s, 2_000, false, false).0.is_err());
        assert_eq!(g.longest_lease(s), 3_000);
        // Once the window is over, a longer lease does not reopen it.
        g.raise_longest(9_000, s, 3_001);
        assert_eq!(g.check(s, 3_002, false, false).0, Ok(()));
        assert_eq!(g.to_learn(9_000, s), None);
    }

    #[test]
    fn a_replica_that_learned_nothing_guards_for_the_longest_lease_any_node_grants() {
        let s = settings(1_000);
        // A new disk (or one that only recorded its own max-ttl-ms),
        // promoted before its first sync.
        let mut g = Guard::new();
        g.load_recorded(1_000);
        g.open_after_load(s, None, false, true, 1);
        g.on_promotion(s, Promotion::Guard, 10, false);
        assert!(
            matches!(g.check(s, 10, false, false).0, Err(r) if r.remaining_ms == LEASE_LIMIT_MS)
        );
        // Restarted inside that window: it goes on as long.
        let mut restarted = Guard::new();
        restarted.load_untaught_window(g.untaught_window());
        restarted.open_after_load(s, Some(g.on_demotion()), false, false, 1);
        assert!(
            matches!(restarted.check(s, 5_000, false, false).0, Err(r) if r.remaining_ms > 80_000_000)
        );
        // Taught by the master it followed (`core/teacher.rs`): its longest
        // lease.
        let mut g = Guard::new();
        g.load_recorded(1_000);
        g.open_after_load(s, None, false, true, 1);
        g.on_promotion(s, Promotion::Guard, 10, true);
        assert!(matches!(g.check(s, 10, false, false).0, Err(r) if r.remaining_ms == 1_000));
    }

    fn untaught_promoted(s: Settings) -> Guard {
        let mut g = Guard::new();
        g.load_recorded(1_000);
        g.open_after_load(s, None, false, true, 1);
        g.on_promotion(s, Promotion::Guard, 10, false);
        g
    }

    #[test]
    fn an_explicit_restart_grace_does_not_shorten_an_untaught_day() {
        // The guide's `max-ttl-ms 1000 restart-grace-ms 1000`.
        let s = Settings {
            restart_grace_ms: 1_000,
            ..settings(1_000)
        };
        let g = untaught_promoted(s);
        assert_eq!(g.window_len(s), LEASE_LIMIT_MS);
        assert!(g.state(s, 60_000).is_some());
        // A restart inside it too.
        let mut restarted = Guard::new();
        restarted.load_untaught_window(true);
        restarted.open_after_load(s, None, false, false, 1);
        assert_eq!(restarted.window_len(s), LEASE_LIMIT_MS);
        // 0 still turns the guard off.
        let off = Settings {
            restart_grace_ms: 0,
            ..s
        };
        assert_eq!(g.window_len(off), 0);
        // Under the mutant the explicit value replaces the day.
        #[cfg(feature = "danger-mutants")]
        {
            let broken = Settings {
                mutants: Mutants::NONE.with(Mutant::ExplicitGraceEndsDay, true),
                ..s
            };
            assert_eq!(g.window_len(broken), 1_000);
        }
    }

    #[test]
    fn ending_the_untaught_day_leaves_the_longest_lease() {
        let s = settings(1_000);
        let mut g = untaught_promoted(s);
        let epoch = g.epoch();
        assert!(g.end_untaught(s));
        assert!(!g.untaught_window());
        assert!(g.epoch() > epoch);
        assert_eq!(g.window_len(s), 1_000);
        // Counted from the promotion at 10: still open at 500, over at 1_010.
        assert!(g.check(s, 500, false, false).0.is_err());
        assert_eq!(g.check(s, 1_010, false, false).0, Ok(()));
        // Nothing to end the second time.
        assert!(!g.end_untaught(s));
    }

    #[test]
    fn the_longest_lease_survives_in_the_configuration_file() {
        assert_eq!(recorded_at_load(0, 3_000, Mutants::NONE), 3_000);
        assert_eq!(recorded_at_load(5_000, 3_000, Mutants::NONE), 5_000);
        assert_eq!(recorded_at_load(0, 0, Mutants::NONE), 0);
        // Written only when max-ttl-ms and the copy both say less.
        assert_eq!(longest_to_configure(3_000, 400, 0), Some(3_000));
        assert_eq!(longest_to_configure(3_000, 3_000, 0), None);
        assert_eq!(longest_to_configure(3_000, 400, 3_000), None);
        assert_eq!(longest_to_configure(3_000, 400, 5_000), None);
        #[cfg(feature = "danger-mutants")]
        {
            let broken = Mutants::NONE.with(Mutant::LongestLostWithDisk, true);
            assert_eq!(recorded_at_load(0, 3_000, broken), 0);
        }
    }

    #[test]
    fn a_window_opened_from_the_marker_alone_is_copied_to_the_configuration() {
        assert_eq!(
            untaught_to_configure(true, false, Mutants::NONE),
            Some(true)
        );
        assert_eq!(untaught_to_configure(true, true, Mutants::NONE), None);
        assert_eq!(untaught_to_configure(false, false, Mutants::NONE), None);
        #[cfg(feature = "danger-mutants")]
        {
            let broken = Mutants::NONE.with(Mutant::LoadedNotConfigured, true);
            assert_eq!(untaught_to_configure(true, false, broken), None);
        }
    }
}
