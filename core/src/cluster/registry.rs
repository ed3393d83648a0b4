//! The cluster-wide session registry: which node owns an MQTT client id.
//!
//! The broker asks its [`SessionRegistry`] seam (installed by the cluster layer; absent on a
//! single node, where nothing here runs) before it takes a client id over locally: the
//! registry claims the id for this node cluster-wide, by compare-and-swap on one JetStream KV
//! record per client id, and has the previous owner close its connection. This file holds the
//! seam and the wire formats, which are sans-I/O: the record a node writes ([`Record`]) and
//! the takeover request a new owner sends the old one ([`TakeoverRequest`], [`TakeoverReply`]).
//! `docs/cluster.md` describes the protocol.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use crate::model::{QoS, RetainHandling, SessionKey, SubscribeOptions};
use crate::topic::SubscriptionFilter;

/// The longest record or takeover request a node reads, in bytes: they are a few dozen.
pub const MAX_MESSAGE_LEN: usize = 4096;

/// The longest takeover reply, in bytes (it carries the session's subscriptions): half of
/// NATS's default `max_payload`. A session whose subscriptions do not fit is not handed over.
pub const MAX_REPLY_LEN: usize = 512 * 1024;

/// What [`SessionRegistry::claim`] returns.
pub type ClaimFuture<'a> = Pin<Box<dyn Future<Output = Result<Handover, ClaimError>> + Send + 'a>>;

/// What the previous owner node handed over with the client id.
#[derive(Debug, Default)]
pub struct Handover {
    /// Whether it had a persistent session of the client, which this node now continues
    /// (CONNACK session present).
    pub resumed: bool,
    /// That session's subscriptions.
    pub subscriptions: Vec<(SubscriptionFilter, SubscribeOptions)>,
    /// Its in-flight messages (in send order) and queued ones (in queue order).
    pub entries: Vec<crate::session::RestoredEntry>,
    /// Its incoming QoS 2 packet ids awaiting PUBREL, with their messages' digests.
    pub incoming_qos2: Vec<(u16, Option<u64>)>,
}

/// The broker's seam to the cluster-wide session registry.
///
/// [`Broker::admit`](crate::broker::Broker::admit) calls [`claim`](Self::claim) with the key's
/// connect lock held, before it takes a live local connection over, and
/// [`still_owner`](Self::still_owner) right after it attached the new connection (a newer
/// claim elsewhere may have come while it attached: the connection is then closed as taken
/// over). [`Broker::end_session`](crate::broker::Broker::end_session) calls
/// [`released`](Self::released) when the key's session ends on this node.
pub trait SessionRegistry: Send + Sync + fmt::Debug {
    /// Makes this node the owner of `key` cluster-wide and has the previous owner, if another
    /// node, close its connection; with `resume` (the client asked to continue its session),
    /// that node hands its persistent session's subscriptions over. Bounded in time: past the
    /// bound, or with the registry unreachable, the claim fails and the client is refused.
    fn claim<'a>(&'a self, key: &'a SessionKey, resume: bool) -> ClaimFuture<'a>;
    /// Whether this node still owns `key` (no newer claim elsewhere since its last claim).
    fn still_owner(&self, key: &SessionKey) -> bool;
    /// The session of `key` ended on this node: its record goes (if it is still this node's).
    fn released(&self, key: &SessionKey);
}

/// Why a claim failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The registry did not answer in time (NATS unreachable, JetStream down, too much
    /// contention on the id).
    #[error("the cluster's session registry is unavailable")]
    Unavailable,
    /// The client id is too long for a registry key
    /// ([`MAX_KEY_LEN`](super::client_key::MAX_KEY_LEN)).
    #[error("the client id is too long for the cluster's session registry")]
    IdTooLong,
}

/// Why a record or takeover message is unreadable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryWireError {
    /// Longer than [`MAX_MESSAGE_LEN`] ([`MAX_REPLY_LEN`] for a reply).
    #[error("registry message of {len} bytes, more than the limit of {limit}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// Not the JSON object expected.
    #[error("registry message: {0}")]
    Json(#[from] serde_json::Error),
    /// The node name is not 1 to 64 ASCII letters, digits, `-` or `_`.
    #[error("registry message names node {0:?}, which is not a node name")]
    BadNode(String),
    /// A handed-over message has a topic, QoS or in-flight state MQTT does not allow.
    #[error("handed-over message on {topic:?}: {why}")]
    BadMessage {
        /// The topic (cut to 64 bytes).
        topic: String,
        /// What is wrong.
        why: String,
    },
    /// A handed-over subscription has a filter or option MQTT does not allow.
    #[error("handed-over subscription {filter:?}: {why}")]
    BadSubscription {
        /// The filter (cut to 64 bytes).
        filter: String,
        /// What is wrong.
        why: String,
    },
}

/// Whether `name` is a node name: 1 to 64 ASCII letters, digits, `-` or `_` (so one NATS
/// subject token).
pub fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, RegistryWireError> {
    parse_within(bytes, MAX_MESSAGE_LEN)
}

fn parse_within<'a, T: Deserialize<'a>>(bytes: &'a [u8], limit: usize) -> Result<T, RegistryWireError> {
    if bytes.len() > limit {
        return Err(RegistryWireError::TooLong { len: bytes.len(), limit });
    }
    Ok(serde_json::from_slice(bytes)?)
}

/// A client id's record in the registry bucket: the owning node. JSON, e.g.
/// `{"node":"b","instance":"3f9c0e7a12b4d605","since_ms":1764619200000}`; unknown fields are
/// ignored (a later version may add some).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The owner's node name (`[cluster] node`): takeover requests go to its subject.
    pub node: String,
    /// The owner's process instance (random at start, hex), which tells a restarted node from
    /// its previous run.
    pub instance: String,
    /// When the owner claimed the id, in milliseconds since the Unix epoch (for operators).
    pub since_ms: u64,
}

impl Record {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a record.
    pub fn decode(bytes: &[u8]) -> Result<Record, RegistryWireError> {
        let record: Record = parse(bytes)?;
        if !is_node_name(&record.node) {
            return Err(RegistryWireError::BadNode(record.node));
        }
        Ok(record)
    }
}

/// A new owner's request to the previous one (on the previous owner's takeover subject):
/// close the connection of `client_id`, which `node` claimed at `revision`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeoverRequest {
    /// The client id.
    pub client_id: String,
    /// The revision of the new owner's record: the old owner acts only if its own claim is
    /// older, so a late request never closes a newer connection.
    pub revision: u64,
    /// The new owner's node name.
    pub node: String,
    /// The client asked to continue its session: hand a persistent session's subscriptions
    /// over in the reply.
    #[serde(default)]
    pub resume: bool,
}

impl TakeoverRequest {
    /// The request's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a request.
    pub fn decode(bytes: &[u8]) -> Result<TakeoverRequest, RegistryWireError> {
        let request: TakeoverRequest = parse(bytes)?;
        if !is_node_name(&request.node) {
            return Err(RegistryWireError::BadNode(request.node));
        }
        Ok(request)
    }
}

/// What the previous owner did about a [`TakeoverRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TakeoverOutcome {
    /// It closed the client's live connection (and ends the session there).
    Closed,
    /// The session was offline there; it ends it.
    Offline,
    /// It had no session and no claim of the id.
    Unknown,
    /// Its own claim is newer than the request's: it kept its connection.
    Stale,
}

/// The previous owner's answer to a [`TakeoverRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeoverReply {
    /// What it did.
    pub outcome: TakeoverOutcome,
    /// It had a persistent session of the client and hands it over (asked with `resume`).
    #[serde(default)]
    pub resumed: bool,
    /// That session's subscriptions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<HandedSubscription>,
    /// Its in-flight messages (in send order), then its queued ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<super::handover::HandedMessage>,
    /// Its incoming QoS 2 packet ids awaiting PUBREL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incoming_qos2: Vec<super::handover::HandedQos2>,
    /// The checkpoint of its finished messages at the handover, as a record written then
    /// would carry it ([`super::session_record::SessionRecord::checkpoint_ms`]): the new owner
    /// replays the durable stream from it for what reached the old owner after the handover or
    /// no node at all. `None` (an owner of an earlier version): no replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ms: Option<u64>,
    /// The ids of the messages it finished since the checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finished: Vec<String>,
}

impl TakeoverReply {
    /// A reply that hands no session over.
    pub fn without_session(outcome: TakeoverOutcome) -> TakeoverReply {
        TakeoverReply {
            outcome,
            resumed: false,
            subscriptions: Vec::new(),
            messages: Vec::new(),
            incoming_qos2: Vec::new(),
            checkpoint_ms: None,
            finished: Vec::new(),
        }
    }

    /// The reply's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a reply (at most [`MAX_REPLY_LEN`] bytes).
    pub fn decode(bytes: &[u8]) -> Result<TakeoverReply, RegistryWireError> {
        parse_within(bytes, MAX_REPLY_LEN)
    }
}

/// One subscription of a handed-over session: the filter as the client sent it (`$share/...`
/// included) and its options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedSubscription {
    /// The filter's text.
    pub filter: String,
    /// The granted QoS (0, 1 or 2).
    pub qos: u8,
    /// MQTT 5 no-local.
    #[serde(default)]
    pub no_local: bool,
    /// MQTT 5 retain-as-published.
    #[serde(default)]
    pub retain_as_published: bool,
    /// MQTT 5 retain handling (0, 1 or 2).
    #[serde(default)]
    pub retain_handling: u8,
    /// MQTT 5 subscription identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_id: Option<u32>,
}

impl HandedSubscription {
    /// The wire form of a session's subscription.
    pub fn of(filter: &SubscriptionFilter, options: &SubscribeOptions) -> HandedSubscription {
        HandedSubscription {
            filter: filter.as_str().into_owned(),
            qos: options.qos as u8,
            no_local: options.no_local,
            retain_as_published: options.retain_as_published,
            retain_handling: options.retain_handling as u8,
            subscription_id: options.subscription_id,
        }
    }

    /// The subscription again, checked as a SUBSCRIBE would be.
    pub fn parse(&self) -> Result<(SubscriptionFilter, SubscribeOptions), RegistryWireError> {
        let bad = |why: String| RegistryWireError::BadSubscription {
            filter: self.filter.chars().take(64).collect(),
            why,
        };
        let filter = SubscriptionFilter::try_from(self.filter.as_str()).map_err(|e| bad(e.to_string()))?;
        let qos = QoS::try_from(self.qos).map_err(|e| bad(e.to_string()))?;
        let retain_handling =
            RetainHandling::try_from(self.retain_handling).map_err(|e| bad(e.to_string()))?;
        if self.subscription_id.is_some_and(|id| id == 0 || id > 268_435_455) {
            return Err(bad("a subscription identifier is 1 to 268,435,455".to_owned()));
        }
        let options = SubscribeOptions {
            qos,
            no_local: self.no_local,
            retain_as_published: self.retain_as_published,
            retain_handling,
            subscription_id: self.subscription_id,
        };
        Ok((filter, options))
    }
}

/// The subject on which node `node` answers [`TakeoverRequest`]s.
pub fn takeover_subject(node: &str) -> String {
    format!("mesgd.takeover.{node}")
}

/// Whether `key` is one the registry tracks: MQTT client ids (relay addresses are not
/// cluster-wide yet).
pub fn tracked(key: &SessionKey) -> bool {
    key.namespace == crate::model::Namespace::Mqtt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let r = Record { node: "b".into(), instance: "00ff".into(), since_ms: 7 };
        assert_eq!(Record::decode(&r.encode()).unwrap(), r);
        let q = TakeoverRequest { client_id: "é.x".into(), revision: 9, node: "a-1".into(), resume: true };
        assert_eq!(TakeoverRequest::decode(&q.encode()).unwrap(), q);
        let older = br#"{"client_id":"c","revision":1,"node":"a"}"#;
        assert!(!TakeoverRequest::decode(older).unwrap().resume, "resume defaults to false");
        for outcome in [
            TakeoverOutcome::Closed,
            TakeoverOutcome::Offline,
            TakeoverOutcome::Unknown,
            TakeoverOutcome::Stale,
        ] {
            let a = TakeoverReply::without_session(outcome);
            assert_eq!(TakeoverReply::decode(&a.encode()).unwrap(), a);
        }
        let filter = SubscriptionFilter::try_from("$share/g/a/+").unwrap();
        let options = SubscribeOptions {
            qos: QoS::ExactlyOnce,
            no_local: true,
            retain_as_published: true,
            retain_handling: RetainHandling::DoNotSend,
            subscription_id: Some(7),
        };
        let handed = HandedSubscription::of(&filter, &options);
        let a = TakeoverReply {
            outcome: TakeoverOutcome::Closed,
            resumed: true,
            subscriptions: vec![handed],
            messages: Vec::new(),
            incoming_qos2: vec![super::super::handover::HandedQos2 { packet_id: 3, digest: Some(9) }],
            checkpoint_ms: Some(1_700_000_000_000),
            finished: vec!["0000000000000007-3".into()],
        };
        let back = TakeoverReply::decode(&a.encode()).unwrap();
        assert_eq!(back, a);
        let (f, o) = back.subscriptions[0].parse().unwrap();
        assert_eq!((&*f.as_str(), o), ("$share/g/a/+", options));
        let later = br#"{"node":"b","instance":"1","since_ms":1,"lease":3}"#;
        assert_eq!(Record::decode(later).unwrap().node, "b", "unknown fields are ignored");
    }

    #[test]
    fn malformed_messages_are_refused() {
        let records: [(&[u8], &str); 6] = [
            (b"", "EOF"),
            (b"{}", "missing field `node`"),
            (br#"{"node":"a.b","instance":"1","since_ms":1}"#, "not a node name"),
            (br#"{"node":"","instance":"1","since_ms":1}"#, "not a node name"),
            (br#"{"node":"a","instance":1,"since_ms":1}"#, "invalid type"),
            (br#"{"node":"a","instance":"1","since_ms":-1}"#, "invalid value"),
        ];
        for (bytes, expected) in records {
            let err = Record::decode(bytes).unwrap_err().to_string();
            assert!(err.contains(expected), "{:?}: {err}", String::from_utf8_lossy(bytes));
        }
        let huge = vec![b' '; MAX_MESSAGE_LEN + 1];
        assert!(Record::decode(&huge).unwrap_err().to_string().contains("more than the limit"));
        let requests: [(&[u8], &str); 3] = [
            (br#"{"client_id":"c","revision":1,"node":"a b"}"#, "not a node name"),
            (br#"{"client_id":"c","node":"a"}"#, "missing field `revision`"),
            (b"[1]", "invalid type"),
        ];
        for (bytes, expected) in requests {
            let err = TakeoverRequest::decode(bytes).unwrap_err().to_string();
            assert!(err.contains(expected), "{:?}: {err}", String::from_utf8_lossy(bytes));
        }
        assert!(
            TakeoverReply::decode(br#"{"outcome":"gone"}"#)
                .unwrap_err()
                .to_string()
                .contains("unknown variant")
        );
        let subscriptions = [
            (r#"{"filter":"a/#/b","qos":1}"#, "a/#/b"),
            (r#"{"filter":"a","qos":3}"#, "\"a\""),
            (r#"{"filter":"a","qos":1,"retain_handling":3}"#, "\"a\""),
            (r#"{"filter":"a","qos":1,"subscription_id":0}"#, "subscription identifier"),
        ];
        for (json, expected) in subscriptions {
            let handed: HandedSubscription = serde_json::from_str(json).unwrap();
            let err = handed.parse().unwrap_err().to_string();
            assert!(err.contains(expected), "{json}: {err}");
        }
        let huge = vec![b' '; MAX_REPLY_LEN + 1];
        assert!(TakeoverReply::decode(&huge).unwrap_err().to_string().contains("more than the limit"));
    }
}
