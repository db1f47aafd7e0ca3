//! Fenced writes (DESIGN §10): the Redis glue of `REDLOCK.FENCED`,
//! `REDLOCK.GUARD`, `REDLOCK.GUARDINFO` and `REDLOCK.APPLY guard g1 …`. The
//! rule itself is in [`crate::core::fence_rule`], the record in [`crate::host::fence_type`].
//!
//! `REDLOCK.FENCED guard lock token cmd [arg …]`, in this order:
//! 1. parse and screen (arity, token, lock, the inner command's name, its
//!    keys: at least one, never the guard), refuse on a replica;
//! 2. read the guard: another type is WRONGTYPE, another lock an error, a
//!    lower token STALE. Steps 1 and 2 change nothing;
//! 3. run the inner command with `RedisModule_Call` as the calling user
//!    (`C`: its ACL rights; `S`: script rules, so no MULTI, admin or
//!    blocking command; `M`: its OOM rule; `0`: the caller's RESP version;
//!    `!`: its effect, as Redis rewrote it, is replicated). A NULL reply
//!    means Redis refused it before it ran: the error is passed on and the
//!    guard stays;
//! 4. once it ran (an error reply included: an error may still carry a
//!    partial effect, and raising is always safe), raise the guard when the
//!    token is higher or the guard new, and replicate its exact state as
//!    `REDLOCK.APPLY guard g1 highest lock`. The inner effect and the APPLY
//!    both land in the command's pending propagation, which Redis wraps in
//!    one MULTI/EXEC: no replica or AOF prefix holds data without its guard.
//!    Nothing fallible sits between 3 and 4;
//! 5. reply the inner reply unchanged.

use std::ffi::{CStr, CString};
use std::os::raw::{c_int, c_longlong};
#[cfg(feature = "test-hooks")]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::{raw, ContextFlags};
use smallvec::SmallVec;

use crate::core::error::CommandError;
use crate::core::fence_rule::{self, FenceError, GuardState, Pass};
use crate::host::clock::wall_now_us;
use crate::host::fence_type::{self, Found, GuardKey};
use crate::host::ffi::{self, Call, Reply};

/// Inner keys: (position within the inner command, module key flags).
type KeyList = SmallVec<[(usize, c_int); 4]>;

/// Counters shown by `INFO redlock`.
pub mod stats {
    use std::sync::atomic::AtomicU64;

    /// FENCED calls whose inner command ran.
    pub static FENCED_OK: AtomicU64 = AtomicU64::new(0);
    /// FENCED calls refused as STALE.
    pub static FENCED_STALE: AtomicU64 = AtomicU64::new(0);
    /// FENCED calls refused for any other reason before the inner command ran.
    pub static FENCED_REFUSED: AtomicU64 = AtomicU64::new(0);
    /// GUARD calls that passed.
    pub static GUARD_OK: AtomicU64 = AtomicU64::new(0);
    /// GUARD calls refused as STALE.
    pub static GUARD_STALE: AtomicU64 = AtomicU64::new(0);
    /// Guards raised (FENCED and GUARD).
    pub static RAISED: AtomicU64 = AtomicU64::new(0);
}

/// Test builds: the check (`false`: never STALE) and the raise (`false`:
/// never raised), turned off for the safety suite's mutants.
#[cfg(feature = "test-hooks")]
static CHECK_ON: AtomicBool = AtomicBool::new(true);
#[cfg(feature = "test-hooks")]
static RAISE_ON: AtomicBool = AtomicBool::new(true);

/// Whether the token check is on (always, outside test builds).
fn check_on() -> bool {
    #[cfg(feature = "test-hooks")]
    return CHECK_ON.load(Relaxed);
    #[cfg(not(feature = "test-hooks"))]
    true
}

/// Whether raising is on (always, outside test builds).
fn raise_on() -> bool {
    #[cfg(feature = "test-hooks")]
    return RAISE_ON.load(Relaxed);
    #[cfg(not(feature = "test-hooks"))]
    true
}

/// Key flags of the guard in FENCED and GUARD (as INCR's: read, maybe
/// created or raised; Redis allows one of INSERT/UPDATE/DELETE).
pub const GUARD_KEY_FLAGS: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;

/// `RedisModule_Call` formats: `SPREAD` times `s` (one per argument)
/// before the flags, so the format for `n` arguments starts `SPREAD - n`
/// bytes in. `M` exists from Redis 7.0.1 on, and FENCED runs from 7.0.6 on.
const SPREAD: usize = 16;
static FORMAT: &[u8] = b"ssssssssssssssss!CSM0\0";
const _: () = assert!(FORMAT.len() == SPREAD + 6);

/// The format for `n` (1..=`SPREAD`) arguments passed one by one, or for a
/// vector (`v`) when `n` is larger. One `s` per argument saves Redis a
/// reallocation of its argument vector on every call.
fn call_format(n: usize) -> *const std::os::raw::c_char {
    match n {
        1..=SPREAD => FORMAT[SPREAD - n..].as_ptr().cast(),
        _ => c"v!CSM0".as_ptr(),
    }
}

/// Test builds: a server version FENCED acts on instead of the real one
/// (0: the real one), set by `REDLOCK.TESTHOOK SERVER-VERSION n`.
#[cfg(feature = "test-hooks")]
static VERSION_SEEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The server's version as `0x00MMmmpp` (0 when Redis cannot say).
fn server_version() -> u32 {
    #[cfg(feature = "test-hooks")]
    {
        let seen = VERSION_SEEN.load(Relaxed);
        if seen != 0 {
            return seen;
        }
    }
    // SAFETY: reading a function pointer Redis filled in at load.
    unsafe { raw::RedisModule_GetServerVersion }
        // SAFETY: a plain getter.
        .map(|f| unsafe { f() } as u32)
        .unwrap_or(0)
}

/// FENCED's command flags: not `deny-oom`, the inner command's own OOM
/// rule applies (`M`).
pub const FENCED_FLAGS: &std::ffi::CStr = c"write getkeys-api";

fn arg_ptr(call: &Call, i: usize) -> Option<*mut raw::RedisModuleString> {
    (i < call.args.len() && !call.argv().is_null())
        // SAFETY: argv has args.len() entries.
        .then(|| unsafe { *call.argv().add(i) })
}

/// Refuses calls on a replica and from the replication stream or the AOF
/// (FENCED and GUARD never enter them; their effects do).
fn refuse_on_replica(flags: &ContextFlags, name: &'static str) -> Result<(), FenceError> {
    if flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING | ContextFlags::SLAVE) {
        return Err(FenceError::OnReplica(name));
    }
    Ok(())
}

/// Reads the guard and checks the token against it (with the check off, in
/// test builds, a stale token passes without a raise). Also says whether
/// the guard is new. The record is looked at in place, not copied.
fn check_guard(call: &Call, head: &fence_rule::Head) -> Result<(Pass, bool), CommandError> {
    let name = arg_ptr(call, 1).ok_or(CommandError::WrongArity("redlock.fenced"))?;
    let key = GuardKey::open(call.raw(), name, false);
    let verdict = key
        .peek(|current| {
            (
                fence_rule::check(head.guard, current, head.lock, head.token),
                current.is_none(),
            )
        })
        .map_err(|()| CommandError::WrongType)?;
    match verdict {
        (Err(FenceError::Stale { .. }), new) if !check_on() => Ok((Pass::Equal, new)),
        (pass, new) => Ok((pass?, new)),
    }
}

/// Raises the guard after a passing call: stores, signals (WATCH), raises
/// the `redlock.guard` keyspace event and replicates the exact state.
/// Returns the guard's highest afterwards.
fn raise(call: &Call, head: &fence_rule::Head, pass: Pass) -> Result<u64, CommandError> {
    // An equal token changes nothing: the key is not even opened.
    if pass == Pass::Equal {
        return Ok(head.token);
    }
    let name = arg_ptr(call, 1).ok_or(CommandError::WrongArity("redlock.fenced"))?;
    let mut key = GuardKey::open(call.raw(), name, true);
    let current = match key.get() {
        Found::Missing => None,
        Found::Guard(g) => Some(g),
        // Only a command that wrote through keys it did not declare gets here.
        Found::Other => {
            return Err(CommandError::Internal(
                "REDLOCK.FENCED: the guard key was replaced",
            ))
        }
    };
    let before = current.as_ref().map(|g| g.highest);
    // Test builds: the raise-off mutant leaves the guard as it was.
    if !raise_on() {
        return Ok(before.unwrap_or(0));
    }
    let next = fence_rule::raised(current.as_ref(), head.lock, head.token);
    if Some(next.highest) == before {
        return Ok(next.highest);
    }
    let highest = next.highest;
    if !key.put(next.clone()) {
        return Err(CommandError::Internal("REDLOCK.FENCED: storing the guard"));
    }
    drop(key);
    stats_bump(&stats::RAISED);
    replicate(call, name, &next);
    ffi::signal_modified(call, c"redlock.guard");
    Ok(highest)
}

fn replicate(call: &Call, name: *mut raw::RedisModuleString, state: &GuardState) {
    if crate::host::mutant::on(crate::host::mutant::Mutant::SkipReplication) {
        return;
    }
    if !crate::host::replication::needed(&call.ctx) {
        return;
    }
    // SAFETY: ctx and name belong to the command invocation in progress.
    unsafe { fence_type::replicate(call.raw(), name, state) };
}

fn stats_bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

fn count(
    result: &Result<Reply, CommandError>,
    ok: &AtomicU64,
    stale: &AtomicU64,
    refused: Option<&AtomicU64>,
) {
    match result {
        Ok(_) => stats_bump(ok),
        Err(CommandError::Fenced(FenceError::Stale { .. })) => stats_bump(stale),
        Err(_) => {
            if let Some(r) = refused {
                stats_bump(r);
            }
        }
    }
}

/// `REDLOCK.FENCED guard lock token command [arg ...]`
pub fn fenced(call: &Call) -> Result<Reply, CommandError> {
    let result = run_fenced(call);
    count(
        &result,
        &stats::FENCED_OK,
        &stats::FENCED_STALE,
        Some(&stats::FENCED_REFUSED),
    );
    result
}

fn run_fenced(call: &Call) -> Result<Reply, CommandError> {
    if call.args.len() < 5 {
        return Err(CommandError::WrongArity("redlock.fenced"));
    }
    let version = server_version();
    if !fence_rule::runs_as_caller(version) {
        return Err(FenceError::ServerTooOld(fence_rule::version_text(version)).into());
    }
    let flags = call.ctx.get_flags();
    refuse_on_replica(&flags, "REDLOCK.FENCED")?;
    let head = fence_rule::parse_head(&call.args, wall_now_us())?;
    let inner = &call.args[4..];
    fence_rule::screen_inner(inner)?;
    let name = inner[0];
    let keys = inner_keys(call)?;
    let key_bytes: Option<SmallVec<[&[u8]; 4]>> = keys.as_ref().map(|k| {
        k.iter()
            .filter_map(|&(pos, _)| inner.get(pos))
            .copied()
            .collect()
    });
    fence_rule::screen_keys(name, head.guard, key_bytes.as_deref())?;
    let (pass, new) = check_guard(call, &head)?;
    if new && flags.contains(ContextFlags::OOM) {
        return Err(FenceError::OutOfMemory(fence_rule::shown(head.guard)).into());
    }
    // The name as a C string, on the stack when short (no allocation).
    let mut short = [0u8; 64];
    let long;
    let cmd: &CStr = if name.len() < short.len() {
        short[..name.len()].copy_from_slice(name);
        CStr::from_bytes_with_nul(&short[..=name.len()])
            .map_err(|_| fence_rule::inner_error(name, "the command name contains a NUL byte"))?
    } else {
        long = CString::new(name)
            .map_err(|_| fence_rule::inner_error(name, "the command name contains a NUL byte"))?;
        &long
    };
    let reply = run_inner(call, cmd).map_err(|errno| fence_rule::refusal(name, errno))?;
    // The inner command ran: nothing below may fail before the reply is
    // passed on (a raise error is the one case left, see `raise`).
    let raised = raise(call, &head, pass);
    // SAFETY: reply is a live call reply owned here; freed once.
    unsafe {
        if raised.is_ok() {
            if let Some(pass_on) = raw::RedisModule_ReplyWithCallReply {
                pass_on(call.raw(), reply);
            }
        }
        if let Some(free) = raw::RedisModule_FreeCallReply {
            free(reply);
        }
    }
    raised.map(|_| Reply::Passed)
}

/// Runs the inner command (`argv[4..]`); `Err(errno)` when Redis refused it
/// before it ran.
fn run_inner(call: &Call, cmd: &CStr) -> Result<*mut raw::RedisModuleCallReply, i32> {
    let Some(rm_call) = (unsafe { raw::RedisModule_Call }) else {
        return Err(libc::ENOSYS);
    };
    let n = call.args.len() - 5;
    let mut a = [std::ptr::null_mut::<raw::RedisModuleString>(); SPREAD];
    if n <= SPREAD {
        for (i, slot) in a.iter_mut().take(n).enumerate() {
            // SAFETY: argv has args.len() = n + 5 entries.
            *slot = unsafe { *call.argv().add(5 + i) };
        }
    }
    let (ctx, name, fmt) = (call.raw(), cmd.as_ptr(), call_format(n));
    /// One variadic call with the arguments `a[0..n]` spread out.
    macro_rules! spread {
        ($($i:literal)*) => { rm_call(ctx, name, fmt, $(a[$i]),*) };
    }
    // SAFETY: the format has one `s` per argument passed (a live string of
    // this call), or `v` with the vector and its length (size_t), which
    // Redis copies; the flags after `!` take no arguments.
    unsafe {
        *libc::__errno_location() = 0;
        let reply = match n {
            1 => spread!(0),
            2 => spread!(0 1),
            3 => spread!(0 1 2),
            4 => spread!(0 1 2 3),
            5 => spread!(0 1 2 3 4),
            6 => spread!(0 1 2 3 4 5),
            7 => spread!(0 1 2 3 4 5 6),
            8 => spread!(0 1 2 3 4 5 6 7),
            9 => spread!(0 1 2 3 4 5 6 7 8),
            10 => spread!(0 1 2 3 4 5 6 7 8 9),
            11 => spread!(0 1 2 3 4 5 6 7 8 9 10),
            12 => spread!(0 1 2 3 4 5 6 7 8 9 10 11),
            13 => spread!(0 1 2 3 4 5 6 7 8 9 10 11 12),
            14 => spread!(0 1 2 3 4 5 6 7 8 9 10 11 12 13),
            15 => spread!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
            16 => spread!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15),
            _ => rm_call(ctx, name, fmt, call.argv().add(5), n as libc::size_t),
        };
        if reply.is_null() {
            return Err(*libc::__errno_location());
        }
        Ok(reply)
    }
}

/// The inner command's keys as (position within the inner command, module
/// key flags, here always 0: not asked for); `None` when it has none. Unknown commands and wrong arity are
/// refused here.
fn inner_keys(call: &Call) -> Result<Option<KeyList>, FenceError> {
    let name = call.args.get(4).copied().unwrap_or_default();
    let argc = call.args.len();
    // SAFETY: argv has argc >= 5 entries.
    let found = unsafe { command_keys(call.raw(), call.argv().add(4), (argc - 4) as c_int, false) };
    match found {
        Ok(keys) if keys.is_empty() => Ok(None),
        Ok(keys) => Ok(Some(keys)),
        Err(errno) => Err(fence_rule::refusal(name, errno)),
    }
}

/// `RedisModule_GetCommandKeysWithFlags` over `argv[..argc]`: the key
/// positions and flags, or the errno of a refusal (unknown command, wrong
/// arity).
///
/// # Safety
/// `argv` must hold `argc` valid strings.
unsafe fn command_keys(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    with_flags: bool,
) -> Result<KeyList, i32> {
    let Some(get) = raw::RedisModule_GetCommandKeysWithFlags else {
        return Err(libc::ENOSYS);
    };
    let mut n: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    let out_flags: *mut *mut c_int = if with_flags {
        &mut flags
    } else {
        std::ptr::null_mut()
    };
    *libc::__errno_location() = 0;
    let positions = get(ctx, argv, argc, &mut n, out_flags);
    if positions.is_null() {
        let errno = *libc::__errno_location();
        return if errno == 0 {
            Ok(KeyList::new())
        } else {
            Err(errno)
        };
    }
    let mut keys = KeyList::new();
    for i in 0..n.max(0) as usize {
        let pos = *positions.add(i);
        let f = if flags.is_null() { 0 } else { *flags.add(i) };
        if pos >= 0 {
            keys.push((pos as usize, f));
        }
    }
    if let Some(free) = raw::RedisModule_Free {
        free(positions.cast());
        if !flags.is_null() {
            free(flags.cast());
        }
    }
    Ok(keys)
}

/// Answers a key-position request for FENCED (COMMAND GETKEYS, ACL key
/// checks, cluster routing): the guard, then every key of the inner command
/// with its own flags.
///
/// # Safety
/// Called from the command entry with Redis's arguments.
pub unsafe fn report_keys(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) {
    let at = |pos: c_int, flags: c_int| {
        if let Some(with_flags) = raw::RedisModule_KeyAtPosWithFlags {
            with_flags(ctx, pos, flags);
        } else if let Some(plain) = raw::RedisModule_KeyAtPos {
            plain(ctx, pos);
        }
    };
    if argc < 2 {
        return;
    }
    at(1, GUARD_KEY_FLAGS as c_int);
    if argc < 5 {
        return;
    }
    // No nesting: a REDLOCK.* inner command is refused anyway, and asking
    // Redis for its keys would come back here.
    let mut len = 0usize;
    let name = raw::RedisModule_StringPtrLen.map(|f| f(*argv.add(4), &mut len));
    if let Some(p) = name.filter(|p| !p.is_null()) {
        let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
        if bytes.len() >= 8 && bytes[..8].eq_ignore_ascii_case(b"redlock.") {
            return;
        }
    }
    if let Ok(keys) = command_keys(ctx, argv.add(4), argc - 4, true) {
        for (pos, flags) in keys {
            at(pos as c_int + 4, flags);
        }
    }
}

/// Whether the current call only asks for key positions.
///
/// # Safety
/// `ctx` is the context Redis passed to the command.
pub unsafe fn is_keys_request(ctx: *mut raw::RedisModuleCtx) -> bool {
    raw::RedisModule_IsKeysPositionRequest.is_some_and(|f| f(ctx) != 0)
}

/// `REDLOCK.GUARD guard lock token`: check and raise only; replies the
/// guard's highest after the call.
pub fn guard(call: &Call) -> Result<Reply, CommandError> {
    let result = run_guard(call);
    count(&result, &stats::GUARD_OK, &stats::GUARD_STALE, None);
    result
}

fn run_guard(call: &Call) -> Result<Reply, CommandError> {
    if call.args.len() != 4 {
        return Err(CommandError::WrongArity("redlock.guard"));
    }
    let flags = call.ctx.get_flags();
    refuse_on_replica(&flags, "REDLOCK.GUARD")?;
    let head = fence_rule::parse_head(&call.args, wall_now_us())?;
    let (pass, new) = check_guard(call, &head)?;
    if new && flags.contains(ContextFlags::OOM) {
        return Err(FenceError::OutOfMemory(fence_rule::shown(head.guard)).into());
    }
    let highest = raise(call, &head, pass)?;
    Ok(Reply::Integer(highest))
}

/// `REDLOCK.GUARDINFO guard`: `lock` and `highest` as a map (a flat array
/// for RESP2 clients); nil when the key is missing.
pub fn guard_info(call: &Call) -> Result<Reply, CommandError> {
    if call.args.len() != 2 {
        return Err(CommandError::WrongArity("redlock.guardinfo"));
    }
    let name = arg_ptr(call, 1).ok_or(CommandError::WrongArity("redlock.guardinfo"))?;
    let state = match GuardKey::open(call.raw(), name, false).get() {
        Found::Missing => return Ok(Reply::Nil),
        Found::Other => return Err(CommandError::WrongType),
        Found::Guard(g) => g,
    };
    let ctx = call.raw();
    raw::reply_with_map(ctx, 2);
    raw::reply_with_string_buffer(ctx, c"lock".as_ptr(), 4);
    raw::reply_with_string_buffer(ctx, state.lock.as_ptr().cast(), state.lock.len());
    raw::reply_with_string_buffer(ctx, c"highest".as_ptr(), 7);
    raw::reply_with_long_long(ctx, state.highest as c_longlong);
    Ok(Reply::Passed)
}

/// `REDLOCK.APPLY …`: the guard form `REDLOCK.APPLY guard g1 highest lock`
/// here, every other form to [`crate::host::commands::apply`]. Internal: only from
/// a master's replication stream or while loading the AOF.
pub fn apply(call: &Call) -> Result<Reply, CommandError> {
    let Some(parsed) = fence_type::parse_apply(&call.args) else {
        return crate::host::commands::apply(call);
    };
    let flags = call.ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(CommandError::InternalOnly);
    }
    let state = parsed.map_err(|e| CommandError::Fenced(FenceError::Refused(e.into())))?;
    let name = arg_ptr(call, 1).ok_or(CommandError::WrongArity("redlock.apply"))?;
    {
        let mut key = GuardKey::open(call.raw(), name, true);
        if let Found::Other = key.get() {
            return Err(CommandError::WrongType);
        }
        if !key.put(state.clone()) {
            return Err(CommandError::Internal("REDLOCK.APPLY: storing the guard"));
        }
    }
    ffi::signal_modified(call, c"redlock.apply");
    replicate(call, name, &state);
    Ok(Reply::Ok)
}

/// Test builds: `FENCED-CHECK 0|1` and `FENCED-RAISE 0|1` (the safety
/// suite's mutants); every other hook goes to [`crate::host::commands::test_hook`].
#[cfg(feature = "test-hooks")]
pub fn test_hook(call: &Call) -> Result<Reply, CommandError> {
    if let [sub, version] = call.args.get(1..).unwrap_or_default() {
        if sub.eq_ignore_ascii_case(b"SERVER-VERSION") {
            let version = std::str::from_utf8(version)
                .ok()
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or(CommandError::NotAnInteger(
                    "server version (0x00MMmmpp as an integer)",
                ))?;
            VERSION_SEEN.store(version, Relaxed);
            return Ok(Reply::Ok);
        }
    }
    let switch = match call.args.get(1..).unwrap_or_default() {
        [sub, flag] if sub.eq_ignore_ascii_case(b"FENCED-CHECK") => Some((&CHECK_ON, *flag)),
        [sub, flag] if sub.eq_ignore_ascii_case(b"FENCED-RAISE") => Some((&RAISE_ON, *flag)),
        _ => None,
    };
    let Some((target, flag)) = switch else {
        return crate::host::commands::test_hook(call);
    };
    let on = match flag {
        b"1" => true,
        b"0" => false,
        _ => return Err(CommandError::NotAnInteger("FENCED hook flag (0 or 1)")),
    };
    target.store(on, Relaxed);
    Ok(Reply::Ok)
}

/// The fenced-write fields of `INFO redlock`.
///
/// # Safety
/// `ctx` is the info context Redis passed in; `add_u64` its field adder.
pub unsafe fn write_info(
    ctx: *mut raw::RedisModuleInfoCtx,
    add_u64: unsafe extern "C" fn(
        *mut raw::RedisModuleInfoCtx,
        *const std::os::raw::c_char,
        std::os::raw::c_ulonglong,
    ) -> c_int,
) {
    let fields: [(&std::ffi::CStr, u64); 7] = [
        (c"fenced_ok", stats::FENCED_OK.load(Relaxed)),
        (c"fenced_stale", stats::FENCED_STALE.load(Relaxed)),
        (c"fenced_refused", stats::FENCED_REFUSED.load(Relaxed)),
        (c"guard_ok", stats::GUARD_OK.load(Relaxed)),
        (c"guard_stale", stats::GUARD_STALE.load(Relaxed)),
        (c"guard_raises", stats::RAISED.load(Relaxed)),
        (c"guards", fence_type::live()),
    ];
    for (name, value) in fields {
        add_u64(ctx, name.as_ptr(), value);
    }
}

/// Declares FENCED's key specs: the guard (argument 1), and the inner
/// command's keys (from argument 5 on), marked incomplete with variable
/// flags so Redis asks the module ([`report_keys`]) for the exact keys and
/// their flags (COMMAND GETKEYS, ACL key patterns, cluster routing).
/// Servers without `RedisModule_SetCommandInfo` keep the `(1, 1, 1)` range
/// and the getkeys API.
pub fn set_fenced_key_specs(ctx: &redis_module::Context) -> Result<(), String> {
    // SAFETY: reading function pointers Redis filled in at module load.
    let (Some(get), Some(set)) = (unsafe { raw::RedisModule_GetCommand }, unsafe {
        raw::RedisModule_SetCommandInfo
    }) else {
        return Ok(());
    };
    // SAFETY: called from OnLoad after FENCED was registered.
    let command = unsafe { get(ctx.ctx, c"REDLOCK.FENCED".as_ptr()) };
    if command.is_null() {
        return Err("REDLOCK.FENCED is not registered".into());
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: plain C structs; all-zero is "unset" and ends the array.
    let mut specs: [raw::RedisModuleCommandKeySpec; 3] = unsafe { std::mem::zeroed() };
    let index = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    let range = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    specs[0].flags = u64::from(GUARD_KEY_FLAGS);
    specs[0].begin_search_type = index;
    specs[0].bs.index.pos = 1;
    specs[0].find_keys_type = range;
    specs[0].fk.range.lastkey = 0;
    specs[0].fk.range.keystep = 1;
    specs[1].flags = u64::from(
        raw::REDISMODULE_CMD_KEY_RW
            | raw::REDISMODULE_CMD_KEY_UPDATE
            | raw::REDISMODULE_CMD_KEY_INCOMPLETE
            | raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS,
    );
    specs[1].begin_search_type = index;
    specs[1].bs.index.pos = 5;
    specs[1].find_keys_type = range;
    specs[1].fk.range.lastkey = -1;
    specs[1].fk.range.keystep = 1;
    // SAFETY: as above.
    let mut info: raw::RedisModuleCommandInfo = unsafe { std::mem::zeroed() };
    info.version = &version;
    info.arity = -5;
    info.key_specs = specs.as_mut_ptr();
    // SAFETY: command came from GetCommand; info outlives the call, which copies it.
    if unsafe { set(command, &info) } == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err("could not set the key specs of REDLOCK.FENCED".into())
    }
}

/// The entry point of `REDLOCK.FENCED`: a key-position request is answered
/// by [`report_keys`], a call runs [`fenced`] through [`ffi::dispatch`].
pub(crate) extern "C" fn fenced_entry(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: ctx, argv and argc are what Redis passed to the command.
    if unsafe { is_keys_request(ctx) } {
        let _ = std::panic::catch_unwind(|| unsafe { report_keys(ctx, argv, argc) });
        return raw::REDISMODULE_OK as c_int;
    }
    ffi::dispatch(ctx, argv, argc, "REDLOCK.FENCED", fenced)
}
