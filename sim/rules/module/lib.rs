//! The module's pure rules, `src/core` of the module crate, compiled as a
//! library for the simulator (`sim/`): the same source files the module
//! builds into `libredlock.so`, not a copy. The module crate compiles them
//! as its own `core` module (a `cdylib` cannot be linked into a binary); the
//! files refer to each other as `crate::core::…`, which resolves here too.

#[path = "../../../src/core/mod.rs"]
pub mod core;
