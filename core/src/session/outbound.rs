//! The outgoing in-flight window: QoS 1 and 2 messages sent but not yet acknowledged, with the
//! packet ids they were sent under. This is MQTT's delivery state; a front end whose deliveries
//! are all QoS 0 (the JSON relay) never puts anything in it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use super::mailbox::Queued;
use super::{Session, State};
use crate::journal::Change;
use crate::model::{Delivery, QoS};

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
pub(super) struct Inflight {
    pub(super) delivery: Delivery,
    pub(super) state: OutboundState,
    /// Send order, so a resend after reconnect keeps the original order.
    pub(super) seq: u64,
    /// The session-local entry number the journal knows it by.
    pub(super) entry: u64,
}

/// The window, in the order messages were sent, and the packet id allocator.
///
/// A deque rather than a map: clients acknowledge almost always in order, so the entry to find
/// is at the front, and the window is small (`max_inflight`, 32 by default). This is on the
/// path of every QoS 1/2 delivery and measurably faster than a hash map or a B-tree here.
#[derive(Debug)]
pub(super) struct Outbound {
    window: VecDeque<(u16, Inflight)>,
    /// The weight of every delivery in the window.
    bytes: usize,
    send_seq: u64,
    next_packet_id: u16,
}

impl Default for Outbound {
    fn default() -> Self {
        Outbound::EMPTY
    }
}

impl Outbound {
    /// Nothing in flight; the first packet id is 1.
    pub(super) const EMPTY: Outbound =
        Outbound { window: VecDeque::new(), bytes: 0, send_seq: 0, next_packet_id: 1 };

    pub(super) fn len(&self) -> usize {
        self.window.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether a QoS 1/2 delivery of `weight` bytes may go in flight now: fewer than `window`
    /// messages and at most `max_bytes` in flight with it, or nothing in flight at all (so that
    /// a message larger than the byte cap still goes, alone).
    fn has_room(&self, window: usize, weight: usize, max_bytes: usize) -> bool {
        self.window.len() < window && (self.window.is_empty() || self.bytes + weight <= max_bytes)
    }

    fn position(&self, packet_id: u16) -> Option<usize> {
        self.window.iter().position(|(id, _)| *id == packet_id)
    }

    fn get(&self, packet_id: u16) -> Option<&Inflight> {
        self.position(packet_id).map(|i| &self.window[i].1)
    }

    fn get_mut(&mut self, packet_id: u16) -> Option<&mut Inflight> {
        self.position(packet_id).map(|i| &mut self.window[i].1)
    }

    /// Puts a message in flight under `packet_id` (sent now, or restored as it was).
    pub(super) fn insert(&mut self, packet_id: u16, delivery: Delivery, state: OutboundState, entry: u64) {
        self.send_seq += 1;
        let seq = self.send_seq;
        self.bytes += delivery.weight();
        self.window.push_back((packet_id, Inflight { delivery, state, seq, entry }));
    }

    pub(super) fn remove(&mut self, packet_id: u16) -> Option<Inflight> {
        let i = self.position(packet_id)?;
        let (_, f) = self.window.remove(i)?;
        self.bytes -= f.delivery.weight();
        Some(f)
    }

    /// Every message in flight, in the order it was first sent.
    pub(super) fn in_send_order(&self) -> Vec<(u16, &Inflight)> {
        let mut all: Vec<(u16, &Inflight)> = self.window.iter().map(|(id, f)| (*id, f)).collect();
        all.sort_by_key(|(_, f)| f.seq);
        all
    }

    pub(super) fn take_all(&mut self) -> Vec<Inflight> {
        self.bytes = 0;
        self.window.drain(..).map(|(_, f)| f).collect()
    }

    /// The next packet id not in flight. With at most 65,535 ids and a window far below that,
    /// the scan ends after a step or two.
    fn allocate_packet_id(&mut self) -> u16 {
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = if id == u16::MAX { 1 } else { id + 1 };
            if self.position(id).is_none() {
                return id;
            }
        }
    }
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

/// What [`Session::pubrec`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PubRecOutcome {
    /// Send PUBREL, once journal sequence number `durable_seq` is on disk (if the session is
    /// journalled): a PUBREL that went out before the release was stored could, after a crash,
    /// be followed by the same packet id's PUBLISH again, which the client, having completed
    /// the exchange, would take as a new message.
    SendPubRel {
        /// The journal sequence number of the release, for a journalled session.
        durable_seq: Option<u64>,
    },
    /// The receiver refused the message; nothing more to send.
    Ended,
    /// The id was not awaiting PUBREC.
    Unknown,
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
    /// Ends an in-flight message (acknowledged or discarded).
    fn finish(&mut self, client_id: &Arc<str>, packet_id: u16) -> bool {
        let Some(f) = self.acks.as_deref_mut().and_then(|a| a.outbound.remove(packet_id)) else {
            return false;
        };
        self.record(|| Change::Done { client_id: client_id.clone(), entry: f.entry });
        true
    }
}

impl Session {
    /// Moves queued messages into `out` for connection `generation`, allocating packet ids for
    /// QoS 1/2 while fewer than `window` are in flight and their bytes stay within the queue
    /// limits' `max_inflight_bytes` (one always goes when none is in flight), skipping expired
    /// messages. Registers
    /// `waker` to be woken by the next push. Stops at `max_batch` messages so one busy session
    /// cannot starve its own socket writes.
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
        if !s.attached(generation) {
            return stats;
        }
        match &s.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => s.waker = Some(waker.clone()),
        }
        let max_bytes = s.mailbox.limits().max_inflight_bytes;
        while stats.taken < max_batch {
            let Some(front) = s.mailbox.front() else { break };
            if front.delivery.qos != QoS::AtMostOnce
                && !s.outbound().has_room(window, front.delivery.weight(), max_bytes)
            {
                break;
            }
            let Some(Queued { entry, delivery }) = s.mailbox.pop_front() else { break };
            // The receiver's ACL was checked when the message was queued, and `set_acl` drops
            // what new rules hide, so only expiry is left to check here.
            if delivery.message.is_expired(now) {
                stats.expired += 1;
                if delivery.qos != QoS::AtMostOnce {
                    s.record(|| Change::Done { client_id: self.client_id().clone(), entry });
                }
                continue;
            }
            stats.taken += 1;
            if delivery.qos == QoS::AtMostOnce {
                out.push(Outgoing::Publish { delivery, packet_id: None, dup: false });
                continue;
            }
            let packet_id = s.outbound_mut().allocate_packet_id();
            let state = if delivery.qos == QoS::AtLeastOnce {
                OutboundState::AwaitPubAck
            } else {
                OutboundState::AwaitPubRec
            };
            let recorded =
                s.record(|| Change::InFlight { client_id: self.client_id().clone(), entry, packet_id });
            // A QoS 2 message may go out only once its packet id is on disk: resent after a
            // crash with another id, the client would take it for a new message.
            if delivery.qos == QoS::ExactlyOnce {
                stats.gate = stats.gate.max(recorded);
            }
            s.outbound_mut().insert(packet_id, delivery.clone(), state, entry);
            out.push(Outgoing::Publish { delivery, packet_id: Some(packet_id), dup: false });
        }
        stats.more = s.mailbox.front().is_some_and(|q| {
            q.delivery.qos == QoS::AtMostOnce || s.outbound().has_room(window, q.delivery.weight(), max_bytes)
        });
        stats
    }

    /// Everything in flight, in the order it was first sent, to resend after a reconnect:
    /// PUBLISH with DUP for unacknowledged messages, PUBREL where PUBREC already came.
    pub fn resend_inflight(&self) -> Vec<Outgoing> {
        let s = self.state();
        s.outbound()
            .in_send_order()
            .into_iter()
            .map(|(packet_id, f)| match f.state {
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
        match s.outbound().get(packet_id) {
            Some(f) if f.state == OutboundState::AwaitPubAck => s.finish(self.client_id(), packet_id),
            _ => false,
        }
    }

    /// Handles a PUBREC. Returns whether the id was awaiting one; unless the receiver
    /// `refused` the message (an error reason code) it moves to
    /// [`OutboundState::AwaitPubComp`] and the caller sends PUBREL; a refusal ends the exchange.
    pub fn pubrec(&self, packet_id: u16, refused: bool) -> PubRecOutcome {
        let mut s = self.state();
        let entry = match s.outbound().get(packet_id) {
            Some(f) if f.state == OutboundState::AwaitPubRec => f.entry,
            // A repeated PUBREC: answer with PUBREL again.
            // (Its release is already journalled; output stays held behind the first PUBREL.)
            Some(f) if f.state == OutboundState::AwaitPubComp => {
                return PubRecOutcome::SendPubRel { durable_seq: None };
            }
            _ => return PubRecOutcome::Unknown,
        };
        if refused {
            s.finish(self.client_id(), packet_id);
            return PubRecOutcome::Ended;
        }
        if let Some(f) = s.outbound_mut().get_mut(packet_id) {
            f.state = OutboundState::AwaitPubComp;
        }
        let durable_seq = s.record(|| Change::Released { client_id: self.client_id().clone(), entry });
        PubRecOutcome::SendPubRel { durable_seq }
    }

    /// Handles a PUBCOMP. Returns false if the id was not awaiting one.
    pub fn pubcomp(&self, packet_id: u16) -> bool {
        let mut s = self.state();
        match s.outbound().get(packet_id) {
            Some(f) if f.state == OutboundState::AwaitPubComp => s.finish(self.client_id(), packet_id),
            _ => false,
        }
    }

    /// Forgets an in-flight message without an acknowledgement (it could not be sent: larger
    /// than the client's maximum packet size). Returns whether the id was in flight.
    pub fn discard_inflight(&self, packet_id: u16) -> bool {
        self.state().finish(self.client_id(), packet_id)
    }

    /// How many QoS 1/2 messages are in flight to the client.
    pub fn inflight_len(&self) -> usize {
        self.state().outbound().len()
    }

    /// Takes out every delivery that came through a shared subscription and is not yet
    /// acknowledged (queued, or PUBLISH sent without PUBACK/PUBREC), so the router can give it
    /// to another member of the group.
    pub fn take_shared_unacked(&self) -> Vec<Delivery> {
        let mut s = self.state();
        let queued = s.mailbox.take_unless(|q| q.delivery.shared.is_none());
        let mut done: Vec<u64> =
            queued.iter().filter(|q| q.delivery.qos != QoS::AtMostOnce).map(|q| q.entry).collect();
        let ids: Vec<u16> = s
            .outbound()
            .in_send_order()
            .into_iter()
            .filter(|(_, f)| f.delivery.shared.is_some() && f.state != OutboundState::AwaitPubComp)
            .map(|(id, _)| id)
            .collect();
        let unacked: Vec<Inflight> = ids.into_iter().filter_map(|id| s.outbound_mut().remove(id)).collect();
        done.extend(unacked.iter().map(|f| f.entry));
        for entry in done {
            s.record(|| Change::Done { client_id: self.client_id().clone(), entry });
        }
        unacked.into_iter().map(|f| f.delivery).chain(queued.into_iter().map(|q| q.delivery)).collect()
    }
}
