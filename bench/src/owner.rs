//! Owner ids for the hand-written Redlock and the raw drivers: 36 printable
//! bytes (the size of a hyphenated UUID), unique per acquisition.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of every owner id, the size of a hyphenated UUID.
pub const OWNER_LEN: usize = 36;

static SEQ: AtomicU64 = AtomicU64::new(0);

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        splitmix(t ^ u64::from(std::process::id()))
    })
}

/// A fresh 128-bit id in UUID text form (`8-4-4-4-12` hex digits).
pub fn new_owner() -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let hi = splitmix(seed() ^ n);
    let lo = splitmix(hi ^ n.rotate_left(17));
    let mut buf = [0u8; OWNER_LEN];
    write_owner(&mut buf, hi, lo);
    String::from_utf8(buf.to_vec()).unwrap_or_default()
}

/// Writes a UUID-shaped id of `hi`/`lo` into `buf`.
pub fn write_owner(buf: &mut [u8; OWNER_LEN], hi: u64, lo: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = (u128::from(hi) << 64) | u128::from(lo);
    let mut nibble = 0;
    for (i, b) in buf.iter_mut().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            *b = b'-';
            continue;
        }
        *b = HEX[((bits >> (124 - 4 * nibble)) & 0xf) as usize];
        nibble += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_uuid_shaped_and_distinct() {
        let a = new_owner();
        let b = new_owner();
        assert_eq!(a.len(), OWNER_LEN);
        assert_ne!(a, b);
        assert_eq!(a.matches('-').count(), 4);
    }
}
