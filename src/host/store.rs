//! Reading and writing lock keys through the module key API.

use std::os::raw::{c_int, c_void};

use redis_module::raw;

use crate::core::error::CommandError;
use crate::core::lock::LockState;
use crate::core::record;
use crate::host::datatype::LOCK_TYPE;

/// An open key, closed on drop.
pub struct LockKey {
    key: *mut raw::RedisModuleKey,
    /// The stored record once looked up: a read-modify-write checks the
    /// key's type and fetches its value once, not again to store.
    value: std::cell::Cell<Option<Option<*mut c_void>>>,
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
        Self {
            key,
            value: std::cell::Cell::new(None),
        }
    }

    fn value_ptr(&self) -> Result<Option<*mut c_void>, CommandError> {
        if let Some(known) = self.value.get() {
            return Ok(known);
        }
        let found = self.look_up()?;
        self.value.set(Some(found));
        Ok(found)
    }

    fn look_up(&self) -> Result<Option<*mut c_void>, CommandError> {
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
            let value =
                raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(self.key));
            Ok((!value.is_null()).then_some(value))
        }
    }

    /// The lock stored here, `None` for a missing key, an error for a key
    /// of another type.
    pub fn get(&self) -> Result<Option<LockState>, CommandError> {
        // SAFETY: the value is a record of this module's type (checked above)
        // and stays valid while the key is open.
        Ok(self.value_ptr()?.map(|p| unsafe { record::read(p) }))
    }

    /// Stores `state` (key opened with [`LockKey::write`]): in place when the
    /// record keeps its form, otherwise as a new record of the right size.
    pub fn put(&mut self, state: &LockState) -> Result<(), CommandError> {
        let existing = self.value_ptr()?;
        if let Some(old) = existing {
            // SAFETY: exclusive access: the key is open for writing and the
            // command runs on Redis's main thread.
            if unsafe { record::write_in_place(old, state) } {
                return Ok(());
            }
        }
        let value = record::alloc(state);
        let mt = *LOCK_TYPE.raw_type.borrow();
        // SAFETY: the key is open for writing; on success Redis owns value
        // and hands back the old record, which nothing else references.
        unsafe {
            let status = match existing {
                Some(_) => {
                    let mut old: *mut c_void = std::ptr::null_mut();
                    let status = raw::RedisModule_ModuleTypeReplaceValue
                        .map_or(raw::REDISMODULE_ERR as c_int, |replace| {
                            replace(self.key, mt, value, &mut old)
                        });
                    if status == raw::REDISMODULE_OK as c_int {
                        record::free(old);
                    }
                    status
                }
                None => raw::RedisModule_ModuleTypeSetValue
                    .map_or(raw::REDISMODULE_ERR as c_int, |set| {
                        set(self.key, mt, value)
                    }),
            };
            if status != raw::REDISMODULE_OK as c_int {
                // Redis's state of the key is not known any more: look it
                // up afresh next time.
                self.value.set(None);
                record::free(value);
                return Err(CommandError::Internal("storing the lock"));
            }
        }
        self.value.set(Some(Some(value)));
        Ok(())
    }

    /// Deletes the key (opened with [`LockKey::write`]); `true` when it existed.
    pub fn delete(&mut self) -> bool {
        if self.key.is_null() {
            return false;
        }
        self.value.set(Some(None));
        // SAFETY: the key is open for writing.
        unsafe {
            raw::RedisModule_DeleteKey
                .is_some_and(|del| del(self.key) == raw::REDISMODULE_OK as c_int)
        }
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
