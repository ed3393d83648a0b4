//! A persistent session moving to another node with its client: what it holds is copied out
//! on the node it leaves ([`Session::handover_entries`]) and taken in by the fresh session on
//! the node it reaches ([`Session::adopt_entries`]), in-flight state included, so that QoS 1
//! messages are not lost and QoS 2 ones are delivered once.

use super::inbound::Inbound;
use super::mailbox::Queued;
use super::outbound::OutboundState;
use super::{RestoredEntry, Session};
use crate::journal::Change;

/// What a session hands over: its queue entries (in-flight ones first, in send order, then
/// the queue in order) and its incoming QoS 2 packet ids awaiting PUBREL.
pub type HandedState = (Vec<RestoredEntry>, Vec<(u16, Option<u64>)>);

impl Session {
    /// A copy of the session's in-flight and queued messages and its incoming QoS 2 ids.
    pub fn handover_entries(&self) -> HandedState {
        let s = self.state();
        let mut entries = Vec::new();
        for (packet_id, f) in s.outbound().in_send_order() {
            entries.push(RestoredEntry {
                entry: f.entry,
                delivery: f.delivery.clone(),
                inflight: Some((packet_id, f.state)),
            });
        }
        for q in s.mailbox.iter() {
            entries.push(RestoredEntry { entry: q.entry, delivery: q.delivery.clone(), inflight: None });
        }
        (entries, s.inbound().iter().collect())
    }

    /// Takes in what another node's copy of this session handed over: into a session just
    /// opened here (nothing queued, nothing in flight), journalled as it goes in when the
    /// session is. The in-flight messages are resent when the client attaches.
    pub fn adopt_entries(&self, entries: Vec<RestoredEntry>, incoming_qos2: Vec<(u16, Option<u64>)>) {
        let mut s = self.state();
        let client_id = self.client_id().clone();
        for RestoredEntry { delivery, inflight, .. } in entries {
            let entry = s.next_entry;
            s.next_entry += 1;
            if delivery.qos != crate::model::QoS::AtMostOnce {
                s.record(|| Change::Queued {
                    client_id: client_id.clone(),
                    entry,
                    delivery: delivery.clone(),
                });
            }
            match inflight {
                Some((packet_id, state)) => {
                    s.record(|| Change::InFlight { client_id: client_id.clone(), entry, packet_id });
                    if state == OutboundState::AwaitPubComp {
                        s.record(|| Change::Released { client_id: client_id.clone(), entry });
                    }
                    s.outbound_mut().insert(packet_id, delivery, state, entry);
                }
                None => s.mailbox.push(Queued { entry, delivery }),
            }
        }
        for &(packet_id, digest) in &incoming_qos2 {
            s.record(|| Change::IncomingQos2 { client_id: client_id.clone(), packet_id, digest });
        }
        if !incoming_qos2.is_empty() {
            *s.inbound_mut() = Inbound::restore(incoming_qos2);
        }
    }
}
