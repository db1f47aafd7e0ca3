//! A shorter reproduction of a failing seed: the same seed with fewer fault
//! kinds, fewer clients and lock names and a shorter fault phase, as long
//! as it still fails. Each subsystem draws from a stream of its own, so a
//! narrower run stays close to the original; any variant that still fails
//! is a valid reproduction, printed as a command line.

use crate::scenario::{Overrides, Scenario};
use crate::world::{Outcome, Setup};

/// A reproduction: the overrides and how the run went with them.
#[derive(Clone, Debug)]
pub struct Repro {
    /// The overrides that narrow the seed.
    pub overrides: Overrides,
    /// Events up to the first violation.
    pub events: u64,
    /// Faults injected up to the first violation.
    pub faults: u64,
    /// The first violation's checker.
    pub kind: &'static str,
}

fn attempt(seed: u64, o: &Overrides, setup: &Setup) -> Option<Outcome> {
    let out = crate::run(seed, o, setup);
    (!out.violations.is_empty()).then_some(out)
}

fn repro(o: &Overrides, out: &Outcome) -> Repro {
    Repro {
        overrides: o.clone(),
        events: out.events,
        faults: out.stats.faults.iter().sum(),
        kind: out.violations.first().map_or("", |v| v.kind),
    }
}

/// Shrinks failing `seed` (run with `start` and `setup`). Returns the
/// original and the shortest reproduction found (the same when nothing
/// narrower fails).
pub fn shrink(seed: u64, start: &Overrides, setup: &Setup) -> Option<(Repro, Repro)> {
    let mut setup = setup.clone();
    setup.stop_at_first = true;
    setup.record = false;
    let first = attempt(seed, start, &setup)?;
    let original = repro(start, &first);
    let mut best = original.clone();
    let sc = Scenario::draw(seed, start);
    let mut cur = start.clone();
    // One fault kind off at a time, kept off while the seed still fails.
    // The seed's own kinds (narrowing the allowed set to them draws the
    // same seed).
    let mut kinds = sc.faults;
    for k in sc.faults.iter() {
        let trial = Overrides {
            faults: Some(kinds.with(k, false)),
            ..cur.clone()
        };
        if let Some(out) = attempt(seed, &trial, &setup) {
            kinds = kinds.with(k, false);
            cur = trial;
            best = repro(&cur, &out);
        }
    }
    // Fewer clients and lock names.
    for clients in 2..sc.clients {
        let trial = Overrides {
            clients: Some(clients),
            ..cur.clone()
        };
        if let Some(out) = attempt(seed, &trial, &setup) {
            cur = trial;
            best = repro(&cur, &out);
            break;
        }
    }
    if sc.keys > 1 {
        let trial = Overrides {
            keys: Some(1),
            ..cur.clone()
        };
        if let Some(out) = attempt(seed, &trial, &setup) {
            cur = trial;
            best = repro(&cur, &out);
        }
    }
    // A shorter fault phase.
    let mut ms = sc.fault_phase / 1_000;
    while ms > 200 {
        let trial = Overrides {
            fault_ms: Some(ms / 2),
            ..cur.clone()
        };
        match attempt(seed, &trial, &setup) {
            Some(out) => {
                cur = trial;
                best = repro(&cur, &out);
                ms /= 2;
            }
            None => break,
        }
    }
    Some((original, best))
}
