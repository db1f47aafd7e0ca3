//! What one run of the node leaves for the next about the restart guard,
//! independent of Redis: whether it was durable for its whole life, and
//! whether a guard window was still open (DESIGN §2, §12).
//!
//! A restart may skip the guard window only when nothing the previous run
//! acknowledged can be missing: that run had `appendonly yes` with
//! `appendfsync always` from its start to its end, it was not inside a
//! window of its own (a promotion's or a restart's, whose leases it may
//! never have seen), and this run loads its AOF. Today's configuration alone
//! says nothing about the previous run: `appendfsync` switched to `always`
//! across the restart, a node restarted inside its promotion window, or a
//! durable node on a new disk (no record at all) must all wait.
//!
//! The record is a small text file in the server's directory, written and
//! fsynced before the run depends on it: at load, when the run stops being
//! durable (`CONFIG SET`), when a window opens and when a window is seen to
//! have ended.

/// The record one run leaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunState {
    /// Durable (`appendonly yes` + `appendfsync always`) since the run
    /// started.
    pub durable: bool,
    /// A guard window was open when the record was written.
    pub window_open: bool,
}

impl RunState {
    /// The text of the record.
    pub fn render(&self) -> String {
        format!(
            "redlock-run-state 1\ndurable {}\nwindow-open {}\n",
            u8::from(self.durable),
            u8::from(self.window_open)
        )
    }

    /// Reads a record; `None` for anything that is not exactly one (a torn
    /// or foreign file counts as no record: the guard applies).
    pub fn parse(text: &str) -> Option<RunState> {
        let mut lines = text.lines();
        if lines.next()? != "redlock-run-state 1" {
            return None;
        }
        let mut flag = |name: &str| -> Option<bool> {
            let (key, value) = lines.next()?.split_once(' ')?;
            match (key == name, value) {
                (true, "0") => Some(false),
                (true, "1") => Some(true),
                _ => None,
            }
        };
        let durable = flag("durable")?;
        let window_open = flag("window-open")?;
        lines.next().is_none().then_some(RunState {
            durable,
            window_open,
        })
    }
}

/// Whether a start may skip the restart window: the previous run left a
/// record saying it was durable all its life with no window open, and this
/// run is durable at load (so it loads that run's AOF).
pub fn restart_exempt(previous: Option<RunState>, durable_now: bool) -> bool {
    durable_now && previous.is_some_and(|p| p.durable && !p.window_open)
}

/// The name of the run record of the AOF named `appendfilename`, in its
/// AOF directory: `redlock-run-state-APPENDFILENAME`.
///
/// Why per AOF: the record vouches for one AOF, and two nodes may share one
/// AOF directory (`appenddirname`) with their own `appendfilename`; under
/// one name, one node's record (durable, no window) would exempt the other's
/// restart after a crash that lost its last grants. The name of earlier
/// versions (`redlock-run-state`) is not read: it may be another node's.
/// After the upgrade the first restart finds no record and waits for its
/// window once, as a first start does: long, never short. Under the
/// `shared-node-files` mutant the name is the shared one of before.
pub fn file_name(appendfilename: &str, mutants: crate::core::mutant::Mutants) -> String {
    if mutants.on(crate::core::mutant::Mutant::SharedNodeFiles) || appendfilename.is_empty() {
        return LEGACY_FILE.to_string();
    }
    format!("{LEGACY_FILE}-{appendfilename}")
}

/// The run record's name before it was named per AOF (and still when the
/// AOF has no name).
pub const LEGACY_FILE: &str = "redlock-run-state";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_is_named_per_aof() {
        use crate::core::mutant::Mutants;
        assert_eq!(
            file_name("appendonly.aof", Mutants::NONE),
            "redlock-run-state-appendonly.aof"
        );
        assert_ne!(
            file_name("a.aof", Mutants::NONE),
            file_name("b.aof", Mutants::NONE)
        );
        assert_eq!(file_name("", Mutants::NONE), LEGACY_FILE);
    }

    /// The mutant puts the shared name back.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_shares_the_name() {
        use crate::core::mutant::{Mutant, Mutants};
        let on = Mutants::NONE.with(Mutant::SharedNodeFiles, true);
        assert_eq!(file_name("a.aof", on), file_name("b.aof", on));
    }

    #[test]
    fn only_a_whole_durable_previous_run_without_a_window_exempts() {
        let clean = RunState {
            durable: true,
            window_open: false,
        };
        assert!(restart_exempt(Some(clean), true));
        // No record: a first start, a new disk, a record that could not be read.
        assert!(!restart_exempt(None, true));
        // The previous run was not durable for all of its life.
        let lax = RunState {
            durable: false,
            ..clean
        };
        assert!(!restart_exempt(Some(lax), true));
        // It stopped inside a promotion (or restart) window.
        let windowed = RunState {
            window_open: true,
            ..clean
        };
        assert!(!restart_exempt(Some(windowed), true));
        // This run does not load the AOF.
        assert!(!restart_exempt(Some(clean), false));
    }

    #[test]
    fn records_round_trip_and_anything_else_is_no_record() {
        for durable in [false, true] {
            for window_open in [false, true] {
                let r = RunState {
                    durable,
                    window_open,
                };
                assert_eq!(RunState::parse(&r.render()), Some(r));
            }
        }
        let good = RunState {
            durable: true,
            window_open: false,
        }
        .render();
        for bad in [
            "",
            "redlock-run-state 1\n",
            "redlock-run-state 2\ndurable 1\nwindow-open 0\n",
            "redlock-run-state 1\ndurable 2\nwindow-open 0\n",
            "redlock-run-state 1\nwindow-open 0\ndurable 1\n",
            "redlock-run-state 1\ndurable 1\nwindow-open 0\nextra 1\n",
            &good[..good.len() - 3],
        ] {
            assert_eq!(RunState::parse(bad), None, "{bad:?}");
        }
    }
}
