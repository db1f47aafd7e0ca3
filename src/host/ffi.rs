//! The boundary with Redis: command registration, the panic guard, argument
//! decoding, reply writing and effect replication.

use std::ffi::CStr;
use std::os::raw::{c_int, c_long, c_longlong};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, Context};
use smallvec::SmallVec;

use crate::core::error::CommandError;
use crate::core::lock::Inspection;

/// What a command answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// An integer.
    Integer(u64),
    /// A RESP nil.
    Nil,
    /// `OK`.
    Ok,
    /// INSPECT's map (a flat array for RESP2 clients).
    Inspect(Inspection),
    /// No reply now: the client was blocked and is answered later.
    Blocked,
    /// The handler wrote the reply itself (a fenced command's inner reply).
    Passed,
    /// An array of `[name, integer]` pairs (`REDLOCK.REPLICAS`).
    Pairs(Vec<(String, u64)>),
}

/// One command invocation: the context, the argument bytes and the raw key name.
pub struct Call<'a> {
    /// The command's context.
    pub ctx: Context,
    /// Every argument, the command name first.
    pub args: SmallVec<[&'a [u8]; 8]>,
    argv: *mut *mut raw::RedisModuleString,
}

impl Call<'_> {
    /// The raw key name (the first argument after the command name).
    pub fn key(&self) -> Option<*mut raw::RedisModuleString> {
        if self.args.len() < 2 || self.argv.is_null() {
            return None;
        }
        // SAFETY: argv has at least args.len() entries.
        Some(unsafe { *self.argv.add(1) })
    }

    /// The raw argument vector (as many entries as `args`).
    pub fn argv(&self) -> *mut *mut raw::RedisModuleString {
        self.argv
    }

    /// The raw context pointer.
    pub fn raw(&self) -> *mut raw::RedisModuleCtx {
        self.ctx.ctx
    }
}

/// A command handler.
pub type Handler = fn(&Call) -> Result<Reply, CommandError>;

/// Runs `handler` for one invocation: a panic becomes an `ERR` reply instead
/// of taking the server down, and every error is written by [`write_reply`].
pub fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    name: &'static str,
    handler: Handler,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let call = Call {
            ctx: Context::new(ctx),
            args: decode_args(argv, argc),
            argv,
        };
        handler(&call)
    }));
    let reply = outcome.unwrap_or(Err(CommandError::Internal(name)));
    write_reply(ctx, reply);
    raw::REDISMODULE_OK as c_int
}

fn decode_args<'a>(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> SmallVec<[&'a [u8]; 8]> {
    let mut args = SmallVec::new();
    if argv.is_null() || argc <= 0 {
        return args;
    }
    let Some(ptr_len) = (unsafe { raw::RedisModule_StringPtrLen }) else {
        return args;
    };
    for i in 0..argc as usize {
        let mut len = 0usize;
        // SAFETY: Redis passes argc valid strings that outlive the call.
        let bytes = unsafe {
            let p = ptr_len(*argv.add(i), &mut len);
            if p.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(p.cast::<u8>(), len)
            }
        };
        args.push(bytes);
    }
    args
}

fn write_reply(ctx: *mut raw::RedisModuleCtx, reply: Result<Reply, CommandError>) {
    match reply {
        Ok(Reply::Integer(n)) => {
            raw::reply_with_long_long(ctx, n as c_longlong);
        }
        Ok(Reply::Nil) => {
            raw::reply_with_null(ctx);
        }
        Ok(Reply::Ok) => {
            raw::reply_with_simple_string(ctx, c"OK".as_ptr());
        }
        Ok(Reply::Blocked | Reply::Passed) => {}
        Ok(Reply::Pairs(pairs)) => {
            raw::reply_with_array(ctx, pairs.len() as c_long);
            for (name, value) in pairs {
                raw::reply_with_array(ctx, 2);
                raw::reply_with_string_buffer(ctx, name.as_ptr().cast(), name.len());
                raw::reply_with_long_long(ctx, value as c_longlong);
            }
        }
        Ok(Reply::Inspect(i)) => {
            // A map for RESP3 clients; Redis flattens it to an array for RESP2.
            raw::reply_with_map(ctx, 3);
            reply_field(ctx, c"held", i64::from(i.held));
            reply_field(
                ctx,
                c"pttl",
                i.pttl.map_or(-1, |ms| ms.min(i64::MAX as u64) as i64),
            );
            reply_field(ctx, c"token", i.token as i64);
        }
        Err(error) => {
            let text = error.to_string().replace(['\r', '\n', '\0'], " ");
            let text = std::ffi::CString::new(text).unwrap_or_default();
            raw::reply_with_error(ctx, text.as_ptr());
        }
    }
}

fn reply_field(ctx: *mut raw::RedisModuleCtx, name: &CStr, value: i64) {
    raw::reply_with_string_buffer(ctx, name.as_ptr(), name.to_bytes().len());
    raw::reply_with_long_long(ctx, value);
}

/// Carries the resulting state of the call's key to replicas and the AOF
/// as `REDLOCK.APPLY` (see [`crate::host::persist`]). `state` is only built (and
/// the clocks it needs only read) when the effect is replicated.
pub fn replicate_state(call: &Call, state: impl FnOnce() -> crate::host::persist::Persisted) {
    if crate::host::mutant::on(crate::host::mutant::Mutant::SkipReplication) {
        return;
    }
    let Some(key) = call.key() else {
        return;
    };
    if !crate::host::replication::needed(&call.ctx) {
        return;
    }
    let state = state();
    // SAFETY: ctx and key belong to the command invocation in progress.
    unsafe { crate::host::persist::replicate(call.raw(), key, &state) };
}

/// Passes the current command on to this node's AOF (and replicas) as it
/// came: the node-wide `REDLOCK.APPLY` forms, which carry no clock reading.
pub fn replicate_verbatim(call: &Call) {
    if !crate::host::replication::needed(&call.ctx) {
        return;
    }
    // SAFETY: ctx belongs to the command invocation in progress.
    unsafe {
        if let Some(verbatim) = raw::RedisModule_ReplicateVerbatim {
            verbatim(call.raw());
        }
    }
}

/// Hides argument `pos` of the current command from `MONITOR`, `SLOWLOG`
/// and the other command logs (Redis 7.0+; a no-op when unavailable).
pub fn redact(call: &Call, pos: usize) {
    if pos >= call.args.len() {
        return;
    }
    // SAFETY: ctx belongs to the command invocation in progress and `pos`
    // is within its arguments.
    unsafe {
        if let Some(redact) = raw::RedisModule_RedactClientCommandArgument {
            redact(call.raw(), pos as c_int);
        }
    }
}

/// Signals a changed key (for `WATCH` and client-side caching) and raises
/// the keyspace event `event` (class `d`, module events).
pub fn signal_modified(call: &Call, event: &CStr) {
    let Some(name) = call.key() else {
        return;
    };
    // SAFETY: ctx and name belong to the command invocation in progress.
    unsafe {
        if let Some(signal) = raw::RedisModule_SignalModifiedKey {
            signal(call.raw(), name);
        }
        if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
            notify(
                call.raw(),
                raw::NotifyEvent::MODULE.bits(),
                event.as_ptr(),
                name,
            );
        }
    }
}

/// Declares an `extern "C"` command entry point that runs a handler through
/// [`dispatch`].
#[macro_export]
macro_rules! command_entry {
    ($entry:ident, $name:literal, $handler:path) => {
        extern "C" fn $entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            $crate::host::ffi::dispatch(ctx, argv, argc, $name, $handler)
        }
    };
}

/// The signature Redis calls a command with.
pub type CommandFn =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Registers one command with the key position `(first, last, step)`.
pub fn register(
    ctx: &Context,
    name: &CStr,
    entry: CommandFn,
    flags: &CStr,
    keys: (c_int, c_int, c_int),
) -> Result<(), String> {
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return Err("RedisModule_CreateCommand is not available".into());
    };
    // SAFETY: called from OnLoad with a valid context; the strings are static.
    let status = unsafe {
        create(
            ctx.ctx,
            name.as_ptr(),
            Some(entry),
            flags.as_ptr(),
            keys.0,
            keys.1,
            keys.2,
        )
    };
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(format!("could not register {}", name.to_string_lossy()))
    }
}

/// Declares the key of a registered command as one key spec, the argument
/// at index 1, with `flags` (`REDISMODULE_CMD_KEY_*`). Without it Redis
/// derives a spec from the `(1, 1, 1)` range given at registration, with
/// read-write flags for every command, so an ACL selector that grants
/// read-only key access (`%R~…`) would refuse INSPECT and WAIT. Servers
/// without `RedisModule_SetCommandInfo` (before 7.0) keep the range.
pub fn set_key_spec(ctx: &Context, name: &CStr, flags: u32) -> Result<(), String> {
    // SAFETY: reading function pointers Redis filled in at module load.
    let (Some(get), Some(set)) = (unsafe { raw::RedisModule_GetCommand }, unsafe {
        raw::RedisModule_SetCommandInfo
    }) else {
        return Ok(());
    };
    // SAFETY: called from OnLoad with a valid context, after the command
    // was registered; the name is static.
    let command = unsafe { get(ctx.ctx, name.as_ptr()) };
    if command.is_null() {
        return Err(format!("{} is not registered", name.to_string_lossy()));
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: plain C structs for which all-zero is the documented "unset"
    // (a zeroed key spec ends the array).
    let mut specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    specs[0].flags = u64::from(flags);
    specs[0].begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    specs[0].bs.index.pos = 1;
    specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    specs[0].fk.range.lastkey = 0;
    specs[0].fk.range.keystep = 1;
    specs[0].fk.range.limit = 0;
    // SAFETY: as above; the info only has to live for the call.
    let mut info: raw::RedisModuleCommandInfo = unsafe { std::mem::zeroed() };
    info.version = &version;
    info.key_specs = specs.as_mut_ptr();
    // SAFETY: command came from GetCommand; info and what it points to
    // outlive the call, which copies them.
    if unsafe { set(command, &info) } == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(format!(
            "could not set the key spec of {}",
            name.to_string_lossy()
        ))
    }
}
