//! The `redlockfn` module data type: its callbacks and versioned encoding.
//!
//! Encoding version 1, in RDB and in `DUMP` payloads:
//! `counter (unsigned) · expiry (unsigned, wall-clock ms since the epoch,
//! 0 = free) · owner (string buffer, empty = free)`.
//! AOF rewrite emits one `REDLOCK.APPLY key counter expiry [owner]` per key,
//! the same command that carries effects to replicas.

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::clock::{mono_now, to_mono, to_wall, wall_now, WallMillis};
use crate::lock::{LockState, MonoMillis, MAX_OWNER_LEN, MAX_TOKEN};

/// The encoding version written by this build.
pub const ENCODING_VERSION: i32 = 1;

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
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
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

/// The parts of a lock that leave the process: counter, wall-clock expiry
/// (0 when free) and owner (empty when free). An expired lease is written
/// as free.
pub struct Persisted<'a> {
    /// The fencing counter.
    pub counter: u64,
    /// Wall-clock end of the lease, 0 when free.
    pub expiry: u64,
    /// The holder, empty when free.
    pub owner: &'a [u8],
}

/// Converts a live state to its persisted form at the current time.
pub fn persist(state: &LockState) -> Persisted<'_> {
    persist_at(state, mono_now(), wall_now())
}

/// Converts a state to its persisted form at the given clock readings.
pub fn persist_at(state: &LockState, mono: MonoMillis, wall: WallMillis) -> Persisted<'_> {
    match (state.holder(mono), state.live_deadline(mono)) {
        (Some(owner), Some(deadline)) => Persisted {
            counter: state.counter(),
            expiry: to_wall(deadline, mono, wall),
            owner,
        },
        _ => Persisted {
            counter: state.counter(),
            expiry: 0,
            owner: &[],
        },
    }
}

/// Rebuilds a live state from its persisted form at the current time; a
/// lease whose wall-clock end has passed comes back free.
pub fn restore(counter: u64, expiry: u64, owner: &[u8]) -> LockState {
    match to_mono(expiry, mono_now(), wall_now()) {
        Some(deadline) if !owner.is_empty() => LockState::from_parts(counter, owner, deadline),
        _ => LockState::from_parts(counter, &[], 0),
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return std::ptr::null_mut();
    }
    let loaded = catch_unwind(AssertUnwindSafe(|| -> Option<LockState> {
        let counter = raw::load_unsigned(rdb).ok()?;
        let expiry = raw::load_unsigned(rdb).ok()?;
        let owner = raw::load_string_buffer(rdb).ok()?;
        let owner = owner.as_ref();
        if counter > MAX_TOKEN || owner.len() > MAX_OWNER_LEN {
            return None;
        }
        Some(restore(counter, expiry, owner))
    }));
    match loaded {
        Ok(Some(state)) => Box::into_raw(Box::new(state)).cast(),
        _ => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let Some(state) = value.cast::<LockState>().as_ref() else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let p = persist(state);
        raw::save_unsigned(rdb, p.counter);
        raw::save_unsigned(rdb, p.expiry);
        raw::save_slice(rdb, p.owner);
    }));
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let Some(state) = value.cast::<LockState>().as_ref() else {
        return;
    };
    let Some(emit) = raw::RedisModule_EmitAOF else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let p = persist(state);
        let counter = p.counter as std::os::raw::c_longlong;
        let expiry = p.expiry as std::os::raw::c_longlong;
        if p.owner.is_empty() {
            emit(
                aof,
                c"REDLOCK.APPLY".as_ptr(),
                c"sll".as_ptr(),
                key,
                counter,
                expiry,
            );
        } else {
            emit(
                aof,
                c"REDLOCK.APPLY".as_ptr(),
                c"sllb".as_ptr(),
                key,
                counter,
                expiry,
                p.owner.as_ptr(),
                p.owner.len(),
            );
        }
    }));
}

unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        drop(Box::from_raw(value.cast::<LockState>()));
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    match value.cast::<LockState>().as_ref() {
        Some(state) => std::mem::size_of::<LockState>() + state.heap_size(),
        None => 0,
    }
}

/// The digest covers the counter and the live holder. The lease deadline is
/// left out: each node re-bases it on its own clock, so it differs by a
/// millisecond or two between a master and its replica.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let Some(state) = value.cast::<LockState>().as_ref() else {
        return;
    };
    let (Some(add_ll), Some(add_buf), Some(end)) = (
        raw::RedisModule_DigestAddLongLong,
        raw::RedisModule_DigestAddStringBuffer,
        raw::RedisModule_DigestEndSequence,
    ) else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        add_ll(md, state.counter() as std::os::raw::c_longlong);
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
    match value.cast::<LockState>().as_ref() {
        Some(state) => Box::into_raw(Box::new(state.clone())).cast(),
        None => std::ptr::null_mut(),
    }
}
