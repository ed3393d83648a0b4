//! The retained-message store: the last retained message of each topic, kept in a
//! [`TopicTree`] so that a subscribe walks only the branches its filter can match.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::model::Message;
use crate::sync::{read, write};
use crate::topic::TopicFilter;
use crate::trie::TopicTree;

/// Retained messages by topic.
#[derive(Debug, Default)]
pub struct RetainedStore {
    tree: RwLock<TopicTree<Arc<Message>>>,
}

/// What storing a retained message did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetainChange {
    /// A new topic now has a retained message.
    Added,
    /// The topic's retained message was replaced.
    Replaced,
    /// An empty payload removed the topic's retained message.
    Removed,
    /// An empty payload on a topic with no retained message: nothing changed.
    Unchanged,
}

impl RetainedStore {
    /// An empty store.
    pub fn new() -> Self {
        RetainedStore::default()
    }

    /// Stores `message` as its topic's retained message; an empty payload deletes it.
    /// The payload is copied into its own allocation: a retained message can live for months and
    /// must not pin the (larger) read buffer it arrived in.
    pub fn set(&self, message: &Arc<Message>) -> RetainChange {
        let mut tree = write(&self.tree);
        if message.payload.is_empty() {
            return match tree.remove(&message.topic) {
                Some(_) => RetainChange::Removed,
                None => RetainChange::Unchanged,
            };
        }
        let mut compact = Message::clone(message);
        compact.payload = bytes::Bytes::copy_from_slice(&message.payload);
        match tree.insert(&message.topic, Arc::new(compact)) {
            Some(_) => RetainChange::Replaced,
            None => RetainChange::Added,
        }
    }

    /// Every unexpired retained message whose topic `filter` matches.
    pub fn matching(&self, filter: &TopicFilter, now: Instant) -> Vec<Arc<Message>> {
        let tree = read(&self.tree);
        let mut found = Vec::new();
        tree.for_each_match(filter, |m| {
            if !m.is_expired(now) {
                found.push(m.clone());
            }
        });
        found
    }

    /// Removes expired messages; returns how many.
    pub fn sweep_expired(&self, now: Instant) -> usize {
        let mut tree = write(&self.tree);
        let before = tree.len();
        tree.retain(|m| !m.is_expired(now));
        before - tree.len()
    }

    /// How many topics hold a retained message.
    pub fn len(&self) -> usize {
        read(&self.tree).len()
    }

    /// Whether no topic holds a retained message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::model::{Origin, QoS};
    use crate::topic::TopicName;

    fn msg(topic: &str, payload: &'static [u8]) -> Arc<Message> {
        Arc::new(Message::new(
            TopicName::try_from(topic).unwrap(),
            Bytes::from_static(payload),
            QoS::AtMostOnce,
            true,
            Origin::BROKER,
        ))
    }

    #[test]
    fn store_replace_delete_and_match() {
        let store = RetainedStore::new();
        let now = Instant::now();
        assert_eq!(store.set(&msg("a/b", b"1")), RetainChange::Added);
        assert_eq!(store.set(&msg("a/b", b"2")), RetainChange::Replaced);
        assert_eq!(store.set(&msg("a/c", b"3")), RetainChange::Added);
        assert_eq!(store.set(&msg("$SYS/x", b"4")), RetainChange::Added);
        let all = TopicFilter::try_from("#").unwrap();
        let mut payloads: Vec<Bytes> = store.matching(&all, now).iter().map(|m| m.payload.clone()).collect();
        payloads.sort();
        assert_eq!(payloads, [Bytes::from_static(b"2"), Bytes::from_static(b"3")]);
        assert_eq!(store.set(&msg("a/b", b"")), RetainChange::Removed);
        assert_eq!(store.set(&msg("a/b", b"")), RetainChange::Unchanged);
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn expired_messages_are_not_replayed_and_are_swept() {
        let store = RetainedStore::new();
        let now = Instant::now();
        let m = Message::clone(&msg("t", b"x")).with_expiry_interval(Some(1), now);
        store.set(&Arc::new(m));
        let f = TopicFilter::try_from("t").unwrap();
        assert_eq!(store.matching(&f, now).len(), 1);
        let later = now + Duration::from_secs(2);
        assert!(store.matching(&f, later).is_empty());
        assert_eq!(store.sweep_expired(later), 1);
        assert!(store.is_empty());
    }
}
