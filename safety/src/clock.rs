//! One clock for every process of a run.
//!
//! `std::time::Instant` is opaque per process, so events from several worker
//! processes could not be ordered with it. `CLOCK_MONOTONIC` is system-wide on
//! Linux: its raw nanoseconds from any process on the machine compare directly.

/// Nanoseconds on the system-wide `CLOCK_MONOTONIC`.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds to nanoseconds.
pub const fn ms(n: u64) -> u64 {
    n * 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_backwards_and_matches_instant_rate() {
        let a = mono_ns();
        let i = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = mono_ns();
        assert!(b > a);
        let d = (b - a) as i64 - i.elapsed().as_nanos() as i64;
        assert!(d.abs() < 5_000_000, "{d}");
    }
}
