//! The broker: the session registry, the router, the retained store, wills and timers, tied
//! together behind one protocol-neutral API that every front end calls.
//!
//! The client operations a front end needs are here, so that the rules that make mesgd what it
//! is — takeover, the `$SYS` reservation, the write check, the intersecting-read check on
//! subscribe, the live ACL refresh — exist once, whatever protocol the client speaks: a front end
//! only maps their results onto its wire (MQTT reason codes, relay `error` frames).
//!
//! Time is passed in (`now`), never read here, except while [`Broker::admit`] waits, bounded,
//! for a taken-over connection to let go. Wall-clock times (kept in the journal, as they must
//! survive a restart) are derived from `now` and the pair of clocks the broker was created with.
//! The server runs one timer task that calls [`Broker::tick`] at the deadline it returns (and
//! again whenever [`Broker::timers_changed`] fires because an earlier deadline was added).
//!
//! # Layout
//!
//! - this file: the broker, its session registry, session open / close / end.
//! - [`admit`](Broker::admit): admission of a client — takeover or refusal, open or attach.
//! - `publish`: [`Broker::publish_as`] (checks, counting), raw publish, wills, the cluster
//!   forwarding seam.
//! - `subscribe`: [`Broker::subscribe_as`], subscribe with retained replay, unsubscribe.
//! - `identity`: [`Broker::refresh_identity`], a provider's live change to a connected client.
//! - `timers`: delayed wills, session expiry, the retained sweep, [`Broker::tick`].
//! - `restore`: bringing back stored sessions, retained messages and wills at start-up.
//! - `stats`: the counters.
//! - `session_table`: the sessions by key, one pointer each.

mod admit;
mod identity;
mod publish;
mod restore;
mod session_table;
mod stats;
mod subscribe;
#[cfg(test)]
mod tests;
mod timers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

pub use self::admit::{Admission, AdmitError, Admitted, ClientLock, OnConflict};
pub use self::identity::IdentityUpdate;
pub use self::publish::{Forward, PublishPermit, PublishRefused, is_reserved_topic};
pub use self::restore::RestoredSession;
use self::session_table::SessionTable;
pub use self::stats::{DropReason, Stats, TRAFFIC_PROTOCOLS, Traffic};
pub use self::subscribe::SubscribeRefused;
use self::timers::Timers;
use crate::cluster::registry::{self, SessionRegistry};
use crate::journal::{Change, Journal};
use crate::model::{Delivery, SessionExpiry, SessionId, SessionKey, Will};
use crate::retained::{RetainedLimits, RetainedStore};
use crate::router::Router;
pub use crate::session::RestoredEntry;
use crate::session::{BudgetLimits, QueueBudget, QueueLimits, Session};
use crate::sync::lock;

/// Limits that apply to every session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokerLimits {
    /// Per-session queue limits.
    pub queue: QueueLimits,
    /// The broker-wide budget for the bytes every session holds together.
    pub budget: BudgetLimits,
    /// The caps of the retained store.
    pub retained: RetainedLimits,
    /// Sessions held at most before a new session that outlives its connection is refused
    /// ([`Broker::admit`]); sessions of connected clients count, so it must exceed the
    /// connections a node takes.
    pub max_sessions: usize,
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
    budget: Arc<QueueBudget>,
    router: Router,
    retained: RetainedStore,
    sessions: Mutex<SessionTable>,
    connect_locks: Mutex<HashMap<SessionKey, Arc<tokio::sync::Mutex<()>>>>,
    timers: Mutex<Timers>,
    timers_changed: Notify,
    stats: Stats,
    next_session: AtomicU64,
    next_generation: AtomicU64,
    journal: OnceLock<Arc<dyn Journal>>,
    forward: OnceLock<Arc<dyn Forward>>,
    registry: OnceLock<Arc<dyn SessionRegistry>>,
    wills: OnceLock<Arc<dyn crate::cluster::wills::WillKeeper>>,
    /// The cluster's store of QoS 1/2 messages; unset on a single node.
    message_store: OnceLock<Arc<dyn crate::cluster::durable::MessageStore>>,
    /// The monotonic and the wall clock at one instant: wall times are derived from `now`.
    epoch: (Instant, SystemTime),
}

impl Broker {
    /// An empty broker. `now` and `wall` are the two clocks read at the same moment.
    pub fn new(limits: BrokerLimits, now: Instant, wall: SystemTime) -> Self {
        Broker {
            limits,
            budget: Arc::new(QueueBudget::new(limits.budget)),
            router: Router::new(),
            retained: RetainedStore::with_limits(limits.retained),
            sessions: Mutex::new(SessionTable::default()),
            connect_locks: Mutex::new(HashMap::new()),
            timers: Mutex::new(Timers::default()),
            timers_changed: Notify::new(),
            stats: Stats::default(),
            next_session: AtomicU64::new(1),
            next_generation: AtomicU64::new(1),
            journal: OnceLock::new(),
            forward: OnceLock::new(),
            registry: OnceLock::new(),
            wills: OnceLock::new(),
            message_store: OnceLock::new(),
            epoch: (now, wall),
        }
    }

    /// The wall-clock time at monotonic instant `now`.
    pub fn wall_time(&self, now: Instant) -> SystemTime {
        let (mono, wall) = self.epoch;
        match now.checked_duration_since(mono) {
            Some(after) => wall + after,
            None => wall.checked_sub(mono.duration_since(now)).unwrap_or(wall),
        }
    }

    /// The monotonic instant of wall-clock time `at` (now, if it is in the past of the epoch).
    pub fn instant_of(&self, at: SystemTime) -> Instant {
        let (mono, wall) = self.epoch;
        match at.duration_since(wall) {
            Ok(after) => mono + after,
            Err(e) => mono.checked_sub(e.duration()).unwrap_or(mono),
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

    /// The budget every session's queue counts against.
    pub fn budget(&self) -> &Arc<QueueBudget> {
        &self.budget
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

    /// The session of `key`, if one exists.
    pub fn session(&self, key: &SessionKey) -> Option<Arc<Session>> {
        lock(&self.sessions).get(key).cloned()
    }

    /// Every session, online or not.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// Wakes the connections of every online session whose client is one of `usernames` (a
    /// provider changed their identity: each connection then sees the change at once, without
    /// holding a wait of its own for it). One pass over the sessions, made only when a
    /// provider's change lands.
    pub fn wake_users(&self, usernames: &[&str]) {
        if usernames.is_empty() {
            return;
        }
        let woken: Vec<Arc<Session>> = lock(&self.sessions)
            .values()
            .filter(|s| s.is_online())
            .filter(|s| s.client().and_then(|c| c.username.clone()).is_some_and(|u| usernames.contains(&&*u)))
            .cloned()
            .collect();
        for session in woken {
            session.wake();
        }
    }

    /// Every session with a connection attached.
    pub fn online_sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().filter(|s| s.is_online()).cloned().collect()
    }

    /// The journal durable changes go to, once persistence is on.
    pub fn journal(&self) -> Option<&Arc<dyn Journal>> {
        self.journal.get()
    }

    /// Turns persistence on (after [`Broker::restore_session`] and friends): from now on every
    /// durable change is recorded. Sessions restored before keep their stored state. To feed
    /// more than one consumer (persistence and a cluster), pass a [`crate::journal::Tee`].
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

    /// Opens the session for a connect: resumes the existing one unless `clean_start` or its
    /// expiry has passed, else starts a new one (ending the old). A pending delayed will of the
    /// client id is cancelled if the session is resumed (a reconnect within the will delay means
    /// the will is not sent), and goes out now if the session ends (MQTT 5.0 §3.1.3.2.2: the
    /// will waits for its delay or the end of the session, whichever comes first). The caller
    /// must hold the [`ClientLock`] and have waited for any previous connection to detach
    /// ([`Broker::admit`] does all of that).
    pub fn open_session(
        &self,
        key: &SessionKey,
        clean_start: bool,
        expiry: SessionExpiry,
        now: Instant,
    ) -> OpenedSession {
        let mut existing = lock(&self.sessions).get(key).cloned();
        // Past its expiry but not yet swept by the timer: the session is over all the same, so
        // it ends as the timer would end it (its pending will goes out) and is not resumed.
        if let Some(old) = existing.take_if(|old| old.expires_at().is_some_and(|at| at <= now)) {
            self.expire_session(&old, now);
        }
        if let Some(old) = existing {
            if !clean_start && !old.is_ended() {
                self.cancel_will(&key.id);
                self.unschedule_expiry(&old);
                old.set_expiry(expiry);
                self.journal_resumed(&old, expiry);
                return OpenedSession { session: old, present: true };
            }
            // Replaced by a new session of the same key: the key stays this node's.
            self.send_pending_will(&key.id, now);
            self.finish_session(&old);
        } else {
            self.cancel_will(&key.id);
        }
        let id = SessionId(self.next_session.fetch_add(1, Ordering::Relaxed));
        let session =
            Arc::new(Session::with_budget(id, key.clone(), expiry, self.limits.queue, self.budget.clone()));
        if expiry != SessionExpiry::OnDisconnect {
            session.set_journal(self.journal().cloned(), true);
        }
        lock(&self.sessions).insert(session.clone());
        OpenedSession { session, present: false }
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
        if let Some(keeper) = self.wills.get() {
            keeper.release(session.client_id(), generation);
        }
        if !session.detach(generation, now) {
            // Taken over: the session lives on in the new connection, so a delayed will is not
            // sent (the client reconnected within the delay); an immediate one is.
            if let Some(will) = will.filter(|w| w.delay.is_zero()) {
                self.publish_will(will, now);
            }
            return;
        }
        self.router.presence_changed(session);
        self.redispatch_shared(session);
        let expiry = session.expiry();
        if expiry != SessionExpiry::OnDisconnect {
            let at = self.wall_time(now);
            session.record(|client_id| Change::SessionDisconnected {
                client_id: client_id.clone(),
                at,
                expiry,
            });
        }
        match expiry {
            SessionExpiry::OnDisconnect => {
                if let Some(will) = will {
                    self.publish_will(will, now);
                }
                self.end_session(session);
            }
            SessionExpiry::After(keep) => {
                if let Some(will) = will {
                    let delay = will.delay.min(keep);
                    self.will_after(session, will, delay, now);
                }
                self.schedule_expiry(session, now + keep);
            }
            SessionExpiry::Never => {
                if let Some(will) = will {
                    let delay = will.delay;
                    self.will_after(session, will, delay, now);
                }
            }
        }
    }

    /// The will of a connection whose session lives on, `delay` after its close. Without a delay
    /// it goes out now, at the close, and not through the timer: a connect of the same client id
    /// that resumes the session in between (a takeover) would otherwise cancel it or not,
    /// depending on which ran first.
    fn will_after(&self, session: &Session, will: Will, delay: Duration, now: Instant) {
        if delay.is_zero() {
            self.publish_will(will, now);
        } else {
            self.schedule_will(session.client_id().clone(), will, now + delay, now);
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
    /// to other members, and it leaves the registry (and, in a cluster, the cluster-wide
    /// session registry, if the key is still this node's there).
    pub fn end_session(&self, session: &Arc<Session>) {
        self.finish_session(session);
        if let Some(r) = self.registry.get().filter(|_| registry::tracked(session.key())) {
            r.released(session.key());
        }
    }

    /// The cluster-wide session registry, once the cluster layer installed it.
    pub fn session_registry(&self) -> Option<&Arc<dyn SessionRegistry>> {
        self.registry.get()
    }

    /// Installs the cluster-wide session registry (once): from then on every MQTT admission
    /// claims its client id there first.
    pub fn set_session_registry(&self, registry: Arc<dyn SessionRegistry>) {
        let _ = self.registry.set(registry);
    }

    /// Installs the cluster's keeper of live connections' wills (once).
    pub fn set_will_keeper(&self, keeper: Arc<dyn crate::cluster::wills::WillKeeper>) {
        let _ = self.wills.set(keeper);
    }

    /// A connection with a will was admitted: in a cluster, its will is kept where the node
    /// that takes over this one's lease finds it, should this node die.
    pub fn will_attached(&self, session: &Session, generation: u64, will: &Will, acl: &crate::acl::Acl) {
        if let Some(keeper) = self.wills.get() {
            keeper.keep(session.client_id(), generation, will, acl);
        }
    }

    fn finish_session(&self, session: &Arc<Session>) {
        session.record(|client_id| Change::SessionEnded { client_id: client_id.clone() });
        for (_, record) in session.subscriptions() {
            self.router.unsubscribe(session.id(), &record.filter);
        }
        for d in session.end() {
            if d.shared.is_some() {
                let _ = self.router.redispatch(d, session.id());
            }
        }
        lock(&self.sessions).remove(session);
        self.unschedule_expiry(session);
    }
}

/// How long a taken-over connection gets to close before the new one proceeds anyway.
pub const TAKEOVER_WAIT: Duration = Duration::from_secs(5);
