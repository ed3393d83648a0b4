//! Sessions: what the broker keeps for a client between (and during) its connections.
//!
//! A session is keyed by a [`SessionKey`] (a namespace and an id, so that protocols never
//! collide) and holds the client's subscriptions, its receiver-side ACL, the protocol-neutral
//! [`mailbox`] of deliveries waiting to be sent, and — for MQTT — the delivery state on both
//! sides: the outgoing in-flight window with its packet ids ([`outbound`]) and the incoming
//! QoS 2 ids awaiting release ([`inbound`]). Front ends drive it through methods; the router
//! pushes messages into it.
//!
//! All of it sits behind one `std::sync::Mutex`, held for a few hundred nanoseconds and never
//! across an `.await`: the publishing task pushes, the owning connection task drains, and the
//! session outlives both. The connection registers its task waker here, so a push wakes exactly
//! the task that will write the message, without a channel in between. (Separate locks for the
//! halves would cost an idle connection more memory and every delivery a second lock.)
//!
//! # Layout
//!
//! - this file: the session, its connection lifecycle (attach, detach, kick, expiry), its
//!   subscriptions and the push side of the queue.
//! - [`mailbox`]: the bounded queue, its limits and drop count.
//! - [`budget`]: the bytes of every session together, against the broker-wide cap; each session
//!   settles its share whenever its lock is released ([`Locked`]).
//! - [`outbound`]: the in-flight window, packet ids, drain, acknowledgements and resend.
//! - [`inbound`]: incoming QoS 2 ids with their message digests.
//! - [`durable`]: the journal picture of a session and its restoration at start-up.
//! - [`handover`]: a session's state copied to another node and taken in there.

mod budget;
#[cfg(test)]
mod budget_tests;
mod durable;
mod handover;
mod inbound;
mod mailbox;
mod outbound;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Instant;

use tokio::sync::Notify;

pub use self::budget::{BudgetLimits, QueueBudget};
pub use self::durable::RestoredEntry;
pub use self::handover::HandedState;
use self::inbound::Inbound;
pub use self::inbound::IncomingQos2;
pub use self::mailbox::{Enqueued, QueueLimits};
use self::mailbox::{Mailbox, Queued};
use self::outbound::Outbound;
pub use self::outbound::{DrainStats, OutboundState, Outgoing, PubRecOutcome};
use crate::acl::{Access, Acl};
use crate::journal::{Change, Journal};
use crate::model::{ClientInfo, Delivery, Kick, QoS, SessionExpiry, SessionId, SessionKey, SubscribeOptions};
use crate::sync::lock;
use crate::topic::{SubscriptionFilter, TopicFilter};

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
    mailbox: Mailbox,
    /// The bytes this session has charged to the broker-wide budget (what it held when its
    /// lock was last released).
    charged: u64,
    /// The acknowledgement state, made when it is first needed: see [`Acks`].
    acks: Option<Box<Acks>>,
    /// The next journal entry number.
    next_entry: u64,
    /// Where durable changes go; `None` for a session that ends with its connection (or when
    /// the broker keeps no state).
    journal: Option<Arc<dyn Journal>>,
    // A B-tree rather than a hash map: empty, it takes half the space, and every idle
    // connection has a session.
    subscriptions: BTreeMap<Arc<str>, SubscriptionRecord>,
    acl: Acl,
    expiry: SessionExpiry,
    /// The generation of the attached connection, if one is attached (generations start at 1).
    connection: Option<NonZeroU64>,
    /// Who the attached connection is, for operators.
    client: Option<Arc<ClientInfo>>,
    disconnected_at: Option<Instant>,
    waker: Option<Waker>,
    kick: Option<Kick>,
    ended: bool,
}

/// The MQTT acknowledgement state of a session: the outgoing in-flight window and the incoming
/// QoS 2 ids awaiting PUBREL. Boxed and made on first use: most of a fleet's idle sessions
/// never have a QoS 1/2 message in flight or a QoS 2 message half received, and an absent box
/// costs them 8 bytes instead of 88. Readers see an empty state until then ([`State::outbound`],
/// [`State::inbound`]).
#[derive(Debug, Default)]
struct Acks {
    outbound: Outbound,
    inbound: Inbound,
}

/// What a session without [`Acks`] reads.
static NO_OUTBOUND: Outbound = Outbound::EMPTY;
static NO_INBOUND: Inbound = Inbound::EMPTY;

/// A client's session.
#[derive(Debug)]
pub struct Session {
    id: SessionId,
    key: SessionKey,
    online: AtomicBool,
    budget: Arc<QueueBudget>,
    state: Mutex<State>,
}

/// The session's state while its lock is held. Releasing it settles the session's share of the
/// budget, so every change to the queue or the window is accounted for, whichever method made
/// it, with one atomic add at most.
struct Locked<'a> {
    state: MutexGuard<'a, State>,
    budget: &'a QueueBudget,
}

impl Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let held = self.state.held_bytes();
        if held != self.state.charged {
            self.budget.settle(self.state.charged, held);
            self.state.charged = held;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let charged = match self.state.get_mut() {
            Ok(s) => s.charged,
            Err(poisoned) => poisoned.into_inner().charged,
        };
        self.budget.settle(charged, 0);
    }
}

/// Woken whenever any session detaches; waiters re-check their own session. One for all
/// sessions rather than one each: takeovers are rare, sessions are many, and every idle
/// connection has one.
static DETACHED: Notify = Notify::const_new();

impl Session {
    /// A new, empty, offline session outside any budget ([`QueueBudget::unlimited`]).
    pub fn new(id: SessionId, key: SessionKey, expiry: SessionExpiry, limits: QueueLimits) -> Self {
        Session::with_budget(id, key, expiry, limits, QueueBudget::unlimited())
    }

    /// A new, empty, offline session whose queue counts against `budget`.
    pub fn with_budget(
        id: SessionId,
        key: SessionKey,
        expiry: SessionExpiry,
        limits: QueueLimits,
        budget: Arc<QueueBudget>,
    ) -> Self {
        Session {
            id,
            key,
            online: AtomicBool::new(false),
            budget,
            state: Mutex::new(State {
                mailbox: Mailbox::new(limits),
                charged: 0,
                acks: None,
                next_entry: 1,
                journal: None,
                subscriptions: BTreeMap::new(),
                acl: Acl::unrestricted(),
                expiry,
                connection: None,
                client: None,
                disconnected_at: None,
                waker: None,
                kick: None,
                ended: false,
            }),
        }
    }

    /// The process-unique id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The registry key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The client id (MQTT) or address (relay).
    pub fn client_id(&self) -> &Arc<str> {
        &self.key.id
    }

    /// Whether a connection is attached.
    pub fn is_online(&self) -> bool {
        self.online.load(Ordering::Acquire)
    }

    fn state(&self) -> Locked<'_> {
        Locked { state: lock(&self.state), budget: &self.budget }
    }

    /// The budget this session's queue counts against.
    pub fn budget(&self) -> &Arc<QueueBudget> {
        &self.budget
    }

    /// Whether anything waits to be written to the client or acknowledged by it: queued
    /// deliveries, or QoS 1/2 messages in flight. A connection whose session has any must keep
    /// being read whatever the budget says, as its acknowledgements are what frees it.
    pub fn has_pending(&self) -> bool {
        let s = self.state();
        !s.mailbox.is_empty() || s.outbound().len() > 0
    }

    // ----------------------------------------------------------------- connection lifecycle

    /// Attaches connection `generation`, with the receiver ACL of its identity and its session
    /// expiry. Clears any pending kick. Messages queued while the session was offline were checked
    /// against the previous connection's rules; those the new ACL hides are dropped here.
    pub fn attach(&self, generation: u64, acl: Acl, expiry: SessionExpiry) {
        self.attach_client(generation, acl, expiry, None);
    }

    /// As [`Session::attach`], recording who the connection is.
    pub fn attach_client(
        &self,
        generation: u64,
        acl: Acl,
        expiry: SessionExpiry,
        client: Option<Arc<ClientInfo>>,
    ) {
        let mut s = self.state();
        s.connection = NonZeroU64::new(generation);
        debug_assert!(s.connection.is_some(), "connection generations start at 1");
        s.client = client;
        s.replace_acl(acl, self.client_id());
        // A new connection has sent none of the pending ids yet: it resends those it still
        // has in flight (with DUP, or as PUBREL), and only those count against its window.
        if let Some(acks) = s.acks.as_deref_mut() {
            acks.inbound.new_connection();
        }
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
        if !s.attached(generation) {
            return false;
        }
        s.connection = None;
        s.client = None;
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

    /// Wakes the attached connection (its task, or its parking lot), to look again at what
    /// may have changed outside the session: a provider's change of its identity.
    pub fn wake(&self) {
        let waker = self.state().waker.take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The pending kick for connection `generation`, if any. A connection's poll loop uses
    /// [`Session::poll_kick`] instead: this registers no waker.
    pub fn take_kick(&self, generation: u64) -> Option<Kick> {
        let mut s = self.state();
        if s.attached(generation) { s.kick.take() } else { Some(Kick::TakenOver) }
    }

    /// As [`Session::take_kick`], and with no kick pending, registers `waker` to be woken by
    /// the next [`Session::kick`] (or delivery). The check and the registration are one step
    /// under the session's lock: a kick that came after a bare check but before the waker was
    /// registered (by [`Session::drain`], later in the loop) would wake nobody, and the
    /// connection would stay open, taken over, until its next packet or timer.
    pub fn poll_kick(&self, generation: u64, waker: &Waker) -> Option<Kick> {
        let mut s = self.state();
        if !s.attached(generation) {
            return Some(Kick::TakenOver);
        }
        if let Some(kick) = s.kick.take() {
            return Some(kick);
        }
        match &s.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => s.waker = Some(waker.clone()),
        }
        None
    }

    /// Replaces the receiver ACL (after a live identity change), and drops queued messages the
    /// new rules hide: they were checked against the old rules when they were queued. (Messages
    /// already sent are past the point of delivery.)
    pub fn set_acl(&self, acl: Acl) {
        self.state().replace_acl(acl, self.client_id());
    }

    /// Who the attached connection is, if one is attached and its front end said.
    pub fn client(&self) -> Option<Arc<ClientInfo>> {
        self.state().client.clone()
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

    /// Marks the session as ended: it accepts no more messages. Returns what was queued or in
    /// flight (the broker hands shared-subscription messages to other members).
    pub fn end(&self) -> Vec<Delivery> {
        let mut s = self.state();
        s.ended = true;
        s.journal = None;
        let mut left: Vec<Delivery> = s.mailbox.take_all().into_iter().map(|q| q.delivery).collect();
        if let Some(acks) = s.acks.as_deref_mut() {
            left.extend(acks.outbound.take_all().into_iter().map(|f| f.delivery));
        }
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

    /// Whether the session has a subscription with this text.
    pub fn has_subscription(&self, text: &str) -> bool {
        self.state().subscriptions.contains_key(text)
    }

    /// How many subscriptions the session has.
    pub fn subscription_count(&self) -> usize {
        self.state().subscriptions.len()
    }

    // ----------------------------------------------------------------- the push side

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
        let online = s.connection.is_some();
        let weight = delivery.weight();
        let outcome = s.mailbox.make_room(weight, delivery.qos, online);
        if outcome == Enqueued::Dropped {
            return (outcome, None);
        }
        if !s.make_budget_room(weight, &self.budget) {
            return (Enqueued::OverBudget, None);
        }
        let entry = s.next_entry;
        s.next_entry += 1;
        let seq = if delivery.qos == QoS::AtMostOnce {
            None
        } else {
            s.record(|| Change::Queued {
                client_id: self.client_id().clone(),
                entry,
                delivery: delivery.clone(),
            })
        };
        s.mailbox.push(Queued { entry, delivery });
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        (outcome, seq)
    }

    /// Whether `delivery` would be queued now within half the queue limits: for a producer
    /// that can wait for the client to make room (a replay), so that it never fills the queue
    /// and has messages that cannot wait (live ones) dropped at the limits meanwhile.
    pub fn has_room_to_spare_for(&self, delivery: &Delivery) -> bool {
        self.state().mailbox.fits_in_half(delivery.weight())
    }

    /// How many messages wait in the queue.
    pub fn queue_len(&self) -> usize {
        self.state().mailbox.len()
    }

    /// How many messages the queue limits dropped over the session's life.
    pub fn dropped(&self) -> u64 {
        self.state().mailbox.dropped()
    }
}

impl State {
    /// Whether connection `generation` is the one attached.
    fn attached(&self, generation: u64) -> bool {
        self.connection.is_some_and(|c| c.get() == generation)
    }

    /// The in-flight window (empty until the first QoS 1/2 delivery).
    fn outbound(&self) -> &Outbound {
        self.acks.as_deref().map_or(&NO_OUTBOUND, |a| &a.outbound)
    }

    /// The in-flight window, made if the session had none.
    fn outbound_mut(&mut self) -> &mut Outbound {
        &mut self.acks.get_or_insert_default().outbound
    }

    /// The incoming QoS 2 ids (none until the first one).
    fn inbound(&self) -> &Inbound {
        self.acks.as_deref().map_or(&NO_INBOUND, |a| &a.inbound)
    }

    /// The incoming QoS 2 ids, made if the session had none.
    fn inbound_mut(&mut self) -> &mut Inbound {
        &mut self.acks.get_or_insert_default().inbound
    }

    /// The bytes this session holds: its queue and its in-flight window.
    fn held_bytes(&self) -> u64 {
        (self.mailbox.bytes() + self.outbound().bytes()) as u64
    }

    /// Makes room under the broker-wide budget's hard cap for a delivery of `weight` bytes by
    /// dropping this session's oldest QoS 0 messages (counted as budget drops). Returns false,
    /// and counts the new delivery as dropped, if it still does not fit.
    fn make_budget_room(&mut self, weight: usize, budget: &QueueBudget) -> bool {
        loop {
            // What this lock has freed already is still charged until the lock is released.
            let releasing = self.charged.saturating_sub(self.held_bytes());
            if budget.fits(weight, releasing) {
                return true;
            }
            if self.mailbox.drop_oldest_qos0().is_none() {
                budget.count_dropped(1);
                return false;
            }
            budget.count_dropped(1);
        }
    }

    /// Installs a receiver ACL and drops the queued messages it does not let through.
    fn replace_acl(&mut self, acl: Acl, client_id: &Arc<str>) {
        if acl.same_source(&self.acl) {
            // The same rules for the same client (a reconnect): keep the compilation, and with
            // its stamp the decisions cached on this session's subscriptions.
            return;
        }
        self.acl = acl;
        if self.mailbox.is_empty() {
            return;
        }
        let acl = &self.acl;
        let hidden = self.mailbox.take_unless(|q| acl.allows(Access::Read, &q.delivery.message.topic));
        for q in hidden.into_iter().filter(|q| q.delivery.qos != QoS::AtMostOnce) {
            self.record(|| Change::Done { client_id: client_id.clone(), entry: q.entry });
        }
    }
}
