//! Server events the module follows: configuration changes (the eviction
//! warning), loading (where a loaded lease comes from), replication role
//! changes (the promotion guard), and everything after which a replica may
//! take this node's stream (see [`crate::host::replication`]); and generic
//! keyspace events, for waiters whose key leaves with its slot (see
//! [`crate::host::wait::on_generic_event`]).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::{raw, Context};

use crate::core::node_record::{announce_to_new_replica, LoadKind};
use crate::host::clock::mono_now;
use crate::host::config;
use crate::host::datatype;
use crate::host::guard;
use crate::host::lease_ack;
use crate::host::node;
use crate::host::replication;
use crate::host::sync;
use crate::host::teacher;

extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        let ctx = Context::new(ctx);
        config::check_eviction_policy(&ctx);
        guard::on_config_change(&ctx);
        crate::host::config_file::on_config_change(&ctx, guard::recorded_longest());
        crate::host::config_file::on_grace_change();
        sync::on_config_change(&ctx);
        // A raised max-ttl-ms is recorded and announced at once.
        match guard::record_lease(config::max_ttl().max(0) as u64) {
            Ok(true) => node::announce_soon(&ctx),
            Ok(false) => {}
            Err(e) => ctx.log_warning(&format!("{e}")),
        }
    });
}

extern "C" fn on_loading(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    let _ = std::panic::catch_unwind(|| match subevent {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START => datatype::load_started(LoadKind::Rdb),
        raw::REDISMODULE_SUBEVENT_LOADING_AOF_START => datatype::load_started(LoadKind::Aof),
        raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => {
            datatype::load_started(LoadKind::Replication);
            sync::on_full_sync_start();
        }
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
            let ctx = Context::new(ctx);
            if REPL_LOAD.swap(false, Relaxed) {
                sync::on_full_sync_end(&ctx);
            }
            datatype::load_ended(&ctx);
            crate::host::config_file::on_load_ended(&ctx, guard::recorded_longest());
            // SAFETY: the event's context, on the main thread.
            unsafe { crate::host::restamp::schedule(ctx.ctx) };
            replication::check_server(&ctx);
        }
        _ => datatype::load_failed(),
    });
    REPL_LOAD.store(
        subevent == raw::REDISMODULE_SUBEVENT_LOADING_REPL_START,
        Relaxed,
    );
}

/// The load in progress is a full sync from a master.
static REPL_LOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_role_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    replication::someone_may_listen();
    let _ = std::panic::catch_unwind(|| {
        let ctx = Context::new(ctx);
        if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
            let now = mono_now();
            // Taught by the master it followed until now, and what that
            // master's replicas acknowledged knowing (`core/teacher.rs`).
            let (taught_by_master, learned_acked) = teacher::on_promotion(&ctx);
            // Taught by a master that was still inside a window longer than
            // this node covers (an untaught promotion's day), or whose
            // announcement has not arrived: untaught (`sync_rule`).
            let hold_until = sync::announced_hold_until();
            let taught = crate::core::sync_rule::taught_at_promotion(
                taught_by_master,
                hold_until,
                guard::longest_lease(),
                now,
                crate::host::mutant::current(),
            );
            if taught_by_master && !taught {
                ctx.log_notice(&match hold_until {
                    Some(until) => format!(
                        "promoted: the master followed announced a hold of {} ms more, longer than the longest lease known here ({} ms): guarding as a promotion that learned nothing",
                        until.saturating_sub(now),
                        guard::longest_lease()
                    ),
                    None => "promoted: no announcement of the master followed since this node started, was pointed at it or began a full sync: guarding as a promotion that learned nothing".to_string(),
                });
            }
            let promotion = sync::on_promotion(&ctx, now);
            // A life as master starts from what every replica of the old
            // master acknowledged knowing, held back until its own
            // replicas acknowledge more (`LeaseAck::promoted`).
            // And so is a later run on a new disk: the configuration file
            // keeps it (`LeaseAck::held_by_configuration`).
            lease_ack::promoted(
                &ctx,
                learned_acked,
                guard::longest_lease(),
                sync::take_inherited(),
            );
            guard::on_promotion(&ctx, now, promotion, taught);
        } else {
            // Also a replica pointed at another master (Redis fires this
            // event at every REPLICAOF host port): untaught until a record
            // of the new master arrives. After a failover Sentinel points
            // the other replicas at the new master this way; the new master
            // announces its record to each replica that comes online (below,
            // `on_replica_change`), so the window in which such a replica,
            // promoted, would guard for the longest lease any node grants is
            // short, and guarding long is the safe side.
            teacher::on_replica_of(&ctx);
            guard::on_demotion(&ctx);
            sync::on_demotion(&ctx);
            // What replicas acknowledged belongs to the life as master
            // that ended.
            lease_ack::reset();
        }
    });
}

extern "C" fn on_replica_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    replication::someone_may_listen();
    let _ = std::panic::catch_unwind(|| {
        let ctx = Context::new(ctx);
        // The replica set first: a lock write after this event counts it.
        sync::scan(&ctx);
        // Identities that cannot be told apart (no listening port) are
        // remembered by the lease-ack rule for this life.
        lease_ack::saw_replicas(&sync::unlisted_now());
        if subevent == raw::REDISMODULE_SUBEVENT_REPLICA_CHANGE_ONLINE {
            // Before its first acknowledgement: no WAIT blocked now may
            // count it in place of a known replica.
            sync::on_replica_online(&ctx);
            // Behind the data the replica synced: what it needs to be
            // promoted without the guard.
            sync::announce_soon(&ctx);
            if announce_to_new_replica(crate::host::mutant::current()) {
                node::announce_soon(&ctx);
            }
        }
    });
}

extern "C" fn on_master_link(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    sync::on_master_link(
        subevent == raw::REDISMODULE_SUBEVENT_MASTER_LINK_UP,
        mono_now(),
    );
}

extern "C" fn on_cron(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    sync::on_cron(mono_now());
}

extern "C" fn on_fork(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    // A full sync forks before the replica takes the stream (and so does an
    // AOF rewrite): from the snapshot on, effects must be replicated.
    if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
        replication::forked();
        let _ = std::panic::catch_unwind(|| crate::host::reclaim::on_fork(&Context::new(ctx)));
    }
}

/// Subscribes to the events above.
pub fn subscribe(ctx: &Context) {
    type Callback =
        extern "C" fn(*mut raw::RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);
    let events: [(u64, Callback); 7] = [
        (raw::REDISMODULE_EVENT_CONFIG, on_config_change),
        (raw::REDISMODULE_EVENT_REPLICA_CHANGE, on_replica_change),
        (raw::REDISMODULE_EVENT_LOADING, on_loading),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            on_role_change,
        ),
        (raw::REDISMODULE_EVENT_FORK_CHILD, on_fork),
        (raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE, on_master_link),
        // Without it a link counts as down from when it came up: sooner.
        (raw::REDISMODULE_EVENT_CRON_LOOP, on_cron),
    ];
    for (id, callback) in events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: the API table is filled in before OnLoad runs.
        let available = unsafe { raw::RedisModule_SubscribeToServerEvent }.is_some();
        let subscribed = available
            && raw::subscribe_to_server_event(ctx.ctx, event, Some(callback)) == raw::Status::Ok;
        // Without one of the events that end the skip, it is never allowed.
        if !subscribed
            && id != raw::REDISMODULE_EVENT_CONFIG
            && id != raw::REDISMODULE_EVENT_CRON_LOOP
        {
            replication::someone_may_listen();
        }
    }
    // Generic keyspace events: a waited-on key that MIGRATE moved away; a
    // RESTORE whose lease must be written again.
    // SAFETY: called from OnLoad with a valid context.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToKeyspaceEvents {
            subscribe(
                ctx.ctx,
                raw::REDISMODULE_NOTIFY_GENERIC,
                Some(crate::host::wait::on_generic_event),
            );
            subscribe(ctx.ctx, raw::REDISMODULE_NOTIFY_GENERIC, Some(on_restore));
        }
    }
}

/// A `RESTORE` (its `restore` keyspace event) may have read a lease that
/// must be written again ([`crate::host::restamp`]).
unsafe extern "C" fn on_restore(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    _key: *mut raw::RedisModuleString,
) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: Redis passes the event name as a NUL-terminated string.
        if !event.is_null() && unsafe { CStr::from_ptr(event) } == c"restore" {
            // SAFETY: the event's context, on the main thread.
            unsafe { crate::host::restamp::schedule(ctx) };
        }
    });
    raw::REDISMODULE_OK as c_int
}
