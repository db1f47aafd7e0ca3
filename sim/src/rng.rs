//! The run's randomness: one seed, split into an independent stream per
//! subsystem (ChaCha8 streams of the same key), so that turning one kind of
//! fault off, or one client, leaves what the others draw unchanged as far as
//! the run itself does (a shorter reproduction stays close to the original).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The subsystems that draw from streams of their own.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    /// What the seed's scenario is (the swarm's draw).
    Scenario,
    /// Message delays and the network's faults.
    Net,
    /// One kind of fault's schedule.
    Fault(u32),
    /// One client's program and its rules' randomness.
    Client(u32),
    /// Replication lag and the sentinel.
    Replication,
}

impl Stream {
    fn id(self) -> u64 {
        match self {
            Stream::Scenario => 1,
            Stream::Net => 2,
            Stream::Replication => 3,
            Stream::Fault(k) => 0x1_0000 + u64::from(k),
            Stream::Client(c) => 0x2_0000 + u64::from(c),
        }
    }
}

/// A random stream.
pub type SimRng = ChaCha8Rng;

/// The stream of `sub` for `seed`.
pub fn stream(seed: u64, sub: Stream) -> SimRng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(sub.id());
    rng
}

/// True with probability `p`.
pub fn chance(rng: &mut SimRng, p: f64) -> bool {
    p > 0.0 && rng.gen_bool(p.min(1.0))
}

/// A uniform draw in `lo..=hi`.
pub fn between(rng: &mut SimRng, lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        lo
    } else {
        rng.gen_range(lo..=hi)
    }
}

/// A draw in `lo..=hi` weighted towards `lo` (log-uniform): most delays
/// short, a few long.
pub fn skewed(rng: &mut SimRng, lo: u64, hi: u64) -> u64 {
    if hi <= lo.max(1) {
        return lo;
    }
    let (a, b) = ((lo.max(1) as f64).ln(), (hi as f64).ln());
    let x = rng.gen_range(a..=b).exp() as u64;
    x.clamp(lo, hi)
}
