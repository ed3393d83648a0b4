//! Idle connections parked without a task of their own (`mqtt.park_idle_ms`): each kind of
//! wake brings one back exactly as if it had never left — a delivery, a packet from the client,
//! a takeover, the keep-alive deadline, a shutdown — and a parked connection keeps its place
//! in the connection limits until it ends. A parked connection's TCP socket waits outside
//! tokio's reactor, and a packet or a close from the client still wakes it.
//!
//! Every wait is for an observable event: the parked-connection count, a packet, a close.

mod common;

use std::time::Duration;

use common::auth::disconnect_reason;
use common::packets::{mqtt_str, packet, publish_packet, subscribe_packet};
use common::{Raw, TestServer, connect_bytes, within};
use mesgd_core::mqtt::{Packet, ProtocolVersion, QoS, ReasonCode};

const V3: ProtocolVersion = ProtocolVersion::V311;
const V5: ProtocolVersion = ProtocolVersion::V5;

async fn start(extra: &str) -> TestServer {
    TestServer::start(&format!("[mqtt]\nsys_interval = 0\npark_idle_ms = 50\n{extra}")).await
}

fn parked(server: &TestServer) -> usize {
    server.server.as_ref().expect("running").context().parked_connections()
}

/// Parked connections whose socket waits outside tokio's reactor.
fn watched(server: &TestServer) -> usize {
    server.server.as_ref().expect("running").context().parked_sockets_watched()
}

/// Waits until exactly `n` connections are parked, each with its socket (plain TCP) out of
/// tokio's reactor: every wake from the client's side below then comes through the watch of
/// idle sockets.
async fn until_parked(server: &TestServer, n: usize) {
    within(&format!("{n} parked connections"), async {
        while parked(server) != n || watched(server) != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A clean-session CONNECT at protocol `level` with keep-alive `keep_alive` seconds.
fn connect_with_keep_alive(level: u8, client_id: &str, keep_alive: u16) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[level, 0x02]);
    body.extend_from_slice(&keep_alive.to_be_bytes());
    if level == 5 {
        body.push(0);
    }
    body.extend_from_slice(&mqtt_str(client_id));
    packet(0x10, &body)
}

/// A clean-session MQTT 3.1.1 CONNECT with a QoS 0 will.
fn connect_with_will(client_id: &str, topic: &str, message: &[u8]) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[4, 0x06, 0, 60]);
    body.extend_from_slice(&mqtt_str(client_id));
    body.extend_from_slice(&mqtt_str(topic));
    body.extend_from_slice(&u16::try_from(message.len()).expect("short").to_be_bytes());
    body.extend_from_slice(message);
    packet(0x10, &body)
}

async fn connack(raw: &mut Raw) {
    match raw.recv().await {
        Some(Packet::ConnAck(c)) => assert!(!c.reason_code.is_error(), "CONNACK {c:?}"),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

#[tokio::test]
async fn a_parked_connection_wakes_for_deliveries_packets_and_takeover() {
    let server = start("").await;
    let mut sub = Raw::connected(server.addr, V5, "parked-sub").await;
    sub.send(&subscribe_packet(1, "park/#", 1, true)).await;
    assert!(matches!(sub.recv().await, Some(Packet::SubAck(_))));
    let mut pinger = Raw::connected(server.addr, V3, "parked-pinger").await;
    until_parked(&server, 2).await;

    // A delivery: the subscriber's session wakes it.
    let mut publisher = Raw::connected(server.addr, V3, "publisher").await;
    publisher.send(&publish_packet("park/a", 1, Some(3), false, None, b"to a parked one")).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(a)) if a.packet_id == 3));
    let id = match sub.recv().await {
        Some(Packet::Publish(p)) => {
            assert_eq!(p.qos, QoS::AtLeastOnce);
            assert_eq!(&p.payload[..], b"to a parked one");
            p.packet_id.expect("QoS 1 has an id")
        }
        other => panic!("expected the PUBLISH, got {other:?}"),
    };
    sub.send(&packet(0x40, &id.to_be_bytes())).await;

    // A packet from the client: its socket wakes it.
    pinger.send(&[0xC0, 0x00]).await;
    assert!(matches!(pinger.recv().await, Some(Packet::PingResp)));

    // All three go quiet and park (again).
    until_parked(&server, 3).await;

    // A second delivery after the first round trip, and a SUBSCRIBE from a parked client.
    publisher.send(&publish_packet("park/b", 0, None, false, None, b"again")).await;
    assert!(matches!(sub.recv().await, Some(Packet::Publish(p)) if &p.payload[..] == b"again"));
    until_parked(&server, 3).await;
    pinger.send(&subscribe_packet(2, "other", 0, false)).await;
    assert!(matches!(pinger.recv().await, Some(Packet::SubAck(_))));

    // A takeover: the parked MQTT 5 session is told 0x8E and closed.
    until_parked(&server, 3).await;
    let _new = Raw::connected(server.addr, V5, "parked-sub").await;
    assert_eq!(disconnect_reason(&mut sub).await, Some(ReasonCode::SessionTakenOver));
}

#[tokio::test]
async fn a_parked_connection_is_closed_at_its_keep_alive_deadline() {
    let server = start("").await;
    let mut quiet = Raw::open(server.addr, V5).await;
    quiet.send(&connect_with_keep_alive(5, "quiet", 1)).await;
    connack(&mut quiet).await;
    // It parks long before 1.5 s of silence, and the lot closes it at the deadline.
    until_parked(&server, 1).await;
    assert_eq!(disconnect_reason(&mut quiet).await, Some(ReasonCode::KeepAliveTimeout));
    until_parked(&server, 0).await;
}

#[tokio::test]
async fn a_parked_client_that_drops_its_socket_ends_and_its_will_goes_out() {
    let server = start("").await;
    let mut watcher = Raw::connected(server.addr, V3, "will-watcher").await;
    watcher.send(&subscribe_packet(1, "wills/#", 0, false)).await;
    assert!(matches!(watcher.recv().await, Some(Packet::SubAck(_))));
    let mut device = Raw::open(server.addr, V3).await;
    device.send(&connect_with_will("device", "wills/device", b"gone")).await;
    connack(&mut device).await;
    until_parked(&server, 2).await;

    // No DISCONNECT: the socket closes under the parked connection, and only its watch sees it.
    drop(device);
    match watcher.recv().await {
        Some(Packet::Publish(p)) => {
            assert_eq!(&*p.topic, "wills/device");
            assert_eq!(&p.payload[..], b"gone");
        }
        other => panic!("expected the will, got {other:?}"),
    }
    until_parked(&server, 1).await;
}

#[tokio::test]
async fn parked_connections_hold_their_place_in_the_connection_limit() {
    let server = start("[limits]\nmax_connections = 2\n").await;
    let first = Raw::connected(server.addr, V3, "one").await;
    let mut second = Raw::connected(server.addr, V3, "two").await;
    until_parked(&server, 2).await;
    let mut third = Raw::open(server.addr, V3).await;
    let _ = tokio::io::AsyncWriteExt::write_all(&mut third.stream, &connect_bytes(4, "three", 0x02)).await;
    assert!(third.until_closed().await.is_empty(), "a third connection is refused while two are parked");

    // A parked client disconnects: its place is free again.
    second.send(&[0xE0, 0x00]).await;
    assert!(second.until_closed().await.is_empty());
    within("a place for a new connection", async {
        loop {
            let mut next = Raw::open(server.addr, V3).await;
            let _ =
                tokio::io::AsyncWriteExt::write_all(&mut next.stream, &connect_bytes(4, "four", 0x02)).await;
            if let Some(Packet::ConnAck(c)) = next.recv().await {
                assert!(!c.reason_code.is_error());
                return;
            }
        }
    })
    .await;
    drop(first);
}

#[tokio::test]
async fn shutdown_reaches_parked_connections() {
    let mut server = start("").await;
    let mut a = Raw::connected(server.addr, V5, "a").await;
    let mut b = Raw::connected(server.addr, V5, "b").await;
    until_parked(&server, 2).await;
    within("shutdown", server.stop()).await;
    assert_eq!(disconnect_reason(&mut a).await, Some(ReasonCode::ServerShuttingDown));
    assert_eq!(disconnect_reason(&mut b).await, Some(ReasonCode::ServerShuttingDown));
}
