//! A persistent session's copy in the cluster, for recovery after its node died: one record per
//! client id in a KV bucket, written by the node that owns the client id (sans-I/O: the format,
//! its checks, and which journal changes must be in it before a packet leaves; `mesgd-cluster`
//! writes and reads it).
//!
//! The record is a snapshot of what the node's journal records for the session — the same
//! subscriptions, queued and in-flight messages (with packet ids and states) and incoming QoS 2
//! ids as a live takeover hands over ([`super::handover`]), in the same forms — plus who wrote
//! it: the node and the session registry revision at which that node holds the client id. The
//! revision fences: a node whose claim is older than the one in the stored record does not
//! overwrite it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::handover::{HandedMessage, HandedQos2};
use super::registry::{HandedSubscription, RegistryWireError, is_node_name};
use crate::journal::Change;
use crate::model::QoS;

/// The longest session record, in bytes: half of NATS's default `max_payload`, as a takeover
/// reply. A session whose record would be longer is not copied (logged and counted).
pub const MAX_RECORD_LEN: usize = 512 * 1024;

/// A persistent session as the cluster keeps it. JSON; unknown fields are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The node that wrote it (`[cluster] node`).
    pub node: String,
    /// The session registry revision at which that node holds the client id.
    pub registry_revision: u64,
    /// When it was written, in milliseconds since the Unix epoch.
    pub written_ms: u64,
    /// The session expiry interval in seconds; `None`: the session never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_s: Option<u32>,
    /// Its subscriptions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<HandedSubscription>,
    /// Its in-flight messages (in send order), then its queued ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<HandedMessage>,
    /// Its incoming QoS 2 packet ids awaiting PUBREL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incoming_qos2: Vec<HandedQos2>,
    /// Where a replay of the durable stream starts, in milliseconds since the Unix epoch
    /// ([`super::replay`]); `None` (a record of an earlier version): no replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ms: Option<u64>,
    /// The ids ([`crate::model::MessageId`]) of the messages it finished since the checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finished: Vec<String>,
}

impl SessionRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a record (at most [`MAX_RECORD_LEN`] bytes). Its subscriptions and messages are
    /// checked one by one when they are taken into a session
    /// ([`HandedSubscription::parse`], [`HandedMessage::parse`]).
    pub fn decode(bytes: &[u8]) -> Result<SessionRecord, RegistryWireError> {
        if bytes.len() > MAX_RECORD_LEN {
            return Err(RegistryWireError::TooLong { len: bytes.len(), limit: MAX_RECORD_LEN });
        }
        let record: SessionRecord = serde_json::from_slice(bytes)?;
        if !is_node_name(&record.node) {
            return Err(RegistryWireError::BadNode(record.node));
        }
        Ok(record)
    }

    /// Whether the session had expired by `now_ms` (its node died while it was connected, so its
    /// expiry is counted from the last write, the latest moment it is known to have lived).
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expiry_s.is_some_and(|s| self.written_ms.saturating_add(u64::from(s) * 1000) < now_ms)
    }
}

/// Which session a change is about, if it is about a session.
pub fn session_of(change: &Change) -> Option<&Arc<str>> {
    match change {
        Change::SessionOpened { client_id, .. }
        | Change::SessionResumed { client_id, .. }
        | Change::SessionDisconnected { client_id, .. }
        | Change::SessionEnded { client_id }
        | Change::Subscribed { client_id, .. }
        | Change::Unsubscribed { client_id, .. }
        | Change::Queued { client_id, .. }
        | Change::InFlight { client_id, .. }
        | Change::Released { client_id, .. }
        | Change::Done { client_id, .. }
        | Change::IncomingQos2 { client_id, .. } => Some(client_id),
        _ => None,
    }
}

/// Which changes the packet that follows must wait for until the session's record holds them:
/// what exactly-once across the node's death rests on (the packet id a QoS 2 message is sent
/// with, a PUBREC received, an incoming QoS 2 id before its PUBREC) and a subscription. The
/// rest (queued messages, completions, QoS 1 packet ids) is written within the write delay.
///
/// A change names its session's entry, not the entry's QoS: the QoS 1 entries are learnt from
/// their `Queued` changes and forgotten at `Done`. An entry whose `Queued` was not seen (a
/// session restored from disk before the journal was installed) counts as QoS 2: its packet
/// id waits (fail closed).
#[derive(Debug, Default)]
pub struct CopyFirst {
    /// Entries queued at QoS 0 or 1, per client id.
    relaxed: HashMap<Arc<str>, HashSet<u64>>,
}

impl CopyFirst {
    /// Whether `change` must be in the record before the packet after it leaves; learns from it.
    pub fn must_be_copied_first(&mut self, change: &Change) -> bool {
        match change {
            Change::Queued { client_id, entry, delivery } => {
                if delivery.qos != QoS::ExactlyOnce {
                    self.relaxed.entry(client_id.clone()).or_default().insert(*entry);
                }
                false
            }
            Change::InFlight { client_id, entry, .. } => {
                !self.relaxed.get(client_id).is_some_and(|entries| entries.contains(entry))
            }
            Change::Done { client_id, entry } => {
                if let Some(entries) = self.relaxed.get_mut(client_id) {
                    entries.remove(entry);
                    if entries.is_empty() {
                        self.relaxed.remove(client_id);
                    }
                }
                false
            }
            Change::SessionOpened { client_id, .. } | Change::SessionEnded { client_id } => {
                self.relaxed.remove(client_id);
                false
            }
            Change::Released { .. } | Change::Subscribed { .. } | Change::Unsubscribed { .. } => true,
            Change::IncomingQos2 { digest, .. } => digest.is_some(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> SessionRecord {
        SessionRecord {
            node: "a".into(),
            registry_revision: 7,
            written_ms: 1_000,
            expiry_s: Some(2),
            subscriptions: vec![HandedSubscription {
                filter: "t/#".into(),
                qos: 2,
                no_local: false,
                retain_as_published: false,
                retain_handling: 0,
                subscription_id: None,
            }],
            messages: Vec::new(),
            incoming_qos2: vec![HandedQos2 { packet_id: 4, digest: Some(1) }],
            checkpoint_ms: Some(500),
            finished: vec!["0000000000000007-3".into()],
        }
    }

    #[test]
    fn a_record_round_trips_and_expires_after_its_expiry() {
        let r = record();
        assert_eq!(SessionRecord::decode(&r.encode()).unwrap(), r);
        assert!(!r.expired(3_000));
        assert!(r.expired(3_001));
        let never = SessionRecord { expiry_s: None, ..r };
        assert!(!never.expired(u64::MAX));
    }

    fn queued(entry: u64, qos: QoS) -> Change {
        let message = crate::model::Message::new(
            crate::topic::TopicName::try_from("t").unwrap(),
            bytes::Bytes::from_static(b"m"),
            qos,
            false,
            crate::model::Origin::BROKER,
        );
        let delivery = crate::model::Delivery {
            message: Arc::new(message),
            qos,
            retain: false,
            subscription_ids: Default::default(),
            shared: None,
        };
        Change::Queued { client_id: Arc::from("c"), entry, delivery }
    }

    #[test]
    fn only_qos_2_packet_ids_releases_and_incoming_ids_are_copied_first() {
        let mut first = CopyFirst::default();
        let in_flight = |entry| Change::InFlight { client_id: Arc::from("c"), entry, packet_id: 1 };
        assert!(!first.must_be_copied_first(&queued(1, QoS::AtLeastOnce)));
        assert!(!first.must_be_copied_first(&queued(2, QoS::ExactlyOnce)));
        assert!(!first.must_be_copied_first(&in_flight(1)), "a QoS 1 packet id");
        assert!(first.must_be_copied_first(&in_flight(2)), "a QoS 2 packet id");
        assert!(first.must_be_copied_first(&in_flight(3)), "an entry never seen queued counts as QoS 2");
        assert!(first.must_be_copied_first(&Change::Released { client_id: Arc::from("c"), entry: 2 }));
        assert!(!first.must_be_copied_first(&Change::Done { client_id: Arc::from("c"), entry: 1 }));
        assert!(first.must_be_copied_first(&in_flight(1)), "forgotten once done");
        let incoming = |digest| Change::IncomingQos2 { client_id: Arc::from("c"), packet_id: 5, digest };
        assert!(first.must_be_copied_first(&incoming(Some(1))));
        assert!(!first.must_be_copied_first(&incoming(None)), "a PUBREL's release");
        assert!(first.relaxed.is_empty());
    }

    #[test]
    fn malformed_records_are_refused() {
        let cases: [(&[u8], &str); 4] = [
            (b"", "EOF"),
            (br#"{"node":"a"}"#, "missing field `registry_revision`"),
            (br#"{"node":"a b","registry_revision":1,"written_ms":1}"#, "not a node name"),
            (br#"{"node":"a","registry_revision":-1,"written_ms":1}"#, "invalid value"),
        ];
        for (bytes, expected) in cases {
            let err = SessionRecord::decode(bytes).unwrap_err().to_string();
            assert!(err.contains(expected), "{:?}: {err}", String::from_utf8_lossy(bytes));
        }
        let huge = vec![b' '; MAX_RECORD_LEN + 1];
        assert!(SessionRecord::decode(&huge).unwrap_err().to_string().contains("more than the limit"));
    }
}
