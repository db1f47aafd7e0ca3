//! How long a lease read back from its persisted form still runs, from the
//! readings written with it and the reader's own (DESIGN §7, §12).
//! Independent of Redis: every reading is passed in; they are taken in
//! [`crate::host::clock`].
//!
//! A lease leaves the process with three readings of its end:
//! - the *remaining* time when it was written;
//! - its *wall-clock end* (wall clock when written + remaining);
//! - a *boot stamp*: the kernel's boot id and a reading of the machine's
//!   `CLOCK_MONOTONIC` when it was written (encoding v3 on; see
//!   [`BootStamp`]).
//!
//! `CLOCK_MONOTONIC` runs from the boot of the machine, is never set, and
//! is the clock the node's leases run on (`std::time::Instant`), and the
//! clock a holder's validity runs on. Within one boot
//! `boot now − boot written` is therefore exactly the time the lease ran
//! since the record was written, however the wall clock moved and however
//! long the node was down. A reader on the same boot knows the lease's real
//! end. On another boot (or with no stamp) only the remaining time and the
//! wall clock are left, and the older rules hold.
//!
//! Why `CLOCK_MONOTONIC` and not `CLOCK_BOOTTIME`: the two differ by the
//! time the machine was suspended. A node running across a suspend keeps
//! its leases for their monotonic time left, and so does a holder on the
//! same machine; a restart that counted the suspend (`CLOCK_BOOTTIME`)
//! would free a lease they both still count as running, and grant it to
//! another owner. Counting the same clock the lease runs on, a restart
//! ends it exactly where the running node would have.
//!
//! | origin | same boot | another boot, or no stamp |
//! |---|---|---|
//! | file or `RESTORE` ([`Origin::Disk`]) | the later of its boot-clock end and its wall-clock end | the later of its remaining time and its wall-clock end |
//! | running master ([`Origin::Stream`]) | the remaining time | the remaining time |
//! | version 1 (no remaining time) | the wall-clock end | the wall-clock end |
//!
//! and always at most `clamp_ms`, the longest lease the node may have
//! granted (a clock set back must not hold a lock for hours).
//!
//! Why each rule:
//! - **Disk, same boot.** A lease whose end passed while the node was down
//!   comes back free: the previous rule ("never less than the time it had
//!   left when written") revived every lease whose last record was a grant
//!   for up to its whole length. The wall-clock end is kept as a second
//!   opinion: the lease ends only when both clocks say it has. With a
//!   correct wall clock they agree; a wall clock set back across the
//!   restart only lengthens the lease (up to the clamp), and a boot clock
//!   that is not what the id promises (a cloned virtual machine keeps its
//!   boot id) cannot end it before its wall-clock end.
//! - **Disk, another boot.** Nothing ties the two machines' (or boots')
//!   clocks together: the wall clock may have stepped forward while the
//!   node was down, so the lease never ends earlier than the time it had
//!   left when written (a holder may still use it).
//! - **Stream.** A master running now sends the remaining time, which the
//!   replica adds to its own clock; the transfer delay only lengthens it.
//!   The boot stamp is not used between two running processes: they may be
//!   two machines that share a boot id (a cloned virtual machine), and the
//!   remaining time needs no clock to agree.
//!
//! A lease timed by any rule but the exact same-boot one (another boot, no
//! stamp, a wall clock set back, the clamp) would be timed the same way
//! again at every later load of the same record, and come back each time:
//! such a lease is written again with this boot's stamp after the load
//! ([`restamp_needed`]; `crate::host::restamp` writes it).
//!
//! The readings are whole milliseconds, so the time since the record was
//! written is counted one millisecond short ([`READING_SLACK_MS`]): a
//! lease may come back a millisecond long, never short.

use crate::core::clock::WallMillis;

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), 16 bytes.
pub type BootId = [u8; 16];

/// A `CLOCK_MONOTONIC` reading (the boot clock, ms since the boot, not
/// counting suspends) and the boot it belongs to.
///
/// `ms` is on the machine's own clock: a process inside a time namespace
/// with a monotonic offset has it taken off ([`host_boot_ms`]), so two
/// processes of one boot read the same clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootStamp {
    /// The boot.
    pub id: BootId,
    /// Milliseconds since that boot.
    pub ms: u64,
}

impl BootStamp {
    /// Length of [`BootStamp::to_bytes`].
    pub const BYTES: usize = 24;

    /// The stamp as one value: the boot id, then the boot clock as 8 bytes,
    /// little-endian (one argument of `REDLOCK.APPLY`).
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..16].copy_from_slice(&self.id);
        out[16..].copy_from_slice(&self.ms.to_le_bytes());
        out
    }

    /// The stamp of [`BootStamp::to_bytes`]; `None` for another length.
    pub fn from_bytes(bytes: &[u8]) -> Option<BootStamp> {
        let (id, ms) = bytes.split_first_chunk::<16>()?;
        Some(BootStamp {
            id: *id,
            ms: u64::from_le_bytes(<[u8; 8]>::try_from(ms).ok()?),
        })
    }
}

/// Where a persisted lease comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A file written before this load (RDB, AOF, AOF preamble), or a
    /// `RESTORE` payload (written by another process at another time).
    Disk,
    /// A master running now (replication stream, full sync).
    Stream,
}

/// What a persisted lease says about its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// Wall-clock end in ms since the epoch; 0 when free.
    pub expiry: WallMillis,
    /// Milliseconds left when written; `None` in version-1 records.
    pub remaining: Option<u64>,
    /// The boot clock when written; `None` before version 3, or when the
    /// writer could not read it.
    pub boot: Option<BootStamp>,
}

/// The reader's clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Wall clock, ms since the epoch.
    pub wall: WallMillis,
    /// Boot clock; `None` when it cannot be read.
    pub boot: Option<BootStamp>,
}

/// How much shorter than the difference of two whole-millisecond readings
/// the time between them is counted (see the module notes).
pub const READING_SLACK_MS: u64 = 1;

/// The time since `written`, when `now` is a reading of the same boot.
/// A reading earlier than the written one (impossible on one boot) counts
/// as no time at all.
pub fn elapsed_on_same_boot(written: Option<BootStamp>, now: Option<BootStamp>) -> Option<u64> {
    match (written, now) {
        (Some(w), Some(n)) if w.id == n.id => {
            Some(n.ms.saturating_sub(w.ms).saturating_sub(READING_SLACK_MS))
        }
        _ => None,
    }
}

/// The time left on the lease as the record itself states it, before any
/// wall-clock reading or clamp: its remaining time, less the time since it
/// was written when that is known (same boot); a version-1 record has only
/// its wall-clock end. This is what a `RESTORE` weighs against the node's
/// longest lease.
pub fn stated_left(w: &Written, now: &Reading) -> u64 {
    match (w.remaining, elapsed_on_same_boot(w.boot, now.boot)) {
        (None, _) => w.expiry.saturating_sub(now.wall),
        (Some(remaining), Some(elapsed)) => remaining.saturating_sub(elapsed),
        (Some(remaining), None) => remaining,
    }
}

/// How long the lease `w`, read from `origin` at `now`, still runs, in ms
/// (0: it has ended), at most `clamp_ms`. The rules are in the module
/// notes.
pub fn lease_left(w: &Written, origin: Origin, now: &Reading, clamp_ms: u64) -> u64 {
    let by_wall = w.expiry.saturating_sub(now.wall);
    let left = match (origin, w.remaining) {
        (_, None) => by_wall,
        (Origin::Stream, Some(remaining)) => remaining,
        // Free (a held record always has its wall-clock end).
        (Origin::Disk, Some(_)) if w.expiry == 0 => 0,
        (Origin::Disk, Some(_)) => stated_left(w, now).max(by_wall),
    };
    left.min(clamp_ms)
}

/// Whether the lease `w`, read from `origin` at `now`, must be written again
/// with the reader's stamp: it is held, it came from disk, and it was timed
/// by a rule that a later load of the same record on this boot would apply
/// again from that load's time (another boot, no stamp, a wall clock set
/// back, the clamp), bringing back a lease that has ended. Rewritten with
/// this boot's stamp and the time left now, the record states the lease's
/// end exactly as the node runs it, so no later load can end it earlier (a
/// holder relies on that end) nor later.
pub fn restamp_needed(w: &Written, origin: Origin, now: &Reading, clamp_ms: u64) -> bool {
    if origin != Origin::Disk || now.boot.is_none() {
        return false;
    }
    let left = lease_left(w, origin, now, clamp_ms);
    left > 0 && (elapsed_on_same_boot(w.boot, now.boot).is_none() || left != stated_left(w, now))
}

/// The boot id in its text form (`/proc/sys/kernel/random/boot_id`: 32 hex
/// digits, dashes anywhere, surrounding white space ignored).
pub fn parse_boot_id(text: &str) -> Option<BootId> {
    let mut id = [0u8; 16];
    let mut nibbles = 0usize;
    for c in text.trim().chars().filter(|&c| c != '-') {
        let v = c.to_digit(16)? as u8;
        let byte = id.get_mut(nibbles / 2)?;
        *byte = (*byte << 4) | v;
        nibbles += 1;
    }
    (nibbles == 32).then_some(id)
}

/// The monotonic offset of the process's time namespace in nanoseconds,
/// from `/proc/self/timens_offsets` (`monotonic <seconds> <nanoseconds>`,
/// seconds possibly negative). `None` when the text has no such line or it
/// does not parse.
pub fn parse_monotonic_offset(text: &str) -> Option<i128> {
    let line = text
        .lines()
        .map(str::split_whitespace)
        .find_map(|mut words| (words.next()? == "monotonic").then_some(words))?;
    let mut words = line;
    let secs: i64 = words.next()?.parse().ok()?;
    let nanos: i64 = words.next()?.parse().ok()?;
    if words.next().is_some() {
        return None;
    }
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// The machine's boot clock in ms, from a `CLOCK_MONOTONIC` reading in the
/// process's time namespace (`local_ns`) and that namespace's monotonic
/// offset (`offset_ns`, which the namespace adds). `None` when the result
/// would be negative (the offset does not belong to the reading).
pub fn host_boot_ms(local_ns: i128, offset_ns: i128) -> Option<u64> {
    let host_ns = local_ns.checked_sub(offset_ns).filter(|&ns| ns >= 0)?;
    u64::try_from(host_ns / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WALL: WallMillis = 1_796_000_000_000;
    const BOOT: BootId = [7; 16];
    const OTHER_BOOT: BootId = [8; 16];
    const CLAMP: u64 = 60_000;

    fn stamp(id: BootId, ms: u64) -> Option<BootStamp> {
        Some(BootStamp { id, ms })
    }

    /// A lease written with `remaining` ms left at boot clock 10 s.
    fn written(remaining: u64) -> Written {
        Written {
            expiry: WALL + remaining,
            remaining: Some(remaining),
            boot: stamp(BOOT, 10_000),
        }
    }

    /// Read `after` ms later, the wall clock having moved by `wall_step`
    /// more than that, on boot `id`.
    fn read(after: u64, wall_step: i64, id: BootId) -> Reading {
        Reading {
            wall: (WALL + after).saturating_add_signed(wall_step),
            boot: stamp(id, 10_000 + after),
        }
    }

    #[test]
    fn a_lease_that_ended_while_the_node_was_down_comes_back_free() {
        // Issue 35's acceptance: granted for 2 s, written, restarted 3 s
        // later on the same boot: free. Before, it was held again for 2 s.
        let w = written(2_000);
        assert_eq!(
            lease_left(&w, Origin::Disk, &read(3_000, 0, BOOT), CLAMP),
            0
        );
        // On another boot the older rule holds: the time left when written.
        assert_eq!(
            lease_left(&w, Origin::Disk, &read(3_000, 0, OTHER_BOOT), CLAMP),
            2_000
        );
    }

    #[test]
    fn a_running_lease_keeps_its_remaining_time_and_no_more() {
        let w = written(20_000);
        // 5 s later: 15 s left (one millisecond of slack for the readings).
        assert_eq!(
            lease_left(&w, Origin::Disk, &read(5_000, 0, BOOT), CLAMP),
            15_001
        );
        // The wall clock stepped forward an hour while the node was down:
        // the boot clock says 15 s, and the lease keeps them.
        assert_eq!(
            lease_left(&w, Origin::Disk, &read(5_000, 3_600_000, BOOT), CLAMP),
            15_001
        );
        // Stepped back an hour: the wall-clock end is the later one, clamped.
        assert_eq!(
            lease_left(&w, Origin::Disk, &read(5_000, -3_600_000, BOOT), CLAMP),
            CLAMP
        );
        // Stepped back 2 s: the wall-clock end, 2 s later than the boot's.
        assert_eq!(
            lease_left(&w, Origin::Disk, &read(5_000, -2_000, BOOT), CLAMP),
            17_000
        );
    }

    #[test]
    fn a_master_running_now_is_read_from_its_remaining_time() {
        let w = written(20_000);
        for id in [BOOT, OTHER_BOOT] {
            for step in [-3_600_000, 0, 3_600_000] {
                assert_eq!(
                    lease_left(&w, Origin::Stream, &read(5_000, step, id), CLAMP),
                    20_000
                );
            }
        }
        assert_eq!(
            lease_left(&w, Origin::Stream, &read(0, 0, BOOT), 1_000),
            1_000
        );
    }

    #[test]
    fn records_without_a_stamp_keep_the_older_rules() {
        let v2 = Written {
            boot: None,
            ..written(20_000)
        };
        let now = read(50_000, 0, BOOT);
        assert_eq!(lease_left(&v2, Origin::Disk, &now, CLAMP), 20_000);
        assert_eq!(stated_left(&v2, &now), 20_000);
        let v1 = Written {
            remaining: None,
            boot: None,
            expiry: WALL + 90_000,
        };
        assert_eq!(
            lease_left(&v1, Origin::Disk, &read(0, 0, BOOT), CLAMP),
            CLAMP
        );
        assert_eq!(
            lease_left(&v1, Origin::Stream, &read(80_000, 0, BOOT), CLAMP),
            10_000
        );
        assert_eq!(stated_left(&v1, &read(80_000, 0, BOOT)), 10_000);
        // A reader that cannot read its boot clock: another boot.
        let blind = Reading {
            wall: WALL + 50_000,
            boot: None,
        };
        assert_eq!(
            lease_left(&written(20_000), Origin::Disk, &blind, CLAMP),
            20_000
        );
    }

    #[test]
    fn a_free_record_stays_free() {
        let free = Written {
            expiry: 0,
            remaining: Some(0),
            boot: stamp(BOOT, 10_000),
        };
        for origin in [Origin::Disk, Origin::Stream] {
            assert_eq!(lease_left(&free, origin, &read(0, 0, BOOT), CLAMP), 0);
        }
        // A held record's time left with no wall-clock end: free from disk.
        let odd = Written {
            expiry: 0,
            ..written(5_000)
        };
        assert_eq!(lease_left(&odd, Origin::Disk, &read(0, 0, BOOT), CLAMP), 0);
    }

    #[test]
    fn the_stated_time_left_counts_the_time_since_it_was_written_on_one_boot() {
        let w = written(20_000);
        assert_eq!(stated_left(&w, &read(5_000, 0, BOOT)), 15_001);
        assert_eq!(stated_left(&w, &read(5_000, 0, OTHER_BOOT)), 20_000);
        assert_eq!(stated_left(&w, &read(30_000, 0, BOOT)), 0);
        // A reading before the written one counts as no time.
        let early = Reading {
            wall: WALL,
            boot: stamp(BOOT, 1),
        };
        assert_eq!(stated_left(&w, &early), 20_000);
    }

    #[test]
    fn leases_timed_by_any_rule_but_the_exact_one_are_written_again() {
        // Exact on this boot: nothing to do.
        let w = written(20_000);
        assert!(!restamp_needed(
            &w,
            Origin::Disk,
            &read(5_000, 0, BOOT),
            CLAMP
        ));
        // Another boot, no stamp, the wall clock set back, the clamp: the
        // next load would time it from its own time again.
        assert!(restamp_needed(
            &w,
            Origin::Disk,
            &read(5_000, 0, OTHER_BOOT),
            CLAMP
        ));
        let v2 = Written { boot: None, ..w };
        assert!(restamp_needed(
            &v2,
            Origin::Disk,
            &read(5_000, 0, BOOT),
            CLAMP
        ));
        assert!(restamp_needed(
            &w,
            Origin::Disk,
            &read(5_000, -2_000, BOOT),
            CLAMP
        ));
        assert!(restamp_needed(
            &w,
            Origin::Disk,
            &read(5_000, 0, BOOT),
            10_000
        ));
        // Ended, free, from a running master, or a reader without a boot
        // clock (its stamp would say nothing): nothing to write.
        assert!(!restamp_needed(
            &w,
            Origin::Disk,
            &read(30_000, 0, BOOT),
            CLAMP
        ));
        assert!(!restamp_needed(
            &w,
            Origin::Stream,
            &read(5_000, 0, OTHER_BOOT),
            CLAMP
        ));
        let free = Written {
            expiry: 0,
            remaining: Some(0),
            boot: None,
        };
        assert!(!restamp_needed(
            &free,
            Origin::Disk,
            &read(0, 0, BOOT),
            CLAMP
        ));
        let blind = Reading {
            wall: WALL,
            boot: None,
        };
        assert!(!restamp_needed(&v2, Origin::Disk, &blind, CLAMP));
    }

    #[test]
    fn boot_ids_parse_from_the_kernel_text() {
        let id = parse_boot_id("e42ce0c9-fce9-44bd-8f9d-944d844a792b\n").unwrap();
        assert_eq!(id[0], 0xe4);
        assert_eq!(id[15], 0x2b);
        assert_eq!(parse_boot_id("E42CE0C9FCE944BD8F9D944D844A792B"), Some(id));
        for bad in [
            "",
            "e42ce0c9-fce9-44bd-8f9d-944d844a792",
            "e42ce0c9-fce9-44bd-8f9d-944d844a792b0",
            "g42ce0c9-fce9-44bd-8f9d-944d844a792b",
            "e42ce0c9 fce9-44bd-8f9d-944d844a792b",
        ] {
            assert_eq!(parse_boot_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_time_namespace_offset_is_taken_off() {
        let text = "monotonic         -5  250000000\nboottime           7         0\n";
        let offset = parse_monotonic_offset(text).unwrap();
        assert_eq!(offset, -4_750_000_000);
        // The namespace reads 4.75 s less than the machine.
        assert_eq!(host_boot_ms(10_000_000_000, offset), Some(14_750));
        let none = "monotonic 0 0\nboottime 0 0\n";
        assert_eq!(parse_monotonic_offset(none), Some(0));
        assert_eq!(host_boot_ms(1_999_999, 0), Some(1));
        for bad in [
            "",
            "boottime 0 0\n",
            "monotonic x 0\n",
            "monotonic 1\n",
            "monotonic 1 2 3\n",
        ] {
            assert_eq!(parse_monotonic_offset(bad), None, "{bad:?}");
        }
        assert_eq!(host_boot_ms(5, 10), None);
    }

    proptest! {
        /// On the boot that wrote it, a lease read from disk never ends
        /// before its real end (written + remaining on the boot clock), nor
        /// after the later of that end (plus the slack) and its wall-clock
        /// end; never longer than the clamp.
        #[test]
        fn a_lease_from_disk_on_the_same_boot_ends_at_its_real_end(
            remaining in 1u64..200_000,
            after in 0u64..400_000,
            wall_step in -4_000_000i64..4_000_000,
            clamp in 1u64..120_000,
        ) {
            let w = written(remaining);
            let now = read(after, wall_step, BOOT);
            let left = lease_left(&w, Origin::Disk, &now, clamp);
            let real_left = remaining.saturating_sub(after);
            let by_wall = w.expiry.saturating_sub(now.wall);
            prop_assert!(left <= clamp);
            prop_assert!(left >= real_left.min(clamp), "ends early: {left} < {real_left}");
            let latest = (real_left + READING_SLACK_MS).min(remaining).max(by_wall);
            prop_assert!(left <= latest, "{left} > {latest}");
            // With a wall clock that did not step: exact (to the slack).
            if wall_step == 0 {
                prop_assert!(left <= (real_left + READING_SLACK_MS).min(remaining).min(clamp));
            }
        }

        /// On another boot, or without a stamp, the rules before version 3:
        /// from disk the later of the remaining time and the wall-clock end,
        /// from a running master the remaining time; clamped.
        #[test]
        fn other_boots_keep_the_rules_before_the_stamp(
            remaining in 0u64..200_000,
            expiry_ahead in 0u64..400_000,
            after in 0u64..400_000,
            wall_step in -4_000_000i64..4_000_000,
            stamped in any::<bool>(),
            clamp in 1u64..120_000,
        ) {
            let w = Written {
                expiry: WALL + expiry_ahead,
                remaining: Some(remaining),
                boot: if stamped { stamp(BOOT, 10_000) } else { None },
            };
            let now = read(after, wall_step, OTHER_BOOT);
            let by_wall = w.expiry.saturating_sub(now.wall);
            prop_assert_eq!(
                lease_left(&w, Origin::Disk, &now, clamp),
                remaining.max(by_wall).min(clamp)
            );
            prop_assert_eq!(lease_left(&w, Origin::Stream, &now, clamp), remaining.min(clamp));
        }

        /// On the boot that wrote it, a later load never ends the lease
        /// later than an earlier one (to the slack): the end is fixed when
        /// the lease is written, however often the node restarts.
        #[test]
        fn later_loads_never_move_the_end_later(
            remaining in 1u64..200_000,
            first in 0u64..300_000,
            gap in 0u64..300_000,
            wall_step in -100_000i64..100_000,
        ) {
            let w = written(remaining);
            let clamp = u64::MAX;
            let a = read(first, wall_step, BOOT);
            let b = read(first + gap, wall_step, BOOT);
            let end_a = first + lease_left(&w, Origin::Disk, &a, clamp);
            let left_b = lease_left(&w, Origin::Disk, &b, clamp);
            let end_b = first + gap + left_b;
            prop_assert!(left_b == 0 || end_b <= end_a + READING_SLACK_MS, "{end_b} > {end_a}");
        }

        /// A lease loaded by any rule, then written again with the loader's
        /// stamp when [`restamp_needed`] says so, ends at the same instant
        /// (to the slack) at every later load of the same boot: never
        /// earlier (its holder relies on it) and never later (a lease that
        /// ended is not brought back).
        #[test]
        fn a_restamped_lease_ends_where_the_node_ran_it(
            remaining in 1u64..200_000,
            other_boot in any::<bool>(),
            stamped in any::<bool>(),
            load_after in 0u64..100_000,
            wall_step in -100_000i64..100_000,
            later in 0u64..300_000,
            clamp in 1u64..120_000,
        ) {
            let w = Written {
                boot: if stamped { stamp(if other_boot { OTHER_BOOT } else { BOOT }, 10_000) } else { None },
                ..written(remaining)
            };
            let load = read(load_after, wall_step, BOOT);
            let left = lease_left(&w, Origin::Disk, &load, clamp);
            let end = load_after + left;
            let record = if restamp_needed(&w, Origin::Disk, &load, clamp) {
                // What the node writes: the lease as it runs now.
                Written {
                    expiry: load.wall + left,
                    remaining: Some(left),
                    boot: load.boot,
                }
            } else {
                w
            };
            let again = read(load_after + later, wall_step, BOOT);
            let left_again = lease_left(&record, Origin::Disk, &again, u64::MAX);
            if left > 0 {
                let end_again = load_after + later + left_again;
                prop_assert!(left_again == 0 || end_again <= end + READING_SLACK_MS, "revived: {end_again} > {end}");
                prop_assert!(end_again >= end || left_again == 0 && later >= left, "ends early: {end_again} < {end}");
            }
        }

        /// Boot stamps round-trip through their one-value form, and no
        /// other length reads as one.
        #[test]
        fn boot_stamps_round_trip(id in any::<[u8; 16]>(), ms in any::<u64>(), len in 0usize..40) {
            let stamp = BootStamp { id, ms };
            prop_assert_eq!(BootStamp::from_bytes(&stamp.to_bytes()), Some(stamp));
            let other = vec![1u8; len];
            prop_assert_eq!(BootStamp::from_bytes(&other).is_some(), len == BootStamp::BYTES);
        }

        /// Boot ids round-trip through their text form.
        #[test]
        fn boot_ids_round_trip(id in any::<[u8; 16]>()) {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let text = format!("{}-{}-{}-{}-{}\n", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
            prop_assert_eq!(parse_boot_id(&text), Some(id));
        }
    }
}
