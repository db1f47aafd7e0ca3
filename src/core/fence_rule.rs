//! The guard rule of fenced writes (DESIGN §10), pure: no Redis, time passed in.
//!
//! A guard remembers the highest fencing token one lock has shown it. A call
//! with a token at least that high passes (an equal token passes and changes
//! nothing, so one holder writes many times); a higher one raises the guard; a
//! lower one is `STALE` and nothing runs. A guard is tied to the lock name it
//! was created for: tokens of different locks cannot be compared.
//!
//! This file also parses `REDLOCK.FENCED` / `REDLOCK.GUARD` and classifies the
//! inner command, so every refusal that happens before anything runs is
//! decided (and tested) here.

use thiserror::Error;

use crate::core::lock::{token_within_reach, MAX_TOKEN};

/// Longest lock name a guard records (bytes).
pub const MAX_LOCK_LEN: usize = 1024;

/// What a guard record holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardState {
    /// The highest token seen, 1..=i64::MAX.
    pub highest: u64,
    /// The lock whose tokens this guard compares.
    pub lock: Vec<u8>,
}

/// The outcome of a passing check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// The token equals the highest seen: nothing to change.
    Equal,
    /// The guard is new or the token is higher: the guard must become `token`.
    Raise,
}

/// Why a fenced call is refused. Nothing ran and nothing changed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FenceError {
    /// A token lower than the highest the guard has seen.
    #[error("STALE token {token} is below {highest}, the highest token guard '{guard}' has seen for lock '{lock}'")]
    Stale {
        /// The guard key (shown lossily, shortened).
        guard: String,
        /// The lock name (shown lossily, shortened).
        lock: String,
        /// The token given.
        token: u64,
        /// The highest token the guard has seen.
        highest: u64,
    },
    /// The guard serves another lock.
    #[error("ERR guard '{guard}' serves lock '{serves}', not '{given}': tokens of different locks cannot be compared")]
    OtherLock {
        /// The guard key.
        guard: String,
        /// The lock the guard was created for.
        serves: String,
        /// The lock given.
        given: String,
    },
    /// A lock name that is empty or too long.
    #[error("ERR invalid lock: must be 1 to 1024 bytes, got {0} bytes")]
    LockLength(usize),
    /// A token that is not an integer in 1..=i64::MAX.
    #[error("ERR invalid token: must be an integer between 1 and 9223372036854775807")]
    BadToken,
    /// A token more than a day ahead of the node's clock.
    #[error("ERR invalid token: {token} is more than one day ahead of this node's clock ({node_clock_us} microseconds since the epoch); a client clock is wrong")]
    TokenAhead {
        /// The token given.
        token: u64,
        /// The node's wall clock in microseconds.
        node_clock_us: u64,
    },
    /// The inner command is refused by its name or shape.
    #[error("ERR REDLOCK.FENCED cannot run '{command}': {reason}")]
    Inner {
        /// The inner command's name (lossy, shortened).
        command: String,
        /// Why.
        reason: &'static str,
    },
    /// The inner command was refused by Redis before it ran; the text is
    /// Redis's error class and message.
    #[error("{0}")]
    Refused(String),
    /// Called on a replica, or from the replication stream.
    #[error("READONLY {0} is refused on a replica: fenced writes run on the master")]
    OnReplica(&'static str),
    /// The server's `RedisModule_Call` cannot run a command as the caller.
    #[error("ERR REDLOCK.FENCED needs Redis 7.0.6 or later: this server ({0}) checks the inner command's ACL rights but then runs it as the superuser, so rights checked inside a command (SORT's BY and GET patterns) would not hold; use REDLOCK.GUARD from a script instead")]
    ServerTooOld(String),
    /// A new guard cannot be created while the server is out of memory.
    #[error("OOM command not allowed when used memory > 'maxmemory': cannot create guard '{0}'")]
    OutOfMemory(String),
}

/// The first server version (`0x00MMmmpp`) whose `RedisModule_Call` runs a
/// `C` call as the caller's user: 7.0.0–7.0.5 check the rights, then run the
/// command as the superuser.
pub const RUNS_AS_CALLER_FROM: u32 = 0x0007_0006;

/// Whether FENCED may run on a server of `version` (`0x00MMmmpp`).
pub fn runs_as_caller(version: u32) -> bool {
    version >= RUNS_AS_CALLER_FROM
}

/// A server version (`0x00MMmmpp`) as `M.m.p`.
pub fn version_text(version: u32) -> String {
    format!(
        "{}.{}.{}",
        (version >> 16) & 0xff,
        (version >> 8) & 0xff,
        version & 0xff
    )
}

/// Shows user bytes in an error reply: lossy UTF-8, at most 200 characters.
pub fn shown(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() <= MAX {
        text.into_owned()
    } else {
        let mut cut: String = text.chars().take(MAX).collect();
        cut.push_str("...");
        cut
    }
}

/// Checks `token` for `lock` against the guard (`None`: no guard yet).
pub fn check(
    guard_name: &[u8],
    state: Option<&GuardState>,
    lock: &[u8],
    token: u64,
) -> Result<Pass, FenceError> {
    let Some(state) = state else {
        return Ok(Pass::Raise);
    };
    if state.lock != lock {
        return Err(FenceError::OtherLock {
            guard: shown(guard_name),
            serves: shown(&state.lock),
            given: shown(lock),
        });
    }
    match token.cmp(&state.highest) {
        std::cmp::Ordering::Less => Err(FenceError::Stale {
            guard: shown(guard_name),
            lock: shown(lock),
            token,
            highest: state.highest,
        }),
        std::cmp::Ordering::Equal => Ok(Pass::Equal),
        std::cmp::Ordering::Greater => Ok(Pass::Raise),
    }
}

/// The guard after a passing call with `token` (a new guard records `lock`).
pub fn raised(state: Option<&GuardState>, lock: &[u8], token: u64) -> GuardState {
    match state {
        Some(s) => GuardState {
            highest: s.highest.max(token),
            lock: s.lock.clone(),
        },
        None => GuardState {
            highest: token,
            lock: lock.to_vec(),
        },
    }
}

/// The common head of `REDLOCK.FENCED` and `REDLOCK.GUARD`: `guard lock token`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Head<'a> {
    /// The guard key.
    pub guard: &'a [u8],
    /// The lock name.
    pub lock: &'a [u8],
    /// The fencing token.
    pub token: u64,
}

/// Parses `guard lock token` at `args[1..4]` (`args[0]` is the command
/// name), with the node's wall clock `wall_us` for the reach check.
pub fn parse_head<'a>(args: &[&'a [u8]], wall_us: u64) -> Result<Head<'a>, FenceError> {
    let [_, guard, lock, token, ..] = args else {
        return Err(FenceError::BadToken);
    };
    if lock.is_empty() || lock.len() > MAX_LOCK_LEN {
        return Err(FenceError::LockLength(lock.len()));
    }
    let token = parse_token(token)?;
    if !token_within_reach(token, wall_us) {
        return Err(FenceError::TokenAhead {
            token,
            node_clock_us: wall_us,
        });
    }
    Ok(Head { guard, lock, token })
}

/// A token: a plain decimal integer in 1..=i64::MAX (no sign, no spaces).
pub fn parse_token(bytes: &[u8]) -> Result<u64, FenceError> {
    if bytes.is_empty() || bytes.len() > 19 || !bytes.iter().all(u8::is_ascii_digit) {
        return Err(FenceError::BadToken);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| FenceError::BadToken)?;
    match text.parse::<u64>() {
        Ok(t) if (1..=MAX_TOKEN).contains(&t) => Ok(t),
        _ => Err(FenceError::BadToken),
    }
}

/// Why an inner command is refused by its name, before Redis is asked.
pub fn screen_inner(inner: &[&[u8]]) -> Result<(), FenceError> {
    let Some(name) = inner.first() else {
        return Err(inner_error(b"", "no inner command given"));
    };
    if name.contains(&0) {
        return Err(inner_error(name, "the command name contains a NUL byte"));
    }
    let refuse = |reason| Err(inner_error(name, reason));
    if name.len() >= 8 && name[..8].eq_ignore_ascii_case(b"redlock.") {
        return refuse("redlock commands are not allowed inside it");
    }
    // Every refused name is shorter than 16 bytes: longer ones pass on to
    // Redis's own checks, and the rest are lowered on the stack.
    let mut buf = [0u8; 16];
    let Some(lower) = buf.get_mut(..name.len()) else {
        return Ok(());
    };
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    match &*lower {
        b"multi" | b"exec" | b"discard" | b"watch" | b"unwatch" => refuse(
            "transactions are not allowed inside it (put REDLOCK.FENCED inside MULTI instead)",
        ),
        b"blpop" | b"brpop" | b"brpoplpush" | b"blmove" | b"blmpop" | b"bzpopmin" | b"bzpopmax"
        | b"bzmpop" | b"wait" | b"waitaof" => refuse("blocking commands are not allowed inside it"),
        b"xread" | b"xreadgroup" if has_block_option(&inner[1..]) => {
            refuse("blocking commands are not allowed inside it")
        }
        b"migrate" => refuse("it moves keys to another server (an admin command)"),
        // The one admin command with keys (Redis 7.0–7.4, Valkey 7.2–8).
        b"pfdebug" => refuse("admin commands are not allowed inside it"),
        b"eval" | b"evalsha" | b"eval_ro" | b"evalsha_ro" | b"fcall" | b"fcall_ro" | b"script"
        | b"function" => {
            refuse("scripts are not allowed inside it (call REDLOCK.GUARD from the script instead)")
        }
        _ => Ok(()),
    }
}

/// `XREAD`/`XREADGROUP` with `BLOCK` before `STREAMS`.
fn has_block_option(args: &[&[u8]]) -> bool {
    args.iter()
        .take_while(|a| !a.eq_ignore_ascii_case(b"STREAMS"))
        .any(|a| a.eq_ignore_ascii_case(b"BLOCK"))
}

/// The refusal for an inner command `name` with `reason`.
pub fn inner_error(name: &[u8], reason: &'static str) -> FenceError {
    FenceError::Inner {
        command: shown(name),
        reason,
    }
}

/// Checks the inner command's keys (`None`: Redis found none): there must
/// be one, and none may be the guard.
pub fn screen_keys(name: &[u8], guard: &[u8], keys: Option<&[&[u8]]>) -> Result<(), FenceError> {
    match keys {
        None | Some([]) => Err(inner_error(name, "the inner command must have a key")),
        Some(keys) if keys.contains(&guard) => Err(inner_error(
            name,
            "the inner command must not touch the guard key",
        )),
        Some(_) => Ok(()),
    }
}

/// Why `RedisModule_Call` refused the inner command before it ran, from its
/// `errno`: the reply the caller gets. `errno` values are Linux's.
pub fn refusal(name: &[u8], errno: i32) -> FenceError {
    let cmd = shown(name);
    let text = match errno {
        libc::EACCES => format!(
            "NOPERM this user has no permissions to run the '{cmd}' command or its keys inside REDLOCK.FENCED"
        ),
        libc::ENOSPC => format!(
            "OOM command not allowed when used memory > 'maxmemory' ('{cmd}' inside REDLOCK.FENCED)"
        ),
        libc::ESPIPE => format!(
            "ERR '{cmd}' is not allowed inside REDLOCK.FENCED (a command scripts may not run)"
        ),
        libc::EROFS => format!(
            "ERR '{cmd}' inside REDLOCK.FENCED: writes are refused now (read-only replica, failed persistence or too few good replicas)"
        ),
        libc::ENETDOWN => format!("CLUSTERDOWN the cluster is down ('{cmd}' inside REDLOCK.FENCED)"),
        libc::EPERM => format!(
            "ERR '{cmd}' inside REDLOCK.FENCED: its keys are not served here or are in different slots"
        ),
        libc::ENOENT => format!("ERR unknown command '{cmd}' inside REDLOCK.FENCED"),
        libc::EINVAL => {
            format!("ERR wrong number of arguments for '{cmd}' inside REDLOCK.FENCED")
        }
        libc::ENOTSUP => format!(
            "ERR REDLOCK.FENCED needs a calling user to run '{cmd}' (not from the replication stream)"
        ),
        other => format!("ERR REDLOCK.FENCED could not run '{cmd}' (refused before it ran, errno {other})"),
    };
    FenceError::Refused(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_runs_from_7_0_6_on() {
        assert!(!runs_as_caller(0x0007_0000));
        assert!(!runs_as_caller(0x0007_0005));
        assert!(runs_as_caller(0x0007_0006));
        assert!(runs_as_caller(0x0007_0200));
        assert!(runs_as_caller(0x0008_0000));
        assert!(!runs_as_caller(0));
        assert_eq!(version_text(0x0007_0005), "7.0.5");
        assert_eq!(version_text(0x0008_0100), "8.1.0");
    }
    use proptest::prelude::*;

    const NOW_US: u64 = 1_796_000_000_000_000;

    fn state(highest: u64, lock: &[u8]) -> GuardState {
        GuardState {
            highest,
            lock: lock.to_vec(),
        }
    }

    #[test]
    fn stale_equal_higher() {
        let g = state(5, b"L");
        assert!(matches!(
            check(b"g", Some(&g), b"L", 4),
            Err(FenceError::Stale {
                token: 4,
                highest: 5,
                ..
            })
        ));
        assert_eq!(check(b"g", Some(&g), b"L", 5), Ok(Pass::Equal));
        assert_eq!(check(b"g", Some(&g), b"L", 6), Ok(Pass::Raise));
        assert_eq!(check(b"g", None, b"L", 1), Ok(Pass::Raise));
        assert_eq!(raised(Some(&g), b"L", 9), state(9, b"L"));
        assert_eq!(raised(None, b"L", 3), state(3, b"L"));
    }

    #[test]
    fn stale_error_names_the_highest_and_starts_with_stale() {
        let g = state(57, b"report");
        let e = check(b"g", Some(&g), b"report", 41).unwrap_err();
        assert_eq!(
            e.to_string(),
            "STALE token 41 is below 57, the highest token guard 'g' has seen for lock 'report'"
        );
    }

    #[test]
    fn another_lock_is_refused_whatever_the_token() {
        let g = state(5, b"a");
        for t in [1, 5, 6, MAX_TOKEN] {
            let e = check(b"g", Some(&g), b"b", t).unwrap_err();
            assert!(e
                .to_string()
                .starts_with("ERR guard 'g' serves lock 'a', not 'b'"));
        }
    }

    #[test]
    fn head_parsing_refuses_bad_tokens_and_locks() {
        let ok: Vec<&[u8]> = vec![b"x", b"g", b"L", b"7", b"SET"];
        assert_eq!(
            parse_head(&ok, NOW_US),
            Ok(Head {
                guard: b"g",
                lock: b"L",
                token: 7
            })
        );
        for bad in [
            &b"0"[..],
            b"-1",
            b"+1",
            b" 1",
            b"1.5",
            b"abc",
            b"",
            b"9223372036854775808",
            b"99999999999999999999",
        ] {
            let args: Vec<&[u8]> = vec![b"x", b"g", b"L", bad];
            assert_eq!(
                parse_head(&args, NOW_US),
                Err(FenceError::BadToken),
                "{bad:?}"
            );
        }
        let ahead = (NOW_US + 86_400_000_001).to_string();
        let args: Vec<&[u8]> = vec![b"x", b"g", b"L", ahead.as_bytes()];
        assert!(matches!(
            parse_head(&args, NOW_US),
            Err(FenceError::TokenAhead { .. })
        ));
        let within = (NOW_US + 86_400_000_000).to_string();
        let args: Vec<&[u8]> = vec![b"x", b"g", b"L", within.as_bytes()];
        assert!(parse_head(&args, NOW_US).is_ok());
        let long = vec![b'l'; 1025];
        for lock in [&b""[..], &long[..]] {
            let args: Vec<&[u8]> = vec![b"x", b"g", lock, b"1"];
            assert_eq!(
                parse_head(&args, NOW_US),
                Err(FenceError::LockLength(lock.len()))
            );
        }
        let exact = vec![b'l'; 1024];
        let args: Vec<&[u8]> = vec![b"x", b"g", &exact, b"1"];
        assert!(parse_head(&args, NOW_US).is_ok());
    }

    #[test]
    fn inner_commands_refused_by_name() {
        let refused: &[&[&[u8]]] = &[
            &[b"REDLOCK.FENCED", b"g", b"L", b"1", b"SET", b"k", b"v"],
            &[b"redlock.acquire", b"k", b"o", b"100"],
            &[b"MULTI"],
            &[b"exec"],
            &[b"WATCH", b"k"],
            &[b"BLPOP", b"k", b"0"],
            &[b"bzpopmin", b"k", b"0"],
            &[
                b"XREAD", b"COUNT", b"1", b"BLOCK", b"0", b"STREAMS", b"s", b"$",
            ],
            &[b"EVAL", b"return 1", b"1", b"k"],
            &[b"FCALL", b"f", b"1", b"k"],
            &[b"MIGRATE", b"h", b"1", b"k", b"0", b"10"],
            &[b"PFDEBUG", b"GETREG", b"hll"],
            // The longest refused names, in mixed case.
            &[b"BrPopLPush", b"a", b"b", b"0"],
            &[b"EvalSha_RO", b"abc", b"1", b"k"],
            &[
                b"XReadGroup",
                b"GROUP",
                b"g",
                b"c",
                b"BLOCK",
                b"0",
                b"STREAMS",
                b"s",
                b">",
            ],
            &[b"S\0ET", b"k", b"v"],
            &[],
        ];
        for inner in refused {
            let e = screen_inner(inner).unwrap_err();
            assert!(
                e.to_string().starts_with("ERR REDLOCK.FENCED cannot run"),
                "{e}"
            );
        }
        let allowed: &[&[&[u8]]] = &[
            &[b"SET", b"k", b"v"],
            &[b"XREAD", b"COUNT", b"1", b"STREAMS", b"block", b"$"],
            &[b"HSET", b"k", b"f", b"v"],
            &[b"JSON.SET", b"k", b"$", b"1"],
        ];
        for inner in allowed {
            assert_eq!(screen_inner(inner), Ok(()));
        }
    }

    #[test]
    fn keys_must_exist_and_spare_the_guard() {
        assert!(screen_keys(b"FLUSHALL", b"g", None).is_err());
        assert!(screen_keys(b"PUBLISH", b"g", Some(&[])).is_err());
        let e = screen_keys(b"DEL", b"g", Some(&[b"k", b"g"])).unwrap_err();
        assert!(e.to_string().contains("must not touch the guard key"));
        assert_eq!(screen_keys(b"DEL", b"g", Some(&[b"k"])), Ok(()));
    }

    #[test]
    fn refusals_keep_redis_error_codes() {
        let first = |errno| refusal(b"hset", errno).to_string();
        assert!(first(libc::EACCES).starts_with("NOPERM "));
        assert!(first(libc::ENOSPC).starts_with("OOM "));
        assert!(first(libc::ENETDOWN).starts_with("CLUSTERDOWN "));
        assert!(first(libc::ESPIPE).starts_with("ERR "));
        assert!(first(12345).contains("errno 12345"));
    }

    #[test]
    fn long_names_are_shortened_in_errors() {
        let long = vec![b'x'; 5000];
        assert_eq!(shown(&long).len(), 203);
        assert_eq!(shown(b"\xffab"), "\u{fffd}ab");
    }

    proptest! {
        /// Against a model: the guard is the maximum of the tokens it let
        /// through, and a call passes exactly when its token is at least that.
        #[test]
        fn the_guard_is_the_maximum_of_passed_tokens(tokens in proptest::collection::vec(1u64..50, 1..40)) {
            let mut guard: Option<GuardState> = None;
            let mut model: Option<u64> = None;
            for t in tokens {
                let verdict = check(b"g", guard.as_ref(), b"L", t);
                match model {
                    Some(m) if t < m => {
                        let stale_at_m = matches!(verdict, Err(FenceError::Stale { highest, .. }) if highest == m);
                        prop_assert!(stale_at_m, "token {} against {}: {:?}", t, m, verdict);
                    }
                    Some(m) if t == m => prop_assert_eq!(&verdict, &Ok(Pass::Equal)),
                    _ => prop_assert_eq!(&verdict, &Ok(Pass::Raise)),
                }
                if verdict.is_ok() {
                    guard = Some(raised(guard.as_ref(), b"L", t));
                    model = Some(model.map_or(t, |m| m.max(t)));
                }
                prop_assert_eq!(guard.as_ref().map(|g| g.highest), model);
            }
        }

        /// Any decimal in range parses to itself; anything else is refused.
        #[test]
        fn tokens_parse_exactly(t in 1u64..=MAX_TOKEN) {
            prop_assert_eq!(parse_token(t.to_string().as_bytes()), Ok(t));
            let neg = format!("-{t}");
            prop_assert_eq!(parse_token(neg.as_bytes()), Err(FenceError::BadToken));
        }
    }
}
