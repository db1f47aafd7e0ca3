//! The node's clocks, read: the monotonic clock leases run on, the wall
//! clock persisted state carries (the conversion between them is
//! [`crate::core::clock`]), and the boot clock (the machine's
//! `CLOCK_MONOTONIC`) a persisted lease is stamped with (how a reader uses
//! it is [`crate::core::lease_time`]).

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::core::clock::WallMillis;
use crate::core::lease_time::{self, BootId, BootStamp};
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

/// Where the kernel says which boot this is.
const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";
/// The offsets of the process's time namespace (Linux 5.6+; missing on
/// kernels without time namespaces, where no offset exists).
const TIME_NAMESPACE_FILE: &str = "/proc/self/timens_offsets";

/// This boot's id and the monotonic offset of the process's time namespace
/// (ns), read once; `None` when either cannot be read (persisted leases are
/// then stamped with no boot, and read back as from another boot).
static BOOT: OnceLock<Option<(BootId, i128)>> = OnceLock::new();

fn boot_identity() -> Option<(BootId, i128)> {
    *BOOT.get_or_init(|| {
        let id = lease_time::parse_boot_id(&std::fs::read_to_string(BOOT_ID_FILE).ok()?)?;
        let offset = match std::fs::read_to_string(TIME_NAMESPACE_FILE) {
            Ok(text) => lease_time::parse_monotonic_offset(&text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(_) => return None,
        };
        Some((id, offset))
    })
}

/// `CLOCK_MONOTONIC` in the process's time namespace, in ns: the clock
/// `std::time::Instant`, and so every lease of the node and every holder's
/// validity, runs on (not `CLOCK_BOOTTIME`, which also counts suspends:
/// see [`crate::core::lease_time`]).
#[cfg(target_os = "linux")]
fn monotonic_ns() -> Option<i128> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (status == 0).then(|| i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

#[cfg(not(target_os = "linux"))]
fn monotonic_ns() -> Option<i128> {
    None
}

/// The boot clock now, with this boot's id (the test build's fake id when
/// one is set); `None` when it cannot be read. Read after the monotonic
/// clock of the same event: the stamp is then a little late, which can
/// only make a reader count the lease a little longer.
pub fn boot_now() -> Option<BootStamp> {
    let (id, offset) = boot_identity()?;
    let ms = lease_time::host_boot_ms(monotonic_ns()?, offset)?;
    Some(BootStamp {
        id: fake_boot_id().unwrap_or(id),
        ms,
    })
}

/// Test builds: a boot id that replaces the kernel's (`None`: the real one).
#[cfg(feature = "test-hooks")]
static FAKE_BOOT_ID: std::sync::Mutex<Option<BootId>> = std::sync::Mutex::new(None);

#[cfg(feature = "test-hooks")]
fn fake_boot_id() -> Option<BootId> {
    *FAKE_BOOT_ID.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
fn fake_boot_id() -> Option<BootId> {
    None
}

/// Test builds: makes the module see another boot id (`None`: the
/// kernel's again), so that a test can show how a lease written on another
/// boot is read.
#[cfg(feature = "test-hooks")]
pub fn set_fake_boot_id(id: Option<BootId>) {
    *FAKE_BOOT_ID.lock().unwrap_or_else(|p| p.into_inner()) = id;
}

/// Environment variable with a boot id (the kernel's text form) that the
/// test build uses instead of the kernel's from the moment it loads.
#[cfg(feature = "test-hooks")]
pub const BOOT_ID_ENV: &str = "REDLOCK_TEST_BOOT_ID";

/// Reads [`BOOT_ID_ENV`] (test builds only).
#[cfg(feature = "test-hooks")]
pub fn load_boot_id_from_env() {
    if let Some(id) = std::env::var(BOOT_ID_ENV)
        .ok()
        .and_then(|v| lease_time::parse_boot_id(&v))
    {
        set_fake_boot_id(Some(id));
    }
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

    #[cfg(target_os = "linux")]
    #[test]
    fn the_boot_clock_reads_this_boot_and_moves_forward() {
        let a = boot_now().expect("boot clock on Linux");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = boot_now().expect("boot clock on Linux");
        assert_eq!(a.id, b.id);
        assert!(b.ms >= a.ms + 19, "{a:?} → {b:?}");
    }
}
