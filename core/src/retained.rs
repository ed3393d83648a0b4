//! The retained-message store: the last retained message of each topic, kept in a
//! [`TopicTree`] so that a subscribe walks only the branches its filter can match.

use std::collections::BinaryHeap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::model::Message;
use crate::sync::{read, write};
use crate::topic::{TopicFilter, TopicName};
use crate::trie::TopicTree;

/// Retained messages by topic.
#[derive(Debug, Default)]
pub struct RetainedStore {
    tree: RwLock<TopicTree<Arc<Message>>>,
}

/// A message ordered by its topic, for [`RetainedStore::page`].
struct ByTopic(Arc<Message>);

impl PartialEq for ByTopic {
    fn eq(&self, other: &Self) -> bool {
        self.0.topic == other.0.topic
    }
}
impl Eq for ByTopic {}
impl PartialOrd for ByTopic {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByTopic {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.topic.as_str().cmp(other.0.topic.as_str())
    }
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

    /// The unexpired retained message of `topic`, if there is one.
    pub fn get(&self, topic: &TopicName, now: Instant) -> Option<Arc<Message>> {
        read(&self.tree).get(topic).filter(|m| !m.is_expired(now)).cloned()
    }

    /// Removes the retained message of `topic`; returns whether there was one.
    pub fn remove(&self, topic: &TopicName) -> bool {
        write(&self.tree).remove(topic).is_some()
    }

    /// One page of the unexpired retained messages `filter` matches, ordered by topic: at most
    /// `limit` of them, with topics after `after` (an earlier page's last topic). For operators
    /// (the REST API): it visits every match, but holds no more than `limit` of them, so a page
    /// of a store of millions costs a walk, not a copy.
    pub fn page(
        &self,
        filter: &TopicFilter,
        after: Option<&str>,
        limit: usize,
        now: Instant,
    ) -> Vec<Arc<Message>> {
        // A max-heap by topic of the `limit` smallest topics past the cursor seen so far.
        let mut kept: BinaryHeap<ByTopic> = BinaryHeap::with_capacity(limit.saturating_add(1).min(4096));
        if limit == 0 {
            return Vec::new();
        }
        let tree = read(&self.tree);
        tree.for_each_match(filter, |m| {
            if m.is_expired(now) || after.is_some_and(|a| m.topic.as_str() <= a) {
                return;
            }
            if kept.len() < limit {
                kept.push(ByTopic(m.clone()));
            } else if kept.peek().is_some_and(|largest| m.topic.as_str() < largest.0.topic.as_str()) {
                kept.pop();
                kept.push(ByTopic(m.clone()));
            }
        });
        drop(tree);
        kept.into_sorted_vec().into_iter().map(|m| m.0).collect()
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
    fn pages_walk_the_matches_in_topic_order() {
        let store = RetainedStore::new();
        let now = Instant::now();
        for t in ["b/2", "a/1", "c/3", "a/0", "x/9", "$SYS/x"] {
            store.set(&msg(t, b"p"));
        }
        let all = TopicFilter::try_from("#").unwrap();
        let topics = |page: Vec<Arc<Message>>| page.iter().map(|m| m.topic.to_string()).collect::<Vec<_>>();
        assert_eq!(topics(store.page(&all, None, 2, now)), ["a/0", "a/1"]);
        assert_eq!(topics(store.page(&all, Some("a/1"), 2, now)), ["b/2", "c/3"]);
        assert_eq!(topics(store.page(&all, Some("c/3"), 2, now)), ["x/9"]);
        assert!(store.page(&all, Some("x/9"), 2, now).is_empty());
        assert!(store.page(&all, None, 0, now).is_empty());
        let a = TopicFilter::try_from("a/+").unwrap();
        assert_eq!(topics(store.page(&a, None, 10, now)), ["a/0", "a/1"]);
        let name = TopicName::try_from("b/2").unwrap();
        assert!(store.get(&name, now).is_some());
        assert!(store.remove(&name));
        assert!(!store.remove(&name));
        assert!(store.get(&name, now).is_none());
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
