//! The protocol-neutral half of a session: the bounded queue of deliveries waiting for the
//! client, with its limits and drop count. Every front end drains it the same way; what a
//! delivery becomes on the wire (an MQTT PUBLISH, a relay `message` frame) is the front end's.

use std::collections::VecDeque;

use crate::model::{Delivery, QoS};

/// Queue limits for one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Messages waiting to be sent, at most.
    pub max_messages: usize,
    /// Bytes (topic + payload) waiting to be sent, at most.
    pub max_bytes: usize,
    /// Whether QoS 0 messages are queued while the client is offline.
    pub queue_qos0_offline: bool,
    /// Bytes (topic + payload) of QoS 1/2 messages in flight to the client, at most; one
    /// message is always let through when none is in flight, however large.
    pub max_inflight_bytes: usize,
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
    /// Not queued: the broker-wide budget for queued bytes is used up and this session had no
    /// older QoS 0 message to give up for it (counted in [`super::QueueBudget::dropped`]).
    OverBudget,
}

/// A delivery waiting in the queue, with its journal entry number.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) entry: u64,
    pub(super) delivery: Delivery,
}

/// The queue of one session.
#[derive(Debug)]
pub(super) struct Mailbox {
    queue: VecDeque<Queued>,
    bytes: usize,
    limits: QueueLimits,
    /// Messages the limits dropped over the session's life.
    dropped: u64,
}

impl Mailbox {
    pub(super) fn new(limits: QueueLimits) -> Self {
        Mailbox { queue: VecDeque::new(), bytes: 0, limits, dropped: 0 }
    }

    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn limits(&self) -> &QueueLimits {
        &self.limits
    }

    /// Drops the oldest QoS 0 message; returns its weight, or `None` if there is none.
    pub(super) fn drop_oldest_qos0(&mut self) -> Option<usize> {
        let oldest = self.queue.iter().position(|q| q.delivery.qos == QoS::AtMostOnce)?;
        let gone = self.queue.remove(oldest).map_or(0, |q| q.delivery.weight());
        self.bytes -= gone;
        Some(gone)
    }

    pub(super) fn front(&self) -> Option<&Queued> {
        self.queue.front()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Queued> {
        self.queue.iter()
    }

    /// Whether a delivery of `weight` bytes fits without dropping anything (one always fits an
    /// empty queue by bytes, however large).
    pub(super) fn fits(&self, weight: usize) -> bool {
        self.queue.len() < self.limits.max_messages
            && (self.queue.is_empty() || self.bytes + weight <= self.limits.max_bytes)
    }

    /// Whether a delivery of `weight` bytes fits in half the limits (one message at least, and
    /// any weight into an empty queue): where a producer that can wait stops, so that it leaves
    /// the other half to producers that cannot (the live path).
    pub(super) fn fits_in_half(&self, weight: usize) -> bool {
        self.queue.len() < (self.limits.max_messages / 2).max(1)
            && (self.queue.is_empty() || self.bytes + weight <= self.limits.max_bytes / 2)
    }

    /// Makes room for a delivery of `weight` bytes and `qos`, dropping the oldest QoS 0 messages
    /// first. Returns what the push will be (`Queued` or `QueuedDroppingOldest`), or `Dropped`
    /// when only QoS 1/2 messages are left and the new one does not fit (counted). `online`
    /// says whether a connection is attached: QoS 0 for an offline client is not queued unless
    /// the limits say so.
    pub(super) fn make_room(&mut self, weight: usize, qos: QoS, online: bool) -> Enqueued {
        if qos == QoS::AtMostOnce && !online && !self.limits.queue_qos0_offline {
            self.dropped += 1;
            return Enqueued::Dropped;
        }
        let mut outcome = Enqueued::Queued;
        while !self.fits(weight) {
            // QoS 0 messages are never journalled, so dropping one needs no record.
            match self.queue.iter().position(|q| q.delivery.qos == QoS::AtMostOnce) {
                Some(oldest_qos0) => {
                    let gone = self.queue.remove(oldest_qos0).map_or(0, |q| q.delivery.weight());
                    self.bytes -= gone;
                    self.dropped += 1;
                    outcome = Enqueued::QueuedDroppingOldest;
                }
                None => {
                    self.dropped += 1;
                    return Enqueued::Dropped;
                }
            }
        }
        outcome
    }

    /// Appends a delivery (after [`Mailbox::make_room`] said it fits).
    pub(super) fn push(&mut self, queued: Queued) {
        self.bytes += queued.delivery.weight();
        self.queue.push_back(queued);
    }

    /// Takes the oldest delivery out.
    pub(super) fn pop_front(&mut self) -> Option<Queued> {
        let q = self.queue.pop_front()?;
        self.bytes -= q.delivery.weight();
        Some(q)
    }

    /// Keeps the deliveries `keep` says yes to; returns the others, in order.
    pub(super) fn take_unless(&mut self, mut keep: impl FnMut(&Queued) -> bool) -> Vec<Queued> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for q in self.queue.drain(..) {
            if keep(&q) {
                kept.push_back(q);
            } else {
                self.bytes -= q.delivery.weight();
                taken.push(q);
            }
        }
        self.queue = kept;
        taken
    }

    /// Empties the queue.
    pub(super) fn take_all(&mut self) -> Vec<Queued> {
        self.bytes = 0;
        self.queue.drain(..).collect()
    }
}
