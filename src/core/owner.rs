//! Owner ids are capabilities: whoever presents one can release, extend or
//! fence the lock. The module never keeps one: records, RDB, AOF, `DUMP`
//! payloads and the replication stream hold a 128-bit hash of it, and every
//! command compares hashes.
//!
//! The hash is BLAKE3 in keyed mode with a fixed, public key (domain
//! separation from other uses of BLAKE3), truncated to 128 bits. It must be
//! the same on every node (a replica compares the hash its master sent; a
//! `DUMP` restores on another server), so it is not salted per node. A
//! random owner (the client uses UUID v4) cannot be recovered from its
//! hash; a guessable one (`worker-a`) is as weak as its name.

/// The stored form of an owner id.
pub type OwnerHash = [u8; 16];

/// Fixed key for the keyed hash: separates these hashes from any other
/// BLAKE3 hash of the same bytes.
const DOMAIN_KEY: &[u8; 32] = b"redlock owner id hash, version 1";

/// The hash of an owner id as the module stores and compares it.
pub fn hash_owner(owner: &[u8]) -> OwnerHash {
    let full = blake3::keyed_hash(DOMAIN_KEY, owner);
    let mut out = [0u8; 16];
    out.copy_from_slice(&full.as_bytes()[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_owners_hash_equal_and_different_owners_differ() {
        assert_eq!(hash_owner(b"worker-a"), hash_owner(b"worker-a"));
        assert_ne!(hash_owner(b"worker-a"), hash_owner(b"worker-b"));
        assert_ne!(hash_owner(b"a"), hash_owner(b"a\0"));
    }

    #[test]
    fn the_hash_is_stable_across_builds() {
        // Persisted records and replicas depend on this exact function; the
        // expected value was computed independently (Python's blake3 package).
        let expected = "64487a5a93a3dd4a1412a560a2eab0ee";
        let got: String = hash_owner(b"secret-owner-777")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn the_hash_never_contains_the_owner() {
        let owner = b"0123456789abcdef";
        assert_ne!(&hash_owner(owner)[..], &owner[..]);
    }
}
