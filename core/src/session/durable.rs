//! A session and its journal: the full picture written when a session becomes persistent, and
//! a session rebuilt from what a persistence layer read back at start-up.

use std::sync::Arc;
use std::time::Instant;

use super::inbound::Inbound;
use super::mailbox::{QueueLimits, Queued};
use super::outbound::OutboundState;
use super::{QueueBudget, Session, State};
use crate::journal::{Change, Journal};
use crate::model::{Delivery, QoS, SessionExpiry, SessionId, SessionKey};

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

impl State {
    /// Journals a change if this session is journalled.
    pub(super) fn record(&self, change: impl FnOnce() -> Change) -> Option<u64> {
        self.journal.as_ref().map(|j| j.record(change()))
    }
}

impl Session {
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
        let client_id = self.client_id().clone();
        let expiry = s.expiry;
        let mut picture = vec![Change::SessionOpened { client_id: client_id.clone(), expiry }];
        for (filter, r) in &s.subscriptions {
            picture.push(Change::Subscribed {
                client_id: client_id.clone(),
                filter: filter.clone(),
                options: r.options,
            });
        }
        for (packet_id, f) in s.outbound().in_send_order() {
            let entry = f.entry;
            picture.push(Change::Queued {
                client_id: client_id.clone(),
                entry,
                delivery: f.delivery.clone(),
            });
            picture.push(Change::InFlight { client_id: client_id.clone(), entry, packet_id });
            if f.state == OutboundState::AwaitPubComp {
                picture.push(Change::Released { client_id: client_id.clone(), entry });
            }
        }
        for q in s.mailbox.iter().filter(|q| q.delivery.qos != QoS::AtMostOnce) {
            picture.push(Change::Queued {
                client_id: client_id.clone(),
                entry: q.entry,
                delivery: q.delivery.clone(),
            });
        }
        for (packet_id, digest) in s.inbound().iter() {
            picture.push(Change::IncomingQos2 { client_id: client_id.clone(), packet_id, digest });
        }
        for change in picture {
            s.record(|| change);
        }
    }

    /// A session read back from durable storage: offline, disconnected at `disconnected_at`,
    /// with its queue (in entry order) and in-flight messages as they were. What it holds
    /// counts against `budget` (a restart may bring back more than the budget; nothing stored
    /// is dropped for it, but back-pressure starts at once).
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        id: SessionId,
        key: SessionKey,
        expiry: SessionExpiry,
        limits: QueueLimits,
        budget: Arc<QueueBudget>,
        disconnected_at: Instant,
        entries: Vec<RestoredEntry>,
        incoming_qos2: Vec<(u16, Option<u64>)>,
    ) -> Session {
        let session = Session::with_budget(id, key, expiry, limits, budget);
        {
            let mut s = session.state();
            s.disconnected_at = Some(disconnected_at);
            for RestoredEntry { entry, delivery, inflight } in entries {
                s.next_entry = s.next_entry.max(entry + 1);
                match inflight {
                    Some((packet_id, state)) => s.outbound_mut().insert(packet_id, delivery, state, entry),
                    None => s.mailbox.push(Queued { entry, delivery }),
                }
            }
            if !incoming_qos2.is_empty() {
                *s.inbound_mut() = Inbound::restore(incoming_qos2);
            }
        }
        session
    }

    /// Records a change about this session if it is journalled; returns its sequence number.
    pub(crate) fn record(&self, change: impl FnOnce(&Arc<str>) -> Change) -> Option<u64> {
        let s = self.state();
        s.record(|| change(self.client_id()))
    }
}
