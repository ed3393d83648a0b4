//! Raw-socket helpers for persistent sessions: CONNECT with a session that outlives the
//! connection, SUBSCRIBE and PUBLISH builders, and a receiver that completes every QoS 1/2 flow,
//! for tests of what survives a disconnect, a restart or a crash.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use mesgd_core::mqtt::{Packet, ProtocolVersion, QoS, ReasonCode};

use super::packets::{publish_packet, subscribe_packet};
use super::{Raw, mqtt_str, packet};

const V5: ProtocolVersion = ProtocolVersion::V5;

/// A persistent-session CONNECT: 3.1.1 clean session 0, or 5.0 with a session expiry.
pub fn persistent_connect(version: ProtocolVersion, client_id: &str) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    match version {
        ProtocolVersion::V5 => {
            body.extend_from_slice(&[5, 0x00, 0, 60]);
            body.extend_from_slice(&[5, 0x11, 0, 0, 0x0e, 0x10]); // session expiry 3600 s
        }
        _ => body.extend_from_slice(&[4, 0x00, 0, 60]),
    }
    body.extend_from_slice(&mqtt_str(client_id));
    packet(0x10, &body)
}

/// An MQTT 5 CONNECT of a persistent session (expiry 3600 s, clean start 0) with receive
/// maximum `receive_max`.
pub fn persistent_v5(client_id: &str, receive_max: u16) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x00, 0, 60, 8, 0x11, 0, 0, 0x0e, 0x10, 0x21]);
    body.extend_from_slice(&receive_max.to_be_bytes());
    body.extend_from_slice(&mqtt_str(client_id));
    packet(0x10, &body)
}

/// Connects a persistent session; returns the connection and whether the session was present.
pub async fn connect_persistent(addr: SocketAddr, version: ProtocolVersion, client_id: &str) -> (Raw, bool) {
    let mut raw = Raw::open(addr, version).await;
    raw.send(&persistent_connect(version, client_id)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) => {
            assert_eq!(c.reason_code, ReasonCode::Success);
            (raw, c.session_present)
        }
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

pub fn subscribe(packet_id: u16, filter: &str, qos: u8, v5: bool) -> Vec<u8> {
    subscribe_packet(packet_id, filter, qos, v5)
}

pub fn publish(
    topic: &str,
    qos: u8,
    packet_id: u16,
    retain: bool,
    payload: &[u8],
    v5_props: Option<&[u8]>,
) -> Vec<u8> {
    publish_packet(topic, qos, (qos > 0).then_some(packet_id), retain, v5_props, payload)
}

pub async fn publish_acked(
    raw: &mut Raw,
    topic: &str,
    qos: u8,
    packet_id: u16,
    retain: bool,
    payload: &[u8],
) {
    let v5 = raw.version == V5;
    raw.send(&publish(topic, qos, packet_id, retain, payload, v5.then_some(&[][..]))).await;
    match qos {
        1 => assert!(matches!(raw.recv().await, Some(Packet::PubAck(a)) if a.packet_id == packet_id)),
        2 => {
            assert!(matches!(raw.recv().await, Some(Packet::PubRec(a)) if a.packet_id == packet_id));
            raw.send(&packet(0x62, &packet_id.to_be_bytes())).await;
            assert!(matches!(raw.recv().await, Some(Packet::PubComp(a)) if a.packet_id == packet_id));
        }
        _ => {}
    }
}

/// Receives until `n` distinct payloads arrived, acknowledging everything (QoS 1 PUBACK, QoS 2
/// PUBREC → PUBREL → PUBCOMP). Returns every PUBLISH payload in arrival order, duplicates
/// included, and whether any carried DUP.
pub async fn receive(raw: &mut Raw, n: usize) -> Vec<Vec<u8>> {
    let mut payloads = Vec::new();
    let mut distinct = BTreeSet::new();
    while distinct.len() < n {
        match raw.recv().await {
            Some(Packet::Publish(p)) => {
                payloads.push(p.payload.to_vec());
                distinct.insert(p.payload.to_vec());
                let id = p.packet_id.unwrap_or(0).to_be_bytes();
                match p.qos {
                    QoS::AtLeastOnce => raw.send(&packet(0x40, &id)).await,
                    QoS::ExactlyOnce => raw.send(&packet(0x50, &id)).await,
                    QoS::AtMostOnce => {}
                }
            }
            Some(Packet::PubRel(r)) => raw.send(&packet(0x70, &r.packet_id.to_be_bytes())).await,
            Some(_) => {}
            None => panic!("connection closed after {} of {n} messages", distinct.len()),
        }
    }
    payloads
}

/// Sends PINGREQ and collects the messages that arrive before PINGRESP (completing QoS 2
/// exchanges still under way): proves nothing more was pending.
pub async fn nothing_more(raw: &mut Raw) -> Vec<Packet> {
    raw.send(&packet(0xC0, &[])).await;
    let mut extra = Vec::new();
    loop {
        match raw.recv().await {
            Some(Packet::PingResp) => return extra,
            Some(Packet::PubRel(r)) => raw.send(&packet(0x70, &r.packet_id.to_be_bytes())).await,
            Some(p) => extra.push(p),
            None => panic!("closed"),
        }
    }
}

pub async fn subscribe_persistent(
    addr: SocketAddr,
    version: ProtocolVersion,
    id: &str,
    filter: &str,
    qos: u8,
) {
    let (mut raw, _) = connect_persistent(addr, version, id).await;
    raw.send(&subscribe(1, filter, qos, version == V5)).await;
    assert!(matches!(raw.recv().await, Some(Packet::SubAck(_))));
    raw.send(&packet(0xE0, &[])).await; // DISCONNECT
    assert!(raw.until_closed().await.is_empty());
}
