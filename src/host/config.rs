//! Module configuration: the `redlock.*` configs, `loadmodule` arguments,
//! and the eviction-policy warning.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

use redis_module::{raw, Context, RedisValue};

/// Default and range of `redlock.max-ttl-ms`.
pub const MAX_TTL_DEFAULT: i64 = 60_000;
/// Largest accepted `redlock.max-ttl-ms` (one day).
pub const MAX_TTL_LIMIT: i64 = 86_400_000;
/// `redlock.restart-grace-ms` value meaning "as long as the longest lease".
pub const GRACE_FOLLOWS_MAX_TTL: i64 = -1;

/// Default of `redlock.reclaim-after-ms` (one day).
pub const RECLAIM_AFTER_DEFAULT: i64 = 86_400_000;
/// Largest accepted `redlock.reclaim-after-ms` (about ten years).
pub const RECLAIM_AFTER_LIMIT: i64 = 315_360_000_000;

/// `redlock.max-ttl-ms`: the longest lease a client may ask for.
pub static MAX_TTL_MS: AtomicI64 = AtomicI64::new(MAX_TTL_DEFAULT);
/// `redlock.restart-grace-ms`: how long after load ACQUIRE is refused.
pub static RESTART_GRACE_MS: AtomicI64 = AtomicI64::new(GRACE_FOLLOWS_MAX_TTL);

/// `redlock.reclaim-after-ms`: how long a free lock stays unchanged before
/// the sweep may delete it (DESIGN §8); 0 = never.
pub static RECLAIM_AFTER_MS: AtomicI64 = AtomicI64::new(RECLAIM_AFTER_DEFAULT);

static EVICTION_WARNING: AtomicBool = AtomicBool::new(false);

/// One numeric module config: name (without the `redlock.` prefix), value,
/// default and range.
struct NumericConfig {
    name: &'static str,
    value: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
}

const CONFIGS: [NumericConfig; 8] = [
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
    NumericConfig {
        name: "reclaim-after-ms",
        value: &RECLAIM_AFTER_MS,
        default: RECLAIM_AFTER_DEFAULT,
        min: 0,
        max: RECLAIM_AFTER_LIMIT,
    },
    NumericConfig {
        name: "handoff-ms",
        value: &HANDOFF_MS,
        default: HANDOFF_DEFAULT,
        min: 1,
        max: HANDOFF_LIMIT,
    },
    NumericConfig {
        name: "sync-replicas",
        value: &SYNC_REPLICAS,
        default: 0,
        min: 0,
        max: crate::core::sync_rule::MAX_SYNC_REPLICAS,
    },
    NumericConfig {
        name: "promoted-acked-ms",
        value: &PROMOTED_ACKED_MS,
        default: PROMOTED_ACKED_NONE,
        min: PROMOTED_ACKED_NONE,
        max: MAX_TTL_LIMIT,
    },
    NumericConfig {
        name: "promoted-untaught",
        value: &PROMOTED_UNTAUGHT,
        default: 0,
        min: 0,
        max: 1,
    },
    NumericConfig {
        name: "longest-lease-ms",
        value: &LONGEST_LEASE_MS,
        default: 0,
        min: 0,
        max: MAX_TTL_LIMIT,
    },
];

/// `redlock.longest-lease-ms`: written by the module (with `CONFIG
/// REWRITE`, `config_file`) when its `max-ttl-ms` no longer covers the
/// longest lease recorded (lowered, or raised with the raise written): the
/// configuration file's copy of that record, which a new disk keeps
/// (`guard_rule::recorded_at_load`). 0: none.
pub static LONGEST_LEASE_MS: AtomicI64 = AtomicI64::new(0);

/// The current `redlock.longest-lease-ms`.
pub fn longest_lease_configured() -> u64 {
    LONGEST_LEASE_MS.load(Relaxed).max(0) as u64
}

/// `redlock.promoted-untaught`: written by the module (with `CONFIG
/// REWRITE`, `config_file::keep_untaught`) while the window of a promotion
/// that had learned nothing (a day) is open, 1; else 0. The configuration
/// file's copy of the data disk's marker, which a new disk keeps
/// (`guard_rule::untaught_at_load`).
pub static PROMOTED_UNTAUGHT: AtomicI64 = AtomicI64::new(0);

/// The `redlock.promoted-untaught` the module itself last set (or loaded):
/// a value that differs from it was set by an operator
/// (`guard::untaught_config_changed`).
pub static UNTAUGHT_KEPT: AtomicI64 = AtomicI64::new(0);

/// `redlock.promoted-acked-ms` value meaning "never promoted".
pub const PROMOTED_ACKED_NONE: i64 = -1;
/// `redlock.promoted-acked-ms`: written by the module at a promotion (with
/// `CONFIG REWRITE`, `config_file::keep_promoted_acked`), the length every
/// replica of the old master acknowledged knowing. A load that finds no
/// file of what its replicas acknowledged (a new disk) is held from it
/// (`LeaseAck::held_by_configuration`); -1: never promoted.
pub static PROMOTED_ACKED_MS: AtomicI64 = AtomicI64::new(PROMOTED_ACKED_NONE);

/// The current `redlock.promoted-acked-ms` (`None`: never promoted).
pub fn promoted_acked() -> Option<u64> {
    u64::try_from(PROMOTED_ACKED_MS.load(Relaxed)).ok()
}

/// `redlock.sync-replicas`: R of the replica-sync check (DESIGN §13), the
/// number of replicas every lock write must reach before a client relies on
/// it; 0 turns the check off.
pub static SYNC_REPLICAS: AtomicI64 = AtomicI64::new(0);

/// The current `redlock.sync-replicas`.
pub fn sync_replicas() -> u64 {
    SYNC_REPLICAS.load(Relaxed).max(0) as u64
}

/// Default of `redlock.handoff-ms`.
pub const HANDOFF_DEFAULT: i64 = 50;
/// Largest accepted `redlock.handoff-ms`.
pub const HANDOFF_LIMIT: i64 = 10_000;
/// `redlock.handoff-ms`: how long a freed lock is kept for the first queued
/// waiter (see [`crate::core::queue`]).
pub static HANDOFF_MS: AtomicI64 = AtomicI64::new(HANDOFF_DEFAULT);

/// The current `redlock.handoff-ms`.
pub fn handoff_ms() -> u64 {
    HANDOFF_MS.load(Relaxed).max(1) as u64
}

/// Reads `loadmodule` arguments (`max-ttl-ms 30000 restart-grace-ms 0`)
/// into per-config defaults, refusing unknown names and bad values.
pub fn parse_module_args(args: &[&[u8]]) -> Result<[i64; CONFIGS.len()], String> {
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
                "unknown module argument '{name}' (known: max-ttl-ms, restart-grace-ms, \
                 reclaim-after-ms, handoff-ms, sync-replicas, promoted-acked-ms, \
                 promoted-untaught, longest-lease-ms)"
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

/// The current `redlock.reclaim-after-ms` (0 = never).
pub fn reclaim_after() -> u64 {
    RECLAIM_AFTER_MS.load(Relaxed).max(0) as u64
}

/// The current `redlock.restart-grace-ms`.
pub fn restart_grace() -> i64 {
    RESTART_GRACE_MS.load(Relaxed)
}

/// Whether the eviction-policy warning is on.
pub fn eviction_warning() -> bool {
    EVICTION_WARNING.load(Relaxed)
}

/// Reads one server config through `CONFIG GET`.
pub fn config_get(ctx: &Context, name: &str) -> Option<String> {
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

/// The path of a file of this node's own in the server's directory:
/// `base-PORT` (`port`, else `tls-port`; `base` alone when the node listens
/// on neither). Two instances may share `dir` (with their own `dbfilename`
/// and `appenddirname`) but never a port on one host, so neither reads the
/// other's (`tests/promotion_lease_rules.rs`). Under the `shared-node-files`
/// mutant, `base` alone (the naming before).
pub fn node_file(ctx: &Context, base: &str) -> std::path::PathBuf {
    let dir = std::env::current_dir().unwrap_or_default();
    if crate::host::mutant::on(crate::host::mutant::Mutant::SharedNodeFiles) {
        return dir.join(base);
    }
    let port = ["port", "tls-port"].iter().find_map(|name| {
        config_get(ctx, name)
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|&p| p != 0)
    });
    match port {
        Some(port) => dir.join(format!("{base}-{port}")),
        None => dir.join(base),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_args_set_defaults() {
        assert_eq!(
            parse_module_args(&[]),
            Ok([60_000, -1, 86_400_000, 50, 0, -1, 0, 0])
        );
        assert_eq!(
            parse_module_args(&[b"max-ttl-ms", b"30000", b"restart-grace-ms", b"0"]),
            Ok([30_000, 0, 86_400_000, 50, 0, -1, 0, 0])
        );
        assert_eq!(
            parse_module_args(&[b"redlock.max-ttl-ms", b"5", b"reclaim-after-ms", b"0"]),
            Ok([5, -1, 0, 50, 0, -1, 0, 0])
        );
        assert_eq!(
            parse_module_args(&[b"sync-replicas", b"2"]),
            Ok([60_000, -1, 86_400_000, 50, 2, -1, 0, 0])
        );
        let err = parse_module_args(&[b"reclaim-after-ms", b"-1"]).unwrap_err();
        assert!(
            err.contains("reclaim-after-ms must be an integer between 0 and 315360000000"),
            "{err}"
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
