//! The relay bucket's records besides the address records and alias bindings: the waiter of a
//! game (matchmaking across nodes) and each node's figures (the relay-wide counts). JSON, like
//! the address records, so that an operator reading the bucket reads them too; a field a later
//! version adds is ignored.
//!
//! | key | value |
//! |---|---|
//! | `g.<game token>` | the game's waiter: `{"node":"b","instance":"3f9c0e7a12b4d605","addr":"alice","ticket":7}` |
//! | `n.<node>` | the node's figures: `{"instance":"3f9c0e7a12b4d605","addresses":12,"connections":15,"max_connections":100000}` |
//!
//! The game token is the address token of the game tag ([`address_token`]). Every field is
//! checked when read ([`RelayRecordError`], malformed-input tables below; the `cluster_relay`
//! fuzz target reads records too).

use serde::{Deserialize, Serialize};

use super::registry::{MAX_MESSAGE_LEN, is_node_name};
use super::relay::address_token;
use crate::relay::validate_address;

/// Why a record of the relay bucket could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayRecordError {
    /// Longer than the bucket's records may be.
    #[error("relay record of {0} bytes, more than {MAX_MESSAGE_LEN}")]
    TooLong(usize),
    /// Not the JSON object expected.
    #[error("relay record: {0}")]
    Json(#[from] serde_json::Error),
    /// The node name is not 1 to 64 ASCII letters, digits, `-` or `_`.
    #[error("relay record names node {0:?}, which is not a node name")]
    Node(String),
    /// The instance is not 16 lowercase hex digits.
    #[error("relay record instance is not 16 lowercase hex digits")]
    Instance,
    /// The address is empty or over 256 characters.
    #[error("relay record address is not a relay address")]
    Address,
}

/// A process instance as records write it: 16 lowercase hex digits.
pub fn instance_text(instance: u64) -> String {
    format!("{instance:016x}")
}

/// Reads an instance written by [`instance_text`].
pub fn parse_instance(text: &str) -> Option<u64> {
    let hex = text.len() == 16 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    hex.then(|| u64::from_str_radix(text, 16).ok()).flatten()
}

fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, RelayRecordError> {
    if bytes.len() > MAX_MESSAGE_LEN {
        return Err(RelayRecordError::TooLong(bytes.len()));
    }
    Ok(serde_json::from_slice(bytes)?)
}

fn check_node(node: &str, instance: &str) -> Result<u64, RelayRecordError> {
    if !is_node_name(node) {
        return Err(RelayRecordError::Node(node.to_owned()));
    }
    parse_instance(instance).ok_or(RelayRecordError::Instance)
}

/// The KV key of `game`'s waiter: `g.` and the address token of the game tag.
pub fn game_key(game: &str) -> String {
    format!("g.{}", address_token(game))
}

/// The one caller waiting under a game tag in the whole cluster (a caller that finds one is
/// paired with it, so there is never more than one), and where it waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// Its node.
    pub node: String,
    /// Its node's process instance ([`instance_text`]).
    pub instance: String,
    /// Its address.
    pub addr: String,
    /// Its connection on that node (so that a later connection of the address is not taken
    /// for it).
    pub ticket: u64,
}

impl Waiter {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a record, checking every field.
    pub fn decode(bytes: &[u8]) -> Result<Waiter, RelayRecordError> {
        let waiter: Waiter = parse(bytes)?;
        check_node(&waiter.node, &waiter.instance)?;
        validate_address(&waiter.addr).map_err(|_| RelayRecordError::Address)?;
        Ok(waiter)
    }

    /// Its node's instance.
    pub fn instance_id(&self) -> Option<u64> {
        parse_instance(&self.instance)
    }
}

/// The KV key of `node`'s figures: `n.<node>` (a node name is one subject token).
pub fn figures_key(node: &str) -> String {
    format!("n.{node}")
}

/// One node's relay figures, as it last published them, for the relay-wide counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// The node's process instance ([`instance_text`]): figures of an instance whose lease was
    /// taken over do not count.
    pub instance: String,
    /// Addresses registered on the node.
    pub addresses: u64,
    /// Its relay connections (TCP, WebSocket and registered UDP sources).
    pub connections: u64,
    /// Its `[relay] max_connections` (0: no cap).
    pub max_connections: u64,
}

impl Figures {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a record, checking the instance.
    pub fn decode(bytes: &[u8]) -> Result<Figures, RelayRecordError> {
        let figures: Figures = parse(bytes)?;
        parse_instance(&figures.instance).ok_or(RelayRecordError::Instance)?;
        Ok(figures)
    }

    /// Its node's instance.
    pub fn instance_id(&self) -> Option<u64> {
        parse_instance(&self.instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_round_trip_and_malformed_ones_are_refused() {
        let waiter = Waiter {
            node: "node-b".into(),
            instance: instance_text(0x3f9c_0e7a_12b4_d605),
            addr: "é".repeat(256),
            ticket: u64::MAX,
        };
        assert_eq!(Waiter::decode(&waiter.encode()).unwrap(), waiter);
        assert_eq!(waiter.instance_id(), Some(0x3f9c_0e7a_12b4_d605));
        assert_eq!(game_key("chess"), "g.a.chess");
        let later = br#"{"node":"b","instance":"0000000000000001","addr":"x","ticket":1,"new":true}"#;
        assert_eq!(Waiter::decode(later).unwrap().ticket, 1, "a later version's field is ignored");
        let long = format!(
            r#"{{"node":"b","instance":"0000000000000001","addr":"{}","ticket":1}}"#,
            "x".repeat(4096)
        );
        let cases: Vec<(&[u8], &str)> = vec![
            (b"", "Json"),
            (b"[]", "Json"),
            (br#"{"node":"b","instance":"0000000000000001","addr":"x"}"#, "Json"),
            (br#"{"node":"b","instance":"0000000000000001","addr":"x","ticket":-1}"#, "Json"),
            (br#"{"node":"b.c","instance":"0000000000000001","addr":"x","ticket":1}"#, "Node"),
            (br#"{"node":"","instance":"0000000000000001","addr":"x","ticket":1}"#, "Node"),
            (br#"{"node":"b","instance":"000000000000001","addr":"x","ticket":1}"#, "Instance"),
            (br#"{"node":"b","instance":"000000000000000G","addr":"x","ticket":1}"#, "Instance"),
            (br#"{"node":"b","instance":"000000000000000A","addr":"x","ticket":1}"#, "Instance"),
            (br#"{"node":"b","instance":"0000000000000001","addr":"","ticket":1}"#, "Address"),
            (long.as_bytes(), "TooLong"),
        ];
        for (input, kind) in cases {
            let error = Waiter::decode(input).expect_err(&String::from_utf8_lossy(input));
            assert!(format!("{error:?}").starts_with(kind), "{input:?}: {error:?}");
        }
        assert_eq!(parse_instance("ffffffffffffffff"), Some(u64::MAX));
    }

    #[test]
    fn figures_round_trip_and_malformed_ones_are_refused() {
        let figures =
            Figures { instance: instance_text(1), addresses: 3, connections: u64::MAX, max_connections: 0 };
        assert_eq!(Figures::decode(&figures.encode()).unwrap(), figures);
        assert_eq!((figures.instance_id(), figures_key("node-b")), (Some(1), "n.node-b".to_owned()));
        let long = format!(
            r#"{{"instance":"{}","addresses":1,"connections":1,"max_connections":1}}"#,
            "0".repeat(4096)
        );
        let cases: Vec<(&[u8], &str)> = vec![
            (b"{}", "Json"),
            (br#"{"instance":"0000000000000001","addresses":1,"connections":1}"#, "Json"),
            (
                br#"{"instance":"0000000000000001","addresses":1.5,"connections":1,"max_connections":1}"#,
                "Json",
            ),
            (br#"{"instance":"1","addresses":1,"connections":1,"max_connections":1}"#, "Instance"),
            (long.as_bytes(), "TooLong"),
        ];
        for (input, kind) in cases {
            let error = Figures::decode(input).expect_err(&String::from_utf8_lossy(input));
            assert!(format!("{error:?}").starts_with(kind), "{input:?}: {error:?}");
        }
        assert_eq!(parse_instance("+fffffffffffffff"), None);
    }
}
