//! MQTT 3.1.1 end to end, with rumqttc's 3.1.1 client against the in-process server.

mod common;

use std::time::Duration;

use common::TestServer;
use common::v3::{self, LastWill, QoS};

#[tokio::test]
async fn publish_and_subscribe_at_every_qos_with_downgrade() {
    let server = TestServer::start("").await;
    let (mut sub, connack) = v3::connect(v3::options("sub", server.port())).await;
    assert!(!connack.session_present);
    let ack = sub.subscribe("t/+", QoS::AtLeastOnce).await;
    assert_eq!(ack.return_codes, [rumqttc::SubscribeReasonCode::Success(QoS::AtLeastOnce)]);
    let (publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    for (i, qos) in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce].into_iter().enumerate() {
        publisher.client.publish(format!("t/{i}"), qos, false, vec![i as u8; 3]).await.unwrap();
        let got = sub.next_publish().await;
        assert_eq!(got.topic, format!("t/{i}"));
        assert_eq!(&got.payload[..], &[i as u8; 3]);
        // Granted QoS 1: a QoS 2 publish arrives at QoS 1.
        assert_eq!(got.qos, if qos == QoS::AtMostOnce { QoS::AtMostOnce } else { QoS::AtLeastOnce });
        assert!(!got.retain);
    }
}

#[tokio::test]
async fn retained_messages_are_stored_replaced_replayed_and_deleted() {
    let server = TestServer::start("").await;
    let (mut publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    publisher.client.publish("r/a", QoS::AtLeastOnce, true, "one").await.unwrap();
    publisher.client.publish("r/a", QoS::AtLeastOnce, true, "two").await.unwrap();
    publisher.client.publish("r/b", QoS::AtLeastOnce, true, "three").await.unwrap();
    // The PUBACKs say the broker has processed all three.
    for _ in 0..3 {
        publisher.next("PUBACK", |p| matches!(p, v3::Packet::PubAck(_)).then_some(())).await;
    }
    let (mut sub, _) = v3::connect(v3::options("sub1", server.port())).await;
    sub.subscribe("r/#", QoS::AtLeastOnce).await;
    let mut got = [sub.next_publish().await, sub.next_publish().await];
    got.sort_by(|a, b| a.topic.cmp(&b.topic));
    assert_eq!((got[0].topic.as_str(), &got[0].payload[..], got[0].retain), ("r/a", &b"two"[..], true));
    assert_eq!((got[1].topic.as_str(), &got[1].payload[..], got[1].retain), ("r/b", &b"three"[..], true));

    // Live delivery of a retained publish to an existing subscriber has retain cleared.
    publisher.client.publish("r/a", QoS::AtLeastOnce, true, "").await.unwrap();
    let deleted = sub.next_publish().await;
    assert_eq!((deleted.topic.as_str(), deleted.payload.len(), deleted.retain), ("r/a", 0, false));

    let (mut late, _) = v3::connect(v3::options("sub2", server.port())).await;
    late.subscribe("r/#", QoS::AtLeastOnce).await;
    let only = late.next_publish().await;
    assert_eq!(only.topic, "r/b", "r/a was deleted by the empty payload");
    assert_eq!(server.broker().retained().len(), 1);
}

fn will_options(id: &str, port: u16, topic: &str) -> v3::MqttOptions {
    let mut o = v3::options(id, port);
    o.set_last_will(LastWill::new(topic, "gone", QoS::AtLeastOnce, false));
    o
}

#[tokio::test]
async fn will_is_published_on_abnormal_close_but_not_on_disconnect() {
    let server = TestServer::start("").await;
    let (mut watcher, _) = v3::connect(v3::options("watcher", server.port())).await;
    watcher.subscribe("wills/#", QoS::AtLeastOnce).await;

    let (polite, _) = v3::connect(will_options("polite", server.port(), "wills/polite")).await;
    polite.disconnect().await;
    let (rude, _) = v3::connect(will_options("rude", server.port(), "wills/rude")).await;
    rude.kill();
    let will = watcher.next_publish().await;
    assert_eq!(will.topic, "wills/rude", "only the abnormal close sends its will");
    assert_eq!(&will.payload[..], b"gone");
}

#[tokio::test]
async fn persistent_session_keeps_subscriptions_and_queues_while_offline() {
    let server = TestServer::start("").await;
    let mut o = v3::options("durable", server.port());
    o.set_clean_session(false);
    let (mut c, connack) = v3::connect(o.clone()).await;
    assert!(!connack.session_present);
    c.subscribe("q/#", QoS::AtLeastOnce).await;
    c.disconnect().await;

    let (publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    for i in 0..3u8 {
        publisher.client.publish("q/x", QoS::AtLeastOnce, false, vec![i]).await.unwrap();
    }
    // Wait until all three are queued for the offline session.
    let session =
        server.broker().session(&mesgd_core::model::SessionKey::mqtt("durable")).expect("session kept");
    common::within("queued messages", async {
        while session.queue_len() < 3 {
            tokio::task::yield_now().await;
        }
    })
    .await;

    let (mut c, connack) = v3::connect(o).await;
    assert!(connack.session_present);
    for i in 0..3u8 {
        let p = c.next_publish().await;
        assert_eq!(&p.payload[..], &[i], "queued messages arrive in order");
    }
}

#[tokio::test]
async fn clean_session_discards_the_old_session() {
    let server = TestServer::start("").await;
    let mut o = v3::options("c", server.port());
    o.set_clean_session(false);
    let (mut c, _) = v3::connect(o.clone()).await;
    c.subscribe("a", QoS::AtLeastOnce).await;
    c.disconnect().await;
    o.set_clean_session(true);
    let (c, connack) = v3::connect(o).await;
    assert!(!connack.session_present);
    assert_eq!(server.broker().router().len(), 0);
    c.disconnect().await;
    assert!(
        server.broker().session(&mesgd_core::model::SessionKey::mqtt("c")).is_none(),
        "a clean session ends with its connection"
    );
}

#[tokio::test]
async fn client_id_takeover_closes_the_old_connection() {
    let server = TestServer::start("").await;
    let mut o = v3::options("same", server.port());
    o.set_clean_session(false);
    let (mut first, _) = v3::connect(o.clone()).await;
    first.subscribe("k", QoS::AtLeastOnce).await;
    let (mut second, connack) = v3::connect(o).await;
    assert!(connack.session_present, "the session is taken over, not discarded");
    first.closed().await;
    let (publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    publisher.client.publish("k", QoS::AtLeastOnce, false, "x").await.unwrap();
    assert_eq!(second.next_publish().await.topic, "k");
}

#[tokio::test]
async fn a_takeover_sends_the_old_connection_s_will_every_time() {
    // The session lives on in the new connection, but the old connection was closed by the
    // server: its will goes out (MQTT 5.0 §3.1.3.2.2 says so for a will without delay; 3.1.1
    // publishes a will on every close but DISCONNECT). Repeated, because whether the old
    // connection detached before or after the new one resumed the session once decided it.
    let server = TestServer::start("").await;
    let (mut watcher, _) = v3::connect(v3::options("watcher", server.port())).await;
    watcher.subscribe("wills/#", QoS::AtLeastOnce).await;
    for i in 0..10 {
        let id = format!("twin-{i}");
        let mut first = will_options(&id, server.port(), &format!("wills/{i}"));
        first.set_clean_session(false);
        let (mut old, _) = v3::connect(first).await;
        let mut second = v3::options(&id, server.port());
        second.set_clean_session(false);
        let (_new, connack) = v3::connect(second).await;
        assert!(connack.session_present);
        old.closed().await;
        let will = watcher.next_publish().await;
        assert_eq!((will.topic.as_str(), &will.payload[..]), (format!("wills/{i}").as_str(), &b"gone"[..]));
    }
}

#[tokio::test]
async fn dollar_topics_are_not_matched_by_a_leading_wildcard() {
    let server = TestServer::start("[mqtt]\nsys_interval = 1\n").await;
    let (mut all, _) = v3::connect(v3::options("all", server.port())).await;
    all.subscribe("#", QoS::AtMostOnce).await;
    let (mut sys, _) = v3::connect(v3::options("sys", server.port())).await;
    sys.subscribe("$SYS/broker/version", QoS::AtMostOnce).await;
    let v = sys.next_publish().await;
    assert!(String::from_utf8_lossy(&v.payload).starts_with("mesgd "));
    let (publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    publisher.client.publish("plain", QoS::AtLeastOnce, false, "p").await.unwrap();
    let first = all.next_publish().await;
    assert_eq!(first.topic, "plain", "# saw no $SYS message before the plain one");
}

#[tokio::test]
async fn sys_topics_report_broker_statistics() {
    let server = TestServer::start("[mqtt]\nsys_interval = 1\n").await;
    let (mut sys, _) = v3::connect(v3::options("sys", server.port())).await;
    sys.subscribe("$SYS/broker/#", QoS::AtMostOnce).await;
    // The retained values replayed at subscribe time predate this client; wait for an update
    // that counts it.
    let mut seen = std::collections::BTreeMap::new();
    while seen.get("$SYS/broker/subscriptions/count").map(String::as_str) != Some("1") || seen.len() < 13 {
        let p = sys.next_publish().await;
        seen.insert(p.topic.clone(), String::from_utf8_lossy(&p.payload).to_string());
    }
    for topic in [
        "version",
        "uptime",
        "clients/connected",
        "clients/total",
        "messages/received",
        "messages/sent",
        "messages/dropped",
        "subscriptions/count",
        "retained messages/count",
        "load/bytes/received",
        "load/bytes/sent",
    ] {
        assert!(seen.contains_key(&format!("$SYS/broker/{topic}")), "missing {topic}: {seen:?}");
    }
    assert_eq!(seen["$SYS/broker/clients/connected"], "1");
    assert_eq!(seen["$SYS/broker/subscriptions/count"], "1");
}

#[tokio::test]
async fn shared_subscriptions_are_accepted_from_311_clients_and_round_robin() {
    let server = TestServer::start("").await;
    let (mut a, _) = v3::connect(v3::options("a", server.port())).await;
    let (mut b, _) = v3::connect(v3::options("b", server.port())).await;
    a.subscribe("$share/workers/jobs/+", QoS::AtLeastOnce).await;
    b.subscribe("$share/workers/jobs/+", QoS::AtLeastOnce).await;
    let (publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    for i in 0..4u8 {
        publisher.client.publish("jobs/x", QoS::AtLeastOnce, false, vec![i]).await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(a.next_publish().await.payload[0]);
        got.push(b.next_publish().await.payload[0]);
    }
    got.sort();
    assert_eq!(got, [0, 1, 2, 3], "each message went to exactly one member");
}

#[tokio::test]
async fn keep_alive_timeout_closes_and_publishes_the_will() {
    let server = TestServer::start("").await;
    let (mut watcher, _) = v3::connect(v3::options("watcher", server.port())).await;
    watcher.subscribe("wills/#", QoS::AtLeastOnce).await;
    // A raw client with keep-alive 1 s and a will that then says nothing.
    let mut raw = common::Raw::open(server.addr, mesgd_core::mqtt::ProtocolVersion::V311).await;
    let mut body = common::mqtt_str("MQTT");
    body.extend_from_slice(&[4, 0x02 | 0x04 | 0x08, 0, 1]); // clean, will, will QoS 1; keep-alive 1
    body.extend_from_slice(&common::mqtt_str("silent"));
    body.extend_from_slice(&common::mqtt_str("wills/silent"));
    body.extend_from_slice(&common::mqtt_str("timeout"));
    raw.send(&common::packet(0x10, &body)).await;
    assert!(matches!(raw.recv().await, Some(mesgd_core::mqtt::Packet::ConnAck(_))));
    let started = std::time::Instant::now();
    assert!(raw.until_closed().await.is_empty(), "closed without a packet (3.1.1 has no DISCONNECT)");
    assert!(started.elapsed() >= Duration::from_millis(1400), "not before 1.5 x keep-alive");
    let will = watcher.next_publish().await;
    assert_eq!((will.topic.as_str(), &will.payload[..]), ("wills/silent", &b"timeout"[..]));
}

#[tokio::test]
async fn overlapping_subscriptions_deliver_once_at_the_highest_qos() {
    let server = TestServer::start("").await;
    let (mut sub, _) = v3::connect(v3::options("sub", server.port())).await;
    sub.subscribe("o/+", QoS::AtMostOnce).await;
    sub.subscribe("o/#", QoS::ExactlyOnce).await;
    sub.subscribe("o/x", QoS::AtLeastOnce).await;
    let (publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    publisher.client.publish("o/x", QoS::ExactlyOnce, false, "1").await.unwrap();
    publisher.client.publish("o/y/z", QoS::AtMostOnce, false, "2").await.unwrap();
    let first = sub.next_publish().await;
    assert_eq!((first.topic.as_str(), first.qos), ("o/x", QoS::ExactlyOnce));
    let second = sub.next_publish().await;
    assert_eq!(second.topic, "o/y/z", "o/x was delivered exactly once");
}
