//! The replica-sync check on the node (DESIGN §13; the rules are in
//! [`crate::core::sync_rule`]).
//!
//! As a master: every lock write (ACQUIRE, EXTEND, FENCE) must state this
//! node's R, and is refused while the master has had more replicas than R
//! since it became master (counted by `ip:port` from `INFO replication`,
//! kept in the file `redlock-sync-state` in the server's directory, which a
//! restart reads back) or fewer than R are online. The master tells its
//! replicas what they need to know to be promoted safely in an
//! *announcement* on the replication stream (also with the check off: the
//! hold tells a promoted replica whether its teacher's window reaches past
//! its own, [`crate::core::sync_rule::taught_at_promotion`]),
//! `REDLOCK.APPLY key sync offset r hold-ms new-disk-wait-ms` (`offset`: its
//! replication offset before the announcement; `r`: its R; `hold-ms`: how
//! long a replica promoted now must still guard; `new-disk-wait-ms`: how
//! long a restart of it on a new disk waits by its configuration,
//! [`crate::core::sync_rule::new_disk_wait`], absent from an earlier
//! version and read as 0), sent when a replica comes online (after
//! the data it synced), when R changes, and whenever the hold changed since
//! the last one, ahead of the next lock write's effect, so that no write
//! made under a new R reaches a replica before the R does.
//!
//! As a replica: a *fresh* announcement ([`fresh`]) makes it current with
//! its master; the next unseen offset is kept in the same file, written
//! before the node goes on. Starting, being pointed at another master, or a
//! full sync beginning make it not current; a promotion decides from that
//! ([`promotion`]) whether it grants at once, guards for the rest of its
//! master's hold, or keeps the guard of DESIGN §7.

use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use redis_module::{raw, Context, ContextFlags};

use crate::core::error::CommandError;
use crate::core::lock::MonoMillis;
use crate::core::sync_rule::{
    blocked_waits, check_write, fresh, hold_ms, link_down_since, listens, lowering_waits_for,
    parse_replica_ack, promotion, replica_identities, Promotion, SyncFile, SyncRefusal, Vouch,
};
use crate::host::clock::mono_now;
use crate::host::config;
use crate::host::config_file;
use crate::host::guard;
use crate::host::mutant::{self, Mutant};

/// File name of the check's state, in the server's directory, followed by
/// `-PORT` (see [`instance_file`]).
pub const FILE: &str = "redlock-sync-state";
/// File name of the mark that a replica may hold this master's vouch for an
/// R above 0 (`1`; `0` or no file: none may), in the server's directory,
/// followed by `-PORT`. A file of its own, so that the state file keeps the
/// form older versions read.
pub const VOUCHED_FILE: &str = "redlock-sync-vouched";

/// `base-PORT` in the server's directory (`port`, else `tls-port`; `base`
/// alone when the node listens on neither). Two instances may share `dir`
/// (with their own `dbfilename` and `appenddirname`), and a replica's state
/// written over its master's would make the master forget its replicas; two
/// instances never share a port on one host.
fn instance_file(ctx: &Context, base: &str) -> PathBuf {
    let dir = std::env::current_dir().unwrap_or_default();
    let port = ["port", "tls-port"].iter().find_map(|name| {
        config::config_get(ctx, name)
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|&p| p != 0)
    });
    match port {
        Some(port) => dir.join(format!("{base}-{port}")),
        None => dir.join(base),
    }
}

/// The check's counters, shown by `INFO redlock`.
pub mod stats {
    use std::sync::atomic::AtomicU64;

    /// Lock writes refused because they stated another R.
    pub static REFUSED_STATED: AtomicU64 = AtomicU64::new(0);
    /// Lock writes refused because the master had more replicas than R.
    pub static REFUSED_TOO_MANY: AtomicU64 = AtomicU64::new(0);
    /// Lock writes refused because fewer than R replicas were online.
    pub static REFUSED_TOO_FEW: AtomicU64 = AtomicU64::new(0);
    /// Announcements sent.
    pub static ANNOUNCED: AtomicU64 = AtomicU64::new(0);
    /// Fresh announcements applied (as a replica).
    pub static FRESH: AtomicU64 = AtomicU64::new(0);
    /// Announcements applied that were not fresh (a replayed backlog).
    pub static STALE: AtomicU64 = AtomicU64::new(0);
}

static PATH: OnceLock<PathBuf> = OnceLock::new();
static VOUCHED_PATH: OnceLock<PathBuf> = OnceLock::new();
/// What [`VOUCHED_FILE`] says: an announcement with R above 0 went out, and
/// no lowering to 0 has since reached every replica.
static VOUCHED_OUT: AtomicBool = AtomicBool::new(false);
/// What the file holds (and what is written next).
static STATE: Mutex<SyncFile> = Mutex::new(SyncFile {
    seen_next: None,
    replicas: std::collections::BTreeSet::new(),
});
/// The replica set could not be written: lock writes are refused (a restart
/// would forget replicas).
static RECORD_FAILED: AtomicBool = AtomicBool::new(false);
/// When the file was last written again after a failure ([`save_again`]).
static LAST_RETRY: AtomicU64 = AtomicU64::new(0);
/// How often a failed file is written again at most (by lock writes and the
/// cron): each try is an fsync on the main thread.
const RETRY_EVERY_MS: u64 = 100;
/// Until when lock writes wait because this start found the replica set
/// lost ([`on_load`]; 0: not lost).
static SET_LOST_UNTIL: AtomicU64 = AtomicU64::new(0);
/// Replicas of this master's life (with those online now that have no
/// listening port, see [`listens`]), and online now (from the last scan).
static KNOWN: AtomicUsize = AtomicUsize::new(0);
/// The replicas online now without a listening port (last scan).
static UNLISTED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static ONLINE: AtomicUsize = AtomicUsize::new(0);
/// As a replica: a fresh announcement of the current master was applied.
static CURRENT: AtomicBool = AtomicBool::new(false);
static VOUCHED_R: AtomicU64 = AtomicU64::new(0);
static HOLD_UNTIL: AtomicU64 = AtomicU64::new(0);
/// As a replica: the new-disk wait its master last vouched (0: none said).
static VOUCHED_WAIT: AtomicU64 = AtomicU64::new(0);
/// As a replica: since when its link to its master is down (0: up).
static LINK_DOWN_SINCE: AtomicU64 = AtomicU64::new(0);
/// As a replica: its link to its master is up (the events say).
static LINK_UP: AtomicBool = AtomicBool::new(false);
/// The cron tick before the last one while the link was up (or the
/// moment it came up), and the last tick: [`link_down_since`].
static LINK_SEEN_UP: AtomicU64 = AtomicU64::new(0);
static LINK_LAST_TICK: AtomicU64 = AtomicU64::new(0);
/// As a master: until when leases granted without the check may run.
static UNCHECKED_UNTIL: AtomicU64 = AtomicU64::new(0);
/// R when last seen, to notice a change.
static LAST_R: AtomicU64 = AtomicU64::new(0);
/// Bumped at every change of what an announcement says; the last
/// announcement was sent at `ANNOUNCED_CHANGES` and the guard's epoch
/// `ANNOUNCED_EPOCH`.
static CHANGES: AtomicU64 = AtomicU64::new(1);
static ANNOUNCED_CHANGES: AtomicU64 = AtomicU64::new(0);
static ANNOUNCED_EPOCH: AtomicU64 = AtomicU64::new(0);
/// The R the last announcement said.
static ANNOUNCED_R: AtomicU64 = AtomicU64::new(0);
/// The new-disk wait the last announcement said (`u64::MAX`: none sent).
static ANNOUNCED_WAIT: AtomicU64 = AtomicU64::new(u64::MAX);
/// R was lowered to 0 and not every replica has applied the announcement
/// saying so ([`lowering_waits_for`]): lock writes wait.
static ZERO_PENDING: AtomicBool = AtomicBool::new(false);
/// The master offset before the announcement saying 0 (`u64::MAX`: not
/// sent yet), and the offset every replica must acknowledge, read after
/// that announcement went out (`u64::MAX`: not read yet).
static ZERO_ANNOUNCED_AT: AtomicU64 = AtomicU64::new(u64::MAX);
static ZERO_TARGET: AtomicU64 = AtomicU64::new(u64::MAX);
/// The last promotion's outcome, for `INFO` (0 none, 1 at once, 2 the rest
/// of a hold, 3 the guard).
static LAST_PROMOTION: AtomicU8 = AtomicU8::new(0);

fn state() -> std::sync::MutexGuard<'static, SyncFile> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes the file (fsynced). A failure removes it: a node without the
/// file counts as having seen nothing (a replica then needs a full sync),
/// never as current; for a master it means refusing lock writes until the
/// replica set is written.
fn save(ctx: Option<&Context>, file: &SyncFile) -> bool {
    let Some(path) = PATH.get() else {
        return false;
    };
    match guard::write_file(path, &file.render()) {
        Ok(()) => true,
        Err(e) => {
            let _ = std::fs::remove_file(path);
            let text = format!(
                "cannot write {}: {e}; this node will need a full sync before a promotion can skip the guard",
                path.display()
            );
            match ctx {
                Some(ctx) => ctx.log_warning(&text),
                None => redis_module::logging::log_warning(text),
            }
            false
        }
    }
}

/// After a failed write: writes the file again (the whole state, so the
/// replica set is back on disk when it succeeds), at most every
/// [`RETRY_EVERY_MS`]; whether the file is written. Lock writes and the cron
/// retry it, so that lock writes resume once the disk does, and an idle
/// master's file is back within a tick of it (a restart before that would
/// find it missing: [`on_load`]).
fn save_again(ctx: Option<&Context>, now: MonoMillis) -> bool {
    if !RECORD_FAILED.load(Relaxed) {
        return true;
    }
    let last = LAST_RETRY.load(Relaxed);
    if last != 0 && now < last.saturating_add(RETRY_EVERY_MS) {
        return false;
    }
    LAST_RETRY.store(now.max(1), Relaxed);
    let copy = state().clone();
    let saved = save(ctx, &copy);
    RECORD_FAILED.store(!saved, Relaxed);
    saved
}

/// The refusal of a lock write while the file is not written.
fn record_failed() -> CommandError {
    CommandError::SyncRecord(format!(
        "{} could not be written",
        PATH.get()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    ))
}

/// After the announcement a lock write sent ([`announce_if_due`]): the
/// write is refused when that announcement's write of the file failed.
pub fn check_recorded() -> Result<(), CommandError> {
    if config::sync_replicas() > 0 && RECORD_FAILED.load(Relaxed) {
        return Err(record_failed());
    }
    Ok(())
}

/// Reads the file at load. A replica forgets the replica set (it is not a
/// master; its next life as one starts empty).
pub fn on_load(ctx: &Context, now: MonoMillis) {
    let path = instance_file(ctx, FILE);
    // Before the port was in the name, one file per `dir`: read once when
    // this instance has none of its own yet.
    let text = std::fs::read_to_string(&path).or_else(|_| {
        std::fs::read_to_string(std::env::current_dir().unwrap_or_default().join(FILE))
    });
    let parsed = text.ok().and_then(|text| SyncFile::parse(&text));
    let lost = parsed.is_none();
    let file = parsed.unwrap_or_default();
    let _ = PATH.set(path);
    let vouched_path = instance_file(ctx, VOUCHED_FILE);
    // Unreadable (but present): as if a vouch went out.
    let vouched = match std::fs::read_to_string(&vouched_path) {
        Ok(text) => text.trim() != "0",
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    };
    VOUCHED_OUT.store(vouched, Relaxed);
    let _ = VOUCHED_PATH.set(vouched_path);
    let replica = ctx.get_flags().contains(ContextFlags::SLAVE);
    // The file is gone (a failed write removed it, and the restart came
    // before it was written again) while a vouch went out: a replica cut
    // off from this master may still count as current and be promoted at
    // once, and this start does not know it. Lock writes wait this node's
    // new-disk wait, as a start on a new disk does: by then such a replica's
    // link has been down that long, and the cut-off keeps its guard
    // (`sync_rule::promotion`).
    if lost && vouched && !replica {
        let wait = config_file::new_disk_wait();
        SET_LOST_UNTIL.store(now.saturating_add(wait).max(1), Relaxed);
        ctx.log_warning(&format!(
            "{} is missing after a vouch went out: its replica set is lost; lock writes wait {wait} ms, as after a new disk",
            PATH.get().map(|p| p.display().to_string()).unwrap_or_default()
        ));
    }
    {
        let mut st = state();
        *st = file;
        if replica && !st.replicas.is_empty() {
            st.replicas.clear();
            let copy = st.clone();
            drop(st);
            save(Some(ctx), &copy);
        }
    }
    // A restart exempt from the guard (durable all its life) keeps every
    // lease the previous run granted, and some may have been granted without
    // the check (R was 0 then): a replica promoted within the longest lease
    // guards for the rest. Any other start has its restart window for that
    // (DESIGN §7), which announcements carry as well.
    let unchecked = if guard::restart_exempt() {
        now.saturating_add(guard::longest_lease())
    } else {
        0
    };
    UNCHECKED_UNTIL.store(unchecked, Relaxed);
    LAST_R.store(config::sync_replicas(), Relaxed);
    // Started with R 0 (from its configuration) after a run whose replicas
    // may still hold a vouch for more: the lowering of `on_config_change`.
    ZERO_PENDING.store(!replica && config::sync_replicas() == 0 && vouched, Relaxed);
    if !replica {
        scan(ctx);
    }
}

/// Writes [`VOUCHED_FILE`] (fsynced) when `on` differs from what it says;
/// `false` when it cannot be written.
fn set_vouched_out(on: bool) -> bool {
    if VOUCHED_OUT.load(Relaxed) == on {
        return true;
    }
    let Some(path) = VOUCHED_PATH.get() else {
        return false;
    };
    match guard::write_file(path, if on { "1\n" } else { "0\n" }) {
        Ok(()) => {
            VOUCHED_OUT.store(on, Relaxed);
            true
        }
        Err(e) => {
            redis_module::logging::log_warning(format!("cannot write {}: {e}", path.display()));
            false
        }
    }
}

/// Reads `INFO replication` and updates the replica counts; a replica seen
/// for the first time joins this master's set, which is written at once.
pub fn scan(ctx: &Context) {
    let online_ids = online_now();
    ONLINE.store(online_ids.len(), Relaxed);
    let (listening, unlisted): (Vec<String>, Vec<String>) =
        online_ids.into_iter().partition(|id| listens(id));
    let unlisted_count = unlisted.len();
    *UNLISTED.lock().unwrap_or_else(|p| p.into_inner()) = unlisted;
    let mut st = state();
    let mut grew = false;
    for id in listening {
        grew |= st.replicas.insert(id);
    }
    if mutant::on(Mutant::SyncCountsOnline) {
        // The rule before DESIGN §13: only the replicas connected now.
        KNOWN.store(ONLINE.load(Relaxed), Relaxed);
    } else {
        KNOWN.store(st.replicas.len() + unlisted_count, Relaxed);
    }
    if grew {
        let copy = st.clone();
        drop(st);
        RECORD_FAILED.store(!save(Some(ctx), &copy), Relaxed);
    }
}

/// A replica came online (after [`scan`]): when the master now has more
/// replicas than R, every client blocked in `WAIT` is unblocked with an
/// error, so that no `WAIT` counts the newcomer in place of a known replica
/// ([`blocked_waits`]). The client takes such a write as not confirmed.
pub fn on_replica_online(ctx: &Context) {
    let r = config::sync_replicas();
    if r == 0 || (KNOWN.load(Relaxed) as u64) <= r {
        return;
    }
    let list = match ctx.call("CLIENT", &["LIST", "TYPE", "normal"]) {
        Ok(redis_module::RedisValue::SimpleString(s))
        | Ok(redis_module::RedisValue::BulkString(s)) => s,
        Ok(redis_module::RedisValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(redis_module::RedisValue::BulkRedisString(s)) => s.to_string_lossy(),
        _ => return,
    };
    for id in blocked_waits(&list) {
        let id = id.to_string();
        let _ = ctx.call("CLIENT", &["UNBLOCK", &id, "ERROR"]);
    }
}

/// The identity of every replica online now (`INFO replication`): its
/// `ip:port`, told apart from another at the same address
/// ([`replica_identities`]).
fn online_now() -> Vec<String> {
    replica_identities(&online_addresses())
}

/// The `ip:port` of every replica online now, one per replica line.
fn online_addresses() -> Vec<String> {
    replica_lines()
        .into_iter()
        .filter(|(_, online, _)| *online)
        .map(|(id, _, _)| id)
        .collect()
}

/// Every replica line of `INFO replication`, connected in any state:
/// `ip:port`, whether it is online, and the offset it acknowledged.
fn replica_lines() -> Vec<(String, bool, u64)> {
    let mut lines = Vec::new();
    // SAFETY: plain module API calls; the info data is freed below.
    unsafe {
        let (Some(get), Some(field), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return lines;
        };
        let info = get(std::ptr::null_mut(), c"replication".as_ptr());
        if info.is_null() {
            return lines;
        }
        for i in 0..1024 {
            let name = format!("slave{i}\0");
            let value = field(info, name.as_ptr().cast::<c_char>());
            if value.is_null() {
                break;
            }
            let line = std::ffi::CStr::from_ptr(value).to_string_lossy();
            if let Some(parsed) = parse_replica_ack(&line) {
                lines.push(parsed);
            }
        }
        free(std::ptr::null_mut(), info);
    }
    lines
}

/// The check for a lock write that stated `stated` (`SYNC r`, 0 without):
/// refused with the node's R when it differs, and while the master has had
/// more replicas than R or has fewer online.
pub fn check(ctx: &Context, stated: u64) -> Result<(), CommandError> {
    let lost_until = SET_LOST_UNTIL.load(Relaxed);
    if lost_until != 0 {
        let now = mono_now();
        if now < lost_until {
            return Err(CommandError::SyncRecord(format!(
                "{} was missing at this start after a vouch went out (its replica set is lost): lock writes wait {} ms more, as after a new disk",
                PATH.get()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                lost_until - now
            )));
        }
        SET_LOST_UNTIL.store(0, Relaxed);
    }
    let r = config::sync_replicas();
    if r == 0 && stated == 0 {
        if ZERO_PENDING.load(Relaxed) {
            return lowering_done(ctx);
        }
        return Ok(());
    }
    if r > 0 {
        // The counts are kept by the replica events (and the scan at load,
        // for a MODULE LOAD into a running master): reading INFO here would
        // cost every lock write more than the rest of it.
        if RECORD_FAILED.load(Relaxed) && !save_again(Some(ctx), mono_now()) {
            return Err(record_failed());
        }
    }
    check_write(r, stated, KNOWN.load(Relaxed), ONLINE.load(Relaxed)).map_err(|refusal| {
        match refusal {
            SyncRefusal::Stated { node, stated } => {
                stats::REFUSED_STATED.fetch_add(1, Relaxed);
                CommandError::SyncStated { node, stated }
            }
            SyncRefusal::TooMany { known, r } => {
                stats::REFUSED_TOO_MANY.fetch_add(1, Relaxed);
                let mut names = state().replicas.iter().cloned().collect::<Vec<_>>();
                names.extend(
                    UNLISTED
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .iter()
                        .map(|id| format!("{id} (no listening port)")),
                );
                let names = names.join(", ");
                CommandError::SyncTooMany { known, names, r }
            }
            SyncRefusal::TooFew { online, r } => {
                stats::REFUSED_TOO_FEW.fetch_add(1, Relaxed);
                CommandError::SyncTooFew { online, r }
            }
        }
    })
}

/// While a lowering of R to 0 is pending: `Ok` once every replica of this
/// master's life acknowledged an offset past the announcement saying 0
/// (the lowering is then complete), the refusal naming those still waited
/// for otherwise.
fn lowering_done(ctx: &Context) -> Result<(), CommandError> {
    match lowering_waiting() {
        None => {
            ctx.log_notice(
                "redlock.sync-replicas 0 reached every replica: lock writes go on without the check",
            );
            Ok(())
        }
        Some(waiting) => {
            if ZERO_ANNOUNCED_AT.load(Relaxed) == u64::MAX {
                announce_soon(ctx);
            }
            // Replicas acknowledge once a second: a client tries again shortly.
            Err(CommandError::SyncLowering(waiting))
        }
    }
}

/// Who a pending lowering of R to 0 still waits for (`None`: none is
/// pending, or it just completed).
fn lowering_waiting() -> Option<String> {
    if !ZERO_PENDING.load(Relaxed) {
        return None;
    }
    let announced_at = ZERO_ANNOUNCED_AT.load(Relaxed);
    if announced_at == u64::MAX {
        return Some("the announcement, not sent yet".into());
    }
    let mut target = ZERO_TARGET.load(Relaxed);
    if target == u64::MAX {
        // Read in a later turn of the event loop than the announcement: the
        // offset lies past it once it was propagated.
        match master_offset() {
            Some(now) if now > announced_at => {
                target = now;
                ZERO_TARGET.store(now, Relaxed);
            }
            _ => return Some("the announcement, not propagated yet".into()),
        }
    }
    let waiting = lowering_waits_for(&state().replicas, &replica_acks(), target);
    if waiting.is_empty() {
        ZERO_PENDING.store(false, Relaxed);
        // No replica vouches for more than 0 now (a failed write keeps the
        // mark: the next start with R 0 waits again, never less).
        set_vouched_out(false);
        return None;
    }
    Some(waiting.join(", "))
}

/// Every online replica of `INFO replication`: its identity (named like
/// the replica set, which `scan` takes from the online ones), `true`, and
/// the offset it acknowledged.
pub(crate) fn replica_acks() -> Vec<(String, bool, u64)> {
    let mut all: Vec<_> = replica_lines()
        .into_iter()
        .filter(|(_, online, _)| *online)
        .collect();
    let ids = replica_identities(&all.iter().map(|(id, _, _)| id.clone()).collect::<Vec<_>>());
    for ((id, _, _), named) in all.iter_mut().zip(ids) {
        *id = named;
    }
    all
}

/// The `ip:port` of every replica connected now that is not online yet
/// (its first sync under way), for the lease-ack check
/// ([`crate::core::lease_ack_rule::waited_for`]).
pub(crate) fn syncing_replicas() -> Vec<String> {
    replica_lines()
        .into_iter()
        .filter(|(_, online, _)| !*online)
        .map(|(id, _, _)| id)
        .collect()
}

fn bump() {
    CHANGES.fetch_add(1, Relaxed);
}

/// Whether announcements can change anything: always. With the check on,
/// they vouch for a replica; with it off all along they still carry the
/// master's hold, which tells a replica taught by this master whether it
/// covers this master's window once promoted
/// ([`crate::core::sync_rule::taught_at_promotion`]: an untaught
/// promotion's day reaches the replicas of the promoted master).
fn worth_announcing() -> bool {
    true
}

/// What the last announcement said is out of date.
fn due() -> bool {
    worth_announcing()
        && (ANNOUNCED_CHANGES.load(Relaxed) != CHANGES.load(Relaxed)
            || ANNOUNCED_EPOCH.load(Relaxed) != guard::epoch()
            || ANNOUNCED_WAIT.load(Relaxed) != config_file::new_disk_wait())
}

/// Before a lock write's effect: sends the announcement when what it says
/// changed since the last one, so that a replica learns a new R (or hold)
/// before any write made under it.
///
/// # Safety
/// `ctx` and `key` must belong to the command invocation in progress.
pub unsafe fn announce_if_due(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString) {
    if due() {
        announce(ctx, key);
    }
}

/// Sends `REDLOCK.APPLY key sync offset r hold-ms new-disk-wait-ms` to
/// replicas (not to the AOF: it says nothing about this node's own data),
/// and records the offset as seen.
///
/// # Safety
/// `ctx` must be a context that may replicate; `key` a live string.
unsafe fn announce(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString) {
    ANNOUNCED_CHANGES.store(CHANGES.load(Relaxed), Relaxed);
    ANNOUNCED_EPOCH.store(guard::epoch(), Relaxed);
    let Some(offset) = master_offset() else {
        return;
    };
    let now = mono_now();
    let window_left = guard::state(now).map_or(0, |(_, left)| left);
    let hold = hold_ms(window_left, UNCHECKED_UNTIL.load(Relaxed), now);
    let r = config::sync_replicas();
    ANNOUNCED_R.store(r, Relaxed);
    let wait = config_file::new_disk_wait();
    ANNOUNCED_WAIT.store(wait, Relaxed);
    if r == 0 && ZERO_PENDING.load(Relaxed) && ZERO_ANNOUNCED_AT.load(Relaxed) == u64::MAX {
        ZERO_ANNOUNCED_AT.store(offset, Relaxed);
    }
    {
        // Emitted: a later replay of this node's history must not count it
        // as fresh either (see `sync_rule::fresh`).
        let mut st = state();
        if st.seen_next.is_none_or(|n| n <= offset) {
            st.seen_next = Some(offset + 1);
            let copy = st.clone();
            drop(st);
            // A failed write removed the file, and the replica set with it:
            // lock writes are refused until it is written again, as when
            // the set grows (a restart would forget the replicas, and a
            // durable one is exempt from the guard).
            RECORD_FAILED.store(!save(None, &copy), Relaxed);
        }
    }
    // A vouch for R above 0 is marked on disk before it can reach a replica,
    // so that a start with R 0 knows to wait for every replica (see
    // `on_load`); when that cannot be written, it is not sent (the replicas
    // are then not current, and a promotion keeps the guard).
    if r > 0 && !set_vouched_out(true) {
        return;
    }
    if let Some(replicate) = raw::RedisModule_Replicate {
        replicate(
            ctx,
            c"REDLOCK.APPLY".as_ptr(),
            // `A`: replicas only.
            c"scllllA".as_ptr(),
            key,
            c"sync".as_ptr(),
            offset as c_longlong,
            r as c_longlong,
            hold as c_longlong,
            wait.min(i64::MAX as u64) as c_longlong,
        );
        stats::ANNOUNCED.fetch_add(1, Relaxed);
    }
}

/// This node's replication offset now.
pub(crate) fn master_offset() -> Option<u64> {
    // SAFETY: plain module API calls; the info data is freed below.
    unsafe {
        let (Some(get), Some(unsigned), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldUnsigned,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return None;
        };
        let info = get(std::ptr::null_mut(), c"replication".as_ptr());
        if info.is_null() {
            return None;
        }
        let mut err: c_int = 0;
        let offset = unsigned(info, c"master_repl_offset".as_ptr(), &mut err);
        free(std::ptr::null_mut(), info);
        (err == 0).then_some(offset)
    }
}

/// The master this node is configured to follow (`host:port`, as given to
/// `REPLICAOF` or `replicaof`; `INFO replication` `master_host` and
/// `master_port`), `None` as a master.
pub(crate) fn configured_master() -> Option<String> {
    // SAFETY: plain module API calls; the info data is freed below.
    unsafe {
        let (Some(get), Some(field), Some(unsigned), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_ServerInfoGetFieldUnsigned,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return None;
        };
        let info = get(std::ptr::null_mut(), c"replication".as_ptr());
        if info.is_null() {
            return None;
        }
        let host = field(info, c"master_host".as_ptr());
        let host = (!host.is_null()).then(|| {
            std::ffi::CStr::from_ptr(host)
                .to_string_lossy()
                .into_owned()
        });
        let mut err: c_int = 0;
        let port = unsigned(info, c"master_port".as_ptr(), &mut err);
        free(std::ptr::null_mut(), info);
        match host {
            Some(host) if err == 0 && !host.is_empty() => Some(format!("{host}:{port}")),
            _ => None,
        }
    }
}

/// The key `REDLOCK.APPLY key sync …` names when sent from a timer; that
/// form leaves its key untouched.
const ANNOUNCE_KEY: &[u8] = b"redlock:node-record";

/// Sends the announcement soon (on the next turn of the event loop, from a
/// timer's context): after a replica came online (behind the data it
/// synced), after R changed.
pub fn announce_soon(ctx: &Context) {
    // SAFETY: a plain module API call with the event's context.
    unsafe {
        if let Some(create) = raw::RedisModule_CreateTimer {
            create(ctx.ctx, 0, Some(announce_timer), std::ptr::null_mut());
        }
    }
}

/// How long an announcement waits before it looks again while client writes
/// are paused.
const PAUSED_RETRY_MS: i64 = 100;

unsafe extern "C" fn announce_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // Inside a client pause nothing may be propagated (Redis asserts
        // it; `CONFIG SET redlock.sync-replicas` runs inside a
        // `CLIENT PAUSE … WRITE`): look again after it.
        if crate::host::replication::writes_paused() {
            // SAFETY: ctx is the timer's context on the main thread.
            unsafe {
                if let Some(create) = raw::RedisModule_CreateTimer {
                    create(
                        ctx,
                        PAUSED_RETRY_MS,
                        Some(announce_timer),
                        std::ptr::null_mut(),
                    );
                }
            }
            return;
        }
        let context = Context::new(ctx);
        if context.get_flags().contains(ContextFlags::SLAVE) || !worth_announcing() {
            return;
        }
        // SAFETY: ctx is the timer's context; the string is freed below.
        unsafe {
            let (Some(create), Some(free)) =
                (raw::RedisModule_CreateString, raw::RedisModule_FreeString)
            else {
                return;
            };
            let key = create(ctx, ANNOUNCE_KEY.as_ptr().cast(), ANNOUNCE_KEY.len());
            if key.is_null() {
                return;
            }
            announce(ctx, key);
            free(ctx, key);
        }
    }));
}

/// A replica applies an announcement from its master: a fresh one makes it
/// current with that master. Ignored while loading the AOF (it says nothing
/// about this node's data) and when not fresh (a replayed backlog).
pub fn apply(ctx: &Context, offset: u64, r: u64, hold: u64, new_disk_wait: u64) {
    if !ctx.get_flags().contains(ContextFlags::REPLICATED) {
        return;
    }
    let mut st = state();
    if !fresh(offset, st.seen_next) && !mutant::on(Mutant::SyncAnyAnnouncement) {
        stats::STALE.fetch_add(1, Relaxed);
        return;
    }
    // Recorded before the node goes on: see `sync_rule::fresh`.
    st.seen_next = Some(st.seen_next.map_or(offset + 1, |n| n.max(offset + 1)));
    let copy = st.clone();
    drop(st);
    save(Some(ctx), &copy);
    VOUCHED_R.store(r, Relaxed);
    VOUCHED_WAIT.store(new_disk_wait, Relaxed);
    HOLD_UNTIL.store(mono_now().saturating_add(hold), Relaxed);
    CURRENT.store(true, Relaxed);
    stats::FRESH.fetch_add(1, Relaxed);
}

/// The replica set of this master's life (`ip:port`).
pub(crate) fn life_replicas() -> std::collections::BTreeSet<String> {
    state().replicas.clone()
}

/// The replicas online at the last scan that announce no listening port.
pub(crate) fn unlisted_now() -> Vec<String> {
    UNLISTED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The replicas this node had as a replica (replicas of a replica, in its
/// replica set since it became a replica), taken at its last promotion
/// ([`take_inherited`]).
static INHERITED: Mutex<std::collections::BTreeSet<String>> =
    Mutex::new(std::collections::BTreeSet::new());

/// The replicas this node had as a replica, as its last promotion found
/// them (taken once): the lease-ack rule waits for them
/// (`core/lease_ack_rule.rs`).
pub(crate) fn take_inherited() -> std::collections::BTreeSet<String> {
    std::mem::take(&mut *INHERITED.lock().unwrap_or_else(|p| p.into_inner()))
}

/// The node became a replica (of a new master): not current until a fresh
/// announcement of that master; no replica set of its own.
pub fn on_demotion(ctx: &Context) {
    CURRENT.store(false, Relaxed);
    // A lowering of R waits for the replicas of this life as master; they
    // follow another master now, and a fresh announcement of that one is
    // what they go by.
    ZERO_PENDING.store(false, Relaxed);
    KNOWN.store(0, Relaxed);
    ONLINE.store(0, Relaxed);
    let mut st = state();
    if !st.replicas.is_empty() {
        st.replicas.clear();
        let copy = st.clone();
        drop(st);
        save(Some(ctx), &copy);
    }
}

/// The link to the master went up or down (a link that never came up since
/// the start leaves the replica not current anyway). Down, it counts from
/// the last moment the running server saw it up ([`link_down_since`]).
pub fn on_master_link(up: bool, now: MonoMillis) {
    if up {
        LINK_DOWN_SINCE.store(0, Relaxed);
        LINK_SEEN_UP.store(now.max(1), Relaxed);
        LINK_LAST_TICK.store(now.max(1), Relaxed);
        LINK_UP.store(true, Relaxed);
        return;
    }
    if LINK_UP.swap(false, Relaxed) && LINK_DOWN_SINCE.load(Relaxed) == 0 {
        let since = link_down_since(now, LINK_SEEN_UP.load(Relaxed), mutant::current());
        LINK_DOWN_SINCE.store(since.max(1), Relaxed);
    } else if LINK_DOWN_SINCE.load(Relaxed) == 0 {
        LINK_DOWN_SINCE.store(now.max(1), Relaxed);
    }
    LINK_SEEN_UP.store(0, Relaxed);
    LINK_LAST_TICK.store(0, Relaxed);
}

/// The server's cron ran (every `1000/hz` ms, only while the server runs):
/// a link up now was up at the tick before this one too. One tick behind,
/// since a tick may run right after a pause, before the closed connection
/// of a master that ended meanwhile is read.
pub fn on_cron(now: MonoMillis) {
    if RECORD_FAILED.load(Relaxed) {
        save_again(None, now);
    }
    if LINK_UP.load(Relaxed) {
        let previous = LINK_LAST_TICK.swap(now.max(1), Relaxed);
        if previous != 0 {
            LINK_SEEN_UP.store(previous, Relaxed);
        }
    }
}

/// A full sync begins: the data set is about to be replaced.
pub fn on_full_sync_start() {
    CURRENT.store(false, Relaxed);
}

/// A full sync loaded: the data set is the master's snapshot, and every
/// announcement after it in the stream is fresh.
pub fn on_full_sync_end(ctx: &Context) {
    if mutant::on(Mutant::SyncAnyAnnouncement) {
        return;
    }
    let mut st = state();
    st.seen_next = Some(0);
    let copy = st.clone();
    drop(st);
    save(Some(ctx), &copy);
}

/// The end of the hold the master followed now last announced (on this
/// node's clock), from a fresh announcement since this node started, was
/// pointed at that master or began a full sync from it; `None`: none.
/// Read before [`on_promotion`], which forgets it.
pub fn announced_hold_until() -> Option<MonoMillis> {
    CURRENT.load(Relaxed).then(|| HOLD_UNTIL.load(Relaxed))
}

/// The node was promoted: decides how it starts ([`promotion`]) and begins
/// its life as master with no replicas.
pub fn on_promotion(ctx: &Context, now: MonoMillis) -> Promotion {
    let vouch = CURRENT.swap(false, Relaxed).then(|| Vouch {
        master_r: VOUCHED_R.load(Relaxed),
        hold_until: HOLD_UNTIL.load(Relaxed),
        new_disk_wait_ms: VOUCHED_WAIT.load(Relaxed),
    });
    let down = LINK_DOWN_SINCE.swap(0, Relaxed);
    // As a master it has no link; a later one counts from its own events.
    LINK_UP.store(false, Relaxed);
    LINK_SEEN_UP.store(0, Relaxed);
    LINK_LAST_TICK.store(0, Relaxed);
    let decision = promotion(
        config::sync_replicas(),
        vouch,
        (down != 0).then_some(down),
        guard::longest_lease(),
        now,
        mutant::current(),
    );
    LAST_PROMOTION.store(
        match decision {
            Promotion::AtOnce => 1,
            Promotion::Rest(_) => 2,
            Promotion::Guard => 3,
        },
        Relaxed,
    );
    ctx.log_notice(&match decision {
        Promotion::AtOnce => "promoted: the replica-sync check vouches for every lock write, granting at once".to_string(),
        Promotion::Rest(ms) => format!("promoted: guarding for the rest of the old master's hold, {ms} ms"),
        Promotion::Guard => "promoted: the replica-sync check does not vouch for this node (off, another R, no sync with the master since this node started, or cut off from it for its new-disk wait): guarding for the longest lease".to_string(),
    });
    // Every lease this node grants from now on is checked (when R > 0);
    // what came before is covered by the decision's window.
    UNCHECKED_UNTIL.store(0, Relaxed);
    // The replicas it had as a replica (the scan of the replica events
    // records them as on a master), with those without a listening port
    // online now: the lease-ack rule of the new life waits for them.
    {
        let mut inherited = state().replicas.clone();
        inherited.extend(unlisted_now());
        *INHERITED.lock().unwrap_or_else(|p| p.into_inner()) = inherited;
    }
    on_demotion(ctx);
    bump();
    scan(ctx);
    // Its replicas (replicas of a replica, which stay connected) learn its
    // new window at once, not at its next lock write.
    announce_soon(ctx);
    decision
}

/// After a configuration change: a new R is announced (before the next lock
/// write), and raising it from 0 starts a hold for the leases granted
/// without the check.
pub fn on_config_change(ctx: &Context) {
    let r = config::sync_replicas();
    let last = LAST_R.swap(r, Relaxed);
    if r != last {
        if last == 0 {
            UNCHECKED_UNTIL.store(mono_now().saturating_add(guard::longest_lease()), Relaxed);
        }
        // Lowered to 0: a replica that lags keeps its vouch for `last` until
        // the announcement reaches it, and promoted before, it would grant at
        // once without the writes taken from now on without the check. So
        // they wait for every replica ([`lowering_done`]), when a vouch for
        // more than 0 ever went out. Raised again before that: nothing was
        // taken without the check.
        let master = !ctx.get_flags().contains(ContextFlags::SLAVE);
        ZERO_PENDING.store(master && r == 0 && VOUCHED_OUT.load(Relaxed), Relaxed);
        ZERO_ANNOUNCED_AT.store(u64::MAX, Relaxed);
        ZERO_TARGET.store(u64::MAX, Relaxed);
        bump();
        announce_soon(ctx);
    } else if ANNOUNCED_WAIT.load(Relaxed) != u64::MAX
        && ANNOUNCED_WAIT.load(Relaxed) != config_file::new_disk_wait()
    {
        // A lower explicit `restart-grace-ms` shortens the new-disk wait:
        // the replicas learn it at once, not at the next lock write.
        announce_soon(ctx);
    }
}

/// `REDLOCK.REPLICAS`: this master's replicas as `[ip:port, online 0|1]`
/// pairs; `REDLOCK.REPLICAS FORGET ip:port`: drops one that is not online
/// (1), or says it was not known (0).
pub fn replicas_command(ctx: &Context, args: &[&[u8]]) -> Result<ReplicasReply, CommandError> {
    scan(ctx);
    let online = online_now();
    // Connected in any state (a full sync in progress too): named both ways,
    // among all lines and among the online ones.
    let all_lines: Vec<String> = replica_lines().into_iter().map(|(id, _, _)| id).collect();
    let connected: Vec<String> = replica_identities(&all_lines)
        .into_iter()
        .chain(online.iter().cloned())
        .collect();
    match args {
        [_] => Ok(ReplicasReply::List(
            state()
                .replicas
                .iter()
                .map(|id| (id.clone(), online.contains(id)))
                .chain(online.iter().filter(|id| !listens(id)).map(|id| (id.clone(), true)))
                .collect(),
        )),
        [_, sub, id] if sub.eq_ignore_ascii_case(b"FORGET") => {
            let id = String::from_utf8_lossy(id).into_owned();
            if connected.contains(&id) {
                return Err(CommandError::Replicas(format!(
                    "{id} is connected: only a replica that is gone for good (removed from Sentinel, shut down) may be forgotten"
                )));
            }
            let mut st = state();
            if !st.replicas.remove(&id) {
                return Ok(ReplicasReply::Forgot(false));
            }
            let unlisted = UNLISTED.lock().unwrap_or_else(|p| p.into_inner()).len();
            KNOWN.store(st.replicas.len() + unlisted, Relaxed);
            let copy = st.clone();
            drop(st);
            RECORD_FAILED.store(!save(Some(ctx), &copy), Relaxed);
            ctx.log_notice(&format!("forgot replica {id} (REDLOCK.REPLICAS FORGET)"));
            Ok(ReplicasReply::Forgot(true))
        }
        [_, sub, ..] => Err(CommandError::Replicas(format!(
            "unknown REDLOCK.REPLICAS subcommand '{}' (REDLOCK.REPLICAS or REDLOCK.REPLICAS FORGET ip:port)",
            String::from_utf8_lossy(sub)
        ))),
        [] => Err(CommandError::WrongArity("redlock.replicas")),
    }
}

/// What `REDLOCK.REPLICAS` answers.
pub enum ReplicasReply {
    /// The replica set, each with whether it is online.
    List(Vec<(String, bool)>),
    /// Whether FORGET removed the replica.
    Forgot(bool),
}

/// Figures for `INFO redlock`.
pub struct Figures {
    /// R.
    pub r: u64,
    /// Replicas of this master's life.
    pub known: u64,
    /// Replicas online at the last scan.
    pub online: u64,
    /// As a replica: current with its master.
    pub current: bool,
    /// The R the master last vouched.
    pub master_r: u64,
    /// What is left of the master's hold, in ms.
    pub hold_left_ms: u64,
    /// The new-disk wait the master vouched (as a replica).
    pub master_new_disk_wait_ms: u64,
    /// This node's own new-disk wait (what it announces as a master).
    pub new_disk_wait_ms: u64,
    /// The last promotion's outcome (0 none, 1 at once, 2 rest, 3 guard).
    pub last_promotion: u64,
    /// R was lowered to 0 and lock writes still wait for a replica to apply
    /// it (1), or not (0).
    pub lowering: u64,
}

/// The figures now.
pub fn figures(now: MonoMillis) -> Figures {
    Figures {
        r: config::sync_replicas(),
        known: KNOWN.load(Relaxed) as u64,
        online: ONLINE.load(Relaxed) as u64,
        current: CURRENT.load(Relaxed),
        master_r: VOUCHED_R.load(Relaxed),
        hold_left_ms: HOLD_UNTIL.load(Relaxed).saturating_sub(now),
        master_new_disk_wait_ms: VOUCHED_WAIT.load(Relaxed),
        new_disk_wait_ms: config_file::new_disk_wait(),
        last_promotion: u64::from(LAST_PROMOTION.load(Relaxed)),
        lowering: u64::from(lowering_waiting().is_some()),
    }
}
