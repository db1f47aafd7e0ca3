//! Reading and writing lock keys through the module key API.

use std::os::raw::c_int;

use redis_module::raw;

use crate::datatype::LOCK_TYPE;
use crate::error::CommandError;
use crate::lock::LockState;

/// An open key, closed on drop.
pub struct LockKey {
    key: *mut raw::RedisModuleKey,
}

impl LockKey {
    /// Opens a key for reading: no keyspace modification is signalled.
    pub fn read(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) -> Self {
        Self::open(ctx, name, raw::REDISMODULE_READ)
    }

    /// Opens a key for reading and writing. The module disables implicit
    /// modification signals, so opening alone does not touch `WATCH`ers:
    /// the caller signals when it changed the lock.
    pub fn write(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) -> Self {
        Self::open(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    fn open(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString, mode: u32) -> Self {
        // SAFETY: ctx and name come from the command invocation in progress.
        let key = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(ctx, name, mode as c_int).cast::<raw::RedisModuleKey>()
            })
        };
        Self { key }
    }

    fn value_ptr(&self) -> Result<Option<*mut LockState>, CommandError> {
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
                return Err(CommandError::WrongType);
            }
            let found =
                raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.key));
            if found != *LOCK_TYPE.raw_type.borrow() {
                return Err(CommandError::WrongType);
            }
            let value = raw::RedisModule_ModuleTypeGetValue
                .map_or(std::ptr::null_mut(), |f| f(self.key))
                .cast::<LockState>();
            Ok((!value.is_null()).then_some(value))
        }
    }

    /// The lock stored here, `None` for a missing key, an error for a key
    /// of another type.
    pub fn get(&self) -> Result<Option<&LockState>, CommandError> {
        // SAFETY: the value lives as long as the key stays open and unchanged.
        Ok(self.value_ptr()?.map(|p| unsafe { &*p }))
    }

    /// The lock stored here, for in-place changes (key opened with
    /// [`LockKey::write`]).
    pub fn get_mut(&mut self) -> Result<Option<&mut LockState>, CommandError> {
        // SAFETY: the key is open for writing and the command runs on
        // Redis's main thread: nothing else touches the value meanwhile.
        Ok(self.value_ptr()?.map(|p| unsafe { &mut *p }))
    }

    /// Stores `state` (key opened with [`LockKey::write`]).
    pub fn put(&mut self, state: LockState) -> Result<(), CommandError> {
        if let Some(existing) = self.value_ptr()? {
            // SAFETY: exclusive access: the key is open for writing and the
            // command runs on Redis's main thread.
            unsafe { *existing = state };
            return Ok(());
        }
        let value = Box::into_raw(Box::new(state));
        // SAFETY: the key is open for writing; Redis takes ownership of value.
        let status = unsafe {
            match raw::RedisModule_ModuleTypeSetValue {
                Some(set) => set(self.key, *LOCK_TYPE.raw_type.borrow(), value.cast()),
                None => raw::REDISMODULE_ERR as c_int,
            }
        };
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis did not take the value.
            drop(unsafe { Box::from_raw(value) });
            return Err(CommandError::Internal("storing the lock"));
        }
        Ok(())
    }
}

impl Drop for LockKey {
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
