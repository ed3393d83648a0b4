//! Seeded 64-bit hashes shared by scanned messages and the matcher's index.
//!
//! A message computes the hash of each top-level key while it is scanned, and the matcher looks
//! keys and `(key, value)` pairs up by those hashes, so a key is hashed once per message however
//! many times it is matched. Keys and values are short (a few bytes to a few dozen), so the
//! hash is built for short inputs: up to 16 bytes are read as two words and mixed with two
//! folded multiplications (a 64×64→128-bit product whose halves are xored), the construction
//! of wyhash and foldhash; longer inputs fold 16 bytes per multiplication first.
//!
//! The keys are drawn once per process from the standard library's randomly keyed hasher, so a
//! client cannot pick keys or values that collide on purpose without learning them. A collision
//! is harmless anyway: the matcher checks every candidate against the message text.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use foldhash::fast::RandomState;

/// The per-process keys.
struct Keys {
    name: u64,
    position: u64,
    pair: u64,
    fold: u64,
    finish: u64,
    state: RandomState,
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let std = std::collections::hash_map::RandomState::new();
        let draw = |n: u64| {
            let mut h = std.build_hasher();
            h.write_u64(n);
            // Odd, so that a product with it never loses the low bit.
            h.finish() | 1
        };
        Keys {
            name: draw(1),
            position: draw(2),
            pair: draw(3),
            fold: draw(4),
            finish: draw(5),
            state: RandomState::default(),
        }
    })
}

/// The 128-bit product of `a` and `b`, halves xored.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

#[inline(always)]
fn read8(b: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[inline(always)]
fn read4(b: &[u8], at: usize) -> u64 {
    let mut w = [0; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

/// The hash of `bytes` under `seed`.
#[inline(always)]
fn bytes_hash(k: &Keys, seed: u64, bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let (mut a, mut b) = (0u64, 0u64);
    let mut seed = seed;
    if len >= 8 {
        if len > 16 {
            seed = fold_long(seed, bytes, k.fold);
        }
        a = read8(bytes, len.saturating_sub(16));
        b = read8(bytes, len - 8);
    } else if len >= 4 {
        a = read4(bytes, 0);
        b = read4(bytes, len - 4);
    } else if len > 0 {
        a = u64::from(bytes[0]);
        b = u64::from(bytes[len - 1]) << 8 | u64::from(bytes[len / 2]);
    }
    fold(fold(a ^ seed, b ^ k.fold) ^ len as u64, k.finish)
}

/// Folds all but the last 16 bytes of a long input into the seed.
#[inline(never)]
fn fold_long(mut seed: u64, bytes: &[u8], key: u64) -> u64 {
    let body = &bytes[..bytes.len() - 16];
    let mut chunks = body.chunks_exact(16);
    for c in &mut chunks {
        seed = fold(read8(c, 0) ^ seed, read8(c, 8) ^ key);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 16];
        w[..rest.len()].copy_from_slice(rest);
        seed = fold(read8(&w, 0) ^ seed, read8(&w, 8) ^ key ^ rest.len() as u64);
    }
    seed
}

/// The hash of an object key (its unescaped text).
#[inline(always)]
pub(crate) fn name_hash(name: &[u8]) -> u64 {
    let k = keys();
    bytes_hash(k, k.name, name)
}

/// The hash of an array position.
#[inline(always)]
pub(crate) fn position_hash(position: u32) -> u64 {
    let k = keys();
    fold(fold(u64::from(position) ^ k.position, k.fold), k.finish)
}

/// The hash of one `(key, scalar text)` pair, from the key's hash.
#[inline(always)]
pub(crate) fn pair_hash(key_hash: u64, value: &[u8]) -> u64 {
    let k = keys();
    bytes_hash(k, key_hash ^ k.pair, value)
}

/// Seeds a `std` hash map with a process-wide hasher.
pub(crate) fn build_hasher() -> RandomState {
    keys().state
}
