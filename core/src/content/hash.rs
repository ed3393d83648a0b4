//! Seeded 64-bit hashes shared by scanned messages and the matcher's index.
//!
//! A message computes the hash of each top-level key while it is scanned, and the matcher looks
//! keys and `(key, value)` pairs up by those hashes, so a key is hashed once per message however
//! many times it is matched. The seed is drawn once per process from the standard library's
//! randomly keyed hasher, so a client cannot pick keys that collide on purpose. A collision is
//! harmless anyway: the matcher checks every candidate against the message text.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use foldhash::fast::{FoldHasher, RandomState};

fn state() -> &'static RandomState {
    static STATE: OnceLock<RandomState> = OnceLock::new();
    STATE.get_or_init(RandomState::default)
}

fn hasher() -> FoldHasher {
    state().build_hasher()
}

/// The hash of an object key (its unescaped text).
pub(crate) fn name_hash(name: &[u8]) -> u64 {
    let mut h = hasher();
    h.write(name);
    h.write_u8(0xff);
    h.finish()
}

/// The hash of an array position.
pub(crate) fn position_hash(position: u32) -> u64 {
    let mut h = hasher();
    h.write_u32(position);
    h.write_u8(0xfe);
    h.finish()
}

/// The hash of one `(key, scalar text)` pair, from the key's hash.
pub(crate) fn pair_hash(key_hash: u64, value: &[u8]) -> u64 {
    let mut h = hasher();
    h.write_u64(key_hash);
    h.write(value);
    h.write_u8(0xff);
    h.finish()
}

/// Seeds a `std` hash map with the same process-wide hasher.
pub(crate) fn build_hasher() -> RandomState {
    *state()
}
