//! redlock: a Redis module with atomic lock commands and per-key fencing
//! tokens. See the README for the protocol.
//!
//! Layout (docs/development.md has the map): [`core`] holds the pure rules
//! (the lock state machine, the hand-off queue, the compact record, owner
//! hashing, argument parsing, the fence rule; time passed in, no Redis
//! calls), [`host`] the Redis glue around them (commands, type callbacks,
//! persistence, replication, blocking, the sweep, INFO, configuration,
//! events, FFI). `core` imports nothing from `host`, and no file imports
//! one that imports it back (`scripts/import-cycles.py`, run by
//! `make lint`). This file registers the commands and the types.

pub mod core;
pub mod host;

use redis_module::{redis_module, Context, ModuleOptions, RedisString, Status};

use crate::host::datatype::LOCK_TYPE;
use crate::host::fence_type::GUARD_TYPE;
use crate::host::{
    clock, commands, config, events, fenced, ffi, guard, info, reclaim, replication, sync, wait,
};

/// The release, the workspace's version (`[workspace.package]` in
/// Cargo.toml): `INFO redlock` shows it as `redlock_version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// [`VERSION`] as Redis encodes module versions (`MODULE LIST` `ver`):
/// major·10000 + minor·100 + patch.
pub const MODULE_VERSION: i32 = module_version(VERSION);

/// Encodes `major.minor.patch` (a `-pre` or `+build` suffix is ignored);
/// evaluated at compile time, so a version that does not fit fails the build.
const fn module_version(version: &str) -> i32 {
    let bytes = version.as_bytes();
    let mut parts = [0i32; 3];
    let mut part = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'.' {
            part += 1;
            assert!(part < 3, "the version has more than three parts");
        } else if c.is_ascii_digit() {
            parts[part] = parts[part] * 10 + (c - b'0') as i32;
        } else {
            break;
        }
        i += 1;
    }
    assert!(
        parts[1] < 100 && parts[2] < 100,
        "minor and patch must stay below 100 for MODULE LIST's encoding"
    );
    parts[0] * 10_000 + parts[1] * 100 + parts[2]
}

command_entry!(acquire_entry, "REDLOCK.ACQUIRE", commands::acquire);
command_entry!(release_entry, "REDLOCK.RELEASE", commands::release);
command_entry!(extend_entry, "REDLOCK.EXTEND", commands::extend);
command_entry!(fence_entry, "REDLOCK.FENCE", commands::fence);
command_entry!(inspect_entry, "REDLOCK.INSPECT", commands::inspect);
command_entry!(apply_entry, "REDLOCK.APPLY", fenced::apply);
command_entry!(guard_entry, "REDLOCK.GUARD", fenced::guard);
command_entry!(guardinfo_entry, "REDLOCK.GUARDINFO", fenced::guard_info);
command_entry!(wait_entry, "REDLOCK.WAIT", wait::wait);
command_entry!(replicas_entry, "REDLOCK.REPLICAS", commands::replicas);
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
        fenced::FENCED_FLAGS,
        one_key,
    )
    .and_then(|()| fenced::set_fenced_key_specs(ctx));
    if let Err(e) = fenced {
        ctx.log_warning(&e);
        return Status::Err;
    }
    // The replica set of the sync check: admin (FORGET changes what the
    // master vouches for), no keys.
    if let Err(e) = ffi::register(
        ctx,
        c"REDLOCK.REPLICAS",
        replicas_entry,
        c"admin",
        (0, 0, 0),
    ) {
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
    #[cfg(feature = "test-hooks")]
    clock::load_boot_id_from_env();
    // The boot id and the time namespace's offset are read once, here
    // (not in the first child process that saves a record).
    if clock::boot_now().is_none() {
        ctx.log_warning(
            "cannot read the boot id or CLOCK_MONOTONIC: leases read back from disk are timed as if written on another boot",
        );
    }
    #[cfg(feature = "test-hooks")]
    host::mutant::load_from_env();
    host::config_file::on_startup_configuration();
    guard::on_load(ctx, clock::mono_now());
    host::config_file::on_load();
    host::teacher::on_load(ctx);
    sync::on_load(ctx, clock::mono_now());
    host::lease_ack::on_load(ctx);
    host::lease_ack::register_sync_filter(ctx);
    redis_module::raw::register_info_function(ctx.ctx, Some(info::info));
    events::subscribe(ctx);
    replication::check_server(ctx);
    config::check_eviction_policy(ctx);
    reclaim::start(ctx);
    ctx.log_notice(&format!(
        "loaded version {VERSION} (max-ttl-ms {}, restart grace {} ms, longest lease {} ms)",
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
    version: MODULE_VERSION,
    allocator: (ModuleAllocator, MODULE_ALLOCATOR),
    data_types: [LOCK_TYPE, GUARD_TYPE],
    init: init,
    commands: [],
}

#[cfg(test)]
mod tests {
    use super::module_version;

    #[test]
    fn module_versions_are_encoded_as_redis_does() {
        assert_eq!(module_version("0.1.0"), 100);
        assert_eq!(module_version("0.5.0"), 500);
        assert_eq!(module_version("1.2.3"), 10_203);
        assert_eq!(module_version("12.34.56-rc.1"), 123_456);
        assert_eq!(module_version("2.0.1+build.7"), 20_001);
    }
}
