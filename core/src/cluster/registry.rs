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

use crate::model::SessionKey;

/// The longest record or takeover message a node reads, in bytes: records are a few dozen.
pub const MAX_MESSAGE_LEN: usize = 4096;

/// What [`SessionRegistry::claim`] returns.
pub type ClaimFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ClaimError>> + Send + 'a>>;

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
    /// node, close its connection. Bounded in time: past the bound, or with the registry
    /// unreachable, the claim fails and the client is refused.
    fn claim<'a>(&'a self, key: &'a SessionKey) -> ClaimFuture<'a>;
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
    /// Longer than [`MAX_MESSAGE_LEN`].
    #[error("registry message of {0} bytes, more than the limit of {MAX_MESSAGE_LEN}")]
    TooLong(usize),
    /// Not the JSON object expected.
    #[error("registry message: {0}")]
    Json(#[from] serde_json::Error),
    /// The node name is not 1 to 64 ASCII letters, digits, `-` or `_`.
    #[error("registry message names node {0:?}, which is not a node name")]
    BadNode(String),
}

/// Whether `name` is a node name: 1 to 64 ASCII letters, digits, `-` or `_` (so one NATS
/// subject token).
pub fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, RegistryWireError> {
    if bytes.len() > MAX_MESSAGE_LEN {
        return Err(RegistryWireError::TooLong(bytes.len()));
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeoverReply {
    /// What it did.
    pub outcome: TakeoverOutcome,
}

impl TakeoverReply {
    /// The reply's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a reply.
    pub fn decode(bytes: &[u8]) -> Result<TakeoverReply, RegistryWireError> {
        parse(bytes)
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
        let q = TakeoverRequest { client_id: "é.x".into(), revision: 9, node: "a-1".into() };
        assert_eq!(TakeoverRequest::decode(&q.encode()).unwrap(), q);
        for outcome in [
            TakeoverOutcome::Closed,
            TakeoverOutcome::Offline,
            TakeoverOutcome::Unknown,
            TakeoverOutcome::Stale,
        ] {
            let a = TakeoverReply { outcome };
            assert_eq!(TakeoverReply::decode(&a.encode()).unwrap(), a);
        }
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
    }
}
