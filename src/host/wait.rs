//! `REDLOCK.WAIT key timeout-ms`: wait until a lock is free on this node.
//!
//! A waiter is a client blocked on the lock's key (`RM_BlockClientOnKeys`).
//! Redis answers the clients blocked on one key in the order they blocked;
//! each time the key is signalled ready, [`on_ready`] re-reads the lock and
//! answers 1 when it is free, or leaves the client blocked. The key is
//! signalled ready
//! - by RELEASE (and any other change that frees the lock, including a
//!   replicated one), through [`state_changed`];
//! - at the end of the lease, by a module timer that exists only while the
//!   key has waiters (one timer per key, at the lease deadline, moved by
//!   EXTEND and same-owner renewals, stopped when the last waiter leaves);
//! - at the end of a reservation (see below), by the same timer.
//!
//! With `QUEUE owner ticket`, a waiter that finds the lock busy also joins
//! the lock's queue on this node ([`crate::core::queue`]): a lock freed under
//! queued waiters is then reserved for the first waiter in ticket order for
//! `redlock.handoff-ms`, only that waiter is answered, and ACQUIREs by
//! other owners are answered as busy meanwhile ([`reservation`]). The
//! reservation ends when its owner's ACQUIRE is granted
//! ([`reservation_used`]; a refused one keeps it), or, on a replica, when
//! the master's grant arrives ([`reservation_over`]). A WAIT that
//! finds the lock free with nobody queued is answered at once and stores
//! nothing. Waiters without `QUEUE` are answered when the lock is free and
//! not reserved (when an ACQUIRE would succeed).
//!
//! A key's entry in the waiter map lives while the key has blocked waiters
//! or a live reservation: the key's timer (see above) also fires at the end
//! of a reservation, and drops the entry when nobody waits any more. The
//! map's size is `redlock_wait_keys` in `INFO redlock`.
//!
//! WAIT never grants, creates or changes the lock and is not replicated; the
//! queue and its reservation live in this node's memory only.
//! Where a client cannot block (MULTI, scripts, functions) it answers at once.
//! A waiter that disconnects or times out is forgotten in
//! [`free_waiter`], which Redis calls exactly once per blocked client.
//!
//! A key deleted under its waiters (`DEL`, `FLUSHALL`, the reclamation
//! sweep) wakes them on servers that offer `RM_BlockClientOnKeysWithFlags`
//! (Redis 7.2+, Valkey). Redis 7.0 never runs the reply callback for a
//! missing key, so there the key's timer (at the lease end, or at the end
//! of the reservation they wait behind) answers them itself
//! ([`serve_missing`]).
//!
//! In a cluster, a waiter whose key `MIGRATE` hands to another shard is
//! answered `-TRYAGAIN` at once ([`on_generic_event`]); its retry gets
//! `-ASK` or `-MOVED` from Redis. A waiter still blocked on a node that no
//! longer serves its slot is answered `-MOVED` by Redis itself (it checks
//! the slots of clients blocked on keys, module clients included, about
//! every 100 ms), and a waiter on a master that becomes a replica gets
//! `-UNBLOCKED` at once. A key that disappears under its waiters in cluster
//! mode is not taken for a free lock (see [`in_cluster`]).

use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use redis_module::{raw, ContextFlags};

use crate::core::args;
use crate::core::error::CommandError;
use crate::core::lock::{LockState, MonoMillis, OwnerHash, Reservation};
use crate::core::owner::hash_owner;
use crate::core::queue::{self, Place, Queue, Ready};
use crate::host::clock::{mono_now, wall_now_us};
use crate::host::config;
use crate::host::ffi::{Call, Reply};
use crate::host::store::LockKey;

/// Counters of WAIT, shown by `INFO redlock` ([`crate::host::info`] reads them).
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// WAIT calls.
    pub static WAITS: AtomicU64 = AtomicU64::new(0);
    /// WAITs answered 1 at once (the lock was free).
    pub static WAIT_FREE: AtomicU64 = AtomicU64::new(0);
    /// WAITs answered at once where blocking is not allowed (MULTI, scripts).
    pub static WAIT_CANNOT_BLOCK: AtomicU64 = AtomicU64::new(0);
    /// Blocked WAITs answered 1 when the lock became free.
    pub static WAIT_WOKEN: AtomicU64 = AtomicU64::new(0);
    /// Blocked WAITs answered 0 at their timeout.
    pub static WAIT_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}

/// Position of the owner in `REDLOCK.WAIT key timeout QUEUE owner ticket`.
const QUEUE_OWNER_ARG: usize = 4;

/// A waited-on key: its database and name.
type WaitedKey = (c_int, Vec<u8>);

/// The waiters of one key and the timer that wakes them at lease end (or
/// at the end of a reservation).
#[derive(Default)]
struct Waiters {
    count: u64,
    /// The blocked clients, to answer them when the key leaves with its
    /// slot ([`on_generic_event`]).
    handles: Vec<Handle>,
    /// Timer id and the monotonic deadline it fires at.
    timer: Option<(raw::RedisModuleTimerID, MonoMillis)>,
    /// The queued waiters and the reservation.
    queue: Queue,
}

/// What Redis keeps for one blocked waiter.
struct Tag {
    key: WaitedKey,
    /// The waiter's place and owner, when it waits in the queue.
    queued: Option<(Place, OwnerHash)>,
    /// Set when the key moved to another shard: the timeout callback then
    /// answers `-TRYAGAIN` instead of 0.
    moved: AtomicBool,
    /// Set when the module answers the waiter itself because its key is
    /// missing ([`serve_missing`]): the timeout callback then answers 1.
    free: AtomicBool,
}

/// A blocked waiter: Redis's handle and the waiter's tag (alive until
/// [`free_waiter`], which drops the handle first).
#[derive(Clone, Copy)]
struct Handle {
    client: *mut raw::RedisModuleBlockedClient,
    tag: *const Tag,
}

// SAFETY: handles are created, used and dropped on Redis's main thread
// only; the mutex around the map only makes the static shareable.
unsafe impl Send for Handle {}

static NEXT_PLACE: AtomicU64 = AtomicU64::new(1);

/// Keys with waiters. Touched only on Redis's main thread; the mutex only
/// makes the static safe to share.
static WAITING: Mutex<BTreeMap<WaitedKey, Waiters>> = Mutex::new(BTreeMap::new());
static WAITING_CLIENTS: AtomicU64 = AtomicU64::new(0);
/// Entries in [`WAITING`] (keys with waiters or a live reservation), kept
/// beside the map so that ACQUIRE's fast path reads one atomic.
static WAIT_KEYS: AtomicU64 = AtomicU64::new(0);
static TIMERS: AtomicU64 = AtomicU64::new(0);

fn waiting() -> std::sync::MutexGuard<'static, BTreeMap<WaitedKey, Waiters>> {
    WAITING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Clients blocked in WAIT now.
pub fn waiting_clients() -> u64 {
    WAITING_CLIENTS.load(Relaxed)
}

/// Keys in the waiter map now: keys with blocked waiters or a live
/// reservation.
pub fn keys() -> u64 {
    WAIT_KEYS.load(Relaxed)
}

/// Timers armed now (at most one per key in the waiter map: at the end of
/// the lease or of the reservation).
pub fn timers() -> u64 {
    TIMERS.load(Relaxed)
}

/// Records the map's size after an entry was added or removed.
fn count_keys(map: &BTreeMap<WaitedKey, Waiters>) {
    WAIT_KEYS.store(map.len() as u64, Relaxed);
}

fn selected_db(ctx: *mut raw::RedisModuleCtx) -> c_int {
    // SAFETY: ctx is a live context of the current call or callback.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx)) }
}

/// `REDLOCK.WAIT key timeout-ms [QUEUE owner ticket]`
pub fn wait(call: &Call) -> Result<Reply, CommandError> {
    if call.args.len() > QUEUE_OWNER_ARG {
        crate::host::ffi::redact(call, QUEUE_OWNER_ARG);
    }
    let a = args::wait(&call.args)?;
    let Some(key_name) = call.key() else {
        return Err(CommandError::WrongArity("redlock.wait"));
    };
    stats::bump(&stats::WAITS);
    let now = mono_now();
    let deadline = {
        let key = LockKey::read(call.raw(), key_name);
        key.get()?.and_then(|state| state.live_deadline(now))
    };
    let waited: WaitedKey = (selected_db(call.raw()), call.args[1].to_vec());
    let queued = a.queue.map(|(owner, ticket)| {
        (
            (
                queue::rank(ticket, wall_now_us()),
                NEXT_PLACE.fetch_add(1, Relaxed),
            ),
            hash_owner(owner),
        )
    });
    if deadline.is_none() {
        if free_at_once(&waited, queued.map(|(_, owner)| owner), now) {
            stats::bump(&stats::WAIT_FREE);
            return Ok(Reply::Integer(1));
        }
        // Free but reserved, or being handed on to a queued waiter that
        // may be blocked: let the blocked waiters look again.
        // SAFETY: ctx and the key name belong to the command in progress.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalKeyAsReady {
                signal(call.raw(), key_name);
            }
        }
    }
    let flags = call.ctx.get_flags();
    if flags.intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING) {
        stats::bump(&stats::WAIT_CANNOT_BLOCK);
        return Ok(Reply::Integer(0));
    }
    let tag = Box::into_raw(Box::new(Tag {
        key: waited.clone(),
        queued,
        moved: AtomicBool::new(false),
        free: AtomicBool::new(false),
    }))
    .cast::<c_void>();
    let mut keys = [key_name];
    // SAFETY: ctx and the key name belong to the command in progress; Redis
    // keeps `tag` until it calls `free_waiter` with it.
    let blocked = unsafe {
        match (
            raw::RedisModule_BlockClientOnKeysWithFlags,
            raw::RedisModule_BlockClientOnKeys,
        ) {
            (Some(block), _) => block(
                call.raw(),
                Some(on_ready),
                Some(on_timeout),
                Some(free_waiter),
                a.timeout_ms as i64,
                keys.as_mut_ptr(),
                1,
                tag,
                raw::REDISMODULE_BLOCK_UNBLOCK_DELETED as c_int,
            ),
            (None, Some(block)) => block(
                call.raw(),
                Some(on_ready),
                Some(on_timeout),
                Some(free_waiter),
                a.timeout_ms as i64,
                keys.as_mut_ptr(),
                1,
                tag,
            ),
            (None, None) => std::ptr::null_mut(),
        }
    };
    if blocked.is_null() {
        // SAFETY: Redis did not take the tag.
        drop(unsafe { Box::from_raw(tag.cast::<Tag>()) });
        return Err(CommandError::Internal("blocking the client"));
    }
    WAITING_CLIENTS.fetch_add(1, Relaxed);
    let mut map = waiting();
    let entry = map.entry(waited.clone()).or_default();
    entry.count += 1;
    entry.handles.push(Handle {
        client: blocked,
        tag: tag.cast::<Tag>(),
    });
    if let Some((place, owner)) = queued {
        entry.queue.join(place, owner);
    }
    // A free lock: wake up when its reservation ends, or at once when it
    // is being handed on (on Redis 7.0 the signal above does nothing for a
    // missing key; the timer then answers the waiters itself).
    let wake_at = deadline.or_else(|| Some(entry.queue.reservation_end(now).unwrap_or(now)));
    if let Some(at) = wake_at {
        arm_timer(call.raw(), &waited, entry, at, now);
    }
    count_keys(&map);
    Ok(Reply::Blocked)
}

/// Whether a WAIT that finds the lock free is answered at once (see
/// [`Queue::free_at_once`]); `owner` is its queue owner. Never adds to the
/// map: a waiter answered at once leaves nothing behind.
fn free_at_once(waited: &WaitedKey, owner: Option<OwnerHash>, now: MonoMillis) -> bool {
    if WAIT_KEYS.load(Relaxed) == 0 {
        return true;
    }
    waiting()
        .get(waited)
        .is_none_or(|entry| entry.queue.free_at_once(owner.as_ref(), now))
}

/// The reservation an ACQUIRE by `owner` of the call's key meets (see
/// [`crate::core::queue`]), the input of the acquire decision
/// ([`crate::core::lock::LockState::acquire_reserved`]). Reading it leaves
/// it in place: an ACQUIRE refused after this (WRONGTYPE, busy) keeps the
/// reservation for its owner; one that is granted ends it with
/// [`reservation_used`].
pub fn reservation(call: &Call, owner: &OwnerHash, now: MonoMillis) -> Reservation {
    // No key with waiters or a reservation: no lock, no lookup, no
    // allocation.
    if WAIT_KEYS.load(Relaxed) == 0 {
        return Reservation::None;
    }
    with_entry(call, now, |queue| queue.peek(owner, now)).unwrap_or(Reservation::None)
}

/// The reserved `owner` took the lock of the call's key (its ACQUIRE was
/// granted or renewed): the reservation is over.
pub fn reservation_used(call: &Call, owner: &OwnerHash, now: MonoMillis) {
    if WAIT_KEYS.load(Relaxed) == 0 {
        return;
    }
    with_entry(call, now, |queue| queue.used_by(owner, now));
}

/// The call (`REDLOCK.APPLY` from a master, or the AOF) made the lock of
/// its key held: a grant this node did not decide. On a replica the
/// reserved owner's ACQUIRE went to the master, and this is how it comes
/// back; whoever the reservation was for, the hand-off is over, and the
/// lock's next release hands it on afresh.
pub fn reservation_over(call: &Call, now: MonoMillis) {
    if WAIT_KEYS.load(Relaxed) == 0 {
        return;
    }
    with_entry(call, now, |queue| queue.end_reservation());
}

/// Runs `f` on the queue of the call's key, when the key is in the map;
/// then drops the entry if nobody waits and nothing is reserved any more.
fn with_entry<R>(call: &Call, now: MonoMillis, f: impl FnOnce(&mut Queue) -> R) -> Option<R> {
    let name = call.args.get(1)?;
    let mut map = waiting();
    let waited: WaitedKey = (selected_db(call.raw()), name.to_vec());
    let entry = map.get_mut(&waited)?;
    let result = f(&mut entry.queue);
    if entry.count == 0 && entry.queue.is_idle(now) {
        stop_timer(call.raw(), entry);
        map.remove(&waited);
        count_keys(&map);
    }
    Some(result)
}

/// Makes the key's timer fire at `deadline` (replacing one set for another
/// moment).
fn arm_timer(
    ctx: *mut raw::RedisModuleCtx,
    waited: &WaitedKey,
    entry: &mut Waiters,
    deadline: MonoMillis,
    now: MonoMillis,
) {
    if matches!(entry.timer, Some((_, at)) if at == deadline) {
        return;
    }
    stop_timer(ctx, entry);
    let Some(create) = (unsafe { raw::RedisModule_CreateTimer }) else {
        return;
    };
    let data = Box::into_raw(Box::new(waited.clone())).cast::<c_void>();
    // One millisecond past the deadline: the lease is over when it fires.
    let period = deadline.saturating_sub(now).saturating_add(1);
    // SAFETY: ctx is live; Redis hands `data` back to `on_lease_end`, or we
    // take it back in `stop_timer`.
    let id = unsafe { create(ctx, period as raw::mstime_t, Some(on_lease_end), data) };
    entry.timer = Some((id, deadline));
    TIMERS.fetch_add(1, Relaxed);
}

fn stop_timer(ctx: *mut raw::RedisModuleCtx, entry: &mut Waiters) {
    let Some((id, _)) = entry.timer.take() else {
        return;
    };
    TIMERS.fetch_sub(1, Relaxed);
    let Some(stop) = (unsafe { raw::RedisModule_StopTimer }) else {
        return;
    };
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: the id came from CreateTimer; on success Redis returns the data
    // pointer it still held, which is ours to free.
    let stopped = unsafe { stop(ctx, id, &mut data) };
    if stopped == raw::REDISMODULE_OK as c_int && !data.is_null() {
        drop(unsafe { Box::from_raw(data.cast::<WaitedKey>()) });
    }
}

/// Called after a command changed the lock at the call's key: wakes the
/// key's waiters when the lock is free now, or moves their timer to the new
/// end of the lease.
pub fn state_changed(call: &Call, state: &LockState, now: MonoMillis) {
    if WAITING_CLIENTS.load(Relaxed) == 0 {
        return;
    }
    let (Some(key_name), Some(name)) = (call.key(), call.args.get(1)) else {
        return;
    };
    let waited: WaitedKey = (selected_db(call.raw()), name.to_vec());
    let mut map = waiting();
    let Some(entry) = map.get_mut(&waited) else {
        return;
    };
    match state.live_deadline(now) {
        Some(deadline) => arm_timer(call.raw(), &waited, entry, deadline, now),
        None => {
            stop_timer(call.raw(), entry);
            drop(map);
            // SAFETY: ctx and the key name belong to the command in progress.
            unsafe {
                if let Some(signal) = raw::RedisModule_SignalKeyAsReady {
                    signal(call.raw(), key_name);
                }
            }
        }
    }
}

/// Timer callback at a lease end or at the end of a reservation. A key
/// nobody waits on any more leaves the map. Otherwise the key is signalled
/// ready, so that Redis runs [`on_ready`] for its waiters; a missing key
/// (outside cluster mode) is served here instead ([`serve_missing`]).
extern "C" fn on_lease_end(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: data is the box made in `arm_timer`; the timer fired, so Redis
    // gives it up.
    let waited = unsafe { Box::from_raw(data.cast::<WaitedKey>()) };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let now = mono_now();
        {
            let mut map = waiting();
            let Some(entry) = map.get_mut(&*waited) else {
                return;
            };
            if entry.timer.take().is_some() {
                TIMERS.fetch_sub(1, Relaxed);
            }
            if entry.count == 0 {
                // Only a reservation was left, and nobody waits for it.
                match entry.queue.reservation_end(now) {
                    Some(end) => arm_timer(ctx, &waited, entry, end, now),
                    None => {
                        map.remove(&*waited);
                        count_keys(&map);
                    }
                }
                return;
            }
        }
        // SAFETY: ctx is the timer's context; the string is freed below.
        unsafe {
            if let Some(select) = raw::RedisModule_SelectDb {
                select(ctx, waited.0);
            }
            let (Some(create), Some(signal), Some(free)) = (
                raw::RedisModule_CreateString,
                raw::RedisModule_SignalKeyAsReady,
                raw::RedisModule_FreeString,
            ) else {
                return;
            };
            let name = create(ctx, waited.1.as_ptr().cast(), waited.1.len());
            if name.is_null() {
                return;
            }
            let missing = matches!(LockKey::read(ctx, name).get(), Ok(None));
            if missing && !in_cluster(ctx) {
                serve_missing(ctx, &waited, now);
            } else {
                signal(ctx, name);
            }
            free(ctx, name);
        }
    }));
}

/// Answers the waiters of a missing key (a free lock) as [`on_ready`]
/// would: Redis 7.0 never runs the reply callback of a client blocked on a
/// missing key, so a waiter behind a reservation whose key was deleted
/// (the reclamation sweep, `DEL`) would otherwise stay blocked until
/// something recreated the key. The waiters that may go are marked and
/// unblocked (their timeout callback answers 1); the others wait for the
/// end of the reservation.
fn serve_missing(ctx: *mut raw::RedisModuleCtx, waited: &WaitedKey, now: MonoMillis) {
    let handoff = config::handoff_ms();
    let go: Vec<Handle> = {
        let mut map = waiting();
        let Some(entry) = map.get_mut(waited) else {
            return;
        };
        let Waiters { handles, queue, .. } = &mut *entry;
        // In the order the clients blocked, as Redis serves them.
        let go = handles
            .iter()
            .copied()
            .filter(|h| {
                // SAFETY: the handle is in the map: its tag is alive.
                let tag = unsafe { &*h.tag };
                if tag.free.load(Relaxed) || tag.moved.load(Relaxed) {
                    return false;
                }
                match tag.queued {
                    None => queue.lets_plain_waiter_go(now, handoff),
                    Some((place, owner)) => queue.may_go(place, &owner, now, handoff),
                }
            })
            .collect();
        if let Some(end) = entry.queue.reservation_end(now) {
            arm_timer(ctx, waited, entry, end, now);
        }
        go
    };
    let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
        return;
    };
    for handle in go {
        // SAFETY: the handle was in the map a moment ago and nothing ran
        // since, so `free_waiter` has not run for it. `RM_UnblockClient` on
        // a client blocked on keys runs its timeout callback at once.
        unsafe {
            (*handle.tag).free.store(true, Relaxed);
            unblock(handle.client, std::ptr::null_mut());
        }
    }
}

/// Reply callback of a blocked waiter, run when its key was signalled
/// ready: answers 1 when the lock is free, otherwise stays blocked (and
/// makes sure the key's timer fires at the current end of the lease).
extern "C" fn on_ready(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| -> bool {
        // SAFETY: ctx is the blocked client's context in its reply callback.
        let (name, tag) = unsafe {
            (
                raw::RedisModule_GetBlockedClientReadyKey.map_or(std::ptr::null_mut(), |f| f(ctx)),
                raw::RedisModule_GetBlockedClientPrivateData
                    .map_or(std::ptr::null_mut(), |f| f(ctx))
                    .cast::<Tag>(),
            )
        };
        // SAFETY: the tag lives until `free_waiter`.
        let Some(tag) = (unsafe { tag.as_ref() }) else {
            return true;
        };
        if name.is_null() {
            return true;
        }
        if let Some(select) = unsafe { raw::RedisModule_SelectDb } {
            // SAFETY: ctx is live; the waiter's database exists.
            unsafe { select(ctx, tag.key.0) };
        }
        let now = mono_now();
        let (missing, deadline) = {
            let key = LockKey::read(ctx, name);
            match key.get() {
                Ok(state) => (state.is_none(), state.and_then(|s| s.live_deadline(now))),
                // Another type now: the lock is gone.
                Err(_) => (false, None),
            }
        };
        if missing && in_cluster(ctx) {
            return false;
        }
        let mut map = waiting();
        let Some(entry) = map.get_mut(&tag.key) else {
            return deadline.is_none();
        };
        // The decision is the queue's (`core/queue.rs::Queue::on_ready`,
        // which the simulator's nodes call too).
        match entry
            .queue
            .on_ready(tag.queued, deadline, now, config::handoff_ms())
        {
            Ready::Go => return true,
            Ready::Stay { wake_at: Some(at) } => arm_timer(ctx, &tag.key, entry, at, now),
            Ready::Stay { wake_at: None } => {}
        }
        false
    }));
    match outcome {
        Ok(false) => raw::REDISMODULE_ERR as c_int,
        _ => {
            stats::bump(&stats::WAIT_WOKEN);
            raw::reply_with_long_long(ctx, 1);
            raw::REDISMODULE_OK as c_int
        }
    }
}

/// Whether the server runs in cluster mode. There a lock key that
/// disappears under its waiters has usually moved to another shard with its
/// slot (`MIGRATE` deletes it here), which does not make the lock free: the
/// waiters stay blocked and Redis answers them with `-MOVED` once the slot
/// has moved (its cron checks blocked clients' slots), or at their timeout.
/// Only servers that wake waiters of deleted keys (7.2+) get here with a
/// missing key; on 7.0 nobody is woken for a missing key.
fn in_cluster(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: ctx is the blocked client's context in its reply callback.
    let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) };
    flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0
}

/// Timeout callback: the lock stayed held for the whole timeout, or (see
/// [`on_generic_event`]) the key left for another shard, or (see
/// [`serve_missing`]) the missing key's lock is free for the waiter.
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: ctx is the blocked client's context in its timeout callback;
    // the tag lives until `free_waiter`.
    let tag = unsafe {
        raw::RedisModule_GetBlockedClientPrivateData
            .map_or(std::ptr::null_mut(), |f| f(ctx))
            .cast::<Tag>()
            .as_ref()
    };
    if tag.is_some_and(|t| t.moved.load(Relaxed)) {
        raw::reply_with_error(ctx, MOVED_AWAY.as_ptr());
        return raw::REDISMODULE_OK as c_int;
    }
    if tag.is_some_and(|t| t.free.load(Relaxed)) {
        stats::bump(&stats::WAIT_WOKEN);
        raw::reply_with_long_long(ctx, 1);
        return raw::REDISMODULE_OK as c_int;
    }
    stats::bump(&stats::WAIT_TIMEOUTS);
    raw::reply_with_long_long(ctx, 0);
    raw::REDISMODULE_OK as c_int
}

/// The answer of a waiter whose key was deleted in cluster mode (usually:
/// moved to another shard with its slot). Cluster clients retry `TRYAGAIN`
/// on the slot's owner, which answers `-ASK` while the slot is migrating
/// and serves the key once the move is over.
const MOVED_AWAY: &std::ffi::CStr =
    c"TRYAGAIN the lock left this node (moved to another shard with its slot, or deleted); send WAIT again";

/// Keyspace callback for generic events. In cluster mode, when a waited-on
/// key is deleted (`MIGRATE` handing it to another shard raises `del` here,
/// as `DEL` does), the key's waiters are answered at once with
/// [`MOVED_AWAY`]. Otherwise a waiter would stay blind to the lock on its
/// new shard until the whole slot has moved (Redis then answers `-MOVED`)
/// or its timeout. The retry finds the key where it is now: `-ASK` to the
/// target during the move, or, after a plain `DEL`, a free lock here.
/// (The notification's context is a temporary client, so the deleting
/// command cannot be told apart.) `RM_UnblockClient` on a client blocked
/// on keys runs its timeout callback, which reads the `moved` mark.
///
/// # Safety
/// Called by Redis only, with the arguments of a keyspace notification.
pub unsafe extern "C" fn on_generic_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const std::os::raw::c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    if WAITING_CLIENTS.load(Relaxed) == 0 || event.is_null() || key.is_null() {
        return raw::REDISMODULE_OK as c_int;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: Redis passes a NUL-terminated event name.
        if unsafe { std::ffi::CStr::from_ptr(event) }.to_bytes() != b"del" || !in_cluster(ctx) {
            return;
        }
        let Some(name) = string_bytes(key) else {
            return;
        };
        let waited: WaitedKey = (selected_db(ctx), name.to_vec());
        let handles = match waiting().get(&waited) {
            Some(entry) => entry.handles.clone(),
            None => return,
        };
        let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
            return;
        };
        for handle in handles {
            // SAFETY: the handle is in the map, so `free_waiter` has not run
            // for it: the tag and the blocked client are alive. Unblocking
            // an already unblocked client is a no-op in Redis.
            unsafe {
                (*handle.tag).moved.store(true, Relaxed);
                unblock(handle.client, std::ptr::null_mut());
            }
        }
    }));
    raw::REDISMODULE_OK as c_int
}

/// The bytes of a Redis string (valid while the string is).
fn string_bytes<'a>(s: *mut raw::RedisModuleString) -> Option<&'a [u8]> {
    let ptr_len = unsafe { raw::RedisModule_StringPtrLen }?;
    let mut len = 0usize;
    // SAFETY: s is a live string handed to the current callback.
    let p = unsafe { ptr_len(s, &mut len) };
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// Called once per blocked client when it leaves (answered, timed out or
/// disconnected): forgets it (and its place in the queue). With the last
/// waiter the key leaves the map, or, while a reservation is live, its
/// timer moves to the reservation's end, which drops the entry then.
extern "C" fn free_waiter(ctx: *mut raw::RedisModuleCtx, tag: *mut c_void) {
    if tag.is_null() {
        return;
    }
    let tag_ptr = tag.cast::<Tag>().cast_const();
    // SAFETY: tag is the box made in `wait`, handed back once.
    let tag = unsafe { Box::from_raw(tag.cast::<Tag>()) };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        WAITING_CLIENTS.fetch_sub(1, Relaxed);
        let now = mono_now();
        let mut map = waiting();
        let Some(entry) = map.get_mut(&tag.key) else {
            return;
        };
        entry.handles.retain(|h| h.tag != tag_ptr);
        entry.count = entry.count.saturating_sub(1);
        if let Some((place, _)) = tag.queued {
            entry.queue.leave(place);
        }
        if entry.count == 0 {
            match entry.queue.reservation_end(now) {
                Some(end) => arm_timer(ctx, &tag.key, entry, end, now),
                None => {
                    stop_timer(ctx, entry);
                    map.remove(&tag.key);
                    count_keys(&map);
                }
            }
        }
    }));
}
