//! The broker: the session registry, the router, the retained store, wills and timers, tied
//! together behind one protocol-agnostic API that every front end calls.
//!
//! Time is passed in (`now`), never read here except through the caller, so tests drive expiry
//! and will delays with explicit instants. The server runs one timer task that calls
//! [`Broker::tick`] at the deadline it returns (and again whenever
//! [`Broker::timers_changed`] fires because an earlier deadline was added).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, OwnedMutexGuard};

use crate::acl::{Access, Acl};
use crate::journal::{Change, Journal};
use crate::message::{Message, SessionId};
use crate::mqtt::RetainHandling;
use crate::retained::{RetainChange, RetainedStore};
use crate::router::{RouteStats, Router};
pub use crate::session::RestoredEntry;
use crate::session::{Delivery, QueueLimits, Session, SessionExpiry, SubscribeOptions, SubscriptionRecord};
use crate::topic::SubscriptionFilter;

/// How often expired retained messages are swept out.
const RETAINED_SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Limits that apply to every session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokerLimits {
    /// Per-session queue limits.
    pub queue: QueueLimits,
}

/// Counters for `$SYS` and the logs. All relaxed atomics: they are statistics, not state.
#[derive(Debug, Default)]
pub struct Stats {
    /// Application messages received from clients.
    pub messages_received: AtomicU64,
    /// Application messages sent to clients.
    pub messages_sent: AtomicU64,
    /// Messages dropped by queue limits, expiry or oversize.
    pub messages_dropped: AtomicU64,
    /// Bytes read from clients.
    pub bytes_received: AtomicU64,
    /// Bytes written to clients.
    pub bytes_sent: AtomicU64,
    /// Connections currently past CONNECT.
    pub clients_connected: AtomicU64,
    /// Connections accepted since start.
    pub connections_total: AtomicU64,
    /// Failed authentication attempts since start.
    pub auth_failures: AtomicU64,
    /// Publishes refused by an ACL since start.
    pub publishes_denied: AtomicU64,
}

impl Stats {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A will message with what is needed to publish it later.
#[derive(Clone, Debug)]
pub struct Will {
    /// The message (its `expires_at` is set when it is published).
    pub message: Message,
    /// MQTT 5 message expiry interval, counted from the moment the will is published.
    pub expiry_interval: Option<u32>,
    /// MQTT 5 will delay interval.
    pub delay: Duration,
    /// The publisher's ACL at the time the will is published (checked for write then).
    pub acl: Acl,
}

#[derive(Debug)]
struct DelayedWill {
    client_id: Arc<str>,
    will: Will,
}

#[derive(Debug, Default)]
struct Timers {
    wills: BTreeMap<(Instant, u64), DelayedWill>,
    will_keys: HashMap<Arc<str>, (Instant, u64)>,
    expiries: BTreeMap<(Instant, SessionId), Arc<str>>,
    seq: u64,
    next_sweep: Option<Instant>,
}

/// Serialises connects of one client id (takeover, session open) across connections.
#[derive(Debug)]
pub struct ClientLock<'a> {
    broker: &'a Broker,
    client_id: Arc<str>,
    mutex: Arc<tokio::sync::Mutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for ClientLock<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut locks = lock(&self.broker.connect_locks);
        // Two owners left (the map and us) means nobody else waits: forget the lock.
        if Arc::strong_count(&self.mutex) == 2 {
            locks.remove(&self.client_id);
        }
    }
}

/// What opening a session found.
#[derive(Debug)]
pub struct OpenedSession {
    /// The session to attach to.
    pub session: Arc<Session>,
    /// Whether an existing session was resumed.
    pub present: bool,
}

/// The broker core.
#[derive(Debug)]
pub struct Broker {
    limits: BrokerLimits,
    router: Router,
    retained: RetainedStore,
    sessions: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    connect_locks: Mutex<HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>>,
    timers: Mutex<Timers>,
    timers_changed: Notify,
    stats: Stats,
    next_session: AtomicU64,
    next_generation: AtomicU64,
    journal: OnceLock<Arc<dyn Journal>>,
}

/// A stored session to bring back at start-up (see [`Broker::restore_session`]).
#[derive(Debug)]
pub struct RestoredSession {
    /// The client id.
    pub client_id: Arc<str>,
    /// Its expiry.
    pub expiry: SessionExpiry,
    /// When its connection ended (expiry counts from here).
    pub disconnected_at: Instant,
    /// Its subscriptions.
    pub subscriptions: Vec<(SubscriptionFilter, SubscribeOptions)>,
    /// Its queued and in-flight messages, in entry order.
    pub entries: Vec<RestoredEntry>,
    /// Incoming QoS 2 packet ids awaiting PUBREL, with their messages' digests where stored.
    pub incoming_qos2: Vec<(u16, Option<u64>)>,
}

impl RestoredSession {
    /// A stored session with nothing in it yet.
    pub fn new(client_id: Arc<str>, expiry: SessionExpiry, disconnected_at: Instant) -> Self {
        RestoredSession {
            client_id,
            expiry,
            disconnected_at,
            subscriptions: Vec::new(),
            entries: Vec::new(),
            incoming_qos2: Vec::new(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Broker {
    /// An empty broker.
    pub fn new(limits: BrokerLimits) -> Self {
        Broker {
            limits,
            router: Router::new(),
            retained: RetainedStore::new(),
            sessions: Mutex::new(HashMap::new()),
            connect_locks: Mutex::new(HashMap::new()),
            timers: Mutex::new(Timers::default()),
            timers_changed: Notify::new(),
            stats: Stats::default(),
            next_session: AtomicU64::new(1),
            next_generation: AtomicU64::new(1),
            journal: OnceLock::new(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The router.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The retained store.
    pub fn retained(&self) -> &RetainedStore {
        &self.retained
    }

    /// The limits sessions are created with.
    pub fn limits(&self) -> BrokerLimits {
        self.limits
    }

    /// A fresh connection generation number.
    pub fn next_generation(&self) -> u64 {
        self.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    /// Fires when a timer deadline earlier than the last [`Broker::tick`] answer was added.
    pub fn timers_changed(&self) -> &Notify {
        &self.timers_changed
    }

    /// How many sessions exist, online or not.
    pub fn session_count(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// The session of `client_id`, if one exists.
    pub fn session(&self, client_id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(client_id).cloned()
    }

    /// Every session with a connection attached.
    pub fn online_sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().filter(|s| s.is_online()).cloned().collect()
    }

    /// Waits until no other connect of `client_id` is in progress, and holds that until dropped.
    pub async fn lock_client(&self, client_id: &Arc<str>) -> ClientLock<'_> {
        let mutex = lock(&self.connect_locks).entry(client_id.clone()).or_default().clone();
        let guard = mutex.clone().lock_owned().await;
        ClientLock { broker: self, client_id: client_id.clone(), mutex, guard: Some(guard) }
    }

    /// Opens the session for a connect: resumes the existing one unless `clean_start` or its
    /// expiry has passed, else starts a new one (ending the old). Cancels a pending delayed will
    /// of the client id: a reconnect within the will delay means the will is not sent. The caller
    /// must hold the [`ClientLock`] and have waited for any previous connection to detach.
    pub fn open_session(
        &self,
        client_id: &Arc<str>,
        clean_start: bool,
        expiry: SessionExpiry,
        now: Instant,
    ) -> OpenedSession {
        let mut existing = lock(&self.sessions).get(client_id).cloned();
        // Past its expiry but not yet swept by the timer: the session is over all the same, so
        // it ends as the timer would end it (its pending will goes out) and is not resumed.
        if let Some(old) = existing.take_if(|old| old.expires_at().is_some_and(|at| at <= now)) {
            self.expire_session(&old, now);
        }
        self.cancel_will(client_id);
        if let Some(old) = existing {
            if !clean_start && !old.is_ended() {
                self.unschedule_expiry(&old);
                old.set_expiry(expiry);
                self.journal_resumed(&old, expiry);
                return OpenedSession { session: old, present: true };
            }
            self.end_session(&old, now);
        }
        let id = SessionId(self.next_session.fetch_add(1, Ordering::Relaxed));
        let session = Arc::new(Session::new(id, client_id.clone(), expiry, self.limits.queue));
        if expiry != SessionExpiry::OnDisconnect {
            session.set_journal(self.journal().cloned(), true);
        }
        lock(&self.sessions).insert(client_id.clone(), session.clone());
        OpenedSession { session, present: false }
    }

    /// The journal durable changes go to, once persistence is on.
    pub fn journal(&self) -> Option<&Arc<dyn Journal>> {
        self.journal.get()
    }

    /// Turns persistence on (after [`Broker::restore_session`] and friends): from now on every
    /// durable change is recorded. Sessions restored before keep their stored state.
    pub fn set_journal(&self, journal: &Arc<dyn Journal>) {
        if self.journal.set(journal.clone()).is_err() {
            return;
        }
        let persistent: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        for s in persistent.iter().filter(|s| s.expiry() != SessionExpiry::OnDisconnect) {
            s.set_journal(Some(journal.clone()), false);
        }
    }

    fn record(&self, change: impl FnOnce() -> Change) -> Option<u64> {
        self.journal().map(|j| j.record(change()))
    }

    /// A resumed session starts, keeps or stops being journalled as its new expiry says.
    fn journal_resumed(&self, session: &Session, expiry: SessionExpiry) {
        let Some(journal) = self.journal() else { return };
        match (expiry != SessionExpiry::OnDisconnect, session.is_journaled()) {
            (true, true) => {
                session.record(|client_id| Change::SessionResumed { client_id: client_id.clone(), expiry });
            }
            (true, false) => session.set_journal(Some(journal.clone()), true),
            (false, true) => {
                // It now ends with this connection: a crash must not bring it back either.
                session.record(|client_id| Change::SessionEnded { client_id: client_id.clone() });
                session.set_journal(None, false);
            }
            (false, false) => {}
        }
    }

    /// Publishes a message: updates the retained store if it is retained, then routes it.
    pub fn publish(&self, message: Message) -> RouteStats {
        let message = Arc::new(message);
        let mut retained_seq = None;
        if message.retain {
            let change = self.retained.set(&message);
            if change != RetainChange::Unchanged {
                let kept = (!message.payload.is_empty()).then(|| message.clone());
                retained_seq =
                    self.record(|| Change::Retained { topic: message.topic.clone(), message: kept });
            }
        }
        let mut stats = self.route(&message);
        stats.durable_seq = stats.durable_seq.max(retained_seq);
        stats
    }

    fn route(&self, message: &Arc<Message>) -> RouteStats {
        let stats = self.router.route(message);
        if stats.dropped > 0 {
            Stats::add(&self.stats.messages_dropped, stats.dropped as u64);
        }
        stats
    }

    /// Stores a retained message without routing it (used by front ends that route separately).
    pub fn set_retained(&self, message: &Arc<Message>) -> RetainChange {
        self.retained.set(message)
    }

    /// Adds a subscription to `session` and queues the retained messages it should receive
    /// (per retain handling; never for shared subscriptions). Returns whether it replaced an
    /// existing subscription with the same filter.
    pub fn subscribe(
        &self,
        session: &Arc<Session>,
        filter: SubscriptionFilter,
        options: SubscribeOptions,
        now: Instant,
    ) -> bool {
        let existed = self.router.subscribe(session, &filter, options);
        let text: Arc<str> = Arc::from(filter.as_str());
        let shared = matches!(filter, SubscriptionFilter::Shared { .. });
        let topic_filter = filter.filter().clone();
        session.record(|client_id| Change::Subscribed {
            client_id: client_id.clone(),
            filter: text.clone(),
            options,
        });
        session.add_subscription(text, SubscriptionRecord { filter, options });
        let send_retained = match options.retain_handling {
            RetainHandling::SendAtSubscribe => true,
            RetainHandling::SendIfNew => !existed,
            RetainHandling::DoNotSend => false,
        };
        if send_retained && !shared {
            for message in self.retained.matching(&topic_filter, now) {
                let delivery = Delivery {
                    qos: message.qos.min(options.qos),
                    retain: true,
                    subscription_ids: options.subscription_id.into_iter().collect(),
                    shared: None,
                    message,
                };
                session.enqueue(delivery, false);
            }
        }
        existed
    }

    /// Removes a subscription by its text (as the client sent it). Returns whether it existed.
    pub fn unsubscribe(&self, session: &Session, text: &str) -> bool {
        match session.remove_subscription(text) {
            Some(record) => {
                session.record(|client_id| Change::Unsubscribed {
                    client_id: client_id.clone(),
                    filter: text.into(),
                });
                self.router.unsubscribe(session.id(), &record.filter)
            }
            None => false,
        }
    }

    /// Called when connection `generation` of `session` ends. `will` is the will to publish
    /// (the caller passes `None` after a normal DISCONNECT). Shared-subscription messages it did
    /// not acknowledge go to other group members; a session that ends with its connection is
    /// removed; a persistent one starts its expiry countdown.
    pub fn connection_closed(
        &self,
        session: &Arc<Session>,
        generation: u64,
        will: Option<Will>,
        now: Instant,
    ) {
        if !session.detach(generation, now) {
            // Taken over: the session lives on in the new connection, so a delayed will is not
            // sent (the client reconnected within the delay); an immediate one is.
            if let Some(will) = will.filter(|w| w.delay.is_zero()) {
                self.publish_will(will, now);
            }
            return;
        }
        self.redispatch_shared(session);
        let expiry = session.expiry();
        if expiry != SessionExpiry::OnDisconnect {
            session.record(|client_id| Change::SessionDisconnected {
                client_id: client_id.clone(),
                at: SystemTime::now(),
                expiry,
            });
        }
        match expiry {
            SessionExpiry::OnDisconnect => {
                if let Some(will) = will {
                    self.publish_will(will, now);
                }
                self.end_session(session, now);
            }
            SessionExpiry::After(keep) => {
                if let Some(will) = will {
                    self.schedule_will(session.client_id().clone(), will.clone(), now + will.delay.min(keep));
                }
                self.schedule_expiry(session, now + keep);
            }
            SessionExpiry::Never => {
                if let Some(will) = will {
                    let at = now + will.delay;
                    self.schedule_will(session.client_id().clone(), will, at);
                }
            }
        }
    }

    fn redispatch_shared(&self, session: &Session) {
        let left: Vec<Delivery> = session
            .take_shared_unacked()
            .into_iter()
            .filter_map(|d| self.router.redispatch(d, session.id()).err())
            .collect();
        // No other member is online: the leaving session keeps them for its return.
        for d in left {
            session.enqueue(d, false);
        }
    }

    /// Ends a session: it stops receiving, its subscriptions are removed, its shared messages go
    /// to other members, and it leaves the registry.
    pub fn end_session(&self, session: &Arc<Session>, now: Instant) {
        let _ = now;
        session.record(|client_id| Change::SessionEnded { client_id: client_id.clone() });
        for (_, record) in session.subscriptions() {
            self.router.unsubscribe(session.id(), &record.filter);
        }
        for d in session.end() {
            if d.shared.is_some() {
                let _ = self.router.redispatch(d, session.id());
            }
        }
        let mut sessions = lock(&self.sessions);
        if sessions.get(session.client_id()).is_some_and(|s| Arc::ptr_eq(s, session)) {
            sessions.remove(session.client_id());
        }
        drop(sessions);
        self.unschedule_expiry(session);
    }

    /// Ends an offline session whose expiry has passed. A will still waiting for its delay goes
    /// out now: the end of the session comes before the end of the delay.
    fn expire_session(&self, session: &Arc<Session>, now: Instant) {
        let pending_will = {
            let mut t = lock(&self.timers);
            let key = t.will_keys.remove(session.client_id());
            key.and_then(|k| t.wills.remove(&k))
        };
        if pending_will.is_some() {
            self.record(|| Change::WillCancelled { client_id: session.client_id().clone() });
        }
        if let Some(w) = pending_will {
            self.publish_will(w.will, now);
        }
        tracing::debug!(client_id = %session.client_id(), "session expired");
        self.end_session(session, now);
    }

    /// Publishes a will now, if its publisher may write its topic.
    pub fn publish_will(&self, will: Will, now: Instant) -> Option<RouteStats> {
        if !will.acl.allows(Access::Write, &will.message.topic) {
            Stats::add(&self.stats.publishes_denied, 1);
            tracing::info!(topic = %will.message.topic.as_str(), "will not published: the client may not write its topic");
            return None;
        }
        Some(self.publish(will.message.with_expiry_interval(will.expiry_interval, now)))
    }

    fn schedule_will(&self, client_id: Arc<str>, will: Will, at: Instant) {
        let mut t = lock(&self.timers);
        t.seq += 1;
        let key = (at, t.seq);
        if let Some(old) = t.will_keys.insert(client_id.clone(), key) {
            t.wills.remove(&old);
        }
        let wall = SystemTime::now() + at.saturating_duration_since(Instant::now());
        self.record(|| Change::WillScheduled { client_id: client_id.clone(), will: will.clone(), at: wall });
        t.wills.insert(key, DelayedWill { client_id, will });
        drop(t);
        self.timers_changed.notify_one();
    }

    /// Cancels the pending delayed will of `client_id`; returns whether there was one.
    pub fn cancel_will(&self, client_id: &str) -> bool {
        let mut t = lock(&self.timers);
        let Some(key) = t.will_keys.remove(client_id) else { return false };
        let removed = t.wills.remove(&key);
        if let Some(w) = &removed {
            self.record(|| Change::WillCancelled { client_id: w.client_id.clone() });
        }
        removed.is_some()
    }

    fn schedule_expiry(&self, session: &Session, at: Instant) {
        lock(&self.timers).expiries.insert((at, session.id()), session.client_id().clone());
        self.timers_changed.notify_one();
    }

    fn unschedule_expiry(&self, session: &Session) {
        lock(&self.timers).expiries.retain(|(_, id), _| *id != session.id());
    }

    /// Brings back a stored session (offline) at start-up, before [`Broker::set_journal`]:
    /// its subscriptions join the router, its queue and in-flight window are as they were, and
    /// its expiry counts from when its connection ended.
    pub fn restore_session(&self, stored: RestoredSession, now: Instant) {
        let id = SessionId(self.next_session.fetch_add(1, Ordering::Relaxed));
        let session = Arc::new(Session::restore(
            id,
            stored.client_id.clone(),
            stored.expiry,
            self.limits.queue,
            stored.disconnected_at,
            stored.entries,
            stored.incoming_qos2,
        ));
        for (filter, options) in stored.subscriptions {
            self.router.subscribe(&session, &filter, options);
            session.add_subscription(Arc::from(filter.as_str()), SubscriptionRecord { filter, options });
        }
        lock(&self.sessions).insert(stored.client_id, session.clone());
        match stored.expiry {
            SessionExpiry::After(keep) => self.schedule_expiry(&session, stored.disconnected_at + keep),
            SessionExpiry::OnDisconnect => self.schedule_expiry(&session, now),
            SessionExpiry::Never => {}
        }
    }

    /// Brings back a stored retained message at start-up.
    pub fn restore_retained(&self, message: &Arc<Message>) {
        self.retained.set(message);
    }

    /// Brings back a stored delayed will at start-up (`at` may be in the past: it goes out at
    /// the first tick).
    pub fn restore_will(&self, client_id: Arc<str>, will: Will, at: Instant) {
        let mut t = lock(&self.timers);
        t.seq += 1;
        let key = (at, t.seq);
        t.will_keys.insert(client_id.clone(), key);
        t.wills.insert(key, DelayedWill { client_id, will });
    }

    /// Fires everything due at `now` (delayed wills, session expiries, the retained sweep) and
    /// returns the next deadline.
    pub fn tick(&self, now: Instant) -> Option<Instant> {
        let (wills, expired) = {
            let mut t = lock(&self.timers);
            let mut wills = Vec::new();
            while let Some(entry) = t.wills.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let w = entry.remove();
                t.will_keys.remove(&w.client_id);
                self.record(|| Change::WillCancelled { client_id: w.client_id.clone() });
                wills.push(w.will);
            }
            let mut expired = Vec::new();
            while let Some(entry) = t.expiries.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let id = entry.key().1;
                expired.push((id, entry.remove()));
            }
            (wills, expired)
        };
        for will in wills {
            self.publish_will(will, now);
        }
        for (id, client_id) in expired {
            let Some(session) = self.session(&client_id) else { continue };
            if session.id() != id || session.is_online() {
                continue;
            }
            if session.expires_at().is_some_and(|at| at <= now) {
                self.expire_session(&session, now);
            }
        }
        let mut t = lock(&self.timers);
        let sweep = *t.next_sweep.get_or_insert(now + RETAINED_SWEEP_EVERY);
        if sweep <= now {
            drop(t);
            self.retained.sweep_expired(now);
            t = lock(&self.timers);
            t.next_sweep = Some(now + RETAINED_SWEEP_EVERY);
        }
        [t.wills.keys().next().map(|k| k.0), t.expiries.keys().next().map(|k| k.0), t.next_sweep]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::acl::{Permission, Rule};
    use crate::message::Origin;
    use crate::mqtt::QoS;
    use crate::topic::TopicName;

    fn broker() -> Broker {
        Broker::new(BrokerLimits {
            queue: QueueLimits { max_messages: 100, max_bytes: 1 << 20, queue_qos0_offline: false },
        })
    }

    fn message(topic: &str, retain: bool) -> Message {
        Message::new(
            TopicName::try_from(topic).unwrap(),
            Bytes::from_static(b"m"),
            QoS::AtLeastOnce,
            retain,
            Origin::BROKER,
        )
    }

    fn connect(
        b: &Broker,
        id: &str,
        clean: bool,
        expiry: SessionExpiry,
        now: Instant,
    ) -> (Arc<Session>, bool, u64) {
        let opened = b.open_session(&Arc::from(id), clean, expiry, now);
        let generation = b.next_generation();
        opened.session.attach(generation, Acl::unrestricted(), expiry);
        (opened.session, opened.present, generation)
    }

    fn filter(f: &str) -> SubscriptionFilter {
        SubscriptionFilter::parse(f).unwrap()
    }

    fn will(topic: &str, delay_s: u64) -> Will {
        Will {
            message: message(topic, false),
            expiry_interval: None,
            delay: Duration::from_secs(delay_s),
            acl: Acl::unrestricted(),
        }
    }

    #[test]
    fn persistent_session_is_resumed_and_clean_start_discards_it() {
        let b = broker();
        let now = Instant::now();
        let (s, present, g) = connect(&b, "c", false, SessionExpiry::Never, now);
        assert!(!present);
        b.subscribe(&s, filter("t"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
        b.connection_closed(&s, g, None, now);
        b.publish(message("t", false));
        let (s2, present, _) = connect(&b, "c", false, SessionExpiry::Never, now);
        assert!(present);
        assert!(Arc::ptr_eq(&s, &s2));
        assert_eq!(s2.queue_len(), 1);
        let (s3, present, _) = connect(&b, "c", true, SessionExpiry::Never, now);
        assert!(!present);
        assert_eq!(s3.queue_len(), 0);
        assert_eq!(b.router().len(), 0, "the old session's subscriptions are gone");
    }

    #[test]
    fn clean_session_ends_on_disconnect() {
        let b = broker();
        let now = Instant::now();
        let (s, _, g) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
        b.subscribe(&s, filter("t/#"), SubscribeOptions::with_qos(QoS::AtMostOnce), now);
        b.connection_closed(&s, g, None, now);
        assert_eq!(b.session_count(), 0);
        assert_eq!(b.router().len(), 0);
    }

    #[test]
    fn session_expiry_interval_is_honoured() {
        let b = broker();
        let now = Instant::now();
        let expiry = SessionExpiry::After(Duration::from_secs(5));
        let (s, _, g) = connect(&b, "c", false, expiry, now);
        b.connection_closed(&s, g, None, now);
        assert_eq!(b.tick(now + Duration::from_secs(4)), Some(now + Duration::from_secs(5)));
        assert_eq!(b.session_count(), 1);
        b.tick(now + Duration::from_secs(5));
        assert_eq!(b.session_count(), 0);
    }

    #[test]
    fn an_expired_session_is_not_resumed_even_before_the_timer_runs() {
        let b = broker();
        let now = Instant::now();
        let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
        b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
        let expiry = SessionExpiry::After(Duration::from_secs(1));
        let (s, _, g) = connect(&b, "c", false, expiry, now);
        b.subscribe(&s, filter("t"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
        b.connection_closed(&s, g, Some(will("will/c", 60)), now);
        // No tick between the expiry and the reconnect.
        let (s2, present, _) = connect(&b, "c", false, expiry, now + Duration::from_secs(2));
        assert!(!present && !Arc::ptr_eq(&s, &s2));
        assert_eq!(s2.subscription_count(), 0);
        assert_eq!(b.router().len(), 1, "only the watcher's subscription is left");
        assert_eq!(watcher.queue_len(), 1, "the session ended before the will delay: the will went out");
    }

    #[test]
    fn retained_replay_follows_retain_handling() {
        let b = broker();
        let now = Instant::now();
        b.publish(message("r/1", true));
        let (s, _, _) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
        let mut o = SubscribeOptions::with_qos(QoS::AtLeastOnce);
        o.retain_handling = RetainHandling::SendIfNew;
        b.subscribe(&s, filter("r/+"), o, now);
        assert_eq!(s.queue_len(), 1);
        b.subscribe(&s, filter("r/+"), o, now);
        assert_eq!(s.queue_len(), 1, "not again for an existing subscription");
        o.retain_handling = RetainHandling::DoNotSend;
        b.subscribe(&s, filter("r/#"), o, now);
        assert_eq!(s.queue_len(), 1);
        b.subscribe(&s, filter("$share/g/r/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
        assert_eq!(s.queue_len(), 1, "never for shared subscriptions");
    }

    #[test]
    fn delayed_will_fires_after_delay_and_is_cancelled_by_reconnect() {
        let b = broker();
        let now = Instant::now();
        let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
        b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);

        let (s, _, g) = connect(&b, "c", false, SessionExpiry::Never, now);
        b.connection_closed(&s, g, Some(will("will/c", 10)), now);
        b.tick(now + Duration::from_secs(9));
        assert_eq!(watcher.queue_len(), 0);
        b.tick(now + Duration::from_secs(10));
        assert_eq!(watcher.queue_len(), 1);

        let (s, _, g) = connect(&b, "d", false, SessionExpiry::Never, now);
        b.connection_closed(&s, g, Some(will("will/d", 10)), now);
        connect(&b, "d", false, SessionExpiry::Never, now + Duration::from_secs(5));
        b.tick(now + Duration::from_secs(20));
        assert_eq!(watcher.queue_len(), 1, "reconnect within the delay cancels the will");
    }

    #[test]
    fn will_goes_out_when_the_session_ends_before_the_delay() {
        let b = broker();
        let now = Instant::now();
        let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
        b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
        let expiry = SessionExpiry::After(Duration::from_secs(3));
        let (s, _, g) = connect(&b, "c", false, expiry, now);
        b.connection_closed(&s, g, Some(will("will/c", 60)), now);
        b.tick(now + Duration::from_secs(3));
        assert_eq!(watcher.queue_len(), 1);
    }

    #[test]
    fn will_is_checked_for_write_when_sent() {
        let b = broker();
        let now = Instant::now();
        let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
        b.subscribe(&watcher, filter("#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
        let read_only = [Rule { pattern: "#".into(), permission: Permission::Read }];
        let mut w = will("will/c", 0);
        w.acl = Acl::compile(Some(&read_only), None, "c");
        let (s, _, g) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
        b.connection_closed(&s, g, Some(w), now);
        assert_eq!(watcher.queue_len(), 0);
        assert_eq!(Stats::get(&b.stats().publishes_denied), 1);
    }

    #[test]
    fn takeover_keeps_the_session_and_sends_only_an_immediate_will() {
        let b = broker();
        let now = Instant::now();
        let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
        b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
        let (old, _, g1) = connect(&b, "c", false, SessionExpiry::Never, now);
        let (new, present, _) = connect(&b, "c", false, SessionExpiry::Never, now);
        assert!(present && Arc::ptr_eq(&old, &new));
        b.connection_closed(&old, g1, Some(will("will/c", 5)), now);
        assert!(new.is_online(), "the stale connection did not detach the new one");
        b.tick(now + Duration::from_secs(10));
        assert_eq!(watcher.queue_len(), 0);
    }

    #[tokio::test]
    async fn client_lock_serialises_connects_of_one_id() {
        let b = Arc::new(broker());
        let id: Arc<str> = "c".into();
        let first = b.lock_client(&id).await;
        let b2 = b.clone();
        let id2 = id.clone();
        let waiter = tokio::spawn(async move {
            let _second = b2.lock_client(&id2).await;
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(first);
        waiter.await.unwrap();
        assert!(lock(&b.connect_locks).is_empty(), "no lock left behind");
    }
}
