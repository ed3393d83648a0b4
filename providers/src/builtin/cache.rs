//! The password-check cache: a reconnect storm (every device of a site coming back after a
//! network outage) must not cost one PBKDF2 run per connect.
//!
//! An entry is keyed by the username and an HMAC of the password under a random per-process
//! key (never the password, see [`crate::cache`]), and remembers the stored hash it was checked
//! against and the answer (wrong passwords are remembered too, so a storm of bad logins is as
//! cheap as a storm of good ones). An entry only answers while the record still has that same
//! hash, so a password change is honoured even before the directory drops the user's entries;
//! the directory drops them anyway whenever the user's record changes, so memory is not held
//! for stale answers. At most [`DEFAULT_CAPACITY`] entries are kept.

use std::sync::{Arc, Mutex, MutexGuard};

use mesgd_core::auth::Secret;

use crate::cache::{BoundedCache, Keyer};
use mesgd_core::sync::lock;

/// How many checks are remembered.
pub(crate) const DEFAULT_CAPACITY: usize = 10_000;

/// (username, HMAC of the password).
pub(crate) type VerifyKey = (String, [u8; 32]);

struct Entry {
    stored_hash: Arc<str>,
    matches: bool,
}

/// Remembered password checks.
pub(crate) struct VerifyCache {
    keyer: Keyer,
    entries: Mutex<BoundedCache<VerifyKey, Entry>>,
}

impl VerifyCache {
    pub(crate) fn new(capacity: usize) -> Self {
        VerifyCache { keyer: Keyer::random(), entries: Mutex::new(BoundedCache::new(capacity)) }
    }

    /// The key for `username` with `password`.
    pub(crate) fn key(&self, username: &str, password: &Secret) -> VerifyKey {
        (username.to_owned(), self.keyer.mac(&[password.expose()]))
    }

    /// The remembered answer, if it was computed against `stored_hash`.
    pub(crate) fn get(&self, key: &VerifyKey, stored_hash: &str) -> Option<bool> {
        let mut entries = self.lock();
        let entry = entries.get(key)?;
        (*entry.stored_hash == *stored_hash).then_some(entry.matches)
    }

    /// Remembers an answer.
    pub(crate) fn insert(&self, key: VerifyKey, stored_hash: Arc<str>, matches: bool) {
        self.lock().insert(key, Entry { stored_hash, matches });
    }

    /// Forgets every answer about these users.
    pub(crate) fn invalidate_users(&self, usernames: &[&str]) {
        self.lock().retain(|(name, _), _| !usernames.contains(&name.as_str()));
    }

    /// How many answers are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, BoundedCache<VerifyKey, Entry>> {
        lock(&self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_only_for_the_hash_they_were_computed_against() {
        let cache = VerifyCache::new(100);
        let key = cache.key("u", &Secret::new("pw"));
        assert_eq!(cache.get(&key, "h1"), None);
        cache.insert(key.clone(), Arc::from("h1"), true);
        assert_eq!(cache.get(&key, "h1"), Some(true));
        assert_eq!(cache.get(&key, "h2"), None, "a changed hash is a miss");
        assert_eq!(cache.get(&cache.key("u", &Secret::new("pW")), "h1"), None);
        assert_eq!(cache.get(&cache.key("v", &Secret::new("pw")), "h1"), None);
        cache.insert(cache.key("v", &Secret::new("x")), Arc::from("h"), false);
        cache.invalidate_users(&["u"]);
        assert_eq!(cache.get(&key, "h1"), None);
        assert_eq!(cache.len(), 1);
    }
}
