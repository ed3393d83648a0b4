//! MQTT 5.0 reason codes (§2.4), which packet may carry which, and their 3.x equivalents.
//!
//! 3.x has no reason codes except the CONNACK return code and the SUBACK failure byte; the packet
//! model still carries a [`ReasonCode`] everywhere so the broker can decide once and let the
//! encoder translate ([`ReasonCode::v3_connack_return_code`]) or leave it out.

use thiserror::Error;

use super::packet::{PacketType, QoS};

/// An MQTT 5.0 reason code. Values below 0x80 report success, 0x80 and above report failure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ReasonCode {
    /// Success; in DISCONNECT "Normal disconnection", in SUBACK "Granted QoS 0" (see the
    /// associated constants of those names).
    #[default]
    Success = 0x00,
    /// SUBACK: the subscription was accepted with maximum QoS 1.
    GrantedQoS1 = 0x01,
    /// SUBACK: the subscription was accepted with maximum QoS 2.
    GrantedQoS2 = 0x02,
    /// DISCONNECT from the client: close, but publish the will.
    DisconnectWithWill = 0x04,
    /// PUBACK/PUBREC: accepted, but nobody is subscribed.
    NoMatchingSubscribers = 0x10,
    /// UNSUBACK: there was no such subscription.
    NoSubscriptionExisted = 0x11,
    /// AUTH: continue the authentication exchange.
    ContinueAuthentication = 0x18,
    /// AUTH: the client starts a re-authentication.
    ReAuthenticate = 0x19,
    /// Failure without a more specific code.
    UnspecifiedError = 0x80,
    /// The packet could not be parsed.
    MalformedPacket = 0x81,
    /// The packet parsed but broke a protocol rule.
    ProtocolError = 0x82,
    /// Valid, but refused by this implementation.
    ImplementationSpecificError = 0x83,
    /// CONNACK: the protocol level is not supported.
    UnsupportedProtocolVersion = 0x84,
    /// CONNACK: the client identifier is well formed but not accepted.
    ClientIdentifierNotValid = 0x85,
    /// CONNACK: the credentials were refused.
    BadUserNameOrPassword = 0x86,
    /// The client is not authorized to do this.
    NotAuthorized = 0x87,
    /// CONNACK: the server is not available.
    ServerUnavailable = 0x88,
    /// The server is busy; try later.
    ServerBusy = 0x89,
    /// CONNACK: this client is banned.
    Banned = 0x8A,
    /// DISCONNECT: the server is shutting down.
    ServerShuttingDown = 0x8B,
    /// The authentication method is not supported or does not match.
    BadAuthenticationMethod = 0x8C,
    /// DISCONNECT: nothing was received within 1.5 times the keep alive.
    KeepAliveTimeout = 0x8D,
    /// DISCONNECT: another connection took over this session.
    SessionTakenOver = 0x8E,
    /// The topic filter is well formed but not accepted.
    TopicFilterInvalid = 0x8F,
    /// The topic name is well formed but not accepted.
    TopicNameInvalid = 0x90,
    /// The packet identifier is already in use.
    PacketIdentifierInUse = 0x91,
    /// The packet identifier is not known.
    PacketIdentifierNotFound = 0x92,
    /// More QoS > 0 publications in flight than the receive maximum allows.
    ReceiveMaximumExceeded = 0x93,
    /// The topic alias is 0 or above the maximum.
    TopicAliasInvalid = 0x94,
    /// The packet exceeds the maximum packet size.
    PacketTooLarge = 0x95,
    /// The message rate is too high.
    MessageRateTooHigh = 0x96,
    /// An administrative or implementation quota was exceeded.
    QuotaExceeded = 0x97,
    /// DISCONNECT: an administrator closed the connection.
    AdministrativeAction = 0x98,
    /// The payload does not match its payload format indicator.
    PayloadFormatInvalid = 0x99,
    /// Retained messages are not supported.
    RetainNotSupported = 0x9A,
    /// The QoS is above the maximum the server supports.
    QoSNotSupported = 0x9B,
    /// The client should temporarily use another server.
    UseAnotherServer = 0x9C,
    /// The client should permanently use another server.
    ServerMoved = 0x9D,
    /// Shared subscriptions are not supported.
    SharedSubscriptionsNotSupported = 0x9E,
    /// CONNACK: too many connection attempts.
    ConnectionRateExceeded = 0x9F,
    /// DISCONNECT: the maximum connection time was reached.
    MaximumConnectTime = 0xA0,
    /// Subscription identifiers are not supported.
    SubscriptionIdentifiersNotSupported = 0xA1,
    /// Wildcard subscriptions are not supported.
    WildcardSubscriptionsNotSupported = 0xA2,
}

/// A byte that is not an MQTT 5.0 reason code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("{0:#04x} is not an MQTT reason code")]
pub struct UnknownReasonCode(pub u8);

use ReasonCode as R;

/// Reason codes each packet may carry (MQTT 5.0 §3.2.2.2, §3.4.2.1, §3.5.2.1, §3.6.2.1,
/// §3.7.2.1, §3.9.3, §3.11.3, §3.14.2.1, §3.15.2.1).
const CONNACK: &[ReasonCode] = &[
    R::Success,
    R::UnspecifiedError,
    R::MalformedPacket,
    R::ProtocolError,
    R::ImplementationSpecificError,
    R::UnsupportedProtocolVersion,
    R::ClientIdentifierNotValid,
    R::BadUserNameOrPassword,
    R::NotAuthorized,
    R::ServerUnavailable,
    R::ServerBusy,
    R::Banned,
    R::BadAuthenticationMethod,
    R::TopicNameInvalid,
    R::PacketTooLarge,
    R::QuotaExceeded,
    R::PayloadFormatInvalid,
    R::RetainNotSupported,
    R::QoSNotSupported,
    R::UseAnotherServer,
    R::ServerMoved,
    R::ConnectionRateExceeded,
];
const PUBACK_PUBREC: &[ReasonCode] = &[
    R::Success,
    R::NoMatchingSubscribers,
    R::UnspecifiedError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::TopicNameInvalid,
    R::PacketIdentifierInUse,
    R::QuotaExceeded,
    R::PayloadFormatInvalid,
];
const PUBREL_PUBCOMP: &[ReasonCode] = &[R::Success, R::PacketIdentifierNotFound];
const SUBACK: &[ReasonCode] = &[
    R::Success,
    R::GrantedQoS1,
    R::GrantedQoS2,
    R::UnspecifiedError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::TopicFilterInvalid,
    R::PacketIdentifierInUse,
    R::QuotaExceeded,
    R::SharedSubscriptionsNotSupported,
    R::SubscriptionIdentifiersNotSupported,
    R::WildcardSubscriptionsNotSupported,
];
const UNSUBACK: &[ReasonCode] = &[
    R::Success,
    R::NoSubscriptionExisted,
    R::UnspecifiedError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::TopicFilterInvalid,
    R::PacketIdentifierInUse,
];
const DISCONNECT: &[ReasonCode] = &[
    R::Success,
    R::DisconnectWithWill,
    R::UnspecifiedError,
    R::MalformedPacket,
    R::ProtocolError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::ServerBusy,
    R::ServerShuttingDown,
    R::KeepAliveTimeout,
    R::SessionTakenOver,
    R::TopicFilterInvalid,
    R::TopicNameInvalid,
    R::ReceiveMaximumExceeded,
    R::TopicAliasInvalid,
    R::PacketTooLarge,
    R::MessageRateTooHigh,
    R::QuotaExceeded,
    R::AdministrativeAction,
    R::PayloadFormatInvalid,
    R::RetainNotSupported,
    R::QoSNotSupported,
    R::UseAnotherServer,
    R::ServerMoved,
    R::SharedSubscriptionsNotSupported,
    R::ConnectionRateExceeded,
    R::MaximumConnectTime,
    R::SubscriptionIdentifiersNotSupported,
    R::WildcardSubscriptionsNotSupported,
];
const AUTH: &[ReasonCode] = &[R::Success, R::ContinueAuthentication, R::ReAuthenticate];

impl ReasonCode {
    /// DISCONNECT's name for [`ReasonCode::Success`].
    #[allow(non_upper_case_globals)]
    pub const NormalDisconnection: ReasonCode = ReasonCode::Success;

    /// SUBACK's name for [`ReasonCode::Success`].
    #[allow(non_upper_case_globals)]
    pub const GrantedQoS0: ReasonCode = ReasonCode::Success;

    /// The wire value.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Whether the code reports a failure (0x80 and above).
    pub fn is_error(self) -> bool {
        self.code() >= 0x80
    }

    /// The SUBACK code granting `qos`.
    pub fn granted(qos: QoS) -> ReasonCode {
        match qos {
            QoS::AtMostOnce => R::GrantedQoS0,
            QoS::AtLeastOnce => R::GrantedQoS1,
            QoS::ExactlyOnce => R::GrantedQoS2,
        }
    }

    /// The MQTT 3.1 / 3.1.1 CONNACK return code for this reason.
    ///
    /// Only [`ReasonCode::Success`] maps to 0 (accepted): a refusal is never turned into an
    /// acceptance. The five 3.x refusals map directly (1 unacceptable protocol version,
    /// 2 identifier rejected, 3 server unavailable, 4 bad user name or password, 5 not
    /// authorized); the other codes map to the closest of them:
    ///
    /// - 4 for [`ReasonCode::BadAuthenticationMethod`] (the credentials were not usable);
    /// - 5 for [`ReasonCode::Banned`] (the client may not connect);
    /// - 3 for everything else — server conditions (busy, moved, use another server, rate or
    ///   quota exceeded) and the packet-level errors (malformed, protocol error, too large …),
    ///   for which 3.x has no code of its own.
    pub fn v3_connack_return_code(self) -> u8 {
        match self {
            R::Success => 0,
            R::UnsupportedProtocolVersion => 1,
            R::ClientIdentifierNotValid => 2,
            R::BadUserNameOrPassword | R::BadAuthenticationMethod => 4,
            R::NotAuthorized | R::Banned => 5,
            _ => 3,
        }
    }

    /// The inverse of [`ReasonCode::v3_connack_return_code`] for the six 3.x return codes.
    pub fn from_v3_connack_return_code(code: u8) -> Option<ReasonCode> {
        Some(match code {
            0 => R::Success,
            1 => R::UnsupportedProtocolVersion,
            2 => R::ClientIdentifierNotValid,
            3 => R::ServerUnavailable,
            4 => R::BadUserNameOrPassword,
            5 => R::NotAuthorized,
            _ => return None,
        })
    }

    /// Whether MQTT 5.0 lets `packet_type` carry this code. Packets without a reason code
    /// (CONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, PINGREQ, PINGRESP) allow none.
    pub fn is_allowed_in(self, packet_type: PacketType) -> bool {
        let allowed = match packet_type {
            PacketType::ConnAck => CONNACK,
            PacketType::PubAck | PacketType::PubRec => PUBACK_PUBREC,
            PacketType::PubRel | PacketType::PubComp => PUBREL_PUBCOMP,
            PacketType::SubAck => SUBACK,
            PacketType::UnsubAck => UNSUBACK,
            PacketType::Disconnect => DISCONNECT,
            PacketType::Auth => AUTH,
            PacketType::Connect
            | PacketType::Publish
            | PacketType::Subscribe
            | PacketType::Unsubscribe
            | PacketType::PingReq
            | PacketType::PingResp => &[],
        };
        allowed.contains(&self)
    }
}

impl From<ReasonCode> for u8 {
    fn from(code: ReasonCode) -> u8 {
        code.code()
    }
}

impl TryFrom<u8> for ReasonCode {
    type Error = UnknownReasonCode;

    fn try_from(code: u8) -> Result<Self, Self::Error> {
        Ok(match code {
            0x00 => R::Success,
            0x01 => R::GrantedQoS1,
            0x02 => R::GrantedQoS2,
            0x04 => R::DisconnectWithWill,
            0x10 => R::NoMatchingSubscribers,
            0x11 => R::NoSubscriptionExisted,
            0x18 => R::ContinueAuthentication,
            0x19 => R::ReAuthenticate,
            0x80 => R::UnspecifiedError,
            0x81 => R::MalformedPacket,
            0x82 => R::ProtocolError,
            0x83 => R::ImplementationSpecificError,
            0x84 => R::UnsupportedProtocolVersion,
            0x85 => R::ClientIdentifierNotValid,
            0x86 => R::BadUserNameOrPassword,
            0x87 => R::NotAuthorized,
            0x88 => R::ServerUnavailable,
            0x89 => R::ServerBusy,
            0x8A => R::Banned,
            0x8B => R::ServerShuttingDown,
            0x8C => R::BadAuthenticationMethod,
            0x8D => R::KeepAliveTimeout,
            0x8E => R::SessionTakenOver,
            0x8F => R::TopicFilterInvalid,
            0x90 => R::TopicNameInvalid,
            0x91 => R::PacketIdentifierInUse,
            0x92 => R::PacketIdentifierNotFound,
            0x93 => R::ReceiveMaximumExceeded,
            0x94 => R::TopicAliasInvalid,
            0x95 => R::PacketTooLarge,
            0x96 => R::MessageRateTooHigh,
            0x97 => R::QuotaExceeded,
            0x98 => R::AdministrativeAction,
            0x99 => R::PayloadFormatInvalid,
            0x9A => R::RetainNotSupported,
            0x9B => R::QoSNotSupported,
            0x9C => R::UseAnotherServer,
            0x9D => R::ServerMoved,
            0x9E => R::SharedSubscriptionsNotSupported,
            0x9F => R::ConnectionRateExceeded,
            0xA0 => R::MaximumConnectTime,
            0xA1 => R::SubscriptionIdentifiersNotSupported,
            0xA2 => R::WildcardSubscriptionsNotSupported,
            other => return Err(UnknownReasonCode(other)),
        })
    }
}
