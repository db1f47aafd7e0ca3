//! redlock: a Redis module with atomic lock commands and per-key fencing
//! tokens. See the README for the protocol.
//!
//! Layout: [`lock`] is the pure state machine (time passed in), [`args`]
//! parses arguments, [`commands`] runs the handlers, [`owner`] hashes owner
//! ids, [`persist`] is the persisted form (RDB, AOF, replication),
//! [`datatype`] holds the `redlockfn` type callbacks, [`config`] the
//! configuration, [`guard`] the restart guard, [`info`] the statistics and
//! `INFO`, [`events`] the server events, [`replication`] when effects must be
//! replicated, [`wait`] the blocking WAIT and [`queue`] its hand-off rule, [`record`] the compact in-memory
//! record, [`reclaim`] the sweep that deletes idle records, [`ffi`] the
//! boundary with Redis.

pub mod args;
pub mod clock;
pub mod commands;
pub mod config;
pub mod datatype;
pub mod error;
pub mod events;
pub mod ffi;
pub mod guard;
pub mod info;
pub mod lock;
pub mod owner;
pub mod persist;
pub mod queue;
pub mod reclaim;
pub mod record;
pub mod replication;
pub mod store;
pub mod wait;

use redis_module::{redis_module, Context, ModuleOptions, RedisString, Status};

use crate::datatype::LOCK_TYPE;

command_entry!(acquire_entry, "REDLOCK.ACQUIRE", commands::acquire);
command_entry!(release_entry, "REDLOCK.RELEASE", commands::release);
command_entry!(extend_entry, "REDLOCK.EXTEND", commands::extend);
command_entry!(fence_entry, "REDLOCK.FENCE", commands::fence);
command_entry!(inspect_entry, "REDLOCK.INSPECT", commands::inspect);
command_entry!(apply_entry, "REDLOCK.APPLY", commands::apply);
command_entry!(wait_entry, "REDLOCK.WAIT", wait::wait);
#[cfg(feature = "test-hooks")]
command_entry!(test_hook_entry, "REDLOCK.TESTHOOK", commands::test_hook);

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    let arg_bytes: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    if let Err(e) = config::register_configs(ctx, &arg_bytes) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    let one_key = (1, 1, 1);
    let table: &[(&std::ffi::CStr, ffi::CommandFn, &std::ffi::CStr)] = &[
        (c"REDLOCK.ACQUIRE", acquire_entry, c"write deny-oom fast"),
        (c"REDLOCK.RELEASE", release_entry, c"write fast"),
        (c"REDLOCK.EXTEND", extend_entry, c"write fast"),
        (c"REDLOCK.FENCE", fence_entry, c"write fast"),
        (c"REDLOCK.INSPECT", inspect_entry, c"readonly fast"),
        (c"REDLOCK.APPLY", apply_entry, c"write fast"),
        (c"REDLOCK.WAIT", wait_entry, c"readonly"),
    ];
    for (name, entry, flags) in table {
        if let Err(e) = ffi::register(ctx, name, *entry, flags, one_key) {
            ctx.log_warning(&e);
            return Status::Err;
        }
    }
    #[cfg(feature = "test-hooks")]
    if let Err(e) = ffi::register(
        ctx,
        c"REDLOCK.TESTHOOK",
        test_hook_entry,
        c"admin",
        (0, 0, 0),
    ) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    #[cfg(feature = "test-hooks")]
    clock::load_wall_offset_from_env();
    guard::on_load(ctx, clock::mono_now());
    redis_module::raw::register_info_function(ctx.ctx, Some(info::info));
    events::subscribe(ctx);
    replication::check_server(ctx);
    config::check_eviction_policy(ctx);
    reclaim::start(ctx);
    ctx.log_notice(&format!(
        "loaded (max-ttl-ms {}, restart grace {} ms, longest lease {} ms)",
        config::max_ttl(),
        guard::window_len(),
        guard::longest_lease()
    ));
    Status::Ok
}

#[cfg(not(test))]
type ModuleAllocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const MODULE_ALLOCATOR: ModuleAllocator = redis_module::alloc::RedisAlloc;
// The Redis allocator aborts outside Redis: unit tests use the system one.
#[cfg(test)]
type ModuleAllocator = std::alloc::System;
#[cfg(test)]
const MODULE_ALLOCATOR: ModuleAllocator = std::alloc::System;

redis_module! {
    name: "redlock",
    version: 1,
    allocator: (ModuleAllocator, MODULE_ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
    commands: [],
}
