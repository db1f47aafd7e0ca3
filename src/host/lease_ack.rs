//! The master's side of [`crate::core::lease_ack_rule`]: a lease longer
//! than every replica of this master's life acknowledged knowing waits
//! (`NOSYNC`, transient) until they acknowledged an offset past an
//! announcement of the node record that covers it.
//!
//! The announcement is the node record (`REDLOCK.APPLY … node`), sent when
//! a grant lengthens the record (`commands.rs`), when `max-ttl-ms` is raised
//! or a replica comes online (`node.rs::announce_soon`), and when this check
//! finds none to wait for. Its offset is read like the lowering of
//! `sync-replicas` to 0 reads its own (`host/sync.rs`): the master offset
//! before the announcement is kept, and the target is the master offset read
//! in a later command, once it moved past it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use redis_module::Context;

use crate::core::error::CommandError;
use crate::core::lease_ack_rule::{sync_seen, waited_for, Kept, LeaseAck};
use crate::core::sync_rule::listens;
use crate::host::{config, guard, mutant, sync};

static ACK: Mutex<LeaseAck> = Mutex::new(LeaseAck::new());
/// The longest lease the last announcement said (0: none since the reset).
static ANNOUNCED_MS: AtomicU64 = AtomicU64::new(0);
/// The master offset before that announcement (`u64::MAX`: none).
static ANNOUNCED_AT: AtomicU64 = AtomicU64::new(u64::MAX);
/// An announcement was asked for by this check and not sent yet.
static ASKED: AtomicBool = AtomicBool::new(false);

/// The file that keeps the acknowledged length (and whether the life is
/// held, its inherited and ambiguous replicas: [`Kept`]) across restarts,
/// in the server's directory, followed by `-PORT` ([`config::node_file`]),
/// next to the replica set's.
///
/// The unsuffixed file of earlier versions is not read: in a directory
/// shared by two nodes it may hold the other node's length, longer than
/// what this node's replicas acknowledged. Without a file of its own a
/// master with replicas starts from 0 ([`LeaseAck::at_load`]): after the
/// upgrade its first longer lease waits for one acknowledgement round.
pub const ACKED_FILE: &str = "redlock-lease-acked";
static ACKED_PATH: OnceLock<PathBuf> = OnceLock::new();

fn ack() -> std::sync::MutexGuard<'static, LeaseAck> {
    ACK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The node record saying `longest_ms` is about to be replicated (called
/// right before it, in the same command or timer).
pub fn announcing(longest_ms: u64) {
    ASKED.store(false, Relaxed);
    if let Some(at) = sync::master_offset() {
        ANNOUNCED_MS.store(longest_ms, Relaxed);
        ANNOUNCED_AT.store(at, Relaxed);
    }
}

/// The announcement timer ran (whether or not it sent anything): a later
/// check may ask again.
pub fn announce_ran() {
    ASKED.store(false, Relaxed);
}

/// A new life as replica: nothing is acknowledged, nothing held.
pub fn reset() {
    begin(LeaseAck::new());
}

/// The module loads (after the replica set, `sync::on_load`): this life as
/// master starts from what its replicas acknowledged in the run before
/// ([`LeaseAck::at_load`]).
pub fn on_load(ctx: &Context) {
    let path = config::node_file(ctx, ACKED_FILE);
    let kept = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| Kept::parse(&text));
    let _ = ACKED_PATH.set(path);
    // A node that starts as a replica has no life as master: its file is
    // reset, as a demotion resets it (no role change fires at such a
    // start). A later promotion then finds it not held, so a crash between
    // the promotion's configuration write and its file write leaves a load
    // held by the configuration, never by an older life's file.
    if ctx.get_flags().contains(redis_module::ContextFlags::SLAVE)
        && !mutant::on(mutant::Mutant::HeldLostWithDisk)
    {
        reset();
        return;
    }
    let had_replicas = !sync::life_replicas().is_empty();
    let missing = kept.is_none();
    // A promotion's hold outlives a lost disk through the configuration
    // file (`redlock.promoted-acked-ms`).
    let configured = config::promoted_acked();
    let start = LeaseAck::at_load(
        kept,
        had_replicas,
        guard::longest_lease(),
        mutant::current(),
    )
    .held_by_configuration(configured, mutant::current());
    // A hold read from the data directory alone reaches the configuration
    // file too, so that a later new disk is held as well.
    if let Some(ms) = start.hold_to_configure(configured, mutant::current()) {
        let value = i64::try_from(ms)
            .unwrap_or(i64::MAX)
            .min(config::MAX_TTL_LIMIT);
        config::PROMOTED_ACKED_MS.store(value, Relaxed);
        crate::host::config_file::keep_after_start(ctx);
    }
    begin(start);
    if missing && !had_replicas {
        if let Some(ms) = configured {
            ctx.log_notice(&format!(
                "no record of what this master's replicas acknowledged knowing, and it was \
                 promoted (redlock.promoted-acked-ms {ms}): a lease longer than {ms} ms waits \
                 for an acknowledgement of a replica"
            ));
        }
    }
    if had_replicas && missing {
        ctx.log_notice("no record of what this master's replicas acknowledged knowing of its longest lease: a lease longer than 0 ms waits for one acknowledgement round");
    }
}

/// Keeps what the file keeps. A write that fails leaves the file of
/// before: its shorter length holds the next run back more, never less;
/// its sets may lack a replica added since, which the replica set's own
/// file (`host/sync.rs`) still names, or an ambiguous identity, which the
/// next scan sees again while it is connected; but a promotion's "held"
/// may be lost (logged).
fn keep() {
    if let Some(path) = ACKED_PATH.get() {
        let text = ack().kept().render();
        if let Err(e) = guard::write_file(path, &text) {
            // A promotion's "held" that is not written lets a restart
            // before a replica joins start unheld: said in the log.
            redis_module::logging::log_warning(format!("cannot write {}: {e}", path.display()));
        }
    }
}

fn begin(start: LeaseAck) {
    FRESH.store(start.fresh(), Relaxed);
    SYNC_BEGAN_AT.store(u64::MAX, Relaxed);
    *ack() = start;
    ANNOUNCED_MS.store(0, Relaxed);
    ANNOUNCED_AT.store(u64::MAX, Relaxed);
    ASKED.store(false, Relaxed);
    keep();
}

/// A life as master starts at a promotion ([`LeaseAck::promoted`]):
/// `learned_acked_ms` what the old master last announced
/// ([`crate::host::teacher::on_promotion`]), `longest_ms` the longest lease
/// this node knows, `inherited` the replicas it had as a replica
/// ([`sync::take_inherited`]).
///
/// The configuration file is written first (`redlock.promoted-acked-ms`,
/// [`crate::host::config_file::keep_promoted_acked`]): a crash between the
/// two writes then leaves a restart held by its configuration, never a
/// data directory that holds while the configuration does not.
pub fn promoted(
    ctx: &Context,
    learned_acked_ms: u64,
    longest_ms: u64,
    inherited: std::collections::BTreeSet<String>,
) {
    let start = LeaseAck::promoted(learned_acked_ms, longest_ms, inherited, mutant::current());
    crate::host::config_file::keep_promoted_acked(ctx, start.configured_hold());
    begin(start);
}

/// The replicas online now (the replica events' scan): identities that
/// cannot be told apart are remembered for this life.
pub fn saw_replicas(ids: &[String]) {
    let grew = ack().saw_ambiguous(ids.iter().map(String::as_str));
    if grew {
        keep();
    }
}

/// `REDLOCK.REPLICAS FORGET id` (not connected): no longer waited for nor
/// ambiguous. Whether this rule knew it.
pub fn forget(id: &str) -> bool {
    let forgot = ack().forget(id);
    if forgot {
        keep();
    }
    forgot
}

/// The longest lease every replica of this master's life acknowledged
/// knowing (`INFO redlock`).
pub fn acked_ms() -> u64 {
    ack().acked_ms()
}

/// Set by [`check`] when the node record must be announced (nothing waited
/// for covers the ttl refused); the command glue announces it
/// ([`take_announce_request`]), so that this file needs nothing of
/// `host/node.rs`, which calls into it.
static ANNOUNCE_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether [`check`] asked for an announcement of the node record since
/// the last call (the request is taken).
pub fn take_announce_request() -> bool {
    ANNOUNCE_REQUESTED.swap(false, Relaxed)
}

/// Whether this life is fresh ([`LeaseAck::fresh`]), for the command
/// filter, which runs before every command and reads only this.
static FRESH: AtomicBool = AtomicBool::new(false);

/// When (monotonic ms) a replica's `PSYNC` or `SYNC` arrived on a fresh
/// life, not looked at since (`u64::MAX`: none): the next check reads
/// `INFO replication` for replicas joining ([`sync_seen`]).
static SYNC_BEGAN_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Registers the command filter that sees a replica's `PSYNC` or `SYNC`
/// (at module load). It runs before every command; on a life that is not
/// fresh it reads one atomic and returns.
pub fn register_sync_filter(ctx: &Context) {
    // SAFETY: ctx is the OnLoad context; the filter lives as long as the
    // module.
    unsafe {
        if let Some(register) = redis_module::raw::RedisModule_RegisterCommandFilter {
            let filter = register(
                ctx.ctx,
                Some(on_command),
                redis_module::raw::REDISMODULE_CMDFILTER_NOSELF as i32,
            );
            if filter.is_null() {
                ctx.log_warning("cannot register the command filter that sees a replica's first sync: a master on a new disk refuses nothing to a joining replica");
            }
        }
    }
}

/// The command filter: on a fresh life, a `PSYNC` or `SYNC` (a replica
/// begins a sync) is noted for the next check, before that command runs
/// and so before any later command can grant.
unsafe extern "C" fn on_command(fctx: *mut redis_module::raw::RedisModuleCommandFilterCtx) {
    if !FRESH.load(Relaxed) {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: fctx is the filter context of this call; the argument
        // string is owned by the command and read only here.
        let name = unsafe {
            let (Some(count), Some(arg_get), Some(ptr_len)) = (
                redis_module::raw::RedisModule_CommandFilterArgsCount,
                redis_module::raw::RedisModule_CommandFilterArgGet,
                redis_module::raw::RedisModule_StringPtrLen,
            ) else {
                return;
            };
            if count(fctx) < 1 {
                return;
            }
            let arg = arg_get(fctx, 0);
            if arg.is_null() {
                return;
            }
            let mut len = 0usize;
            let ptr = ptr_len(arg, &mut len);
            if ptr.is_null() {
                return;
            }
            std::slice::from_raw_parts(ptr as *const u8, len)
        };
        if name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync") {
            SYNC_BEGAN_AT.store(crate::host::clock::mono_now(), Relaxed);
        }
    });
}

/// The replicas in their first sync that are not of this life.
fn joining_now() -> Vec<String> {
    let life = sync::life_replicas();
    sync::syncing_replicas()
        .into_iter()
        // Without a listening port, Sentinel cannot promote it.
        .filter(|id| listens(id) && !life.contains(id))
        .collect()
}

/// The check of a lease of `ttl_ms` on a master, before it is granted;
/// see [`take_announce_request`] after a refusal.
pub fn check(ttl_ms: u64) -> Result<(), CommandError> {
    let began = SYNC_BEGAN_AT.load(Relaxed);
    let began = (began != u64::MAX).then_some(began);
    if sync_seen(began, crate::host::clock::mono_now(), mutant::current()) {
        let joining = joining_now();
        if joining.is_empty() {
            // Online (of this life now, checked below) or gone: a
            // reconnection is another PSYNC.
            SYNC_BEGAN_AT.store(u64::MAX, Relaxed);
        }
        ack()
            .check_joining(ttl_ms, &joining, mutant::current())
            .map_err(|r| CommandError::LeaseUnacked {
                ttl: r.ttl_ms,
                acked: r.acked_ms,
                waiting: format!(
                    "{} (in its first sync with this master, which started on a disk with no file of its replicas and has had no replica online since: a replica of a run at this address before that disk may know less)",
                    r.waiting.join(", ")
                ),
            })?;
    }
    if ttl_ms <= ack().acked_ms() {
        return Ok(());
    }
    // The replicas of this life and those in their first sync
    // ([`waited_for`]: a replica joins the life's set only once online).
    // A master that never had a replica reads `INFO replication` here only
    // for a lease longer than its acknowledged length (after a raise of
    // max-ttl-ms).
    let known = waited_for(
        &sync::life_replicas(),
        &sync::syncing_replicas(),
        mutant::current(),
    );
    if known.is_empty() && ack().free_without_replicas() {
        return Ok(());
    }
    // The target of the last announcement, read once the master offset
    // moved past the offset before it (a later command than the one that
    // announced).
    let announced_ms = ANNOUNCED_MS.load(Relaxed);
    let at = ANNOUNCED_AT.load(Relaxed);
    if announced_ms >= ttl_ms && at != u64::MAX {
        if let Some(now) = sync::master_offset().filter(|&now| now > at) {
            ack().announced(announced_ms, now);
            ANNOUNCED_AT.store(u64::MAX, Relaxed);
        }
    }
    let acks = sync::replica_acks();
    let before = ack().kept();
    let refused = ack().check(ttl_ms, &known, &acks, mutant::current());
    if ack().kept() != before {
        keep();
        // Replicas promoted later start from the new length: tell them.
        if !ASKED.swap(true, Relaxed) {
            ANNOUNCE_REQUESTED.store(true, Relaxed);
        }
    }
    refused.map_err(|r| {
        if !r.ambiguous.is_empty() {
            return CommandError::LeaseUnacked {
                ttl: r.ttl_ms,
                acked: r.acked_ms,
                waiting: format!(
                    "replicas that cannot be told apart: {} (replicas sharing one address, or announcing no listening port: give each replica its own replica-announce-ip/replica-announce-port, or REDLOCK.REPLICAS FORGET the one gone)",
                    r.ambiguous.join(", ")
                ),
            };
        }
        // Nothing waited for covers this ttl (no announcement since this
        // life began, or only a shorter one): announce the record.
        let pending = ack().pending().is_some_and(|p| p.ms >= ttl_ms);
        let covered =
            ANNOUNCED_AT.load(Relaxed) != u64::MAX && ANNOUNCED_MS.load(Relaxed) >= ttl_ms;
        if !pending && !covered && !ASKED.swap(true, Relaxed) {
            ANNOUNCE_REQUESTED.store(true, Relaxed);
        }
        let waiting = if r.waiting.is_empty() && known.is_empty() {
            "a replica of this master: its life began by a promotion (or a restart with replicas), and a replica of the old master that has not reconnected may know less".to_string()
        } else if r.waiting.is_empty() {
            "the announcement of the master's longest lease, not propagated yet".to_string()
        } else {
            r.waiting.join(", ")
        };
        CommandError::LeaseUnacked {
            ttl: r.ttl_ms,
            acked: r.acked_ms,
            waiting,
        }
    })
}
