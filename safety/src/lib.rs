//! The redlock safety suite: fault injection, recorded histories and a
//! checker that turns them into counts.
//!
//! - [`resource`]: the fenced resource (refuses lower tokens, records every
//!   operation in its own order);
//! - [`history`]: the JSON-lines history format, one system-wide monotonic
//!   clock ([`clock`]);
//! - [`checker`]: duplicate tokens, inversions, stale operations accepted,
//!   lost updates, overlaps (explained or not), validity past the lease end,
//!   per-node counter regressions;
//! - [`workload`]: client tasks in worker processes;
//! - [`election`]: the election workload (candidates, epochs as tokens);
//! - [`runner`]: the matrix of fault types and their injectors, bounded in time
//!   and count, behind the `safety` binary;
//! - [`mutants`]: the deliberately broken variants the checker must catch.

pub mod checker;
pub mod clock;
pub mod election;
pub mod history;
pub mod mutants;
pub mod resource;
pub mod runner;
pub mod workload;
