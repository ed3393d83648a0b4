//! Retained messages cluster-wide, over a real nats-server with JetStream: set on one node,
//! seen from the others (and by a node started later), deleted everywhere by an empty payload
//! and by an operator's `DELETE /api/v1/retained/{topic}` on one node; the stream deleted under
//! running nodes is created again and filled from their stores.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::nats::{NatsServer, node, retained_until};
use common::v3;
use mesgd_core::topic::TopicName;
use rumqttc::QoS;

fn has(server: &common::TestServer, topic: &str, payload: Option<&[u8]>) -> bool {
    let topic = TopicName::try_from(topic).unwrap();
    let now = std::time::Instant::now();
    let got = server.broker().retained().get(&topic, now);
    got.as_ref().map(|m| &m.payload[..]) == payload
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_set_on_one_node_is_seen_everywhere_and_deleted_everywhere() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let c = node(&nats, "c", "").await;
    let (setter, _) = v3::connect(v3::options("setter", a.port())).await;
    setter.client.publish("state/lamp", QoS::AtLeastOnce, true, "on").await.unwrap();
    setter.client.publish("$app/state", QoS::AtLeastOnce, true, "dollar").await.unwrap();
    for n in [&a, &b, &c] {
        retained_until(n, "the retained message on every node", |n| {
            has(n, "state/lamp", Some(b"on")) && has(n, "$app/state", Some(b"dollar"))
        })
        .await;
    }
    // A client on another node gets it at SUBSCRIBE, with the retain flag.
    let (mut reader, _) = v3::connect(v3::options("reader", b.port())).await;
    reader.subscribe("state/#", QoS::AtLeastOnce).await;
    let got = reader.next_publish().await;
    assert_eq!((got.topic.as_str(), &got.payload[..], got.retain), ("state/lamp", &b"on"[..], true));

    // A node that starts later loads it before it accepts clients.
    let d = node(&nats, "d", "").await;
    assert!(has(&d, "state/lamp", Some(b"on")) && has(&d, "$app/state", Some(b"dollar")));

    // Replaced from a third node: one message per topic, the newest.
    let (other, _) = v3::connect(v3::options("other", c.port())).await;
    other.client.publish("state/lamp", QoS::AtLeastOnce, true, "dim").await.unwrap();
    for n in [&a, &b, &c, &d] {
        retained_until(n, "the replaced retained message", |n| has(n, "state/lamp", Some(b"dim"))).await;
    }
    // Deleted from there by an empty payload: gone on every node.
    other.client.publish("state/lamp", QoS::AtLeastOnce, true, "").await.unwrap();
    for n in [&a, &b, &c, &d] {
        retained_until(n, "the deletion", |n| has(n, "state/lamp", None)).await;
    }
    // A new subscriber on a gets no retained message: the first thing it receives is live.
    let (mut late, _) = v3::connect(v3::options("late", a.port())).await;
    late.subscribe("state/#", QoS::AtLeastOnce).await;
    setter.client.publish("state/live", QoS::AtLeastOnce, false, "live").await.unwrap();
    let first = late.next_publish().await;
    assert_eq!((first.topic.as_str(), first.retain), ("state/live", false));
    // And a node started after the deletion does not bring it back.
    let e = node(&nats, "e", "").await;
    assert!(has(&e, "state/lamp", None) && has(&e, "$app/state", Some(b"dollar")));

    // An operator's DELETE /api/v1/retained/{topic} on one node clears it on every node.
    let storage = common::auth::Storage::new();
    let f = common::TestServer::start_on(
        &storage,
        &format!(
            "[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n[auth]\n\
             allow_anonymous = true\n[cluster]\nnode = \"f\"\nnats = [{:?}]\n",
            nats.url
        ),
    )
    .await;
    assert!(has(&f, "$app/state", Some(b"dollar")));
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], "a long admin password\n").await;
    let token = storage.mesgd(&["admin", "token", "create", "ops", "--scope", "admin"], "").await;
    let http = f.server.as_ref().unwrap().local_addr("http").expect("http listener");
    let answer = common::within(
        "the API's answer",
        reqwest::Client::new()
            .delete(format!("http://{http}/api/v1/retained/%24app%2Fstate"))
            .bearer_auth(token.trim())
            .send(),
    )
    .await
    .expect("answered");
    assert_eq!(answer.status(), reqwest::StatusCode::NO_CONTENT);
    for n in [&a, &b, &c, &d, &e, &f] {
        retained_until(n, "the operator's clear", |n| has(n, "$app/state", None)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_leaves_a_tombstone_that_is_purged_later_and_never_a_newer_message() {
    let nats = NatsServer::start().await;
    let config = |name: &str| {
        format!("[cluster]\nnode = {name:?}\nnats = [{:?}]\nretained_tombstone_ms = 300\n", nats.url)
    };
    let a = common::TestServer::start(&config("a")).await;
    let b = common::TestServer::start(&config("b")).await;
    let (setter, _) = v3::connect(v3::options("setter", a.port())).await;
    let (other, _) = v3::connect(v3::options("other", b.port())).await;
    // gone/x: set, then deleted. back/x: set, deleted, and set again from the other node.
    setter.client.publish("gone/x", QoS::AtLeastOnce, true, "one").await.unwrap();
    setter.client.publish("back/x", QoS::AtLeastOnce, true, "one").await.unwrap();
    for n in [&a, &b] {
        retained_until(n, "both set", |n| has(n, "gone/x", Some(b"one")) && has(n, "back/x", Some(b"one")))
            .await;
    }
    setter.client.publish("gone/x", QoS::AtLeastOnce, true, "").await.unwrap();
    setter.client.publish("back/x", QoS::AtLeastOnce, true, "").await.unwrap();
    for n in [&a, &b] {
        retained_until(n, "both deleted", |n| has(n, "gone/x", None) && has(n, "back/x", None)).await;
    }
    other.client.publish("back/x", QoS::AtLeastOnce, true, "two").await.unwrap();
    for n in [&a, &b] {
        retained_until(n, "back/x set again", |n| has(n, "back/x", Some(b"two"))).await;
    }
    // a purges its two tombstones; the stream then holds back/x's newer message alone.
    let stats = common::nats::cluster(&a).stats().clone();
    common::within("a's tombstones purged", async {
        while stats.retained_tombstones_purged.load(std::sync::atomic::Ordering::Relaxed) < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let (messages, _) =
        common::nats::cluster(&a).durable_stream_state("MESGD_RETAINED").await.expect("stream info");
    assert_eq!(messages, 1, "only back/x's newer message is left");
    // A node started now loads it, and nothing for gone/x.
    let c = common::TestServer::start(&config("c")).await;
    assert!(has(&c, "back/x", Some(b"two")) && has(&c, "gone/x", None));
    assert!(has(&a, "back/x", Some(b"two")) && has(&b, "back/x", Some(b"two")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retained_message_past_the_caps_reaches_other_nodes_but_is_not_stored() {
    let nats = NatsServer::start().await;
    let caps = "[limits]\nmax_retained_messages = 1\n";
    let a = node(&nats, "a", caps).await;
    let b = node(&nats, "b", caps).await;
    let (mut reader, _) = v3::connect(v3::options("reader", b.port())).await;
    reader.subscribe("capped/#", QoS::AtLeastOnce).await;
    let (setter, _) = v3::connect(v3::options("setter", a.port())).await;
    setter.client.publish("capped/1", QoS::AtLeastOnce, true, "kept").await.unwrap();
    setter.client.publish("capped/2", QoS::AtLeastOnce, true, "over").await.unwrap();
    // Both reach the subscriber on the other node, live.
    let topics: Vec<String> = [reader.next_publish().await, reader.next_publish().await]
        .iter()
        .map(|p| p.topic.to_string())
        .collect();
    assert_eq!(topics, ["capped/1", "capped/2"]);
    retained_until(&b, "the kept message on b", |n| has(n, "capped/1", Some(b"kept"))).await;
    assert_eq!(a.server.as_ref().unwrap().context().limit_counts().retained, 1);
    // The stream holds only what a kept: a node started now loads capped/1 and nothing else,
    // even without a cap of its own.
    let c = node(&nats, "c", "").await;
    assert!(has(&c, "capped/1", Some(b"kept")));
    assert!(has(&c, "capped/2", None));
    assert!(has(&b, "capped/2", None));
}

/// A counter of `server`'s cluster.
fn counted(server: &common::TestServer, pick: fn(&mesgd_cluster::ClusterStats) -> &AtomicU64) -> u64 {
    pick(common::nats::cluster(server).stats()).load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_retained_stream_is_created_again_and_filled_from_the_nodes() {
    let nats = NatsServer::start().await;
    // With `$SYS` on: each node's statistics are retained messages of its own store.
    let sys = "[mqtt]\nsys_interval = 1\n";
    let a = node(&nats, "a", sys).await;
    let b = node(&nats, "b", sys).await;
    common::within("both nodes' $SYS statistics", async {
        let has_sys = |n: &common::TestServer| {
            n.broker()
                .retained()
                .all(std::time::Instant::now())
                .iter()
                .any(|m| m.topic.as_str().starts_with("$SYS/"))
        };
        while !has_sys(&a) || !has_sys(&b) {
            // Polled: the statistics are published on a timer, with nothing to wait on.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let (setter, _) = v3::connect(v3::options("setter", a.port())).await;
    // Thirty changes first, so that the old stream's sequences run past what the new one will
    // hold: a consumer that went on from the old stream's sequence would miss the new one's.
    for n in 0..30 {
        setter.client.publish("kept/x", QoS::AtLeastOnce, true, format!("change {n}")).await.unwrap();
    }
    setter.client.publish("kept/x", QoS::AtLeastOnce, true, "before").await.unwrap();
    setter.client.publish("$app/kept", QoS::AtLeastOnce, true, "dollar").await.unwrap();
    for n in [&a, &b] {
        retained_until(n, "both set", |n| {
            has(n, "kept/x", Some(b"before")) && has(n, "$app/kept", Some(b"dollar"))
        })
        .await;
    }

    nats.delete_stream("MESGD_RETAINED").await;
    // Set on b while the stream is missing (its store fails) or just created again (it is
    // stored): either way it reaches a once the nodes have joined the new stream.
    let (other, _) = v3::connect(v3::options("other", b.port())).await;
    other.client.publish("gap/y", QoS::AtLeastOnce, true, "during").await.unwrap();
    common::within("both nodes to follow a new retained stream", async {
        while counted(&a, |s| &s.retained_rejoins) == 0 || counted(&b, |s| &s.retained_rejoins) == 0 {
            // Polled: a counter has no notification (the nodes check every 5 s).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    retained_until(&a, "the message set on b during the gap", |n| has(n, "gap/y", Some(b"during"))).await;

    // The new stream holds one message per topic set, and none of the nodes' own `$SYS`
    // statistics, which never leave their node.
    let (messages, _) =
        common::nats::cluster(&a).durable_stream_state("MESGD_RETAINED").await.expect("stream info");
    assert_eq!(messages, 3, "kept/x, $app/kept and gap/y");

    // A node with an empty store joins afterwards: the nodes have filled the new stream.
    let c = node(&nats, "c", "").await;
    assert!(has(&c, "kept/x", Some(b"before")), "the late node has the message set before the deletion");
    assert!(has(&c, "$app/kept", Some(b"dollar")), "and the $ topic's");
    assert!(has(&c, "gap/y", Some(b"during")), "and the one set during the gap");

    // And the nodes follow the new stream from its start: a change on a reaches b and c, a
    // delete on c reaches a and b.
    setter.client.publish("kept/x", QoS::AtLeastOnce, true, "after").await.unwrap();
    for n in [&b, &c] {
        retained_until(n, "the change after the rejoin", |n| has(n, "kept/x", Some(b"after"))).await;
    }
    let (third, _) = v3::connect(v3::options("third", c.port())).await;
    third.client.publish("gap/y", QoS::AtLeastOnce, true, "").await.unwrap();
    for n in [&a, &b] {
        retained_until(n, "the delete after the rejoin", |n| has(n, "gap/y", None)).await;
    }
}
