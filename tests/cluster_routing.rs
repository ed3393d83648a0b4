//! Nodes exchanging messages over a real nats-server (`nats-server -js` on a loopback port):
//! clients on different nodes at QoS 0, 1 and 2, overlapping subscriptions delivered once, no
//! echo of a node's own publishes, order per publisher and topic, properties across nodes,
//! shared subscriptions split across the nodes with a member online.

mod common;

use std::sync::atomic::Ordering;

use common::nats::{NatsServer, cluster, node, synced};
use common::packets::{packet, subscribe_packet};
use common::persistent::connect_persistent;
use common::{v3, v5};
use mesgd_core::model::SessionKey;
use mesgd_core::mqtt::{Packet, ProtocolVersion};
use rumqttc::QoS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_on_different_nodes_exchange_messages_at_every_qos() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let (mut sub_b, _) = v3::connect(v3::options("sub-b", b.port())).await;
    let (mut sub_a, _) = v3::connect(v3::options("sub-a", a.port())).await;
    let (pub_a, _) = v3::connect(v3::options("pub-a", a.port())).await;
    let (pub_b, _) = v3::connect(v3::options("pub-b", b.port())).await;
    for (q, name) in [(QoS::AtMostOnce, "0"), (QoS::AtLeastOnce, "1"), (QoS::ExactlyOnce, "2")] {
        sub_b.subscribe(&format!("to-b/{name}/+"), q).await;
        sub_a.subscribe(&format!("to-a/{name}/+"), q).await;
    }
    synced(&a).await;
    synced(&b).await;
    for (q, name) in [(QoS::AtMostOnce, "0"), (QoS::AtLeastOnce, "1"), (QoS::ExactlyOnce, "2")] {
        pub_a.client.publish(format!("to-b/{name}/x"), q, false, format!("from a at {name}")).await.unwrap();
        let got = sub_b.next_publish().await;
        assert_eq!(
            (got.topic.as_str(), &got.payload[..]),
            (&*format!("to-b/{name}/x"), format!("from a at {name}").as_bytes())
        );
        assert_eq!(got.qos, q);
        pub_b.client.publish(format!("to-a/{name}/y"), q, false, format!("from b at {name}")).await.unwrap();
        let got = sub_a.next_publish().await;
        assert_eq!(
            (got.topic.as_str(), &got.payload[..]),
            (&*format!("to-a/{name}/y"), format!("from b at {name}").as_bytes())
        );
        assert_eq!(got.qos, q);
    }
    let (sa, sb) = (cluster(&a).stats(), cluster(&b).stats());
    assert_eq!(sa.received.load(Ordering::Relaxed), 3);
    assert_eq!(sb.received.load(Ordering::Relaxed), 3);
    assert_eq!(sa.echoes_dropped.load(Ordering::Relaxed) + sb.echoes_dropped.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_on_another_node_right_after_suback_arrives() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let mut subscriber = common::Raw::connected(a.addr, ProtocolVersion::V5, "subscriber").await;
    let mut publisher = common::Raw::connected(b.addr, ProtocolVersion::V5, "publisher").await;
    // Each round a filter no node has subscribed to yet, so that a needs a new NATS
    // subscription for it; the publish follows the SUBACK at once, with no other wait.
    for round in 0..20u16 {
        let topic = format!("fresh/{round}");
        subscriber.send(&subscribe_packet(round + 1, &topic, 0, true)).await;
        match subscriber.recv().await {
            Some(Packet::SubAck(ack)) => assert_eq!(ack.packet_id, round + 1),
            other => panic!("expected SUBACK, got {other:?}"),
        }
        publisher
            .send(&common::packets::publish_packet(&topic, 0, None, false, Some(&[]), b"right after"))
            .await;
        match subscriber.recv().await {
            Some(Packet::Publish(p)) => {
                assert_eq!((&*p.topic, &p.payload[..]), (&*topic, &b"right after"[..]))
            }
            other => panic!("round {round}: expected the message from b, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_subscriptions_get_one_copy_in_order_and_no_echo() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    // On b: one client with three overlapping filters, another with the exact topic. Four of
    // b's five NATS subjects match a/b (mq.a.*, mq.a.>, mq.*.b, mq.a.b; mq.a, the parent of
    // a/#, does not), so NATS hands b four copies of each message.
    let (mut overlap, _) = v3::connect(v3::options("overlap", b.port())).await;
    for f in ["a/+", "a/#", "+/b"] {
        overlap.subscribe(f, QoS::AtLeastOnce).await;
    }
    let (mut exact, _) = v3::connect(v3::options("exact", b.port())).await;
    exact.subscribe("a/b", QoS::AtLeastOnce).await;
    // On a, the publisher's own node: a local subscriber gets its copy locally, once.
    let (mut local, _) = v3::connect(v3::options("local", a.port())).await;
    local.subscribe("a/#", QoS::AtLeastOnce).await;
    synced(&b).await;
    synced(&a).await;
    let (publisher, _) = v3::connect(v3::options("pub", a.port())).await;
    const N: usize = 50;
    for i in 0..N {
        publisher.client.publish("a/b", QoS::AtLeastOnce, false, i.to_string()).await.unwrap();
    }
    publisher.client.publish("a/b", QoS::AtLeastOnce, false, "end").await.unwrap();
    let expected: Vec<String> = (0..N).map(|i| i.to_string()).chain(["end".to_owned()]).collect();
    for (who, client) in [("overlap", &mut overlap), ("exact", &mut exact), ("local", &mut local)] {
        let mut got = Vec::new();
        while got.last().map(String::as_str) != Some("end") {
            let p = client.next_publish().await;
            got.push(String::from_utf8(p.payload.to_vec()).unwrap());
        }
        assert_eq!(got, expected, "{who}: every message once, in order");
    }
    let (sa, sb) = (cluster(&a).stats(), cluster(&b).stats());
    // Every message came to b four times and was routed once. The last copies of "end" may
    // still be on their way when the clients have it: wait (bounded) until they are counted.
    assert_eq!(sb.received.load(Ordering::Relaxed), N as u64 + 1);
    let all_copies = 3 * (N as u64 + 1);
    common::within("every duplicate counted", async {
        while sb.duplicates_dropped.load(Ordering::Relaxed) < all_copies {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(sb.duplicates_dropped.load(Ordering::Relaxed), all_copies);
    assert_eq!(sb.received.load(Ordering::Relaxed), N as u64 + 1);
    // a subscribes a/# too, but its own publishes never come back to it.
    assert_eq!(sa.received.load(Ordering::Relaxed), 0);
    assert_eq!(sa.echoes_dropped.load(Ordering::Relaxed), 0);
    assert_eq!(sa.forwarded.load(Ordering::Relaxed), N as u64 + 1);
    assert_eq!(sb.forwarded.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_ends_the_nats_interest_and_literal_wildcards_stay_literal() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let (mut sub, _) = v3::connect(v3::options("sub", b.port())).await;
    // A topic holding a literal '*' and '.' is one topic among others, not a wildcard.
    sub.subscribe("lit/*", QoS::AtLeastOnce).await;
    sub.subscribe("dots/a.b", QoS::AtLeastOnce).await;
    synced(&b).await;
    assert_eq!(cluster(&b).stats().subscriptions.load(Ordering::Relaxed), 2);
    let (publisher, _) = v3::connect(v3::options("pub", a.port())).await;
    for (topic, payload) in [("lit/x", "no"), ("dots/a/b", "no"), ("lit/*", "star"), ("dots/a.b", "dot")] {
        publisher.client.publish(topic, QoS::AtLeastOnce, false, payload).await.unwrap();
    }
    // Order is kept per topic, not across topics (they arrive on different subscriptions).
    let mut got = Vec::new();
    for _ in 0..2 {
        let p = sub.next_publish().await;
        got.push((p.topic.clone(), String::from_utf8(p.payload.to_vec()).unwrap()));
    }
    got.sort();
    assert_eq!(got, [("dots/a.b".to_owned(), "dot".to_owned()), ("lit/*".to_owned(), "star".to_owned())]);
    sub.client.unsubscribe("lit/*").await.unwrap();
    sub.next("UNSUBACK", |p| matches!(p, rumqttc::Packet::UnsubAck(_)).then_some(())).await;
    synced(&b).await;
    assert_eq!(cluster(&b).stats().subscriptions.load(Ordering::Relaxed), 1);
    // Only `dots/a.b` is still wanted: the publish to `lit/*` no longer reaches b at all.
    publisher.client.publish("lit/*", QoS::AtLeastOnce, false, "gone").await.unwrap();
    publisher.client.publish("dots/a.b", QoS::AtLeastOnce, false, "after").await.unwrap();
    let next = sub.next_publish().await;
    assert_eq!(&next.payload[..], b"after");
    assert_eq!(cluster(&b).stats().received.load(Ordering::Relaxed), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v5_properties_and_expiry_cross_nodes() {
    use rumqttc::v5::mqttbytes::v5::PublishProperties;
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let (mut sub, _) = v5::connect(v5::options("sub5", b.port())).await;
    sub.subscribe("props/#", v5::QoS::AtLeastOnce).await;
    synced(&b).await;
    let (publisher, _) = v5::connect(v5::options("pub5", a.port())).await;
    let props = PublishProperties {
        content_type: Some("text/plain".into()),
        response_topic: Some("reply/here".into()),
        correlation_data: Some(bytes::Bytes::from_static(b"\x01\x02")),
        user_properties: vec![("k".into(), "v".into()), ("k".into(), "w".into())],
        message_expiry_interval: Some(600),
        payload_format_indicator: Some(1),
        ..Default::default()
    };
    publisher
        .client
        .publish_with_properties("props/x", v5::QoS::AtLeastOnce, false, "hello", props)
        .await
        .unwrap();
    let got = sub.next_publish().await;
    let p = got.properties.expect("properties");
    assert_eq!(p.content_type.as_deref(), Some("text/plain"));
    assert_eq!(p.response_topic.as_deref(), Some("reply/here"));
    assert_eq!(p.correlation_data.as_deref(), Some(&b"\x01\x02"[..]));
    assert_eq!(p.user_properties, [("k".to_owned(), "v".to_owned()), ("k".to_owned(), "w".to_owned())]);
    assert_eq!(p.payload_format_indicator, Some(1));
    let left = p.message_expiry_interval.expect("expiry travels");
    assert!((590..=600).contains(&left), "{left}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_reach_nats_does_not_start_and_bad_tables_are_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let base = format!(
        "[storage]\ndir = {:?}\n[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n",
        dir.path().display().to_string()
    );
    let text = format!(
        "{base}[cluster]\nnode = \"a\"\nnats = [\"nats://127.0.0.1:{port}\"]\nconnect_timeout_ms = 500\n"
    );
    let config = mesgd::config::Config::from_toml(&text, None).unwrap();
    let err = common::within("start refused", Box::pin(mesgd::Server::start(config)))
        .await
        .expect_err("no NATS there");
    let shown = err.to_string();
    assert!(shown.contains("cannot connect to NATS") && shown.contains(&port.to_string()), "{shown}");

    // JetStream off: refused at once (no responder is not a cluster still starting, which
    // would be waited for up to jetstream_ready_timeout_ms, 30 s by default).
    let nats = common::nats::NatsServer::start_without_jetstream().await;
    let text = format!("{base}[cluster]\nnode = \"a\"\nnats = [{:?}]\n", nats.url);
    let config = mesgd::config::Config::from_toml(&text, None).unwrap();
    let err = common::within("start refused", Box::pin(mesgd::Server::start(config)))
        .await
        .expect_err("JetStream is off");
    assert!(err.to_string().contains("jetstream unavailable"), "{err}");

    // Credentials refused: at once, not after connect_timeout_ms (30 s here), since waiting
    // cannot change the answer.
    let nats = common::nats::NatsServer::start_with_user("node", "right").await;
    let text = format!(
        "{base}[cluster]\nnode = \"a\"\nnats = [{:?}]\nuser = \"node\"\npassword = \"wrong\"\n\
         connect_timeout_ms = 30000\n",
        nats.url
    );
    let config = mesgd::config::Config::from_toml(&text, None).unwrap();
    let err = common::within("start refused", Box::pin(mesgd::Server::start(config)))
        .await
        .expect_err("the password is wrong");
    assert!(err.to_string().contains("authorization violation"), "{err}");
    assert!(!err.to_string().contains("wrong"), "the password is not shown: {err}");
    for (table, expected) in [
        ("[cluster]\nnode = \"a b\"\n", "node"),
        ("[cluster]\nnode = \"a\"\ntoken = \"t\"\nuser = \"u\"\npassword = \"p\"\n", "user and token"),
        ("[cluster]\nnode = \"a\"\n[cluster.tls]\nkey_file = \"k.pem\"\n", "cert_file and key_file"),
        ("[cluster]\nnats = []\n", "missing field `node`"),
    ] {
        let err = mesgd::config::Config::from_toml(&format!("{base}{table}"), None).expect_err(table);
        assert!(err.to_string().contains(expected), "{table:?}: {err}");
    }
}

/// A node started before its NATS server listens (both started at once) tries again until it
/// does, within `connect_timeout_ms`, and counts the failed attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_before_its_nats_server_connects_once_the_server_listens() {
    // The port answers the node's first attempt by closing it, as a server that is not up yet.
    let early = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = early.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[storage]\ndir = {:?}\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
         [auth]\nallow_anonymous = true\n[cluster]\nnode = \"a\"\nnats = [\"nats://127.0.0.1:{port}\"]\n\
         connect_timeout_ms = 30000\n",
        dir.path().display().to_string()
    );
    let config = mesgd::config::Config::from_toml(&text, None).unwrap();
    let starting = tokio::spawn(mesgd::Server::start(config));
    let (attempt, _) = common::within("the node's first attempt", early.accept()).await.unwrap();
    drop((attempt, early));

    let _nats = common::nats::NatsServer::start_on(port).await;
    let server = common::within("the node's start", starting).await.unwrap().expect("the node starts");
    let cluster = server.cluster().expect("clustered");
    assert!(cluster.stats().initial_connect_failures.load(Ordering::Relaxed) >= 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_counters_are_in_the_metrics() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let (mut sub, _) = v3::connect(v3::options("sub", b.port())).await;
    sub.subscribe("m/#", QoS::AtMostOnce).await;
    synced(&b).await;
    let (publisher, _) = v3::connect(v3::options("pub", a.port())).await;
    publisher.client.publish("m/1", QoS::AtMostOnce, false, "x").await.unwrap();
    sub.next_publish().await;
    let text = b.server.as_ref().unwrap().context().metrics.encode();
    assert!(text.contains("mesgd_cluster_received_total 1"), "{text}");
    assert!(text.contains("mesgd_cluster_subscriptions 2"), "{text}");
    let single = common::TestServer::start("").await;
    let text = single.server.as_ref().unwrap().context().metrics.encode();
    assert!(!text.contains("mesgd_cluster_"), "a single node has no cluster metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_subscription_across_nodes_gives_each_message_to_one_member() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let c = node(&nats, "c", "").await;
    // Group g has a member on a and one on b; a plain subscriber on b gets everything.
    let (mut member_a, _) = v5::connect(v5::options("member-a", a.port())).await;
    member_a.subscribe("$share/g/jobs/+", v5::QoS::AtLeastOnce).await;
    let (mut member_b, _) = v5::connect(v5::options("member-b", b.port())).await;
    member_b.subscribe("$share/g/jobs/+", v5::QoS::AtLeastOnce).await;
    let (mut plain, _) = v5::connect(v5::options("plain", b.port())).await;
    plain.subscribe("jobs/#", v5::QoS::AtLeastOnce).await;
    for n in [&a, &b, &c] {
        synced(n).await;
    }
    // Published on c (no member), and on a (a member's own node).
    let (pub_c, _) = v5::connect(v5::options("pub-c", c.port())).await;
    let (pub_a, _) = v5::connect(v5::options("pub-a", a.port())).await;
    const N: usize = 60;
    for i in 0..N {
        let publisher = if i % 2 == 0 { &pub_c } else { &pub_a };
        publisher.client.publish("jobs/x", v5::QoS::AtLeastOnce, false, i.to_string()).await.unwrap();
    }
    // The plain subscriber sees all of them: the end of the run.
    let mut all = Vec::new();
    while all.len() < N {
        all.push(String::from_utf8(plain.next_publish().await.payload.to_vec()).unwrap());
    }
    all.sort();
    let mut expected: Vec<String> = (0..N).map(|i| i.to_string()).collect();
    expected.sort();
    assert_eq!(all, expected);
    // Every message reached exactly one member.
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let shared = || {
        let (sa, sb) = (cluster(&a).stats(), cluster(&b).stats());
        sa.shared_received.load(Ordering::Relaxed) + sb.shared_received.load(Ordering::Relaxed)
    };
    common::within("every shared message routed", async {
        while shared() < N as u64 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let on_a = cluster(&a).stats().shared_received.load(Ordering::Relaxed) as usize;
    for _ in 0..on_a {
        got_a.push(String::from_utf8(member_a.next_publish().await.payload.to_vec()).unwrap());
    }
    for _ in 0..N - on_a {
        got_b.push(String::from_utf8(member_b.next_publish().await.payload.to_vec()).unwrap());
    }
    assert!(
        !got_a.is_empty() && !got_b.is_empty(),
        "NATS split the group: {} / {}",
        got_a.len(),
        got_b.len()
    );
    let mut both: Vec<String> = got_a.iter().chain(&got_b).cloned().collect();
    both.sort();
    assert_eq!(both, expected, "each message to one member, none twice");
    assert_eq!(shared(), N as u64);
    // The last member on a leaves: its queue subscription goes, and b's member gets the rest.
    member_a.client.unsubscribe("$share/g/jobs/+").await.unwrap();
    member_a.next("UNSUBACK", |p| matches!(p, v5::Packet::UnsubAck(_)).then_some(())).await;
    synced(&a).await;
    pub_c.client.publish("jobs/x", v5::QoS::AtLeastOnce, false, "after").await.unwrap();
    assert_eq!(&member_b.next_publish().await.payload[..], b"after");
}

/// Messages this node's shared groups received from NATS queue subscriptions.
fn shared_received(server: &common::TestServer) -> u64 {
    cluster(server).stats().shared_received.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_shared_member_takes_nothing_from_a_member_online_on_another_node() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    // A persistent member of g on a subscribes and goes offline; its session stays.
    let (mut away, _) = connect_persistent(a.addr, ProtocolVersion::V5, "away").await;
    away.send(&subscribe_packet(1, "$share/g/work/+", 0x01, true)).await;
    assert!(matches!(away.recv().await, Some(Packet::SubAck(_))));
    away.send(&packet(0xE0, &[0])).await;
    away.until_closed().await;
    let key = SessionKey::mqtt("away");
    common::within("a's member to be offline", async {
        while a.broker().session(&key).is_none_or(|s| s.is_online()) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    let (mut online, _) = v5::connect(v5::options("online", b.port())).await;
    online.subscribe("$share/g/work/+", v5::QoS::AtLeastOnce).await;
    for n in [&a, &b] {
        synced(n).await;
    }
    // Published on a, the offline member's own node: every message to b's online member.
    let (publisher, _) = v5::connect(v5::options("pub", a.port())).await;
    const N: usize = 40;
    for i in 0..N {
        publisher.client.publish("work/x", v5::QoS::AtLeastOnce, false, i.to_string()).await.unwrap();
    }
    let mut got = Vec::new();
    while got.len() < N {
        got.push(String::from_utf8(online.next_publish().await.payload.to_vec()).unwrap());
    }
    assert_eq!(got, (0..N).map(|i| i.to_string()).collect::<Vec<_>>(), "all of them, in order");
    assert_eq!((shared_received(&a), shared_received(&b)), (0, N as u64));
    assert_eq!(
        cluster(&b).stats().received.load(Ordering::Relaxed),
        0,
        "b, with only a shared member, holds no plain subscription to be sent the messages on"
    );

    // Back online, the member on a takes its share again.
    let (mut back, present) = connect_persistent(a.addr, ProtocolVersion::V5, "away").await;
    assert!(present);
    synced(&a).await;
    for i in 0..N {
        publisher.client.publish("work/x", v5::QoS::AtLeastOnce, false, i.to_string()).await.unwrap();
    }
    common::within("every shared message routed", async {
        while shared_received(&a) + shared_received(&b) < 2 * N as u64 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(shared_received(&a) > 0, "the member online again on a got none of {N}");
    assert!(shared_received(&b) > N as u64, "NATS gave b none of the second {N}");
    assert!(matches!(back.recv().await, Some(Packet::Publish(_))), "a's member gets its share");
}
