//! How a message travels between nodes: the subject carries the topic (see
//! [`mesgd_core::cluster::subject`]), the NATS payload is the message's payload unchanged, and
//! headers carry the rest.
//!
//! | header | value |
//! |---|---|
//! | `Mesgd-Node` | the publishing node's name |
//! | `Mesgd-Id` | `<instance>-<seq>`: the node instance (16 hex digits, drawn at start) and its message counter |
//! | `Mesgd-QoS` | `0`, `1` or `2`, the QoS it was published with |
//! | `Mesgd-Retain` | `1` when the retain flag is set (absent otherwise) |
//! | `Mesgd-Expiry` | live messages: the remaining message expiry interval in seconds |
//! | `Mesgd-Expires-At` | retained stream: the expiry as Unix seconds (a stored message outlives any instant) |
//! | `Mesgd-From` | the publisher's client id, base64url (relay `from`) |
//! | `Mesgd-Props` | MQTT 5 properties, base64url of a JSON object, only when there are any |
//! | `Mesgd-Msg-Id` | a QoS 1/2 message's identity in the durable stream (its `Nats-Msg-Id`), when it was stored |

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_nats::{HeaderMap, HeaderValue};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use mesgd_core::model::{Message, MessageId, MessageProperties, NodeId, Origin, QoS};
use mesgd_core::topic::TopicName;
use serde::{Deserialize, Serialize};

const NODE: &str = "Mesgd-Node";
const ID: &str = "Mesgd-Id";
const QOS: &str = "Mesgd-QoS";
const RETAIN: &str = "Mesgd-Retain";
const EXPIRY: &str = "Mesgd-Expiry";
const EXPIRES_AT: &str = "Mesgd-Expires-At";
const FROM: &str = "Mesgd-From";
const PROPS: &str = "Mesgd-Props";
const MSG_ID: &str = "Mesgd-Msg-Id";

/// Why a message from NATS could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// A header mesgd always sends is missing.
    #[error("header {0} is missing")]
    Missing(&'static str),
    /// A header's value does not parse.
    #[error("header {0} has an invalid value")]
    Invalid(&'static str),
    /// The subject is not one of mesgd's.
    #[error(transparent)]
    Subject(#[from] mesgd_core::cluster::subject::SubjectError),
}

/// The MQTT 5 properties in `Mesgd-Props`.
#[derive(Default, Serialize, Deserialize)]
struct Props {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pfi: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ct: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cd: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    up: Vec<(String, String)>,
}

/// Which expiry header to write: live messages carry the time left, stored ones the deadline.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ExpiryAs {
    /// `Mesgd-Expiry`, seconds left at `now`.
    Remaining(Instant),
    /// `Mesgd-Expires-At`, Unix seconds, with the broker's clock pair to convert.
    Deadline,
}

/// Every value written here is ASCII without CR or LF (a validated node name, digits, base64).
fn value(text: &str) -> HeaderValue {
    HeaderValue::from(text)
}

/// The headers of `message`, sent by node `node` (instance `instance`) as its `seq`th message.
pub(crate) fn encode(
    message: &Message,
    node: &str,
    (instance, seq): (u64, u64),
    expiry: ExpiryAs,
    wall: impl Fn(Instant) -> SystemTime,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(NODE, value(node));
    h.insert(ID, value(&format!("{instance:016x}-{seq}")));
    h.insert(QOS, value(&(message.qos as u8).to_string()));
    if message.retain {
        h.insert(RETAIN, value("1"));
    }
    if let Some(at) = message.expires_at {
        match expiry {
            ExpiryAs::Remaining(now) => {
                let left = message.remaining_expiry(now).unwrap_or(0);
                h.insert(EXPIRY, value(&left.to_string()));
            }
            ExpiryAs::Deadline => {
                let unix = wall(at).duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                h.insert(EXPIRES_AT, value(&unix.to_string()));
            }
        }
    }
    if let Some(from) = &message.origin.client_id {
        h.insert(FROM, value(&B64.encode(from.as_bytes())));
    }
    if let Some(id) = message.id {
        h.insert(MSG_ID, value(&id.to_string()));
    }
    let p = &message.properties;
    if !p.is_empty() {
        let props = Props {
            pfi: p.payload_format_indicator,
            ct: p.content_type.as_deref().map(str::to_owned),
            rt: p.response_topic.as_deref().map(str::to_owned),
            cd: p.correlation_data.as_ref().map(|d| B64.encode(d)),
            up: p.user_properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        if let Ok(json) = serde_json::to_vec(&props) {
            h.insert(PROPS, value(&B64.encode(json)));
        }
    }
    h
}

/// What the headers say about a message's origin, read before deciding to deliver it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sender {
    /// The node's name.
    pub(crate) node: NodeId,
    /// Its instance and the message's sequence number there.
    pub(crate) id: (u64, u64),
}

fn get<'h>(h: &'h HeaderMap, name: &'static str) -> Option<&'h str> {
    h.get(name).map(HeaderValue::as_str)
}

/// The sender of a message from NATS.
pub(crate) fn sender(h: &HeaderMap) -> Result<Sender, WireError> {
    let node = get(h, NODE).ok_or(WireError::Missing(NODE))?;
    let id = get(h, ID).ok_or(WireError::Missing(ID))?;
    let (instance, seq) = id.split_once('-').ok_or(WireError::Invalid(ID))?;
    let instance = u64::from_str_radix(instance, 16).map_err(|_| WireError::Invalid(ID))?;
    let seq = u64::from_str(seq).map_err(|_| WireError::Invalid(ID))?;
    Ok(Sender { node: Arc::from(node), id: (instance, seq) })
}

/// The message a NATS message from `sender` stands for, its topic already decoded.
pub(crate) fn decode(
    topic: TopicName,
    payload: Bytes,
    h: &HeaderMap,
    sender: &Sender,
    now: Instant,
    instant_of: impl Fn(SystemTime) -> Instant,
) -> Result<Message, WireError> {
    let qos = match get(h, QOS) {
        Some("0") => QoS::AtMostOnce,
        Some("1") => QoS::AtLeastOnce,
        Some("2") => QoS::ExactlyOnce,
        Some(_) => return Err(WireError::Invalid(QOS)),
        None => return Err(WireError::Missing(QOS)),
    };
    let retain = get(h, RETAIN) == Some("1");
    let expires_at = if let Some(left) = get(h, EXPIRY) {
        let secs = u64::from_str(left).map_err(|_| WireError::Invalid(EXPIRY))?;
        Some(now + Duration::from_secs(secs))
    } else if let Some(at) = get(h, EXPIRES_AT) {
        let unix = u64::from_str(at).map_err(|_| WireError::Invalid(EXPIRES_AT))?;
        Some(instant_of(SystemTime::UNIX_EPOCH + Duration::from_secs(unix)))
    } else {
        None
    };
    let client_id = match get(h, FROM) {
        Some(b64) => {
            let bytes = B64.decode(b64).map_err(|_| WireError::Invalid(FROM))?;
            Some(Arc::from(String::from_utf8(bytes).map_err(|_| WireError::Invalid(FROM))?))
        }
        None => None,
    };
    let id = match get(h, MSG_ID) {
        Some(id) => Some(MessageId::from_str(id).map_err(|()| WireError::Invalid(MSG_ID))?),
        None => None,
    };
    let properties = match get(h, PROPS) {
        Some(b64) => {
            let json = B64.decode(b64).map_err(|_| WireError::Invalid(PROPS))?;
            let p: Props = serde_json::from_slice(&json).map_err(|_| WireError::Invalid(PROPS))?;
            let cd = match p.cd {
                Some(cd) => Some(Bytes::from(B64.decode(cd).map_err(|_| WireError::Invalid(PROPS))?)),
                None => None,
            };
            MessageProperties {
                payload_format_indicator: p.pfi,
                content_type: p.ct.map(Arc::from),
                response_topic: p.rt.map(Arc::from),
                correlation_data: cd,
                user_properties: p.up.into_iter().map(|(k, v)| (Arc::from(k), Arc::from(v))).collect(),
            }
        }
        None => MessageProperties::default(),
    };
    Ok(Message {
        topic,
        payload,
        qos,
        retain,
        properties,
        expires_at,
        origin: Origin { session: None, client_id, node: Some(sender.node.clone()) },
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_survives_the_headers() {
        let now = Instant::now();
        let wall = SystemTime::now();
        let mut m = Message::new(
            TopicName::try_from("a/b").unwrap(),
            Bytes::from_static(b"x"),
            QoS::ExactlyOnce,
            true,
            Origin::client(None, Arc::from("client é")),
        )
        .with_expiry_interval(Some(30), now);
        m.properties.content_type = Some(Arc::from("text/plain"));
        m.properties.correlation_data = Some(Bytes::from_static(b"\x00\xff"));
        m.properties.user_properties = vec![(Arc::from("k"), Arc::from("v\nw"))];
        m.properties.payload_format_indicator = Some(1);
        m.properties.response_topic = Some(Arc::from("r/t"));
        m.id = Some(MessageId { instance: 0xabc, seq: 42 });
        let h = encode(&m, "n1", (0xabc, 7), ExpiryAs::Remaining(now), |_| wall);
        let s = sender(&h).unwrap();
        assert_eq!(s, Sender { node: Arc::from("n1"), id: (0xabc, 7) });
        let back = decode(m.topic.clone(), m.payload.clone(), &h, &s, now, |_| now).unwrap();
        assert_eq!(back.qos, QoS::ExactlyOnce);
        assert!(back.retain);
        assert_eq!(back.properties, m.properties);
        assert_eq!(back.remaining_expiry(now), Some(30));
        assert_eq!(back.origin.client_id.as_deref(), Some("client é"));
        assert_eq!(back.origin.node.as_deref(), Some("n1"));
        assert_eq!(back.id, m.id);
        assert_eq!(h.get(MSG_ID).map(HeaderValue::as_str), Some("0000000000000abc-42"));
    }

    #[test]
    fn bad_headers_are_refused_by_name() {
        let mut h = HeaderMap::new();
        assert!(matches!(sender(&h), Err(WireError::Missing(NODE))));
        h.insert(NODE, value("n"));
        h.insert(ID, value("zz-1"));
        assert!(matches!(sender(&h), Err(WireError::Invalid(ID))));
        h.insert(ID, value("1-2"));
        let s = sender(&h).unwrap();
        let t = TopicName::try_from("t").unwrap();
        let now = Instant::now();
        assert!(matches!(
            decode(t.clone(), Bytes::new(), &h, &s, now, |_| now),
            Err(WireError::Missing(QOS))
        ));
        h.insert(QOS, value("3"));
        assert!(matches!(
            decode(t.clone(), Bytes::new(), &h, &s, now, |_| now),
            Err(WireError::Invalid(QOS))
        ));
        h.insert(QOS, value("0"));
        let mut bad_id = h.clone();
        bad_id.insert(MSG_ID, value("abc-1"));
        assert!(matches!(
            decode(t.clone(), Bytes::new(), &bad_id, &s, now, |_| now),
            Err(WireError::Invalid(MSG_ID))
        ));
        h.insert(PROPS, value("!!"));
        assert!(matches!(decode(t, Bytes::new(), &h, &s, now, |_| now), Err(WireError::Invalid(PROPS))));
    }
}
