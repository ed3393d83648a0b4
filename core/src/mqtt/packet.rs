//! The packet model: one struct per MQTT control packet, with the MQTT 5.0 properties as named
//! fields.
//!
//! The same types serve MQTT 3.1, 3.1.1 and 5.0. When decoded from 3.x, fields that 3.x cannot
//! carry (properties, most reason codes, subscription options other than the QoS) keep their
//! defaults; when encoded for 3.x they are left out. That way the broker handles one model and
//! the version only matters at the wire.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use super::error::DecodeError;
use super::properties::{
    AckProperties, AuthProperties, ConnAckProperties, ConnectProperties, DisconnectProperties,
    PublishProperties, SubscribeProperties, UnsubscribeProperties, WillProperties,
};
use super::reason::ReasonCode;

/// The MQTT protocol version a connection speaks, chosen by its CONNECT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProtocolVersion {
    /// MQTT 3.1: protocol name "MQIsdp", level 3.
    V31,
    /// MQTT 3.1.1: protocol name "MQTT", level 4.
    #[default]
    V311,
    /// MQTT 5.0: protocol name "MQTT", level 5.
    V5,
}

impl ProtocolVersion {
    /// The protocol level byte of the CONNECT.
    pub fn level(self) -> u8 {
        match self {
            ProtocolVersion::V31 => 3,
            ProtocolVersion::V311 => 4,
            ProtocolVersion::V5 => 5,
        }
    }

    /// The protocol name of the CONNECT.
    pub fn protocol_name(self) -> &'static str {
        match self {
            ProtocolVersion::V31 => "MQIsdp",
            ProtocolVersion::V311 | ProtocolVersion::V5 => "MQTT",
        }
    }

    /// Whether the version has properties and reason codes (5.0).
    pub fn is_v5(self) -> bool {
        self == ProtocolVersion::V5
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProtocolVersion::V31 => "MQTT 3.1",
            ProtocolVersion::V311 => "MQTT 3.1.1",
            ProtocolVersion::V5 => "MQTT 5.0",
        })
    }
}

impl From<ProtocolVersion> for crate::auth::Protocol {
    fn from(version: ProtocolVersion) -> Self {
        match version {
            ProtocolVersion::V31 => crate::auth::Protocol::Mqtt31,
            ProtocolVersion::V311 => crate::auth::Protocol::Mqtt311,
            ProtocolVersion::V5 => crate::auth::Protocol::Mqtt5,
        }
    }
}

pub use crate::model::{QoS, RetainHandling};

impl TryFrom<u8> for QoS {
    type Error = DecodeError;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        match value {
            0 => Ok(QoS::AtMostOnce),
            1 => Ok(QoS::AtLeastOnce),
            2 => Ok(QoS::ExactlyOnce),
            other => Err(DecodeError::InvalidQoS(other)),
        }
    }
}

impl TryFrom<u8> for RetainHandling {
    type Error = DecodeError;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        match value {
            0 => Ok(RetainHandling::SendAtSubscribe),
            1 => Ok(RetainHandling::SendIfNew),
            2 => Ok(RetainHandling::DoNotSend),
            other => Err(DecodeError::InvalidRetainHandling(other)),
        }
    }
}

/// The options byte that follows each topic filter of a SUBSCRIBE. In 3.x only `qos` exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SubscriptionOptions {
    /// The maximum QoS the subscriber accepts.
    pub qos: QoS,
    /// Do not deliver the subscriber's own publications back to it.
    pub no_local: bool,
    /// Keep the RETAIN flag of forwarded publications as published.
    pub retain_as_published: bool,
    /// When to send retained messages.
    pub retain_handling: RetainHandling,
}

impl SubscriptionOptions {
    /// Options with the given QoS and the 3.x behaviour for everything else.
    pub fn with_qos(qos: QoS) -> Self {
        SubscriptionOptions { qos, ..Default::default() }
    }

    /// The options byte for `version`; 3.x carries only the QoS.
    pub fn to_byte(self, version: ProtocolVersion) -> u8 {
        let qos = self.qos as u8;
        if !version.is_v5() {
            return qos;
        }
        qos | u8::from(self.no_local) << 2
            | u8::from(self.retain_as_published) << 3
            | (self.retain_handling as u8) << 4
    }

    /// Parses an options byte. Reserved bits must be zero ([MQTT-3.8.3-5] in 5.0, where bits 6
    /// and 7 are reserved; [MQTT-3-8.3-4] in 3.1.1, where bits 2 to 7 are), QoS 3 is malformed and
    /// retain handling 3 a protocol error.
    pub fn from_byte(byte: u8, version: ProtocolVersion) -> Result<Self, DecodeError> {
        let reserved = if version.is_v5() { 0b1100_0000 } else { 0b1111_1100 };
        if byte & reserved != 0 {
            return Err(DecodeError::SubscriptionOptionsReservedBits(byte));
        }
        Ok(SubscriptionOptions {
            qos: QoS::try_from(byte & 0b11)?,
            no_local: byte & 0b0100 != 0,
            retain_as_published: byte & 0b1000 != 0,
            retain_handling: RetainHandling::try_from((byte >> 4) & 0b11)?,
        })
    }
}

/// The control packet type: the high nibble of the first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// Client request to connect.
    Connect = 1,
    /// Connect acknowledgement.
    ConnAck = 2,
    /// Publish message.
    Publish = 3,
    /// QoS 1 publish acknowledgement.
    PubAck = 4,
    /// QoS 2 publish received.
    PubRec = 5,
    /// QoS 2 publish release.
    PubRel = 6,
    /// QoS 2 publish complete.
    PubComp = 7,
    /// Subscribe request.
    Subscribe = 8,
    /// Subscribe acknowledgement.
    SubAck = 9,
    /// Unsubscribe request.
    Unsubscribe = 10,
    /// Unsubscribe acknowledgement.
    UnsubAck = 11,
    /// Ping request.
    PingReq = 12,
    /// Ping response.
    PingResp = 13,
    /// Disconnect notification.
    Disconnect = 14,
    /// Authentication exchange (5.0 only).
    Auth = 15,
}

impl PacketType {
    /// The type for a first-byte high nibble, if it names one (0 is reserved).
    pub fn from_nibble(nibble: u8) -> Option<PacketType> {
        use PacketType as T;
        Some(match nibble {
            1 => T::Connect,
            2 => T::ConnAck,
            3 => T::Publish,
            4 => T::PubAck,
            5 => T::PubRec,
            6 => T::PubRel,
            7 => T::PubComp,
            8 => T::Subscribe,
            9 => T::SubAck,
            10 => T::Unsubscribe,
            11 => T::UnsubAck,
            12 => T::PingReq,
            13 => T::PingResp,
            14 => T::Disconnect,
            15 => T::Auth,
            _ => return None,
        })
    }

    /// The name the specifications use.
    pub fn name(self) -> &'static str {
        use PacketType as T;
        match self {
            T::Connect => "CONNECT",
            T::ConnAck => "CONNACK",
            T::Publish => "PUBLISH",
            T::PubAck => "PUBACK",
            T::PubRec => "PUBREC",
            T::PubRel => "PUBREL",
            T::PubComp => "PUBCOMP",
            T::Subscribe => "SUBSCRIBE",
            T::SubAck => "SUBACK",
            T::Unsubscribe => "UNSUBSCRIBE",
            T::UnsubAck => "UNSUBACK",
            T::PingReq => "PINGREQ",
            T::PingResp => "PINGRESP",
            T::Disconnect => "DISCONNECT",
            T::Auth => "AUTH",
        }
    }
}

impl fmt::Display for PacketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One MQTT control packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet {
    /// CONNECT.
    Connect(Connect),
    /// CONNACK.
    ConnAck(ConnAck),
    /// PUBLISH.
    Publish(Publish),
    /// PUBACK.
    PubAck(PubResponse),
    /// PUBREC.
    PubRec(PubResponse),
    /// PUBREL.
    PubRel(PubResponse),
    /// PUBCOMP.
    PubComp(PubResponse),
    /// SUBSCRIBE.
    Subscribe(Subscribe),
    /// SUBACK.
    SubAck(SubAck),
    /// UNSUBSCRIBE.
    Unsubscribe(Unsubscribe),
    /// UNSUBACK.
    UnsubAck(UnsubAck),
    /// PINGREQ.
    PingReq,
    /// PINGRESP.
    PingResp,
    /// DISCONNECT.
    Disconnect(Disconnect),
    /// AUTH (5.0 only).
    Auth(Auth),
}

impl Packet {
    /// The packet's type.
    pub fn packet_type(&self) -> PacketType {
        use PacketType as T;
        match self {
            Packet::Connect(_) => T::Connect,
            Packet::ConnAck(_) => T::ConnAck,
            Packet::Publish(_) => T::Publish,
            Packet::PubAck(_) => T::PubAck,
            Packet::PubRec(_) => T::PubRec,
            Packet::PubRel(_) => T::PubRel,
            Packet::PubComp(_) => T::PubComp,
            Packet::Subscribe(_) => T::Subscribe,
            Packet::SubAck(_) => T::SubAck,
            Packet::Unsubscribe(_) => T::Unsubscribe,
            Packet::UnsubAck(_) => T::UnsubAck,
            Packet::PingReq => T::PingReq,
            Packet::PingResp => T::PingResp,
            Packet::Disconnect(_) => T::Disconnect,
            Packet::Auth(_) => T::Auth,
        }
    }
}

/// CONNECT: the first packet of every connection. Its `Debug` redacts the password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Connect {
    /// The protocol version the client asked for.
    pub protocol: ProtocolVersion,
    /// Clean start (5.0) / clean session (3.x).
    pub clean_start: bool,
    /// Keep alive in seconds; 0 disables it.
    pub keep_alive: u16,
    /// The client identifier; may be empty (the server may then assign one).
    pub client_id: String,
    /// The will message, if the client set one.
    pub will: Option<Will>,
    /// The user name, if present.
    pub username: Option<String>,
    /// The password, if present (binary data; in 5.0 it may come without a user name).
    pub password: Option<Bytes>,
    /// CONNECT properties (5.0).
    pub properties: ConnectProperties,
}

impl fmt::Debug for Connect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connect")
            .field("protocol", &self.protocol)
            .field("clean_start", &self.clean_start)
            .field("keep_alive", &self.keep_alive)
            .field("client_id", &self.client_id)
            .field("will", &self.will)
            .field("username", &self.username)
            .field("password", &Redacted(&self.password))
            .field("properties", &self.properties)
            .finish()
    }
}

/// Shows the presence and length of a secret, never its bytes.
pub(crate) struct Redacted<'a>(pub(crate) &'a Option<Bytes>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(bytes) => write!(f, "Some(<{} bytes redacted>)", bytes.len()),
            None => f.write_str("None"),
        }
    }
}

/// The will message of a CONNECT: published by the server when the connection ends abnormally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Will {
    /// The will topic (valid MQTT UTF-8; topic rules are checked by the broker).
    pub topic: Arc<str>,
    /// The will payload.
    pub payload: Bytes,
    /// The QoS of the will publication.
    pub qos: QoS,
    /// Whether the will is published retained.
    pub retain: bool,
    /// Will properties (5.0).
    pub properties: WillProperties,
}

/// CONNACK: the server's answer to CONNECT.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnAck {
    /// Whether the server resumed an existing session (always false in 3.1, which lacks the flag).
    pub session_present: bool,
    /// The outcome; 3.x carries it as [`ReasonCode::v3_connack_return_code`].
    pub reason_code: ReasonCode,
    /// CONNACK properties (5.0).
    pub properties: ConnAckProperties,
}

/// PUBLISH: an application message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Publish {
    /// Set on a re-delivery of a QoS 1 or 2 message.
    pub dup: bool,
    /// Delivery QoS.
    pub qos: QoS,
    /// Retain flag.
    pub retain: bool,
    /// The topic name; empty in 5.0 when a topic alias stands in for it. Wildcards and alias
    /// resolution are the broker's checks.
    pub topic: Arc<str>,
    /// The packet identifier: `Some` exactly when `qos` is above 0.
    pub packet_id: Option<u16>,
    /// PUBLISH properties (5.0).
    pub properties: PublishProperties,
    /// The application payload, shared with the receive buffer.
    pub payload: Bytes,
}

/// PUBACK, PUBREC, PUBREL and PUBCOMP: the acknowledgements of the QoS 1 and 2 flows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PubResponse {
    /// The packet identifier being acknowledged.
    pub packet_id: u16,
    /// The outcome (5.0; always success in 3.x).
    pub reason_code: ReasonCode,
    /// Properties (5.0).
    pub properties: AckProperties,
}

/// SUBSCRIBE: one or more topic filters with their options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscribe {
    /// The packet identifier.
    pub packet_id: u16,
    /// Topic filters (valid MQTT UTF-8, not yet checked as filters) and their options.
    pub filters: Vec<(String, SubscriptionOptions)>,
    /// SUBSCRIBE properties (5.0).
    pub properties: SubscribeProperties,
}

/// SUBACK: one reason code per filter of the SUBSCRIBE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubAck {
    /// The SUBSCRIBE's packet identifier.
    pub packet_id: u16,
    /// Granted QoS or failure, in the order of the filters. 3.x carries failures as 0x80.
    pub reason_codes: Vec<ReasonCode>,
    /// Properties (5.0).
    pub properties: AckProperties,
}

/// UNSUBSCRIBE: one or more topic filters to remove.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unsubscribe {
    /// The packet identifier.
    pub packet_id: u16,
    /// The topic filters (valid MQTT UTF-8).
    pub filters: Vec<String>,
    /// UNSUBSCRIBE properties (5.0).
    pub properties: UnsubscribeProperties,
}

/// UNSUBACK.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnsubAck {
    /// The UNSUBSCRIBE's packet identifier.
    pub packet_id: u16,
    /// One code per filter in 5.0; always empty in 3.x, which has no payload here.
    pub reason_codes: Vec<ReasonCode>,
    /// Properties (5.0).
    pub properties: AckProperties,
}

/// DISCONNECT. In 3.x only the client sends it, and it carries nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disconnect {
    /// Why the connection is closed ([`ReasonCode::NormalDisconnection`] by default).
    pub reason_code: ReasonCode,
    /// DISCONNECT properties (5.0).
    pub properties: DisconnectProperties,
}

/// AUTH (5.0 only): a step of an extended authentication exchange.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Auth {
    /// Success, continue authentication or re-authenticate.
    pub reason_code: ReasonCode,
    /// AUTH properties.
    pub properties: AuthProperties,
}
