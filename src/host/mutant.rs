//! The switches of the deliberately broken variants of the safety rules
//! ([`crate::core::mutant`]), for the tests and the safety suite's mutation
//! checks: each shows that a test catches the hole its rule closes. The
//! host and the simulator share the one list of mutants; the host keeps
//! which are on in one atomic. They exist only in test builds
//! (`test-hooks`); in the release library [`on`] is a constant `false`.

pub use crate::core::mutant::{Mutant, Mutants};

#[cfg(feature = "test-hooks")]
static ON: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Environment variable naming mutants to switch on when the module loads
/// (comma-separated), so that a restart can start broken.
#[cfg(feature = "test-hooks")]
pub const ENV: &str = "REDLOCK_TEST_MUTANTS";

/// The mutants switched on now, for the pure rules that take them.
#[cfg(feature = "test-hooks")]
pub fn current() -> Mutants {
    Mutants::from_bits(ON.load(std::sync::atomic::Ordering::Relaxed))
}

/// The mutants switched on now: none in the release library.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn current() -> Mutants {
    Mutants::NONE
}

/// Whether `m` is switched on (never in the release library).
#[inline(always)]
pub fn on(m: Mutant) -> bool {
    current().on(m)
}

/// Switches `m` on or off (test builds only).
#[cfg(feature = "test-hooks")]
pub fn set(m: Mutant, enabled: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    if enabled {
        ON.fetch_or(m as u64, Relaxed);
    } else {
        ON.fetch_and(!(m as u64), Relaxed);
    }
}

/// Reads [`ENV`] (test builds only).
#[cfg(feature = "test-hooks")]
pub fn load_from_env() {
    if let Ok(names) = std::env::var(ENV) {
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if let Some(m) = Mutant::named(name.as_bytes()) {
                set(m, true);
            }
        }
    }
}
