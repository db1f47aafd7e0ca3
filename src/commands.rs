//! The command handlers: parse, run the lock logic, store, replicate, reply.
//!
//! A mutating handler opens its key once, runs the state machine on the
//! stored value (a refused operation leaves it untouched), and only when the
//! lock changed signals the modification (the module runs with implicit
//! signalling off, so a refused call does not disturb `WATCH`ers), raises a
//! keyspace event and replicates the effect.
//!
//! The effect, never the command, goes to replicas and the AOF as
//! `REDLOCK.APPLY` with the absolute wall-clock expiry: replaying
//! `ACQUIRE key owner ttl` later would run against another clock and could
//! grant a lock that was never granted.

use std::ffi::CStr;

use redis_module::ContextFlags;

use crate::args;
use crate::clock::{mono_now, wall_now};
use crate::config::{self, stats};
use crate::datatype::{persist_at, restore};
use crate::error::CommandError;
use crate::ffi::{self, Call, Reply};
use crate::lock::{Acquired, LockError, LockState, MonoMillis};
use crate::store::LockKey;

fn key_of(call: &Call) -> Result<*mut redis_module::raw::RedisModuleString, CommandError> {
    call.key().ok_or(CommandError::WrongArity("redlock"))
}

/// Runs `op` at time `now` on the lock at the call's key (a never-used lock when the key
/// is missing). `op` returns its result and whether it changed the lock;
/// a change is stored, signalled, announced as `event` and replicated.
fn update<R>(
    call: &Call,
    now: MonoMillis,
    event: &CStr,
    op: impl FnOnce(&mut LockState, MonoMillis) -> Result<(R, bool), CommandError>,
) -> Result<R, CommandError> {
    let mut key = LockKey::write(call.raw(), key_of(call)?);
    let result = match key.get_mut()? {
        Some(state) => op(state, now)?,
        None => {
            let mut fresh = LockState::default();
            let (result, changed) = op(&mut fresh, now)?;
            if changed {
                key.put(fresh)?;
            }
            (result, changed)
        }
    };
    let (result, changed) = result;
    if changed {
        if let Some(stored) = key.get()? {
            let p = persist_at(stored, now, wall_now());
            ffi::replicate_apply(call, p.counter, p.expiry, p.owner);
        }
        ffi::signal_modified(call, event);
    }
    Ok(result)
}

/// `REDLOCK.ACQUIRE key owner ttl-ms [FLOOR n]`
pub fn acquire(call: &Call) -> Result<Reply, CommandError> {
    let a = args::acquire(&call.args, config::max_ttl())?;
    let now = mono_now();
    config::check_grace(&call.ctx, now)?;
    let outcome = update(call, now, c"redlock.acquire", |state, now| {
        let outcome = state
            .acquire(a.owner, a.ttl, a.floor, now)
            .map_err(|LockError::CounterExhausted| CommandError::CounterExhausted)?;
        Ok((outcome, outcome != Acquired::Busy))
    })?;
    Ok(match outcome {
        Acquired::Granted {
            token,
            took_over_expired,
        } => {
            stats::bump(&stats::GRANTED);
            if took_over_expired {
                stats::bump(&stats::EXPIRED);
            }
            Reply::Integer(token)
        }
        Acquired::Renewed { token } => {
            stats::bump(&stats::RENEWED);
            Reply::Integer(token)
        }
        Acquired::Busy => {
            stats::bump(&stats::BUSY);
            Reply::Nil
        }
    })
}

/// `REDLOCK.RELEASE key owner`
pub fn release(call: &Call) -> Result<Reply, CommandError> {
    let a = args::release(&call.args)?;
    let released = update(call, mono_now(), c"redlock.release", |state, now| {
        let released = state.release(a.owner, now);
        Ok((released, released))
    })?;
    stats::bump(if released {
        &stats::RELEASED
    } else {
        &stats::RELEASE_MISSED
    });
    Ok(Reply::Integer(u64::from(released)))
}

/// `REDLOCK.EXTEND key owner ttl-ms`
pub fn extend(call: &Call) -> Result<Reply, CommandError> {
    let a = args::extend(&call.args, config::max_ttl())?;
    let extended = update(call, mono_now(), c"redlock.extend", |state, now| {
        let extended = state.extend(a.owner, a.ttl, now);
        Ok((extended, extended))
    })?;
    stats::bump(if extended {
        &stats::EXTENDED
    } else {
        &stats::EXTEND_MISSED
    });
    Ok(Reply::Integer(u64::from(extended)))
}

/// `REDLOCK.FENCE key owner [token]`
pub fn fence(call: &Call) -> Result<Reply, CommandError> {
    let a = args::fence(&call.args)?;
    let counter = update(call, mono_now(), c"redlock.fence", |state, now| {
        let before = state.counter();
        let counter = state.fence(a.owner, a.token, now);
        Ok((counter, counter.is_some_and(|c| c != before)))
    })?;
    Ok(match counter {
        Some(counter) => {
            stats::bump(&stats::FENCED);
            Reply::Integer(counter)
        }
        None => {
            stats::bump(&stats::FENCE_MISSED);
            Reply::Nil
        }
    })
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
    ffi::signal_modified(call, c"redlock.apply");
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
