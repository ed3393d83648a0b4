//! Raw bytes against the server: malformed and hostile input, QoS 2 edge cases, takeover races,
//! resend with DUP — what a client library would never send.

mod common;

use common::packets::{publish_packet, subscribe_packet};
use common::{Raw, TestServer, connect_bytes, mqtt_str, packet};
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};

const V3: ProtocolVersion = ProtocolVersion::V311;
const V5: ProtocolVersion = ProtocolVersion::V5;

fn publish(topic: &str, qos: u8, packet_id: Option<u16>, payload: &[u8], v5: bool) -> Vec<u8> {
    publish_packet(topic, qos, packet_id, false, v5.then_some(&[]), payload)
}

fn subscribe(packet_id: u16, filter: &str, options: u8, v5: bool) -> Vec<u8> {
    subscribe_packet(packet_id, filter, options, v5)
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
        (
            "a subscription identifier in a client's PUBLISH [MQTT-3.3.4-6]",
            {
                let mut body = mqtt_str("t");
                body.extend_from_slice(&[2, 0x0B, 7]);
                packet(0x30, &body)
            },
            ReasonCode::ProtocolError,
            false,
        ),
        (
            "a wildcard in a response topic [MQTT-3.3.2-14]",
            {
                let mut body = mqtt_str("t");
                body.push(6);
                body.push(0x08);
                body.extend_from_slice(&mqtt_str("r/+"));
                packet(0x30, &body)
            },
            ReasonCode::ProtocolError,
            false,
        ),
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
    let session = server.broker().session(&mesgd_core::model::SessionKey::mqtt("durable")).unwrap();
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
    let session = server.broker().session(&mesgd_core::model::SessionKey::mqtt("slow")).unwrap();
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
    let session = server.broker().session(&mesgd_core::model::SessionKey::mqtt("contested")).unwrap();
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

/// A 3.1.1 CONNECT of a persistent session (clean session 0) with a will.
fn connect_with_will_v311(client_id: &str, will_topic: &str) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[4, 0x04, 0, 60]); // 3.1.1, will flag, keep-alive 60
    body.extend_from_slice(&mqtt_str(client_id));
    body.extend_from_slice(&mqtt_str(will_topic));
    body.extend_from_slice(&mqtt_str("gone"));
    packet(0x10, &body)
}

/// A DISCONNECT the client sent before it was taken over counts: the will is not sent. A
/// client that disconnects and connects again at once can have its new CONNECT handled before
/// the old connection has read its DISCONNECT (the old one waits in a parking lot, say, and
/// takes a few steps to wake). Found by Mosquitto's test 07-will-reconnect-1273.
#[tokio::test]
async fn a_disconnect_sent_just_before_a_takeover_discards_the_will() {
    let server = TestServer::start("").await;
    let mut watcher = Raw::connected(server.addr, V3, "watcher").await;
    watcher.send(&subscribe(1, "bye/#", 0, false)).await;
    assert!(matches!(watcher.recv().await, Some(Packet::SubAck(_))));
    for i in 0..50 {
        let id = format!("leaving-{i}");
        let mut old = Raw::open(server.addr, V3).await;
        old.send(&connect_with_will_v311(&id, &format!("bye/{i}/will"))).await;
        assert!(matches!(old.recv().await, Some(Packet::ConnAck(_))));
        // DISCONNECT, then at once the same client id again, resuming the session.
        let mut new = Raw::open(server.addr, V3).await;
        old.send(&packet(0xE0, &[])).await;
        new.send(&connect_bytes(4, &id, 0x00)).await;
        assert!(matches!(new.recv().await, Some(Packet::ConnAck(_))));
        new.send(&publish(&format!("bye/{i}/back"), 0, None, b"back", false)).await;
        match watcher.recv().await {
            Some(Packet::Publish(p)) => assert_eq!(*p.topic, *format!("bye/{i}/back"), "round {i}: no will"),
            other => panic!("round {i}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_will_response_topic_with_a_wildcard_is_refused() {
    let server = TestServer::start("").await;
    let mut raw = Raw::open(server.addr, V5).await;
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x06, 0, 30, 0]); // v5, will flag + clean start, keep-alive 30
    body.extend_from_slice(&mqtt_str("w"));
    body.push(6); // will properties: response topic "r/#"
    body.push(0x08);
    body.extend_from_slice(&mqtt_str("r/#"));
    body.extend_from_slice(&mqtt_str("will/w"));
    body.extend_from_slice(&mqtt_str("gone"));
    raw.send(&packet(0x10, &body)).await;
    assert!(
        matches!(raw.recv().await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::ProtocolError)
    );
}

/// A client still writing when the server ends its connection reads the DISCONNECT and a
/// clean end of stream, and its writes do not fail right away: the server shuts its write side
/// down and lingers, reading and discarding, instead of closing a socket the client still
/// writes to (which answers with a reset, as the Paho test `test_flow_control2` saw).
#[tokio::test]
async fn a_client_still_writing_reads_the_servers_disconnect() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start("[limits]\nmax_inflight = 4\n").await;
    let mut raw = Raw::connected(server.addr, V5, "flood").await;
    // Five QoS 2 messages against a Receive Maximum of 4: the fifth ends the connection.
    let mut bytes = Vec::new();
    for id in 1..=5u16 {
        bytes.extend_from_slice(&publish("t", 2, Some(id), b"x", true));
    }
    raw.send(&bytes).await;
    let mut seen = Vec::new();
    let mut buf = bytes::BytesMut::new();
    let end = common::within("the end of the connection", async {
        loop {
            match raw.stream.read_buf(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(_) => {
                    while let Some(p) = mesgd_core::mqtt::decode(&mut buf, Some(V5), u32::MAX).unwrap() {
                        seen.push(p);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the connection was reset: {end:?}");
    let disconnect = seen.iter().find_map(|p| match p {
        Packet::Disconnect(d) => Some(d.reason_code),
        _ => None,
    });
    assert_eq!(disconnect, Some(ReasonCode::ReceiveMaximumExceeded), "{seen:?}");
    // The client had more queued up. Against a closed socket the first write is answered with a
    // reset, and the writes after it fail.
    let more = vec![0xC0u8; 64 * 1024];
    for round in 0..8 {
        let written = common::within("a late write", raw.stream.write_all(&more)).await;
        assert!(written.is_ok(), "write {round} after the DISCONNECT failed: {written:?}");
    }
}

/// MQTT 3.1.1 has no Receive Maximum: a 3.1.1 client with more QoS 2 messages awaiting release
/// than `max_inflight` is served, not disconnected.
#[tokio::test]
async fn a_v311_client_beyond_max_inflight_is_not_disconnected() {
    let server = TestServer::start("[limits]\nmax_inflight = 4\n").await;
    let mut raw = Raw::connected(server.addr, V3, "many").await;
    for id in 1..=10u16 {
        raw.send(&publish("t", 2, Some(id), b"x", false)).await;
    }
    for id in 1..=10u16 {
        assert!(matches!(raw.recv().await, Some(Packet::PubRec(r)) if r.packet_id == id), "PUBREC {id}");
    }
    for id in 1..=10u16 {
        raw.send(&packet(0x62, &id.to_be_bytes())).await;
        assert!(matches!(raw.recv().await, Some(Packet::PubComp(c)) if c.packet_id == id), "PUBCOMP {id}");
    }
}

/// Common clients resend a QoS 2 PUBLISH without DUP (against [MQTT-3.3.1-1]); the same message
/// under a pending id is still a retransmission, another message under it is new.
#[tokio::test]
async fn a_qos2_resend_without_dup_is_not_routed_twice_but_a_reused_id_is_new() {
    let server = TestServer::start("").await;
    let mut sub = Raw::connected(server.addr, V3, "sub").await;
    sub.send(&subscribe(1, "x", 0, false)).await;
    assert!(matches!(sub.recv().await, Some(Packet::SubAck(_))));
    let mut publisher = Raw::connected(server.addr, V3, "pub").await;
    publisher.send(&publish("x", 2, Some(9), b"first", false)).await;
    publisher.send(&publish("x", 2, Some(9), b"first", false)).await;
    publisher.send(&publish("x", 2, Some(9), b"second", false)).await;
    for _ in 0..3 {
        assert!(matches!(publisher.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 9));
    }
    let mut got = Vec::new();
    while got.len() < 2 {
        if let Some(Packet::Publish(p)) = sub.recv().await {
            got.push(p.payload.clone());
        }
    }
    assert_eq!(got, [&b"first"[..], &b"second"[..]]);
    sub.send(&packet(0xC0, &[])).await;
    assert!(matches!(sub.recv().await, Some(Packet::PingResp)), "nothing else was delivered");
}

/// A connection keeps the last topic it checked and shares it with the next PUBLISH of the same
/// bytes (`mqtt::decode_into`): through topic aliases, across reads, and never in place of the
/// checks for a topic that differs.
#[tokio::test]
async fn a_publisher_s_repeated_topic_is_shared_through_aliases_and_reads_and_others_are_checked() {
    let server = TestServer::start("[limits]\nmax_topic_alias = 4\n").await;
    let mut watcher = Raw::connected(server.addr, V5, "watcher").await;
    watcher.send(&subscribe(1, "t/#", 0, true)).await;
    assert!(matches!(watcher.recv().await, Some(Packet::SubAck(_))));
    let with_alias =
        |topic: &str, payload: &[u8]| publish_packet(topic, 0, None, false, Some(&[0x23, 0, 1]), payload);
    let mut publisher = Raw::connected(server.addr, V5, "publisher").await;
    // One write, so one batch of input: the same topic twice, a topic that sets alias 1, the
    // alias alone, the first topic again.
    let batch = [
        publish("t/a", 0, None, b"1", true),
        publish("t/a", 0, None, b"2", true),
        with_alias("t/b", b"3"),
        with_alias("", b"4"),
        publish("t/a", 0, None, b"5", true),
    ]
    .concat();
    publisher.send(&batch).await;
    let mut seen = Vec::new();
    while seen.len() < 5 {
        match watcher.recv().await {
            Some(Packet::Publish(p)) => seen.push((p.topic.to_string(), p.payload.to_vec())),
            other => panic!("expected a PUBLISH, got {other:?}"),
        }
    }
    // The next read starts from the topic the last one ended with; then a wildcard topic is
    // refused as ever.
    publisher.send(&publish("t/a", 0, None, b"6", true)).await;
    match watcher.recv().await {
        Some(Packet::Publish(p)) => seen.push((p.topic.to_string(), p.payload.to_vec())),
        other => panic!("expected a PUBLISH, got {other:?}"),
    }
    let expected: Vec<(String, Vec<u8>)> =
        [("t/a", "1"), ("t/a", "2"), ("t/b", "3"), ("t/b", "4"), ("t/a", "5"), ("t/a", "6")]
            .iter()
            .map(|(t, p)| (t.to_string(), p.as_bytes().to_vec()))
            .collect();
    assert_eq!(seen, expected);
    publisher.send(&publish("t/+", 0, None, b"7", true)).await;
    assert_eq!(disconnect_reason(&mut publisher).await, Some(ReasonCode::TopicNameInvalid));
}
