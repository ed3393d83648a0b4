//! Typed decode and encode errors.
//!
//! Every way a packet can be wrong has its own [`DecodeError`] variant, so logs and tests say
//! exactly what was refused; [`DecodeError::reason_code`] turns it into the MQTT 5.0 reason code
//! the broker puts in its CONNACK or DISCONNECT (§4.13: 0x81 for what cannot be parsed, 0x82 for
//! what parses but breaks a rule). Error messages never echo strings or binary data from the
//! packet: they may be credentials.

use thiserror::Error;

use super::packet::{PacketType, ProtocolVersion, QoS};
use super::properties;
use super::reason::ReasonCode;

fn property_name(id: u8) -> &'static str {
    properties::name(id).unwrap_or("unknown property")
}

/// Why bytes could not be decoded as an MQTT packet. The connection cannot continue after any of
/// them: framing is lost or the peer broke the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The remaining length of the fixed header is longer than four bytes or not in its
    /// shortest form.
    #[error("malformed remaining length: longer than four bytes or not in shortest form")]
    MalformedRemainingLength,
    /// A variable byte integer inside the packet is longer than four bytes or not in its
    /// shortest form.
    #[error("malformed variable byte integer: longer than four bytes or not in shortest form")]
    MalformedVarInt,
    /// The packet is larger than the maximum packet size; detected from the fixed header alone.
    #[error("packet of {size} bytes exceeds the maximum packet size of {max} bytes")]
    PacketTooLarge {
        /// The packet's total size, fixed header included.
        size: u32,
        /// The limit in force.
        max: u32,
    },
    /// The packet type nibble is reserved (0) or, before 5.0, 15 (AUTH).
    #[error("invalid packet type {0}")]
    InvalidPacketType(u8),
    /// The low nibble of the first byte is not what the packet type requires.
    #[error("invalid fixed header flags {flags:#06b} for {packet_type}")]
    InvalidFixedHeaderFlags {
        /// The packet type.
        packet_type: PacketType,
        /// The flags received.
        flags: u8,
    },
    /// The first packet of a connection is not CONNECT.
    #[error("the first packet must be CONNECT, got {0}")]
    ExpectedConnect(PacketType),
    /// The CONNECT protocol name is neither "MQTT" nor "MQIsdp".
    #[error("unknown protocol name in CONNECT")]
    InvalidProtocolName,
    /// The CONNECT protocol level is not 3 (with "MQIsdp"), 4 or 5 (with "MQTT"). The broker
    /// answers with CONNACK return code 0x01 (3.x) or reason code 0x84 (5.0).
    #[error("unsupported protocol level {0}")]
    UnsupportedProtocolVersion(u8),
    /// The reserved bit of the CONNECT flags is set.
    #[error("the reserved bit of the CONNECT flags is set")]
    ConnectReservedFlag,
    /// Will QoS or will retain is set while the will flag is not.
    #[error("will QoS or will retain set without the will flag")]
    WillFlagsWithoutWill,
    /// Before 5.0 a password requires a user name.
    #[error("password flag set without the user name flag")]
    PasswordWithoutUsername,
    /// Reserved bits of the CONNACK acknowledge flags are set.
    #[error("reserved bits of the CONNACK acknowledge flags are set")]
    ConnAckReservedFlags,
    /// A CONNACK refuses the connection yet reports a session present.
    #[error("CONNACK refuses the connection but reports a session present")]
    SessionPresentOnRefusal,
    /// A QoS field holds 3.
    #[error("invalid QoS {0}")]
    InvalidQoS(u8),
    /// A QoS 0 PUBLISH has the DUP flag set (3.1.1 and 5.0, [MQTT-3.3.1-2]).
    #[error("DUP flag set on a QoS 0 PUBLISH")]
    DupOnQoS0,
    /// A packet identifier is 0.
    #[error("packet identifier 0")]
    ZeroPacketId,
    /// A string is not well-formed UTF-8.
    #[error("string is not well-formed UTF-8")]
    InvalidUtf8,
    /// A string contains U+0000.
    #[error("string contains U+0000")]
    NulInString,
    /// A property identifier names no property.
    #[error("unknown property identifier {0:#04x}")]
    InvalidPropertyId(u32),
    /// A property that may appear once appears again.
    #[error("property {name} ({0:#04x}) appears more than once", name = property_name(*.0))]
    DuplicateProperty(u8),
    /// A property is not defined for this packet.
    #[error("property {} ({id:#04x}) is not allowed in {packet_type}", property_name(*.id))]
    PropertyNotAllowed {
        /// The property identifier.
        id: u8,
        /// The packet it appeared in (CONNECT for will properties).
        packet_type: PacketType,
    },
    /// A property value is out of range (a 0 that must not be, a flag other than 0 or 1).
    #[error("invalid value for property {} ({id:#04x})", property_name(*.id))]
    InvalidPropertyValue {
        /// The property identifier.
        id: u8,
    },
    /// A PUBLISH carries Topic Alias 0.
    #[error("topic alias 0")]
    ZeroTopicAlias,
    /// CONNECT properties carry Authentication Data without an Authentication Method.
    #[error("authentication data without an authentication method")]
    AuthenticationDataWithoutMethod,
    /// A reason code (or 3.x return code) that the packet cannot carry.
    #[error("reason code {code:#04x} is not valid in {packet_type}")]
    InvalidReasonCode {
        /// The packet type.
        packet_type: PacketType,
        /// The byte received.
        code: u8,
    },
    /// A SUBSCRIBE or UNSUBSCRIBE without any topic filter.
    #[error("{0} without any topic filter")]
    NoTopicFilters(PacketType),
    /// Reserved bits of a subscription options byte are set.
    #[error("reserved bits set in subscription options {0:#010b}")]
    SubscriptionOptionsReservedBits(u8),
    /// Retain handling holds 3.
    #[error("invalid retain handling {0}")]
    InvalidRetainHandling(u8),
    /// A field runs past the end of the packet (or of its property block).
    #[error("packet ends in the middle of a field")]
    UnexpectedEnd,
    /// Bytes remain after the last field of the packet.
    #[error("{0} unexpected bytes after the end of the packet")]
    TrailingBytes(usize),
    /// Any other protocol violation the codec detects by itself.
    #[error("protocol error: {0}")]
    ProtocolError(&'static str),
}

impl DecodeError {
    /// The MQTT 5.0 reason code for the CONNACK or DISCONNECT that reports this error.
    ///
    /// 0x81 (malformed) for what cannot be parsed, including the cases §2.1.3, §1.5.4, §2.2.2.2
    /// and §3.1.2.3 call malformed (bad header flags, bad UTF-8, unknown or misplaced property,
    /// reserved bits); 0x82 (protocol error) for what parses but breaks a rule (duplicate
    /// property, value out of range, DUP on QoS 0, packet identifier 0, empty SUBSCRIBE, retain
    /// handling 3, a first packet other than CONNECT); 0x84 for a protocol name or level this
    /// server does not speak; 0x95 for a packet above the maximum size; 0x94 for topic alias 0
    /// ([MQTT-3.3.2-8]).
    pub fn reason_code(&self) -> ReasonCode {
        use DecodeError as E;
        match self {
            E::PacketTooLarge { .. } => ReasonCode::PacketTooLarge,
            E::InvalidProtocolName | E::UnsupportedProtocolVersion(_) => {
                ReasonCode::UnsupportedProtocolVersion
            }
            E::ZeroTopicAlias => ReasonCode::TopicAliasInvalid,
            E::ExpectedConnect(_)
            | E::DupOnQoS0
            | E::ZeroPacketId
            | E::DuplicateProperty(_)
            | E::InvalidPropertyValue { .. }
            | E::AuthenticationDataWithoutMethod
            | E::NoTopicFilters(_)
            | E::SessionPresentOnRefusal
            | E::InvalidRetainHandling(_)
            | E::ProtocolError(_) => ReasonCode::ProtocolError,
            E::MalformedRemainingLength
            | E::MalformedVarInt
            | E::InvalidPacketType(_)
            | E::InvalidFixedHeaderFlags { .. }
            | E::ConnectReservedFlag
            | E::WillFlagsWithoutWill
            | E::PasswordWithoutUsername
            | E::ConnAckReservedFlags
            | E::InvalidQoS(_)
            | E::InvalidUtf8
            | E::NulInString
            | E::InvalidPropertyId(_)
            | E::PropertyNotAllowed { .. }
            | E::InvalidReasonCode { .. }
            | E::SubscriptionOptionsReservedBits(_)
            | E::UnexpectedEnd
            | E::TrailingBytes(_) => ReasonCode::MalformedPacket,
        }
    }
}

/// Why a packet could not be encoded: it holds something the protocol cannot express or the
/// decoder would refuse. These are bugs of the caller, reported instead of sending bad bytes.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A string is longer than 65,535 bytes.
    #[error("string of {0} bytes exceeds 65535 bytes")]
    StringTooLong(usize),
    /// Binary data is longer than 65,535 bytes.
    #[error("binary data of {0} bytes exceeds 65535 bytes")]
    BinaryTooLong(usize),
    /// A string contains U+0000.
    #[error("string contains U+0000")]
    NulInString,
    /// A variable byte integer above 268,435,455.
    #[error("{0} exceeds the largest variable byte integer")]
    VarIntTooLarge(u32),
    /// The packet's remaining length would exceed 268,435,455 bytes.
    #[error("packet body of {0} bytes exceeds the largest remaining length")]
    PacketTooLarge(usize),
    /// A PUBLISH has a packet identifier at QoS 0 or none at QoS 1 or 2.
    #[error("packet identifier presence does not match QoS {0:?}")]
    PacketIdDoesNotMatchQoS(QoS),
    /// A packet identifier is 0.
    #[error("packet identifier 0")]
    ZeroPacketId,
    /// DUP set on a QoS 0 PUBLISH (allowed only in 3.1).
    #[error("DUP flag set on a QoS 0 PUBLISH")]
    DupOnQoS0,
    /// A reason code the packet cannot carry.
    #[error("reason code {code:?} is not valid in {packet_type}")]
    InvalidReasonCode {
        /// The packet type.
        packet_type: PacketType,
        /// The offending code.
        code: ReasonCode,
    },
    /// A SUBSCRIBE or UNSUBSCRIBE without any topic filter.
    #[error("{0} without any topic filter")]
    NoTopicFilters(PacketType),
    /// The packet type does not exist in this protocol version (AUTH before 5.0).
    #[error("{packet_type} does not exist in {version}")]
    NotInVersion {
        /// The packet type.
        packet_type: PacketType,
        /// The version asked for.
        version: ProtocolVersion,
    },
    /// A property value the decoder would refuse.
    #[error("invalid value for property {} ({id:#04x})", property_name(*.id))]
    InvalidPropertyValue {
        /// The property identifier.
        id: u8,
    },
    /// Before 5.0 a password requires a user name.
    #[error("password without user name (not expressible before MQTT 5.0)")]
    PasswordWithoutUsername,
    /// A CONNACK that refuses the connection cannot report a session present.
    #[error("CONNACK refuses the connection but reports a session present")]
    SessionPresentOnRefusal,
    /// A CONNECT encoded for a version other than its own `protocol`.
    #[error("CONNECT for {connect} cannot be encoded as {requested}")]
    VersionMismatch {
        /// The CONNECT's protocol field.
        connect: ProtocolVersion,
        /// The version passed to `encode`.
        requested: ProtocolVersion,
    },
}
