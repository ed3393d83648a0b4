//! The replay of the durable stream for a session recovered from its record after its node
//! died (sans-I/O: what the record keeps for it and which stored messages the session gets;
//! `mesgd-cluster` reads the stream).
//!
//! Every QoS 1/2 message carries its identity in the stream ([`MessageId`]). The node that owns
//! a persistent session learns, from the session's journal changes, the id of each message
//! queued for it and of each one finished since ([`Delivered`]); the session's record keeps a
//! checkpoint (a time on the wall clock) and the ids finished since it. A node that recovers
//! the record replays the stream from the checkpoint and gives the session every message that
//! matches its subscriptions and that it neither finished nor holds ([`Replay`]): what was on
//! its way to the dead node, published while the session had no node, or queued in the last
//! write delay.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::journal::Change;
use crate::model::{Delivery, Message, MessageId, QoS, SubscribeOptions, SubscriptionIds};
use crate::topic::{SubscriptionFilter, TopicFilter};

/// How far back before a record's write its checkpoint lies, in milliseconds: a message stored
/// earlier than that and never received by the session's node is not replayed.
pub const WINDOW_MS: u64 = 10_000;
/// How many finished ids one session's record keeps at most; past it, the checkpoint moves
/// forward to the newest one forgotten.
pub const MAX_FINISHED: usize = 1024;

/// One session's ids, as its node learns them from the journal.
#[derive(Debug, Default)]
struct Ids {
    /// Queued or in-flight entries with an id: entry → id.
    held: HashMap<u64, MessageId>,
    /// Finished ids with when they finished (milliseconds since the Unix epoch), oldest first.
    finished: VecDeque<(MessageId, u64)>,
    /// When the newest id forgotten for [`MAX_FINISHED`] finished.
    forgotten_ms: u64,
}

/// The ids of the messages queued for each persistent session on this node and of those
/// finished since the checkpoint, learnt from the journal's changes. Bounded: per session, its
/// queue's entries plus [`MAX_FINISHED`].
#[derive(Debug, Default)]
pub struct Delivered {
    sessions: HashMap<Arc<str>, Ids>,
}

impl Delivered {
    /// Learns from one journal change, at `now_ms`.
    pub fn learn(&mut self, change: &Change, now_ms: u64) {
        match change {
            Change::Queued { client_id, entry, delivery } => {
                if let Some(id) = delivery.message.id {
                    self.sessions.entry(client_id.clone()).or_default().held.insert(*entry, id);
                }
            }
            Change::Done { client_id, entry } => {
                let Some(ids) = self.sessions.get_mut(client_id) else { return };
                if let Some(id) = ids.held.remove(entry) {
                    if ids.finished.len() == MAX_FINISHED {
                        if let Some((_, at)) = ids.finished.pop_front() {
                            ids.forgotten_ms = ids.forgotten_ms.max(at);
                        }
                    }
                    ids.finished.push_back((id, now_ms));
                }
            }
            Change::SessionOpened { client_id, .. } | Change::SessionEnded { client_id } => {
                self.sessions.remove(client_id);
            }
            _ => {}
        }
    }

    /// The checkpoint of a record of `client_id` written at `now_ms`, and the ids finished
    /// since it (every id finished at or after the checkpoint is among them).
    pub fn checkpoint(&mut self, client_id: &str, now_ms: u64) -> (u64, Vec<MessageId>) {
        let mut checkpoint = now_ms.saturating_sub(WINDOW_MS);
        let Some(ids) = self.sessions.get_mut(client_id) else { return (checkpoint, Vec::new()) };
        while ids.finished.front().is_some_and(|(_, at)| *at < checkpoint) {
            ids.finished.pop_front();
        }
        checkpoint = checkpoint.max(ids.forgotten_ms);
        (checkpoint, ids.finished.iter().map(|(id, _)| *id).collect())
    }

    /// Whether `client_id` holds or finished message `id` on this node.
    pub fn has(&self, client_id: &str, id: MessageId) -> bool {
        self.sessions.get(client_id).is_some_and(|ids| {
            ids.held.values().any(|held| *held == id) || ids.finished.iter().any(|(f, _)| *f == id)
        })
    }

    /// Takes in the finished ids of a recovered record, as finished at `now_ms`, so that this
    /// node's records of the session go on listing them.
    pub fn adopt(&mut self, client_id: &Arc<str>, finished: &[MessageId], now_ms: u64) {
        let ids = self.sessions.entry(client_id.clone()).or_default();
        for id in finished.iter().rev().take(MAX_FINISHED).rev() {
            if ids.finished.len() == MAX_FINISHED {
                ids.finished.pop_front();
            }
            ids.finished.push_back((*id, now_ms));
        }
    }
}

/// What a recovered session gets from the stream: its plain subscriptions at QoS 1 or 2
/// (shared ones take messages through their group, and QoS 0 is at most once), less what it
/// already had.
#[derive(Debug)]
pub struct Replay {
    client_id: Arc<str>,
    subscriptions: Vec<(TopicFilter, SubscribeOptions)>,
    skip: HashSet<MessageId>,
}

/// What [`Replay::delivery`] decided for one stored message.
#[derive(Debug)]
pub enum Replayed {
    /// Deliver it.
    Deliver(Delivery),
    /// The session already had it.
    Had,
    /// It expired.
    Expired,
    /// No subscription of the session takes it (or only no-local ones, and the session
    /// published it).
    Unmatched,
}

impl Replay {
    /// The replay of `client_id`'s session with these subscriptions, skipping `had` (the
    /// record's finished ids and the ids of the messages it holds).
    pub fn new(
        client_id: Arc<str>,
        subscriptions: &[(SubscriptionFilter, SubscribeOptions)],
        had: impl IntoIterator<Item = MessageId>,
    ) -> Replay {
        let subscriptions = subscriptions
            .iter()
            .filter_map(|(filter, options)| match filter {
                SubscriptionFilter::Plain(f) if options.qos != QoS::AtMostOnce => Some((f.clone(), *options)),
                _ => None,
            })
            .collect();
        Replay { client_id, subscriptions, skip: had.into_iter().collect() }
    }

    /// Whether there is anything to replay at all.
    pub fn is_empty(&self) -> bool {
        self.subscriptions.is_empty()
    }

    /// Whether a subscription of the session starts with `$` (the stream keeps those topics
    /// under their own subjects).
    pub fn wants_dollar_topics(&self) -> bool {
        self.subscriptions.iter().any(|(f, _)| f.as_str().starts_with('$'))
    }

    /// The delivery of a stored message to the session at `now`, as the router would make it
    /// for its subscriptions: the highest granted QoS of those that match (at most the
    /// message's), every subscription id, retain as published if any asks for it, no-local if
    /// every match asks for it. The read ACL is the session's, at enqueue.
    pub fn delivery(&mut self, message: Message, now: std::time::Instant) -> Replayed {
        if message.id.is_some_and(|id| self.skip.contains(&id)) {
            return Replayed::Had;
        }
        if message.expires_at.is_some_and(|at| at <= now) {
            return Replayed::Expired;
        }
        let own = message.origin.client_id.as_deref() == Some(&*self.client_id);
        let mut granted: Option<QoS> = None;
        let mut ids = SubscriptionIds::new();
        let mut retain_as_published = false;
        let mut no_local = true;
        for (filter, options) in &self.subscriptions {
            if !filter.matches(&message.topic) {
                continue;
            }
            granted = Some(granted.map_or(options.qos, |g| g.max(options.qos)));
            ids.extend(options.subscription_id);
            retain_as_published |= options.retain_as_published;
            no_local &= options.no_local;
        }
        let Some(granted) = granted else { return Replayed::Unmatched };
        if no_local && own {
            return Replayed::Unmatched;
        }
        if let Some(id) = message.id {
            // Once: the stream holds one copy, but a replay must not give it twice either.
            self.skip.insert(id);
        }
        let retain = retain_as_published && message.retain;
        let qos = granted.min(message.qos);
        Replayed::Deliver(Delivery {
            message: Arc::new(message),
            qos,
            retain,
            subscription_ids: ids,
            shared: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::model::{Origin, RetainHandling};
    use crate::topic::TopicName;

    fn id(seq: u64) -> MessageId {
        MessageId { instance: 7, seq }
    }

    fn message(topic: &str, qos: QoS, seq: u64, from: &str) -> Message {
        let mut m = Message::new(
            TopicName::try_from(topic).unwrap(),
            bytes::Bytes::from_static(b"m"),
            qos,
            true,
            Origin::client(None, Arc::from(from)),
        );
        m.id = Some(id(seq));
        m
    }

    fn queued(entry: u64, seq: u64) -> Change {
        let delivery = Delivery {
            message: Arc::new(message("t", QoS::AtLeastOnce, seq, "p")),
            qos: QoS::AtLeastOnce,
            retain: false,
            subscription_ids: SubscriptionIds::new(),
            shared: None,
        };
        Change::Queued { client_id: Arc::from("c"), entry, delivery }
    }

    #[test]
    fn the_checkpoint_lists_what_finished_since_it_and_moves_past_what_was_forgotten() {
        let mut d = Delivered::default();
        let done = |entry| Change::Done { client_id: Arc::from("c"), entry };
        d.learn(&queued(1, 10), 1_000);
        d.learn(&queued(2, 11), 1_000);
        assert!(d.has("c", id(10)) && !d.has("c", id(12)));
        d.learn(&done(1), 2_000);
        d.learn(&done(2), 20_000);
        assert_eq!(d.checkpoint("c", 25_000), (15_000, vec![id(11)]), "10 finished before the window");
        assert!(d.has("c", id(11)) && !d.has("c", id(10)));
        for entry in 0..MAX_FINISHED as u64 + 2 {
            d.learn(&queued(100 + entry, 100 + entry), 21_000);
            d.learn(&done(100 + entry), 21_000 + entry);
        }
        let (checkpoint, ids) = d.checkpoint("c", 25_000);
        assert_eq!(ids.len(), MAX_FINISHED);
        assert_eq!(checkpoint, 21_001, "the newest forgotten one's finish");
        assert_eq!(ids[0], id(102));
        d.learn(&Change::SessionEnded { client_id: Arc::from("c") }, 30_000);
        assert_eq!(d.checkpoint("c", 30_000), (20_000, vec![]));
    }

    fn options(qos: QoS, no_local: bool, rap: bool, sid: Option<u32>) -> SubscribeOptions {
        SubscribeOptions {
            qos,
            no_local,
            retain_as_published: rap,
            retain_handling: RetainHandling::SendAtSubscribe,
            subscription_id: sid,
        }
    }

    #[test]
    fn a_stored_message_gets_the_delivery_the_router_would_give_and_once() {
        let plain = |f: &str| SubscriptionFilter::try_from(f).unwrap();
        let subs = vec![
            (plain("a/#"), options(QoS::AtLeastOnce, false, false, Some(1))),
            (plain("a/b"), options(QoS::ExactlyOnce, true, true, Some(2))),
            (plain("q/#"), options(QoS::AtMostOnce, false, false, None)),
            (plain("$share/g/s/#"), options(QoS::ExactlyOnce, false, false, None)),
        ];
        let mut r = Replay::new(Arc::from("c"), &subs, [id(1)]);
        let now = Instant::now();
        assert!(matches!(r.delivery(message("a/b", QoS::ExactlyOnce, 1, "p"), now), Replayed::Had));
        let Replayed::Deliver(d) = r.delivery(message("a/b", QoS::ExactlyOnce, 2, "p"), now) else {
            panic!()
        };
        assert_eq!((d.qos, d.retain, d.subscription_ids.as_slice()), (QoS::ExactlyOnce, true, &[1, 2][..]));
        assert!(matches!(r.delivery(message("a/b", QoS::ExactlyOnce, 2, "p"), now), Replayed::Had));
        let Replayed::Deliver(d) = r.delivery(message("a/c", QoS::ExactlyOnce, 3, "p"), now) else {
            panic!()
        };
        assert_eq!((d.qos, d.retain), (QoS::AtLeastOnce, false), "granted 1, not retained as published");
        let Replayed::Deliver(d) = r.delivery(message("a/b", QoS::ExactlyOnce, 4, "c"), now) else {
            panic!()
        };
        assert_eq!(d.subscription_ids.as_slice(), [1, 2], "no-local only if every match asks for it");
        let only_no_local = vec![(plain("a/b"), options(QoS::ExactlyOnce, true, false, None))];
        let mut own = Replay::new(Arc::from("c"), &only_no_local, []);
        assert!(matches!(own.delivery(message("a/b", QoS::AtLeastOnce, 5, "c"), now), Replayed::Unmatched));
        assert!(matches!(r.delivery(message("q/x", QoS::ExactlyOnce, 6, "p"), now), Replayed::Unmatched));
        assert!(matches!(r.delivery(message("s/x", QoS::ExactlyOnce, 7, "p"), now), Replayed::Unmatched));
        let mut expired = message("a/x", QoS::AtLeastOnce, 8, "p");
        expired.expires_at = Some(now - Duration::from_millis(1));
        assert!(matches!(r.delivery(expired, now), Replayed::Expired));
        assert!(!r.wants_dollar_topics());
    }
}
