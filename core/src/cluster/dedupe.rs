//! Delivering a message that arrives on several of a node's NATS subscriptions once.
//!
//! NATS hands a connection one copy of a message per matching subscription: a node whose
//! clients hold `a/+` and `a/#` subscribes `mq.a.*` and `mq.a.>` and gets two copies of
//! `a/b`. The node routes a remote message through its local router once (which applies every
//! local match itself), so the later copies must be dropped.
//!
//! Every message carries its origin node instance and a sequence number that rises by one per
//! message the instance sends. When the first copy arrives, the node knows how many of its
//! subscriptions match the subject (`copies`); if more than one, it remembers how many copies
//! are still to come, and drops exactly that many later copies with the same origin and
//! sequence number. Nothing is kept for the common case of one matching subscription.
//!
//! The memory is bounded in count ([`Dedupe::new`]'s `capacity`, oldest forgotten first) and in
//! time (`ttl`: the copies of one message are consecutive on the wire, so they arrive within
//! microseconds; an entry whose copies never come, because a subscription was not yet
//! registered at the server when the message passed, is forgotten after `ttl`). Forgetting an
//! entry whose copies are still coming would deliver one twice; both causes are counted.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Who sent a message: a node instance (a random number drawn at start) and its sequence
/// number there.
pub type MessageId = (u64, u64);

/// The copies still expected of recently delivered messages.
#[derive(Debug)]
pub struct Dedupe {
    pending: HashMap<MessageId, usize>,
    /// Insertion order with each entry's deadline, for forgetting.
    order: VecDeque<(MessageId, Instant)>,
    capacity: usize,
    ttl: Duration,
    /// Copies dropped as duplicates.
    pub dropped: u64,
    /// Entries forgotten before all their copies came (capacity or time).
    pub forgotten: u64,
}

impl Dedupe {
    /// Remembers at most `capacity` messages, each for at most `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Dedupe {
            pending: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            ttl,
            dropped: 0,
            forgotten: 0,
        }
    }

    /// A copy of message `id` arrived, on a connection where `copies` subscriptions match its
    /// subject. Returns whether to deliver it (the first copy) or drop it (a later one).
    pub fn offer(&mut self, id: MessageId, copies: usize, now: Instant) -> bool {
        self.expire(now);
        if let Some(left) = self.pending.get_mut(&id) {
            *left -= 1;
            if *left == 0 {
                self.pending.remove(&id);
            }
            self.dropped += 1;
            return false;
        }
        if copies > 1 {
            if self.pending.len() >= self.capacity {
                self.forget_oldest();
            }
            self.pending.insert(id, copies - 1);
            self.order.push_back((id, now + self.ttl));
        }
        true
    }

    /// How many messages are remembered.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no message is remembered.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(id, deadline)) = self.order.front() {
            // Entries of completed messages stay in `order` until their deadline; past twice the
            // capacity the oldest go early, so `order` is bounded too.
            if deadline > now && self.order.len() <= self.capacity.saturating_mul(2) {
                break;
            }
            self.order.pop_front();
            if self.pending.remove(&id).is_some() {
                self.forgotten += 1;
            }
        }
    }

    fn forget_oldest(&mut self) {
        while let Some((id, _)) = self.order.pop_front() {
            if self.pending.remove(&id).is_some() {
                self.forgotten += 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn one_subscription_keeps_nothing() {
        let mut d = Dedupe::new(8, Duration::from_secs(1));
        let now = Instant::now();
        assert!(d.offer((1, 1), 1, now));
        assert!(d.offer((1, 2), 1, now));
        assert!(d.is_empty());
    }

    #[test]
    fn later_copies_are_dropped_then_forgotten() {
        let mut d = Dedupe::new(8, Duration::from_secs(1));
        let now = Instant::now();
        assert!(d.offer((1, 1), 3, now));
        assert!(!d.offer((1, 1), 3, now));
        assert!(!d.offer((1, 1), 3, now));
        assert!(d.is_empty());
        // A fourth copy would be a new message as far as the memory goes: none is expected.
        assert!(d.offer((2, 1), 2, now));
        assert_eq!(d.dropped, 2);
    }

    #[test]
    fn entries_expire_and_the_count_is_capped() {
        let mut d = Dedupe::new(2, Duration::from_secs(1));
        let now = Instant::now();
        assert!(d.offer((1, 1), 2, now));
        assert!(d.offer((1, 2), 2, now));
        assert!(d.offer((1, 3), 2, now));
        assert_eq!(d.len(), 2);
        assert_eq!(d.forgotten, 1);
        // (1, 1) was forgotten: its copy is delivered again (counted above as the risk).
        assert!(d.offer((1, 1), 1, now));
        let later = now + Duration::from_secs(2);
        assert!(d.offer((9, 9), 1, later));
        assert!(d.is_empty());
        assert_eq!(d.forgotten, 3);
    }

    proptest! {
        /// Messages with 1 to 4 copies each, the copies of different messages interleaved in
        /// any order that keeps each subscription's stream in sequence: every message is
        /// delivered exactly once.
        #[test]
        fn every_message_once_whatever_the_interleaving(
            copies in proptest::collection::vec(1usize..=4, 1..40),
            picks in proptest::collection::vec(0usize..4, 0..200),
        ) {
            let mut d = Dedupe::new(1024, Duration::from_secs(5));
            let now = Instant::now();
            // Stream k carries the messages with more than k copies, in order.
            let streams: Vec<Vec<u64>> = (0..4)
                .map(|k| (0..copies.len()).filter(|&m| copies[m] > k).map(|m| m as u64).collect())
                .collect();
            let mut heads = [0usize; 4];
            let mut delivered = vec![0u32; copies.len()];
            let mut offer = |k: usize, heads: &mut [usize; 4], d: &mut Dedupe| {
                let m = streams[k][heads[k]];
                heads[k] += 1;
                if d.offer((7, m), copies[m as usize], now) {
                    delivered[m as usize] += 1;
                }
            };
            for p in picks {
                if heads[p] < streams[p].len() {
                    offer(p, &mut heads, &mut d);
                }
            }
            for k in 0..4 {
                while heads[k] < streams[k].len() {
                    offer(k, &mut heads, &mut d);
                }
            }
            prop_assert!(delivered.iter().all(|&n| n == 1), "{delivered:?}");
            prop_assert!(d.is_empty());
        }
    }
}
