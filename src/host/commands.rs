//! The command handlers: parse, run the lock logic, store, replicate, reply.
//!
//! A mutating handler opens its key once, runs the state machine on the
//! stored value (a refused operation leaves it untouched), and only when the
//! lock changed signals the modification (the module runs with implicit
//! signalling off, so a refused call does not disturb `WATCH`ers), raises a
//! keyspace event and replicates the effect.
//!
//! The effect, never the command, goes to replicas and the AOF as
//! `REDLOCK.APPLY` with the resulting state (see [`crate::host::persist`]):
//! replaying `ACQUIRE key owner ttl` later would run against another clock
//! and could grant a lock that was never granted.
//!
//! Owner ids are capabilities: every handler that takes one first redacts
//! it from `MONITOR` and `SLOWLOG` (as Redis does for `AUTH` passwords) and
//! works on its hash from then on.

use std::ffi::CStr;

use redis_module::ContextFlags;

use crate::core::args;
use crate::core::error::CommandError;
use crate::core::lock::{Acquired, LockError, LockState, MonoMillis, Reservation};
use crate::core::node_record;
use crate::core::owner::hash_owner;
use crate::host::clock::{boot_now, mono_now, wall_now, wall_now_us};
use crate::host::config;
use crate::host::ffi::{self, Call, Reply};
use crate::host::guard;
use crate::host::mutant::{self, Mutant};
use crate::host::node::{self, learn_node_record, node_record};
use crate::host::persist::{self, Applied};
use crate::host::store::LockKey;
use crate::host::sync;
use crate::host::wait;

/// Counters of the lock commands, shown by `INFO redlock` ([`crate::host::info`]
/// reads them).
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// ACQUIREs that issued a new token.
    pub static GRANTED: AtomicU64 = AtomicU64::new(0);
    /// ACQUIREs by the current holder (lease renewed, same token).
    pub static RENEWED: AtomicU64 = AtomicU64::new(0);
    /// ACQUIREs answered nil because another owner holds the lock.
    pub static BUSY: AtomicU64 = AtomicU64::new(0);
    /// RELEASEs that freed a lock.
    pub static RELEASED: AtomicU64 = AtomicU64::new(0);
    /// RELEASEs by a non-holder or after expiry.
    pub static RELEASE_MISSED: AtomicU64 = AtomicU64::new(0);
    /// EXTENDs that renewed a lease.
    pub static EXTENDED: AtomicU64 = AtomicU64::new(0);
    /// EXTENDs by a non-holder or after expiry.
    pub static EXTEND_MISSED: AtomicU64 = AtomicU64::new(0);
    /// FENCE calls answered for the holder.
    pub static FENCED: AtomicU64 = AtomicU64::new(0);
    /// FENCE calls refused (not the holder).
    pub static FENCE_MISSED: AtomicU64 = AtomicU64::new(0);
    /// Locks taken over after their lease ran out without a release.
    pub static EXPIRED: AtomicU64 = AtomicU64::new(0);

    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}

/// Position of the owner argument in ACQUIRE, RELEASE, EXTEND and FENCE.
const OWNER_ARG: usize = 2;

/// Refuses ACQUIRE, RELEASE, EXTEND and FENCE on a replica. With `replica-read-only
/// no` Redis lets clients write to a replica; a lock granted, lengthened,
/// fenced or released there would exist (or be free) on no master (the master's stream overwrites
/// it, and a promotion keeps it), so a replica answers them as Redis
/// answers a write with `replica-read-only yes` (`READONLY`). The master's
/// effects arrive as `REDLOCK.APPLY`, which is not refused. This is the
/// one read of the context flags these commands make (INSPECT and WAIT
/// make none here); `docs/performance.md` has its cost.
fn refuse_on_replica(call: &Call, command: &'static str) -> Result<(), CommandError> {
    if call.ctx.get_flags().contains(ContextFlags::SLAVE) {
        return Err(CommandError::OnReplica(command));
    }
    Ok(())
}

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
    // A missing record starts above every counter this node reclaimed.
    let mut state = key
        .get()?
        .unwrap_or_else(|| LockState::missing(node::reclaimed_counter()));
    let (result, changed) = op(&mut state, now)?;
    if changed {
        key.put(&state)?;
        // The three readings of the record are taken together, not with the
        // command's `now`: a boot stamp read later than the monotonic reading
        // it goes with would make a restart count the lease longer by the
        // time the command took (INFO calls, a descheduled process).
        ffi::replicate_state(call, || {
            persist::persist_at(&state, mono_now(), wall_now(), boot_now())
        });
        wait::state_changed(call, &state, now);
        ffi::signal_modified(call, event);
    }
    Ok(result)
}

/// Tells replicas and the AOF the node-wide values after the longest lease
/// grew, before the lease itself is replicated: a replica's promotion
/// window and its clamp must cover every lease its master may have granted.
fn announce_node_record(call: &Call) {
    let Some(key) = call.key() else {
        return;
    };
    if crate::host::replication::needed(&call.ctx) {
        let record = node_record();
        crate::host::lease_ack::announcing(record.longest_lease_ms);
        // SAFETY: ctx and key belong to the command invocation in progress.
        unsafe {
            persist::replicate_node(call.raw(), key, &record);
            persist::replicate_acked(call.raw(), key, crate::host::lease_ack::acked_ms());
        }
    }
}

/// The replica-sync check for a lock write that stated `stated`
/// ([`sync::check`]), then, before the write's effect, the master's
/// announcement when it is due, so that replicas learn a new R before any
/// write made under it.
fn sync_check(call: &Call, stated: u64) -> Result<(), CommandError> {
    sync::check(&call.ctx, stated)?;
    if let Some(key) = call.key() {
        // SAFETY: ctx and key belong to the command invocation in progress.
        unsafe { sync::announce_if_due(call.raw(), key) };
    }
    // The announcement's write of the replica set may have failed: then
    // this write is refused too, not only the next one.
    sync::check_recorded()
}

/// `REDLOCK.ACQUIRE key owner ttl-ms [FLOOR n] [SYNC r]`
///
/// Read top-down: refused on a replica ([`refuse_on_replica`]), parse
/// ([`args::acquire`]), the restart guard ([`guard::check`]), the
/// replica-sync check ([`sync::check`]), the hand-off reservation this node's waiter queue
/// holds ([`wait::reservation`]), the pure decision
/// ([`LockState::acquire_reserved`]), then, in [`update`], the store and the
/// effects (replication, waiters, keyspace event).
pub fn acquire(call: &Call) -> Result<Reply, CommandError> {
    ffi::redact(call, OWNER_ARG);
    refuse_on_replica(call, "REDLOCK.ACQUIRE")?;
    let a = args::acquire(&call.args, config::max_ttl())?;
    if a.floor > 0 {
        args::token_within_reach("FLOOR", a.floor, wall_now_us())?;
    }
    let now = mono_now();
    guard::check(&call.ctx, now)?;
    sync_check(call, a.sync)?;
    if guard::record_lease(a.ttl)? {
        announce_node_record(call);
    }
    check_lease_ack(&call.ctx, a.ttl)?;
    let owner = hash_owner(a.owner);
    // A free lock reserved for the first queued waiter is busy for others:
    // the reservation is an input of the decision. It ends only when its
    // owner takes the lock (below): a refused ACQUIRE keeps it.
    let reservation = wait::reservation(call, &owner, now);
    let outcome = update(call, now, c"redlock.acquire", |state, now| {
        let outcome = state
            .acquire_reserved(reservation, &owner, a.ttl, a.floor, now, wall_now_us())
            .map_err(|LockError::CounterExhausted| CommandError::CounterExhausted)?;
        if matches!(outcome, Acquired::Renewed { .. }) && mutant::on(Mutant::RenewalShortens) {
            state.extend(&owner, a.ttl, now);
        }
        Ok((outcome, outcome != Acquired::Busy))
    })?;
    if reservation == Reservation::ForCaller && outcome != Acquired::Busy {
        wait::reservation_used(call, &owner, now);
    }
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
    ffi::redact(call, OWNER_ARG);
    refuse_on_replica(call, "REDLOCK.RELEASE")?;
    let a = args::release(&call.args)?;
    let owner = hash_owner(a.owner);
    let released = update(call, mono_now(), c"redlock.release", |state, now| {
        let released = state.release(&owner, now);
        Ok((released, released))
    })?;
    stats::bump(if released {
        &stats::RELEASED
    } else {
        &stats::RELEASE_MISSED
    });
    Ok(Reply::Integer(u64::from(released)))
}

/// `REDLOCK.EXTEND key owner ttl-ms [SYNC r]`
pub fn extend(call: &Call) -> Result<Reply, CommandError> {
    ffi::redact(call, OWNER_ARG);
    refuse_on_replica(call, "REDLOCK.EXTEND")?;
    let a = args::extend(&call.args, config::max_ttl())?;
    sync_check(call, a.sync)?;
    if guard::record_lease(a.ttl)? {
        announce_node_record(call);
    }
    check_lease_ack(&call.ctx, a.ttl)?;
    let owner = hash_owner(a.owner);
    let extended = update(call, mono_now(), c"redlock.extend", |state, now| {
        let extended = state.extend(&owner, a.ttl, now);
        Ok((extended, extended))
    })?;
    stats::bump(if extended {
        &stats::EXTENDED
    } else {
        &stats::EXTEND_MISSED
    });
    Ok(Reply::Integer(u64::from(extended)))
}

/// `REDLOCK.FENCE key owner [token] [SYNC r]`
pub fn fence(call: &Call) -> Result<Reply, CommandError> {
    ffi::redact(call, OWNER_ARG);
    refuse_on_replica(call, "REDLOCK.FENCE")?;
    let a = args::fence(&call.args)?;
    if let Some(token) = a.token.filter(|&t| t > 0) {
        args::token_within_reach("token", token, wall_now_us())?;
    }
    sync_check(call, a.sync)?;
    let owner = hash_owner(a.owner);
    let counter = update(call, mono_now(), c"redlock.fence", |state, now| {
        let before = state.counter();
        let counter = state.fence(&owner, a.token, now);
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

/// `REDLOCK.APPLY key v3 counter expiry remaining floored boot-stamp
/// owner-hash` (a held lock), `REDLOCK.APPLY key v2 counter expiry remaining
/// floored idle-wall idle-ms [owner-hash]` (a free lock, or a file written
/// before the boot stamp) or the version-1 form: sets the
/// exact state that a master computed. Runs only from the replication link
/// or while loading the AOF. The node-wide forms (`reclaimed`, `node`) raise
/// the node's values and, for `reclaimed`, delete the key.
///
/// From a master, the lease is timed from the remaining time on this node's
/// monotonic clock (the master's wall clock means nothing here); from the
/// AOF, on the boot that wrote it, from the later of its end on the boot
/// clock and its wall-clock end (a lease that ended while the node was down
/// comes back free), and on another boot from the later of its wall-clock
/// end and its remaining time; clamped to the longest lease
/// ([`crate::core::lease_time`]). A lease received raises this node's
/// longest lease first, so a replica's promotion window covers it. The
/// state is then written to this node's own AOF with its own clock
/// readings.
pub fn apply(call: &Call) -> Result<Reply, CommandError> {
    let flags = call.ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(CommandError::InternalOnly);
    }
    let p = match persist::parse_apply(&call.args)? {
        Applied::State(p) => p,
        Applied::Node(n) => {
            // From the master followed (the stream), or this node's own AOF.
            let from_master = !flags.contains(ContextFlags::LOADING);
            learn_node_record(&call.ctx, &n, from_master);
            ffi::replicate_verbatim(call);
            return Ok(Reply::Ok);
        }
        Applied::Acked(ms) => {
            // From the master only (never written to an AOF); never passed
            // on.
            if !flags.contains(ContextFlags::LOADING) {
                crate::host::teacher::acked_applied(&call.ctx, ms);
            }
            return Ok(Reply::Ok);
        }
        Applied::Sync {
            offset,
            r,
            hold_ms,
            new_disk_wait_ms,
        } => {
            // From a master only (a load of this node's own AOF learns
            // nothing about its data from it); never passed on.
            sync::apply(&call.ctx, offset, r, hold_ms, new_disk_wait_ms);
            return Ok(Reply::Ok);
        }
        Applied::Reclaimed(counter) => {
            node::raise_reclaimed(counter);
            let mut key = LockKey::write(call.raw(), key_of(call)?);
            if key.get()?.is_some() && key.delete() {
                ffi::signal_modified(call, c"redlock.reclaim");
            }
            ffi::replicate_verbatim(call);
            return Ok(Reply::Ok);
        }
    };
    let loading = flags.contains(ContextFlags::LOADING);
    let (learn, p) = node_record::applied(p, loading, mutant::current());
    if let Some(ms) = learn {
        guard::learn_lease(&call.ctx, ms);
        crate::host::teacher::lease_applied(&call.ctx);
    }
    let source = node_record::applied_source(loading, guard::longest_lease());
    let mono = mono_now();
    let (wall, boot) = (wall_now(), boot_now());
    let state = persist::restore(&p, source, mono, wall, boot);
    if persist::restamp_needed(&p, source, wall, boot) {
        crate::host::datatype::note_restamp();
    }
    let own = persist::persist_at(&state, mono, wall, boot);
    if state.is_held(mono) {
        wait::reservation_over(call, mono);
    }
    wait::state_changed(call, &state, mono);
    let mut key = LockKey::write(call.raw(), key_of(call)?);
    key.put(&state)?;
    ffi::signal_modified(call, c"redlock.apply");
    ffi::replicate_state(call, || own);
    Ok(Reply::Ok)
}

/// `REDLOCK.REPLICAS [FORGET ip:port]`: this master's replicas for the
/// replica-sync check, or forgets one that is gone for good.
pub fn replicas(call: &Call) -> Result<Reply, CommandError> {
    Ok(match sync::replicas_command(&call.ctx, &call.args)? {
        sync::ReplicasReply::List(list) => Reply::Pairs(
            list.into_iter()
                .map(|(id, online)| (id, u64::from(online)))
                .collect(),
        ),
        sync::ReplicasReply::Forgot(removed) => {
            // The lease-ack rule's own replicas (inherited from the life as
            // a replica, identities that cannot be told apart) too; the
            // replica-sync check refused an id that is connected.
            let id = call
                .args
                .get(2)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .unwrap_or_default();
            let also = crate::host::lease_ack::forget(&id);
            Reply::Integer(u64::from(removed || also))
        }
    })
}

/// `REDLOCK.TESTHOOK WALLCLOCK-OFFSET ms | BOOT-ID id|REAL |
/// SKIP-REPLICATION 0|1 | PROMOTION-GUARD 0|1 | REPLICATION-RULE
/// NAIVE|NO-FORKS|SAFE | MUTANT name 0|1 | PANIC` (test builds only).
#[cfg(feature = "test-hooks")]
pub fn test_hook(call: &Call) -> Result<Reply, CommandError> {
    match call.args.get(1..).unwrap_or_default() {
        [sub, ms] if sub.eq_ignore_ascii_case(b"WALLCLOCK-OFFSET") => {
            let text = std::str::from_utf8(ms).map_err(|_| CommandError::NotAnInteger("offset"))?;
            let offset: i64 = text
                .parse()
                .map_err(|_| CommandError::NotAnInteger("offset"))?;
            crate::host::clock::set_wall_offset(offset);
            Ok(Reply::Ok)
        }
        [sub, id] if sub.eq_ignore_ascii_case(b"BOOT-ID") => {
            let fake = if id.eq_ignore_ascii_case(b"REAL") {
                None
            } else {
                let parsed = std::str::from_utf8(id)
                    .ok()
                    .and_then(crate::core::lease_time::parse_boot_id)
                    .ok_or_else(|| {
                        CommandError::UnknownHook(
                            "BOOT-ID takes a boot id (32 hex digits) or REAL".into(),
                        )
                    })?;
                Some(parsed)
            };
            crate::host::clock::set_fake_boot_id(fake);
            Ok(Reply::Ok)
        }
        [sub, flag] if sub.eq_ignore_ascii_case(b"SKIP-REPLICATION") => {
            let on = match &flag[..] {
                b"1" => true,
                b"0" => false,
                _ => return Err(CommandError::NotAnInteger("SKIP-REPLICATION flag (0 or 1)")),
            };
            // The skip-replication mutant: one switch with `MUTANT`.
            mutant::set(Mutant::SkipReplication, on);
            Ok(Reply::Ok)
        }
        [sub, rule] if sub.eq_ignore_ascii_case(b"REPLICATION-RULE") => {
            use crate::host::replication::Rule;
            let rule = match &rule[..] {
                r if r.eq_ignore_ascii_case(b"NAIVE") => Rule::Naive,
                r if r.eq_ignore_ascii_case(b"NO-FORKS") => Rule::NoForks,
                r if r.eq_ignore_ascii_case(b"SAFE") => Rule::Safe,
                _ => {
                    return Err(CommandError::UnknownHook(
                        "REPLICATION-RULE takes NAIVE, NO-FORKS or SAFE".into(),
                    ))
                }
            };
            crate::host::replication::set_rule(rule);
            Ok(Reply::Ok)
        }
        [sub, flag] if sub.eq_ignore_ascii_case(b"PROMOTION-GUARD") => {
            let on = match &flag[..] {
                b"1" => true,
                b"0" => false,
                _ => return Err(CommandError::NotAnInteger("PROMOTION-GUARD flag (0 or 1)")),
            };
            guard::set_promotion_guard(on);
            Ok(Reply::Ok)
        }
        [sub, name, flag] if sub.eq_ignore_ascii_case(b"MUTANT") => {
            let mutant = mutant::Mutant::named(name).ok_or_else(|| {
                CommandError::UnknownHook(format!(
                    "MUTANT takes one of: {}",
                    mutant::Mutant::ALL.map(|(n, _)| n).join(", ")
                ))
            })?;
            let on = match &flag[..] {
                b"1" => true,
                b"0" => false,
                _ => return Err(CommandError::NotAnInteger("MUTANT flag (0 or 1)")),
            };
            mutant::set(mutant, on);
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

/// The lease-ack check of a ttl on a master (`host/lease_ack.rs`), with the
/// announcement of the node record it may ask for.
fn check_lease_ack(ctx: &redis_module::Context, ttl_ms: u64) -> Result<(), CommandError> {
    let checked = crate::host::lease_ack::check(ttl_ms);
    if crate::host::lease_ack::take_announce_request() {
        crate::host::node::announce_soon(ctx);
    }
    checked
}
