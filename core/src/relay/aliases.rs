//! Alias bindings: which key owns which freely chosen address.
//!
//! `register{addr, pubkey}` binds the alias `addr` to the key; the first key wins, another key
//! gets `alias bound to a different key`, and the same key reclaims it. A bound alias cannot be
//! registered without its key at all. A key is identified by the SHA-256 of its raw bytes, so a
//! binding costs the alias and 32 bytes whatever the key's size.
//!
//! Bindings are durable: [`AliasBindings::claim`] says when one was made ([`AliasClaim::Bound`])
//! so the caller can journal it, and [`AliasBindings::restore`] loads them back. They last until
//! an operator removes them ([`AliasBindings::remove`]); their number is capped, and a claim
//! beyond the cap gets `limit reached: alias bindings`.

use std::collections::HashMap;
use std::sync::Arc;

use super::address::PublicKey;
use super::error::{Limit, RelayError};

/// The default cap on the number of bindings.
pub const DEFAULT_MAX_BINDINGS: usize = 100_000;

/// What a claim of an alias found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasClaim {
    /// No key was given and the alias is not bound: a plain address.
    Unbound,
    /// The alias is now bound to the key (a new binding: journal it).
    Bound,
    /// The alias was already bound to this key.
    Reclaimed,
}

/// The alias → key map.
#[derive(Debug)]
pub struct AliasBindings {
    bindings: HashMap<Arc<str>, [u8; 32]>,
    max: usize,
    refused_full: u64,
    refused_key: u64,
}

impl AliasBindings {
    /// An empty map holding at most `max` bindings.
    pub fn new(max: usize) -> Self {
        AliasBindings { bindings: HashMap::new(), max, refused_full: 0, refused_key: 0 }
    }

    /// Claims `alias` for `key` (`None`: a `register` without a key).
    ///
    /// Nothing changes on an error. Call it after the other checks of a `register` succeeded,
    /// so that a refused registration leaves no binding behind.
    pub fn claim(&mut self, alias: &str, key: Option<&PublicKey>) -> Result<AliasClaim, RelayError> {
        match (self.bindings.get(alias), key) {
            (None, None) => Ok(AliasClaim::Unbound),
            (Some(bound), Some(key)) if bound == key.digest() => Ok(AliasClaim::Reclaimed),
            (Some(_), _) => {
                self.refused_key += 1;
                Err(RelayError::AliasBound)
            }
            (None, Some(key)) => {
                if self.bindings.len() >= self.max {
                    self.refused_full += 1;
                    return Err(RelayError::LimitReached(Limit::AliasBindings));
                }
                self.bindings.insert(Arc::from(alias), *key.digest());
                Ok(AliasClaim::Bound)
            }
        }
    }

    /// The key digest `alias` is bound to.
    pub fn get(&self, alias: &str) -> Option<&[u8; 32]> {
        self.bindings.get(alias)
    }

    /// Loads a stored binding (recovery). Over the cap it is still loaded: a binding a client
    /// was given is not forgotten because the cap was lowered; new ones are refused until the
    /// count is below the cap again.
    pub fn restore(&mut self, alias: &str, key_digest: [u8; 32]) {
        self.bindings.insert(Arc::from(alias), key_digest);
    }

    /// Removes a binding (an operator's decision); returns whether there was one.
    pub fn remove(&mut self, alias: &str) -> bool {
        self.bindings.remove(alias).is_some()
    }

    /// The number of bindings.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// Claims refused because the cap was reached.
    pub fn refused_full(&self) -> u64 {
        self.refused_full
    }

    /// Claims refused because the alias is bound to another key (or to a key, when none was
    /// given).
    pub fn refused_key(&self) -> u64 {
        self.refused_key
    }
}

impl Default for AliasBindings {
    fn default() -> Self {
        AliasBindings::new(DEFAULT_MAX_BINDINGS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> PublicKey {
        PublicKey::from_base64(&base64::Engine::encode(&super::super::address::BASE64, [byte; 32])).unwrap()
    }

    #[test]
    fn first_key_wins_same_key_reclaims() {
        let mut bindings = AliasBindings::new(10);
        assert_eq!(bindings.claim("alice", None), Ok(AliasClaim::Unbound));
        assert!(bindings.is_empty(), "a key-less claim binds nothing");
        assert_eq!(bindings.claim("alice", Some(&key(1))), Ok(AliasClaim::Bound));
        assert_eq!(bindings.claim("alice", Some(&key(1))), Ok(AliasClaim::Reclaimed));
        assert_eq!(bindings.claim("alice", Some(&key(2))), Err(RelayError::AliasBound));
        assert_eq!(bindings.claim("alice", None), Err(RelayError::AliasBound));
        assert_eq!(bindings.get("alice"), Some(key(1).digest()));
        assert_eq!(bindings.refused_key(), 2);
        assert_eq!(bindings.len(), 1);
    }

    #[test]
    fn cap_refuses_new_bindings_only() {
        let mut bindings = AliasBindings::new(2);
        assert_eq!(bindings.claim("a", Some(&key(1))), Ok(AliasClaim::Bound));
        assert_eq!(bindings.claim("b", Some(&key(1))), Ok(AliasClaim::Bound));
        assert_eq!(bindings.claim("c", Some(&key(1))), Err(RelayError::LimitReached(Limit::AliasBindings)));
        assert_eq!(bindings.claim("a", Some(&key(1))), Ok(AliasClaim::Reclaimed));
        assert_eq!(bindings.claim("c", None), Ok(AliasClaim::Unbound));
        assert_eq!(bindings.refused_full(), 1);
        assert_eq!(bindings.len(), 2);
        assert!(bindings.remove("a"));
        assert!(!bindings.remove("a"));
        assert_eq!(bindings.claim("c", Some(&key(2))), Ok(AliasClaim::Bound));
    }

    #[test]
    fn restore_keeps_bindings_over_the_cap() {
        let mut bindings = AliasBindings::new(1);
        bindings.restore("a", *key(1).digest());
        bindings.restore("b", *key(2).digest());
        assert_eq!(bindings.len(), 2);
        assert_eq!(bindings.claim("b", Some(&key(2))), Ok(AliasClaim::Reclaimed));
        assert_eq!(bindings.claim("c", Some(&key(3))), Err(RelayError::LimitReached(Limit::AliasBindings)));
    }
}
