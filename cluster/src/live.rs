//! Live messages between nodes over core NATS.
//!
//! - Out: [`Forwarder`] is the broker's [`Forward`] seam. It is called once per message
//!   published on this node, after local delivery, and queues it (bounded, drops counted); one
//!   task sends the queue to NATS on one connection, in order, numbering the messages, so
//!   order is kept per publisher and topic, as NATS keeps it per connection.
//! - In: one NATS subscription per subject the [`InterestTable`] wants. A task per
//!   subscription feeds one bounded queue; the receiving task drops this node's own messages
//!   (none arrive: the connection sets `no_echo`), drops the later copies of a message that
//!   several overlapping subscriptions brought ([`Dedupe`]), and routes the rest through the
//!   local router once, which applies every local match, the subscribers' ACLs, no-local
//!   and QoS itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::broker::{Broker, Forward};
use mesgd_core::cluster::dedupe::Dedupe;
use mesgd_core::cluster::subject::{LIVE, subject_as_filter};
use mesgd_core::model::{Message, Origin, QoS};
use mesgd_core::topic::{TopicFilter, TopicName};
use mesgd_core::trie::SubscriptionTrie;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::interest::{GroupTarget, InterestTable, QueueSub, Synced};
use crate::stats::ClusterStats;
use crate::wire::{self, ExpiryAs};

/// How long the duplicate filter waits for the other copies of a message.
const DEDUPE_TTL: Duration = Duration::from_secs(5);
/// How long the interest task (and the rooms' task) waits before it tries a refused NATS
/// subscription, or a confirmation that failed, again.
pub(crate) const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(250);
/// How many messages with copies still expected the duplicate filter remembers.
const DEDUPE_CAPACITY: usize = 65_536;

/// Whether a topic stays on its node: `$SYS/...` holds each node's own statistics.
pub(crate) fn node_local(topic: &mesgd_core::topic::TopicName) -> bool {
    let t = topic.as_str();
    t == "$SYS" || t.starts_with("$SYS/")
}

/// The broker's cluster seam: queues every message published here for the other nodes.
#[derive(Debug)]
pub(crate) struct Forwarder {
    pub(crate) live: mpsc::Sender<Arc<Message>>,
    pub(crate) retained: mpsc::Sender<Arc<Message>>,
    pub(crate) stats: Arc<ClusterStats>,
}

impl Forward for Forwarder {
    fn forward(&self, message: &Arc<Message>, keep_retained: bool) {
        if node_local(&message.topic) {
            return;
        }
        if self.live.try_send(message.clone()).is_err() {
            ClusterStats::add(&self.stats.forward_queue_full, 1);
        }
        if message.retain && keep_retained && self.retained.try_send(message.clone()).is_err() {
            ClusterStats::add(&self.stats.retained_queue_full, 1);
        }
    }

    fn clear_retained(&self, topic: &TopicName) {
        if node_local(topic) {
            return;
        }
        // The stream's delete: an empty retained message, as a client's clear is stored.
        let clear = Message::new(topic.clone(), Bytes::new(), QoS::AtMostOnce, true, Origin::BROKER);
        if self.retained.try_send(Arc::new(clear)).is_err() {
            ClusterStats::add(&self.stats.retained_queue_full, 1);
        }
    }
}

/// Who this node is on the wire.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub(crate) node: Arc<str>,
    pub(crate) instance: u64,
}

/// Sends the queued messages to NATS, in order, on one connection.
pub(crate) async fn send_loop(
    client: Client,
    broker: Arc<Broker>,
    me: Identity,
    mut queue: mpsc::Receiver<Arc<Message>>,
    stats: Arc<ClusterStats>,
) {
    let mut seq = 0u64;
    while let Some(message) = queue.recv().await {
        let Ok(subject) = LIVE.topic(&message.topic) else {
            ClusterStats::add(&stats.unmappable_topics, 1);
            continue;
        };
        seq += 1;
        let now = tokio::time::Instant::now().into_std();
        let headers = wire::encode(&message, &me.node, (me.instance, seq), ExpiryAs::Remaining(now), |i| {
            broker.wall_time(i)
        });
        match client.publish_with_headers(subject, headers, message.payload.clone()).await {
            Ok(()) => ClusterStats::add(&stats.forwarded, 1),
            Err(e) => {
                ClusterStats::add(&stats.publish_errors, 1);
                tracing::warn!(error = %e, "cluster: publish to NATS failed");
            }
        }
    }
}

/// One active NATS subscription.
struct Active {
    id: u64,
    forwarding: Forwarding,
}

/// A task that hands what one NATS subscription brings to a receiving task.
struct Forwarding {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Forwarding {
    fn spawn(
        mut subscriber: async_nats::Subscriber,
        mut forward: impl FnMut(async_nats::Message) + Send + 'static,
    ) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    next = subscriber.next() => match next {
                        Some(m) => forward(m),
                        None => return,
                    },
                    _ = &mut stopped => {
                        let _ = subscriber.unsubscribe().await;
                        return;
                    }
                }
            }
        });
        Forwarding { stop, task }
    }

    /// Unsubscribes and waits (bounded) until the UNSUB is queued on the connection, so that a
    /// [`server_caught_up`] after it confirms the server has it.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(2), self.task).await;
    }
}

/// Whether the server has processed everything `client` sent before this call (its SUBs and
/// UNSUBs): a request to a fresh inbox, which nobody subscribes to, is answered "no
/// responders" by the server itself, and a server reads one connection in order. A flush only
/// writes the socket: the server may still be reading, under load, when a message from
/// another node's connection reaches it (a removed queue subscription then still took a
/// message, and `interest_synced` returned before a new subscription was in place).
pub(crate) async fn server_caught_up(client: &Client) -> bool {
    match client.request(client.new_inbox(), bytes::Bytes::new()).await {
        Ok(_) => true,
        Err(e) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => true,
        Err(e) => {
            tracing::warn!(error = %e, "cluster: NATS did not answer after a subscription change");
            false
        }
    }
}

/// The receiving side: keeps NATS subscriptions equal to the interest table, and routes what
/// they bring.
pub(crate) struct Receiver {
    pub(crate) client: Client,
    pub(crate) broker: Arc<Broker>,
    pub(crate) me: Identity,
    pub(crate) interest: Arc<InterestTable>,
    pub(crate) stats: Arc<ClusterStats>,
    pub(crate) capacity: usize,
    /// The interest generation NATS has caught up with (its server answered after the last SUB
    /// and UNSUB: [`server_caught_up`]), for whoever must know that
    /// a subscription made here now receives other nodes' messages.
    pub(crate) synced: watch::Sender<u64>,
}

impl Receiver {
    pub(crate) async fn run(self) {
        let (tx, mut rx) = mpsc::channel::<(u64, async_nats::Message)>(self.capacity);
        let mut active: HashMap<String, Active> = HashMap::new();
        let mut ids: HashSet<u64> = HashSet::new();
        // The equivalent MQTT filter of every active subject, with its subscription id: how
        // many of them match a message is how many copies of it NATS sends this connection.
        let mut trie: SubscriptionTrie<u64> = SubscriptionTrie::new();
        let mut next_id = 0u64;
        let mut dedupe = Dedupe::new(DEDUPE_CAPACITY, DEDUPE_TTL);
        loop {
            // A change is applied before more messages are read, so the trie is current.
            let changed = self.interest.changed.notified();
            if self.interest.generation() != *self.synced.borrow() {
                let complete = self.reconcile(&mut active, &mut trie, &mut next_id, &tx).await;
                ids = active.values().map(|a| a.id).collect();
                if !complete {
                    // NATS refused a subscription (disconnected): try again shortly, reading
                    // what the others bring meanwhile.
                    let retry = tokio::time::sleep(RESUBSCRIBE_AFTER);
                    tokio::pin!(retry);
                    loop {
                        tokio::select! {
                            () = &mut retry => break,
                            incoming = rx.recv() => {
                                let Some((id, message)) = incoming else { return };
                                if ids.contains(&id) {
                                    self.handle(message, &trie, &mut dedupe);
                                }
                            }
                        }
                    }
                }
                continue;
            }
            tokio::select! {
                () = changed => {}
                incoming = rx.recv() => {
                    let Some((id, message)) = incoming else { return };
                    if !ids.contains(&id) {
                        // From a subscription removed since: the copies that matter come
                        // through the subscriptions still active.
                        continue;
                    }
                    self.handle(message, &trie, &mut dedupe);
                }
            }
        }
    }

    /// Subscribes and unsubscribes until NATS has what the interest table wants; returns
    /// whether it got there (else the generation is not marked synced, and it is tried again).
    async fn reconcile(
        &self,
        active: &mut HashMap<String, Active>,
        trie: &mut SubscriptionTrie<u64>,
        next_id: &mut u64,
        tx: &mpsc::Sender<(u64, async_nats::Message)>,
    ) -> bool {
        let mut complete = true;
        let (generation, wanted) = self.interest.snapshot();
        let wanted: HashSet<String> = wanted.into_iter().collect();
        let gone: Vec<String> = active.keys().filter(|s| !wanted.contains(*s)).cloned().collect();
        for subject in gone {
            if let Some(a) = active.remove(&subject) {
                a.forwarding.stop().await;
            }
            if let Some(filter) = subject_as_filter(&LIVE, &subject) {
                trie.remove_if(&filter, |_| true);
            }
        }
        for subject in wanted {
            if active.contains_key(&subject) {
                continue;
            }
            let subscriber = match self.client.subscribe(subject.clone()).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(subject, error = %e, "cluster: NATS subscribe failed");
                    complete = false;
                    continue;
                }
            };
            *next_id += 1;
            let id = *next_id;
            let tx = tx.clone();
            let stats = self.stats.clone();
            let forwarding = Forwarding::spawn(subscriber, move |m| {
                if let Err(mpsc::error::TrySendError::Full((_, _))) = tx.try_send((id, m)) {
                    ClusterStats::add(&stats.receive_queue_full, 1);
                }
            });
            if let Some(filter) = subject_as_filter(&LIVE, &subject) {
                *trie.entry(&filter) = id;
            }
            active.insert(subject, Active { id, forwarding });
        }
        self.stats.subscriptions.store(active.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if !server_caught_up(&self.client).await {
            complete = false;
        }
        if complete {
            self.synced.send_replace(generation);
            self.interest.mark_synced(Synced::Plain, generation);
        }
        complete
    }

    fn handle(&self, m: async_nats::Message, trie: &SubscriptionTrie<u64>, dedupe: &mut Dedupe) {
        let Some(headers) = &m.headers else {
            ClusterStats::add(&self.stats.decode_errors, 1);
            return;
        };
        let sender = match wire::sender(headers) {
            Ok(s) => s,
            Err(e) => {
                ClusterStats::add(&self.stats.decode_errors, 1);
                tracing::debug!(error = %e, "cluster: unreadable message");
                return;
            }
        };
        if sender.id.0 == self.me.instance {
            ClusterStats::add(&self.stats.echoes_dropped, 1);
            return;
        }
        let topic = match LIVE.parse_topic(m.subject.as_str()) {
            Ok(t) => t,
            Err(e) => {
                ClusterStats::add(&self.stats.decode_errors, 1);
                tracing::debug!(error = %e, "cluster: message on a foreign subject");
                return;
            }
        };
        let mut copies = 0;
        trie.for_each_match(&topic, |_| copies += 1);
        let now = tokio::time::Instant::now().into_std();
        let forgotten = dedupe.forgotten;
        let deliver = dedupe.offer(sender.id, copies, now);
        ClusterStats::add(&self.stats.dedupe_forgotten, dedupe.forgotten - forgotten);
        if !deliver {
            ClusterStats::add(&self.stats.duplicates_dropped, 1);
            return;
        }
        let broker = &self.broker;
        match wire::decode(topic, m.payload, headers, &sender, now, |at| broker.instant_of(at)) {
            Ok(message) => {
                ClusterStats::add(&self.stats.received, 1);
                broker.publish_remote(message);
            }
            Err(e) => {
                ClusterStats::add(&self.stats.decode_errors, 1);
                tracing::debug!(error = %e, "cluster: unreadable message");
            }
        }
    }
}

/// The shared-subscription side: one NATS queue subscription per shared group and subject
/// while the group has an online member here, on a connection of its own (the main one sets
/// `no_echo`, and a queue group must be able to pick this node for its own publishes). Each
/// message goes to one member of the one group its queue subscription stands for.
pub(crate) struct GroupReceiver {
    pub(crate) client: Client,
    pub(crate) broker: Arc<Broker>,
    pub(crate) interest: Arc<InterestTable>,
    pub(crate) stats: Arc<ClusterStats>,
    pub(crate) capacity: usize,
    pub(crate) synced: watch::Sender<u64>,
}

impl GroupReceiver {
    pub(crate) async fn run(self) {
        type Incoming = (Arc<str>, TopicFilter, async_nats::Message);
        let (tx, mut rx) = mpsc::channel::<Incoming>(self.capacity);
        let mut active: HashMap<QueueSub, Forwarding> = HashMap::new();
        loop {
            let changed = self.interest.changed_groups.notified();
            if self.interest.generation() != *self.synced.borrow() {
                let (generation, wanted) = self.interest.group_snapshot();
                let wanted: HashMap<QueueSub, GroupTarget> = wanted.into_iter().collect();
                let gone: Vec<QueueSub> =
                    active.keys().filter(|k| !wanted.contains_key(*k)).cloned().collect();
                for key in gone {
                    if let Some(f) = active.remove(&key) {
                        f.stop().await;
                    }
                }
                let mut complete = true;
                for (key, (group, filter)) in wanted {
                    if active.contains_key(&key) {
                        continue;
                    }
                    let (subject, queue) = key.clone();
                    let subscriber = match self.client.queue_subscribe(subject, queue).await {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::warn!(error = %e, "cluster: NATS queue subscribe failed");
                            complete = false;
                            continue;
                        }
                    };
                    let tx = tx.clone();
                    let stats = self.stats.clone();
                    let forwarding = Forwarding::spawn(subscriber, move |m| {
                        if tx.try_send((group.clone(), filter.clone(), m)).is_err() {
                            ClusterStats::add(&stats.receive_queue_full, 1);
                        }
                    });
                    active.insert(key, forwarding);
                }
                complete &= server_caught_up(&self.client).await;
                if complete {
                    self.synced.send_replace(generation);
                    self.interest.mark_synced(Synced::Groups, generation);
                } else {
                    tokio::time::sleep(RESUBSCRIBE_AFTER).await;
                }
                continue;
            }
            tokio::select! {
                () = changed => {}
                incoming = rx.recv() => {
                    let Some((group, filter, m)) = incoming else { return };
                    self.handle(m, &group, &filter);
                }
            }
        }
    }

    fn handle(&self, m: async_nats::Message, group: &str, filter: &TopicFilter) {
        let async_nats::Message { subject, payload, headers, .. } = m;
        let decoded = LIVE.parse_topic(subject.as_str()).map_err(wire::WireError::from).and_then(|topic| {
            let headers = headers.as_ref().ok_or(wire::WireError::Missing("Mesgd-Node"))?;
            let sender = wire::sender(headers)?;
            let now = tokio::time::Instant::now().into_std();
            wire::decode(topic, payload, headers, &sender, now, |at| self.broker.instant_of(at))
        });
        match decoded {
            Ok(message) => {
                ClusterStats::add(&self.stats.shared_received, 1);
                self.broker.publish_remote_shared(message, group, filter);
            }
            Err(e) => {
                ClusterStats::add(&self.stats.decode_errors, 1);
                tracing::debug!(error = %e, "cluster: unreadable shared message");
            }
        }
    }
}
