//! Incoming QoS 2 messages awaiting PUBREL: MQTT's exactly-once state on the receiving side.
//!
//! A message is routed when it first arrives; only its packet id stays, with a digest of the
//! message, until the client releases it. The digest tells a retransmission from a new message
//! that reuses the id; a liveness flag per id keeps ids restored from disk that the client never
//! mentions again from counting against its receive maximum.

use std::collections::BTreeMap;

use super::Session;
use crate::journal::Change;

/// An incoming QoS 2 message awaiting PUBREL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    /// The digest of its message; `None` if it was stored without one.
    digest: Option<u64>,
    /// Whether the attached connection has sent (or resent) it. Only those count against the
    /// receive maximum: ids restored from disk that the client never mentions again are stale,
    /// and must not lock the client out.
    live: bool,
}

/// The pending ids of one session.
#[derive(Debug)]
pub(super) struct Inbound {
    // A B-tree rather than a hash map: empty, it takes half the space, and every idle
    // connection has a session.
    pending: BTreeMap<u16, Pending>,
    /// How many entries of `pending` are live.
    live: usize,
}

impl Default for Inbound {
    fn default() -> Self {
        Inbound::EMPTY
    }
}

impl Inbound {
    /// No pending id.
    pub(super) const EMPTY: Inbound = Inbound { pending: BTreeMap::new(), live: 0 };

    /// Ids restored from disk: none is live until the client resends it.
    pub(super) fn restore(ids: Vec<(u16, Option<u64>)>) -> Self {
        let pending = ids.into_iter().map(|(id, digest)| (id, Pending { digest, live: false })).collect();
        Inbound { pending, live: 0 }
    }

    /// A new connection has sent none of the pending ids yet.
    pub(super) fn new_connection(&mut self) {
        self.pending.values_mut().for_each(|p| p.live = false);
        self.live = 0;
    }

    /// Every pending id with its digest (for a journal snapshot).
    pub(super) fn iter(&self) -> impl Iterator<Item = (u16, Option<u64>)> + '_ {
        self.pending.iter().map(|(&id, p)| (id, p.digest))
    }
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

impl Session {
    /// Records an incoming QoS 2 PUBLISH whose message has [`crate::model::digest`] `digest`.
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
        let inbound = s.inbound_mut();
        let known = inbound.pending.get(&packet_id).copied();
        if let Some(known) = known {
            if known.digest.map_or(dup, |d| d == digest) {
                if !known.live {
                    inbound.pending.insert(packet_id, Pending { digest: Some(digest), live: true });
                    inbound.live += 1;
                }
                return IncomingQos2::Duplicate;
            }
        }
        let counted = known.is_some_and(|k| k.live);
        let others = inbound.live - usize::from(counted);
        if window.is_some_and(|w| others >= w) {
            return IncomingQos2::WindowFull;
        }
        if !counted {
            inbound.live += 1;
        }
        inbound.pending.insert(packet_id, Pending { digest: Some(digest), live: true });
        let seq = s.record(|| Change::IncomingQos2 {
            client_id: self.client_id().clone(),
            packet_id,
            digest: Some(digest),
        });
        IncomingQos2::New { seq, reused: known.is_some(), others }
    }

    /// How many incoming QoS 2 messages await PUBREL, stale ones included.
    pub fn incoming_qos2_len(&self) -> usize {
        self.state().inbound().pending.len()
    }

    /// Handles a PUBREL; returns whether the id was known, and the journal sequence number
    /// PUBCOMP must wait for (once the client has PUBCOMP it may reuse the id, so the release
    /// must be on disk first, or a restart would take the new message for a duplicate).
    pub fn pubrel(&self, packet_id: u16) -> (bool, Option<u64>) {
        let mut s = self.state();
        let Some(inbound) = s.acks.as_deref_mut().map(|a| &mut a.inbound) else { return (false, None) };
        match inbound.pending.remove(&packet_id) {
            None => return (false, None),
            Some(p) if p.live => inbound.live -= 1,
            Some(_) => {}
        }
        let seq = s.record(|| Change::IncomingQos2 {
            client_id: self.client_id().clone(),
            packet_id,
            digest: None,
        });
        (true, seq)
    }
}
