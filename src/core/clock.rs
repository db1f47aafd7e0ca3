//! The conversion between the node's two clocks, independent of Redis and
//! of the clocks themselves (readings passed in; they are taken in
//! [`crate::host::clock`]).
//!
//! Leases run on the monotonic clock, so a jump of the wall clock neither
//! shortens nor lengthens one. Persisted and replicated state carries the
//! absolute wall-clock expiry instead (a monotonic reading means nothing to
//! another process), converted on the way out and back in:
//!
//! ```text
//! save:  expiry_wall = wall_now + (deadline_mono - mono_now)
//! load:  deadline_mono = mono_now + (expiry_wall - wall_now)
//! ```
//!
//! Within one process the round trip is exact up to the 1 ms resolution: the
//! wall clock may jump between save and load of the same process (`DEBUG
//! RELOAD`), but the same jump is in both readings and cancels out. Across a
//! restart the lease keeps its wall-clock end, but never less than the time
//! it had left when written (a clock stepped forward while the node was down
//! must not free a lock its holder still uses), and never more than the
//! longest lease the node may have granted (a clock set back must not hold a
//! lock for hours). A `RESTORE` payload is read the same way.
//!
//! From a master to its replica (the stream, a full sync), the remaining
//! time travels instead of the wall-clock end (see [`crate::host::persist`]): it
//! does not depend on two clocks agreeing, and the transfer delay can only
//! lengthen the lease, never shorten it.

use crate::core::lock::MonoMillis;

/// Wall-clock time in milliseconds since the Unix epoch.
pub type WallMillis = u64;

/// Wall-clock expiry of a monotonic deadline; 0 when it has passed.
pub fn to_wall(deadline: MonoMillis, mono: MonoMillis, wall: WallMillis) -> WallMillis {
    if deadline <= mono {
        return 0;
    }
    wall.saturating_add(deadline - mono)
}

/// Monotonic deadline of a wall-clock expiry; `None` when it has passed.
pub fn to_mono(expiry: WallMillis, mono: MonoMillis, wall: WallMillis) -> Option<MonoMillis> {
    if expiry <= wall {
        return None;
    }
    Some(mono.saturating_add(expiry - wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_one_process_survives_a_wall_jump() {
        let (mono, wall) = (5_000, 1_700_000_000_000);
        let deadline = mono + 30_000;
        let jumped = wall + 3_600_000;
        let expiry = to_wall(deadline, mono, jumped);
        assert_eq!(to_mono(expiry, mono, jumped), Some(deadline));
    }

    #[test]
    fn passed_deadlines_are_not_revived() {
        assert_eq!(to_wall(10, 10, 1_000), 0);
        assert_eq!(to_mono(1_000, 10, 1_000), None);
        assert_eq!(to_mono(0, 10, 1_000), None);
    }

    #[test]
    fn load_time_rebases_on_the_loading_clock() {
        // Saved at wall 1000 with 500 ms left; loaded 200 ms later in a
        // process whose monotonic clock reads 7: 300 ms are left.
        let expiry = to_wall(600, 100, 1_000);
        assert_eq!(expiry, 1_500);
        assert_eq!(to_mono(expiry, 7, 1_200), Some(307));
    }
}
