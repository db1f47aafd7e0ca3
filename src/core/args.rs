//! Argument parsing for the commands: pure functions over the raw argument
//! bytes, so every bad input is tested without Redis.

use crate::core::error::CommandError;
use crate::core::lock::{MAX_OWNER_LEN, MAX_TOKEN};

/// `REDLOCK.ACQUIRE key owner ttl-ms [FLOOR n] [SYNC r]`
#[derive(Debug, PartialEq, Eq)]
pub struct Acquire<'a> {
    /// The owner id.
    pub owner: &'a [u8],
    /// Lease length in milliseconds.
    pub ttl: u64,
    /// Lowest token to hand out (0 when not given).
    pub floor: u64,
    /// The replicas the client will wait for (`SYNC r`; 0 when not given).
    pub sync: u64,
}

/// `REDLOCK.RELEASE key owner`
#[derive(Debug, PartialEq, Eq)]
pub struct Release<'a> {
    /// The owner id.
    pub owner: &'a [u8],
}

/// `REDLOCK.EXTEND key owner ttl-ms [SYNC r]`
#[derive(Debug, PartialEq, Eq)]
pub struct Extend<'a> {
    /// The owner id.
    pub owner: &'a [u8],
    /// New lease length in milliseconds.
    pub ttl: u64,
    /// The replicas the client will wait for (`SYNC r`; 0 when not given).
    pub sync: u64,
}

/// `REDLOCK.FENCE key owner [token] [SYNC r]`
#[derive(Debug, PartialEq, Eq)]
pub struct Fence<'a> {
    /// The owner id.
    pub owner: &'a [u8],
    /// Raise the counter to at least this.
    pub token: Option<u64>,
    /// The replicas the client will wait for (`SYNC r`; 0 when not given).
    pub sync: u64,
}

/// `REDLOCK.APPLY key counter expiry-unix-ms [owner]` (internal): the form
/// written by version 1 of the module, still read from old AOF files and
/// from masters that run it. The current form is parsed by
/// [`crate::host::persist::parse_apply`].
#[derive(Debug, PartialEq, Eq)]
pub struct ApplyV1<'a> {
    /// The resulting counter.
    pub counter: u64,
    /// Absolute wall-clock end of the lease, 0 when free.
    pub expiry: u64,
    /// The holder, empty when free.
    pub owner: &'a [u8],
}

/// Parses ACQUIRE's arguments (`args[0]` is the command name, `args[1]` the
/// key). The options `FLOOR n` and `SYNC r` come in either order, each at
/// most once.
pub fn acquire<'a>(args: &[&'a [u8]], max_ttl: i64) -> Result<Acquire<'a>, CommandError> {
    const NAME: &str = "redlock.acquire";
    if args.len() < 4 || args.len() > 8 {
        return Err(CommandError::WrongArity(NAME));
    }
    let owner = owner(args[2])?;
    let ttl = ttl(args[3], max_ttl)?;
    let (mut floor, mut sync) = (None, None);
    let mut options = args[4..].chunks(2);
    for (i, pair) in (&mut options).enumerate() {
        let position = 4 + 2 * i;
        let (keyword, value) = match pair {
            [keyword, value] => (keyword, value),
            [keyword] if keyword.eq_ignore_ascii_case(b"FLOOR") => {
                return Err(CommandError::Syntax {
                    expected: "a value after FLOOR",
                    position: position + 1,
                })
            }
            [keyword] if keyword.eq_ignore_ascii_case(b"SYNC") => {
                return Err(CommandError::Syntax {
                    expected: "a value after SYNC",
                    position: position + 1,
                })
            }
            _ => return Err(CommandError::WrongArity(NAME)),
        };
        if keyword.eq_ignore_ascii_case(b"FLOOR") && floor.is_none() {
            floor = Some(token_value("FLOOR", value)?);
        } else if keyword.eq_ignore_ascii_case(b"SYNC") && sync.is_none() {
            sync = Some(sync_value(value)?);
        } else {
            return Err(CommandError::Syntax {
                expected: "FLOOR or SYNC (each at most once)",
                position,
            });
        }
    }
    Ok(Acquire {
        owner,
        ttl,
        floor: floor.unwrap_or(0),
        sync: sync.unwrap_or(0),
    })
}

/// Splits a trailing `SYNC r` off `args`: the arguments before it and `r`
/// (0 when there is none).
fn trailing_sync<'s, 'a>(args: &'s [&'a [u8]]) -> Result<(&'s [&'a [u8]], u64), CommandError> {
    match args {
        [rest @ .., keyword, value] if keyword.eq_ignore_ascii_case(b"SYNC") && rest.len() >= 3 => {
            Ok((rest, sync_value(value)?))
        }
        [_, _, _, .., keyword] if keyword.eq_ignore_ascii_case(b"SYNC") => {
            Err(CommandError::Syntax {
                expected: "a value after SYNC",
                position: args.len(),
            })
        }
        _ => Ok((args, 0)),
    }
}

/// `SYNC r`'s value: 0..=[`MAX_SYNC_REPLICAS`](crate::core::sync_rule::MAX_SYNC_REPLICAS).
fn sync_value(bytes: &[u8]) -> Result<u64, CommandError> {
    Ok(bounded("SYNC", bytes, 0, crate::core::sync_rule::MAX_SYNC_REPLICAS)? as u64)
}

/// Parses RELEASE's arguments.
pub fn release<'a>(args: &[&'a [u8]]) -> Result<Release<'a>, CommandError> {
    match args {
        [_, _, o] => Ok(Release { owner: owner(o)? }),
        _ => Err(CommandError::WrongArity("redlock.release")),
    }
}

/// Parses EXTEND's arguments.
pub fn extend<'a>(args: &[&'a [u8]], max_ttl: i64) -> Result<Extend<'a>, CommandError> {
    let (args, sync) = trailing_sync(args)?;
    match args {
        [_, _, o, t] => Ok(Extend {
            owner: owner(o)?,
            ttl: ttl(t, max_ttl)?,
            sync,
        }),
        _ => Err(CommandError::WrongArity("redlock.extend")),
    }
}

/// Parses FENCE's arguments.
pub fn fence<'a>(args: &[&'a [u8]]) -> Result<Fence<'a>, CommandError> {
    let (args, sync) = trailing_sync(args)?;
    match args {
        [_, _, o] => Ok(Fence {
            owner: owner(o)?,
            token: None,
            sync,
        }),
        [_, _, o, t] => Ok(Fence {
            owner: owner(o)?,
            token: Some(token_value("token", t)?),
            sync,
        }),
        _ => Err(CommandError::WrongArity("redlock.fence")),
    }
}

/// Checks INSPECT's arity.
pub fn inspect(args: &[&[u8]]) -> Result<(), CommandError> {
    match args {
        [_, _] => Ok(()),
        _ => Err(CommandError::WrongArity("redlock.inspect")),
    }
}

/// Longest `REDLOCK.WAIT` timeout (one day); 0 means no limit.
pub const MAX_WAIT_MS: i64 = 86_400_000;

/// `REDLOCK.WAIT key timeout-ms [QUEUE owner ticket]`
#[derive(Debug, PartialEq, Eq)]
pub struct Wait<'a> {
    /// Timeout in ms, 0 for no limit.
    pub timeout_ms: u64,
    /// Wait in the lock's queue as `owner`, ordered by `ticket`.
    pub queue: Option<(&'a [u8], u64)>,
}

/// Parses WAIT's arguments.
pub fn wait<'a>(args: &[&'a [u8]]) -> Result<Wait<'a>, CommandError> {
    let (timeout, queue) = match args {
        [_, _, timeout] => (timeout, None),
        [_, _, timeout, keyword, o, ticket] => {
            if !keyword.eq_ignore_ascii_case(b"QUEUE") {
                return Err(CommandError::Syntax {
                    expected: "QUEUE",
                    position: 3,
                });
            }
            (timeout, Some((owner(o)?, non_negative("ticket", ticket)?)))
        }
        _ => return Err(CommandError::WrongArity("redlock.wait")),
    };
    Ok(Wait {
        timeout_ms: bounded("timeout-ms", timeout, 0, MAX_WAIT_MS)? as u64,
        queue,
    })
}

/// Parses APPLY's arguments in the version-1 form.
pub fn apply_v1<'a>(args: &[&'a [u8]]) -> Result<ApplyV1<'a>, CommandError> {
    let (counter, expiry, owner_bytes): (&[u8], &[u8], &[u8]) = match args {
        [_, _, c, e] => (c, e, b""),
        [_, _, c, e, o] => (c, e, owner(o)?),
        _ => return Err(CommandError::WrongArity("redlock.apply")),
    };
    Ok(ApplyV1 {
        counter: token_value("counter", counter)?,
        expiry: non_negative("expiry", expiry)?,
        owner: owner_bytes,
    })
}

/// An integer in `0..=i64::MAX`.
pub fn non_negative(name: &'static str, bytes: &[u8]) -> Result<u64, CommandError> {
    Ok(bounded(name, bytes, 0, i64::MAX)? as u64)
}

/// Refuses a `FLOOR` or FENCE token more than a day ahead of the node's
/// wall clock (`wall_us`, microseconds since the epoch).
pub fn token_within_reach(
    name: &'static str,
    token: u64,
    wall_us: u64,
) -> Result<(), CommandError> {
    if crate::core::lock::token_within_reach(token, wall_us) {
        Ok(())
    } else {
        Err(CommandError::TokenAhead {
            name,
            value: token,
            node_clock_us: wall_us,
        })
    }
}

fn owner(bytes: &[u8]) -> Result<&[u8], CommandError> {
    if bytes.is_empty() || bytes.len() > MAX_OWNER_LEN {
        return Err(CommandError::OwnerLength(bytes.len()));
    }
    Ok(bytes)
}

fn ttl(bytes: &[u8], max_ttl: i64) -> Result<u64, CommandError> {
    match integer("ttl-ms", bytes)? {
        Some(ttl) if ttl > max_ttl => Err(CommandError::TtlAboveMax { ttl, max: max_ttl }),
        Some(ttl) if ttl >= 1 => Ok(ttl as u64),
        _ => Err(CommandError::OutOfRange {
            name: "ttl-ms",
            min: 1,
            max: max_ttl,
        }),
    }
}

/// A token value: an integer in `0..=i64::MAX`.
pub fn token_value(name: &'static str, bytes: &[u8]) -> Result<u64, CommandError> {
    Ok(bounded(name, bytes, 0, MAX_TOKEN as i64)? as u64)
}

/// A decimal integer in `min..=max`.
fn bounded(name: &'static str, bytes: &[u8], min: i64, max: i64) -> Result<i64, CommandError> {
    match integer(name, bytes)? {
        Some(value) if (min..=max).contains(&value) => Ok(value),
        _ => Err(CommandError::OutOfRange { name, min, max }),
    }
}

/// A decimal integer: digits only with an optional leading `-`, as Redis
/// itself reads integers. `Ok(None)` when it does not fit in an i64.
///
/// The first 18 digits are read eight at a time and without overflow
/// checks: any 18 digits are below 10^18 < 2^63 (callgrind: a digit at a
/// time, a 16-digit `FLOOR` cost about 260 instructions). Longer numbers go
/// on a digit at a time with checked arithmetic; a negative one is
/// accumulated downwards so that `i64::MIN` fits.
fn integer(name: &'static str, bytes: &[u8]) -> Result<Option<i64>, CommandError> {
    const UNCHECKED: usize = 18;
    let (negative, digits) = match bytes.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, bytes),
    };
    if digits.is_empty() {
        return Err(CommandError::NotAnInteger(name));
    }
    let (head, tail) = digits.split_at(digits.len().min(UNCHECKED));
    let mut chunks = head.chunks_exact(8);
    let mut head_value = 0u64;
    for chunk in &mut chunks {
        let word = <[u8; 8]>::try_from(chunk).map(u64::from_le_bytes);
        let Some(eight) = word.ok().and_then(eight_digits) else {
            return Err(CommandError::NotAnInteger(name));
        };
        head_value = head_value * 100_000_000 + eight;
    }
    for &b in chunks.remainder() {
        if !b.is_ascii_digit() {
            return Err(CommandError::NotAnInteger(name));
        }
        head_value = head_value * 10 + u64::from(b - b'0');
    }
    // At most 18 digits: below 10^18, so it fits either way.
    let head_value = head_value as i64;
    let mut value = Some(if negative { -head_value } else { head_value });
    for &b in tail {
        if !b.is_ascii_digit() {
            return Err(CommandError::NotAnInteger(name));
        }
        let digit = i64::from(b - b'0');
        value = value.and_then(|v| v.checked_mul(10)).and_then(|v| {
            if negative {
                v.checked_sub(digit)
            } else {
                v.checked_add(digit)
            }
        });
    }
    Ok(value)
}

/// The value of eight ASCII digits read as a little-endian word (the first
/// digit in the lowest byte), `None` unless every byte is `0`..=`9`.
fn eight_digits(word: u64) -> Option<u64> {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    // A byte is a digit when it is 0x30..=0x3F and stays so with 6 added
    // (0x3A..=0x3F do not). A carry out of a byte only happens from a byte
    // that fails the first test.
    if word & HIGH_NIBBLES != ZEROS
        || word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES != ZEROS
    {
        return None;
    }
    // Pairs of digits, then fours, then all eight, each step multiplying the
    // earlier (lower) part up and adding the later one.
    let v = word - ZEROS;
    let v = (v * 10 + (v >> 8)) & 0x00FF_00FF_00FF_00FF;
    let v = (v * 100 + (v >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((v * 10_000 + (v >> 32)) & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: i64 = 60_000;

    #[test]
    fn eight_digits_reads_digits_and_refuses_the_rest() {
        let word = |text: &[u8; 8]| u64::from_le_bytes(*text);
        assert_eq!(eight_digits(word(b"12345678")), Some(12_345_678));
        assert_eq!(eight_digits(word(b"00000000")), Some(0));
        assert_eq!(eight_digits(word(b"99999999")), Some(99_999_999));
        for bad in [
            b"1234567:",
            b"/2345678",
            b"1234 678",
            b"12345\xff78",
            b"\x002345678",
        ] {
            assert_eq!(eight_digits(word(bad)), None, "{bad:?}");
        }
    }

    proptest! {
        /// Any eight bytes: digits read as their value, anything else is
        /// refused.
        #[test]
        fn eight_bytes_read_like_str_parse(bytes: [u8; 8]) {
            let expected = bytes
                .iter()
                .all(u8::is_ascii_digit)
                .then(|| std::str::from_utf8(&bytes).ok()?.parse::<u64>().ok())
                .flatten();
            prop_assert_eq!(eight_digits(u64::from_le_bytes(bytes)), expected);
        }

        /// Any string of digits (with or without `-`, of any length up to
        /// 25, so across the unchecked head and past i64's range) reads as
        /// `str::parse` reads it.
        #[test]
        fn digit_strings_parse_like_str_parse(negative: bool, digits in "[0-9]{1,25}") {
            let text = if negative { format!("-{digits}") } else { digits };
            prop_assert_eq!(integer("n", text.as_bytes()), Ok(text.parse::<i64>().ok()));
        }

        /// A digit string with one byte replaced by a non-digit anywhere
        /// (in the words read eight at a time too) is not an integer.
        #[test]
        fn a_non_digit_anywhere_is_refused(digits in "[0-9]{1,25}", at: prop::sample::Index, bad in any::<u8>().prop_filter("non-digit", |b| !b.is_ascii_digit())) {
            let mut text = digits.into_bytes();
            let i = at.index(text.len());
            text[i] = bad;
            if i == 0 && bad == b'-' && text.len() > 1 {
                return Ok(());
            }
            prop_assert_eq!(integer("n", &text), Err(CommandError::NotAnInteger("n")));
        }
    }

    fn acq(args: &[&str]) -> Result<Acquire<'static>, CommandError> {
        let owned: Vec<&'static [u8]> = args
            .iter()
            .map(|a| &*Box::leak(a.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        acquire(&owned, MAX)
    }

    #[test]
    fn integers_parse_like_str_parse() {
        for text in [
            "0",
            "-0",
            "7",
            "-7",
            "007",
            "60000",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999999",
        ] {
            assert_eq!(
                integer("n", text.as_bytes()),
                Ok(text.parse::<i64>().ok()),
                "{text}"
            );
        }
        for text in ["", "-", "+1", "1-", "--1", "1.0", " 1", "1 ", "１"] {
            assert_eq!(
                integer("n", text.as_bytes()),
                Err(CommandError::NotAnInteger("n")),
                "{text:?}"
            );
        }
    }

    #[test]
    fn acquire_accepts_valid_forms() {
        assert_eq!(
            acq(&["redlock.acquire", "k", "me", "100"]),
            Ok(Acquire {
                owner: b"me",
                ttl: 100,
                floor: 0,
                sync: 0
            })
        );
        for form in [
            &["a", "k", "me", "100", "FLOOR", "7", "SYNC", "2"][..],
            &["a", "k", "me", "100", "sync", "2", "floor", "7"][..],
        ] {
            assert_eq!(acq(form).map(|a| (a.floor, a.sync)), Ok((7, 2)), "{form:?}");
        }
        assert_eq!(
            acq(&["a", "k", "me", "100", "SYNC", "64"]).map(|a| (a.floor, a.sync)),
            Ok((0, 64))
        );
        assert_eq!(
            acq(&[
                "redlock.acquire",
                "k",
                "me",
                "100",
                "floor",
                "9223372036854775807"
            ])
            .map(|a| a.floor),
            Ok(9_223_372_036_854_775_807)
        );
    }

    #[test]
    fn acquire_rejects_bad_input_with_named_errors() {
        let cases: &[(&[&str], &str)] = &[
            (&["a", "k", "me"], "wrong number of arguments"),
            (
                &["a", "k", "me", "1", "FLOOR", "1", "x"],
                "wrong number of arguments",
            ),
            (&["a", "k", "me", "1", "FLOOR"], "a value after FLOOR"),
            (
                &["a", "k", "me", "1", "CEIL", "5"],
                "expected FLOOR or SYNC",
            ),
            (&["a", "k", "me", "1", "SYNC"], "a value after SYNC"),
            (
                &["a", "k", "me", "1", "FLOOR", "1", "SYNC"],
                "a value after SYNC",
            ),
            (
                &["a", "k", "me", "1", "SYNC", "1", "SYNC", "1"],
                "each at most once",
            ),
            (
                &["a", "k", "me", "1", "SYNC", "65"],
                "invalid SYNC: must be between 0 and 64",
            ),
            (&["a", "k", "me", "1", "SYNC", "-1"], "invalid SYNC"),
            (
                &["a", "k", "me", "1", "SYNC", "x"],
                "invalid SYNC: not an integer",
            ),
            (
                &["a", "k", "me", "1", "FLOOR", "1", "SYNC", "1", "x"],
                "wrong number of arguments",
            ),
            (&["a", "k", "me", "abc"], "invalid ttl-ms: not an integer"),
            (&["a", "k", "me", "+5"], "invalid ttl-ms: not an integer"),
            (&["a", "k", "me", "1.5"], "invalid ttl-ms: not an integer"),
            (
                &["a", "k", "me", "0"],
                "invalid ttl-ms: must be between 1 and 60000",
            ),
            (&["a", "k", "me", "-5"], "invalid ttl-ms: must be between 1"),
            (
                &["a", "k", "me", "60001"],
                "above redlock.max-ttl-ms (60000)",
            ),
            (
                &["a", "k", "me", "99999999999999999999"],
                "invalid ttl-ms: must be between",
            ),
            (
                &["a", "k", "", "5"],
                "invalid owner: must be 1 to 256 bytes, got 0",
            ),
            (
                &["a", "k", "me", "5", "FLOOR", "9223372036854775808"],
                "invalid FLOOR: must be between 0 and 9223372036854775807",
            ),
            (&["a", "k", "me", "5", "FLOOR", "-1"], "invalid FLOOR"),
            (
                &["a", "k", "me", "5", "FLOOR", "x"],
                "invalid FLOOR: not an integer",
            ),
        ];
        for (args, expected) in cases {
            let err = acq(args).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.starts_with("ERR "), "{err}");
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        let long = "x".repeat(257);
        assert_eq!(
            acq(&["a", "k", &long, "5"]),
            Err(CommandError::OwnerLength(257))
        );
        assert!(acq(&["a", "k", &"x".repeat(256), "5"]).is_ok());
    }

    #[test]
    fn other_commands_check_arity_and_values() {
        assert!(release(&[b"r", b"k"]).is_err());
        assert!(release(&[b"r", b"k", b"o", b"x"]).is_err());
        assert_eq!(release(&[b"r", b"k", b"o"]), Ok(Release { owner: b"o" }));
        assert!(extend(&[b"e", b"k", b"o", b"0"], MAX).is_err());
        assert_eq!(
            extend(&[b"e", b"k", b"o", b"10"], MAX),
            Ok(Extend {
                owner: b"o",
                ttl: 10,
                sync: 0
            })
        );
        assert_eq!(
            extend(&[b"e", b"k", b"o", b"10", b"SYNC", b"2"], MAX).map(|e| e.sync),
            Ok(2)
        );
        assert!(extend(&[b"e", b"k", b"o", b"10", b"SYNC"], MAX).is_err());
        assert!(extend(&[b"e", b"k", b"o", b"SYNC", b"2"], MAX).is_err());
        assert_eq!(
            fence(&[b"f", b"k", b"o"]),
            Ok(Fence {
                owner: b"o",
                token: None,
                sync: 0
            })
        );
        assert_eq!(
            fence(&[b"f", b"k", b"o", b"SYNC", b"1"]),
            Ok(Fence {
                owner: b"o",
                token: None,
                sync: 1
            })
        );
        assert_eq!(
            fence(&[b"f", b"k", b"o", b"9", b"sync", b"3"]).map(|f| (f.token, f.sync)),
            Ok((Some(9), 3))
        );
        assert!(fence(&[b"f", b"k", b"o", b"SYNC"]).is_err());
        assert_eq!(
            fence(&[b"f", b"k", b"o", b"0"]),
            Ok(Fence {
                owner: b"o",
                token: Some(0),
                sync: 0
            })
        );
        assert!(fence(&[b"f", b"k", b"o", b"-1"]).is_err());
        assert!(fence(&[b"f", b"k", b"o", b"1", b"2"]).is_err());
        assert!(inspect(&[b"i", b"k", b"x"]).is_err());
        assert!(inspect(&[b"i", b"k"]).is_ok());
    }

    #[test]
    fn apply_parses_free_and_held_states() {
        assert_eq!(
            apply_v1(&[b"a", b"k", b"5", b"0"]),
            Ok(ApplyV1 {
                counter: 5,
                expiry: 0,
                owner: b""
            })
        );
        assert_eq!(
            apply_v1(&[b"a", b"k", b"5", b"1700000000000", b"me"]),
            Ok(ApplyV1 {
                counter: 5,
                expiry: 1_700_000_000_000,
                owner: b"me"
            })
        );
        assert!(apply_v1(&[b"a", b"k", b"x", b"0"]).is_err());
    }

    #[test]
    fn wait_takes_a_bounded_timeout() {
        assert_eq!(
            wait(&[b"w", b"k", b"0"]),
            Ok(Wait {
                timeout_ms: 0,
                queue: None
            })
        );
        assert_eq!(
            wait(&[b"w", b"k", b"86400000", b"queue", b"me", b"17"]),
            Ok(Wait {
                timeout_ms: 86_400_000,
                queue: Some((b"me", 17))
            })
        );
        let cases: &[(&[&[u8]], &str)] = &[
            (
                &[b"w", b"k"],
                "wrong number of arguments for 'redlock.wait'",
            ),
            (&[b"w", b"k", b"1", b"2"], "wrong number of arguments"),
            (&[b"w", b"k", b"1", b"LINE", b"me", b"1"], "expected QUEUE"),
            (&[b"w", b"k", b"1", b"QUEUE", b"", b"1"], "invalid owner"),
            (
                &[b"w", b"k", b"1", b"QUEUE", b"me", b"-1"],
                "invalid ticket",
            ),
            (&[b"w", b"k", b"x"], "invalid timeout-ms: not an integer"),
            (
                &[b"w", b"k", b"-1"],
                "invalid timeout-ms: must be between 0 and 86400000",
            ),
            (
                &[b"w", b"k", b"86400001"],
                "invalid timeout-ms: must be between 0 and 86400000",
            ),
        ];
        for (args, expected) in cases {
            let err = wait(args).unwrap_err().to_string();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
    }

    #[test]
    fn tokens_more_than_a_day_ahead_are_refused_by_name() {
        let wall_us = 1_796_000_000_000_000;
        assert!(token_within_reach("FLOOR", 5, wall_us).is_ok());
        assert!(token_within_reach("FLOOR", wall_us + 3_600_000_000, wall_us).is_ok());
        let err = token_within_reach("FLOOR", wall_us + 2 * 86_400_000_000, wall_us)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("ERR invalid FLOOR: "), "{err}");
        assert!(err.contains("more than one day ahead"), "{err}");
        assert!(err.contains(&wall_us.to_string()), "{err}");
        let err = token_within_reach("token", u64::MAX / 2, wall_us)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("ERR invalid token: "), "{err}");
    }
}
