//! The bounded answer cache and the keyed MAC used to build its keys.
//!
//! Providers that cache answers (builtin password checks, http webhook answers) must never keep
//! a password, not even as a plain hash that a memory dump would let someone brute-force
//! offline at full speed. Keys are therefore HMAC-SHA256 values under a key drawn at random
//! when the provider is built, which never leaves the process.
//!
//! The cache keeps two generations of at most `capacity / 2` entries each: lookups promote
//! entries from the old generation, and when the new one is full the old one is dropped whole.
//! That bounds memory exactly, costs O(1) per operation and keeps entries in use, without the
//! bookkeeping of a true LRU.

// Each provider that caches uses part of this module; with some of them compiled out, the
// rest is unused.
#![cfg_attr(not(all(feature = "builtin", feature = "http")), allow(dead_code))]

use std::collections::HashMap;
use std::hash::Hash;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A MAC over byte strings under a random per-process key.
pub(crate) struct Keyer {
    key: [u8; 32],
}

impl Keyer {
    /// A keyer with a fresh random key.
    pub(crate) fn random() -> Self {
        Keyer { key: rand::random() }
    }

    /// HMAC-SHA256 of `parts`, each length-prefixed so that (`ab`, `c`) and (`a`, `bc`) differ.
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC accepts any key length");
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }
}

/// A map that never holds more than its capacity (see the module doc for the policy).
pub(crate) struct BoundedCache<K, V> {
    generation_size: usize,
    current: HashMap<K, V>,
    previous: HashMap<K, V>,
}

impl<K: Hash + Eq, V> BoundedCache<K, V> {
    /// A cache of at most `capacity` entries (at least 2).
    pub(crate) fn new(capacity: usize) -> Self {
        BoundedCache {
            generation_size: (capacity / 2).max(1),
            current: HashMap::new(),
            previous: HashMap::new(),
        }
    }

    /// The value under `key`, keeping it for longer.
    pub(crate) fn get(&mut self, key: &K) -> Option<&V> {
        if !self.current.contains_key(key) {
            let (key, value) = self.previous.remove_entry(key)?;
            self.insert(key, value);
        }
        self.current.get(key)
    }

    /// Stores `value` under `key`, dropping the old generation if the new one is full.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.current.len() >= self.generation_size && !self.current.contains_key(&key) {
            self.previous = std::mem::take(&mut self.current);
        }
        self.previous.remove(&key);
        self.current.insert(key, value);
    }

    /// Removes `key`.
    pub(crate) fn remove(&mut self, key: &K) {
        self.current.remove(key);
        self.previous.remove(key);
    }

    /// Keeps only the entries for which `keep` is true.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        self.current.retain(|k, v| keep(k, v));
        self.previous.retain(|k, v| keep(k, v));
    }

    /// How many entries are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_exceeds_capacity_and_keeps_recently_used_entries() {
        let mut cache = BoundedCache::new(10);
        cache.insert(0, "hot");
        for i in 1..1000 {
            cache.insert(i, "cold");
            assert!(cache.len() <= 10, "{} entries after {i} inserts", cache.len());
            assert_eq!(cache.get(&0), Some(&"hot"), "a key read between inserts survives");
        }
        assert_eq!(cache.get(&1), None, "an old unused key was dropped");
        assert_eq!(cache.get(&999), Some(&"cold"));
    }

    #[test]
    fn replacing_a_key_keeps_one_entry() {
        let mut cache = BoundedCache::new(4);
        for i in 0..5 {
            cache.insert("k", i);
        }
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&"k"), Some(&4));
        cache.insert("a", 0);
        cache.insert("b", 0);
        cache.insert("k", 9); // "k" is in the previous generation now
        assert_eq!(cache.get(&"k"), Some(&9));
        cache.remove(&"k");
        assert_eq!(cache.get(&"k"), None);
        cache.retain(|key, _| *key != "a");
        assert_eq!(cache.get(&"a"), None);
        assert_eq!(cache.get(&"b"), Some(&0));
    }

    #[test]
    fn mac_separates_parts_and_keys() {
        let keyer = Keyer::random();
        assert_ne!(keyer.mac(&[b"ab", b"c"]), keyer.mac(&[b"a", b"bc"]));
        assert_eq!(keyer.mac(&[b"ab", b"c"]), keyer.mac(&[b"ab", b"c"]));
        assert_ne!(keyer.mac(&[b"ab"]), Keyer::random().mac(&[b"ab"]), "each keyer has its own key");
    }
}
