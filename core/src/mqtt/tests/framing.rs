//! Framing: partial input, several packets in one buffer, the maximum packet size.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{decode_version, encode_vec};
use crate::mqtt::{
    AckProperties, Connect, DecodeError, Decoded, Packet, ProtocolVersion, PubResponse, Publish,
    PublishProperties, QoS, ReasonCode, Subscribe, SubscribeProperties, SubscriptionOptions, decode,
};

use ProtocolVersion::{V5, V31, V311};

fn samples(version: ProtocolVersion) -> Vec<Packet> {
    let v5 = version == V5;
    vec![
        Packet::Connect(Connect {
            protocol: version,
            client_id: "client".into(),
            username: Some("u".into()),
            password: Some(Bytes::from_static(b"p")),
            ..Connect::default()
        }),
        Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: Arc::from("a/b"),
            packet_id: Some(7),
            properties: if v5 {
                PublishProperties {
                    user_properties: vec![(Arc::from("k"), Arc::from("v"))],
                    ..Default::default()
                }
            } else {
                PublishProperties::default()
            },
            // Long enough for a two-byte remaining length.
            payload: Bytes::from(vec![0x42; 200]),
            ..Publish::default()
        }),
        Packet::Subscribe(Subscribe {
            packet_id: 3,
            filters: vec![("x/#".into(), SubscriptionOptions::with_qos(QoS::ExactlyOnce))],
            properties: if v5 {
                SubscribeProperties { subscription_identifier: Some(1000), ..Default::default() }
            } else {
                SubscribeProperties::default()
            },
        }),
        Packet::PubAck(PubResponse {
            packet_id: 7,
            reason_code: if v5 { ReasonCode::NotAuthorized } else { ReasonCode::Success },
            properties: AckProperties::default(),
        }),
        Packet::PingReq,
    ]
}

#[test]
fn every_prefix_of_a_packet_asks_for_more_and_leaves_the_buffer_alone() {
    for version in [V31, V311, V5] {
        for packet in samples(version) {
            let bytes = encode_vec(&packet, version);
            let dv = decode_version(&packet, version);
            for end in 0..bytes.len() {
                let mut buf = BytesMut::from(&bytes[..end]);
                assert_eq!(decode(&mut buf, dv, u32::MAX), Ok(None), "{packet:?} cut at {end}");
                assert_eq!(&buf[..], &bytes[..end], "buffer changed");
            }
            let mut buf = BytesMut::from(&bytes[..]);
            assert_eq!(decode(&mut buf, dv, u32::MAX), Ok(Some(packet)));
            assert!(buf.is_empty());
        }
    }
}

#[test]
fn packets_in_one_buffer_decode_one_after_the_other() {
    for version in [V31, V311, V5] {
        let packets = samples(version);
        let mut buf = BytesMut::new();
        for packet in &packets {
            buf.extend_from_slice(&encode_vec(packet, version));
        }
        // And the first two bytes of one more.
        buf.extend_from_slice(&[0x30, 0x05]);
        let mut connection_version = None;
        for packet in &packets {
            assert_eq!(decode(&mut buf, connection_version, u32::MAX).as_ref(), Ok(&Some(packet.clone())));
            connection_version = Some(version);
        }
        assert_eq!(decode(&mut buf, connection_version, u32::MAX), Ok(None));
        assert_eq!(&buf[..], &[0x30, 0x05]);
    }
}

#[test]
fn a_packet_arriving_byte_by_byte() {
    let packet = &samples(V5)[1];
    let bytes = encode_vec(packet, V5);
    let mut buf = BytesMut::new();
    let mut decoded = None;
    for (i, &byte) in bytes.iter().enumerate() {
        assert!(decoded.is_none(), "decoded before byte {i}");
        buf.extend_from_slice(&[byte]);
        decoded = decode(&mut buf, Some(V5), u32::MAX).unwrap();
    }
    assert_eq!(decoded.as_ref(), Some(packet));
    assert!(buf.is_empty());
}

#[test]
fn too_large_is_reported_from_the_fixed_header_alone() {
    // PUBLISH, remaining length 2,097,151 (FF FF 7F): nothing of the body has arrived.
    let mut buf = BytesMut::from(&[0x30, 0xFF, 0xFF, 0x7F][..]);
    assert_eq!(
        decode(&mut buf, Some(V311), 1024),
        Err(DecodeError::PacketTooLarge { size: 2_097_155, max: 1024 })
    );
    assert_eq!(DecodeError::PacketTooLarge { size: 1, max: 0 }.reason_code(), ReasonCode::PacketTooLarge);
    // A CONNECT too, before the version is known.
    let mut buf = BytesMut::from(&[0x10, 0x80, 0x08][..]);
    assert_eq!(decode(&mut buf, None, 1000), Err(DecodeError::PacketTooLarge { size: 1027, max: 1000 }));
    // While the remaining length is incomplete there is nothing to judge yet.
    let mut buf = BytesMut::from(&[0x30, 0xFF, 0xFF][..]);
    assert_eq!(decode(&mut buf, Some(V311), 1024), Ok(None));
}

#[test]
fn the_limit_counts_the_whole_packet() {
    let packet = &samples(V311)[1];
    let bytes = encode_vec(packet, V311);
    let size = bytes.len() as u32;
    let mut buf = BytesMut::from(&bytes[..]);
    assert_eq!(decode(&mut buf, Some(V311), size).as_ref(), Ok(&Some(packet.clone())));
    let mut buf = BytesMut::from(&bytes[..]);
    assert_eq!(
        decode(&mut buf, Some(V311), size - 1),
        Err(DecodeError::PacketTooLarge { size, max: size - 1 })
    );
}

#[test]
fn a_wrong_first_byte_is_refused_before_the_length_arrives() {
    let mut buf = BytesMut::from(&[0x30][..]);
    assert_eq!(
        decode(&mut buf, None, u32::MAX),
        Err(DecodeError::ExpectedConnect(crate::mqtt::PacketType::Publish))
    );
    let mut buf = BytesMut::from(&[0x00][..]);
    assert_eq!(decode(&mut buf, Some(V5), u32::MAX), Err(DecodeError::InvalidPacketType(0)));
    let mut buf = BytesMut::new();
    assert_eq!(decode(&mut buf, None, u32::MAX), Ok(None));
}

#[test]
fn a_publish_to_the_topic_the_slot_holds_keeps_it_and_any_other_is_checked_as_ever() {
    let into = |bytes: &[u8], held: &Arc<str>| {
        let mut slot = Publish { topic: held.clone(), ..Publish::default() };
        crate::mqtt::decode_into(&mut BytesMut::from(bytes), V311, u32::MAX, &mut slot)
            .map(|d| d.map(|d| if d == Decoded::Publish { Packet::Publish(slot) } else { panic!("{d:?}") }))
    };
    let topic_of = |packet: Result<Option<Packet>, DecodeError>| match packet {
        Ok(Some(Packet::Publish(p))) => p.topic,
        other => panic!("not a PUBLISH: {other:?}"),
    };
    let held: Arc<str> = Arc::from("a/b");
    // PUBLISH QoS 0, topic "a/b", payload "x".
    let same = [0x30, 0x06, 0x00, 0x03, b'a', b'/', b'b', b'x'];
    assert!(Arc::ptr_eq(&topic_of(into(&same, &held)), &held));
    // Another topic of the same length is a new string.
    let other = [0x30, 0x06, 0x00, 0x03, b'a', b'/', b'c', b'x'];
    let topic = topic_of(into(&other, &held));
    assert_eq!(&*topic, "a/c");
    assert!(!Arc::ptr_eq(&topic, &held));
    // A topic that is not UTF-8 is refused, whatever the slot held.
    let broken = [0x30, 0x06, 0x00, 0x03, b'a', 0xFF, b'b', b'x'];
    assert_eq!(into(&broken, &held), Err(DecodeError::InvalidUtf8));
    // U+0000 is refused even when the slot holds the very same bytes.
    let with_nul: Arc<str> = Arc::from("a\0b");
    let nul = [0x30, 0x06, 0x00, 0x03, b'a', 0x00, b'b', b'x'];
    assert_eq!(into(&nul, &with_nul), Err(DecodeError::NulInString));
}
