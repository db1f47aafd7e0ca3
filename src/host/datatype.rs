//! The `redlockfn` module data type: its callbacks. The encoding they read
//! and write is in [`crate::host::persist`].

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::core::clock::WallMillis;
use crate::core::lease_time::{self, Reading};
use crate::core::lock::{LockState, MonoMillis};
use crate::core::node_record::{aux_save2_writes, Load, LoadKind};
use crate::core::record;
use crate::host::clock::{boot_now, mono_now, wall_now};
use crate::host::guard;
use crate::host::mutant::{self, Mutant};
use crate::host::node::{learn_node_record, node_record};
use crate::host::persist::{self, Source, ENCODING_V1, ENCODING_V2, ENCODING_VERSION};

/// The registered data type.
pub static LOCK_TYPE: RedisType = RedisType::new(
    "redlockfn",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        // Redis 7.2+ and Valkey call this one instead, and leave the
        // auxiliary data out of the file when it writes nothing.
        aux_save2: Some(aux_save2),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as i32,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: None,
    },
);

pub use crate::core::node_record::{Loading, UNWRITTEN_NODE_RECORD};

/// The load in progress ([`crate::core::node_record::Load`], the one the
/// simulator runs), told by the loading events ([`crate::host::events`]).
static LOAD: Mutex<Load> = Mutex::new(Load::new());

fn load() -> MutexGuard<'static, Load> {
    LOAD.lock().unwrap_or_else(|p| p.into_inner())
}

/// Leases read since the last pass of [`crate::host::restamp`] that it
/// must write again.
static RESTAMP_PENDING: AtomicU64 = AtomicU64::new(0);

/// Counts one lease read by a rule other than the exact same-boot one
/// ([`crate::host::persist::restamp_needed`]).
pub fn note_restamp() {
    if mutant::on(Mutant::RestampSkipped) {
        return;
    }
    RESTAMP_PENDING.fetch_add(1, Relaxed);
}

/// The leases counted by [`note_restamp`] since the last call, reset.
pub fn take_restamp_pending() -> u64 {
    RESTAMP_PENDING.swap(0, Relaxed)
}

/// Whether leases wait for [`crate::host::restamp`].
pub fn restamp_pending() -> bool {
    RESTAMP_PENDING.load(Relaxed) > 0
}

/// What the server is loading now, as told by the loading events.
pub fn loading() -> Loading {
    load().loading()
}

/// A load of `kind` begins (an RDB file, an AOF, a full sync): no node
/// record read yet.
pub fn load_started(kind: LoadKind) {
    load().started(kind);
}

/// The load ended. A full sync or an RDB file without lock records learns
/// [`UNWRITTEN_NODE_RECORD`] now when it read no node record: its writer
/// may have granted leases of the baseline's length since. An AOF with no
/// lock record in its preamble carries the record of its own node as
/// `REDLOCK.APPLY … node` (see `persist::rewrite_node`) or had nothing to
/// say.
pub fn load_ended(ctx: &redis_module::Context) {
    let from_master = loading() == Loading::Replication;
    let learned = load().ended(mutant::current());
    if let Some(n) = learned {
        learn_node_record(ctx, &n, from_master);
    }
}

/// The load failed: nothing is loading.
pub fn load_failed() {
    load().abandoned();
}

/// How a record read now is to be timed
/// ([`crate::core::lease_time::lease_left`]). A full sync from a master is
/// timed by the remaining time (the master's wall clock means nothing
/// here). A file, and a `RESTORE` payload (written by another process at
/// another time, perhaps on another shard with another clock), by the rule
/// for files: on the boot that wrote it, the later of its end on the boot
/// clock and its wall-clock end; on another boot, the later of its
/// wall-clock end and its remaining time; clamped to the longest lease.
/// Redis passes a `RESTORE` on to replicas and the AOF as it came, and this
/// rule reads it the same way live, on a replica and on a reload, never
/// ending the lease before the real end of the lease it was dumped from: on
/// the boot that dumped it the end does not move (but for the clamp, which
/// counts from each load); on another boot the time left when dumped counts
/// from each load, so a reload can only lengthen it.
pub fn load_source() -> Source {
    let clamp_ms = guard::longest_lease();
    load().source(clamp_ms)
}

/// The time left on a restored lock's lease as the payload states it
/// ([`crate::core::lease_time::stated_left`]): the remaining time, less
/// the time since the dump when it was made on this boot; in version 1, its
/// wall-clock end from now.
fn restored_lease_ms(p: &persist::Persisted) -> u64 {
    lease_time::stated_left(
        &p.written(),
        &Reading {
            wall: wall_now(),
            boot: boot_now(),
        },
    )
}

/// The time left on a restored lock's lease as the load will hold it
/// ([`persist::restore`] with [`load_source`]): at most the longest lease.
/// `readings` are the ones the load then restores the record with, so a
/// master checks exactly the lease it will hold (its clamp does not move
/// in between: recording a lease never raises it past the longest lease).
fn restored_lease_held_ms(
    p: &persist::Persisted,
    readings: (MonoMillis, WallMillis, Option<lease_time::BootStamp>),
) -> u64 {
    let (mono, wall, boot) = readings;
    persist::restore(p, load_source(), mono, wall, boot)
        .live_deadline(mono)
        .map_or(0, |end| end.saturating_sub(mono))
}

/// Whether this node is a replica now, asked through the context of the
/// load in progress (Redis 7.0 needs a context, even for server flags).
///
/// # Safety
/// `rdb` must be the IO handle Redis passed to `rdb_load`.
unsafe fn is_replica(rdb: *mut raw::RedisModuleIO) -> bool {
    let (Some(context_of), Some(flags)) = (
        raw::RedisModule_GetContextFromIO,
        raw::RedisModule_GetContextFlags,
    ) else {
        return false;
    };
    let ctx = context_of(rdb);
    !ctx.is_null() && flags(ctx) as u32 & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
}

/// The lease-ack check ([`crate::host::lease_ack::check`]) of a lock a
/// `RESTORE` brings to this master with `left_ms` of its lease left.
///
/// Why: an `ACQUIRE` of that length waits until every replica of this
/// master's life acknowledged knowing it; a restored lease is a lease this
/// master holds all the same (`MIGRATE` sends `RESTORE`), and a replica
/// promoted after it guards only for what it knows. Refused, the `RESTORE`
/// fails and changes nothing; the node record is announced (as after a
/// refused `ACQUIRE`), so a `RESTORE` again once the replicas acknowledged
/// it passes. (Under the `restore-skips-lease-ack` mutant it is not
/// checked, as before.)
///
/// # Safety
/// `rdb` must be the IO handle Redis passed to `rdb_load`.
unsafe fn restore_lease_ack(
    rdb: *mut raw::RedisModuleIO,
    left_ms: u64,
) -> Result<(), crate::core::error::CommandError> {
    if mutant::on(Mutant::RestoreSkipsLeaseAck) {
        return Ok(());
    }
    let checked = crate::host::lease_ack::check(left_ms);
    if crate::host::lease_ack::take_announce_request() {
        if let Some(context_of) = raw::RedisModule_GetContextFromIO {
            let ctx = context_of(rdb);
            if !ctx.is_null() {
                crate::host::node::announce_soon(&redis_module::Context::new(ctx));
            }
        }
    }
    checked
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if ![ENCODING_VERSION, ENCODING_V2, ENCODING_V1].contains(&encver) {
        return std::ptr::null_mut();
    }
    let loaded = catch_unwind(AssertUnwindSafe(|| -> Option<LockState> {
        let mut p = persist::read_record(rdb, encver)?;
        // A RESTORE on a master is checked and restored with one set of
        // readings; every other load reads the clocks when it restores (a
        // full sync's remaining time counts from then).
        let mut checked_with = None;
        if loading() != Loading::Nothing {
            learn_unwritten_node_record(&redis_module::Context::dummy());
        }
        match loading() {
            // A full sync: a lease the master sent is one it may grant. A
            // file: read as the rule reads it.
            Loading::Replication | Loading::File => {
                let (learn, read) = load().record(p, mutant::current());
                p = read;
                if let Some(ms) = learn {
                    guard::learn_lease(&redis_module::Context::dummy(), ms);
                    crate::host::teacher::lease_applied(&redis_module::Context::dummy());
                }
            }
            Loading::Nothing if p.owner.is_some() => {
                // Checked and recorded for the longest it may run here: the
                // load times a payload by the rule for files (its wall-clock
                // end may be later than the time left it states, when the
                // node that dumped it runs ahead), so the length the payload
                // states alone could pass a lease the load then holds longer
                // (finding K of `tests/adversarial_promotion.rs`).
                let stated = restored_lease_ms(&p);
                let readings = (mono_now(), wall_now(), boot_now());
                let left = if mutant::on(Mutant::RestoreChecksStated) {
                    stated
                } else {
                    stated.max(restored_lease_held_ms(&p, readings))
                };
                if is_replica(rdb) {
                    // From this replica's master, which accepted it: never
                    // refused here (the key would be missing after a
                    // failover); its length is learned and recorded.
                    guard::learn_lease(&redis_module::Context::dummy(), left);
                } else if left > guard::longest_lease() {
                    // A lease longer than any this node may grant is refused,
                    // not cut short (cutting it would free a lock its holder
                    // still uses, e.g. when MIGRATE moves it to a shard whose
                    // max-ttl-ms is smaller).
                    redis_module::logging::log_warning(format!(
                        "RESTORE refused: the lock's lease ({left} ms left) is longer than this node's longest lease ({} ms); raise redlock.max-ttl-ms here first",
                        guard::longest_lease()
                    ));
                    return None;
                } else if let Err(e) = restore_lease_ack(rdb, left) {
                    redis_module::logging::log_warning(format!("RESTORE refused: {e}"));
                    return None;
                } else if let Err(e) = guard::record_lease(left) {
                    // Recorded before it is accepted, so a restart that brings
                    // a smaller max-ttl-ms back still covers it.
                    redis_module::logging::log_warning(format!("RESTORE refused: {e}"));
                    return None;
                } else {
                    checked_with = Some(readings);
                }
            }
            Loading::Nothing => {}
        }
        let source = load_source();
        let (mono, wall, boot) =
            checked_with.unwrap_or_else(|| (mono_now(), wall_now(), boot_now()));
        if persist::restamp_needed(&p, source, wall, boot) {
            match loading() {
                // Written again when the load ends, or right after the
                // RESTORE (its keyspace event); a replica's master writes
                // its own ([`crate::host::restamp`]).
                Loading::File => note_restamp(),
                Loading::Nothing if !is_replica(rdb) => note_restamp(),
                _ => {}
            }
        }
        Some(persist::restore(&p, source, mono, wall, boot))
    }));
    match loaded {
        Ok(Some(state)) => record::alloc(&state),
        _ => std::ptr::null_mut(),
    }
}

/// The node record, before the keys: the replica of a full sync and a
/// restart from the file get the highest reclaimed counter and the longest
/// lease before any record.
unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    let loaded = catch_unwind(AssertUnwindSafe(|| persist::read_node_record(rdb, encver)));
    match loaded {
        Ok(Some(n)) => {
            load().record_read();
            // A full sync's record teaches (`core/teacher.rs`); a file's
            // does not.
            let from_master = loading() == Loading::Replication;
            learn_node_record(&redis_module::Context::dummy(), &n, from_master);
            raw::REDISMODULE_OK as c_int
        }
        _ => raw::REDISMODULE_ERR as c_int,
    }
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        persist::write_node_record(rdb, &node_record());
    }));
}

/// As [`aux_save`], but writes nothing while the node record equals
/// [`UNWRITTEN_NODE_RECORD`], so that an RDB of a node with the default
/// configuration and no lock keys stays readable by a server without the
/// module.
unsafe extern "C" fn aux_save2(rdb: *mut raw::RedisModuleIO, when: c_int) {
    let writer_max_ttl_ms = crate::host::config::max_ttl().max(0) as u64;
    if aux_save2_writes(&node_record(), writer_max_ttl_ms, mutant::current()) {
        aux_save(rdb, when);
    }
}

/// Learns [`UNWRITTEN_NODE_RECORD`] unless the load in progress already
/// read a node record (or learned the baseline).
///
/// When: the node record is written before the keys
/// (`REDISMODULE_AUX_BEFORE_RDB`), so a lock record that loads while none
/// was read means the writer left it out: its record was the baseline
/// (this module on Redis 7.2+ / Valkey), or the writer is unknown (a server
/// without the module, a release without a node record). The baseline is
/// learned before that first record is clamped to the longest lease, so no
/// lease is cut short (DESIGN §12), and also by an AOF's RDB preamble,
/// which this node may load without its longest-lease file (a new disk, a
/// restored backup). A full sync or an RDB file without lock records learns
/// it when the load ends ([`crate::host::events`]): the writer may have
/// granted leases of that length since. Redis 7.0 calls [`aux_save`], which
/// always writes the record.
pub fn learn_unwritten_node_record(ctx: &redis_module::Context) {
    let from_master = loading() == Loading::Replication;
    let unwritten = load().unwritten_to_learn(mutant::current());
    if let Some(n) = unwritten {
        learn_node_record(ctx, &n, from_master);
    }
}

/// Whether this process already wrote the node record into the AOF it is
/// rewriting (rewrites run in a child process of their own).
static NODE_RECORD_REWRITTEN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    if value.is_null() {
        return;
    }
    let state = &record::read(value);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let mono = mono_now();
        let p = persist::persist_at(state, mono, wall_now(), boot_now());
        persist::write_record(rdb, &p);
    }));
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    if value.is_null() {
        return;
    }
    let state = &record::read(value);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // Without an RDB preamble there is no auxiliary data: the node
        // record goes in once, before the first record.
        if !NODE_RECORD_REWRITTEN.swap(true, std::sync::atomic::Ordering::Relaxed) {
            persist::rewrite_node(aof, key, &node_record());
        }
        let mono = mono_now();
        let p = persist::persist_at(state, mono, wall_now(), boot_now());
        persist::rewrite(aof, key, &p);
    }));
}

unsafe extern "C" fn free(value: *mut c_void) {
    record::free(value);
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    if value.is_null() {
        0
    } else {
        record::size(value)
    }
}

/// The digest covers the counter, the FLOOR mark and the live holder's
/// hash. The lease deadline and the idle time are left out: each node
/// re-bases them on its own clock, so they differ by a millisecond or two
/// between a master and its replica.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    if value.is_null() {
        return;
    }
    let state = &record::read(value);
    let (Some(add_ll), Some(add_buf), Some(end)) = (
        raw::RedisModule_DigestAddLongLong,
        raw::RedisModule_DigestAddStringBuffer,
        raw::RedisModule_DigestEndSequence,
    ) else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        add_ll(md, state.counter() as std::os::raw::c_longlong);
        add_ll(md, std::os::raw::c_longlong::from(state.floored()));
        if let Some(owner) = state.holder(mono_now()) {
            add_buf(md, owner.as_ptr().cast_mut().cast(), owner.len());
        }
        end(md);
    }));
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    if value.is_null() {
        return std::ptr::null_mut();
    }
    record::alloc(&record::read(value))
}
