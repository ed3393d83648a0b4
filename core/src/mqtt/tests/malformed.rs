//! The malformed-input table: every check of the decoder, the error it gives and the MQTT 5.0
//! reason code the broker answers with.

use super::{concat, pkt, props, try_decode};
use crate::mqtt::{DecodeError, PacketType, ProtocolVersion, ReasonCode};

use DecodeError as E;
use PacketType as T;
use ProtocolVersion::{V5, V31, V311};
use ReasonCode as R;

/// A 3.1.1 CONNECT with `flags` and `rest` after the keep alive.
fn connect_311(flags: u8, rest: &[u8]) -> Vec<u8> {
    pkt(0x10, &concat(&[&[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04, flags, 0x00, 0x3C], rest]))
}

/// A 5.0 CONNECT (clean start) with a property block made of `properties` and client id "c".
fn connect_5(properties: &[u8]) -> Vec<u8> {
    pkt(
        0x10,
        &concat(&[
            &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x02, 0x00, 0x3C],
            &props(properties),
            &[0, 1, b'c'],
        ]),
    )
}

/// A 5.0 CONNECT with a will whose property block is made of `will_properties`.
fn connect_5_will(will_properties: &[u8]) -> Vec<u8> {
    pkt(
        0x10,
        &concat(&[
            &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x06, 0x00, 0x3C, 0x00],
            &[0, 1, b'c'],
            &props(will_properties),
            &[0, 1, b'w', 0, 0],
        ]),
    )
}

/// A 5.0 QoS 0 PUBLISH to "t" with a property block made of `properties`.
fn publish_5(properties: &[u8]) -> Vec<u8> {
    pkt(0x30, &concat(&[&[0, 1, b't'], &props(properties)]))
}

/// A 5.0 SUBSCRIBE with a property block and then `rest`.
fn subscribe_5(properties: &[u8], rest: &[u8]) -> Vec<u8> {
    pkt(0x82, &concat(&[&[0, 1], &props(properties), rest]))
}

type Case = (&'static str, Vec<u8>, Option<ProtocolVersion>, DecodeError, ReasonCode);

fn table() -> Vec<Case> {
    let mqtx = pkt(0x10, &[0, 4, b'M', b'Q', b'T', b'X', 4, 2, 0, 60, 0, 1, b'c']);
    let level_6 = pkt(0x10, &[0, 4, b'M', b'Q', b'T', b'T', 6, 2, 0, 60, 0, 1, b'c']);
    let mqtt_level_3 = pkt(0x10, &[0, 4, b'M', b'Q', b'T', b'T', 3, 2, 0, 60, 0, 1, b'c']);
    let mqisdp_level_4 = pkt(0x10, &concat(&[&[0, 6], b"MQIsdp", &[4, 2, 0, 60, 0, 1, b'c']]));
    let mut long_rl = vec![0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01];
    long_rl.extend_from_slice(&[0; 8]);
    vec![
        // Fixed header.
        (
            "remaining length of five bytes",
            long_rl,
            Some(V311),
            E::MalformedRemainingLength,
            R::MalformedPacket,
        ),
        (
            "remaining length not in shortest form",
            vec![0xC0, 0x80, 0x00],
            Some(V311),
            E::MalformedRemainingLength,
            R::MalformedPacket,
        ),
        ("packet type 0", vec![0x00, 0x00], Some(V311), E::InvalidPacketType(0), R::MalformedPacket),
        ("AUTH in 3.1.1", vec![0xF0, 0x00], Some(V311), E::InvalidPacketType(15), R::MalformedPacket),
        ("AUTH in 3.1", vec![0xF0, 0x00], Some(V31), E::InvalidPacketType(15), R::MalformedPacket),
        ("first packet PINGREQ", vec![0xC0, 0x00], None, E::ExpectedConnect(T::PingReq), R::ProtocolError),
        (
            "first packet PUBLISH",
            pkt(0x30, &[0, 1, b't']),
            None,
            E::ExpectedConnect(T::Publish),
            R::ProtocolError,
        ),
        (
            "CONNECT with header flags",
            vec![0x11, 0x00],
            None,
            E::InvalidFixedHeaderFlags { packet_type: T::Connect, flags: 1 },
            R::MalformedPacket,
        ),
        (
            "PUBREL with flags 0",
            pkt(0x60, &[0, 1]),
            Some(V311),
            E::InvalidFixedHeaderFlags { packet_type: T::PubRel, flags: 0 },
            R::MalformedPacket,
        ),
        (
            "PUBREL with DUP in 3.1.1",
            pkt(0x6A, &[0, 1]),
            Some(V311),
            E::InvalidFixedHeaderFlags { packet_type: T::PubRel, flags: 0b1010 },
            R::MalformedPacket,
        ),
        (
            "SUBSCRIBE with flags 0",
            pkt(0x80, &[0, 1, 0, 0, 1, b'a', 0]),
            Some(V5),
            E::InvalidFixedHeaderFlags { packet_type: T::Subscribe, flags: 0 },
            R::MalformedPacket,
        ),
        (
            "UNSUBSCRIBE with flags 3",
            pkt(0xA3, &[0, 1, 0, 1, b'a']),
            Some(V311),
            E::InvalidFixedHeaderFlags { packet_type: T::Unsubscribe, flags: 3 },
            R::MalformedPacket,
        ),
        (
            "UNSUBSCRIBE with flags 0 in 3.1",
            pkt(0xA0, &[0, 1, 0, 1, b'a']),
            Some(V31),
            E::InvalidFixedHeaderFlags { packet_type: T::Unsubscribe, flags: 0 },
            R::MalformedPacket,
        ),
        (
            "PINGREQ with flags",
            vec![0xC1, 0x00],
            Some(V311),
            E::InvalidFixedHeaderFlags { packet_type: T::PingReq, flags: 1 },
            R::MalformedPacket,
        ),
        (
            "PUBACK with flags",
            pkt(0x42, &[0, 1]),
            Some(V5),
            E::InvalidFixedHeaderFlags { packet_type: T::PubAck, flags: 2 },
            R::MalformedPacket,
        ),
        (
            "DISCONNECT with flags",
            vec![0xE8, 0x00],
            Some(V5),
            E::InvalidFixedHeaderFlags { packet_type: T::Disconnect, flags: 8 },
            R::MalformedPacket,
        ),
        ("PUBLISH QoS 3", pkt(0x36, &[0, 1, b't', 0, 1]), Some(V311), E::InvalidQoS(3), R::MalformedPacket),
        (
            "PUBLISH DUP on QoS 0 in 5.0",
            pkt(0x38, &[0, 1, b't', 0]),
            Some(V5),
            E::DupOnQoS0,
            R::ProtocolError,
        ),
        (
            "PUBLISH DUP on QoS 0 in 3.1.1",
            pkt(0x38, &[0, 1, b't']),
            Some(V311),
            E::DupOnQoS0,
            R::ProtocolError,
        ),
        // CONNECT.
        ("protocol name MQTX", mqtx, None, E::InvalidProtocolName, R::UnsupportedProtocolVersion),
        ("protocol level 6", level_6, None, E::UnsupportedProtocolVersion(6), R::UnsupportedProtocolVersion),
        (
            "MQTT with level 3",
            mqtt_level_3,
            None,
            E::UnsupportedProtocolVersion(3),
            R::UnsupportedProtocolVersion,
        ),
        (
            "MQIsdp with level 4",
            mqisdp_level_4,
            None,
            E::UnsupportedProtocolVersion(4),
            R::UnsupportedProtocolVersion,
        ),
        (
            "protocol name truncated",
            pkt(0x10, &[0, 4, b'M', b'Q']),
            None,
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "CONNECT reserved flag",
            connect_311(0x03, &[0, 1, b'c']),
            None,
            E::ConnectReservedFlag,
            R::MalformedPacket,
        ),
        (
            "will QoS without will flag",
            connect_311(0x0A, &[0, 1, b'c']),
            None,
            E::WillFlagsWithoutWill,
            R::MalformedPacket,
        ),
        (
            "will retain without will flag",
            connect_311(0x22, &[0, 1, b'c']),
            None,
            E::WillFlagsWithoutWill,
            R::MalformedPacket,
        ),
        (
            "will QoS 3",
            connect_311(0x1E, &[0, 1, b'c', 0, 1, b'w', 0, 0]),
            None,
            E::InvalidQoS(3),
            R::MalformedPacket,
        ),
        (
            "password without user name in 3.1.1",
            connect_311(0x42, &[0, 1, b'c', 0, 1, b'p']),
            None,
            E::PasswordWithoutUsername,
            R::MalformedPacket,
        ),
        (
            "keep alive missing",
            pkt(0x10, &[0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0]),
            None,
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "client id overlong UTF-8",
            connect_311(0x02, &[0, 2, 0xC0, 0xAF]),
            None,
            E::InvalidUtf8,
            R::MalformedPacket,
        ),
        (
            "client id with a surrogate",
            connect_311(0x02, &[0, 3, 0xED, 0xA0, 0x80]),
            None,
            E::InvalidUtf8,
            R::MalformedPacket,
        ),
        (
            "client id with U+0000",
            connect_311(0x02, &[0, 2, b'a', 0]),
            None,
            E::NulInString,
            R::MalformedPacket,
        ),
        (
            "client id longer than the packet",
            connect_311(0x02, &[0, 5, b'a']),
            None,
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "will payload missing",
            connect_311(0x06, &[0, 1, b'c', 0, 1, b'w']),
            None,
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "CONNECT trailing bytes",
            connect_311(0x02, &[0, 1, b'c', 9, 9]),
            None,
            E::TrailingBytes(2),
            R::MalformedPacket,
        ),
        // Properties, in CONNECT.
        (
            "unknown property 0x05",
            connect_5(&[0x05, 0x00]),
            None,
            E::InvalidPropertyId(5),
            R::MalformedPacket,
        ),
        (
            "property identifier 128",
            connect_5(&[0x80, 0x01, 0x00]),
            None,
            E::InvalidPropertyId(128),
            R::MalformedPacket,
        ),
        (
            "session expiry twice",
            connect_5(&[0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 2]),
            None,
            E::DuplicateProperty(0x11),
            R::ProtocolError,
        ),
        (
            "authentication method twice",
            connect_5(&[0x15, 0, 1, b'a', 0x15, 0, 1, b'a']),
            None,
            E::DuplicateProperty(0x15),
            R::ProtocolError,
        ),
        (
            "topic alias in CONNECT",
            connect_5(&[0x23, 0, 1]),
            None,
            E::PropertyNotAllowed { id: 0x23, packet_type: T::Connect },
            R::MalformedPacket,
        ),
        (
            "subscription identifier in CONNECT",
            connect_5(&[0x0B, 1]),
            None,
            E::PropertyNotAllowed { id: 0x0B, packet_type: T::Connect },
            R::MalformedPacket,
        ),
        (
            "receive maximum 0",
            connect_5(&[0x21, 0, 0]),
            None,
            E::InvalidPropertyValue { id: 0x21 },
            R::ProtocolError,
        ),
        (
            "maximum packet size 0",
            connect_5(&[0x27, 0, 0, 0, 0]),
            None,
            E::InvalidPropertyValue { id: 0x27 },
            R::ProtocolError,
        ),
        (
            "request problem information 2",
            connect_5(&[0x17, 2]),
            None,
            E::InvalidPropertyValue { id: 0x17 },
            R::ProtocolError,
        ),
        (
            "request response information 2",
            connect_5(&[0x19, 2]),
            None,
            E::InvalidPropertyValue { id: 0x19 },
            R::ProtocolError,
        ),
        (
            "authentication data without method",
            connect_5(&[0x16, 0, 1, 0xAA]),
            None,
            E::AuthenticationDataWithoutMethod,
            R::ProtocolError,
        ),
        (
            "user property value with U+0000",
            connect_5(&[0x26, 0, 1, b'k', 0, 1, 0]),
            None,
            E::NulInString,
            R::MalformedPacket,
        ),
        ("property value past its block", connect_5(&[0x11, 0]), None, E::UnexpectedEnd, R::MalformedPacket),
        (
            "property length past the packet",
            pkt(0x10, &[0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 60, 0x7F, 0x11, 0, 0, 0, 0]),
            None,
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "property length of five bytes",
            pkt(0x10, &[0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 60, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),
            None,
            E::MalformedVarInt,
            R::MalformedPacket,
        ),
        (
            "property length not in shortest form",
            pkt(0x10, &[0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 60, 0x80, 0x00, 0, 1, b'c']),
            None,
            E::MalformedVarInt,
            R::MalformedPacket,
        ),
        (
            "subscription identifier in will properties",
            connect_5_will(&[0x0B, 1]),
            None,
            E::PropertyNotAllowed { id: 0x0B, packet_type: T::Connect },
            R::MalformedPacket,
        ),
        (
            "will payload format 2",
            connect_5_will(&[0x01, 2]),
            None,
            E::InvalidPropertyValue { id: 0x01 },
            R::ProtocolError,
        ),
        (
            "will delay twice",
            connect_5_will(&[0x18, 0, 0, 0, 1, 0x18, 0, 0, 0, 1]),
            None,
            E::DuplicateProperty(0x18),
            R::ProtocolError,
        ),
        // PUBLISH.
        ("topic alias 0", publish_5(&[0x23, 0, 0]), Some(V5), E::ZeroTopicAlias, R::TopicAliasInvalid),
        (
            "payload format indicator 2",
            publish_5(&[0x01, 2]),
            Some(V5),
            E::InvalidPropertyValue { id: 0x01 },
            R::ProtocolError,
        ),
        (
            "subscription identifier 0 in PUBLISH",
            publish_5(&[0x0B, 0]),
            Some(V5),
            E::InvalidPropertyValue { id: 0x0B },
            R::ProtocolError,
        ),
        (
            "message expiry twice",
            publish_5(&[0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 1]),
            Some(V5),
            E::DuplicateProperty(0x02),
            R::ProtocolError,
        ),
        (
            "topic alias twice",
            publish_5(&[0x23, 0, 1, 0x23, 0, 1]),
            Some(V5),
            E::DuplicateProperty(0x23),
            R::ProtocolError,
        ),
        (
            "maximum QoS in PUBLISH",
            publish_5(&[0x24, 1]),
            Some(V5),
            E::PropertyNotAllowed { id: 0x24, packet_type: T::Publish },
            R::MalformedPacket,
        ),
        (
            "response topic not UTF-8",
            publish_5(&[0x08, 0, 1, 0xFF]),
            Some(V5),
            E::InvalidUtf8,
            R::MalformedPacket,
        ),
        (
            "PUBLISH packet id 0",
            pkt(0x32, &[0, 1, b't', 0, 0]),
            Some(V311),
            E::ZeroPacketId,
            R::ProtocolError,
        ),
        (
            "PUBLISH QoS 1 without packet id",
            pkt(0x32, &[0, 1, b't']),
            Some(V311),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "PUBLISH topic longer than the packet",
            pkt(0x30, &[0, 9, b't']),
            Some(V311),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "PUBLISH topic with U+0000",
            pkt(0x30, &[0, 2, b't', 0]),
            Some(V311),
            E::NulInString,
            R::MalformedPacket,
        ),
        (
            "PUBLISH 5.0 without property length",
            pkt(0x30, &[0, 1, b't']),
            Some(V5),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        // SUBSCRIBE, UNSUBSCRIBE.
        (
            "SUBSCRIBE without filters in 3.1.1",
            pkt(0x82, &[0, 1]),
            Some(V311),
            E::NoTopicFilters(T::Subscribe),
            R::ProtocolError,
        ),
        (
            "SUBSCRIBE without filters in 5.0",
            subscribe_5(&[], &[]),
            Some(V5),
            E::NoTopicFilters(T::Subscribe),
            R::ProtocolError,
        ),
        (
            "SUBSCRIBE filter without options",
            pkt(0x82, &[0, 1, 0, 1, b'a']),
            Some(V311),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "SUBSCRIBE reserved option bits",
            subscribe_5(&[], &[0, 1, b'a', 0xC0]),
            Some(V5),
            E::SubscriptionOptionsReservedBits(0xC0),
            R::MalformedPacket,
        ),
        (
            "SUBSCRIBE no local in 3.1.1",
            pkt(0x82, &[0, 1, 0, 1, b'a', 0x04]),
            Some(V311),
            E::SubscriptionOptionsReservedBits(0x04),
            R::MalformedPacket,
        ),
        (
            "SUBSCRIBE retain handling in 3.1",
            pkt(0x82, &[0, 1, 0, 1, b'a', 0x10]),
            Some(V31),
            E::SubscriptionOptionsReservedBits(0x10),
            R::MalformedPacket,
        ),
        (
            "SUBSCRIBE QoS 3",
            subscribe_5(&[], &[0, 1, b'a', 0x03]),
            Some(V5),
            E::InvalidQoS(3),
            R::MalformedPacket,
        ),
        (
            "SUBSCRIBE retain handling 3",
            subscribe_5(&[], &[0, 1, b'a', 0x30]),
            Some(V5),
            E::InvalidRetainHandling(3),
            R::ProtocolError,
        ),
        (
            "SUBSCRIBE subscription identifier twice",
            subscribe_5(&[0x0B, 1, 0x0B, 2], &[0, 1, b'a', 0]),
            Some(V5),
            E::DuplicateProperty(0x0B),
            R::ProtocolError,
        ),
        (
            "SUBSCRIBE subscription identifier 0",
            subscribe_5(&[0x0B, 0], &[0, 1, b'a', 0]),
            Some(V5),
            E::InvalidPropertyValue { id: 0x0B },
            R::ProtocolError,
        ),
        (
            "SUBSCRIBE reason string",
            subscribe_5(&[0x1F, 0, 0], &[0, 1, b'a', 0]),
            Some(V5),
            E::PropertyNotAllowed { id: 0x1F, packet_type: T::Subscribe },
            R::MalformedPacket,
        ),
        (
            "SUBSCRIBE packet id 0",
            pkt(0x82, &[0, 0, 0, 1, b'a', 0]),
            Some(V311),
            E::ZeroPacketId,
            R::ProtocolError,
        ),
        (
            "UNSUBSCRIBE without filters",
            pkt(0xA2, &[0, 1]),
            Some(V311),
            E::NoTopicFilters(T::Unsubscribe),
            R::ProtocolError,
        ),
        (
            "UNSUBSCRIBE without filters in 5.0",
            pkt(0xA2, &[0, 1, 0]),
            Some(V5),
            E::NoTopicFilters(T::Unsubscribe),
            R::ProtocolError,
        ),
        (
            "UNSUBSCRIBE reason string",
            pkt(0xA2, &[0, 1, 3, 0x1F, 0, 0, 0, 1, b'a']),
            Some(V5),
            E::PropertyNotAllowed { id: 0x1F, packet_type: T::Unsubscribe },
            R::MalformedPacket,
        ),
        (
            "UNSUBSCRIBE filter cut short",
            pkt(0xA2, &[0, 1, 0, 2, b'a']),
            Some(V311),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        // Acknowledgements.
        (
            "PUBACK too long in 3.1.1",
            pkt(0x40, &[0, 1, 0]),
            Some(V311),
            E::TrailingBytes(1),
            R::MalformedPacket,
        ),
        ("PUBACK too short", pkt(0x40, &[0]), Some(V5), E::UnexpectedEnd, R::MalformedPacket),
        ("PUBACK packet id 0", pkt(0x40, &[0, 0]), Some(V311), E::ZeroPacketId, R::ProtocolError),
        (
            "PUBACK unknown reason code",
            pkt(0x40, &[0, 1, 0x05]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::PubAck, code: 0x05 },
            R::MalformedPacket,
        ),
        (
            "PUBREL with a PUBACK reason code",
            pkt(0x62, &[0, 1, 0x10]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::PubRel, code: 0x10 },
            R::MalformedPacket,
        ),
        (
            "PUBCOMP with granted QoS 1",
            pkt(0x70, &[0, 1, 0x01]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::PubComp, code: 0x01 },
            R::MalformedPacket,
        ),
        (
            "PUBACK user property cut short",
            pkt(0x40, &[0, 1, 0, 3, 0x26, 0, 0]),
            Some(V5),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "PUBREC with topic alias",
            pkt(0x50, &[0, 1, 0, 3, 0x23, 0, 1]),
            Some(V5),
            E::PropertyNotAllowed { id: 0x23, packet_type: T::PubRec },
            R::MalformedPacket,
        ),
        ("PINGREQ with a body", pkt(0xC0, &[0]), Some(V311), E::TrailingBytes(1), R::MalformedPacket),
        ("PINGRESP with a body", pkt(0xD0, &[0, 0]), Some(V5), E::TrailingBytes(2), R::MalformedPacket),
        (
            "CONNACK reserved flags",
            pkt(0x20, &[0x02, 0]),
            Some(V311),
            E::ConnAckReservedFlags,
            R::MalformedPacket,
        ),
        (
            "CONNACK session present with a refusal",
            pkt(0x20, &[0x01, 0x05]),
            Some(V311),
            E::SessionPresentOnRefusal,
            R::ProtocolError,
        ),
        (
            "CONNACK return code 6",
            pkt(0x20, &[0, 6]),
            Some(V311),
            E::InvalidReasonCode { packet_type: T::ConnAck, code: 6 },
            R::MalformedPacket,
        ),
        (
            "CONNACK reason server shutting down",
            pkt(0x20, &[0, 0x8B, 0]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::ConnAck, code: 0x8B },
            R::MalformedPacket,
        ),
        (
            "CONNACK maximum QoS 2",
            pkt(0x20, &[0, 0, 2, 0x24, 2]),
            Some(V5),
            E::InvalidPropertyValue { id: 0x24 },
            R::ProtocolError,
        ),
        (
            "CONNACK retain available 3",
            pkt(0x20, &[0, 0, 2, 0x25, 3]),
            Some(V5),
            E::InvalidPropertyValue { id: 0x25 },
            R::ProtocolError,
        ),
        ("CONNACK without reason code", pkt(0x20, &[0]), Some(V5), E::UnexpectedEnd, R::MalformedPacket),
        (
            "CONNACK 5.0 without property length",
            pkt(0x20, &[0, 0]),
            Some(V5),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "SUBACK code 3 in 3.1.1",
            pkt(0x90, &[0, 1, 3]),
            Some(V311),
            E::InvalidReasonCode { packet_type: T::SubAck, code: 3 },
            R::MalformedPacket,
        ),
        (
            "SUBACK code 0x92 in 5.0",
            pkt(0x90, &[0, 1, 0, 0x92]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::SubAck, code: 0x92 },
            R::MalformedPacket,
        ),
        (
            "UNSUBACK with payload in 3.1.1",
            pkt(0xB0, &[0, 1, 0]),
            Some(V311),
            E::TrailingBytes(1),
            R::MalformedPacket,
        ),
        (
            "UNSUBACK code 0x10",
            pkt(0xB0, &[0, 1, 0, 0x10]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::UnsubAck, code: 0x10 },
            R::MalformedPacket,
        ),
        (
            "DISCONNECT with a body in 3.1.1",
            pkt(0xE0, &[0]),
            Some(V311),
            E::TrailingBytes(1),
            R::MalformedPacket,
        ),
        (
            "DISCONNECT reason 0x18",
            pkt(0xE0, &[0x18]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::Disconnect, code: 0x18 },
            R::MalformedPacket,
        ),
        (
            "DISCONNECT session expiry cut short",
            pkt(0xE0, &[0, 2, 0x11, 0]),
            Some(V5),
            E::UnexpectedEnd,
            R::MalformedPacket,
        ),
        (
            "DISCONNECT with authentication method",
            pkt(0xE0, &[0, 4, 0x15, 0, 1, b'm']),
            Some(V5),
            E::PropertyNotAllowed { id: 0x15, packet_type: T::Disconnect },
            R::MalformedPacket,
        ),
        (
            "AUTH reason 0x04",
            pkt(0xF0, &[0x04]),
            Some(V5),
            E::InvalidReasonCode { packet_type: T::Auth, code: 0x04 },
            R::MalformedPacket,
        ),
        (
            "AUTH with session expiry",
            pkt(0xF0, &[0x18, 5, 0x11, 0, 0, 0, 0]),
            Some(V5),
            E::PropertyNotAllowed { id: 0x11, packet_type: T::Auth },
            R::MalformedPacket,
        ),
    ]
}

#[test]
fn malformed_packets_are_refused_with_the_right_error_and_reason_code() {
    for (what, bytes, version, error, reason) in table() {
        assert_eq!(try_decode(&bytes, version), Err(error.clone()), "{what}: {bytes:02X?}");
        assert_eq!(error.reason_code(), reason, "{what}");
        // The message names the problem without echoing packet contents.
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn prefixes_and_corruptions_of_malformed_packets_never_panic() {
    for (_, bytes, version, _, _) in table() {
        for end in 0..=bytes.len() {
            let _ = try_decode(&bytes[..end], version);
        }
        for i in 0..bytes.len() {
            for value in [0x00, 0x01, 0x7F, 0x80, 0xFF] {
                let mut corrupt = bytes.clone();
                corrupt[i] = value;
                let _ = try_decode(&corrupt, version);
            }
        }
    }
}

#[test]
fn error_messages_name_properties() {
    assert_eq!(
        E::DuplicateProperty(0x11).to_string(),
        "property Session Expiry Interval (0x11) appears more than once"
    );
    assert_eq!(
        E::PropertyNotAllowed { id: 0x23, packet_type: T::Connect }.to_string(),
        "property Topic Alias (0x23) is not allowed in CONNECT"
    );
    assert_eq!(
        E::PacketTooLarge { size: 2_097_155, max: 1024 }.to_string(),
        "packet of 2097155 bytes exceeds the maximum packet size of 1024 bytes"
    );
}
