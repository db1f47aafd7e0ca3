//! The node's two clocks and the conversion between them.
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
//! time travels instead of the wall-clock end (see [`crate::persist`]): it
//! does not depend on two clocks agreeing, and the transfer delay can only
//! lengthen the lease, never shorten it.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::lock::MonoMillis;

/// Wall-clock time in milliseconds since the Unix epoch.
pub type WallMillis = u64;

static MONO_EPOCH: OnceLock<Instant> = OnceLock::new();

/// Where the monotonic clock starts (about 34 years in ms): a record loaded
/// with a long idle time gets an "unchanged since" instant before the
/// module loaded, which must still be a valid reading.
pub const MONO_BASE: MonoMillis = 1 << 40;

/// Milliseconds on the monotonic clock: [`MONO_BASE`] when the module was
/// first asked. Never 0, so that 0 never reads as a live deadline.
pub fn mono_now() -> MonoMillis {
    let epoch = *MONO_EPOCH.get_or_init(Instant::now);
    epoch.elapsed().as_millis() as u64 + MONO_BASE
}

/// Milliseconds since the Unix epoch on the node's wall clock (plus the
/// test-only offset in builds with the `test-hooks` feature).
pub fn wall_now() -> WallMillis {
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    apply_offset(real)
}

/// Microseconds since the Unix epoch on the node's wall clock, for checking
/// `FLOOR` and FENCE tokens (the client's floor is in microseconds).
pub fn wall_now_us() -> u64 {
    wall_now().saturating_mul(1000)
}

#[cfg(feature = "test-hooks")]
static WALL_OFFSET_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Environment variable with a wall-clock offset in ms applied from the
/// moment the module loads (test builds only), so that a test can move a
/// node's clock across a restart, before the data is loaded.
#[cfg(feature = "test-hooks")]
pub const WALL_OFFSET_ENV: &str = "REDLOCK_TEST_WALL_OFFSET_MS";

/// Reads [`WALL_OFFSET_ENV`] (test builds only).
#[cfg(feature = "test-hooks")]
pub fn load_wall_offset_from_env() {
    if let Some(offset) = std::env::var(WALL_OFFSET_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
    {
        set_wall_offset(offset);
    }
}

/// Moves the wall clock seen by the module (test builds only).
#[cfg(feature = "test-hooks")]
pub fn set_wall_offset(offset_ms: i64) {
    WALL_OFFSET_MS.store(offset_ms, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(feature = "test-hooks")]
fn apply_offset(real: WallMillis) -> WallMillis {
    let offset = WALL_OFFSET_MS.load(std::sync::atomic::Ordering::Relaxed);
    real.saturating_add_signed(offset)
}

#[cfg(not(feature = "test-hooks"))]
fn apply_offset(real: WallMillis) -> WallMillis {
    real
}

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

    #[test]
    fn monotonic_clock_never_reads_zero() {
        assert!(mono_now() >= 1);
    }
}
