//! The pure rules, independent of Redis: time and every reading is passed
//! in, nothing here calls the server, and nothing here imports
//! [`crate::host`] (`scripts/import-cycles.py` checks it). Each file keeps
//! its unit and property tests.
//!
//! [`lock`] is the lock state machine (the acquire decision, with the
//! hand-off reservation as an input), [`queue`] the waiter queue and its
//! hand-off rule, [`record`] the compact in-memory record, [`owner`] owner
//! hashing, [`args`] argument parsing, [`error`] the command errors,
//! [`fence_rule`] the fenced-write guard rule, [`run_state`] what one run
//! leaves the next about the restart guard, [`sync_rule`] the replica-sync
//! check and the promotion rule of DESIGN §13, [`clock`] the conversion
//! between the monotonic and the wall clock, [`lease_time`] how long a lease
//! read back from a file, a payload or a master still runs, [`guard_rule`]
//! the restart and promotion guard, [`persisted`] the persisted form of a
//! lock (its lease timed by [`lease_time`]), [`node_record`] the node-wide
//! values and what a load learns, [`mutant`] the deliberately broken variants
//! (test builds and the simulator only).

pub mod args;
pub mod clock;
pub mod error;
pub mod fence_rule;
pub mod guard_rule;
pub mod lease_ack_rule;
pub mod lease_time;
pub mod lock;
pub mod mutant;
pub mod node_record;
pub mod owner;
pub mod persisted;
pub mod queue;
pub mod record;
pub mod run_state;
pub mod sync_rule;
pub mod teacher;
