//! The client's pure rules, `client/src/core` of `redlock-client`, compiled
//! as a library for the simulator (`sim/`): the same source files the client
//! builds, not a copy, so the simulator and the tokio code call the same
//! functions (`docs/development.md` lists them). The files refer to each
//! other as `crate::core::…`, which resolves here too. Built without tokio
//! and without the redis crate: the rules need neither.

// Doc links in the shared files name the client's I/O types.
#![allow(rustdoc::broken_intra_doc_links)]

#[path = "../../../client/src/core/mod.rs"]
pub mod core;
