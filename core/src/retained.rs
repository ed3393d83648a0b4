//! The retained-message store: the last retained message of each topic, kept in a
//! [`TopicTree`] so that a subscribe walks only the branches its filter can match.
//!
//! It is bounded ([`RetainedLimits`]): any client allowed to publish with the retain flag could
//! otherwise make the broker keep a message on each of millions of topics. A retained publish
//! that would take the store past a cap is routed as usual but not kept, and reported as
//! [`RetainChange::Refused`]; replacing a topic's message counts only the difference, and a
//! delete is always allowed. What is read back at start-up is kept whatever the caps (nothing
//! stored is dropped because a cap was lowered), and new messages wait for room under them.

use std::collections::BinaryHeap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::model::Message;
use crate::sync::{read, write};
use crate::topic::{TopicFilter, TopicName};
use crate::trie::TopicTree;

/// The caps of the retained store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetainedLimits {
    /// Topics holding a retained message, at most.
    pub max_messages: usize,
    /// Bytes (topic + payload) of all retained messages together, at most.
    pub max_bytes: usize,
}

impl RetainedLimits {
    /// No caps.
    pub const UNLIMITED: RetainedLimits = RetainedLimits { max_messages: usize::MAX, max_bytes: usize::MAX };
}

impl Default for RetainedLimits {
    fn default() -> Self {
        RetainedLimits::UNLIMITED
    }
}

/// Retained messages by topic.
#[derive(Debug, Default)]
pub struct RetainedStore {
    tree: RwLock<Kept>,
    limits: RetainedLimits,
}

/// The messages and their bytes, under one lock.
#[derive(Debug, Default)]
struct Kept {
    tree: TopicTree<Arc<Message>>,
    bytes: usize,
}

/// What a retained message weighs against [`RetainedLimits::max_bytes`].
fn weight(message: &Message) -> usize {
    message.topic.as_str().len() + message.payload.len()
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
    /// Not kept: it would have taken the store past one of its [`RetainedLimits`] (the topic's
    /// previous message, if any, stays).
    Refused,
}

impl RetainedStore {
    /// An empty store without caps.
    pub fn new() -> Self {
        RetainedStore::default()
    }

    /// An empty store with `limits`.
    pub fn with_limits(limits: RetainedLimits) -> Self {
        RetainedStore { tree: RwLock::default(), limits }
    }

    /// Stores `message` as its topic's retained message, if the caps allow; an empty payload
    /// deletes it. The payload is copied into its own allocation: a retained message can live
    /// for months and must not pin the (larger) read buffer it arrived in.
    pub fn set(&self, message: &Arc<Message>) -> RetainChange {
        self.store(message, true)
    }

    /// As [`RetainedStore::set`] whatever the caps: for what is read back at start-up.
    pub fn restore(&self, message: &Arc<Message>) -> RetainChange {
        self.store(message, false)
    }

    fn store(&self, message: &Arc<Message>, capped: bool) -> RetainChange {
        let mut kept = write(&self.tree);
        if message.payload.is_empty() {
            return match kept.tree.remove(&message.topic) {
                Some(old) => {
                    kept.bytes -= weight(&old);
                    RetainChange::Removed
                }
                None => RetainChange::Unchanged,
            };
        }
        let old = kept.tree.get(&message.topic).map(|m| weight(m));
        let bytes = kept.bytes - old.unwrap_or(0) + weight(message);
        let count = kept.tree.len() + usize::from(old.is_none());
        if capped && (bytes > self.limits.max_bytes || count > self.limits.max_messages) {
            return RetainChange::Refused;
        }
        let mut compact = Message::clone(message);
        compact.payload = bytes::Bytes::copy_from_slice(&message.payload);
        kept.bytes = bytes;
        match kept.tree.insert(&message.topic, Arc::new(compact)) {
            Some(_) => RetainChange::Replaced,
            None => RetainChange::Added,
        }
    }

    /// Every unexpired retained message whose topic `filter` matches.
    pub fn matching(&self, filter: &TopicFilter, now: Instant) -> Vec<Arc<Message>> {
        let kept = read(&self.tree);
        let mut found = Vec::new();
        kept.tree.for_each_match(filter, |m| {
            if !m.is_expired(now) {
                found.push(m.clone());
            }
        });
        found
    }

    /// Every unexpired retained message, `$` topics included, in no particular order (for a
    /// cluster node that fills a new retained stream from its store).
    pub fn all(&self, now: Instant) -> Vec<Arc<Message>> {
        let kept = read(&self.tree);
        let mut found = Vec::with_capacity(kept.tree.len());
        kept.tree.for_each(|_, m| {
            if !m.is_expired(now) {
                found.push(m.clone());
            }
        });
        found
    }

    /// The unexpired retained message of `topic`, if there is one.
    pub fn get(&self, topic: &TopicName, now: Instant) -> Option<Arc<Message>> {
        read(&self.tree).tree.get(topic).filter(|m| !m.is_expired(now)).cloned()
    }

    /// Removes the retained message of `topic`; returns whether there was one.
    pub fn remove(&self, topic: &TopicName) -> bool {
        let mut kept = write(&self.tree);
        let Some(old) = kept.tree.remove(topic) else { return false };
        kept.bytes -= weight(&old);
        true
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
        let kept_store = read(&self.tree);
        kept_store.tree.for_each_match(filter, |m| {
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
        drop(kept_store);
        kept.into_sorted_vec().into_iter().map(|m| m.0).collect()
    }

    /// Removes expired messages; returns how many.
    pub fn sweep_expired(&self, now: Instant) -> usize {
        let mut kept = write(&self.tree);
        let before = kept.tree.len();
        let mut freed = 0;
        kept.tree.retain(|m| {
            let keep = !m.is_expired(now);
            if !keep {
                freed += weight(m);
            }
            keep
        });
        kept.bytes -= freed;
        before - kept.tree.len()
    }

    /// How many topics hold a retained message.
    pub fn len(&self) -> usize {
        read(&self.tree).tree.len()
    }

    /// The bytes (topics + payloads) of every retained message together.
    pub fn bytes(&self) -> usize {
        read(&self.tree).bytes
    }

    /// The caps.
    pub fn limits(&self) -> RetainedLimits {
        self.limits
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
    fn all_holds_every_unexpired_message_dollar_topics_included() {
        let store = RetainedStore::new();
        let now = Instant::now();
        store.set(&msg("a/b", b"1"));
        store.set(&msg("$app/x", b"2"));
        store.set(&msg("a", b"3"));
        let expiring = Message::clone(&msg("e/1", b"4")).with_expiry_interval(Some(1), now);
        store.set(&Arc::new(expiring));
        let mut topics: Vec<String> = store.all(now).iter().map(|m| m.topic.to_string()).collect();
        topics.sort();
        assert_eq!(topics, ["$app/x", "a", "a/b", "e/1"]);
        let later = now + Duration::from_secs(2);
        assert_eq!(store.all(later).len(), 3, "an expired message is left out");
    }

    #[test]
    fn the_caps_refuse_what_would_pass_them_and_count_only_differences() {
        // Weights: topic + payload bytes. "t/1" + 7 bytes = 10.
        let store = RetainedStore::with_limits(RetainedLimits { max_messages: 2, max_bytes: 25 });
        assert_eq!(store.set(&msg("t/1", b"1234567")), RetainChange::Added);
        assert_eq!(store.set(&msg("t/2", b"1234567")), RetainChange::Added);
        assert_eq!((store.len(), store.bytes()), (2, 20));
        // A third topic passes the count cap.
        assert_eq!(store.set(&msg("t/3", b"1")), RetainChange::Refused);
        // A replacement counts the difference: 20 - 10 + 15 = 25 fits, 26 does not.
        assert_eq!(store.set(&msg("t/1", b"123456789012")), RetainChange::Replaced);
        assert_eq!(store.bytes(), 25);
        assert_eq!(store.set(&msg("t/2", b"12345678")), RetainChange::Refused);
        let now = Instant::now();
        assert_eq!(&store.get(&TopicName::try_from("t/2").unwrap(), now).unwrap().payload[..], b"1234567");
        // A delete is always allowed, and frees room.
        assert_eq!(store.set(&msg("t/1", b"")), RetainChange::Removed);
        assert_eq!((store.len(), store.bytes()), (1, 10));
        assert_eq!(store.set(&msg("t/3", b"1")), RetainChange::Added);
        assert!(store.remove(&TopicName::try_from("t/3").unwrap()));
        assert_eq!((store.len(), store.bytes()), (1, 10));
        // What start-up reads back is kept over the caps; new ones then wait for room.
        assert_eq!(store.restore(&msg("r/1", b"123456789012345678901234567")), RetainChange::Added);
        assert_eq!((store.len(), store.bytes()), (2, 40));
        assert_eq!(store.set(&msg("r/1", b"1")), RetainChange::Replaced, "smaller is always room");
        assert_eq!(store.bytes(), 14);
    }

    #[test]
    fn expiry_frees_its_bytes() {
        let store = RetainedStore::with_limits(RetainedLimits { max_messages: 10, max_bytes: 12 });
        let now = Instant::now();
        let mut m = Message::clone(&msg("e/1", b"1234567"));
        m = m.with_expiry_interval(Some(1), now);
        assert_eq!(store.set(&Arc::new(m)), RetainChange::Added);
        assert_eq!(store.set(&msg("e/2", b"1234567")), RetainChange::Refused);
        assert_eq!(store.sweep_expired(now + Duration::from_secs(2)), 1);
        assert_eq!(store.bytes(), 0);
        assert_eq!(store.set(&msg("e/2", b"1234567")), RetainChange::Added);
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
