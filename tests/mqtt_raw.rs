//! Raw bytes against the server: malformed and hostile input, QoS 2 edge cases, takeover races,
//! resend with DUP — what a client library would never send.

mod common;

use common::{Raw, TestServer, connect_bytes, mqtt_str, packet};
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};

const V3: ProtocolVersion = ProtocolVersion::V311;
const V5: ProtocolVersion = ProtocolVersion::V5;

fn publish(topic: &str, qos: u8, packet_id: Option<u16>, payload: &[u8], v5: bool) -> Vec<u8> {
    let mut body = mqtt_str(topic);
    if let Some(id) = packet_id {
        body.extend_from_slice(&id.to_be_bytes());
    }
    if v5 {
        body.push(0);
    }
    body.extend_from_slice(payload);
    packet(0x30 | (qos << 1), &body)
}

fn subscribe(packet_id: u16, filter: &str, options: u8, v5: bool) -> Vec<u8> {
    let mut body = packet_id.to_be_bytes().to_vec();
    if v5 {
        body.push(0);
    }
    body.extend_from_slice(&mqtt_str(filter));
    body.push(options);
    packet(0x82, &body)
}

async fn disconnect_reason(raw: &mut Raw) -> Option<ReasonCode> {
    raw.until_closed().await.into_iter().find_map(|p| match p {
        Packet::Disconnect(d) => Some(d.reason_code),
        _ => None,
    })
}

/// Every case: what is sent after a successful CONNECT, and the v5 DISCONNECT reason expected
/// before the server closes (3.1.1 connections are just closed).
#[tokio::test]
async fn malformed_and_forbidden_packets_close_the_connection_with_the_right_reason() {
    let server = TestServer::start("[limits]\nmax_packet_size = 1024\nmax_topic_alias = 4\n").await;
    // (what, bytes, v5 reason, also meaningful as 3.1.1 bytes)
    let cases: Vec<(&str, Vec<u8>, ReasonCode, bool)> = vec![
        ("a second CONNECT", connect_bytes(5, "again", 0x02), ReasonCode::ProtocolError, true),
        (
            "wildcard in a PUBLISH topic",
            publish("a/+", 0, None, b"x", true),
            ReasonCode::TopicNameInvalid,
            true,
        ),
        ("# in a PUBLISH topic", publish("a/#", 1, Some(1), b"x", true), ReasonCode::TopicNameInvalid, true),
        ("QoS 3", packet(0x36, &[0, 1, b'a', 0, 1, 0]), ReasonCode::MalformedPacket, true),
        ("reserved packet type 0", packet(0x00, &[]), ReasonCode::MalformedPacket, true),
        (
            "SUBSCRIBE with wrong fixed-header flags",
            packet(0x80, &[0, 1, 0, 0, 1, b'a', 0]),
            ReasonCode::MalformedPacket,
            true,
        ),
        (
            "remaining length over 4 bytes",
            vec![0x30, 0xff, 0xff, 0xff, 0xff, 0x01],
            ReasonCode::MalformedPacket,
            true,
        ),
        (
            "packet larger than max_packet_size",
            vec![0x30, 0x80, 0x80, 0x04],
            ReasonCode::PacketTooLarge,
            true,
        ),
        (
            "topic alias 0",
            {
                let mut body = mqtt_str("t");
                body.extend_from_slice(&[3, 0x23, 0, 0]);
                packet(0x30, &body)
            },
            ReasonCode::TopicAliasInvalid,
            false,
        ),
        (
            "topic alias above the maximum",
            {
                let mut body = mqtt_str("t");
                body.extend_from_slice(&[3, 0x23, 0, 5]);
                packet(0x30, &body)
            },
            ReasonCode::TopicAliasInvalid,
            false,
        ),
        (
            "unknown topic alias with an empty topic",
            {
                let mut body = mqtt_str("");
                body.extend_from_slice(&[3, 0x23, 0, 2]);
                packet(0x30, &body)
            },
            ReasonCode::ProtocolError,
            false,
        ),
        (
            "AUTH packet without an authentication method",
            packet(0xF0, &[0x00, 0x00]),
            ReasonCode::ProtocolError,
            true,
        ),
        (
            "no-local on a shared subscription",
            subscribe(1, "$share/g/t", 0x04, true),
            ReasonCode::ProtocolError,
            false,
        ),
        ("a CONNACK sent by a client", packet(0x20, &[0, 0, 0]), ReasonCode::ProtocolError, true),
        ("U+0000 in a topic", publish("\u{0}", 0, None, b"", true), ReasonCode::MalformedPacket, true),
    ];
    for (what, bytes, expected, also_v3) in cases {
        let mut raw = Raw::connected(server.addr, V5, "victim").await;
        raw.send(&bytes).await;
        assert_eq!(disconnect_reason(&mut raw).await, Some(expected), "{what}");
        if !also_v3 {
            continue;
        }
        // 3.1.1: the same bytes just close the connection.
        let mut raw = Raw::connected(server.addr, V3, "victim3").await;
        raw.send(&bytes).await;
        let seen = raw.until_closed().await;
        assert!(!seen.iter().any(|p| matches!(p, Packet::Disconnect(_))), "{what}: no DISCONNECT in 3.1.1");
    }
    // Nobody else noticed: a fresh client still works.
    let mut ok = Raw::connected(server.addr, V3, "bystander").await;
    ok.send(&packet(0xC0, &[])).await;
    assert!(matches!(ok.recv().await, Some(Packet::PingResp)));
}

#[tokio::test]
async fn garbage_and_packets_before_connect_are_refused() {
    let server = TestServer::start("").await;
    for (what, bytes) in [
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        ("PINGREQ before CONNECT", packet(0xC0, &[])),
        ("PUBLISH before CONNECT", publish("t", 0, None, b"x", false)),
        ("bad protocol name", {
            let mut body = mqtt_str("MQTX");
            body.extend_from_slice(&[4, 2, 0, 60]);
            body.extend_from_slice(&mqtt_str("c"));
            packet(0x10, &body)
        }),
        ("CONNECT reserved flag set", connect_bytes(4, "c", 0x03)),
    ] {
        let mut raw = Raw::open(server.addr, V3).await;
        raw.send(&bytes).await;
        let seen = raw.until_closed().await;
        assert!(seen.is_empty(), "{what}: closed without an answer, got {seen:?}");
    }
}

#[tokio::test]
async fn unsupported_protocol_level_gets_connack_0x01() {
    let server = TestServer::start("").await;
    let mut raw = Raw::open(server.addr, V3).await;
    raw.send(&connect_bytes(6, "future", 0x02)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) => assert_eq!(c.reason_code, ReasonCode::UnsupportedProtocolVersion),
        other => panic!("expected CONNACK, got {other:?}"),
    }
    assert!(raw.until_closed().await.is_empty());
}

#[tokio::test]
async fn empty_client_id_needs_a_clean_session_in_311() {
    let server = TestServer::start("").await;
    let mut raw = Raw::open(server.addr, V3).await;
    raw.send(&connect_bytes(4, "", 0x00)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) => assert_eq!(c.reason_code, ReasonCode::ClientIdentifierNotValid),
        other => panic!("expected CONNACK, got {other:?}"),
    }
    let mut raw = Raw::open(server.addr, V3).await;
    raw.send(&connect_bytes(4, "", 0x02)).await;
    assert!(matches!(raw.recv().await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success));
    // MQTT 3.1 (MQIsdp) is served too.
    let mut raw = Raw::open(server.addr, ProtocolVersion::V31).await;
    raw.send(&connect_bytes(3, "old-timer", 0x02)).await;
    assert!(matches!(raw.recv().await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success));
}

#[tokio::test]
async fn invalid_subscription_filters_get_a_failure_code_and_are_not_added() {
    let server = TestServer::start("").await;
    let mut raw = Raw::connected(server.addr, V3, "s").await;
    raw.send(&subscribe(7, "a/#/b", 1, false)).await;
    match raw.recv().await {
        Some(Packet::SubAck(s)) => {
            assert_eq!(s.packet_id, 7);
            assert!(s.reason_codes[0].is_error());
        }
        other => panic!("expected SUBACK, got {other:?}"),
    }
    assert_eq!(server.broker().router().len(), 0);
}

#[tokio::test]
async fn qos2_inbound_is_routed_exactly_once_despite_duplicates() {
    let server = TestServer::start("").await;
    let mut sub = Raw::connected(server.addr, V3, "sub").await;
    sub.send(&subscribe(1, "x", 2, false)).await;
    assert!(matches!(sub.recv().await, Some(Packet::SubAck(_))));
    let mut publisher = Raw::connected(server.addr, V3, "pub").await;
    let first = publish("x", 2, Some(42), b"once", false);
    let mut dup = first.clone();
    dup[0] |= 0x08;
    publisher.send(&first).await;
    publisher.send(&dup).await;
    for _ in 0..2 {
        assert!(matches!(publisher.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 42));
    }
    publisher.send(&packet(0x62, &[0, 42])).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubComp(c)) if c.packet_id == 42));
    // The id is free again: a new message with it is a new message.
    publisher.send(&publish("x", 2, Some(42), b"twice", false)).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubRec(_))));

    let mut payloads = Vec::new();
    while payloads.len() < 2 {
        match sub.recv().await {
            Some(Packet::Publish(p)) => {
                payloads.push(p.payload.clone());
                let id = p.packet_id.unwrap().to_be_bytes();
                sub.send(&packet(0x50, &id)).await; // PUBREC
            }
            Some(Packet::PubRel(r)) => sub.send(&packet(0x70, &r.packet_id.to_be_bytes())).await,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(payloads, [&b"once"[..], &b"twice"[..]]);
}

#[tokio::test]
async fn unacknowledged_messages_are_resent_with_dup_on_reconnect() {
    let server = TestServer::start("").await;
    // Persistent session (clean session 0) subscribes at QoS 1 and 2.
    let mut sub = Raw::open(server.addr, V3).await;
    sub.send(&connect_bytes(4, "durable", 0x00)).await;
    assert!(matches!(sub.recv().await, Some(Packet::ConnAck(_))));
    sub.send(&subscribe(1, "r/1", 1, false)).await;
    sub.send(&subscribe(2, "r/2", 2, false)).await;
    for _ in 0..2 {
        assert!(matches!(sub.recv().await, Some(Packet::SubAck(_))));
    }
    let mut publisher = Raw::connected(server.addr, V3, "pub").await;
    publisher.send(&publish("r/1", 1, Some(1), b"q1", false)).await;
    publisher.send(&publish("r/2", 2, Some(2), b"q2", false)).await;
    let mut first_ids = Vec::new();
    while first_ids.len() < 2 {
        if let Some(Packet::Publish(p)) = sub.recv().await {
            assert!(!p.dup);
            first_ids.push((p.topic.to_string(), p.packet_id.unwrap()));
        }
    }
    // Acknowledge nothing; the connection drops.
    drop(sub);
    let session = server.broker().session("durable").unwrap();
    common::within("the session to go offline", async {
        while session.is_online() {
            tokio::task::yield_now().await;
        }
    })
    .await;

    let mut sub = Raw::open(server.addr, V3).await;
    sub.send(&connect_bytes(4, "durable", 0x00)).await;
    assert!(matches!(sub.recv().await, Some(Packet::ConnAck(c)) if c.session_present));
    let mut again = Vec::new();
    while again.len() < 2 {
        if let Some(Packet::Publish(p)) = sub.recv().await {
            assert!(p.dup, "resent with DUP");
            again.push((p.topic.to_string(), p.packet_id.unwrap()));
        }
    }
    assert_eq!(again, first_ids, "same ids, same order");
}

#[tokio::test]
async fn a_client_that_stops_reading_is_bounded_and_nobody_else_notices() {
    let server = TestServer::start("[limits]\nmax_queued_messages = 100\nmax_inflight = 10\n").await;
    // The slow consumer subscribes and never reads its socket again.
    let mut slow = Raw::connected(server.addr, V3, "slow").await;
    slow.send(&subscribe(1, "flood", 1, false)).await;
    assert!(matches!(slow.recv().await, Some(Packet::SubAck(_))));
    let mut healthy = Raw::connected(server.addr, V3, "healthy").await;
    healthy.send(&subscribe(1, "flood", 0, false)).await;
    assert!(matches!(healthy.recv().await, Some(Packet::SubAck(_))));

    let mut publisher = Raw::connected(server.addr, V3, "pub").await;
    let payload = vec![7u8; 16 * 1024];
    let count = 2000u16;
    for i in 1..=count {
        publisher.send(&publish("flood", 1, Some(i), &payload, false)).await;
        // Read the PUBACKs as they come so the publisher is not the one blocked.
        if i % 100 == 0 {
            loop {
                match publisher.recv().await {
                    Some(Packet::PubAck(a)) if a.packet_id == i => break,
                    Some(Packet::PubAck(_)) => continue,
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
    // The healthy subscriber gets messages while the slow one is stuck.
    let mut got = 0;
    while got < 100 {
        if let Some(Packet::Publish(_)) = healthy.recv().await {
            got += 1;
        }
    }
    let session = server.broker().session("slow").unwrap();
    assert!(session.queue_len() <= 100, "queue bounded: {}", session.queue_len());
    assert!(session.inflight_len() <= 10);
    assert!(session.dropped() > 0, "overflow was counted");
}

#[tokio::test]
async fn takeover_race_leaves_exactly_one_connection() {
    let server = TestServer::start("").await;
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut raw = Raw::open(server.addr, V5).await;
        raw.send(&connect_bytes(5, "contested", 0x00)).await;
        conns.push(raw);
    }
    // Each CONNACK is sent only after the previous owner was kicked, so once all eight are in,
    // exactly one connection owns the session; the others are closed with 0x8E.
    for raw in &mut conns {
        assert!(matches!(raw.recv().await, Some(Packet::ConnAck(_))));
    }
    let mut survivors = 0;
    for mut raw in conns {
        raw.send(&packet(0xC0, &[])).await;
        match raw.recv().await {
            Some(Packet::PingResp) => survivors += 1,
            Some(Packet::Disconnect(d)) => assert_eq!(d.reason_code, ReasonCode::SessionTakenOver),
            None => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(survivors, 1, "exactly one connection owns the session");
    let session = server.broker().session("contested").unwrap();
    assert!(session.is_online());
}

#[tokio::test]
async fn v5_receive_maximum_limits_unacknowledged_deliveries() {
    let server = TestServer::start("").await;
    // CONNECT v5 with Receive Maximum 2.
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x02, 0, 60, 3, 0x21, 0, 2]);
    body.extend_from_slice(&mqtt_str("narrow"));
    let mut sub = Raw::open(server.addr, V5).await;
    sub.send(&packet(0x10, &body)).await;
    assert!(matches!(sub.recv().await, Some(Packet::ConnAck(_))));
    sub.send(&subscribe(1, "w", 1, true)).await;
    assert!(matches!(sub.recv().await, Some(Packet::SubAck(_))));
    let mut publisher = Raw::connected(server.addr, V3, "pub").await;
    for i in 1..=5u16 {
        publisher.send(&publish("w", 1, Some(i), &[i as u8], false)).await;
        assert!(matches!(publisher.recv().await, Some(Packet::PubAck(_))));
    }
    let mut ids = Vec::new();
    for _ in 0..2 {
        match sub.recv().await {
            Some(Packet::Publish(p)) => ids.push(p.packet_id.unwrap()),
            other => panic!("unexpected {other:?}"),
        }
    }
    // Nothing more until an ack: prove it by a ping round trip.
    sub.send(&packet(0xC0, &[])).await;
    assert!(matches!(sub.recv().await, Some(Packet::PingResp)), "no third PUBLISH before an ack");
    sub.send(&packet(0x40, &ids[0].to_be_bytes())).await;
    match sub.recv().await {
        Some(Packet::Publish(p)) => assert_eq!(p.payload[0], 3),
        other => panic!("unexpected {other:?}"),
    }
}
