//! The client's pure parts, apart from any I/O: the quorum decisions of a
//! round ([`tally`]) and the error types with their classification of node
//! replies ([`error`]). Nothing here reads a clock or touches a connection,
//! and nothing here imports the rest of the crate
//! (`scripts/import-cycles.py` checks it).

pub mod error;
pub mod tally;
