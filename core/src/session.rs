//! Sessions: what the broker keeps for a client between (and during) its connections.
//!
//! A session is independent of any wire protocol: it holds the client's subscriptions, the queue
//! of messages waiting to be sent, the outgoing in-flight window (QoS 1 and 2 messages sent but
//! not yet acknowledged, with their packet ids), the incoming QoS 2 ids awaiting release, and the
//! receiver-side ACL. Front ends drive it through methods; the router pushes messages into it.
//!
//! All of it sits behind one `std::sync::Mutex`, held for a few hundred nanoseconds and never
//! across an `.await`: the publishing task pushes, the owning connection task drains, and the
//! session outlives both. The connection registers its task waker here, so a push wakes exactly
//! the task that will write the message, without a channel in between.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use smallvec::SmallVec;
use tokio::sync::Notify;

use crate::acl::{Access, Acl};
use crate::journal::{Change, Journal};
use crate::message::{Message, SessionId};
use crate::mqtt::{QoS, ReasonCode, RetainHandling};
use crate::topic::{SubscriptionFilter, TopicFilter};

/// The subscription identifiers that travel with one delivery; almost always zero or one.
pub type SubscriptionIds = SmallVec<[u32; 1]>;

/// The options of one subscription, as the session and router keep them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// The maximum QoS the subscriber accepts.
    pub qos: QoS,
    /// MQTT 5: do not deliver the subscriber's own publishes back to it.
    pub no_local: bool,
    /// MQTT 5: keep the publisher's retain flag instead of clearing it.
    pub retain_as_published: bool,
    /// MQTT 5: when to send retained messages at subscribe time.
    pub retain_handling: RetainHandling,
    /// MQTT 5: the identifier to send with every matching message.
    pub subscription_id: Option<u32>,
}

impl SubscribeOptions {
    /// Plain options: the QoS, everything else at its MQTT 3.1.1 meaning.
    pub fn with_qos(qos: QoS) -> Self {
        SubscribeOptions {
            qos,
            no_local: false,
            retain_as_published: false,
            retain_handling: RetainHandling::SendAtSubscribe,
            subscription_id: None,
        }
    }
}

/// A shared-subscription group a delivery was chosen through, so that it can be handed to
/// another member if this one leaves before acknowledging it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedRoute {
    /// The group name.
    pub group: Arc<str>,
    /// The full subscription text (`$share/{group}/{filter}`).
    pub subscription: Arc<str>,
}

/// One message on its way to one subscriber.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The message, shared with every other subscriber.
    pub message: Arc<Message>,
    /// The QoS for this subscriber: `min(published, granted)`.
    pub qos: QoS,
    /// The retain flag to send.
    pub retain: bool,
    /// Subscription identifiers of every matching subscription (MQTT 5).
    pub subscription_ids: SubscriptionIds,
    /// Set when the message came through a shared subscription.
    pub shared: Option<SharedRoute>,
}

impl Delivery {
    fn weight(&self) -> usize {
        self.message.weight()
    }
}

/// Where an outgoing QoS 1/2 message stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboundState {
    /// QoS 1 PUBLISH sent, waiting for PUBACK.
    AwaitPubAck,
    /// QoS 2 PUBLISH sent, waiting for PUBREC.
    AwaitPubRec,
    /// PUBREL sent, waiting for PUBCOMP. The message itself is delivered.
    AwaitPubComp,
}

#[derive(Debug)]
struct Inflight {
    delivery: Delivery,
    state: OutboundState,
    /// Send order, so a resend after reconnect keeps the original order.
    seq: u64,
    /// The session-local entry number the journal knows it by.
    entry: u64,
}

/// The outgoing in-flight window, in the order messages were sent.
///
/// A deque rather than a map: clients acknowledge almost always in order, so the entry to find
/// is at the front, and the window is small (`max_inflight`, 32 by default). This is on the
/// path of every QoS 1/2 delivery and measurably faster than a hash map or a B-tree here.
#[derive(Debug, Default)]
struct InflightWindow(VecDeque<(u16, Inflight)>);

impl InflightWindow {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn position(&self, packet_id: u16) -> Option<usize> {
        self.0.iter().position(|(id, _)| *id == packet_id)
    }

    fn contains_key(&self, packet_id: &u16) -> bool {
        self.position(*packet_id).is_some()
    }

    fn get(&self, packet_id: &u16) -> Option<&Inflight> {
        self.position(*packet_id).map(|i| &self.0[i].1)
    }

    fn get_mut(&mut self, packet_id: &u16) -> Option<&mut Inflight> {
        self.position(*packet_id).map(|i| &mut self.0[i].1)
    }

    fn insert(&mut self, packet_id: u16, inflight: Inflight) {
        self.0.push_back((packet_id, inflight));
    }

    fn remove(&mut self, packet_id: &u16) -> Option<Inflight> {
        let i = self.position(*packet_id)?;
        self.0.remove(i).map(|(_, f)| f)
    }

    fn iter(&self) -> impl Iterator<Item = (&u16, &Inflight)> {
        self.0.iter().map(|(id, f)| (id, f))
    }

    fn into_values(self) -> impl Iterator<Item = Inflight> {
        self.0.into_iter().map(|(_, f)| f)
    }
}

/// A delivery waiting in the queue, with its journal entry number.
#[derive(Debug)]
struct Queued {
    entry: u64,
    delivery: Delivery,
}

/// What the connection must write next.
#[derive(Debug)]
pub enum Outgoing {
    /// A PUBLISH; `packet_id` is `Some` for QoS 1 and 2.
    Publish {
        /// The delivery.
        delivery: Delivery,
        /// The packet id, for QoS 1 and 2.
        packet_id: Option<u16>,
        /// Set on a resend.
        dup: bool,
    },
    /// A PUBREL (resent after a reconnect).
    PubRel {
        /// The packet id.
        packet_id: u16,
    },
}

/// How long a session lives after its connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionExpiry {
    /// Ends with the connection (clean session / expiry interval 0).
    OnDisconnect,
    /// Kept for this long after the connection ends.
    After(Duration),
    /// Kept until the client cleans it (MQTT 3.x persistent session, v5 0xFFFFFFFF).
    Never,
}

/// Queue limits for one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Messages waiting to be sent, at most.
    pub max_messages: usize,
    /// Bytes (topic + payload) waiting to be sent, at most.
    pub max_bytes: usize,
    /// Whether QoS 0 messages are queued while the client is offline.
    pub queue_qos0_offline: bool,
}

/// An incoming QoS 2 message awaiting PUBREL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InboundQos2 {
    /// The digest of its message; `None` if it was stored without one.
    digest: Option<u64>,
    /// Whether the attached connection has sent (or resent) it. Only those count against the
    /// receive maximum: ids restored from disk that the client never mentions again are stale,
    /// and must not lock the client out.
    live: bool,
}

/// Why a connection is being closed from outside its own task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kick {
    /// Another connection took the session over (MQTT 5 reason 0x8E).
    TakenOver,
    /// The broker is shutting down (0x8B).
    ShuttingDown,
    /// The identity was revoked or its rules forbid it (0x87 / 0x98).
    Administrative(ReasonCode),
}

/// What happened to a message pushed into a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued for sending.
    Queued,
    /// Queued, and an older QoS 0 message was dropped to make room.
    QueuedDroppingOldest,
    /// Not queued: the receiver may not read the topic, or it is its own message under no-local.
    Filtered,
    /// Not queued: the queue is full of QoS 1/2 messages, or it is QoS 0 for an offline client.
    Dropped,
}

/// A session's record of one subscription (kept for unsubscribe, resubscribe and persistence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionRecord {
    /// The parsed filter, shared or plain.
    pub filter: SubscriptionFilter,
    /// Its options.
    pub options: SubscribeOptions,
}

#[derive(Debug)]
struct State {
    queue: VecDeque<Queued>,
    /// The next journal entry number.
    next_entry: u64,
    /// Where durable changes go; `None` for a session that ends with its connection (or when
    /// the broker keeps no state).
    journal: Option<Arc<dyn Journal>>,
    queued_bytes: usize,
    // B-trees rather than hash maps: empty, they take half the space, and every idle
    // connection has a session.
    inflight: InflightWindow,
    send_seq: u64,
    next_packet_id: u16,
    /// Incoming QoS 2 packet ids awaiting PUBREL.
    incoming_qos2: BTreeMap<u16, InboundQos2>,
    /// How many entries of `incoming_qos2` are `true`.
    incoming_qos2_live: usize,
    subscriptions: BTreeMap<Arc<str>, SubscriptionRecord>,
    acl: Acl,
    limits: QueueLimits,
    expiry: SessionExpiry,
    /// The generation of the attached connection, if one is attached.
    connection: Option<u64>,
    disconnected_at: Option<Instant>,
    waker: Option<Waker>,
    kick: Option<Kick>,
    dropped: u64,
    ended: bool,
}

/// A client's session.
#[derive(Debug)]
pub struct Session {
    id: SessionId,
    client_id: Arc<str>,
    online: AtomicBool,
    state: Mutex<State>,
}

/// Woken whenever any session detaches; waiters re-check their own session. One for all
/// sessions rather than one each: takeovers are rare, sessions are many, and every idle
/// connection has one.
static DETACHED: Notify = Notify::const_new();

/// Locks a mutex, recovering the data if a panicking thread poisoned it: session state stays
/// consistent between statements, so a panic elsewhere must not take every client down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Session {
    /// A new, empty, offline session.
    pub fn new(id: SessionId, client_id: Arc<str>, expiry: SessionExpiry, limits: QueueLimits) -> Self {
        Session {
            id,
            client_id,
            online: AtomicBool::new(false),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                next_entry: 1,
                journal: None,
                queued_bytes: 0,
                inflight: InflightWindow::default(),
                send_seq: 0,
                next_packet_id: 1,
                incoming_qos2: BTreeMap::new(),
                incoming_qos2_live: 0,
                subscriptions: BTreeMap::new(),
                acl: Acl::unrestricted(),
                limits,
                expiry,
                connection: None,
                disconnected_at: None,
                waker: None,
                kick: None,
                dropped: 0,
                ended: false,
            }),
        }
    }

    /// The process-unique id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The client id.
    pub fn client_id(&self) -> &Arc<str> {
        &self.client_id
    }

    /// Whether a connection is attached.
    pub fn is_online(&self) -> bool {
        self.online.load(Ordering::Acquire)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    // ----------------------------------------------------------------- connection lifecycle

    /// Attaches connection `generation`, with the receiver ACL of its identity and its session
    /// expiry. Clears any pending kick. Messages queued while the session was offline were checked
    /// against the previous connection's rules; those the new ACL hides are dropped here.
    pub fn attach(&self, generation: u64, acl: Acl, expiry: SessionExpiry) {
        let mut s = self.state();
        s.connection = Some(generation);
        s.replace_acl(acl, &self.client_id);
        // A new connection has sent none of the pending ids yet: it resends those it still
        // has in flight (with DUP, or as PUBREL), and only those count against its window.
        s.incoming_qos2.values_mut().for_each(|i| i.live = false);
        s.incoming_qos2_live = 0;
        s.expiry = expiry;
        s.kick = None;
        s.waker = None;
        s.disconnected_at = None;
        self.online.store(true, Ordering::Release);
    }

    /// Detaches connection `generation`; returns false (and changes nothing) if another
    /// connection has attached since. Wakes whoever waits in [`Session::wait_detached`].
    pub fn detach(&self, generation: u64, now: Instant) -> bool {
        let mut s = self.state();
        if s.connection != Some(generation) {
            return false;
        }
        s.connection = None;
        s.waker = None;
        s.disconnected_at = Some(now);
        self.online.store(false, Ordering::Release);
        drop(s);
        DETACHED.notify_waiters();
        true
    }

    /// Waits until no connection is attached (after a [`Session::kick`]).
    pub async fn wait_detached(&self) {
        loop {
            let notified = DETACHED.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.is_online() {
                return;
            }
            notified.await;
        }
    }

    /// Asks the attached connection to close, and wakes it.
    pub fn kick(&self, why: Kick) {
        let mut s = self.state();
        if s.connection.is_some() {
            s.kick = Some(why);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }

    /// The pending kick for connection `generation`, if any.
    pub fn take_kick(&self, generation: u64) -> Option<Kick> {
        let mut s = self.state();
        if s.connection == Some(generation) { s.kick.take() } else { Some(Kick::TakenOver) }
    }

    /// Replaces the receiver ACL (after a live identity change), and drops queued messages the
    /// new rules hide: they were checked against the old rules when they were queued. (Messages
    /// already sent are past the point of delivery.)
    pub fn set_acl(&self, acl: Acl) {
        self.state().replace_acl(acl, &self.client_id);
    }

    /// The session expiry.
    pub fn expiry(&self) -> SessionExpiry {
        self.state().expiry
    }

    /// Changes the session expiry (MQTT 5 DISCONNECT may do so).
    pub fn set_expiry(&self, expiry: SessionExpiry) {
        self.state().expiry = expiry;
    }

    /// When the session expires, if it is offline and expires at all.
    pub fn expires_at(&self) -> Option<Instant> {
        let s = self.state();
        match (s.connection, s.disconnected_at, s.expiry) {
            (None, Some(at), SessionExpiry::After(d)) => Some(at + d),
            (None, Some(at), SessionExpiry::OnDisconnect) => Some(at),
            _ => None,
        }
    }

    /// Marks the session as ended: it accepts no more messages.
    pub fn end(&self) -> Vec<Delivery> {
        let mut s = self.state();
        s.ended = true;
        s.journal = None;
        s.queued_bytes = 0;
        let mut left: Vec<Delivery> = s.queue.drain(..).map(|q| q.delivery).collect();
        left.extend(std::mem::take(&mut s.inflight).into_values().map(|f| f.delivery));
        left
    }

    /// Whether [`Session::end`] was called.
    pub fn is_ended(&self) -> bool {
        self.state().ended
    }

    // ----------------------------------------------------------------- subscriptions

    /// Records a subscription; returns the previous record for the same text, if any.
    pub fn add_subscription(&self, text: Arc<str>, record: SubscriptionRecord) -> Option<SubscriptionRecord> {
        self.state().subscriptions.insert(text, record)
    }

    /// Forgets a subscription.
    pub fn remove_subscription(&self, text: &str) -> Option<SubscriptionRecord> {
        self.state().subscriptions.remove(text)
    }

    /// Every subscription, for unsubscribing on session end and for persistence.
    pub fn subscriptions(&self) -> Vec<(Arc<str>, SubscriptionRecord)> {
        self.state().subscriptions.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// How many subscriptions the session has.
    pub fn subscription_count(&self) -> usize {
        self.state().subscriptions.len()
    }

    // ----------------------------------------------------------------- the outbound path

    /// Pushes a delivery, applying the receiver's ACL, no-local and the queue limits, and wakes
    /// the connection. Called by the router on the publisher's task.
    pub fn enqueue(&self, delivery: Delivery, no_local: bool) -> Enqueued {
        self.enqueue_journaled(delivery, no_local, 0).0
    }

    /// The [`Acl::stamp`] under which every message through a subscription to `filter` is
    /// readable, or 0 if each message must be checked. The router keeps it with the
    /// subscription and hands it back to [`Session::enqueue_journaled`], which skips the check
    /// while the session's ACL still has that stamp.
    pub fn readable_stamp(&self, filter: &TopicFilter) -> u64 {
        let s = self.state();
        if s.acl.allows_every(filter) { s.acl.stamp() } else { 0 }
    }

    /// As [`Session::enqueue`], also returning the journal sequence number of the change, if
    /// the delivery was journalled (a QoS 1/2 message for a persistent session): its sender's
    /// acknowledgement must wait for it under durability `always`.
    ///
    /// `readable` is the subscription's [`Session::readable_stamp`] (0 if unknown).
    pub fn enqueue_journaled(
        &self,
        delivery: Delivery,
        no_local: bool,
        readable: u64,
    ) -> (Enqueued, Option<u64>) {
        if no_local && delivery.message.origin.session == Some(self.id) {
            return (Enqueued::Filtered, None);
        }
        let mut s = self.state();
        let checked = readable != 0 && readable == s.acl.stamp();
        if s.ended || !(checked || s.acl.allows(Access::Read, &delivery.message.topic)) {
            return (Enqueued::Filtered, None);
        }
        if delivery.qos == QoS::AtMostOnce && s.connection.is_none() && !s.limits.queue_qos0_offline {
            s.dropped += 1;
            return (Enqueued::Dropped, None);
        }
        let weight = delivery.weight();
        let mut outcome = Enqueued::Queued;
        while s.queue.len() >= s.limits.max_messages
            || (!s.queue.is_empty() && s.queued_bytes + weight > s.limits.max_bytes)
        {
            // QoS 0 messages are never journalled, so dropping one needs no record.
            match s.queue.iter().position(|q| q.delivery.qos == QoS::AtMostOnce) {
                Some(oldest_qos0) => {
                    let gone = s.queue.remove(oldest_qos0).map_or(0, |q| q.delivery.weight());
                    s.queued_bytes -= gone;
                    s.dropped += 1;
                    outcome = Enqueued::QueuedDroppingOldest;
                }
                None => {
                    s.dropped += 1;
                    return (Enqueued::Dropped, None);
                }
            }
        }
        let entry = s.next_entry;
        s.next_entry += 1;
        let seq = if delivery.qos == QoS::AtMostOnce {
            None
        } else {
            s.record(|| Change::Queued {
                client_id: self.client_id.clone(),
                entry,
                delivery: delivery.clone(),
            })
        };
        s.queued_bytes += weight;
        s.queue.push_back(Queued { entry, delivery });
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        (outcome, seq)
    }

    /// Moves queued messages into `out` for connection `generation`, allocating packet ids for
    /// QoS 1/2 while fewer than `window` are in flight, skipping expired messages and messages
    /// the current ACL no longer allows. Registers `waker` to be woken by the next push. Stops
    /// at `max_batch` messages so one busy session cannot starve its own socket writes.
    pub fn drain(
        &self,
        generation: u64,
        window: usize,
        max_batch: usize,
        now: Instant,
        waker: &Waker,
        out: &mut Vec<Outgoing>,
    ) -> DrainStats {
        let mut s = self.state();
        let mut stats = DrainStats::default();
        if s.connection != Some(generation) {
            return stats;
        }
        match &s.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => s.waker = Some(waker.clone()),
        }
        while stats.taken < max_batch {
            let Some(front) = s.queue.front() else { break };
            if front.delivery.qos != QoS::AtMostOnce && s.inflight.len() >= window {
                break;
            }
            let Some(Queued { entry, delivery }) = s.queue.pop_front() else { break };
            s.queued_bytes -= delivery.weight();
            // The receiver's ACL was checked when the message was queued, and `set_acl` drops
            // what new rules hide, so only expiry is left to check here.
            if delivery.message.is_expired(now) {
                stats.expired += 1;
                if delivery.qos != QoS::AtMostOnce {
                    s.record(|| Change::Done { client_id: self.client_id.clone(), entry });
                }
                continue;
            }
            stats.taken += 1;
            if delivery.qos == QoS::AtMostOnce {
                out.push(Outgoing::Publish { delivery, packet_id: None, dup: false });
                continue;
            }
            let packet_id = s.allocate_packet_id();
            let state = if delivery.qos == QoS::AtLeastOnce {
                OutboundState::AwaitPubAck
            } else {
                OutboundState::AwaitPubRec
            };
            let recorded =
                s.record(|| Change::InFlight { client_id: self.client_id.clone(), entry, packet_id });
            // A QoS 2 message may go out only once its packet id is on disk: resent after a
            // crash with another id, the client would take it for a new message.
            if delivery.qos == QoS::ExactlyOnce {
                stats.gate = stats.gate.max(recorded);
            }
            s.send_seq += 1;
            let seq = s.send_seq;
            s.inflight.insert(packet_id, Inflight { delivery: delivery.clone(), state, seq, entry });
            out.push(Outgoing::Publish { delivery, packet_id: Some(packet_id), dup: false });
        }
        stats.more = !s.queue.is_empty()
            && (s.queue.front().is_some_and(|q| q.delivery.qos == QoS::AtMostOnce)
                || s.inflight.len() < window);
        stats
    }

    /// Everything in flight, in the order it was first sent, to resend after a reconnect:
    /// PUBLISH with DUP for unacknowledged messages, PUBREL where PUBREC already came.
    pub fn resend_inflight(&self) -> Vec<Outgoing> {
        let s = self.state();
        let mut all: Vec<(&u16, &Inflight)> = s.inflight.iter().collect();
        all.sort_by_key(|(_, f)| f.seq);
        all.into_iter()
            .map(|(&packet_id, f)| match f.state {
                OutboundState::AwaitPubComp => Outgoing::PubRel { packet_id },
                _ => {
                    Outgoing::Publish { delivery: f.delivery.clone(), packet_id: Some(packet_id), dup: true }
                }
            })
            .collect()
    }

    /// Handles a PUBACK. Returns false if no QoS 1 message was in flight with that id.
    pub fn puback(&self, packet_id: u16) -> bool {
        let mut s = self.state();
        match s.inflight.get(&packet_id) {
            Some(f) if f.state == OutboundState::AwaitPubAck => {
                s.finish(&self.client_id, packet_id);
                true
            }
            _ => false,
        }
    }

    /// Handles a PUBREC. Returns whether the id was awaiting one; on success with a non-error
    /// reason code the message moves to [`OutboundState::AwaitPubComp`] and the caller sends
    /// PUBREL; with an error code the exchange ends here.
    pub fn pubrec(&self, packet_id: u16, reason: ReasonCode) -> PubRecOutcome {
        let mut s = self.state();
        let entry = match s.inflight.get(&packet_id) {
            Some(f) if f.state == OutboundState::AwaitPubRec => f.entry,
            // A repeated PUBREC: answer with PUBREL again.
            Some(f) if f.state == OutboundState::AwaitPubComp => return PubRecOutcome::SendPubRel,
            _ => return PubRecOutcome::Unknown,
        };
        if reason.is_error() {
            s.finish(&self.client_id, packet_id);
            return PubRecOutcome::Ended;
        }
        if let Some(f) = s.inflight.get_mut(&packet_id) {
            f.state = OutboundState::AwaitPubComp;
        }
        s.record(|| Change::Released { client_id: self.client_id.clone(), entry });
        PubRecOutcome::SendPubRel
    }

    /// Handles a PUBCOMP. Returns false if the id was not awaiting one.
    pub fn pubcomp(&self, packet_id: u16) -> bool {
        let mut s = self.state();
        match s.inflight.get(&packet_id) {
            Some(f) if f.state == OutboundState::AwaitPubComp => {
                s.finish(&self.client_id, packet_id);
                true
            }
            _ => false,
        }
    }

    /// Forgets an in-flight message without an acknowledgement (it could not be sent: larger
    /// than the client's maximum packet size). Returns whether the id was in flight.
    pub fn discard_inflight(&self, packet_id: u16) -> bool {
        self.state().finish(&self.client_id, packet_id)
    }

    /// How many QoS 1/2 messages are in flight to the client.
    pub fn inflight_len(&self) -> usize {
        self.state().inflight.len()
    }

    /// How many messages wait in the queue.
    pub fn queue_len(&self) -> usize {
        self.state().queue.len()
    }

    /// How many messages the queue limits dropped over the session's life.
    pub fn dropped(&self) -> u64 {
        self.state().dropped
    }

    /// Takes out every delivery that came through a shared subscription and is not yet
    /// acknowledged (queued, or PUBLISH sent without PUBACK/PUBREC), so the router can give it
    /// to another member of the group.
    pub fn take_shared_unacked(&self) -> Vec<Delivery> {
        let mut s = self.state();
        let mut taken = Vec::new();
        let mut keep = VecDeque::with_capacity(s.queue.len());
        let mut done = Vec::new();
        for q in s.queue.drain(..) {
            if q.delivery.shared.is_some() {
                if q.delivery.qos != QoS::AtMostOnce {
                    done.push(q.entry);
                }
                taken.push(q.delivery);
            } else {
                keep.push_back(q);
            }
        }
        s.queue = keep;
        s.queued_bytes = s.queue.iter().map(|q| q.delivery.weight()).sum();
        let ids: Vec<u16> = s
            .inflight
            .iter()
            .filter(|(_, f)| f.delivery.shared.is_some() && f.state != OutboundState::AwaitPubComp)
            .map(|(&id, _)| id)
            .collect();
        let mut unacked: Vec<Inflight> = ids.into_iter().filter_map(|id| s.inflight.remove(&id)).collect();
        unacked.sort_by_key(|f| f.seq);
        done.extend(unacked.iter().map(|f| f.entry));
        for entry in done {
            s.record(|| Change::Done { client_id: self.client_id.clone(), entry });
        }
        let mut all: Vec<Delivery> = unacked.into_iter().map(|f| f.delivery).collect();
        all.append(&mut taken);
        all
    }

    // ----------------------------------------------------------------- the inbound QoS 2 path

    /// Records an incoming QoS 2 PUBLISH whose message has [`crate::message::digest`] `digest`.
    /// `dup` is the packet's DUP flag; `window` is the receive maximum to enforce, `None` for a
    /// client that has none (MQTT 3.x).
    ///
    /// A known id with the same message is a retransmission: acknowledged again, not routed
    /// again, and never counted twice. A known id with a *different* message is a new message
    /// that reuses the id: the client finished the earlier exchange, whose release this session
    /// lost (a crash under `periodic` durability). The content decides, not the DUP flag, since
    /// common clients resend without it; DUP decides only for an id whose digest is unknown
    /// (stored by a release that kept none). Only ids the current connection has sent count
    /// against the window.
    pub fn incoming_qos2(
        &self,
        packet_id: u16,
        digest: u64,
        dup: bool,
        window: Option<usize>,
    ) -> IncomingQos2 {
        let mut s = self.state();
        let known = s.incoming_qos2.get(&packet_id).copied();
        if let Some(known) = known {
            let same = known.digest.map_or(dup, |d| d == digest);
            if same {
                if !known.live {
                    s.incoming_qos2.insert(packet_id, InboundQos2 { digest: Some(digest), live: true });
                    s.incoming_qos2_live += 1;
                }
                return IncomingQos2::Duplicate;
            }
        }
        let counted = known.is_some_and(|k| k.live);
        let others = s.incoming_qos2_live - usize::from(counted);
        if window.is_some_and(|w| others >= w) {
            return IncomingQos2::WindowFull;
        }
        if !counted {
            s.incoming_qos2_live += 1;
        }
        s.incoming_qos2.insert(packet_id, InboundQos2 { digest: Some(digest), live: true });
        let seq = s.record(|| Change::IncomingQos2 {
            client_id: self.client_id.clone(),
            packet_id,
            digest: Some(digest),
        });
        IncomingQos2::New { seq, reused: known.is_some(), others }
    }

    /// How many incoming QoS 2 messages await PUBREL, stale ones included.
    pub fn incoming_qos2_len(&self) -> usize {
        self.state().incoming_qos2.len()
    }

    /// Handles a PUBREL; returns whether the id was known, and the journal sequence number
    /// PUBCOMP must wait for (once the client has PUBCOMP it may reuse the id, so the release
    /// must be on disk first, or a restart would take the new message for a duplicate).
    pub fn pubrel(&self, packet_id: u16) -> (bool, Option<u64>) {
        let mut s = self.state();
        match s.incoming_qos2.remove(&packet_id) {
            None => return (false, None),
            Some(i) if i.live => s.incoming_qos2_live -= 1,
            Some(_) => {}
        }
        let seq =
            s.record(|| Change::IncomingQos2 { client_id: self.client_id.clone(), packet_id, digest: None });
        (true, seq)
    }

    // ----------------------------------------------------------------- durability

    /// Whether changes to this session are journalled.
    pub fn is_journaled(&self) -> bool {
        self.state().journal.is_some()
    }

    /// Starts or stops journalling this session. Starting writes a full picture of it (the
    /// journal may have nothing of it yet: a session becomes persistent when a connection with
    /// a session expiry takes over one that had none).
    pub fn set_journal(&self, journal: Option<Arc<dyn Journal>>, opened: bool) {
        let mut s = self.state();
        s.journal = journal;
        if !opened {
            return;
        }
        let client_id = self.client_id.clone();
        let expiry = s.expiry;
        s.record(|| Change::SessionOpened { client_id: client_id.clone(), expiry });
        let subscriptions: Vec<Change> = s
            .subscriptions
            .iter()
            .map(|(filter, r)| Change::Subscribed {
                client_id: client_id.clone(),
                filter: filter.clone(),
                options: r.options,
            })
            .collect();
        let mut entries: Vec<Change> = Vec::new();
        let mut inflight: Vec<(u16, &Inflight)> = s.inflight.iter().map(|(&id, f)| (id, f)).collect();
        inflight.sort_by_key(|(_, f)| f.seq);
        for (packet_id, f) in inflight {
            entries.push(Change::Queued {
                client_id: client_id.clone(),
                entry: f.entry,
                delivery: f.delivery.clone(),
            });
            entries.push(Change::InFlight { client_id: client_id.clone(), entry: f.entry, packet_id });
            if f.state == OutboundState::AwaitPubComp {
                entries.push(Change::Released { client_id: client_id.clone(), entry: f.entry });
            }
        }
        for q in s.queue.iter().filter(|q| q.delivery.qos != QoS::AtMostOnce) {
            entries.push(Change::Queued {
                client_id: client_id.clone(),
                entry: q.entry,
                delivery: q.delivery.clone(),
            });
        }
        let incoming: Vec<Change> = s
            .incoming_qos2
            .iter()
            .map(|(&packet_id, i)| Change::IncomingQos2 {
                client_id: client_id.clone(),
                packet_id,
                digest: i.digest,
            })
            .collect();
        for change in subscriptions.into_iter().chain(entries).chain(incoming) {
            s.record(|| change);
        }
    }

    /// A session read back from durable storage: offline, disconnected at `disconnected_at`,
    /// with its queue (in entry order) and in-flight messages as they were.
    pub fn restore(
        id: SessionId,
        client_id: Arc<str>,
        expiry: SessionExpiry,
        limits: QueueLimits,
        disconnected_at: Instant,
        entries: Vec<RestoredEntry>,
        incoming_qos2: Vec<(u16, Option<u64>)>,
    ) -> Session {
        let session = Session::new(id, client_id, expiry, limits);
        {
            let mut s = session.state();
            s.disconnected_at = Some(disconnected_at);
            for RestoredEntry { entry, delivery, inflight } in entries {
                s.next_entry = s.next_entry.max(entry + 1);
                match inflight {
                    Some((packet_id, state)) => {
                        s.send_seq += 1;
                        let seq = s.send_seq;
                        s.inflight.insert(packet_id, Inflight { delivery, state, seq, entry });
                    }
                    None => {
                        s.queued_bytes += delivery.weight();
                        s.queue.push_back(Queued { entry, delivery });
                    }
                }
            }
            s.incoming_qos2.extend(
                incoming_qos2.into_iter().map(|(id, digest)| (id, InboundQos2 { digest, live: false })),
            );
        }
        session
    }

    /// Records a change about this session if it is journalled; returns its sequence number.
    pub(crate) fn record(&self, change: impl FnOnce(&Arc<str>) -> Change) -> Option<u64> {
        let s = self.state();
        s.record(|| change(&self.client_id))
    }
}

/// One stored queue entry, read back at start-up.
#[derive(Debug)]
pub struct RestoredEntry {
    /// The journal entry number.
    pub entry: u64,
    /// The delivery.
    pub delivery: Delivery,
    /// The packet id and state, if it was in flight.
    pub inflight: Option<(u16, OutboundState)>,
}

/// What [`Session::pubrec`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PubRecOutcome {
    /// Send PUBREL.
    SendPubRel,
    /// The receiver refused the message; nothing more to send.
    Ended,
    /// The id was not awaiting PUBREC.
    Unknown,
}

/// What [`Session::incoming_qos2`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncomingQos2 {
    /// A new message: route it, then PUBREC once `seq` (if any) is durable.
    New {
        /// The journal sequence number PUBREC must wait for under durability `always`.
        seq: Option<u64>,
        /// The id was pending from an earlier exchange the client has finished.
        reused: bool,
        /// How many other QoS 2 messages of this connection await PUBREL (for a client without
        /// a receive maximum, this may exceed the server's).
        others: usize,
    },
    /// A retransmission of a message already routed: PUBREC again, do not route.
    Duplicate,
    /// The window is full: the client broke its receive maximum.
    WindowFull,
}

/// What one [`Session::drain`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Messages moved to the output.
    pub taken: usize,
    /// Messages dropped because they expired while queued.
    pub expired: usize,
    /// Whether more could be taken right away (the batch limit stopped it).
    pub more: bool,
    /// Under durability `always`, the journal sequence number the output must wait for.
    pub gate: Option<u64>,
}

impl State {
    /// Journals a change if this session is journalled.
    fn record(&self, change: impl FnOnce() -> Change) -> Option<u64> {
        self.journal.as_ref().map(|j| j.record(change()))
    }

    /// Installs a receiver ACL and drops the queued messages it does not let through.
    fn replace_acl(&mut self, acl: Acl, client_id: &Arc<str>) {
        if acl.source().is_some() && acl.source() == self.acl.source() {
            // The same rules for the same client (a reconnect): keep the compilation, and with
            // its stamp the decisions cached on this session's subscriptions.
            return;
        }
        self.acl = acl;
        if self.queue.is_empty() {
            return;
        }
        let queue = std::mem::take(&mut self.queue);
        let mut kept = VecDeque::with_capacity(queue.len());
        for q in queue {
            if self.acl.allows(Access::Read, &q.delivery.message.topic) {
                kept.push_back(q);
            } else {
                self.queued_bytes -= q.delivery.weight();
                if q.delivery.qos != QoS::AtMostOnce {
                    self.record(|| Change::Done { client_id: client_id.clone(), entry: q.entry });
                }
            }
        }
        self.queue = kept;
    }

    /// Ends an in-flight message (acknowledged or discarded).
    fn finish(&mut self, client_id: &Arc<str>, packet_id: u16) -> bool {
        let Some(f) = self.inflight.remove(&packet_id) else { return false };
        self.record(|| Change::Done { client_id: client_id.clone(), entry: f.entry });
        true
    }

    /// The next packet id not in flight. With at most 65,535 ids and a window far below that,
    /// the scan ends after a step or two.
    fn allocate_packet_id(&mut self) -> u16 {
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = if id == u16::MAX { 1 } else { id + 1 };
            if !self.inflight.contains_key(&id) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Wake;

    use bytes::Bytes;

    use super::*;
    use crate::acl::{Permission, Rule};
    use crate::message::Origin;
    use crate::topic::TopicName;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn limits(max_messages: usize) -> QueueLimits {
        QueueLimits { max_messages, max_bytes: 1 << 20, queue_qos0_offline: true }
    }

    fn delivery(topic: &str, qos: QoS) -> Delivery {
        let m = Message::new(
            TopicName::try_from(topic).unwrap(),
            Bytes::from_static(b"x"),
            qos,
            false,
            Origin::BROKER,
        );
        Delivery { message: Arc::new(m), qos, retain: false, subscription_ids: SmallVec::new(), shared: None }
    }

    fn online(max: usize) -> Session {
        let s = Session::new(SessionId(1), "c".into(), SessionExpiry::Never, limits(max));
        s.attach(1, Acl::unrestricted(), SessionExpiry::Never);
        s
    }

    fn drain_all(s: &Session, window: usize) -> Vec<Outgoing> {
        drain_as(s, 1, window)
    }

    fn drain_as(s: &Session, generation: u64, window: usize) -> Vec<Outgoing> {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag);
        let mut out = Vec::new();
        s.drain(generation, window, usize::MAX, Instant::now(), &waker, &mut out);
        out
    }

    fn ids(out: &[Outgoing]) -> Vec<Option<u16>> {
        out.iter()
            .map(|o| match o {
                Outgoing::Publish { packet_id, .. } => *packet_id,
                Outgoing::PubRel { packet_id } => Some(*packet_id),
            })
            .collect()
    }

    #[test]
    fn overflow_drops_the_oldest_qos0_first_then_refuses() {
        let s = online(3);
        assert_eq!(s.enqueue(delivery("a", QoS::AtLeastOnce), false), Enqueued::Queued);
        assert_eq!(s.enqueue(delivery("b", QoS::AtMostOnce), false), Enqueued::Queued);
        assert_eq!(s.enqueue(delivery("c", QoS::AtMostOnce), false), Enqueued::Queued);
        assert_eq!(s.enqueue(delivery("d", QoS::AtLeastOnce), false), Enqueued::QueuedDroppingOldest);
        assert_eq!(s.enqueue(delivery("e", QoS::AtLeastOnce), false), Enqueued::QueuedDroppingOldest);
        assert_eq!(s.enqueue(delivery("f", QoS::AtMostOnce), false), Enqueued::Dropped);
        assert_eq!(s.dropped(), 3);
        let topics: Vec<String> = drain_all(&s, 10)
            .iter()
            .map(|o| match o {
                Outgoing::Publish { delivery, .. } => delivery.message.topic.as_str().to_owned(),
                Outgoing::PubRel { .. } => String::new(),
            })
            .collect();
        assert_eq!(topics, ["a", "d", "e"]);
    }

    #[test]
    fn window_limits_inflight_and_acks_release_it() {
        let s = online(100);
        for t in ["a", "b", "c"] {
            s.enqueue(delivery(t, QoS::AtLeastOnce), false);
        }
        let first = drain_all(&s, 2);
        assert_eq!(ids(&first), [Some(1), Some(2)]);
        assert!(drain_all(&s, 2).is_empty(), "window full");
        assert!(s.puback(1));
        assert!(!s.puback(1), "a second PUBACK for the same id is unknown");
        assert_eq!(ids(&drain_all(&s, 2)), [Some(3)]);
    }

    #[test]
    fn packet_ids_are_never_reused_while_in_flight() {
        let s = online(100_000);
        // Fill 65,534 ids, ack all but id 5, then wrap around: id 5 must be skipped.
        for _ in 0..65_535 {
            s.enqueue(delivery("a", QoS::AtLeastOnce), false);
        }
        let out = drain_all(&s, 70_000);
        assert_eq!(out.len(), 65_535);
        for id in 1..=u16::MAX {
            if id != 5 {
                assert!(s.puback(id));
            }
        }
        for _ in 0..6 {
            s.enqueue(delivery("b", QoS::AtLeastOnce), false);
        }
        assert_eq!(ids(&drain_all(&s, 70_000)), [Some(1), Some(2), Some(3), Some(4), Some(6), Some(7)]);
    }

    #[test]
    fn qos2_outbound_flow_and_resend_order() {
        let s = online(100);
        s.enqueue(delivery("a", QoS::ExactlyOnce), false);
        s.enqueue(delivery("b", QoS::AtLeastOnce), false);
        s.enqueue(delivery("c", QoS::ExactlyOnce), false);
        drain_all(&s, 10);
        assert_eq!(s.pubrec(1, ReasonCode::Success), PubRecOutcome::SendPubRel);
        assert_eq!(s.pubrec(1, ReasonCode::Success), PubRecOutcome::SendPubRel, "repeated PUBREC");
        assert_eq!(s.pubrec(2, ReasonCode::Success), PubRecOutcome::Unknown, "QoS 1 id");
        // Reconnect: PUBREL for 1, then PUBLISH with DUP for 2 and 3, in send order.
        s.detach(1, Instant::now());
        s.attach(2, Acl::unrestricted(), SessionExpiry::Never);
        let resend = s.resend_inflight();
        assert!(matches!(resend[0], Outgoing::PubRel { packet_id: 1 }));
        assert!(matches!(resend[1], Outgoing::Publish { packet_id: Some(2), dup: true, .. }));
        assert!(matches!(resend[2], Outgoing::Publish { packet_id: Some(3), dup: true, .. }));
        assert!(s.pubcomp(1));
        assert!(!s.pubcomp(1));
        assert_eq!(s.pubrec(3, ReasonCode::UnspecifiedError), PubRecOutcome::Ended);
        assert_eq!(s.inflight_len(), 1);
    }

    #[test]
    fn incoming_qos2_is_routed_once_until_released() {
        let s = online(10);
        let new = |o| matches!(o, IncomingQos2::New { .. });
        assert!(new(s.incoming_qos2(7, 70, false, Some(4))));
        assert_eq!(s.incoming_qos2(7, 70, true, Some(4)), IncomingQos2::Duplicate, "resent before PUBREL");
        assert_eq!(s.incoming_qos2(7, 70, false, Some(4)), IncomingQos2::Duplicate, "resent without DUP");
        assert!(s.pubrel(7).0);
        assert!(!s.pubrel(7).0);
        assert!(new(s.incoming_qos2(7, 70, false, Some(4))), "the id may be reused after PUBCOMP");
    }

    #[test]
    fn the_receive_window_counts_each_id_once() {
        let s = online(10);
        for id in 1..=3 {
            assert!(matches!(s.incoming_qos2(id, u64::from(id), false, Some(3)), IncomingQos2::New { .. }));
        }
        assert_eq!(s.incoming_qos2(3, 3, true, Some(3)), IncomingQos2::Duplicate, "a resend of a counted id");
        assert_eq!(s.incoming_qos2(4, 4, false, Some(3)), IncomingQos2::WindowFull);
        assert_eq!(
            s.incoming_qos2(4, 4, false, None),
            IncomingQos2::New { seq: None, reused: false, others: 3 },
            "a client without a receive maximum is never refused"
        );
        assert!(s.pubrel(1).0 && s.pubrel(2).0);
        assert!(matches!(s.incoming_qos2(5, 5, false, Some(3)), IncomingQos2::New { others: 2, .. }));
    }

    #[test]
    fn restored_ids_count_only_once_the_client_resends_them() {
        let s = Session::restore(
            SessionId(1),
            "c".into(),
            SessionExpiry::Never,
            limits(10),
            Instant::now(),
            Vec::new(),
            vec![(1, Some(10)), (2, Some(20)), (3, None)],
        );
        s.attach(1, Acl::unrestricted(), SessionExpiry::Never);
        // Ids 1-3 are stale unless resent: a window of 2 still takes two new messages.
        assert!(matches!(s.incoming_qos2(9, 90, false, Some(2)), IncomingQos2::New { others: 0, .. }));
        assert_eq!(s.incoming_qos2(1, 10, false, Some(2)), IncomingQos2::Duplicate, "the same message again");
        assert_eq!(
            s.incoming_qos2(11, 110, false, Some(2)),
            IncomingQos2::WindowFull,
            "9 and 1 are in flight"
        );
        assert_eq!(
            s.incoming_qos2(2, 21, false, None),
            IncomingQos2::New { seq: None, reused: true, others: 2 },
            "a stale id with another message is a new message"
        );
        assert_eq!(s.incoming_qos2(3, 30, true, None), IncomingQos2::Duplicate, "no digest: DUP decides");
        assert!(s.pubrel(3).0);
        assert_eq!(s.incoming_qos2_len(), 3);
    }

    #[test]
    fn acl_filters_at_enqueue_and_when_rules_change() {
        let s = online(10);
        let rules = [Rule { pattern: "a/#".into(), permission: Permission::Read }];
        s.set_acl(Acl::compile(Some(&rules), None, "c"));
        assert_eq!(s.enqueue(delivery("b", QoS::AtMostOnce), false), Enqueued::Filtered);
        assert_eq!(s.enqueue(delivery("a/1", QoS::AtMostOnce), false), Enqueued::Queued);
        s.set_acl(Acl::compile(Some(&[]), None, "c"));
        assert!(drain_all(&s, 10).is_empty(), "rules changed while queued");
        assert_eq!(s.queue_len(), 0);
    }

    #[test]
    fn resuming_with_narrower_rules_drops_what_they_hide() {
        let s = online(10);
        let everything = [Rule { pattern: "#".into(), permission: Permission::Read }];
        s.set_acl(Acl::compile(Some(&everything), None, "c"));
        assert!(s.detach(1, Instant::now()));
        assert_eq!(s.enqueue(delivery("a/1", QoS::AtLeastOnce), false), Enqueued::Queued);
        assert_eq!(s.enqueue(delivery("b/1", QoS::AtLeastOnce), false), Enqueued::Queued);
        let only_a = [Rule { pattern: "a/#".into(), permission: Permission::Read }];
        s.attach(2, Acl::compile(Some(&only_a), None, "c"), SessionExpiry::Never);
        let sent: Vec<String> = drain_as(&s, 2, 10)
            .into_iter()
            .filter_map(|o| match o {
                Outgoing::Publish { delivery, .. } => Some(delivery.message.topic.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(sent, ["a/1"]);
    }

    #[test]
    fn offline_qos0_is_not_queued_unless_configured() {
        let s = Session::new(
            SessionId(1),
            "c".into(),
            SessionExpiry::Never,
            QueueLimits { max_messages: 10, max_bytes: 1000, queue_qos0_offline: false },
        );
        assert_eq!(s.enqueue(delivery("a", QoS::AtMostOnce), false), Enqueued::Dropped);
        assert_eq!(s.enqueue(delivery("a", QoS::AtLeastOnce), false), Enqueued::Queued);
    }

    #[test]
    fn push_wakes_the_registered_connection() {
        let s = online(10);
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut out = Vec::new();
        s.drain(1, 10, 10, Instant::now(), &waker, &mut out);
        assert!(!flag.0.load(Ordering::SeqCst));
        s.enqueue(delivery("a", QoS::AtMostOnce), false);
        assert!(flag.0.load(Ordering::SeqCst));
    }

    #[test]
    fn a_stale_connection_cannot_detach_or_drain_a_taken_over_session() {
        let s = online(10);
        s.kick(Kick::TakenOver);
        assert_eq!(s.take_kick(1), Some(Kick::TakenOver));
        s.attach(2, Acl::unrestricted(), SessionExpiry::Never);
        assert!(!s.detach(1, Instant::now()));
        assert!(s.is_online());
        s.enqueue(delivery("a", QoS::AtMostOnce), false);
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let mut out = Vec::new();
        s.drain(1, 10, 10, Instant::now(), &Waker::from(flag), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn shared_unacked_deliveries_are_handed_back() {
        let s = online(10);
        let mut d = delivery("a", QoS::AtLeastOnce);
        d.shared = Some(SharedRoute { group: "g".into(), subscription: "$share/g/a".into() });
        s.enqueue(d.clone(), false);
        s.enqueue(delivery("b", QoS::AtLeastOnce), false);
        drain_all(&s, 10);
        s.enqueue(d, false);
        let back = s.take_shared_unacked();
        assert_eq!(back.len(), 2);
        assert_eq!(s.inflight_len(), 1);
        assert_eq!(s.queue_len(), 0);
    }
}
