//! The command handlers: parse, run the lock logic, store, replicate, reply.
//!
//! Each mutating handler reads the key, applies the operation to a copy, and
//! opens the key for writing only when the copy differs. The effect, never
//! the command, goes to replicas and the AOF as `REDLOCK.APPLY` with the
//! absolute wall-clock expiry: replaying `ACQUIRE key owner ttl` later would
//! run against another clock and could grant a lock that was never granted.

use redis_module::ContextFlags;

use crate::args;
use crate::clock::mono_now;
use crate::config::{self, stats};
use crate::datatype::{persist, restore};
use crate::error::CommandError;
use crate::ffi::{self, Call, Reply};
use crate::lock::{Acquired, LockError, LockState};
use crate::store::LockKey;

fn key_of(call: &Call) -> Result<*mut redis_module::raw::RedisModuleString, CommandError> {
    call.key().ok_or(CommandError::WrongArity("redlock"))
}

/// Reads the current state of the lock (default: never used).
fn load(call: &Call) -> Result<LockState, CommandError> {
    let key = LockKey::read(call.raw(), key_of(call)?);
    Ok(key.get()?.cloned().unwrap_or_default())
}

/// Writes `state` and replicates it.
fn store(call: &Call, state: LockState) -> Result<(), CommandError> {
    let mut key = LockKey::write(call.raw(), key_of(call)?);
    key.put(state)?;
    if let Some(stored) = key.get()? {
        let p = persist(stored);
        ffi::replicate_apply(call, p.counter, p.expiry, p.owner);
    }
    Ok(())
}

/// `REDLOCK.ACQUIRE key owner ttl-ms [FLOOR n]`
pub fn acquire(call: &Call) -> Result<Reply, CommandError> {
    let a = args::acquire(&call.args, config::max_ttl())?;
    let now = mono_now();
    config::check_grace(&call.ctx, now)?;
    let mut state = load(call)?;
    let outcome = state
        .acquire(a.owner, a.ttl, a.floor, now)
        .map_err(|LockError::CounterExhausted| CommandError::CounterExhausted)?;
    match outcome {
        Acquired::Granted {
            token,
            took_over_expired,
        } => {
            store(call, state)?;
            stats::bump(&stats::GRANTED);
            if took_over_expired {
                stats::bump(&stats::EXPIRED);
            }
            Ok(Reply::Integer(token))
        }
        Acquired::Renewed { token } => {
            store(call, state)?;
            stats::bump(&stats::RENEWED);
            Ok(Reply::Integer(token))
        }
        Acquired::Busy => {
            stats::bump(&stats::BUSY);
            Ok(Reply::Nil)
        }
    }
}

/// `REDLOCK.RELEASE key owner`
pub fn release(call: &Call) -> Result<Reply, CommandError> {
    let a = args::release(&call.args)?;
    let mut state = load(call)?;
    if state.release(a.owner, mono_now()) {
        store(call, state)?;
        stats::bump(&stats::RELEASED);
        Ok(Reply::Integer(1))
    } else {
        stats::bump(&stats::RELEASE_MISSED);
        Ok(Reply::Integer(0))
    }
}

/// `REDLOCK.EXTEND key owner ttl-ms`
pub fn extend(call: &Call) -> Result<Reply, CommandError> {
    let a = args::extend(&call.args, config::max_ttl())?;
    let mut state = load(call)?;
    if state.extend(a.owner, a.ttl, mono_now()) {
        store(call, state)?;
        stats::bump(&stats::EXTENDED);
        Ok(Reply::Integer(1))
    } else {
        stats::bump(&stats::EXTEND_MISSED);
        Ok(Reply::Integer(0))
    }
}

/// `REDLOCK.FENCE key owner [token]`
pub fn fence(call: &Call) -> Result<Reply, CommandError> {
    let a = args::fence(&call.args)?;
    let mut state = load(call)?;
    let before = state.counter();
    match state.fence(a.owner, a.token, mono_now()) {
        Some(counter) => {
            if counter != before {
                store(call, state)?;
            }
            stats::bump(&stats::FENCED);
            Ok(Reply::Integer(counter))
        }
        None => {
            stats::bump(&stats::FENCE_MISSED);
            Ok(Reply::Nil)
        }
    }
}

/// `REDLOCK.INSPECT key`
pub fn inspect(call: &Call) -> Result<Reply, CommandError> {
    args::inspect(&call.args)?;
    let key = LockKey::read(call.raw(), key_of(call)?);
    Ok(match key.get()? {
        Some(state) => Reply::Inspect(state.inspect(mono_now())),
        None => Reply::Nil,
    })
}

/// `REDLOCK.APPLY key counter expiry [owner]`: sets the exact state that a
/// master computed. Runs only from the replication link or while loading.
pub fn apply(call: &Call) -> Result<Reply, CommandError> {
    let flags = call.ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(CommandError::InternalOnly);
    }
    let a = args::apply(&call.args)?;
    let state = restore(a.counter, a.expiry, a.owner);
    let mut key = LockKey::write(call.raw(), key_of(call)?);
    key.put(state)?;
    // A replica feeds its own AOF with what it applied.
    ffi::replicate_verbatim(call);
    Ok(Reply::Ok)
}

/// `REDLOCK.TESTHOOK WALLCLOCK-OFFSET ms | SKIP-REPLICATION 0|1 | PANIC`
/// (test builds only).
#[cfg(feature = "test-hooks")]
pub fn test_hook(call: &Call) -> Result<Reply, CommandError> {
    match call.args.get(1..).unwrap_or_default() {
        [sub, ms] if sub.eq_ignore_ascii_case(b"WALLCLOCK-OFFSET") => {
            let text = std::str::from_utf8(ms).map_err(|_| CommandError::NotAnInteger("offset"))?;
            let offset: i64 = text
                .parse()
                .map_err(|_| CommandError::NotAnInteger("offset"))?;
            crate::clock::set_wall_offset(offset);
            Ok(Reply::Ok)
        }
        [sub, flag] if sub.eq_ignore_ascii_case(b"SKIP-REPLICATION") => {
            let on = match &flag[..] {
                b"1" => true,
                b"0" => false,
                _ => return Err(CommandError::NotAnInteger("SKIP-REPLICATION flag (0 or 1)")),
            };
            ffi::SKIP_REPLICATION.store(on, std::sync::atomic::Ordering::Relaxed);
            Ok(Reply::Ok)
        }
        [sub] if sub.eq_ignore_ascii_case(b"PANIC") => {
            panic!("test hook: deliberate panic inside a command handler")
        }
        [sub, ..] => Err(CommandError::UnknownHook(
            String::from_utf8_lossy(sub).into_owned(),
        )),
        [] => Err(CommandError::WrongArity("redlock.testhook")),
    }
}
