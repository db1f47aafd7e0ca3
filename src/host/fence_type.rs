//! The `redlockgd` module data type (fenced-write guards): its callbacks,
//! its persisted encoding and the key access the commands use.
//!
//! A guard record is `highest` (the highest token seen) and the lock name it
//! was created for (see [`crate::core::fence_rule`]). It is never reclaimed: the
//! sweep of [`crate::host::reclaim`] only touches `redlockfn` records.
//!
//! Encoding version 1 (RDB and `DUMP`): `highest (unsigned) · lock (string
//! buffer, 1..=1024 bytes)`. Replicas and the AOF get the exact state as
//! `REDLOCK.APPLY guard g1 highest lock` (the AOF rewrite emits the same).

use std::os::raw::{c_int, c_longlong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::core::fence_rule::{GuardState, MAX_LOCK_LEN};
use crate::core::lock::MAX_TOKEN;

/// The encoding version written by this build.
pub const GUARD_ENCODING_VERSION: i32 = 1;

/// Guard records alive in this process (`INFO redlock` `guards`).
static LIVE: AtomicU64 = AtomicU64::new(0);

/// Guard records alive now.
pub fn live() -> u64 {
    LIVE.load(Relaxed)
}

/// The registered data type.
pub static GUARD_TYPE: RedisType = RedisType::new(
    "redlockgd",
    GUARD_ENCODING_VERSION,
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

/// A heap record Redis owns once stored.
fn alloc(state: GuardState) -> *mut c_void {
    LIVE.fetch_add(1, Relaxed);
    Box::into_raw(Box::new(state)).cast()
}

/// Reads a stored record.
///
/// # Safety
/// `value` must be a record made by [`alloc`] and not freed.
unsafe fn view<'a>(value: *const c_void) -> &'a GuardState {
    &*value.cast::<GuardState>()
}

/// Whether a persisted guard is well formed.
pub fn valid(highest: u64, lock: &[u8]) -> bool {
    (1..=MAX_TOKEN).contains(&highest) && !lock.is_empty() && lock.len() <= MAX_LOCK_LEN
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != GUARD_ENCODING_VERSION {
        return std::ptr::null_mut();
    }
    let loaded = catch_unwind(AssertUnwindSafe(|| -> Option<GuardState> {
        let highest = raw::load_unsigned(rdb).ok()?;
        let lock = raw::load_string_buffer(rdb).ok()?;
        let lock = lock.as_ref().to_vec();
        valid(highest, &lock).then_some(GuardState { highest, lock })
    }));
    match loaded {
        Ok(Some(state)) => alloc(state),
        _ => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    if value.is_null() {
        return;
    }
    let state = view(value);
    raw::save_unsigned(rdb, state.highest);
    raw::save_slice(rdb, &state.lock);
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    if value.is_null() {
        return;
    }
    if let Some(emit) = raw::RedisModule_EmitAOF {
        let state = view(value);
        emit(
            aof,
            c"REDLOCK.APPLY".as_ptr(),
            c"sclb".as_ptr(),
            key,
            c"g1".as_ptr(),
            state.highest as c_longlong,
            state.lock.as_ptr(),
            state.lock.len(),
        );
    }
}

/// Sends the state of guard `key` to replicas and the AOF.
///
/// # Safety
/// `ctx` and `key` must belong to the command invocation in progress.
pub unsafe fn replicate(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    state: &GuardState,
) {
    if let Some(replicate) = raw::RedisModule_Replicate {
        replicate(
            ctx,
            c"REDLOCK.APPLY".as_ptr(),
            c"sclb".as_ptr(),
            key,
            c"g1".as_ptr(),
            state.highest as c_longlong,
            state.lock.as_ptr(),
            state.lock.len(),
        );
    }
}

/// Parses `REDLOCK.APPLY guard g1 highest lock` (`args[0]` is the command
/// name); `None` when it is not that form.
pub fn parse_apply(args: &[&[u8]]) -> Option<Result<GuardState, &'static str>> {
    match args {
        [_, _, v, rest @ ..] if v.eq_ignore_ascii_case(b"g1") => Some(match rest {
            [highest, lock] => {
                let highest = std::str::from_utf8(highest)
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok());
                match highest {
                    Some(h) if valid(h, lock) => Ok(GuardState {
                        highest: h,
                        lock: lock.to_vec(),
                    }),
                    _ => Err("ERR invalid guard state in REDLOCK.APPLY g1"),
                }
            }
            _ => Err("ERR wrong number of arguments for 'redlock.apply' command"),
        }),
        _ => None,
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        drop(Box::from_raw(value.cast::<GuardState>()));
        LIVE.fetch_sub(1, Relaxed);
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    if value.is_null() {
        return 0;
    }
    std::mem::size_of::<GuardState>() + view(value).lock.capacity()
}

/// The digest covers both fields: a replica or a reload must agree on them.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    if value.is_null() {
        return;
    }
    let (Some(add_ll), Some(add_buf), Some(end)) = (
        raw::RedisModule_DigestAddLongLong,
        raw::RedisModule_DigestAddStringBuffer,
        raw::RedisModule_DigestEndSequence,
    ) else {
        return;
    };
    let state = view(value);
    add_ll(md, state.highest as c_longlong);
    add_buf(md, state.lock.as_ptr().cast_mut().cast(), state.lock.len());
    end(md);
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    if value.is_null() {
        return std::ptr::null_mut();
    }
    alloc(view(value).clone())
}

/// What a key holds, for the guard commands.
pub enum Found {
    /// Nothing.
    Missing,
    /// A guard.
    Guard(GuardState),
    /// Another type (a lock record included).
    Other,
}

/// An open key, closed on drop.
pub struct GuardKey {
    key: *mut raw::RedisModuleKey,
}

impl GuardKey {
    /// Opens `name` for reading (`write`: and writing; opening alone signals
    /// nothing, the module runs with implicit signalling off).
    pub(crate) fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        write: bool,
    ) -> Self {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: ctx and name come from the command invocation in progress.
        let key = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(ctx, name, mode as c_int).cast::<raw::RedisModuleKey>()
            })
        };
        Self { key }
    }

    fn value(&self) -> Result<Option<*mut c_void>, ()> {
        if self.key.is_null() {
            return Ok(None);
        }
        // SAFETY: self.key is an open key handle.
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(self.key));
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                return Ok(None);
            }
            if key_type != raw::REDISMODULE_KEYTYPE_MODULE as c_int {
                return Err(());
            }
            let found =
                raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.key));
            if found != *GUARD_TYPE.raw_type.borrow() {
                return Err(());
            }
            let value =
                raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(self.key));
            Ok((!value.is_null()).then_some(value))
        }
    }

    /// Runs `f` on the guard stored here (`None`: missing) without copying
    /// it; `Err` for a key of another type.
    pub(crate) fn peek<R>(&self, f: impl FnOnce(Option<&GuardState>) -> R) -> Result<R, ()> {
        let value = self.value()?;
        // SAFETY: a value of this module's guard type, valid while the key is open.
        Ok(f(value.map(|v| unsafe { view(v) })))
    }

    /// What the key holds now.
    pub fn get(&self) -> Found {
        match self.value() {
            Ok(None) => Found::Missing,
            // SAFETY: a value of this module's guard type, valid while the key is open.
            Ok(Some(v)) => Found::Guard(unsafe { view(v) }.clone()),
            Err(()) => Found::Other,
        }
    }

    /// Stores `state` (key opened for writing). `false` when the key holds
    /// another type or Redis refused.
    pub fn put(&mut self, state: GuardState) -> bool {
        let existing = match self.value() {
            Ok(v) => v,
            Err(()) => return false,
        };
        if let Some(old) = existing {
            // SAFETY: exclusive access on the main thread, key open for writing.
            unsafe { *old.cast::<GuardState>() = state };
            return true;
        }
        let value = alloc(state);
        let mt = *GUARD_TYPE.raw_type.borrow();
        // SAFETY: the key is open for writing and empty; on success Redis owns value.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::REDISMODULE_ERR as c_int, |set| {
                set(self.key, mt, value)
            })
        };
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: value was never handed to Redis.
            unsafe { free(value) };
            return false;
        }
        true
    }
}

impl Drop for GuardKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: the key was opened by this handle and is closed once.
            unsafe {
                if let Some(close) = raw::RedisModule_CloseKey {
                    close(self.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_g1_parses_only_valid_states() {
        let ok: Vec<&[u8]> = vec![b"REDLOCK.APPLY", b"g", b"g1", b"57", b"report"];
        assert_eq!(
            parse_apply(&ok),
            Some(Ok(GuardState {
                highest: 57,
                lock: b"report".to_vec()
            }))
        );
        let v2: Vec<&[u8]> = vec![b"REDLOCK.APPLY", b"k", b"v2", b"5", b"0"];
        assert_eq!(parse_apply(&v2), None);
        for bad in [
            vec![&b"x"[..], b"g", b"g1", b"0", b"L"],
            vec![b"x", b"g", b"g1", b"-1", b"L"],
            vec![b"x", b"g", b"g1", b"9223372036854775808", b"L"],
            vec![b"x", b"g", b"g1", b"5", b""],
            vec![b"x", b"g", b"G1", b"5"],
        ] {
            assert!(matches!(parse_apply(&bad), Some(Err(_))), "{bad:?}");
        }
    }

    #[test]
    fn validity_bounds() {
        assert!(valid(1, b"L"));
        assert!(valid(MAX_TOKEN, &[b'l'; MAX_LOCK_LEN]));
        assert!(!valid(0, b"L"));
        assert!(!valid(MAX_TOKEN + 1, b"L"));
        assert!(!valid(1, &[b'l'; MAX_LOCK_LEN + 1]));
    }
}
