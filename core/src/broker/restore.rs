//! Bringing back what a persistence layer read at start-up: sessions with their queues and
//! subscriptions, retained messages. (Delayed wills: [`Broker::restore_will`].)

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Broker;
use crate::model::{Message, SessionExpiry, SessionId, SessionKey, SubscribeOptions};
use crate::session::{RestoredEntry, Session, SubscriptionRecord};
use crate::sync::lock;
use crate::topic::SubscriptionFilter;

/// A stored session to bring back at start-up (see [`Broker::restore_session`]).
#[derive(Debug)]
pub struct RestoredSession {
    /// The session's key.
    pub key: SessionKey,
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
    pub fn new(key: SessionKey, expiry: SessionExpiry, disconnected_at: Instant) -> Self {
        RestoredSession {
            key,
            expiry,
            disconnected_at,
            subscriptions: Vec::new(),
            entries: Vec::new(),
            incoming_qos2: Vec::new(),
        }
    }
}

impl Broker {
    /// Brings back a stored session (offline) at start-up, before [`Broker::set_journal`]:
    /// its subscriptions join the router, its queue and in-flight window are as they were, and
    /// its expiry counts from when its connection ended.
    pub fn restore_session(&self, stored: RestoredSession, now: Instant) {
        let id = SessionId(self.next_session.fetch_add(1, Ordering::Relaxed));
        let session = Arc::new(Session::restore(
            id,
            stored.key.clone(),
            stored.expiry,
            self.limits.queue,
            self.budget.clone(),
            stored.disconnected_at,
            stored.entries,
            stored.incoming_qos2,
        ));
        for (filter, options) in stored.subscriptions {
            self.router.subscribe(&session, &filter, options);
            session.add_subscription(Arc::from(filter.as_str()), SubscriptionRecord { filter, options });
        }
        lock(&self.sessions).insert(session.clone());
        match stored.expiry {
            SessionExpiry::After(keep) => self.schedule_expiry(&session, stored.disconnected_at + keep),
            SessionExpiry::OnDisconnect => self.schedule_expiry(&session, now),
            SessionExpiry::Never => {}
        }
    }

    /// Brings back a stored retained message at start-up.
    pub fn restore_retained(&self, message: &Arc<Message>) {
        // Kept whatever the caps: nothing stored is dropped because a cap was lowered.
        self.retained.restore(message);
    }
}
