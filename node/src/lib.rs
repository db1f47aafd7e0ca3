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

/// mimalloc for the addon's own allocations (the futures and replies of
/// every call, made on one thread and freed on the other): glibc's malloc
/// and free were 10–15 % of the runtime's samples under `perf` (with
/// `malloc_consolidate` for every large future); with mimalloc the runtime
/// spends about 4 us less per acquire + release cycle (27–32 us against
/// 32–37 us, `node/bench/profile.mjs`, three runs of each build).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Builds the runtime every call runs on: one worker thread, named after
/// the package. Runs when the addon loads; if the runtime cannot be built
/// here, napi builds its default one.
///
/// One worker, not one per CPU: a call's work is a few round trips of
/// small commands, which one thread does for thousands of calls a second,
/// and the event loop is itself one thread, so a second worker mostly adds
/// hand-offs. On this 2-CPU machine (`node/bench/profile.mjs`, 16 loops,
/// five local nodes) the runtime's CPU per acquire + release went from
/// 36–42 us with two workers to 29 us with one at load 2 (they no longer
/// wake and steal from each other) and the throughput rose by 15 %; at
/// load 7–8 the runtime and the nodes together still spent 5–14 us less
/// per cycle with one (the turn's commands leave in fewer writes), with
/// the throughput within the noise.
#[napi_derive::module_init]
fn init() {
    metrics::install();
    if let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("redlock-fenced")
        .build()
    {
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}
