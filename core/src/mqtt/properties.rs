//! MQTT 5.0 properties (§2.2.2): one struct per property set, with the rules of which packet may
//! carry which property, how often, and with what values.
//!
//! Decoding checks, per property block: known identifiers only (else malformed), no identifier
//! twice except User Property and, in PUBLISH, Subscription Identifier (else protocol error),
//! only the identifiers the packet allows (else malformed, §2.2.2.2), and values in range (else
//! protocol error; a Topic Alias of 0 is "Topic Alias invalid"). Encoding refuses the same
//! out-of-range values, so whatever encodes also decodes.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use super::error::{DecodeError, EncodeError};
use super::packet::{PacketType, QoS, Redacted};
use super::wire::{MAX_VAR_INT, Reader, Sink};

/// Property identifiers (MQTT 5.0 §2.2.2.2).
pub(crate) mod id {
    pub(crate) const PAYLOAD_FORMAT_INDICATOR: u8 = 0x01;
    pub(crate) const MESSAGE_EXPIRY_INTERVAL: u8 = 0x02;
    pub(crate) const CONTENT_TYPE: u8 = 0x03;
    pub(crate) const RESPONSE_TOPIC: u8 = 0x08;
    pub(crate) const CORRELATION_DATA: u8 = 0x09;
    pub(crate) const SUBSCRIPTION_IDENTIFIER: u8 = 0x0B;
    pub(crate) const SESSION_EXPIRY_INTERVAL: u8 = 0x11;
    pub(crate) const ASSIGNED_CLIENT_IDENTIFIER: u8 = 0x12;
    pub(crate) const SERVER_KEEP_ALIVE: u8 = 0x13;
    pub(crate) const AUTHENTICATION_METHOD: u8 = 0x15;
    pub(crate) const AUTHENTICATION_DATA: u8 = 0x16;
    pub(crate) const REQUEST_PROBLEM_INFORMATION: u8 = 0x17;
    pub(crate) const WILL_DELAY_INTERVAL: u8 = 0x18;
    pub(crate) const REQUEST_RESPONSE_INFORMATION: u8 = 0x19;
    pub(crate) const RESPONSE_INFORMATION: u8 = 0x1A;
    pub(crate) const SERVER_REFERENCE: u8 = 0x1C;
    pub(crate) const REASON_STRING: u8 = 0x1F;
    pub(crate) const RECEIVE_MAXIMUM: u8 = 0x21;
    pub(crate) const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
    pub(crate) const TOPIC_ALIAS: u8 = 0x23;
    pub(crate) const MAXIMUM_QOS: u8 = 0x24;
    pub(crate) const RETAIN_AVAILABLE: u8 = 0x25;
    pub(crate) const USER_PROPERTY: u8 = 0x26;
    pub(crate) const MAXIMUM_PACKET_SIZE: u8 = 0x27;
    pub(crate) const WILDCARD_SUBSCRIPTION_AVAILABLE: u8 = 0x28;
    pub(crate) const SUBSCRIPTION_IDENTIFIER_AVAILABLE: u8 = 0x29;
    pub(crate) const SHARED_SUBSCRIPTION_AVAILABLE: u8 = 0x2A;
}

use id::*;

/// The specification's name of a property identifier, `None` if it names no property.
pub(crate) fn name(id: u8) -> Option<&'static str> {
    Some(match id {
        PAYLOAD_FORMAT_INDICATOR => "Payload Format Indicator",
        MESSAGE_EXPIRY_INTERVAL => "Message Expiry Interval",
        CONTENT_TYPE => "Content Type",
        RESPONSE_TOPIC => "Response Topic",
        CORRELATION_DATA => "Correlation Data",
        SUBSCRIPTION_IDENTIFIER => "Subscription Identifier",
        SESSION_EXPIRY_INTERVAL => "Session Expiry Interval",
        ASSIGNED_CLIENT_IDENTIFIER => "Assigned Client Identifier",
        SERVER_KEEP_ALIVE => "Server Keep Alive",
        AUTHENTICATION_METHOD => "Authentication Method",
        AUTHENTICATION_DATA => "Authentication Data",
        REQUEST_PROBLEM_INFORMATION => "Request Problem Information",
        WILL_DELAY_INTERVAL => "Will Delay Interval",
        REQUEST_RESPONSE_INFORMATION => "Request Response Information",
        RESPONSE_INFORMATION => "Response Information",
        SERVER_REFERENCE => "Server Reference",
        REASON_STRING => "Reason String",
        RECEIVE_MAXIMUM => "Receive Maximum",
        TOPIC_ALIAS_MAXIMUM => "Topic Alias Maximum",
        TOPIC_ALIAS => "Topic Alias",
        MAXIMUM_QOS => "Maximum QoS",
        RETAIN_AVAILABLE => "Retain Available",
        USER_PROPERTY => "User Property",
        MAXIMUM_PACKET_SIZE => "Maximum Packet Size",
        WILDCARD_SUBSCRIPTION_AVAILABLE => "Wildcard Subscription Available",
        SUBSCRIPTION_IDENTIFIER_AVAILABLE => "Subscription Identifier Available",
        SHARED_SUBSCRIPTION_AVAILABLE => "Shared Subscription Available",
        _ => return None,
    })
}

/// Reads one property block (length, then identifier/value pairs). `field` reads the value of an
/// identifier the packet allows and answers `true`, or answers `false` for one it does not.
fn decode_block(
    r: &mut Reader,
    packet_type: PacketType,
    mut field: impl FnMut(u8, &mut Reader) -> Result<bool, DecodeError>,
) -> Result<(), DecodeError> {
    let len = r.var_int()? as usize;
    let outer_end = r.narrow(len)?;
    // Every identifier is below 64, so one bit each tracks what was seen.
    let mut seen = 0u64;
    while !r.is_empty() {
        let raw = r.var_int()?;
        let id = match u8::try_from(raw) {
            Ok(id) if name(id).is_some() => id,
            _ => return Err(DecodeError::InvalidPropertyId(raw)),
        };
        let repeatable =
            id == USER_PROPERTY || (id == SUBSCRIPTION_IDENTIFIER && packet_type == PacketType::Publish);
        let bit = 1u64 << id;
        if seen & bit != 0 && !repeatable {
            return Err(DecodeError::DuplicateProperty(id));
        }
        seen |= bit;
        if !field(id, r)? {
            return Err(DecodeError::PropertyNotAllowed { id, packet_type });
        }
    }
    r.widen(outer_end);
    Ok(())
}

/// A byte that must be 0 or 1.
fn flag(r: &mut Reader, id: u8) -> Result<bool, DecodeError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::InvalidPropertyValue { id }),
    }
}

fn payload_format(r: &mut Reader) -> Result<u8, DecodeError> {
    flag(r, PAYLOAD_FORMAT_INDICATOR).map(u8::from)
}

fn nonzero_u16(r: &mut Reader, id: u8) -> Result<u16, DecodeError> {
    match r.u16()? {
        0 => Err(DecodeError::InvalidPropertyValue { id }),
        v => Ok(v),
    }
}

fn nonzero_u32(r: &mut Reader, id: u8) -> Result<u32, DecodeError> {
    match r.u32()? {
        0 => Err(DecodeError::InvalidPropertyValue { id }),
        v => Ok(v),
    }
}

fn subscription_identifier(r: &mut Reader) -> Result<u32, DecodeError> {
    match r.var_int()? {
        0 => Err(DecodeError::InvalidPropertyValue { id: SUBSCRIPTION_IDENTIFIER }),
        v => Ok(v),
    }
}

/// A property set that can be written through a [`Sink`].
pub(crate) trait PropertySet {
    /// Emits every present property (identifier and value), validating values for the counter.
    fn visit<S: Sink>(&self, s: &mut S);
}

/// Writes a property block: its length, then its properties.
pub(crate) fn put_block<S: Sink, P: PropertySet>(s: &mut S, set: &P) {
    let mut counter = super::wire::Counter::default();
    set.visit(&mut counter);
    match counter.finish() {
        Ok(len) => s.var_int(u32::try_from(len).unwrap_or(u32::MAX)),
        Err(e) => s.fail(e),
    }
    set.visit(s);
}

fn put_u8<S: Sink>(s: &mut S, id: u8, value: Option<u8>) {
    if let Some(v) = value {
        s.u8(id);
        s.u8(v);
    }
}

fn put_flag<S: Sink>(s: &mut S, id: u8, value: Option<bool>) {
    put_u8(s, id, value.map(u8::from));
}

fn put_u16<S: Sink>(s: &mut S, id: u8, value: Option<u16>) {
    if let Some(v) = value {
        s.u8(id);
        s.u16(v);
    }
}

fn put_u32<S: Sink>(s: &mut S, id: u8, value: Option<u32>) {
    if let Some(v) = value {
        s.u8(id);
        s.u32(v);
    }
}

fn put_nonzero_u16<S: Sink>(s: &mut S, id: u8, value: Option<u16>) {
    if value == Some(0) {
        s.fail(EncodeError::InvalidPropertyValue { id });
    }
    put_u16(s, id, value);
}

fn put_nonzero_u32<S: Sink>(s: &mut S, id: u8, value: Option<u32>) {
    if value == Some(0) {
        s.fail(EncodeError::InvalidPropertyValue { id });
    }
    put_u32(s, id, value);
}

fn put_payload_format<S: Sink>(s: &mut S, value: Option<u8>) {
    if value.is_some_and(|v| v > 1) {
        s.fail(EncodeError::InvalidPropertyValue { id: PAYLOAD_FORMAT_INDICATOR });
    }
    put_u8(s, PAYLOAD_FORMAT_INDICATOR, value);
}

fn put_subscription_identifier<S: Sink>(s: &mut S, value: u32) {
    if value == 0 || value > MAX_VAR_INT {
        s.fail(EncodeError::InvalidPropertyValue { id: SUBSCRIPTION_IDENTIFIER });
    }
    s.u8(SUBSCRIPTION_IDENTIFIER);
    s.var_int(value);
}

fn put_str<S: Sink>(s: &mut S, id: u8, value: Option<&str>) {
    if let Some(v) = value {
        s.u8(id);
        s.str(v);
    }
}

fn put_binary<S: Sink>(s: &mut S, id: u8, value: Option<&[u8]>) {
    if let Some(v) = value {
        s.u8(id);
        s.binary(v);
    }
}

fn put_user_properties<S: Sink, K: AsRef<str>, V: AsRef<str>>(s: &mut S, pairs: &[(K, V)]) {
    for (key, value) in pairs {
        s.u8(USER_PROPERTY);
        s.str(key.as_ref());
        s.str(value.as_ref());
    }
}

/// PUBLISH properties. Strings are `Arc<str>` so the per-subscriber clone the broker makes on
/// every delivery copies pointers, not text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishProperties {
    /// 0: unspecified bytes, 1: UTF-8 payload.
    pub payload_format_indicator: Option<u8>,
    /// Lifetime of the message in seconds.
    pub message_expiry_interval: Option<u32>,
    /// Topic alias (never 0).
    pub topic_alias: Option<u16>,
    /// Topic for a response (request/response pattern).
    pub response_topic: Option<Arc<str>>,
    /// Correlates a response with its request.
    pub correlation_data: Option<Bytes>,
    /// User properties, in order; keys may repeat.
    pub user_properties: Vec<(Arc<str>, Arc<str>)>,
    /// The identifiers of the subscriptions that matched (server to client only).
    pub subscription_identifiers: Vec<u32>,
    /// MIME type of the payload.
    pub content_type: Option<Arc<str>>,
}

impl PublishProperties {
    /// Decodes into `self` (a default value) rather than returning a new value: PUBLISH is the
    /// hot path and this saves moving the struct into the packet.
    pub(crate) fn decode_into(&mut self, r: &mut Reader) -> Result<(), DecodeError> {
        let p = self;
        decode_block(r, PacketType::Publish, |id, r| {
            match id {
                PAYLOAD_FORMAT_INDICATOR => p.payload_format_indicator = Some(payload_format(r)?),
                MESSAGE_EXPIRY_INTERVAL => p.message_expiry_interval = Some(r.u32()?),
                TOPIC_ALIAS => match r.u16()? {
                    0 => return Err(DecodeError::ZeroTopicAlias),
                    alias => p.topic_alias = Some(alias),
                },
                RESPONSE_TOPIC => p.response_topic = Some(r.string()?),
                CORRELATION_DATA => p.correlation_data = Some(r.binary()?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                SUBSCRIPTION_IDENTIFIER => p.subscription_identifiers.push(subscription_identifier(r)?),
                CONTENT_TYPE => p.content_type = Some(r.string()?),
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

impl PropertySet for PublishProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        put_payload_format(s, self.payload_format_indicator);
        put_u32(s, MESSAGE_EXPIRY_INTERVAL, self.message_expiry_interval);
        if self.topic_alias == Some(0) {
            s.fail(EncodeError::InvalidPropertyValue { id: TOPIC_ALIAS });
        }
        put_u16(s, TOPIC_ALIAS, self.topic_alias);
        put_str(s, RESPONSE_TOPIC, self.response_topic.as_deref());
        put_binary(s, CORRELATION_DATA, self.correlation_data.as_deref());
        put_user_properties(s, &self.user_properties);
        for &sub_id in &self.subscription_identifiers {
            put_subscription_identifier(s, sub_id);
        }
        put_str(s, CONTENT_TYPE, self.content_type.as_deref());
    }
}

/// Will properties (in the CONNECT payload): the will delay and the properties of the message
/// the will becomes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WillProperties {
    /// Seconds to wait after the connection ends before publishing the will.
    pub delay_interval: Option<u32>,
    /// 0: unspecified bytes, 1: UTF-8 payload.
    pub payload_format_indicator: Option<u8>,
    /// Lifetime of the will message in seconds.
    pub message_expiry_interval: Option<u32>,
    /// MIME type of the payload.
    pub content_type: Option<Arc<str>>,
    /// Topic for a response.
    pub response_topic: Option<Arc<str>>,
    /// Correlates a response with its request.
    pub correlation_data: Option<Bytes>,
    /// User properties, in order.
    pub user_properties: Vec<(Arc<str>, Arc<str>)>,
}

impl WillProperties {
    /// The properties of the PUBLISH the will turns into.
    pub fn to_publish_properties(&self) -> PublishProperties {
        PublishProperties {
            payload_format_indicator: self.payload_format_indicator,
            message_expiry_interval: self.message_expiry_interval,
            response_topic: self.response_topic.clone(),
            correlation_data: self.correlation_data.clone(),
            user_properties: self.user_properties.clone(),
            content_type: self.content_type.clone(),
            ..PublishProperties::default()
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut p = WillProperties::default();
        decode_block(r, PacketType::Connect, |id, r| {
            match id {
                WILL_DELAY_INTERVAL => p.delay_interval = Some(r.u32()?),
                PAYLOAD_FORMAT_INDICATOR => p.payload_format_indicator = Some(payload_format(r)?),
                MESSAGE_EXPIRY_INTERVAL => p.message_expiry_interval = Some(r.u32()?),
                CONTENT_TYPE => p.content_type = Some(r.string()?),
                RESPONSE_TOPIC => p.response_topic = Some(r.string()?),
                CORRELATION_DATA => p.correlation_data = Some(r.binary()?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(p)
    }
}

impl PropertySet for WillProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        put_u32(s, WILL_DELAY_INTERVAL, self.delay_interval);
        put_payload_format(s, self.payload_format_indicator);
        put_u32(s, MESSAGE_EXPIRY_INTERVAL, self.message_expiry_interval);
        put_str(s, CONTENT_TYPE, self.content_type.as_deref());
        put_str(s, RESPONSE_TOPIC, self.response_topic.as_deref());
        put_binary(s, CORRELATION_DATA, self.correlation_data.as_deref());
        put_user_properties(s, &self.user_properties);
    }
}

/// CONNECT properties. `Debug` redacts the authentication data.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectProperties {
    /// Seconds the session outlives the connection (0 or absent: ends with it).
    pub session_expiry_interval: Option<u32>,
    /// How many QoS > 0 publications the client accepts in flight (never 0).
    pub receive_maximum: Option<u16>,
    /// The largest packet the client accepts (never 0).
    pub maximum_packet_size: Option<u32>,
    /// The highest topic alias the client accepts from the server.
    pub topic_alias_maximum: Option<u16>,
    /// Whether the client asks for Response Information in the CONNACK.
    pub request_response_information: Option<bool>,
    /// Whether the server may send reason strings and user properties on failures.
    pub request_problem_information: Option<bool>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
    /// Extended authentication method.
    pub authentication_method: Option<String>,
    /// Extended authentication data (only with a method).
    pub authentication_data: Option<Bytes>,
}

impl fmt::Debug for ConnectProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectProperties")
            .field("session_expiry_interval", &self.session_expiry_interval)
            .field("receive_maximum", &self.receive_maximum)
            .field("maximum_packet_size", &self.maximum_packet_size)
            .field("topic_alias_maximum", &self.topic_alias_maximum)
            .field("request_response_information", &self.request_response_information)
            .field("request_problem_information", &self.request_problem_information)
            .field("user_properties", &self.user_properties)
            .field("authentication_method", &self.authentication_method)
            .field("authentication_data", &Redacted(&self.authentication_data))
            .finish()
    }
}

impl ConnectProperties {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut p = ConnectProperties::default();
        decode_block(r, PacketType::Connect, |id, r| {
            match id {
                SESSION_EXPIRY_INTERVAL => p.session_expiry_interval = Some(r.u32()?),
                RECEIVE_MAXIMUM => p.receive_maximum = Some(nonzero_u16(r, id)?),
                MAXIMUM_PACKET_SIZE => p.maximum_packet_size = Some(nonzero_u32(r, id)?),
                TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = Some(r.u16()?),
                REQUEST_RESPONSE_INFORMATION => p.request_response_information = Some(flag(r, id)?),
                REQUEST_PROBLEM_INFORMATION => p.request_problem_information = Some(flag(r, id)?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                AUTHENTICATION_METHOD => p.authentication_method = Some(r.string()?),
                AUTHENTICATION_DATA => p.authentication_data = Some(r.binary()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        // MQTT 5.0 §3.1.2.11.10: data without a method is a protocol error.
        if p.authentication_data.is_some() && p.authentication_method.is_none() {
            return Err(DecodeError::AuthenticationDataWithoutMethod);
        }
        Ok(p)
    }
}

impl PropertySet for ConnectProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        if self.authentication_data.is_some() && self.authentication_method.is_none() {
            s.fail(EncodeError::InvalidPropertyValue { id: AUTHENTICATION_DATA });
        }
        put_u32(s, SESSION_EXPIRY_INTERVAL, self.session_expiry_interval);
        put_nonzero_u16(s, RECEIVE_MAXIMUM, self.receive_maximum);
        put_nonzero_u32(s, MAXIMUM_PACKET_SIZE, self.maximum_packet_size);
        put_u16(s, TOPIC_ALIAS_MAXIMUM, self.topic_alias_maximum);
        put_flag(s, REQUEST_RESPONSE_INFORMATION, self.request_response_information);
        put_flag(s, REQUEST_PROBLEM_INFORMATION, self.request_problem_information);
        put_user_properties(s, &self.user_properties);
        put_str(s, AUTHENTICATION_METHOD, self.authentication_method.as_deref());
        put_binary(s, AUTHENTICATION_DATA, self.authentication_data.as_deref());
    }
}

/// CONNACK properties. `Debug` redacts the authentication data.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnAckProperties {
    /// The session expiry the server chose, when it differs from the client's.
    pub session_expiry_interval: Option<u32>,
    /// How many QoS > 0 publications the server accepts in flight (never 0).
    pub receive_maximum: Option<u16>,
    /// The highest QoS the server supports (absent: 2; present: 0 or 1).
    pub maximum_qos: Option<QoS>,
    /// Whether the server supports retained messages.
    pub retain_available: Option<bool>,
    /// The largest packet the server accepts (never 0).
    pub maximum_packet_size: Option<u32>,
    /// The client identifier the server assigned to a client that sent an empty one.
    pub assigned_client_identifier: Option<String>,
    /// The highest topic alias the server accepts from the client.
    pub topic_alias_maximum: Option<u16>,
    /// Human-readable diagnostic.
    pub reason_string: Option<String>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
    /// Whether the server supports wildcard subscriptions.
    pub wildcard_subscription_available: Option<bool>,
    /// Whether the server supports subscription identifiers.
    pub subscription_identifiers_available: Option<bool>,
    /// Whether the server supports shared subscriptions.
    pub shared_subscription_available: Option<bool>,
    /// The keep alive the server imposes instead of the client's.
    pub server_keep_alive: Option<u16>,
    /// Basis for response topics (when the client requested it).
    pub response_information: Option<String>,
    /// Another server the client should use.
    pub server_reference: Option<String>,
    /// Extended authentication method.
    pub authentication_method: Option<String>,
    /// Extended authentication data.
    pub authentication_data: Option<Bytes>,
}

impl fmt::Debug for ConnAckProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnAckProperties")
            .field("session_expiry_interval", &self.session_expiry_interval)
            .field("receive_maximum", &self.receive_maximum)
            .field("maximum_qos", &self.maximum_qos)
            .field("retain_available", &self.retain_available)
            .field("maximum_packet_size", &self.maximum_packet_size)
            .field("assigned_client_identifier", &self.assigned_client_identifier)
            .field("topic_alias_maximum", &self.topic_alias_maximum)
            .field("reason_string", &self.reason_string)
            .field("user_properties", &self.user_properties)
            .field("wildcard_subscription_available", &self.wildcard_subscription_available)
            .field("subscription_identifiers_available", &self.subscription_identifiers_available)
            .field("shared_subscription_available", &self.shared_subscription_available)
            .field("server_keep_alive", &self.server_keep_alive)
            .field("response_information", &self.response_information)
            .field("server_reference", &self.server_reference)
            .field("authentication_method", &self.authentication_method)
            .field("authentication_data", &Redacted(&self.authentication_data))
            .finish()
    }
}

impl ConnAckProperties {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut p = ConnAckProperties::default();
        decode_block(r, PacketType::ConnAck, |id, r| {
            match id {
                SESSION_EXPIRY_INTERVAL => p.session_expiry_interval = Some(r.u32()?),
                RECEIVE_MAXIMUM => p.receive_maximum = Some(nonzero_u16(r, id)?),
                MAXIMUM_QOS => {
                    p.maximum_qos = Some(if flag(r, id)? { QoS::AtLeastOnce } else { QoS::AtMostOnce })
                }
                RETAIN_AVAILABLE => p.retain_available = Some(flag(r, id)?),
                MAXIMUM_PACKET_SIZE => p.maximum_packet_size = Some(nonzero_u32(r, id)?),
                ASSIGNED_CLIENT_IDENTIFIER => p.assigned_client_identifier = Some(r.string()?),
                TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = Some(r.u16()?),
                REASON_STRING => p.reason_string = Some(r.string()?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                WILDCARD_SUBSCRIPTION_AVAILABLE => p.wildcard_subscription_available = Some(flag(r, id)?),
                SUBSCRIPTION_IDENTIFIER_AVAILABLE => {
                    p.subscription_identifiers_available = Some(flag(r, id)?)
                }
                SHARED_SUBSCRIPTION_AVAILABLE => p.shared_subscription_available = Some(flag(r, id)?),
                SERVER_KEEP_ALIVE => p.server_keep_alive = Some(r.u16()?),
                RESPONSE_INFORMATION => p.response_information = Some(r.string()?),
                SERVER_REFERENCE => p.server_reference = Some(r.string()?),
                AUTHENTICATION_METHOD => p.authentication_method = Some(r.string()?),
                AUTHENTICATION_DATA => p.authentication_data = Some(r.binary()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(p)
    }
}

impl PropertySet for ConnAckProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        put_u32(s, SESSION_EXPIRY_INTERVAL, self.session_expiry_interval);
        put_nonzero_u16(s, RECEIVE_MAXIMUM, self.receive_maximum);
        // The property can only say 0 or 1; "2" is said by leaving it out.
        if self.maximum_qos == Some(QoS::ExactlyOnce) {
            s.fail(EncodeError::InvalidPropertyValue { id: MAXIMUM_QOS });
        }
        put_u8(s, MAXIMUM_QOS, self.maximum_qos.map(|q| q as u8));
        put_flag(s, RETAIN_AVAILABLE, self.retain_available);
        put_nonzero_u32(s, MAXIMUM_PACKET_SIZE, self.maximum_packet_size);
        put_str(s, ASSIGNED_CLIENT_IDENTIFIER, self.assigned_client_identifier.as_deref());
        put_u16(s, TOPIC_ALIAS_MAXIMUM, self.topic_alias_maximum);
        put_str(s, REASON_STRING, self.reason_string.as_deref());
        put_user_properties(s, &self.user_properties);
        put_flag(s, WILDCARD_SUBSCRIPTION_AVAILABLE, self.wildcard_subscription_available);
        put_flag(s, SUBSCRIPTION_IDENTIFIER_AVAILABLE, self.subscription_identifiers_available);
        put_flag(s, SHARED_SUBSCRIPTION_AVAILABLE, self.shared_subscription_available);
        put_u16(s, SERVER_KEEP_ALIVE, self.server_keep_alive);
        put_str(s, RESPONSE_INFORMATION, self.response_information.as_deref());
        put_str(s, SERVER_REFERENCE, self.server_reference.as_deref());
        put_str(s, AUTHENTICATION_METHOD, self.authentication_method.as_deref());
        put_binary(s, AUTHENTICATION_DATA, self.authentication_data.as_deref());
    }
}

/// Properties of PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK and UNSUBACK.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AckProperties {
    /// Human-readable diagnostic.
    pub reason_string: Option<String>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
}

impl AckProperties {
    /// Whether no property is set (the acknowledgement can then use its short form).
    pub fn is_empty(&self) -> bool {
        self.reason_string.is_none() && self.user_properties.is_empty()
    }

    pub(crate) fn decode(r: &mut Reader, packet_type: PacketType) -> Result<Self, DecodeError> {
        let mut p = AckProperties::default();
        decode_block(r, packet_type, |id, r| {
            match id {
                REASON_STRING => p.reason_string = Some(r.string()?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(p)
    }
}

impl PropertySet for AckProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        put_str(s, REASON_STRING, self.reason_string.as_deref());
        put_user_properties(s, &self.user_properties);
    }
}

/// SUBSCRIBE properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscribeProperties {
    /// Identifier (1 to 268,435,455) the server returns with each matching publication.
    pub subscription_identifier: Option<u32>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
}

impl SubscribeProperties {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut p = SubscribeProperties::default();
        decode_block(r, PacketType::Subscribe, |id, r| {
            match id {
                SUBSCRIPTION_IDENTIFIER => p.subscription_identifier = Some(subscription_identifier(r)?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(p)
    }
}

impl PropertySet for SubscribeProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        if let Some(sub_id) = self.subscription_identifier {
            put_subscription_identifier(s, sub_id);
        }
        put_user_properties(s, &self.user_properties);
    }
}

/// UNSUBSCRIBE properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnsubscribeProperties {
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
}

impl UnsubscribeProperties {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut p = UnsubscribeProperties::default();
        decode_block(r, PacketType::Unsubscribe, |id, r| {
            match id {
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(p)
    }
}

impl PropertySet for UnsubscribeProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        put_user_properties(s, &self.user_properties);
    }
}

/// DISCONNECT properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DisconnectProperties {
    /// A new session expiry, sent by the client.
    pub session_expiry_interval: Option<u32>,
    /// Human-readable diagnostic.
    pub reason_string: Option<String>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
    /// Another server the client should use.
    pub server_reference: Option<String>,
}

impl DisconnectProperties {
    /// Whether no property is set.
    pub fn is_empty(&self) -> bool {
        self.session_expiry_interval.is_none()
            && self.reason_string.is_none()
            && self.user_properties.is_empty()
            && self.server_reference.is_none()
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut p = DisconnectProperties::default();
        decode_block(r, PacketType::Disconnect, |id, r| {
            match id {
                SESSION_EXPIRY_INTERVAL => p.session_expiry_interval = Some(r.u32()?),
                REASON_STRING => p.reason_string = Some(r.string()?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                SERVER_REFERENCE => p.server_reference = Some(r.string()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(p)
    }
}

impl PropertySet for DisconnectProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        put_u32(s, SESSION_EXPIRY_INTERVAL, self.session_expiry_interval);
        put_str(s, REASON_STRING, self.reason_string.as_deref());
        put_user_properties(s, &self.user_properties);
        put_str(s, SERVER_REFERENCE, self.server_reference.as_deref());
    }
}

/// AUTH properties. `Debug` redacts the authentication data.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthProperties {
    /// Extended authentication method.
    pub authentication_method: Option<String>,
    /// Extended authentication data.
    pub authentication_data: Option<Bytes>,
    /// Human-readable diagnostic.
    pub reason_string: Option<String>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
}

impl fmt::Debug for AuthProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthProperties")
            .field("authentication_method", &self.authentication_method)
            .field("authentication_data", &Redacted(&self.authentication_data))
            .field("reason_string", &self.reason_string)
            .field("user_properties", &self.user_properties)
            .finish()
    }
}

impl AuthProperties {
    /// Whether no property is set.
    pub fn is_empty(&self) -> bool {
        self.authentication_method.is_none()
            && self.authentication_data.is_none()
            && self.reason_string.is_none()
            && self.user_properties.is_empty()
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut p = AuthProperties::default();
        decode_block(r, PacketType::Auth, |id, r| {
            match id {
                AUTHENTICATION_METHOD => p.authentication_method = Some(r.string()?),
                AUTHENTICATION_DATA => p.authentication_data = Some(r.binary()?),
                REASON_STRING => p.reason_string = Some(r.string()?),
                USER_PROPERTY => p.user_properties.push(r.string_pair()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(p)
    }
}

impl PropertySet for AuthProperties {
    fn visit<S: Sink>(&self, s: &mut S) {
        put_str(s, AUTHENTICATION_METHOD, self.authentication_method.as_deref());
        put_binary(s, AUTHENTICATION_DATA, self.authentication_data.as_deref());
        put_str(s, REASON_STRING, self.reason_string.as_deref());
        put_user_properties(s, &self.user_properties);
    }
}
