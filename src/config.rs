//! Module configuration, the restart guard, statistics and `INFO redlock`.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use redis_module::{raw, Context, ContextFlags, RedisValue};

use crate::clock::mono_now;
use crate::error::CommandError;
use crate::lock::MonoMillis;

/// Default and range of `redlock.max-ttl-ms`.
pub const MAX_TTL_DEFAULT: i64 = 60_000;
/// Largest accepted `redlock.max-ttl-ms` (one day).
pub const MAX_TTL_LIMIT: i64 = 86_400_000;
/// `redlock.restart-grace-ms` value meaning "equal to max-ttl-ms at load".
pub const GRACE_FOLLOWS_MAX_TTL: i64 = -1;

/// `redlock.max-ttl-ms`: the longest lease a client may ask for.
pub static MAX_TTL_MS: AtomicI64 = AtomicI64::new(MAX_TTL_DEFAULT);
/// `redlock.restart-grace-ms`: how long after load ACQUIRE is refused.
pub static RESTART_GRACE_MS: AtomicI64 = AtomicI64::new(GRACE_FOLLOWS_MAX_TTL);

struct LoadTime {
    at: MonoMillis,
    max_ttl: i64,
}

static LOADED: OnceLock<LoadTime> = OnceLock::new();
static EVICTION_WARNING: AtomicBool = AtomicBool::new(false);

/// Counters shown by `INFO redlock`.
pub mod stats {
    use super::*;

    /// ACQUIREs that issued a new token.
    pub static GRANTED: AtomicU64 = AtomicU64::new(0);
    /// ACQUIREs by the current holder (lease renewed, same token).
    pub static RENEWED: AtomicU64 = AtomicU64::new(0);
    /// ACQUIREs answered nil because another owner holds the lock.
    pub static BUSY: AtomicU64 = AtomicU64::new(0);
    /// ACQUIREs refused by the restart guard.
    pub static GRACE_REFUSED: AtomicU64 = AtomicU64::new(0);
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

/// One numeric module config: name (without the `redlock.` prefix), value,
/// default and range.
struct NumericConfig {
    name: &'static str,
    value: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
}

const CONFIGS: [NumericConfig; 2] = [
    NumericConfig {
        name: "max-ttl-ms",
        value: &MAX_TTL_MS,
        default: MAX_TTL_DEFAULT,
        min: 1,
        max: MAX_TTL_LIMIT,
    },
    NumericConfig {
        name: "restart-grace-ms",
        value: &RESTART_GRACE_MS,
        default: GRACE_FOLLOWS_MAX_TTL,
        min: GRACE_FOLLOWS_MAX_TTL,
        max: MAX_TTL_LIMIT,
    },
];

/// Reads `loadmodule` arguments (`max-ttl-ms 30000 restart-grace-ms 0`)
/// into per-config defaults, refusing unknown names and bad values.
pub fn parse_module_args(args: &[&[u8]]) -> Result<[i64; 2], String> {
    let mut defaults = CONFIGS.map(|c| c.default);
    let mut pairs = args.chunks(2);
    for pair in &mut pairs {
        let [name, value] = pair else {
            return Err(format!(
                "module argument '{}' has no value",
                String::from_utf8_lossy(pair.first().copied().unwrap_or_default())
            ));
        };
        let name = String::from_utf8_lossy(name);
        let bare = name.strip_prefix("redlock.").unwrap_or(&name);
        let Some(i) = CONFIGS
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(bare))
        else {
            return Err(format!(
                "unknown module argument '{name}' (known: max-ttl-ms, restart-grace-ms)"
            ));
        };
        let c = &CONFIGS[i];
        let parsed = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|v| (c.min..=c.max).contains(v));
        let Some(v) = parsed else {
            return Err(format!(
                "module argument {} must be an integer between {} and {}, got '{}'",
                c.name,
                c.min,
                c.max,
                String::from_utf8_lossy(value)
            ));
        };
        defaults[i] = v;
    }
    Ok(defaults)
}

/// Registers the module configs with the `loadmodule` arguments as their
/// defaults, then lets Redis apply `redlock.*` lines from redis.conf and the
/// command line, which take precedence. `CONFIG SET` range-checks them.
pub fn register_configs(ctx: &Context, args: &[&[u8]]) -> Result<(), String> {
    let defaults = parse_module_args(args)?;
    for (c, default) in CONFIGS.iter().zip(defaults) {
        c.value.store(default, Relaxed);
        redis_module::configuration::register_i64_configuration(
            ctx,
            c.name,
            c.value,
            default,
            c.min,
            c.max,
            redis_module::configuration::ConfigurationFlags::DEFAULT,
            None,
        );
    }
    // SAFETY: called from OnLoad with a valid context.
    let loaded = unsafe { raw::RedisModule_LoadConfigs.map(|load| load(ctx.ctx)) };
    match loaded {
        Some(status) if status == raw::REDISMODULE_OK as c_int => Ok(()),
        Some(_) => Err("a redlock.* config line has an invalid value".into()),
        None => Err("this Redis has no module config API (Redis 7.0 or newer is required)".into()),
    }
}

/// The current `redlock.max-ttl-ms`.
pub fn max_ttl() -> i64 {
    MAX_TTL_MS.load(Relaxed)
}

/// Starts the grace window; called once when the module loads.
pub fn mark_loaded() {
    let _ = LOADED.get_or_init(|| LoadTime {
        at: mono_now(),
        max_ttl: max_ttl(),
    });
}

/// The length of the grace window in ms, as configured now.
pub fn grace_window() -> u64 {
    let configured = RESTART_GRACE_MS.load(Relaxed);
    if configured >= 0 {
        return configured as u64;
    }
    LOADED.get().map_or(MAX_TTL_DEFAULT, |l| l.max_ttl).max(0) as u64
}

/// `(elapsed, remaining)` ms when `now` is inside the grace window.
pub fn grace_state(now: MonoMillis) -> Option<(u64, u64)> {
    let loaded = LOADED.get()?.at;
    let elapsed = now.saturating_sub(loaded);
    let window = grace_window();
    (elapsed < window).then(|| (elapsed, window - elapsed))
}

/// The restart guard for ACQUIRE. Inside the window a node refuses new
/// locks unless it is durable (`appendonly yes` + `appendfsync always`):
/// a node that lost acknowledged grants in a crash must not hand the same
/// lock to someone else before every lease it may have granted has run out.
pub fn check_grace(ctx: &Context, now: MonoMillis) -> Result<(), CommandError> {
    let Some((elapsed_ms, remaining_ms)) = grace_state(now) else {
        return Ok(());
    };
    if is_durable(ctx) {
        return Ok(());
    }
    stats::bump(&stats::GRACE_REFUSED);
    Err(CommandError::Grace {
        elapsed_ms,
        remaining_ms,
    })
}

fn is_durable(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::AOF)
        && config_get(ctx, "appendfsync").is_some_and(|v| v.eq_ignore_ascii_case("always"))
}

/// Reads one server config through `CONFIG GET`.
fn config_get(ctx: &Context, name: &str) -> Option<String> {
    let reply = ctx.call("CONFIG", &["GET", name]).ok()?;
    let RedisValue::Array(items) = reply else {
        return None;
    };
    match items.get(1)? {
        RedisValue::SimpleString(s) => Some(s.clone()),
        RedisValue::BulkString(s) => Some(s.clone()),
        RedisValue::StringBuffer(b) => Some(String::from_utf8_lossy(b).into_owned()),
        RedisValue::BulkRedisString(s) => Some(s.to_string_lossy()),
        _ => None,
    }
}

/// Re-reads `maxmemory-policy` and warns (flag + log) when an `allkeys-*`
/// policy could evict lock keys, and with them their fencing counters.
pub fn check_eviction_policy(ctx: &Context) {
    let policy = config_get(ctx, "maxmemory-policy").unwrap_or_default();
    let risky = policy.starts_with("allkeys-");
    let was = EVICTION_WARNING.swap(risky, Relaxed);
    if risky && !was {
        ctx.log_warning(&format!(
            "maxmemory-policy is {policy}: Redis may evict lock keys and lose their \
             fencing counters; use noeviction or a volatile-* policy (lock keys have no TTL)"
        ));
    }
}

/// Server event callback: re-checks the eviction policy after `CONFIG SET`.
pub extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    let _ = std::panic::catch_unwind(|| check_eviction_policy(&Context::new(ctx)));
}

/// Subscribes to config changes.
pub fn subscribe_config_events(ctx: &Context) {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CONFIG,
        dataver: 1,
    };
    raw::subscribe_to_server_event(ctx.ctx, event, Some(on_config_change));
}

/// `INFO redlock`.
pub extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    let _ = std::panic::catch_unwind(|| write_info(ctx));
}

fn write_info(ctx: *mut raw::RedisModuleInfoCtx) {
    let (grace_active, grace_remaining) = match grace_state(mono_now()) {
        Some((_, remaining)) => (1, remaining),
        None => (0, 0),
    };
    let counters: [(&CStr, u64); 13] = [
        (c"acquire_granted", stats::GRANTED.load(Relaxed)),
        (c"acquire_renewed", stats::RENEWED.load(Relaxed)),
        (c"acquire_busy", stats::BUSY.load(Relaxed)),
        (c"acquire_refused_grace", stats::GRACE_REFUSED.load(Relaxed)),
        (c"release_ok", stats::RELEASED.load(Relaxed)),
        (c"release_missed", stats::RELEASE_MISSED.load(Relaxed)),
        (c"extend_ok", stats::EXTENDED.load(Relaxed)),
        (c"extend_missed", stats::EXTEND_MISSED.load(Relaxed)),
        (c"fence_ok", stats::FENCED.load(Relaxed)),
        (c"fence_missed", stats::FENCE_MISSED.load(Relaxed)),
        (c"expired_leases", stats::EXPIRED.load(Relaxed)),
        (c"grace_active", grace_active),
        (c"grace_remaining_ms", grace_remaining),
    ];
    // SAFETY: called by Redis with a valid info context; names are NUL-terminated.
    unsafe {
        let Some(add_section) = raw::RedisModule_InfoAddSection else {
            return;
        };
        let Some(add_u64) = raw::RedisModule_InfoAddFieldULongLong else {
            return;
        };
        let Some(add_i64) = raw::RedisModule_InfoAddFieldLongLong else {
            return;
        };
        add_section(ctx, c"".as_ptr().cast_mut());
        for (name, value) in counters {
            add_u64(ctx, name.as_ptr(), value);
        }
        add_u64(
            ctx,
            c"eviction_policy_warning".as_ptr(),
            u64::from(EVICTION_WARNING.load(Relaxed)),
        );
        add_i64(ctx, c"max_ttl_ms".as_ptr(), max_ttl());
        add_i64(
            ctx,
            c"restart_grace_ms".as_ptr(),
            RESTART_GRACE_MS.load(Relaxed),
        );
        add_u64(ctx, c"grace_window_ms".as_ptr(), grace_window());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_args_set_defaults() {
        assert_eq!(parse_module_args(&[]), Ok([60_000, -1]));
        assert_eq!(
            parse_module_args(&[b"max-ttl-ms", b"30000", b"restart-grace-ms", b"0"]),
            Ok([30_000, 0])
        );
        assert_eq!(
            parse_module_args(&[b"redlock.max-ttl-ms", b"5"]),
            Ok([5, -1])
        );
    }

    #[test]
    fn module_args_refuse_bad_input_by_name() {
        let err = parse_module_args(&[b"max-ttl-ms", b"0"]).unwrap_err();
        assert!(
            err.contains("max-ttl-ms must be an integer between 1 and 86400000, got '0'"),
            "{err}"
        );
        let err = parse_module_args(&[b"max-ttl-ms", b"abc"]).unwrap_err();
        assert!(err.contains("got 'abc'"), "{err}");
        let err = parse_module_args(&[b"restart-grace-ms", b"-2"]).unwrap_err();
        assert!(err.contains("restart-grace-ms"), "{err}");
        let err = parse_module_args(&[b"max-ttl"]).unwrap_err();
        assert!(err.contains("has no value"), "{err}");
        let err = parse_module_args(&[b"ttl", b"5"]).unwrap_err();
        assert!(err.contains("unknown module argument 'ttl'"), "{err}");
    }
}
