//! The Node-API addon under the npm package `redlock-fenced`. It binds
//! [`redlock_client`] (the one quorum implementation) and adds only what
//! Node needs around it: one tokio runtime that does every call's I/O (each
//! call returns a Promise; the event loop never waits on a node), cancel
//! handles for `AbortSignal`, and the mapping of the client's errors onto
//! the package's error classes (`errors.rs`, the one boundary). The
//! TypeScript layer (`ts/`) checks options and gives the public API its
//! shape (`using`, `Symbol.asyncDispose`, error classes).

// napi's registration of the exports is left out of test builds (clippy
// --all-targets), where they would otherwise look unused.
#![cfg_attr(test, allow(dead_code))]

mod client;
mod errors;
mod fenced;
mod guard;
mod lock;
mod metrics;
mod settle;

/// Builds the runtime every call runs on: two worker threads (the work per
/// call is a few round trips), named after the package. Runs when the addon
/// loads; if the runtime cannot be built here, napi builds its default one.
#[napi_derive::module_init]
fn init() {
    metrics::install();
    if let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("redlock-fenced")
        .build()
    {
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}
