//! The client's pure parts, apart from any I/O: the quorum decisions of a
//! round ([`tally`]), one acquire attempt as a state machine ([`attempt`]),
//! the validity across extensions ([`lease`]), the retries and the wait
//! loop ([`waiting`]), the keep-alive and its lost signal ([`keep_alive`]),
//! the settings and the lease arithmetic they share ([`rules`]), and the
//! error types ([`error`]). Nothing here reads a clock or touches a
//! connection, and nothing here imports the rest of the crate
//! (`scripts/import-cycles.py` checks it).
//!
//! Two drivers call these functions: the tokio code of this crate, and
//! the simulator (`sim/`, which compiles these files as a library of its
//! own). `docs/development.md` lists the entry points and both callers.

pub mod attempt;
pub mod error;
pub mod keep_alive;
pub mod lease;
pub mod many;
pub mod rules;
pub mod tally;
pub mod waiting;
