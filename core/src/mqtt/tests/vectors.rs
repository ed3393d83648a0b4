//! Byte vectors from the MQTT 3.1.1 and 5.0 specifications and hand-assembled packets, checked
//! byte by byte in both directions.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{concat, decode_one, encode_vec, pkt, props, try_decode};
use crate::mqtt::{
    AckProperties, Auth, AuthProperties, ConnAck, ConnAckProperties, Connect, ConnectProperties, DecodeError,
    Disconnect, DisconnectProperties, EncodeError, MAX_VAR_INT, Packet, ProtocolVersion, PubResponse,
    Publish, PublishProperties, QoS, ReasonCode, RetainHandling, SubAck, Subscribe, SubscribeProperties,
    SubscriptionOptions, UnknownReasonCode, UnsubAck, Unsubscribe, Will, WillProperties, decode,
    decode_var_int, encode, encode_var_int, var_int_len,
};

use ProtocolVersion::{V5, V31, V311};

/// Both directions: `bytes` decodes to `packet`, and `packet` encodes to `bytes`.
#[expect(clippy::needless_pass_by_value, reason = "call sites build the packet inline")]
fn both_ways(bytes: &[u8], version: ProtocolVersion, packet: Packet) {
    let decode_version = if matches!(packet, Packet::Connect(_)) { None } else { Some(version) };
    assert_eq!(decode_one(bytes, decode_version), packet);
    assert_eq!(encode_vec(&packet, version), bytes);
}

#[test]
fn variable_byte_integer_boundaries_of_the_specification() {
    // MQTT 5.0 §1.5.5, table 1-1 (also 3.1.1 §2.2.3).
    let table: &[(u32, &[u8])] = &[
        (0, &[0x00]),
        (127, &[0x7F]),
        (128, &[0x80, 0x01]),
        (16_383, &[0xFF, 0x7F]),
        (16_384, &[0x80, 0x80, 0x01]),
        (2_097_151, &[0xFF, 0xFF, 0x7F]),
        (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
        (268_435_455, &[0xFF, 0xFF, 0xFF, 0x7F]),
    ];
    for &(value, bytes) in table {
        let mut buf = BytesMut::new();
        assert_eq!(encode_var_int(value, &mut buf), Ok(bytes.len()), "{value}");
        assert_eq!(&buf[..], bytes, "{value}");
        assert_eq!(var_int_len(value), bytes.len());
        assert_eq!(decode_var_int(bytes), Ok(Some((value, bytes.len()))), "{value}");
        // Trailing bytes belong to whatever follows.
        let mut longer = bytes.to_vec();
        longer.push(0xAA);
        assert_eq!(decode_var_int(&longer), Ok(Some((value, bytes.len()))));
    }
    assert_eq!(MAX_VAR_INT, 268_435_455);
    let mut buf = BytesMut::new();
    assert_eq!(encode_var_int(MAX_VAR_INT + 1, &mut buf), Err(EncodeError::VarIntTooLarge(MAX_VAR_INT + 1)));
    assert!(buf.is_empty());
    assert_eq!(decode_var_int(&[]), Ok(None));
    assert_eq!(decode_var_int(&[0x80, 0x80, 0x80]), Ok(None));
    assert_eq!(decode_var_int(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F]), Err(DecodeError::MalformedVarInt));
    assert_eq!(decode_var_int(&[0x80, 0x00]), Err(DecodeError::MalformedVarInt));
    assert_eq!(decode_var_int(&[0xFF, 0x80, 0x00]), Err(DecodeError::MalformedVarInt));
}

#[test]
fn remaining_length_crosses_one_byte() {
    // A QoS 0 PUBLISH to "t" whose payload makes the remaining length exactly 127, then 128.
    for (payload_len, header) in [(124usize, vec![0x30, 0x7F]), (125, vec![0x30, 0x80, 0x01])] {
        let packet = Packet::Publish(Publish {
            topic: Arc::from("t"),
            payload: Bytes::from(vec![0x55; payload_len]),
            ..Publish::default()
        });
        let bytes = encode_vec(&packet, V311);
        assert_eq!(&bytes[..header.len()], &header[..]);
        assert_eq!(bytes.len(), header.len() + 3 + payload_len);
        assert_eq!(decode_one(&bytes, Some(V311)), packet);
    }
}

#[test]
fn packets_without_body() {
    for v in [V31, V311, V5] {
        both_ways(&[0xC0, 0x00], v, Packet::PingReq);
        both_ways(&[0xD0, 0x00], v, Packet::PingResp);
        both_ways(&[0xE0, 0x00], v, Packet::Disconnect(Disconnect::default()));
    }
    both_ways(&[0xF0, 0x00], V5, Packet::Auth(Auth::default()));
}

/// The CONNECT variable header of MQTT 3.1.1 §3.1.2.10 (figure 3.6: protocol "MQTT", level 4,
/// flags 0xCE, keep alive 10) with a payload carrying every field those flags announce.
#[test]
fn connect_example_of_mqtt_3_1_1() {
    let bytes = pkt(
        0x10,
        &concat(&[
            &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04, 0xCE, 0x00, 0x0A],
            &[0x00, 0x02, b'c', b'1'],
            &[0x00, 0x03, b'w', b'/', b't'],
            &[0x00, 0x03, b'b', b'y', b'e'],
            &[0x00, 0x04, b'u', b's', b'e', b'r'],
            &[0x00, 0x02, b'p', b'w'],
        ]),
    );
    assert_eq!(&bytes[..2], &[0x10, 34]);
    let connect = Connect {
        protocol: V311,
        clean_start: true,
        keep_alive: 10,
        client_id: "c1".into(),
        will: Some(Will {
            topic: Arc::from("w/t"),
            payload: Bytes::from_static(b"bye"),
            qos: QoS::AtLeastOnce,
            retain: false,
            properties: WillProperties::default(),
        }),
        username: Some("user".into()),
        password: Some(Bytes::from_static(b"pw")),
        properties: ConnectProperties::default(),
    };
    both_ways(&bytes, V311, Packet::Connect(connect.clone()));
    // Once the version is known, a CONNECT still decodes by its own level.
    assert_eq!(decode_one(&bytes, Some(V5)), Packet::Connect(connect));
}

/// The CONNECT variable header of MQTT 5.0 §3.1.2.12 (flags 0xCE, keep alive 10, Session
/// Expiry Interval 10), with will properties and a full payload.
#[test]
fn connect_example_of_mqtt_5() {
    let bytes = pkt(
        0x10,
        &concat(&[
            &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0xCE, 0x00, 0x0A],
            &[0x05, 0x11, 0x00, 0x00, 0x00, 0x0A],
            &[0x00, 0x02, b'c', b'1'],
            &props(&[0x18, 0x00, 0x00, 0x00, 0x05, 0x01, 0x01]),
            &[0x00, 0x03, b'w', b'/', b't'],
            &[0x00, 0x03, b'b', b'y', b'e'],
            &[0x00, 0x04, b'u', b's', b'e', b'r'],
            &[0x00, 0x02, b'p', b'w'],
        ]),
    );
    let connect = Connect {
        protocol: V5,
        clean_start: true,
        keep_alive: 10,
        client_id: "c1".into(),
        will: Some(Will {
            topic: Arc::from("w/t"),
            payload: Bytes::from_static(b"bye"),
            qos: QoS::AtLeastOnce,
            retain: false,
            properties: WillProperties {
                delay_interval: Some(5),
                payload_format_indicator: Some(1),
                ..WillProperties::default()
            },
        }),
        username: Some("user".into()),
        password: Some(Bytes::from_static(b"pw")),
        properties: ConnectProperties { session_expiry_interval: Some(10), ..ConnectProperties::default() },
    };
    both_ways(&bytes, V5, Packet::Connect(connect));
}

#[test]
fn connect_of_mqtt_3_1() {
    let bytes =
        pkt(0x10, &concat(&[&[0x00, 0x06], b"MQIsdp", &[0x03, 0x02, 0x00, 0x3C], &[0x00, 0x04], b"mosq"]));
    let connect = Connect {
        protocol: V31,
        clean_start: true,
        keep_alive: 60,
        client_id: "mosq".into(),
        ..Connect::default()
    };
    both_ways(&bytes, V31, Packet::Connect(connect));
}

#[test]
fn connect_5_allows_password_without_user_name_and_carries_authentication() {
    let bytes = pkt(
        0x10,
        &concat(&[
            &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x40, 0x00, 0x00],
            &props(&[
                0x21, 0x00, 0x10, // receive maximum 16
                0x27, 0x00, 0x00, 0x10, 0x00, // maximum packet size 4096
                0x22, 0x00, 0x05, // topic alias maximum 5
                0x19, 0x01, // request response information
                0x17, 0x00, // request problem information off
                0x26, 0x00, 0x01, b'a', 0x00, 0x01, b'b', // user property a=b
                0x15, 0x00, 0x05, b'S', b'C', b'R', b'A', b'M', // authentication method
                0x16, 0x00, 0x02, 0xDE, 0xAD, // authentication data
            ]),
            &[0x00, 0x00],
            &[0x00, 0x03, b's', b'e', b'c'],
        ]),
    );
    let connect = Connect {
        protocol: V5,
        password: Some(Bytes::from_static(b"sec")),
        properties: ConnectProperties {
            receive_maximum: Some(16),
            maximum_packet_size: Some(4096),
            topic_alias_maximum: Some(5),
            request_response_information: Some(true),
            request_problem_information: Some(false),
            user_properties: vec![("a".into(), "b".into())],
            authentication_method: Some("SCRAM".into()),
            authentication_data: Some(Bytes::from_static(&[0xDE, 0xAD])),
            ..ConnectProperties::default()
        },
        ..Connect::default()
    };
    both_ways(&bytes, V5, Packet::Connect(connect));
}

#[test]
fn connect_3_1_tolerates_announced_but_missing_credentials() {
    // User name and password flags set, neither field present: Mosquitto accepts this from 3.1
    // clients, and so do we; 3.1.1 does not.
    let body = concat(&[&[0x00, 0x06], b"MQIsdp", &[0x03, 0xC2, 0x00, 0x3C, 0x00, 0x01, b'c']]);
    let Packet::Connect(c) = decode_one(&pkt(0x10, &body), None) else { panic!("not a CONNECT") };
    assert_eq!((c.protocol, c.username, c.password), (V31, None, None));

    let body = concat(&[&[0x00, 0x04], b"MQTT", &[0x04, 0xC2, 0x00, 0x3C, 0x00, 0x01, b'c']]);
    assert_eq!(try_decode(&pkt(0x10, &body), None), Err(DecodeError::UnexpectedEnd));
}

#[test]
fn connect_debug_never_shows_secrets() {
    let connect = Connect {
        password: Some(Bytes::from_static(b"hunter2")),
        properties: ConnectProperties {
            authentication_method: Some("m".into()),
            authentication_data: Some(Bytes::from_static(b"tok3n")),
            ..ConnectProperties::default()
        },
        ..Connect::default()
    };
    let shown = format!("{connect:?}");
    assert!(!shown.contains("hunter2") && !shown.contains("tok3n"), "{shown}");
    assert!(shown.contains("7 bytes redacted") && shown.contains("5 bytes redacted"), "{shown}");
    let auth =
        AuthProperties { authentication_data: Some(Bytes::from_static(b"tok3n")), ..Default::default() };
    assert!(!format!("{auth:?}").contains("tok3n"));
    let connack =
        ConnAckProperties { authentication_data: Some(Bytes::from_static(b"tok3n")), ..Default::default() };
    assert!(!format!("{connack:?}").contains("tok3n"));
}

#[test]
fn connack_3_x_return_codes() {
    let cases = [
        (ReasonCode::Success, 0),
        (ReasonCode::UnsupportedProtocolVersion, 1),
        (ReasonCode::ClientIdentifierNotValid, 2),
        (ReasonCode::ServerUnavailable, 3),
        (ReasonCode::BadUserNameOrPassword, 4),
        (ReasonCode::NotAuthorized, 5),
    ];
    for (reason, code) in cases {
        let packet = Packet::ConnAck(ConnAck { reason_code: reason, ..ConnAck::default() });
        both_ways(&[0x20, 0x02, 0x00, code], V311, packet.clone());
        both_ways(&[0x20, 0x02, 0x00, code], V31, packet);
    }
    // Codes 3.x lacks are sent as the nearest refusal, never as acceptance.
    for (reason, code) in [
        (ReasonCode::Banned, 5),
        (ReasonCode::BadAuthenticationMethod, 4),
        (ReasonCode::ServerBusy, 3),
        (ReasonCode::MalformedPacket, 3),
        (ReasonCode::UseAnotherServer, 3),
    ] {
        let packet = Packet::ConnAck(ConnAck { reason_code: reason, ..ConnAck::default() });
        assert_eq!(encode_vec(&packet, V311), [0x20, 0x02, 0x00, code], "{reason:?}");
    }
    let present = Packet::ConnAck(ConnAck { session_present: true, ..ConnAck::default() });
    both_ways(&[0x20, 0x02, 0x01, 0x00], V311, present.clone());
    // 3.1 has no session present flag and ignores that byte.
    assert_eq!(encode_vec(&present, V31), [0x20, 0x02, 0x00, 0x00]);
    assert_eq!(decode_one(&[0x20, 0x02, 0x01, 0x00], Some(V31)), Packet::ConnAck(ConnAck::default()));
}

#[test]
fn connack_5_with_properties() {
    let bytes = pkt(
        0x20,
        &concat(&[
            &[0x01, 0x00],
            &props(&[
                0x21, 0x00, 0x14, // receive maximum 20
                0x24, 0x01, // maximum QoS 1
                0x25, 0x00, // retain not available
                0x12, 0x00, 0x02, b'i', b'd', // assigned client identifier
                0x22, 0x00, 0x0A, // topic alias maximum 10
                0x28, 0x01, // wildcard subscriptions available
                0x29, 0x00, // subscription identifiers not available
                0x2A, 0x01, // shared subscriptions available
                0x13, 0x00, 0x1E, // server keep alive 30
            ]),
        ]),
    );
    assert_eq!(&bytes[..4], &[0x20, 0x1B, 0x01, 0x00]);
    let connack = ConnAck {
        session_present: true,
        reason_code: ReasonCode::Success,
        properties: ConnAckProperties {
            receive_maximum: Some(20),
            maximum_qos: Some(QoS::AtLeastOnce),
            retain_available: Some(false),
            assigned_client_identifier: Some("id".into()),
            topic_alias_maximum: Some(10),
            wildcard_subscription_available: Some(true),
            subscription_identifiers_available: Some(false),
            shared_subscription_available: Some(true),
            server_keep_alive: Some(30),
            ..ConnAckProperties::default()
        },
    };
    both_ways(&bytes, V5, Packet::ConnAck(connack));
    // A refusal with a reason string.
    let refusal = ConnAck {
        reason_code: ReasonCode::NotAuthorized,
        properties: ConnAckProperties { reason_string: Some("no".into()), ..Default::default() },
        ..ConnAck::default()
    };
    both_ways(&[0x20, 0x08, 0x00, 0x87, 0x05, 0x1F, 0x00, 0x02, b'n', b'o'], V5, Packet::ConnAck(refusal));
}

#[test]
fn publish_5_with_every_property() {
    let bytes = pkt(
        0x32,
        &concat(&[
            &[0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A],
            &props(&[
                0x01, 0x01, // payload format: UTF-8
                0x02, 0x00, 0x00, 0x00, 0x3C, // message expiry 60 s
                0x23, 0x00, 0x05, // topic alias 5
                0x08, 0x00, 0x01, b'r', // response topic
                0x09, 0x00, 0x02, 0x01, 0x02, // correlation data
                0x26, 0x00, 0x01, b'k', 0x00, 0x01, b'v', // user property
                0x0B, 0xAC, 0x02, // subscription identifier 300
                0x0B, 0x01, // subscription identifier 1 (may repeat in PUBLISH)
                0x03, 0x00, 0x01, b't', // content type
            ]),
            b"hi",
        ]),
    );
    assert_eq!(&bytes[..2], &[0x32, 0x2D]);
    let publish = Publish {
        dup: false,
        qos: QoS::AtLeastOnce,
        retain: false,
        topic: Arc::from("a/b"),
        packet_id: Some(10),
        properties: PublishProperties {
            payload_format_indicator: Some(1),
            message_expiry_interval: Some(60),
            topic_alias: Some(5),
            response_topic: Some(Arc::from("r")),
            correlation_data: Some(Bytes::from_static(&[1, 2])),
            user_properties: vec![(Arc::from("k"), Arc::from("v"))],
            subscription_identifiers: vec![300, 1],
            content_type: Some(Arc::from("t")),
        },
        payload: Bytes::from_static(b"hi"),
    };
    both_ways(&bytes, V5, Packet::Publish(publish));
}

#[test]
fn publish_flags_and_3_x_layout() {
    // QoS 2, DUP, RETAIN: 0x3D. 3.x has no property length.
    let bytes = [0x3D, 0x07, 0x00, 0x01, b't', 0x12, 0x34, b'x', b'y'];
    let publish = Publish {
        dup: true,
        qos: QoS::ExactlyOnce,
        retain: true,
        topic: Arc::from("t"),
        packet_id: Some(0x1234),
        payload: Bytes::from_static(b"xy"),
        ..Publish::default()
    };
    both_ways(&bytes, V311, Packet::Publish(publish.clone()));
    // Properties cannot travel in 3.1.1 and are left out.
    let with_props = Publish {
        properties: PublishProperties { message_expiry_interval: Some(5), ..Default::default() },
        ..publish
    };
    assert_eq!(encode_vec(&Packet::Publish(with_props), V311), bytes);
    // 3.1 knows no rule against DUP on QoS 0.
    both_ways(
        &[0x38, 0x03, 0x00, 0x01, b't'],
        V31,
        Packet::Publish(Publish { dup: true, topic: Arc::from("t"), ..Publish::default() }),
    );
}

#[test]
fn publish_payload_shares_the_receive_buffer() {
    let bytes = pkt(0x30, &concat(&[&[0x00, 0x01, b't'], &[0xAB; 64]]));
    let mut buf = BytesMut::from(&bytes[..]);
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let Some(Packet::Publish(p)) = decode(&mut buf, Some(V311), u32::MAX).unwrap() else {
        panic!("not a PUBLISH")
    };
    let payload = p.payload.as_ptr() as usize;
    assert!(payload >= start && payload + p.payload.len() <= end, "the payload was copied");
    assert_eq!(&p.payload[..], &[0xAB; 64]);
}

#[test]
fn acknowledgements_5_short_and_long_forms() {
    let ack = |reason_code, properties| PubResponse { packet_id: 5, reason_code, properties };
    both_ways(
        &[0x40, 0x02, 0x00, 0x05],
        V5,
        Packet::PubAck(ack(ReasonCode::Success, AckProperties::default())),
    );
    both_ways(
        &[0x50, 0x03, 0x00, 0x05, 0x87],
        V5,
        Packet::PubRec(ack(ReasonCode::NotAuthorized, AckProperties::default())),
    );
    both_ways(
        &[0x62, 0x03, 0x00, 0x05, 0x92],
        V5,
        Packet::PubRel(ack(ReasonCode::PacketIdentifierNotFound, AckProperties::default())),
    );
    let with_reason = AckProperties { reason_string: Some("nos".into()), ..AckProperties::default() };
    both_ways(
        &[0x40, 0x0A, 0x00, 0x05, 0x10, 0x06, 0x1F, 0x00, 0x03, b'n', b'o', b's'],
        V5,
        Packet::PubAck(ack(ReasonCode::NoMatchingSubscribers, with_reason.clone())),
    );
    both_ways(
        &[0x70, 0x0A, 0x00, 0x05, 0x00, 0x06, 0x1F, 0x00, 0x03, b'n', b'o', b's'],
        V5,
        Packet::PubComp(ack(ReasonCode::Success, with_reason)),
    );
    // Longer forms of "success, no properties" decode to the same thing.
    let plain = Packet::PubAck(ack(ReasonCode::Success, AckProperties::default()));
    assert_eq!(decode_one(&[0x40, 0x03, 0x00, 0x05, 0x00], Some(V5)), plain);
    assert_eq!(decode_one(&[0x40, 0x04, 0x00, 0x05, 0x00, 0x00], Some(V5)), plain);
    // 3.1.1 carries only the packet identifier.
    let refused = Packet::PubAck(ack(ReasonCode::NotAuthorized, AckProperties::default()));
    assert_eq!(encode_vec(&refused, V311), [0x40, 0x02, 0x00, 0x05]);
    both_ways(&[0x62, 0x02, 0x00, 0x05], V311, Packet::PubRel(ack(ReasonCode::Success, Default::default())));
    // 3.1 retries PUBREL with DUP set.
    assert_eq!(
        decode_one(&[0x6A, 0x02, 0x00, 0x05], Some(V31)),
        Packet::PubRel(ack(ReasonCode::Success, Default::default()))
    );
}

#[test]
fn subscribe_5_with_options_and_identifier() {
    let bytes = pkt(
        0x82,
        &concat(&[
            &[0x00, 0x01],
            &props(&[0x0B, 0x07]),
            &[0x00, 0x03, b'a', b'/', b'+', 0x2D],
            &[0x00, 0x01, b'b', 0x02],
        ]),
    );
    let subscribe = Subscribe {
        packet_id: 1,
        filters: vec![
            (
                "a/+".into(),
                SubscriptionOptions {
                    qos: QoS::AtLeastOnce,
                    no_local: true,
                    retain_as_published: true,
                    retain_handling: RetainHandling::DoNotSend,
                },
            ),
            ("b".into(), SubscriptionOptions::with_qos(QoS::ExactlyOnce)),
        ],
        properties: SubscribeProperties { subscription_identifier: Some(7), ..Default::default() },
    };
    both_ways(&bytes, V5, Packet::Subscribe(subscribe.clone()));
    // 3.1.1 carries the QoS only.
    assert_eq!(
        encode_vec(&Packet::Subscribe(subscribe), V311),
        [0x82, 0x0C, 0x00, 0x01, 0x00, 0x03, b'a', b'/', b'+', 0x01, 0x00, 0x01, b'b', 0x02]
    );
}

#[test]
fn suback_and_unsuback() {
    let suback = |reason_codes| SubAck { packet_id: 1, reason_codes, properties: AckProperties::default() };
    both_ways(
        &[0x90, 0x05, 0x00, 0x01, 0x00, 0x01, 0x80],
        V311,
        Packet::SubAck(suback(vec![
            ReasonCode::GrantedQoS0,
            ReasonCode::GrantedQoS1,
            ReasonCode::UnspecifiedError,
        ])),
    );
    // 3.x knows one failure code.
    assert_eq!(
        encode_vec(&Packet::SubAck(suback(vec![ReasonCode::GrantedQoS2, ReasonCode::NotAuthorized])), V311),
        [0x90, 0x04, 0x00, 0x01, 0x02, 0x80]
    );
    both_ways(
        &[0x90, 0x05, 0x00, 0x01, 0x00, 0x02, 0x87],
        V5,
        Packet::SubAck(suback(vec![ReasonCode::GrantedQoS2, ReasonCode::NotAuthorized])),
    );

    let unsuback = UnsubAck {
        packet_id: 9,
        reason_codes: vec![ReasonCode::Success, ReasonCode::NoSubscriptionExisted],
        properties: AckProperties::default(),
    };
    both_ways(&[0xB0, 0x05, 0x00, 0x09, 0x00, 0x00, 0x11], V5, Packet::UnsubAck(unsuback.clone()));
    assert_eq!(encode_vec(&Packet::UnsubAck(unsuback), V311), [0xB0, 0x02, 0x00, 0x09]);
    both_ways(
        &[0xB0, 0x02, 0x00, 0x09],
        V311,
        Packet::UnsubAck(UnsubAck { packet_id: 9, ..Default::default() }),
    );
}

#[test]
fn unsubscribe_both_versions() {
    let unsubscribe =
        Unsubscribe { packet_id: 2, filters: vec!["a/#".into(), "b".into()], properties: Default::default() };
    let v311 = [0xA2, 0x0A, 0x00, 0x02, 0x00, 0x03, b'a', b'/', b'#', 0x00, 0x01, b'b'];
    both_ways(&v311, V311, Packet::Unsubscribe(unsubscribe.clone()));
    let v5 = [0xA2, 0x0B, 0x00, 0x02, 0x00, 0x00, 0x03, b'a', b'/', b'#', 0x00, 0x01, b'b'];
    both_ways(&v5, V5, Packet::Unsubscribe(unsubscribe));
}

#[test]
fn disconnect_and_auth_5() {
    // The short form (reason code, no property length) is read; it is written with the property
    // length, which every client can read.
    let with_will = Disconnect { reason_code: ReasonCode::DisconnectWithWill, ..Default::default() };
    assert_eq!(decode_one(&[0xE0, 0x01, 0x04], Some(V5)), Packet::Disconnect(with_will.clone()));
    both_ways(&[0xE0, 0x02, 0x04, 0x00], V5, Packet::Disconnect(with_will));
    both_ways(
        &[0xE0, 0x07, 0x00, 0x05, 0x11, 0x00, 0x00, 0x00, 0x00],
        V5,
        Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::NormalDisconnection,
            properties: DisconnectProperties { session_expiry_interval: Some(0), ..Default::default() },
        }),
    );
    // 3.1.1 DISCONNECT carries nothing.
    let shutting_down = Disconnect { reason_code: ReasonCode::ServerShuttingDown, ..Default::default() };
    assert_eq!(encode_vec(&Packet::Disconnect(shutting_down), V311), [0xE0, 0x00]);

    let auth = Auth {
        reason_code: ReasonCode::ContinueAuthentication,
        properties: AuthProperties { authentication_method: Some("SCRAM".into()), ..Default::default() },
    };
    both_ways(
        &[0xF0, 0x0A, 0x18, 0x08, 0x15, 0x00, 0x05, b'S', b'C', b'R', b'A', b'M'],
        V5,
        Packet::Auth(auth),
    );
    // A reason code with no property length is read like DISCONNECT's, and written in full.
    let reauth = Auth { reason_code: ReasonCode::ReAuthenticate, ..Default::default() };
    assert_eq!(decode_one(&[0xF0, 0x01, 0x19], Some(V5)), Packet::Auth(reauth.clone()));
    assert_eq!(encode_vec(&Packet::Auth(reauth), V5), [0xF0, 0x02, 0x19, 0x00]);
}

#[test]
fn reason_codes_round_trip_through_their_byte() {
    let mut known = 0;
    for byte in 0..=255u8 {
        match ReasonCode::try_from(byte) {
            Ok(code) => {
                known += 1;
                assert_eq!(code.code(), byte);
                assert_eq!(u8::from(code), byte);
                assert_eq!(code.is_error(), byte >= 0x80);
            }
            Err(e) => assert_eq!(e, UnknownReasonCode(byte)),
        }
    }
    // MQTT 5.0 §2.4 lists 43 distinct values.
    assert_eq!(known, 43);
    assert_eq!(ReasonCode::NormalDisconnection.code(), 0);
    assert_eq!(ReasonCode::GrantedQoS0.code(), 0);
    assert_eq!(ReasonCode::granted(QoS::ExactlyOnce), ReasonCode::GrantedQoS2);
    for code in 0..=5 {
        let reason = ReasonCode::from_v3_connack_return_code(code).unwrap();
        assert_eq!(reason.v3_connack_return_code(), code);
    }
    assert_eq!(ReasonCode::from_v3_connack_return_code(6), None);
}

#[test]
fn version_helpers() {
    assert_eq!([V31.level(), V311.level(), V5.level()], [3, 4, 5]);
    assert_eq!([V31.protocol_name(), V311.protocol_name(), V5.protocol_name()], ["MQIsdp", "MQTT", "MQTT"]);
    assert_eq!(crate::auth::Protocol::from(V31), crate::auth::Protocol::Mqtt31);
    assert_eq!(crate::auth::Protocol::from(V5), crate::auth::Protocol::Mqtt5);
}

#[test]
fn will_properties_become_publish_properties() {
    let will = WillProperties {
        delay_interval: Some(30),
        payload_format_indicator: Some(1),
        message_expiry_interval: Some(9),
        content_type: Some(Arc::from("text/plain")),
        response_topic: Some(Arc::from("r")),
        correlation_data: Some(Bytes::from_static(b"c")),
        user_properties: vec![(Arc::from("k"), Arc::from("v"))],
    };
    let publish = will.to_publish_properties();
    assert_eq!(publish.payload_format_indicator, Some(1));
    assert_eq!(publish.message_expiry_interval, Some(9));
    assert_eq!(publish.content_type.as_deref(), Some("text/plain"));
    assert_eq!(publish.response_topic.as_deref(), Some("r"));
    assert_eq!(publish.correlation_data.as_deref(), Some(&b"c"[..]));
    assert_eq!(publish.user_properties, will.user_properties);
    assert_eq!((publish.topic_alias, publish.subscription_identifiers.len()), (None, 0));
}

#[test]
fn encode_appends_to_what_is_already_buffered() {
    let mut buf = BytesMut::from(&b"xx"[..]);
    encode(&Packet::PingReq, V311, &mut buf).unwrap();
    encode(&Packet::PingResp, V311, &mut buf).unwrap();
    assert_eq!(&buf[..], &[b'x', b'x', 0xC0, 0x00, 0xD0, 0x00]);
}
