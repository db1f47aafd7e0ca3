//! The `INFO redlock` section. It only reads: every subsystem keeps its own
//! counters (a `stats` submodule of its own).

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use crate::host::clock::mono_now;
use crate::host::commands::stats;
use crate::host::config::{self, max_ttl};
use crate::host::guard;
use crate::host::replication;
use crate::host::sync;
use crate::host::wait;

/// [`crate::VERSION`] as a C string, for `redlock_version`.
const VERSION_CSTR: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => c"unknown",
    };

/// `INFO redlock`. Not in a crash report: Redis's crash handler calls this
/// on the crashing thread, which may be the main thread holding the guard's
/// or the sync state's mutex (a crash while a record file is written), and
/// the report would then wait for it forever instead of letting the server
/// die and be restarted.
pub extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int) {
    if for_crash_report != 0 {
        return;
    }
    let _ = std::panic::catch_unwind(|| write_info(ctx));
}

fn write_info(ctx: *mut raw::RedisModuleInfoCtx) {
    let (grace_active, grace_remaining) = match guard::state(mono_now()) {
        Some((_, remaining)) => (1, remaining),
        None => (0, 0),
    };
    let counters: [(&CStr, u64); 24] = [
        (c"acquire_granted", stats::GRANTED.load(Relaxed)),
        (c"acquire_renewed", stats::RENEWED.load(Relaxed)),
        (c"acquire_busy", stats::BUSY.load(Relaxed)),
        (
            c"acquire_refused_grace",
            guard::stats::GRACE_REFUSED.load(Relaxed),
        ),
        (c"release_ok", stats::RELEASED.load(Relaxed)),
        (c"release_missed", stats::RELEASE_MISSED.load(Relaxed)),
        (c"extend_ok", stats::EXTENDED.load(Relaxed)),
        (c"extend_missed", stats::EXTEND_MISSED.load(Relaxed)),
        (c"fence_ok", stats::FENCED.load(Relaxed)),
        (c"fence_missed", stats::FENCE_MISSED.load(Relaxed)),
        (c"expired_leases", stats::EXPIRED.load(Relaxed)),
        (
            c"leases_restamped",
            crate::host::restamp::WRITTEN.load(Relaxed),
        ),
        (c"wait_calls", wait::stats::WAITS.load(Relaxed)),
        (c"wait_free_at_once", wait::stats::WAIT_FREE.load(Relaxed)),
        (
            c"wait_not_blocking",
            wait::stats::WAIT_CANNOT_BLOCK.load(Relaxed),
        ),
        (c"wait_woken", wait::stats::WAIT_WOKEN.load(Relaxed)),
        (c"wait_timeouts", wait::stats::WAIT_TIMEOUTS.load(Relaxed)),
        (c"waiting_clients", wait::waiting_clients()),
        (c"wait_timers", wait::timers()),
        (c"wait_keys", wait::keys()),
        (c"effects_unreplicated", replication::skipped()),
        (
            c"replication_skip_allowed",
            u64::from(replication::skipping_allowed()),
        ),
        (c"grace_active", grace_active),
        (c"grace_remaining_ms", grace_remaining),
    ];
    // SAFETY: called by Redis with a valid info context; names are NUL-terminated.
    unsafe {
        let Some(add_section) = raw::RedisModule_InfoAddSection else {
            return;
        };
        let Some(add_u64) = raw::RedisModule_InfoAddFieldULongLong else {
            return;
        };
        let Some(add_i64) = raw::RedisModule_InfoAddFieldLongLong else {
            return;
        };
        add_section(ctx, c"".as_ptr().cast_mut());
        if let Some(add_cstr) = raw::RedisModule_InfoAddFieldCString {
            add_cstr(ctx, c"version".as_ptr(), VERSION_CSTR.as_ptr().cast_mut());
        }
        for (name, value) in counters {
            add_u64(ctx, name.as_ptr(), value);
        }
        add_u64(
            ctx,
            c"eviction_policy_warning".as_ptr(),
            u64::from(config::eviction_warning()),
        );
        add_i64(ctx, c"max_ttl_ms".as_ptr(), max_ttl());
        add_i64(ctx, c"restart_grace_ms".as_ptr(), config::restart_grace());
        add_u64(ctx, c"grace_window_ms".as_ptr(), guard::window_len());
        add_u64(ctx, c"longest_lease_ms".as_ptr(), guard::longest_lease());
        add_u64(
            ctx,
            c"longest_lease_acked_ms".as_ptr(),
            crate::host::lease_ack::acked_ms(),
        );
        add_u64(
            ctx,
            c"taught_by_master".as_ptr(),
            u64::from(crate::host::teacher::taught_now()),
        );
        add_u64(
            ctx,
            c"master_acked_ms".as_ptr(),
            crate::host::teacher::master_acked_now(),
        );
        add_u64(
            ctx,
            c"learned_lease_above_max_ttl".as_ptr(),
            guard::learned_above_own(),
        );
        add_u64(
            ctx,
            c"max_ttl_unsaved_ms".as_ptr(),
            crate::host::config_file::unsaved_max_ttl(),
        );
        add_u64(
            ctx,
            c"restart_exempt".as_ptr(),
            u64::from(guard::restart_exempt()),
        );
        add_u64(
            ctx,
            c"durable_run".as_ptr(),
            u64::from(guard::durable_run()),
        );
        let sync = sync::figures(mono_now());
        let sync_fields: [(&CStr, u64); 16] = [
            (c"sync_replicas", sync.r),
            (c"sync_replicas_known", sync.known),
            (c"sync_replicas_online", sync.online),
            (c"sync_current", u64::from(sync.current)),
            (c"sync_master_replicas", sync.master_r),
            (c"sync_hold_left_ms", sync.hold_left_ms),
            (c"sync_new_disk_wait_ms", sync.new_disk_wait_ms),
            (
                c"sync_master_new_disk_wait_ms",
                sync.master_new_disk_wait_ms,
            ),
            (c"sync_last_promotion", sync.last_promotion),
            (c"sync_lowering", sync.lowering),
            (
                c"sync_refused_stated",
                sync::stats::REFUSED_STATED.load(Relaxed),
            ),
            (
                c"sync_refused_too_many",
                sync::stats::REFUSED_TOO_MANY.load(Relaxed),
            ),
            (
                c"sync_refused_too_few",
                sync::stats::REFUSED_TOO_FEW.load(Relaxed),
            ),
            (c"sync_announced", sync::stats::ANNOUNCED.load(Relaxed)),
            (c"sync_fresh", sync::stats::FRESH.load(Relaxed)),
            (c"sync_stale", sync::stats::STALE.load(Relaxed)),
        ];
        for (name, value) in sync_fields {
            add_u64(ctx, name.as_ptr(), value);
        }
        if let Some(add_cstr) = raw::RedisModule_InfoAddFieldCString {
            let reason = match guard::reason() {
                guard::Reason::Restart => c"restart",
                guard::Reason::Promotion => c"promotion",
            };
            add_cstr(ctx, c"grace_reason".as_ptr(), reason.as_ptr().cast_mut());
        }
        write_reclaim_info(ctx, add_u64);
        crate::host::fenced::write_info(ctx, add_u64);
    }
}

/// The reclamation fields of `INFO redlock` (appended after the others).
///
/// # Safety
/// `ctx` is the info context Redis passed in; `add_u64` its field adder.
unsafe fn write_reclaim_info(
    ctx: *mut raw::RedisModuleInfoCtx,
    add_u64: unsafe extern "C" fn(
        *mut raw::RedisModuleInfoCtx,
        *const std::os::raw::c_char,
        std::os::raw::c_ulonglong,
    ) -> c_int,
) {
    use crate::host::reclaim::stats as sweep;
    let fields: [(&CStr, u64); 13] = [
        (c"records", crate::core::record::live()),
        (c"reclaim_after_ms", config::reclaim_after()),
        (c"reclaimed", sweep::RECLAIMED.load(Relaxed)),
        (c"reclaimed_counter", crate::host::node::reclaimed_counter()),
        (c"sweep_passes", sweep::PASSES.load(Relaxed)),
        (c"sweep_keys_scanned", sweep::SCANNED.load(Relaxed)),
        (c"sweep_ticks", sweep::TICKS.load(Relaxed)),
        (
            c"sweep_longest_tick_us",
            sweep::LONGEST_TICK_US.load(Relaxed),
        ),
        (c"sweep_last_tick_us", sweep::LAST_TICK_US.load(Relaxed)),
        (c"sweep_time_us", sweep::TIME_US.load(Relaxed)),
        (c"sweep_slow_ticks", sweep::SLOW_TICKS.load(Relaxed)),
        (
            c"sweep_longest_tick_cpu_us",
            sweep::LONGEST_TICK_CPU_US.load(Relaxed),
        ),
        (c"sweep_thread", sweep::ON_THREAD.load(Relaxed)),
    ];
    for (name, value) in fields {
        add_u64(ctx, name.as_ptr(), value);
    }
}
