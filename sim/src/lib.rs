//! A deterministic simulator of the whole redlock protocol (DESIGN §14).
//!
//! One seed fixes one run: a world of nodes that run the module's own rules
//! (`src/core`, compiled by `sim/rules/module`), clients that run the
//! client's own rules (`client/src/core`, compiled by `sim/rules/client`),
//! a simulated network, clocks, disks and replication, a fault schedule
//! drawn per seed (swarm testing), and online checkers against true time.
//! Nothing here is a second implementation of a rule: what the simulator
//! writes itself is what Redis, the kernel and the redis crate do around the
//! rules. `docs/simulator.md` says what it models and what it does not.
//!
//! `cargo run -p redlock-sim --release -- --seed S` replays one seed (same
//! trace hash every time), `--seeds N` runs a swarm; see `main.rs`.

pub mod check;
pub mod client;
pub mod fault;
pub mod liveness;
pub mod mutant;
pub mod net;
pub mod node;
pub mod resource;
pub mod rng;
pub mod scenario;
pub mod shrink;
pub mod stats;
pub mod swarm;
pub mod time;
pub mod trace;
pub mod world;

use scenario::{Overrides, Scenario};
use world::{Outcome, Setup, World};

/// Plays `seed` (narrowed by `overrides`) with `setup`.
pub fn run(seed: u64, overrides: &Overrides, setup: &Setup) -> Outcome {
    run_scenario(Scenario::draw(seed, overrides), setup)
}

/// Plays one scenario.
pub fn run_scenario(sc: Scenario, setup: &Setup) -> Outcome {
    World::new(sc, setup.clone()).run()
}

/// Plays the canary (`seed`'s world with clocks drifting 8 %): it must fail.
pub fn run_canary(seed: u64) -> Outcome {
    run_scenario(Scenario::canary(seed), &Setup::default())
}
