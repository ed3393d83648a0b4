//! Benchmarks of the MQTT codec: decode and encode of every packet type — PUBLISH at QoS 0 and 1
//! with a small payload and the acknowledgements in 3.1.1 and 5.0, the rest in one version each.
//!
//! Decoding reuses one receive buffer the way a connection does: the packet's bytes are appended
//! (standing in for the socket read) and decoded off the front. Encoding appends to a send buffer
//! that is cleared between iterations. `decode_into` decodes PUBLISH the way a connection does,
//! into one slot that already holds the previous PUBLISH to the same topic. Run with
//! `cargo bench -p mesgd-core --bench codec`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, criterion_group, criterion_main};
use mesgd_core::mqtt::{
    Auth, ConnAck, Connect, ConnectProperties, Disconnect, Packet, ProtocolVersion, PubResponse, Publish,
    PublishProperties, QoS, ReasonCode, SubAck, Subscribe, SubscribeProperties, SubscriptionOptions,
    UnsubAck, Unsubscribe, decode, decode_into, encode,
};

/// A typical telemetry message: a three-level topic and a 32-byte payload.
fn publish(qos: QoS, version: ProtocolVersion) -> Packet {
    Packet::Publish(Publish {
        qos,
        topic: Arc::from("fleet/site7/dev4711/temp"),
        packet_id: (qos != QoS::AtMostOnce).then_some(4711),
        properties: if version == ProtocolVersion::V5 {
            PublishProperties { message_expiry_interval: Some(3600), ..PublishProperties::default() }
        } else {
            PublishProperties::default()
        },
        payload: Bytes::from_static(b"{\"t\":21.5,\"unit\":\"C\",\"ok\":true}"),
        ..Publish::default()
    })
}

fn subscribe(version: ProtocolVersion) -> Packet {
    Packet::Subscribe(Subscribe {
        packet_id: 1,
        filters: vec![
            ("fleet/site7/+/temp".into(), SubscriptionOptions::with_qos(QoS::AtLeastOnce)),
            ("fleet/site7/dev4711/#".into(), SubscriptionOptions::with_qos(QoS::AtMostOnce)),
        ],
        properties: if version == ProtocolVersion::V5 {
            SubscribeProperties { subscription_identifier: Some(42), ..SubscribeProperties::default() }
        } else {
            SubscribeProperties::default()
        },
    })
}

fn connect(version: ProtocolVersion) -> Packet {
    Packet::Connect(Connect {
        protocol: version,
        clean_start: true,
        keep_alive: 60,
        client_id: "dev4711".into(),
        username: Some("dev4711".into()),
        password: Some(Bytes::from_static(b"correct horse battery staple")),
        properties: if version == ProtocolVersion::V5 {
            ConnectProperties {
                session_expiry_interval: Some(300),
                receive_maximum: Some(32),
                ..ConnectProperties::default()
            }
        } else {
            ConnectProperties::default()
        },
        ..Connect::default()
    })
}

fn ack(packet_id: u16) -> PubResponse {
    PubResponse { packet_id, ..PubResponse::default() }
}

fn cases() -> Vec<(&'static str, ProtocolVersion, Packet)> {
    use ProtocolVersion::{V5, V311};
    vec![
        ("publish_qos0_v311", V311, publish(QoS::AtMostOnce, V311)),
        ("publish_qos1_v311", V311, publish(QoS::AtLeastOnce, V311)),
        ("publish_qos0_v5", V5, publish(QoS::AtMostOnce, V5)),
        ("publish_qos1_v5", V5, publish(QoS::AtLeastOnce, V5)),
        ("subscribe_v311", V311, subscribe(V311)),
        ("subscribe_v5", V5, subscribe(V5)),
        ("connect_v311", V311, connect(V311)),
        ("connect_v5", V5, connect(V5)),
        ("connack_v5", V5, Packet::ConnAck(ConnAck::default())),
        ("puback_v311", V311, Packet::PubAck(ack(4711))),
        ("puback_v5", V5, Packet::PubAck(ack(4711))),
        ("pubrec_v5", V5, Packet::PubRec(ack(4711))),
        ("pubrel_v5", V5, Packet::PubRel(ack(4711))),
        ("pubcomp_v5", V5, Packet::PubComp(ack(4711))),
        (
            "suback_v5",
            V5,
            Packet::SubAck(SubAck {
                packet_id: 1,
                reason_codes: vec![ReasonCode::GrantedQoS1, ReasonCode::Success],
                ..SubAck::default()
            }),
        ),
        (
            "unsubscribe_v311",
            V311,
            Packet::Unsubscribe(Unsubscribe {
                packet_id: 2,
                filters: vec!["fleet/site7/+/temp".into()],
                ..Unsubscribe::default()
            }),
        ),
        (
            "unsuback_v5",
            V5,
            Packet::UnsubAck(UnsubAck {
                packet_id: 2,
                reason_codes: vec![ReasonCode::Success],
                ..UnsubAck::default()
            }),
        ),
        ("pingreq_v311", V311, Packet::PingReq),
        ("pingresp_v311", V311, Packet::PingResp),
        ("disconnect_v5", V5, Packet::Disconnect(Disconnect::default())),
        ("auth_v5", V5, Packet::Auth(Auth { reason_code: ReasonCode::ReAuthenticate, ..Auth::default() })),
    ]
}

fn bench_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode");
    for (name, version, packet) in cases() {
        let mut wire = BytesMut::new();
        encode(&packet, version, &mut wire).unwrap();
        let arg = if matches!(packet, Packet::Connect(_)) { None } else { Some(version) };
        let mut buf = BytesMut::with_capacity(64 * 1024);
        group.bench_function(name, |b| {
            b.iter(|| {
                buf.extend_from_slice(&wire);
                black_box(decode(&mut buf, arg, u32::MAX).unwrap().unwrap())
            })
        });
    }
    group.finish();
}

fn bench_decode_into(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_into");
    for (name, version, packet) in cases() {
        let Packet::Publish(first) = &packet else { continue };
        let mut wire = BytesMut::new();
        encode(&packet, version, &mut wire).unwrap();
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut slot = first.clone();
        group.bench_function(name, |b| {
            b.iter(|| {
                buf.extend_from_slice(&wire);
                black_box(decode_into(&mut buf, version, u32::MAX, &mut slot).unwrap().unwrap());
                black_box(&slot);
            })
        });
    }
    group.finish();
}

fn bench_encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode");
    for (name, version, packet) in cases() {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        group.bench_function(name, |b| {
            b.iter(|| {
                buf.clear();
                encode(black_box(&packet), version, &mut buf).unwrap();
                black_box(buf.len())
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench_decode, bench_decode_into, bench_encode
}
criterion_main!(benches);
