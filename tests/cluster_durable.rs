//! QoS 1/2 durability in JetStream over a real nats-server (`nats-server -js` on a loopback
//! port): a clustered node acknowledges a QoS 1/2 publish only once the durable stream has
//! stored it, with many stores outstanding at once and the acknowledgements in order, and a
//! publish the stream cannot store is never acknowledged.

mod common;

use std::sync::atomic::Ordering;

use common::nats::{NatsServer, cluster};
use common::packets::publish_packet;
use common::{Raw, TestServer};
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};

fn counter(
    server: &TestServer,
    pick: impl Fn(&mesgd_cluster::ClusterStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    pick(cluster(server).stats()).load(Ordering::Relaxed)
}

/// A node in the cluster of `nats` with `[cluster.durable]` settings `durable`.
async fn durable_node(nats: &NatsServer, name: &str, durable: &str) -> TestServer {
    TestServer::start(&format!(
        "[cluster]\nnode = {name:?}\nnats = [{:?}]\n[cluster.durable]\n{durable}\n",
        nats.url
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos1_and_qos2_acknowledgements_wait_for_the_stream_pipelined_and_in_order() {
    let nats = NatsServer::start().await;
    let a = durable_node(&nats, "a", "").await;
    let mut raw = Raw::connected(a.addr, ProtocolVersion::V5, "publisher").await;
    // 300 QoS 1 and 20 QoS 2 publishes in one write: the node reads them all before the
    // first store is answered, so its stores are outstanding together.
    let mut bytes = Vec::new();
    for id in 1..=320u16 {
        let (topic, qos) = if id <= 300 { ("t/one", 1) } else { ("t/two", 2) };
        bytes.extend(publish_packet(topic, qos, Some(id), false, Some(&[]), id.to_string().as_bytes()));
    }
    raw.send(&bytes).await;
    let mut acked = Vec::new();
    while acked.len() < 320 {
        match raw.recv().await {
            Some(Packet::PubAck(ack)) => {
                assert!(!ack.reason_code.is_error(), "{ack:?}");
                acked.push(ack.packet_id);
            }
            Some(Packet::PubRec(rec)) => {
                assert!(!rec.reason_code.is_error(), "{rec:?}");
                acked.push(rec.packet_id);
            }
            other => panic!("expected PUBACK or PUBREC, got {other:?}"),
        }
    }
    // Every acknowledgement came after its store: by the last one, all 320 are stored.
    assert_eq!(counter(&a, |s| &s.durable_stored), 320);
    assert_eq!(acked, (1..=320).collect::<Vec<_>>(), "acknowledgements in publish order");
    let peak = counter(&a, |s| &s.durable_in_flight_peak);
    assert!(peak > 1, "stores were pipelined, not one round trip at a time (peak {peak})");
    let (messages, last) = cluster(&a).durable_stream_state("MESGD_QOS").await.expect("stream info");
    assert_eq!((messages, last), (320, 320), "the stream holds each message once");
    assert_eq!(counter(&a, |s| &s.durable_store_errors), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_the_stream_cannot_store_is_never_acknowledged() {
    let mut nats = NatsServer::start().await;
    let a = durable_node(&nats, "a", "store_timeout_ms = 300").await;
    let mut v5 = Raw::connected(a.addr, ProtocolVersion::V5, "five").await;
    let mut v3 = Raw::connected(a.addr, ProtocolVersion::V311, "three").await;
    v5.send(&publish_packet("t", 1, Some(1), false, Some(&[]), b"stored")).await;
    assert!(matches!(v5.recv().await, Some(Packet::PubAck(a)) if a.packet_id == 1));
    nats.kill().await;
    v5.send(&publish_packet("t", 1, Some(2), false, Some(&[]), b"lost")).await;
    v5.send(&publish_packet("t", 0, None, false, Some(&[]), b"qos 0 needs no store")).await;
    v3.send(&publish_packet("t", 2, Some(7), false, None, b"lost too")).await;
    let seen = v5.until_closed().await;
    assert!(
        matches!(seen.as_slice(), [Packet::Disconnect(d)] if d.reason_code == ReasonCode::UnspecifiedError),
        "MQTT 5: no PUBACK, DISCONNECT 0x80 and close; got {seen:?}"
    );
    let seen = v3.until_closed().await;
    assert!(seen.is_empty(), "MQTT 3.1.1: no PUBREC, the socket closes; got {seen:?}");
    assert_eq!(counter(&a, |s| &s.durable_stored), 1);
    assert!(counter(&a, |s| &s.durable_store_errors) >= 2);
}
