//! The queued and in-flight messages of a persistent session that moves to another node with
//! its client, as the previous owner's takeover reply carries them (sans-I/O: the format and
//! its checks; `mesgd-cluster` sends it).
//!
//! Each message is one JSON object: the message (topic, payload in base64, QoS, retain flag,
//! MQTT 5 properties, seconds of expiry left, the publisher's client id), how it is delivered
//! to this subscriber (QoS, retain flag, subscription identifiers, shared group), and, while in
//! flight, its packet id and state (`1` awaiting PUBACK, `2` awaiting PUBREC, `3` PUBREL sent,
//! awaiting PUBCOMP). Incoming QoS 2 packet ids awaiting PUBREL travel with their message
//! digests, so that the client's retransmission on the new node is recognised and routed once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

use super::registry::RegistryWireError;
use crate::model::{Delivery, Message, MessageId, MessageProperties, Origin, QoS, SharedRoute};
use crate::session::{OutboundState, RestoredEntry};
use crate::topic::TopicName;

/// One queued or in-flight message of a handed-over session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedMessage {
    /// The topic.
    pub topic: String,
    /// The payload, base64.
    pub payload: String,
    /// The QoS it was published with.
    pub qos: u8,
    /// The message's retain flag.
    #[serde(default)]
    pub retain: bool,
    /// Seconds of message expiry left when handed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_s: Option<u32>,
    /// The publisher's client id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// MQTT 5 properties: payload format indicator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfi: Option<u8>,
    /// Content type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Response topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_topic: Option<String>,
    /// Correlation data, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_data: Option<String>,
    /// User properties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_properties: Vec<(String, String)>,
    /// The QoS it is delivered with to this subscriber.
    pub delivery_qos: u8,
    /// The retain flag it is delivered with.
    #[serde(default)]
    pub delivery_retain: bool,
    /// Subscription identifiers of the matching subscriptions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscription_ids: Vec<u32>,
    /// The shared subscription (`$share/<group>/<filter>`) it came through, with its group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<(String, String)>,
    /// While in flight: the packet id it was sent with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_id: Option<u16>,
    /// While in flight: 1 awaiting PUBACK, 2 awaiting PUBREC, 3 awaiting PUBCOMP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<u8>,
    /// The message's identity in the durable stream ([`MessageId`]), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// An incoming QoS 2 packet id awaiting PUBREL, with its message's digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedQos2 {
    /// The packet id.
    pub packet_id: u16,
    /// The message's [`crate::model::digest`], when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<u64>,
}

fn qos_of(n: u8) -> Option<QoS> {
    QoS::try_from(n).ok()
}

impl HandedMessage {
    /// The wire form of a session's queue entry at `now`.
    pub fn of(entry: &RestoredEntry, now: Instant) -> HandedMessage {
        let d = &entry.delivery;
        let m = &d.message;
        let p = &m.properties;
        let (packet_id, state) = match entry.inflight {
            Some((id, s)) => (
                Some(id),
                Some(match s {
                    OutboundState::AwaitPubAck => 1,
                    OutboundState::AwaitPubRec => 2,
                    OutboundState::AwaitPubComp => 3,
                }),
            ),
            None => (None, None),
        };
        HandedMessage {
            topic: m.topic.as_str().to_owned(),
            payload: B64.encode(&m.payload),
            qos: m.qos as u8,
            retain: m.retain,
            expiry_s: m.remaining_expiry(now),
            from: m.origin.client_id.as_deref().map(str::to_owned),
            pfi: p.payload_format_indicator,
            content_type: p.content_type.as_deref().map(str::to_owned),
            response_topic: p.response_topic.as_deref().map(str::to_owned),
            correlation_data: p.correlation_data.as_ref().map(|c| B64.encode(c)),
            user_properties: p.user_properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            delivery_qos: d.qos as u8,
            delivery_retain: d.retain,
            subscription_ids: d.subscription_ids.to_vec(),
            shared: d.shared.as_ref().map(|s| (s.group.to_string(), s.subscription.to_string())),
            packet_id,
            state,
            id: m.id.map(|id| id.to_string()),
        }
    }

    /// The queue entry again (entry number 0: the adopting session numbers it), checked: the
    /// topic, the QoS values, and an in-flight state that fits the delivery's QoS. `node` is
    /// the node it came from (the message is never forwarded again).
    pub fn parse(&self, node: &Arc<str>, now: Instant) -> Result<RestoredEntry, RegistryWireError> {
        let bad = |why: &str| RegistryWireError::BadMessage {
            topic: self.topic.chars().take(64).collect(),
            why: why.to_owned(),
        };
        let topic = TopicName::try_from(self.topic.as_str()).map_err(|e| bad(&e.to_string()))?;
        let qos = qos_of(self.qos).ok_or_else(|| bad("QoS is 0, 1 or 2"))?;
        let delivery_qos = qos_of(self.delivery_qos).ok_or_else(|| bad("delivery QoS is 0, 1 or 2"))?;
        let payload = B64.decode(&self.payload).map_err(|_| bad("the payload is not base64"))?;
        let correlation_data = match &self.correlation_data {
            Some(c) => Some(B64.decode(c).map_err(|_| bad("the correlation data is not base64"))?.into()),
            None => None,
        };
        let inflight = match (self.packet_id, self.state) {
            (None, None) => None,
            (Some(0), _) => return Err(bad("packet id 0")),
            (Some(id), Some(s)) => {
                let state = match (s, delivery_qos) {
                    (1, QoS::AtLeastOnce) => OutboundState::AwaitPubAck,
                    (2, QoS::ExactlyOnce) => OutboundState::AwaitPubRec,
                    (3, QoS::ExactlyOnce) => OutboundState::AwaitPubComp,
                    _ => return Err(bad("the in-flight state does not fit the delivery QoS")),
                };
                Some((id, state))
            }
            _ => return Err(bad("a packet id goes with a state")),
        };
        let id = match &self.id {
            Some(id) => Some(id.parse::<MessageId>().map_err(|()| bad("the id is not <instance>-<number>"))?),
            None => None,
        };
        let properties = MessageProperties {
            payload_format_indicator: self.pfi,
            content_type: self.content_type.as_deref().map(Arc::from),
            response_topic: self.response_topic.as_deref().map(Arc::from),
            correlation_data,
            user_properties: self
                .user_properties
                .iter()
                .map(|(k, v)| (Arc::from(&**k), Arc::from(&**v)))
                .collect(),
        };
        let message = Message {
            topic,
            payload: payload.into(),
            qos,
            retain: self.retain,
            properties,
            expires_at: self.expiry_s.map(|s| now + Duration::from_secs(u64::from(s))),
            origin: Origin {
                session: None,
                client_id: self.from.as_deref().map(Arc::from),
                node: Some(node.clone()),
            },
            id,
        };
        let delivery = Delivery {
            message: Arc::new(message),
            qos: delivery_qos,
            retain: self.delivery_retain,
            subscription_ids: self.subscription_ids.iter().copied().collect(),
            shared: self
                .shared
                .as_ref()
                .map(|(g, s)| SharedRoute { group: Arc::from(&**g), subscription: Arc::from(&**s) }),
        };
        Ok(RestoredEntry { entry: 0, delivery, inflight })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(inflight: Option<(u16, OutboundState)>) -> RestoredEntry {
        let mut m = Message::new(
            TopicName::try_from("a/b").unwrap(),
            bytes::Bytes::from_static(b"\x00payload"),
            QoS::ExactlyOnce,
            true,
            Origin::client(None, Arc::from("pub")),
        );
        m.properties.correlation_data = Some(bytes::Bytes::from_static(b"cd"));
        m.properties.user_properties = vec![(Arc::from("k"), Arc::from("v"))];
        m.id = Some(MessageId { instance: 0xfeed, seq: 12 });
        let delivery = Delivery {
            message: Arc::new(m),
            qos: QoS::ExactlyOnce,
            retain: false,
            subscription_ids: [7].into_iter().collect(),
            shared: None,
        };
        RestoredEntry { entry: 9, delivery, inflight }
    }

    #[test]
    fn a_message_round_trips() {
        let now = Instant::now();
        let node: Arc<str> = Arc::from("a");
        for inflight in [None, Some((3, OutboundState::AwaitPubRec)), Some((4, OutboundState::AwaitPubComp))]
        {
            let e = entry(inflight);
            let handed = HandedMessage::of(&e, now);
            let json = serde_json::to_string(&handed).unwrap();
            let back: HandedMessage = serde_json::from_str(&json).unwrap();
            let r = back.parse(&node, now).unwrap();
            assert_eq!(r.inflight, inflight);
            assert_eq!(r.delivery.message.payload, e.delivery.message.payload);
            assert_eq!(r.delivery.message.properties, e.delivery.message.properties);
            assert_eq!(r.delivery.message.origin.client_id.as_deref(), Some("pub"));
            assert_eq!(r.delivery.message.origin.node.as_deref(), Some("a"));
            assert_eq!(r.delivery.subscription_ids.as_slice(), [7]);
            assert_eq!(r.delivery.message.id, e.delivery.message.id);
            assert!(r.delivery.message.retain && !r.delivery.retain);
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        let node: Arc<str> = Arc::from("a");
        let good = HandedMessage::of(&entry(None), Instant::now());
        type Spoil = fn(&mut HandedMessage);
        let cases: [(Spoil, &str); 7] = [
            (|m| m.id = Some("12-x".into()), "the id is not"),
            (|m| m.topic = "a/+".into(), "a/+"),
            (|m| m.qos = 3, "QoS is 0, 1 or 2"),
            (|m| m.payload = "!!".into(), "not base64"),
            (|m| (m.packet_id, m.state) = (Some(0), Some(2)), "packet id 0"),
            (|m| (m.packet_id, m.state) = (Some(1), Some(1)), "does not fit"),
            (|m| m.packet_id = Some(5), "goes with a state"),
        ];
        for (spoil, expected) in cases {
            let mut m = good.clone();
            spoil(&mut m);
            let err = m.parse(&node, Instant::now()).unwrap_err().to_string();
            assert!(err.contains(expected), "{m:?}: {err}");
        }
    }
}
