//! The broker's sessions by key, one pointer each.
//!
//! A map from key to session would keep a copy of the key (24 bytes, and its hash slot) beside
//! each pointer, although every session holds its own key: a table of `Arc<Session>` found by
//! the key inside is 8 bytes a slot instead of 32, which is 24 bytes less per idle device of a
//! fleet (a table at 10,000 sessions has 16,384 slots).

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use crate::model::SessionKey;
use crate::session::Session;

/// Sessions, at most one per key.
#[derive(Debug, Default)]
pub(super) struct SessionTable {
    table: HashTable<Arc<Session>>,
    /// Keyed per process, as a standard map's: client ids are chosen by clients.
    hasher: RandomState,
}

impl SessionTable {
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// The session of `key`.
    pub(super) fn get(&self, key: &SessionKey) -> Option<&Arc<Session>> {
        self.table.find(self.hasher.hash_one(key), |s| s.key() == key)
    }

    /// Makes `session` the one of its key; returns the one it replaces.
    pub(super) fn insert(&mut self, session: Arc<Session>) -> Option<Arc<Session>> {
        let hasher = &self.hasher;
        let key = session.key();
        match self.table.entry(hasher.hash_one(key), |s| s.key() == key, |s| hasher.hash_one(s.key())) {
            Entry::Occupied(mut old) => Some(std::mem::replace(old.get_mut(), session)),
            Entry::Vacant(slot) => {
                slot.insert(session);
                None
            }
        }
    }

    /// Removes `session` if it is still the one of its key (a newer session of the same key
    /// stays); returns whether it was.
    pub(super) fn remove(&mut self, session: &Arc<Session>) -> bool {
        let hash = self.hasher.hash_one(session.key());
        match self.table.find_entry(hash, |s| Arc::ptr_eq(s, session)) {
            Ok(found) => {
                found.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Every session.
    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<Session>> {
        self.table.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SessionExpiry, SessionId};
    use crate::session::QueueLimits;

    fn session(id: u64, key: SessionKey) -> Arc<Session> {
        let limits =
            QueueLimits { max_messages: 1, max_bytes: 1, queue_qos0_offline: false, max_inflight_bytes: 1 };
        Arc::new(Session::new(SessionId(id), key, SessionExpiry::Never, limits))
    }

    #[test]
    fn one_session_per_key_and_only_the_current_one_is_removed() {
        let mut t = SessionTable::default();
        let a = session(1, SessionKey::mqtt("a"));
        let relay_a = session(2, SessionKey::relay("a"));
        assert!(t.insert(a.clone()).is_none());
        assert!(t.insert(relay_a).is_none(), "namespaces never collide");
        assert_eq!(t.len(), 2);
        assert!(Arc::ptr_eq(t.get(&SessionKey::mqtt("a")).unwrap(), &a));
        assert!(t.get(&SessionKey::mqtt("b")).is_none());

        // A newer session of the key replaces it; the old one's removal then leaves it alone.
        let a2 = session(3, SessionKey::mqtt("a"));
        assert!(Arc::ptr_eq(&t.insert(a2.clone()).unwrap(), &a));
        assert!(!t.remove(&a));
        assert!(Arc::ptr_eq(t.get(&SessionKey::mqtt("a")).unwrap(), &a2));
        assert!(t.remove(&a2));
        assert!(t.get(&SessionKey::mqtt("a")).is_none());
        assert_eq!(t.values().count(), 1);

        for i in 0..1000 {
            t.insert(session(10 + i, SessionKey::mqtt(format!("c{i}"))));
        }
        assert_eq!(t.len(), 1001);
        assert!((0..1000).all(|i| t.get(&SessionKey::mqtt(format!("c{i}"))).is_some()));
    }
}
