//! What the encoder refuses: anything the protocol cannot express or the decoder would refuse.
//! A refused packet leaves the buffer as it was.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::mqtt::{
    AckProperties, Auth, ConnAck, ConnAckProperties, Connect, ConnectProperties, EncodeError, Packet,
    PacketType, ProtocolVersion, PubResponse, Publish, PublishProperties, QoS, ReasonCode, SubAck, Subscribe,
    SubscribeProperties, UnsubAck, Unsubscribe, encode, encoded_len,
};

use ProtocolVersion::{V5, V31, V311};

#[expect(clippy::needless_pass_by_value, reason = "call sites build the packet inline")]
fn refused(packet: Packet, version: ProtocolVersion, error: EncodeError) {
    let mut buf = BytesMut::from(&b"keep"[..]);
    assert_eq!(encode(&packet, version, &mut buf), Err(error.clone()), "{packet:?}");
    assert_eq!(&buf[..], b"keep", "a refused packet must not leave bytes behind");
    assert_eq!(encoded_len(&packet, version), Err(error));
}

fn publish(qos: QoS, packet_id: Option<u16>) -> Publish {
    Publish { qos, packet_id, topic: Arc::from("t"), ..Publish::default() }
}

#[test]
fn publish_packet_id_must_match_qos() {
    refused(
        Packet::Publish(publish(QoS::AtLeastOnce, None)),
        V311,
        EncodeError::PacketIdDoesNotMatchQoS(QoS::AtLeastOnce),
    );
    refused(
        Packet::Publish(publish(QoS::AtMostOnce, Some(1))),
        V5,
        EncodeError::PacketIdDoesNotMatchQoS(QoS::AtMostOnce),
    );
    refused(Packet::Publish(publish(QoS::ExactlyOnce, Some(0))), V5, EncodeError::ZeroPacketId);
    let dup = Publish { dup: true, ..publish(QoS::AtMostOnce, None) };
    refused(Packet::Publish(dup.clone()), V5, EncodeError::DupOnQoS0);
    refused(Packet::Publish(dup.clone()), V311, EncodeError::DupOnQoS0);
    let mut buf = BytesMut::new();
    assert_eq!(encode(&Packet::Publish(dup), V31, &mut buf), Ok(()));
}

#[test]
fn strings_must_be_expressible() {
    let nul = Publish { topic: Arc::from("a\0b"), ..publish(QoS::AtMostOnce, None) };
    refused(Packet::Publish(nul), V311, EncodeError::NulInString);
    let long = "x".repeat(65_536);
    let too_long = Publish { topic: Arc::from(long.as_str()), ..publish(QoS::AtMostOnce, None) };
    refused(Packet::Publish(too_long), V311, EncodeError::StringTooLong(65_536));
    let max = Publish { topic: Arc::from(&long[..65_535]), ..publish(QoS::AtMostOnce, None) };
    assert!(encode(&Packet::Publish(max), V311, &mut BytesMut::new()).is_ok());
    let connect = Connect {
        password: Some(Bytes::from(vec![0; 65_536])),
        username: Some("u".into()),
        ..Connect::default()
    };
    refused(Packet::Connect(connect), V311, EncodeError::BinaryTooLong(65_536));
    let nul_property = Packet::PubAck(PubResponse {
        packet_id: 1,
        reason_code: ReasonCode::Success,
        properties: AckProperties { reason_string: Some("\0".into()), ..Default::default() },
    });
    refused(nul_property, V5, EncodeError::NulInString);
}

#[test]
fn reason_codes_must_belong_to_the_packet() {
    let puback = Packet::PubAck(PubResponse {
        packet_id: 1,
        reason_code: ReasonCode::GrantedQoS1,
        ..Default::default()
    });
    refused(
        puback,
        V5,
        EncodeError::InvalidReasonCode { packet_type: PacketType::PubAck, code: ReasonCode::GrantedQoS1 },
    );
    let connack =
        Packet::ConnAck(ConnAck { reason_code: ReasonCode::ServerShuttingDown, ..Default::default() });
    refused(
        connack,
        V311,
        EncodeError::InvalidReasonCode {
            packet_type: PacketType::ConnAck,
            code: ReasonCode::ServerShuttingDown,
        },
    );
    let suback = Packet::SubAck(SubAck {
        packet_id: 1,
        reason_codes: vec![ReasonCode::NoMatchingSubscribers],
        ..Default::default()
    });
    refused(
        suback,
        V311,
        EncodeError::InvalidReasonCode {
            packet_type: PacketType::SubAck,
            code: ReasonCode::NoMatchingSubscribers,
        },
    );
    let unsuback = Packet::UnsubAck(UnsubAck {
        packet_id: 1,
        reason_codes: vec![ReasonCode::GrantedQoS2],
        ..Default::default()
    });
    refused(
        unsuback,
        V5,
        EncodeError::InvalidReasonCode { packet_type: PacketType::UnsubAck, code: ReasonCode::GrantedQoS2 },
    );
}

#[test]
fn structure_must_be_expressible() {
    let refusal =
        ConnAck { session_present: true, reason_code: ReasonCode::NotAuthorized, ..Default::default() };
    refused(Packet::ConnAck(refusal), V5, EncodeError::SessionPresentOnRefusal);
    refused(
        Packet::Subscribe(Subscribe { packet_id: 1, ..Default::default() }),
        V5,
        EncodeError::NoTopicFilters(PacketType::Subscribe),
    );
    refused(
        Packet::Unsubscribe(Unsubscribe { packet_id: 1, ..Default::default() }),
        V311,
        EncodeError::NoTopicFilters(PacketType::Unsubscribe),
    );
    refused(Packet::UnsubAck(UnsubAck::default()), V311, EncodeError::ZeroPacketId);
    refused(
        Packet::Auth(Auth::default()),
        V311,
        EncodeError::NotInVersion { packet_type: PacketType::Auth, version: V311 },
    );
    let password_only = Connect { password: Some(Bytes::from_static(b"p")), ..Connect::default() };
    refused(Packet::Connect(password_only.clone()), V311, EncodeError::PasswordWithoutUsername);
    let five = Connect { protocol: V5, ..password_only };
    assert!(encode(&Packet::Connect(five.clone()), V5, &mut BytesMut::new()).is_ok());
    refused(Packet::Connect(five), V311, EncodeError::VersionMismatch { connect: V5, requested: V311 });
}

#[test]
fn property_values_must_be_in_range() {
    let connect = |properties| Packet::Connect(Connect { protocol: V5, properties, ..Connect::default() });
    refused(
        connect(ConnectProperties { receive_maximum: Some(0), ..Default::default() }),
        V5,
        EncodeError::InvalidPropertyValue { id: 0x21 },
    );
    refused(
        connect(ConnectProperties { maximum_packet_size: Some(0), ..Default::default() }),
        V5,
        EncodeError::InvalidPropertyValue { id: 0x27 },
    );
    refused(
        connect(ConnectProperties {
            authentication_data: Some(Bytes::from_static(b"d")),
            ..Default::default()
        }),
        V5,
        EncodeError::InvalidPropertyValue { id: 0x16 },
    );
    let connack = Packet::ConnAck(ConnAck {
        properties: ConnAckProperties { maximum_qos: Some(QoS::ExactlyOnce), ..Default::default() },
        ..Default::default()
    });
    refused(connack, V5, EncodeError::InvalidPropertyValue { id: 0x24 });
    let with = |properties| Packet::Publish(Publish { properties, ..publish(QoS::AtMostOnce, None) });
    refused(
        with(PublishProperties { topic_alias: Some(0), ..Default::default() }),
        V5,
        EncodeError::InvalidPropertyValue { id: 0x23 },
    );
    refused(
        with(PublishProperties { payload_format_indicator: Some(2), ..Default::default() }),
        V5,
        EncodeError::InvalidPropertyValue { id: 0x01 },
    );
    refused(
        with(PublishProperties { subscription_identifiers: vec![0], ..Default::default() }),
        V5,
        EncodeError::InvalidPropertyValue { id: 0x0B },
    );
    refused(
        with(PublishProperties { subscription_identifiers: vec![268_435_456], ..Default::default() }),
        V5,
        EncodeError::InvalidPropertyValue { id: 0x0B },
    );
    let subscribe = Packet::Subscribe(Subscribe {
        packet_id: 1,
        filters: vec![("a".into(), Default::default())],
        properties: SubscribeProperties { subscription_identifier: Some(0), ..Default::default() },
    });
    refused(subscribe.clone(), V5, EncodeError::InvalidPropertyValue { id: 0x0B });
    // 3.x leaves the properties out, so they cannot be wrong there.
    assert!(encode(&subscribe, V311, &mut BytesMut::new()).is_ok());
}

#[test]
fn a_packet_beyond_the_largest_remaining_length_is_refused() {
    let payload = Bytes::from(vec![0u8; 268_435_456]);
    let huge = Packet::Publish(Publish { payload, ..publish(QoS::AtMostOnce, None) });
    refused(huge, V311, EncodeError::PacketTooLarge(268_435_456 + 3));
}
