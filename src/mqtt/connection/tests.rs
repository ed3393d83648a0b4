//! The MQTT connection driven over an in-memory pipe instead of a socket: the real handshake
//! and connection code on one end of a `tokio::io::duplex`, raw packets on the other, and the
//! clock under the test's control (`start_paused`), so that keep-alive and takeover are tested
//! with explicit time instead of waiting for it.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use mesgd_core::mqtt::{
    self, Connect, ConnectProperties, Packet, ProtocolVersion, PubResponse, Publish, QoS, ReasonCode,
    Subscribe, SubscriptionOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::context::ServerContext;

fn context() -> Arc<ServerContext> {
    ServerContext::for_tests()
}

/// The client end of an in-memory connection, speaking raw MQTT.
struct Client {
    io: DuplexStream,
    buf: BytesMut,
    version: ProtocolVersion,
}

impl Client {
    /// Connects a new in-memory client to `ctx`'s broker.
    fn open(ctx: &Arc<ServerContext>, version: ProtocolVersion) -> Client {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let peer = "127.0.0.1:1".parse().unwrap();
        let deadline = crate::clock::now() + ctx.connect_timeout;
        tokio::spawn(crate::mqtt::serve(
            server,
            peer,
            Arc::from("memory"),
            None,
            ctx.clone(),
            deadline,
            None,
        ));
        Client { io: client, buf: BytesMut::new(), version }
    }

    async fn send(&mut self, packet: &Packet) {
        let mut out = BytesMut::new();
        mqtt::encode(packet, self.version, &mut out).unwrap();
        self.io.write_all(&out).await.unwrap();
    }

    /// The next packet, or `None` once the server closed its end.
    async fn recv(&mut self) -> Option<Packet> {
        loop {
            if let Some(p) = mqtt::decode(&mut self.buf, Some(self.version), u32::MAX).unwrap() {
                return Some(p);
            }
            if self.io.read_buf(&mut self.buf).await.unwrap_or(0) == 0 {
                return None;
            }
        }
    }

    async fn connect(&mut self, client_id: &str, keep_alive: u16, clean_start: bool) -> mqtt::ConnAck {
        let connect = Connect {
            protocol: self.version,
            clean_start,
            keep_alive,
            client_id: client_id.into(),
            will: None,
            username: None,
            password: None,
            properties: ConnectProperties {
                session_expiry_interval: (self.version == ProtocolVersion::V5).then_some(300),
                ..Default::default()
            },
        };
        self.send(&Packet::Connect(connect)).await;
        match self.recv().await {
            Some(Packet::ConnAck(c)) => c,
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }
}

fn publish(topic: &str, qos: QoS, packet_id: Option<u16>, payload: &'static [u8]) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos,
        retain: false,
        topic: topic.into(),
        packet_id,
        properties: Default::default(),
        payload: Bytes::from_static(payload),
    })
}

fn subscribe(filter: &str, qos: QoS) -> Packet {
    Packet::Subscribe(Subscribe {
        packet_id: 1,
        filters: vec![(filter.into(), SubscriptionOptions::with_qos(qos))],
        properties: Default::default(),
    })
}

fn pubrel(packet_id: u16) -> Packet {
    Packet::PubRel(PubResponse {
        packet_id,
        reason_code: ReasonCode::Success,
        properties: Default::default(),
    })
}

#[tokio::test(start_paused = true)]
async fn a_qos2_message_crosses_the_broker_exactly_once() {
    let ctx = context();
    let mut sub = Client::open(&ctx, ProtocolVersion::V5);
    assert_eq!(sub.connect("sub", 60, true).await.reason_code, ReasonCode::Success);
    sub.send(&subscribe("t/#", QoS::ExactlyOnce)).await;
    assert!(matches!(sub.recv().await, Some(Packet::SubAck(_))));

    let mut publisher = Client::open(&ctx, ProtocolVersion::V311);
    publisher.connect("pub", 60, true).await;
    let first = publish("t/1", QoS::ExactlyOnce, Some(7), b"once");
    publisher.send(&first).await;
    publisher.send(&first).await; // a retransmission: acknowledged, not routed again
    for _ in 0..2 {
        assert!(matches!(publisher.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 7));
    }
    publisher.send(&pubrel(7)).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubComp(c)) if c.packet_id == 7));

    let Some(Packet::Publish(p)) = sub.recv().await else { panic!("the subscriber gets the message") };
    assert_eq!((&p.payload[..], p.qos), (&b"once"[..], QoS::ExactlyOnce));
    let id = p.packet_id.unwrap();
    sub.send(&Packet::PubRec(PubResponse {
        packet_id: id,
        reason_code: ReasonCode::Success,
        properties: Default::default(),
    }))
    .await;
    assert!(matches!(sub.recv().await, Some(Packet::PubRel(r)) if r.packet_id == id));
    sub.send(&Packet::PubComp(PubResponse {
        packet_id: id,
        reason_code: ReasonCode::Success,
        properties: Default::default(),
    }))
    .await;
    sub.send(&Packet::PingReq).await;
    assert!(matches!(sub.recv().await, Some(Packet::PingResp)), "and nothing else");
}

#[tokio::test(start_paused = true)]
async fn keep_alive_closes_a_silent_client_after_one_and_a_half_intervals() {
    let ctx = context();
    let mut c = Client::open(&ctx, ProtocolVersion::V5);
    c.connect("quiet", 10, true).await;
    let started = tokio::time::Instant::now();
    let Some(Packet::Disconnect(d)) = c.recv().await else { panic!("a DISCONNECT") };
    assert_eq!(d.reason_code, ReasonCode::KeepAliveTimeout);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(15) && waited < Duration::from_secs(16), "{waited:?}");
    assert!(c.recv().await.is_none(), "then the connection ends");
}

#[tokio::test(start_paused = true)]
async fn a_second_connection_takes_the_session_over() {
    let ctx = context();
    let mut old = Client::open(&ctx, ProtocolVersion::V5);
    old.connect("same", 60, false).await;
    old.send(&subscribe("x", QoS::AtLeastOnce)).await;
    assert!(matches!(old.recv().await, Some(Packet::SubAck(_))));
    let mut new = Client::open(&ctx, ProtocolVersion::V5);
    let connack = new.connect("same", 60, false).await;
    assert!(connack.session_present, "the session, with its subscription, moved");
    let session = ctx.broker.session(&mesgd_core::model::SessionKey::mqtt("same")).unwrap();
    let client = session.client().expect("the connection says who it is");
    assert_eq!(
        (client.protocol, &*client.listener, &*client.provider),
        (mesgd_core::auth::Protocol::Mqtt5, "memory", "anonymous")
    );
    let Some(Packet::Disconnect(d)) = old.recv().await else { panic!("the old connection is told") };
    assert_eq!(d.reason_code, ReasonCode::SessionTakenOver);
    let mut publisher = Client::open(&ctx, ProtocolVersion::V311);
    publisher.connect("p", 60, true).await;
    publisher.send(&publish("x", QoS::AtMostOnce, None, b"after")).await;
    assert!(matches!(new.recv().await, Some(Packet::Publish(p)) if &p.payload[..] == b"after"));
}
