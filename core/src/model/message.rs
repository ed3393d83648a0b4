//! The application message as the router sees it, whatever protocol brought it in.
//!
//! A [`Message`] is built once per PUBLISH (or relay `publish`, or will) and shared by `Arc`
//! between every subscriber queue, the retained store and the persistence layer: the payload is
//! a reference-counted [`Bytes`], never copied per subscriber.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::QoS;
use crate::topic::TopicName;

/// A stable 64-bit digest of a message's topic and payload (FNV-1a), kept with an incoming
/// QoS 2 packet id so that a retransmission can be told from a new message that reuses the id.
/// Stable across releases and restarts, as it is stored; not a security measure (a client can
/// only confuse itself with a collision).
pub fn digest(topic: &str, payload: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let len = (topic.len() as u64).to_le_bytes();
    for &b in len.iter().chain(topic.as_bytes()).chain(payload) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A process-unique session identifier, used for no-local and for shared-subscription
/// bookkeeping (client ids can be reused by a new session; these numbers never are).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// A cluster node's name, as `[cluster] node` sets it.
pub type NodeId = Arc<str>;

/// Where a message came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The publishing session (for no-local), if a client published it.
    pub session: Option<SessionId>,
    /// The publisher's client id (`from` in the relay protocol), if any.
    pub client_id: Option<Arc<str>>,
    /// The cluster node it was published on, when it came from another node; `None` for a
    /// message published here (it is forwarded to the cluster, one from elsewhere never is).
    pub node: Option<NodeId>,
}

impl Origin {
    /// A message the broker itself produced (`$SYS`, a will of a session that is gone).
    pub const BROKER: Origin = Origin { session: None, client_id: None, node: None };

    /// A message published here by a client.
    pub fn client(session: Option<SessionId>, client_id: Arc<str>) -> Self {
        Origin { session, client_id: Some(client_id), node: None }
    }
}

/// The protocol-neutral properties that travel with a message (MQTT 5 names; other front ends
/// map what they have onto them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageProperties {
    /// 1 = the payload is UTF-8 text.
    pub payload_format_indicator: Option<u8>,
    /// A MIME-like description of the payload.
    pub content_type: Option<Arc<str>>,
    /// The topic for a response.
    pub response_topic: Option<Arc<str>>,
    /// Opaque data that ties a response to its request.
    pub correlation_data: Option<Bytes>,
    /// Application-defined name/value pairs, forwarded unchanged and in order.
    pub user_properties: Vec<(Arc<str>, Arc<str>)>,
}

impl MessageProperties {
    /// Whether there is nothing to forward (the common case, encoded without properties).
    pub fn is_empty(&self) -> bool {
        self.payload_format_indicator.is_none()
            && self.content_type.is_none()
            && self.response_topic.is_none()
            && self.correlation_data.is_none()
            && self.user_properties.is_empty()
    }
}

/// An application message in flight through the broker.
#[derive(Clone, Debug)]
pub struct Message {
    /// The concrete topic.
    pub topic: TopicName,
    /// The payload, shared by every copy.
    pub payload: Bytes,
    /// The QoS it was published with (each subscriber receives `min(this, granted)`).
    pub qos: QoS,
    /// The retain flag it was published with.
    pub retain: bool,
    /// Forwarded properties.
    pub properties: MessageProperties,
    /// When it expires (MQTT 5 message expiry interval), on the monotonic clock.
    pub expires_at: Option<Instant>,
    /// Who published it.
    pub origin: Origin,
    /// Its identity in the cluster's durable stream of QoS 1/2 messages, when it was stored
    /// there (set by the publishing node, carried by every copy between nodes), so that a
    /// session recovered on another node can tell what it already had.
    pub id: Option<MessageId>,
}

/// A QoS 1/2 message's identity in the cluster: the storing node's process instance and the
/// message's store number there (the stream's `Nats-Msg-Id`, `<instance as 16 hex>-<number>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    /// The node instance (random at its start).
    pub instance: u64,
    /// The store number on that instance.
    pub seq: u64,
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}-{}", self.instance, self.seq)
    }
}

impl std::str::FromStr for MessageId {
    type Err = ();

    /// The form [`MessageId`]'s `Display` writes; nothing else.
    fn from_str(s: &str) -> Result<Self, ()> {
        let (instance, seq) = s.split_once('-').ok_or(())?;
        if instance.len() != 16 || !instance.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(());
        }
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        let instance = u64::from_str_radix(instance, 16).map_err(|_| ())?;
        let seq = seq.parse().map_err(|_| ())?;
        Ok(MessageId { instance, seq })
    }
}

impl Message {
    /// A message with no properties and no expiry.
    pub fn new(topic: TopicName, payload: Bytes, qos: QoS, retain: bool, origin: Origin) -> Self {
        Message {
            topic,
            payload,
            qos,
            retain,
            properties: MessageProperties::default(),
            expires_at: None,
            origin,
            id: None,
        }
    }

    /// Sets the expiry from an MQTT 5 message expiry interval (seconds), counted from `now`.
    pub fn with_expiry_interval(mut self, interval_s: Option<u32>, now: Instant) -> Self {
        self.expires_at = interval_s.map(|s| now + Duration::from_secs(u64::from(s)));
        self
    }

    /// Whether the message has expired at `now`.
    pub fn is_expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// The remaining lifetime to send with the message (whole seconds, rounded up so a message
    /// that has not expired never goes out with 0), or `None` if it never expires.
    pub fn remaining_expiry(&self, now: Instant) -> Option<u32> {
        self.expires_at.map(|at| {
            let left = at.saturating_duration_since(now);
            let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            u32::try_from(secs).unwrap_or(u32::MAX)
        })
    }

    /// The payload's size plus the topic's, the figure queue byte limits count.
    pub fn weight(&self) -> usize {
        self.payload.len() + self.topic.as_str().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_expiry_rounds_up_and_reaches_zero_only_when_expired() {
        let now = Instant::now();
        let m = Message::new(
            TopicName::try_from("a").unwrap(),
            Bytes::new(),
            QoS::AtMostOnce,
            false,
            Origin::BROKER,
        )
        .with_expiry_interval(Some(10), now);
        assert_eq!(m.remaining_expiry(now), Some(10));
        assert_eq!(m.remaining_expiry(now + Duration::from_millis(2500)), Some(8));
        assert!(!m.is_expired(now + Duration::from_millis(9999)));
        assert!(m.is_expired(now + Duration::from_secs(10)));
        assert_eq!(m.remaining_expiry(now + Duration::from_secs(11)), Some(0));
    }
}
