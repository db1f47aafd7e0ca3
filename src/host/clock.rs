//! The node's two clocks, read: the monotonic clock leases run on and the
//! wall clock persisted state carries (the conversion between them is
//! [`crate::core::clock`]).

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::core::clock::WallMillis;
use crate::core::lock::MonoMillis;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_never_reads_zero() {
        assert!(mono_now() >= 1);
    }
}
