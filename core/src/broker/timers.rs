//! Timers: delayed wills, session expiry and the retained sweep, fired by [`Broker::tick`].
//!
//! Wills and expiries belong to MQTT sessions (persistent ones); a relay session ends with its
//! connection and never schedules either.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Broker;
use crate::journal::Change;
use crate::log_text::Clipped;
use crate::model::{SessionId, SessionKey, Will};
use crate::session::Session;
use crate::sync::lock;

/// How often expired retained messages are swept out.
const RETAINED_SWEEP_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct DelayedWill {
    client_id: Arc<str>,
    will: Will,
}

/// Every pending deadline.
#[derive(Debug, Default)]
pub(super) struct Timers {
    wills: BTreeMap<(Instant, u64), DelayedWill>,
    will_keys: HashMap<Arc<str>, (Instant, u64)>,
    expiries: BTreeMap<(Instant, SessionId), SessionKey>,
    seq: u64,
    next_sweep: Option<Instant>,
}

impl Timers {
    fn insert_will(&mut self, client_id: Arc<str>, will: Will, at: Instant) {
        self.seq += 1;
        let key = (at, self.seq);
        if let Some(old) = self.will_keys.insert(client_id.clone(), key) {
            self.wills.remove(&old);
        }
        self.wills.insert(key, DelayedWill { client_id, will });
    }

    fn take_will(&mut self, client_id: &str) -> Option<DelayedWill> {
        let key = self.will_keys.remove(client_id)?;
        self.wills.remove(&key)
    }
}

impl Broker {
    pub(super) fn schedule_will(&self, client_id: Arc<str>, will: Will, at: Instant, now: Instant) {
        let wall = self.wall_time(at.max(now));
        let mut t = lock(&self.timers);
        self.record(|| Change::WillScheduled {
            client_id: client_id.clone(),
            will: Box::new(will.clone()),
            at: wall,
        });
        t.insert_will(client_id, will, at);
        drop(t);
        self.timers_changed.notify_one();
    }

    /// Cancels the pending delayed will of `client_id`; returns whether there was one.
    pub fn cancel_will(&self, client_id: &str) -> bool {
        let mut t = lock(&self.timers);
        let Some(w) = t.take_will(client_id) else { return false };
        self.record(|| Change::WillCancelled { client_id: w.client_id.clone() });
        true
    }

    /// Sends the pending delayed will of `client_id` now, if it has one: its session ends
    /// before the delay has passed.
    pub(super) fn send_pending_will(&self, client_id: &Arc<str>, now: Instant) {
        let pending_will = lock(&self.timers).take_will(client_id);
        if let Some(w) = pending_will {
            self.record(|| Change::WillCancelled { client_id: client_id.clone() });
            self.publish_will(w.will, now);
        }
    }

    pub(super) fn schedule_expiry(&self, session: &Session, at: Instant) {
        lock(&self.timers).expiries.insert((at, session.id()), session.key().clone());
        self.timers_changed.notify_one();
    }

    pub(super) fn unschedule_expiry(&self, session: &Session) {
        lock(&self.timers).expiries.retain(|(_, id), _| *id != session.id());
    }

    /// Brings back a stored delayed will at start-up (`at` may be in the past: it goes out at
    /// the first tick).
    pub fn restore_will(&self, client_id: Arc<str>, will: Will, at: Instant) {
        lock(&self.timers).insert_will(client_id, will, at);
    }

    /// Ends an offline session whose expiry has passed. A will still waiting for its delay goes
    /// out now: the end of the session comes before the end of the delay.
    pub(super) fn expire_session(&self, session: &Arc<Session>, now: Instant) {
        self.send_pending_will(session.client_id(), now);
        tracing::debug!(client_id = %Clipped(session.client_id()), "session expired");
        self.end_session(session);
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
        for (id, key) in expired {
            let Some(session) = self.session(&key) else { continue };
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
