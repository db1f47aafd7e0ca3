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
//! boundary with Redis. Fenced writes: [`fence_rule`] the guard rule,
//! [`fence_type`] the `redlockgd` guard records, [`fenced`] the commands.

pub mod args;
pub mod clock;
pub mod commands;
pub mod config;
pub mod datatype;
pub mod error;
pub mod events;
pub mod fence_rule;
pub mod fence_type;
pub mod fenced;
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
use crate::fence_type::GUARD_TYPE;

command_entry!(acquire_entry, "REDLOCK.ACQUIRE", commands::acquire);
command_entry!(release_entry, "REDLOCK.RELEASE", commands::release);
command_entry!(extend_entry, "REDLOCK.EXTEND", commands::extend);
command_entry!(fence_entry, "REDLOCK.FENCE", commands::fence);
command_entry!(inspect_entry, "REDLOCK.INSPECT", commands::inspect);
command_entry!(apply_entry, "REDLOCK.APPLY", fenced::apply);
command_entry!(guard_entry, "REDLOCK.GUARD", fenced::guard);
command_entry!(guardinfo_entry, "REDLOCK.GUARDINFO", fenced::guard_info);
command_entry!(wait_entry, "REDLOCK.WAIT", wait::wait);
#[cfg(feature = "test-hooks")]
command_entry!(test_hook_entry, "REDLOCK.TESTHOOK", fenced::test_hook);

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    let arg_bytes: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    if let Err(e) = config::register_configs(ctx, &arg_bytes) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    // Every command has one key, the first argument: cluster routing
    // (MOVED/ASK), COMMAND GETKEYS and ACL key patterns rely on it.
    let one_key = (1, 1, 1);
    use redis_module::raw::{
        REDISMODULE_CMD_KEY_ACCESS as ACCESS, REDISMODULE_CMD_KEY_OW as OW,
        REDISMODULE_CMD_KEY_RO as RO, REDISMODULE_CMD_KEY_RW as RW,
        REDISMODULE_CMD_KEY_UPDATE as UPDATE,
    };
    type Row = (
        &'static std::ffi::CStr,
        ffi::CommandFn,
        &'static std::ffi::CStr,
        u32,
    );
    let table: &[Row] = &[
        (
            c"REDLOCK.ACQUIRE",
            acquire_entry,
            c"write deny-oom fast",
            RW | ACCESS | UPDATE,
        ),
        (
            c"REDLOCK.RELEASE",
            release_entry,
            c"write fast",
            RW | UPDATE,
        ),
        (c"REDLOCK.EXTEND", extend_entry, c"write fast", RW | UPDATE),
        (
            c"REDLOCK.FENCE",
            fence_entry,
            c"write fast",
            RW | ACCESS | UPDATE,
        ),
        (
            c"REDLOCK.INSPECT",
            inspect_entry,
            c"readonly fast",
            RO | ACCESS,
        ),
        (c"REDLOCK.APPLY", apply_entry, c"write fast", OW | UPDATE),
        (c"REDLOCK.WAIT", wait_entry, c"readonly", RO),
        (
            c"REDLOCK.GUARD",
            guard_entry,
            c"write deny-oom fast",
            fenced::GUARD_KEY_FLAGS,
        ),
        (
            c"REDLOCK.GUARDINFO",
            guardinfo_entry,
            c"readonly fast",
            RO | ACCESS,
        ),
    ];
    for (name, entry, flags, key_flags) in table {
        let registered = ffi::register(ctx, name, *entry, flags, one_key)
            .and_then(|()| ffi::set_key_spec(ctx, name, *key_flags));
        if let Err(e) = registered {
            ctx.log_warning(&e);
            return Status::Err;
        }
    }
    // FENCED: the guard and the inner command's keys, reported by the
    // module (getkeys-api) with their own flags.
    let fenced = ffi::register(
        ctx,
        c"REDLOCK.FENCED",
        fenced::fenced_entry,
        fenced::fenced_flags(),
        one_key,
    )
    .and_then(|()| fenced::set_fenced_key_specs(ctx));
    if let Err(e) = fenced {
        ctx.log_warning(&e);
        return Status::Err;
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
    data_types: [LOCK_TYPE, GUARD_TYPE],
    init: init,
    commands: [],
}
