//! The persisted form of a lock and its encodings: the RDB / `DUMP` record,
//! and `REDLOCK.APPLY`, the command that carries a lock's resulting state to
//! replicas and the AOF (one emitter for both).
//!
//! What leaves the process is the counter, the *hash* of the holder (never
//! the owner id itself, see [`crate::core::owner`]), the lease three ways:
//! its wall-clock end, the time remaining, and the boot clock when written
//! (the kernel's boot id and a `CLOCK_MONOTONIC` reading), so that a reader
//! on the same boot knows exactly how much of it is left, and one on
//! another boot falls back on the other two ([`crate::core::lease_time`]
//! has the rules; [`Source`] says which one a reader uses);
//! and, for reclaiming idle records (DESIGN §8), whether the last grant
//! carried a FLOOR and the idle time of a free lock, twice: the wall-clock
//! instant since which it is unchanged, and how long it had been unchanged
//! when written.
//!
//! Encoding version 3 (RDB and `DUMP`):
//! `counter (unsigned) · expiry (unsigned, wall-clock ms since the epoch,
//! 0 = free) · remaining (unsigned, ms) · owner hash (string buffer of 16
//! bytes, empty = free) · floored (unsigned, 0 or 1) · idle-wall (unsigned,
//! wall-clock ms since the epoch, 0 = held) · idle-ms (unsigned) · boot id
//! (string buffer of 16 bytes, empty = unknown) · boot-ms (unsigned, ms
//! since that boot)`.
//!
//! `REDLOCK.APPLY key v3 counter expiry remaining floored boot-stamp
//! owner-hash` for a held lock (`boot-stamp`: the boot id and the boot
//! clock as 24 raw bytes, [`BootStamp::to_bytes`], or empty when unknown; a
//! held lock has no idle time), and for a free one, which has no lease to
//! time, the version-2 form `REDLOCK.APPLY key v2 counter expiry remaining
//! floored idle-wall idle-ms`. Each effect is written to the AOF and sent to
//! every replica, so its length counts: the stamp is one argument, where the
//! idle fields of a held lock were two.
//!
//! Version 2, still read: the version-3 record without its last two fields
//! (RDB, `DUMP`), and `REDLOCK.APPLY key v2 counter expiry remaining floored
//! idle-wall idle-ms [owner-hash]`; a lease in it is read as from another
//! boot.
//!
//! Node-wide values travel with the records (DESIGN §8, §12): the highest
//! counter this node ever reclaimed and the longest lease it may have
//! granted ([`NodeRecord`]). They go into the RDB as the type's auxiliary
//! data (before the keys), to replicas and the AOF as
//! `REDLOCK.APPLY key reclaimed counter` (the sweep's delete of `key`) and
//! `REDLOCK.APPLY key node reclaimed longest-lease-ms` (`key` untouched),
//! and into an AOF rewrite without RDB preamble as the latter, once.
//!
//! Version 1, still read: RDB `counter · expiry · owner (clear)`, and
//! `REDLOCK.APPLY key counter expiry [owner]`. Its owner is hashed on load;
//! having no remaining time, its lease is always read from the wall-clock end.
//! It has no FLOOR mark, so a version-1 record is never reclaimed until a
//! new FLOOR grant.

use std::os::raw::{c_char, c_longlong};

use redis_module::raw;

use crate::core::args;
use crate::core::error::CommandError;
use crate::core::lease_time::{BootId, BootStamp};
use crate::core::lock::{OwnerHash, MAX_OWNER_LEN, MAX_TOKEN};
use crate::core::owner::hash_owner;

/// The encoding version written by this build.
pub const ENCODING_VERSION: i32 = 3;
/// The encoding without the boot stamp, still loaded.
pub const ENCODING_V2: i32 = 2;
/// The first encoding (clear owner, wall-clock expiry only), still loaded.
pub const ENCODING_V1: i32 = 1;

pub use crate::core::persisted::{
    persist_at, restamp_needed, restore, Applied, NodeRecord, Persisted, Source,
    STREAM_LEASE_LIMIT_MS,
};

/// Reads one record of encoding `encver` from an RDB or `DUMP` payload.
/// `None` on a read error, an unknown version or a value out of range.
///
/// # Safety
/// `rdb` must be the IO handle Redis passed to the `rdb_load` callback.
pub unsafe fn read_record(rdb: *mut raw::RedisModuleIO, encver: i32) -> Option<Persisted> {
    let counter = raw::load_unsigned(rdb).ok()?;
    let expiry = raw::load_unsigned(rdb).ok()?;
    let (remaining, owner) = match encver {
        ENCODING_V1 => {
            let owner = raw::load_string_buffer(rdb).ok()?;
            let owner = owner.as_ref();
            if owner.len() > MAX_OWNER_LEN {
                return None;
            }
            (None, (!owner.is_empty()).then(|| hash_owner(owner)))
        }
        ENCODING_V2 | ENCODING_VERSION => {
            let remaining = raw::load_unsigned(rdb).ok()?;
            let hash = raw::load_string_buffer(rdb).ok()?;
            let owner = match hash.as_ref() {
                [] => None,
                bytes => Some(OwnerHash::try_from(bytes).ok()?),
            };
            (Some(remaining), owner)
        }
        _ => return None,
    };
    let (floored, idle_wall, idle_ms) = match encver {
        ENCODING_V2 | ENCODING_VERSION => {
            let floored = match raw::load_unsigned(rdb).ok()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            let idle_wall = raw::load_unsigned(rdb).ok()?;
            let idle_ms = raw::load_unsigned(rdb).ok()?;
            (floored, idle_wall, Some(idle_ms))
        }
        _ => (false, 0, None),
    };
    let boot = match encver {
        ENCODING_VERSION => {
            let id = raw::load_string_buffer(rdb).ok()?;
            let ms = raw::load_unsigned(rdb).ok()?;
            match id.as_ref() {
                [] => None,
                bytes => Some(BootStamp {
                    id: BootId::try_from(bytes).ok()?,
                    ms,
                }),
            }
        }
        _ => None,
    };
    if counter > MAX_TOKEN {
        return None;
    }
    Some(Persisted {
        counter,
        owner,
        expiry,
        remaining,
        floored,
        idle_wall,
        idle_ms,
        boot,
    })
}

/// Writes one record in the current encoding.
///
/// # Safety
/// `rdb` must be the IO handle Redis passed to the `rdb_save` callback.
pub unsafe fn write_record(rdb: *mut raw::RedisModuleIO, p: &Persisted) {
    raw::save_unsigned(rdb, p.counter);
    raw::save_unsigned(rdb, p.expiry);
    raw::save_unsigned(rdb, p.remaining.unwrap_or(0));
    raw::save_slice(rdb, p.owner.as_ref().map_or(&[][..], |h| &h[..]));
    raw::save_unsigned(rdb, u64::from(p.floored));
    raw::save_unsigned(rdb, p.idle_wall);
    raw::save_unsigned(rdb, p.idle_ms.unwrap_or(0));
    raw::save_slice(rdb, p.boot.as_ref().map_or(&[][..], |b| &b.id[..]));
    raw::save_unsigned(rdb, p.boot.map_or(0, |b| b.ms));
}

/// Reads the node record from the type's auxiliary RDB data. `None` on a
/// read error or an unknown version.
///
/// # Safety
/// `rdb` must be the IO handle Redis passed to the `aux_load` callback.
pub unsafe fn read_node_record(rdb: *mut raw::RedisModuleIO, encver: i32) -> Option<NodeRecord> {
    // The same two fields since version 2 (a file written by version 2
    // carries its auxiliary data under that version).
    if encver != ENCODING_VERSION && encver != ENCODING_V2 {
        return None;
    }
    let reclaimed = raw::load_unsigned(rdb).ok()?;
    let longest_lease_ms = raw::load_unsigned(rdb).ok()?;
    (reclaimed <= MAX_TOKEN).then_some(NodeRecord {
        reclaimed,
        longest_lease_ms: longest_lease_ms.min(STREAM_LEASE_LIMIT_MS),
    })
}

/// Writes the node record as the type's auxiliary RDB data.
///
/// # Safety
/// `rdb` must be the IO handle Redis passed to the `aux_save` callback.
pub unsafe fn write_node_record(rdb: *mut raw::RedisModuleIO, n: &NodeRecord) {
    raw::save_unsigned(rdb, n.reclaimed);
    raw::save_unsigned(rdb, n.longest_lease_ms);
}

/// The name of the internal command.
const APPLY: &std::ffi::CStr = c"REDLOCK.APPLY";
/// The version marker of the form of a held lock.
const APPLY_V3: &std::ffi::CStr = c"v3";
/// The version marker of the form of a free lock.
const APPLY_V2: &std::ffi::CStr = c"v2";

/// Emits `REDLOCK.APPLY key v3 counter expiry remaining floored boot-stamp
/// owner-hash` (a held lock) or `REDLOCK.APPLY key v2 counter expiry
/// remaining floored idle-wall idle-ms` (a free one) through `emit`, which
/// is `RedisModule_Replicate` (replicas and the AOF) or
/// `RedisModule_EmitAOF` (AOF rewrite): both take a command name, a format
/// string and the arguments it describes.
macro_rules! emit_apply {
    ($emit:expr, $target:expr, $key:expr, $p:expr) => {{
        let p: &Persisted = $p;
        let counter = p.counter as c_longlong;
        let expiry = p.expiry as c_longlong;
        let remaining = p.remaining.unwrap_or(0) as c_longlong;
        let floored = c_longlong::from(p.floored);
        let cmd: *const c_char = APPLY.as_ptr();
        match &p.owner {
            None => {
                $emit(
                    $target,
                    cmd,
                    c"scllllll".as_ptr(),
                    $key,
                    APPLY_V2.as_ptr(),
                    counter,
                    expiry,
                    remaining,
                    floored,
                    p.idle_wall as c_longlong,
                    p.idle_ms.unwrap_or(0) as c_longlong,
                );
            }
            Some(hash) => {
                let stamp = p.boot.map(|b| b.to_bytes());
                let stamp: &[u8] = stamp.as_ref().map_or(&[][..], |s| &s[..]);
                $emit(
                    $target,
                    cmd,
                    c"scllllbb".as_ptr(),
                    $key,
                    APPLY_V3.as_ptr(),
                    counter,
                    expiry,
                    remaining,
                    floored,
                    stamp.as_ptr(),
                    stamp.len(),
                    hash.as_ptr(),
                    hash.len(),
                );
            }
        }
    }};
}

/// Sends the state `p` of `key` to replicas and the AOF.
///
/// # Safety
/// `ctx` and `key` must belong to the command invocation in progress.
pub unsafe fn replicate(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    p: &Persisted,
) {
    if let Some(replicate) = raw::RedisModule_Replicate {
        emit_apply!(replicate, ctx, key, p);
    }
}

/// Sends `REDLOCK.APPLY key reclaimed counter` (the sweep deleted `key`)
/// to replicas and the AOF.
///
/// # Safety
/// `ctx` must be a context that may replicate; `key` a live string.
pub unsafe fn replicate_reclaimed(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    counter: u64,
) {
    if let Some(replicate) = raw::RedisModule_Replicate {
        replicate(
            ctx,
            APPLY.as_ptr(),
            c"scl".as_ptr(),
            key,
            c"reclaimed".as_ptr(),
            counter as c_longlong,
        );
    }
}

/// Emits `REDLOCK.APPLY key node reclaimed longest-lease-ms` through
/// `emit` (`RedisModule_Replicate` or `RedisModule_EmitAOF`, as
/// [`emit_apply`]).
macro_rules! emit_node {
    ($emit:expr, $target:expr, $key:expr, $n:expr) => {{
        let n: &NodeRecord = $n;
        $emit(
            $target,
            APPLY.as_ptr(),
            c"scll".as_ptr(),
            $key,
            c"node".as_ptr(),
            n.reclaimed as c_longlong,
            n.longest_lease_ms as c_longlong,
        );
    }};
}

/// Sends `REDLOCK.APPLY key node reclaimed longest-lease-ms` to replicas
/// and the AOF.
///
/// # Safety
/// `ctx` and `key` must belong to the command invocation in progress.
pub unsafe fn replicate_node(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    n: &NodeRecord,
) {
    if let Some(replicate) = raw::RedisModule_Replicate {
        emit_node!(replicate, ctx, key, n);
    }
}

/// Sends `REDLOCK.APPLY key acked ms` to replicas only (`A`: not to the
/// AOF, it says nothing of this node's data): what every replica of this
/// master acknowledged knowing of its longest lease, which a replica
/// promoted later starts from (`LeaseAck::promoted`). A form of its own
/// after the node record, not a field of it: a replica of an earlier
/// version refuses this command alone and still learns the record.
///
/// # Safety
/// `ctx` must be a context that may replicate; `key` a live string.
pub unsafe fn replicate_acked(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    acked_ms: u64,
) {
    if let Some(replicate) = raw::RedisModule_Replicate {
        replicate(
            ctx,
            APPLY.as_ptr(),
            c"sclA".as_ptr(),
            key,
            c"acked".as_ptr(),
            acked_ms as c_longlong,
        );
    }
}

/// Writes `REDLOCK.APPLY key node reclaimed longest-lease-ms` into an AOF
/// rewrite.
///
/// # Safety
/// `aof` and `key` must be the handles Redis passed to `aof_rewrite`.
pub unsafe fn rewrite_node(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    n: &NodeRecord,
) {
    if let Some(emit) = raw::RedisModule_EmitAOF {
        emit_node!(emit, aof, key, n);
    }
}

/// Writes the state `p` of `key` into an AOF rewrite.
///
/// # Safety
/// `aof` and `key` must be the handles Redis passed to `aof_rewrite`.
pub unsafe fn rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    p: &Persisted,
) {
    if let Some(emit) = raw::RedisModule_EmitAOF {
        emit_apply!(emit, aof, key, p);
    }
}

/// The state of a `v2` or `v3` `REDLOCK.APPLY`: `fields` are `counter
/// expiry remaining floored idle-wall idle-ms`, `owner` the optional hash.
fn apply_state(
    fields: [&&[u8]; 6],
    owner: &[&[u8]],
    boot: Option<BootStamp>,
) -> Result<Applied, CommandError> {
    let [counter, expiry, remaining, floored, idle_wall, idle_ms] = fields;
    let owner = match owner {
        [] => None,
        [hash] => Some(
            OwnerHash::try_from(*hash).map_err(|_| CommandError::OwnerHashLength(hash.len()))?,
        ),
        _ => return Err(CommandError::WrongArity("redlock.apply")),
    };
    Ok(Applied::State(Persisted {
        counter: args::token_value("counter", counter)?,
        owner,
        expiry: args::non_negative("expiry", expiry)?,
        remaining: Some(args::non_negative("remaining", remaining)?),
        floored: match *floored {
            b"0" => false,
            b"1" => true,
            _ => return Err(CommandError::NotAnInteger("floored (0 or 1)")),
        },
        idle_wall: args::non_negative("idle-wall", idle_wall)?,
        idle_ms: Some(args::non_negative("idle-ms", idle_ms)?),
        boot,
    }))
}

/// Parses `REDLOCK.APPLY`'s arguments (`args[0]` is the command name,
/// `args[1]` the key), in any form.
pub fn parse_apply(args: &[&[u8]]) -> Result<Applied, CommandError> {
    match args {
        [_, _, word, counter] if word.eq_ignore_ascii_case(b"reclaimed") => Ok(Applied::Reclaimed(
            args::token_value("reclaimed counter", counter)?,
        )),
        [_, _, word, ms] if word.eq_ignore_ascii_case(b"acked") => Ok(Applied::Acked(
            args::non_negative("acked-ms", ms)?.min(STREAM_LEASE_LIMIT_MS),
        )),
        [_, _, word, reclaimed, longest] if word.eq_ignore_ascii_case(b"node") => {
            Ok(Applied::Node(NodeRecord {
                reclaimed: args::token_value("reclaimed counter", reclaimed)?,
                longest_lease_ms: args::non_negative("longest-lease-ms", longest)?
                    .min(STREAM_LEASE_LIMIT_MS),
            }))
        }
        [_, _, word, offset, r, hold, wait @ ..]
            if word.eq_ignore_ascii_case(b"sync") && wait.len() <= 1 =>
        {
            Ok(Applied::Sync {
                offset: args::non_negative("offset", offset)?,
                r: args::non_negative("sync-replicas", r)?,
                hold_ms: args::non_negative("hold-ms", hold)?.min(STREAM_LEASE_LIMIT_MS),
                // A master of an earlier version does not say: 0, the
                // cut-off of any link down time (`sync_rule::promotion`).
                new_disk_wait_ms: match wait {
                    [w] => args::non_negative("new-disk-wait-ms", w)?.min(STREAM_LEASE_LIMIT_MS),
                    _ => 0,
                },
            })
        }
        [_, _, v, tail @ ..] if v.eq_ignore_ascii_case(b"v3") => match tail {
            [c, e, r, f, stamp, owner] => {
                let boot = match *stamp {
                    [] => None,
                    bytes => Some(
                        BootStamp::from_bytes(bytes)
                            .ok_or(CommandError::BootStampLength(bytes.len()))?,
                    ),
                };
                // A held lock: no idle time.
                apply_state([c, e, r, f, &&b"0"[..], &&b"0"[..]], &[*owner], boot)
            }
            _ => Err(CommandError::WrongArity("redlock.apply")),
        },
        [_, _, v, tail @ ..] if v.eq_ignore_ascii_case(b"v2") => match tail {
            [c, e, r, f, iw, im, owner @ ..] if owner.len() <= 1 => {
                apply_state([c, e, r, f, iw, im], owner, None)
            }
            _ => Err(CommandError::WrongArity("redlock.apply")),
        },
        _ => {
            let old = args::apply_v1(args)?;
            Ok(Applied::State(Persisted {
                counter: old.counter,
                owner: (!old.owner.is_empty()).then(|| hash_owner(old.owner)),
                expiry: old.expiry,
                remaining: None,
                floored: false,
                idle_wall: 0,
                idle_ms: None,
                boot: None,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::WallMillis;
    use crate::core::lock::{LockState, MonoMillis};

    const WALL: WallMillis = 1_796_000_000_000;

    fn held(counter: u64, deadline: MonoMillis) -> LockState {
        LockState::from_parts(counter, Some([7; 16]), deadline, 0, true)
    }

    fn state(a: Result<Applied, CommandError>) -> Result<Persisted, CommandError> {
        a.map(|a| match a {
            Applied::State(p) => p,
            other => panic!("not a state: {other:?}"),
        })
    }

    #[test]
    fn apply_parses_the_node_wide_forms() {
        let reclaimed: Vec<&[u8]> = vec![b"x", b"k", b"reclaimed", b"1796000000000000"];
        assert_eq!(
            parse_apply(&reclaimed),
            Ok(Applied::Reclaimed(1_796_000_000_000_000))
        );
        let node: Vec<&[u8]> = vec![b"x", b"k", b"NODE", b"12", b"300000"];
        assert_eq!(
            parse_apply(&node),
            Ok(Applied::Node(NodeRecord {
                reclaimed: 12,
                longest_lease_ms: 300_000
            }))
        );
        let acked: Vec<&[u8]> = vec![b"x", b"k", b"acked", b"5000"];
        assert_eq!(parse_apply(&acked), Ok(Applied::Acked(5_000)));
        let sync: Vec<&[u8]> = vec![b"x", b"k", b"sync", b"1234", b"2", b"500"];
        assert_eq!(
            parse_apply(&sync),
            Ok(Applied::Sync {
                offset: 1234,
                r: 2,
                hold_ms: 500,
                new_disk_wait_ms: 0
            })
        );
        let sync: Vec<&[u8]> = vec![b"x", b"k", b"sync", b"1234", b"2", b"500", b"3000"];
        assert_eq!(
            parse_apply(&sync),
            Ok(Applied::Sync {
                offset: 1234,
                r: 2,
                hold_ms: 500,
                new_disk_wait_ms: 3_000
            })
        );
        for bad in [
            vec![&b"x"[..], b"k", b"sync", b"-1", b"2", b"0"],
            vec![&b"x"[..], b"k", b"sync", b"1", b"2", b"0", b"-1"],
            vec![&b"x"[..], b"k", b"sync", b"1", b"2", b"0", b"1", b"1"],
            vec![&b"x"[..], b"k", b"reclaimed", b"-1"],
            vec![&b"x"[..], b"k", b"reclaimed", b"9223372036854775808"],
            vec![&b"x"[..], b"k", b"node", b"1", b"x"],
        ] {
            assert!(parse_apply(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn apply_parses_both_forms_and_hashes_old_owners() {
        let hash = hash_owner(b"me");
        let v2: Vec<&[u8]> = vec![
            b"x",
            b"k",
            b"v2",
            b"5",
            b"1796000000500",
            b"500",
            b"1",
            b"0",
            b"0",
            &hash,
        ];
        assert_eq!(
            state(parse_apply(&v2)),
            Ok(Persisted {
                counter: 5,
                owner: Some(hash),
                expiry: 1_796_000_000_500,
                remaining: Some(500),
                floored: true,
                idle_wall: 0,
                idle_ms: Some(0),
                boot: None,
            })
        );
        let v2_free: Vec<&[u8]> = vec![
            b"x",
            b"k",
            b"V2",
            b"5",
            b"0",
            b"0",
            b"0",
            b"1796000000000",
            b"500",
        ];
        assert_eq!(
            state(parse_apply(&v2_free)).map(|p| (p.idle_wall, p.idle_ms)),
            Ok((1_796_000_000_000, Some(500)))
        );
        assert_eq!(state(parse_apply(&v2_free)).map(|p| p.owner), Ok(None));
        let v1: Vec<&[u8]> = vec![b"x", b"k", b"5", b"1796000000500", b"me"];
        assert_eq!(
            state(parse_apply(&v1)),
            Ok(Persisted {
                counter: 5,
                owner: Some(hash),
                expiry: 1_796_000_000_500,
                remaining: None,
                floored: false,
                idle_wall: 0,
                idle_ms: None,
                boot: None,
            })
        );
        let short: Vec<&[u8]> = vec![
            b"x", b"k", b"v2", b"5", b"0", b"0", b"0", b"0", b"0", b"abc",
        ];
        assert_eq!(parse_apply(&short), Err(CommandError::OwnerHashLength(3)));
        let bad: Vec<&[u8]> = vec![b"x", b"k", b"v2", b"-5", b"0", b"0", b"0", b"0", b"0"];
        assert!(parse_apply(&bad).is_err());
        let bad_flag: Vec<&[u8]> = vec![b"x", b"k", b"v2", b"5", b"0", b"0", b"2", b"0", b"0"];
        assert!(parse_apply(&bad_flag).is_err());
    }
    #[test]
    fn a_lease_read_back_on_the_boot_that_wrote_it_ends_at_its_real_end() {
        let boot = |id: u8, ms: u64| Some(BootStamp { id: [id; 16], ms });
        // Written with 20 s left at boot clock 100 s.
        let p = persist_at(&held(5, 21_000), 1_000, WALL, boot(1, 100_000));
        assert_eq!(p.boot, boot(1, 100_000));
        let disk = Source::Disk { clamp_ms: 60_000 };
        // Read 25 s later on the same boot: over, free, counter kept.
        let s = restore(&p, disk, 9, WALL + 25_000, boot(1, 125_000));
        assert_eq!(s.inspect(9).pttl, None);
        assert_eq!(s.counter(), 5);
        // 5 s later: 15 s left (and the one millisecond of slack).
        let s = restore(&p, disk, 9, WALL + 5_000, boot(1, 105_000));
        assert_eq!(s.inspect(9).pttl, Some(15_001));
        // Another boot: the time left when written.
        let s = restore(&p, disk, 9, WALL + 25_000, boot(2, 1_000));
        assert_eq!(s.inspect(9).pttl, Some(20_000));
        // From a running master: the time left when sent, whatever the boot.
        let stream = Source::Stream { clamp_ms: 60_000 };
        let s = restore(&p, stream, 9, WALL + 5_000, boot(1, 105_000));
        assert_eq!(s.inspect(9).pttl, Some(20_000));
    }

    #[test]
    fn apply_parses_the_boot_stamp_of_version_three() {
        let hash = hash_owner(b"me");
        let stamp = BootStamp {
            id: [3u8; 16],
            ms: 123_456,
        };
        let bytes = stamp.to_bytes();
        let v3: Vec<&[u8]> = vec![
            b"x",
            b"k",
            b"v3",
            b"5",
            b"1796000000500",
            b"500",
            b"1",
            &bytes,
            &hash,
        ];
        let p = state(parse_apply(&v3)).unwrap();
        assert_eq!(
            p,
            Persisted {
                counter: 5,
                owner: Some(hash),
                expiry: 1_796_000_000_500,
                remaining: Some(500),
                floored: true,
                idle_wall: 0,
                idle_ms: Some(0),
                boot: Some(stamp),
            }
        );
        // No stamp: read as from another boot.
        let mut unknown = v3.clone();
        unknown[7] = b"";
        assert_eq!(state(parse_apply(&unknown)).unwrap().boot, None);
        let mut short = v3.clone();
        short[7] = b"abc";
        assert_eq!(parse_apply(&short), Err(CommandError::BootStampLength(3)));
        let mut bad_hash = v3.clone();
        bad_hash[8] = b"abc";
        assert_eq!(
            parse_apply(&bad_hash),
            Err(CommandError::OwnerHashLength(3))
        );
        // A held lock only: the owner hash is not optional, nothing follows it.
        for wrong in [&v3[..8], &[&v3[..], &[&b"more"[..]][..]].concat()[..]] {
            assert_eq!(
                parse_apply(wrong),
                Err(CommandError::WrongArity("redlock.apply"))
            );
        }
    }

    #[test]
    fn a_held_lock_travels_as_v3_and_a_free_one_as_v2() {
        // What the emitter writes, read back: the same state.
        let boot = Some(BootStamp {
            id: [9; 16],
            ms: 77,
        });
        let leased = persist_at(&held(5, 21_000), 1_000, WALL, boot);
        let stamp = leased.boot.unwrap().to_bytes();
        let owner = leased.owner.unwrap();
        let (counter, expiry, remaining) = (
            leased.counter.to_string(),
            leased.expiry.to_string(),
            leased.remaining.unwrap().to_string(),
        );
        let v3: Vec<&[u8]> = vec![
            b"x",
            b"k",
            b"v3",
            counter.as_bytes(),
            expiry.as_bytes(),
            remaining.as_bytes(),
            b"1",
            &stamp,
            &owner,
        ];
        assert_eq!(state(parse_apply(&v3)), Ok(leased));
        let free = persist_at(&held(5, 1_500), 1_750, WALL, boot);
        let (idle_wall, idle_ms) = (
            free.idle_wall.to_string(),
            free.idle_ms.unwrap().to_string(),
        );
        let v2: Vec<&[u8]> = vec![
            b"x",
            b"k",
            b"v2",
            b"5",
            b"0",
            b"0",
            b"1",
            idle_wall.as_bytes(),
            idle_ms.as_bytes(),
        ];
        assert_eq!(
            state(parse_apply(&v2)),
            Ok(Persisted { boot: None, ..free })
        );
    }
}
