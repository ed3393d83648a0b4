//! QoS 1/2 durability in JetStream over a real nats-server (`nats-server -js` on a loopback
//! port): a clustered node acknowledges a QoS 1/2 publish only once the durable stream has
//! stored it, with many stores outstanding at once and the acknowledgements in order; a
//! publish the stream cannot store is never acknowledged; with three clustered nats-servers
//! (replicas 3), killing one mid-stream loses no acknowledged message; and a persistent
//! session taken over from a live node keeps its queued and in-flight messages.

mod common;

use std::sync::atomic::Ordering;

use common::nats::{NatsServer, cluster};
use common::packets::{packet, publish_packet, subscribe_packet};
use common::persistent::persistent_v5;
use common::{Raw, TestServer, within};
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

/// Connects `client_id` persistently on `server`; returns the connection and session present.
async fn connect_v5(server: &TestServer, client_id: &str, receive_max: u16) -> (Raw, bool) {
    let mut raw = Raw::open(server.addr, ProtocolVersion::V5).await;
    raw.send(&persistent_v5(client_id, receive_max)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success => (raw, c.session_present),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

fn ack(kind: u8, packet_id: u16) -> Vec<u8> {
    packet(kind, &packet_id.to_be_bytes())
}
const PUBACK: u8 = 0x40;
const PUBREC: u8 = 0x50;
const PUBREL: u8 = 0x62;
const PUBCOMP: u8 = 0x70;

/// The next PUBLISH: its topic, packet id and DUP flag.
async fn next_publish(raw: &mut Raw) -> (String, u16, bool) {
    match raw.recv().await {
        Some(Packet::Publish(p)) => (p.topic.to_string(), p.packet_id.unwrap_or(0), p.dup),
        other => panic!("expected PUBLISH, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_taken_over_from_a_live_node_keeps_its_queued_and_in_flight_messages() {
    let nats = NatsServer::start().await;
    let a = durable_node(&nats, "a", "").await;
    let b = durable_node(&nats, "b", "").await;
    // A watcher on b of what the moving client publishes at QoS 2.
    let mut watcher = Raw::connected(b.addr, ProtocolVersion::V5, "watcher").await;
    watcher.send(&subscribe_packet(1, "x/in", 0, true)).await;
    assert!(matches!(watcher.recv().await, Some(Packet::SubAck(_))));
    common::nats::synced(&b).await;

    // The moving client on a: receive maximum 3, subscribed to d/# at QoS 2.
    let (mut old, _) = connect_v5(&a, "mover", 3).await;
    old.send(&subscribe_packet(1, "d/#", 2, true)).await;
    assert!(matches!(old.recv().await, Some(Packet::SubAck(_))));
    let mut publisher = Raw::connected(a.addr, ProtocolVersion::V5, "publisher").await;
    for (id, (topic, qos)) in
        [("d/1", 1), ("d/2", 2), ("d/3", 2), ("d/4", 1), ("d/5", 1)].into_iter().enumerate()
    {
        let id = id as u16 + 1;
        publisher.send(&publish_packet(topic, qos, Some(id), false, Some(&[]), topic.as_bytes())).await;
        match publisher.recv().await {
            Some(Packet::PubAck(r) | Packet::PubRec(r)) if r.packet_id == id => {}
            other => panic!("expected the acknowledgement of {id}, got {other:?}"),
        }
    }
    // Three in flight (the receive maximum), two queued. d/2 gets PUBREC (it is delivered:
    // PUBREL awaits PUBCOMP); d/1 and d/3 get nothing.
    let first: Vec<_> =
        [next_publish(&mut old).await, next_publish(&mut old).await, next_publish(&mut old).await]
            .into_iter()
            .map(|(t, id, _)| (t, id))
            .collect();
    let topics: Vec<&str> = first.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(topics, ["d/1", "d/2", "d/3"]);
    let pid = |topic: &str| first.iter().find(|(t, _)| t == topic).map(|(_, id)| *id).unwrap();
    old.send(&ack(PUBREC, pid("d/2"))).await;
    assert!(matches!(old.recv().await, Some(Packet::PubRel(r)) if r.packet_id == pid("d/2")));
    // And it publishes at QoS 2 itself, without releasing: packet id 77 awaits PUBREL.
    old.send(&publish_packet("x/in", 2, Some(77), false, Some(&[]), b"once")).await;
    assert!(matches!(old.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 77));

    // The client moves to b while connected to a.
    let (mut new, present) = connect_v5(&b, "mover", 3).await;
    assert!(present, "the session moved with its client");
    let seen = old.until_closed().await;
    assert!(
        matches!(seen.as_slice(), [Packet::Disconnect(d)] if d.reason_code == ReasonCode::SessionTakenOver),
        "{seen:?}"
    );
    // b resends what was in flight, in order: d/1 again (DUP), PUBREL for d/2 (never the
    // message itself again), d/3 again (DUP).
    assert_eq!(next_publish(&mut new).await, ("d/1".to_owned(), pid("d/1"), true));
    assert!(matches!(new.recv().await, Some(Packet::PubRel(r)) if r.packet_id == pid("d/2")));
    assert_eq!(next_publish(&mut new).await, ("d/3".to_owned(), pid("d/3"), true));
    new.send(&ack(PUBACK, pid("d/1"))).await;
    new.send(&ack(PUBCOMP, pid("d/2"))).await;
    new.send(&ack(PUBREC, pid("d/3"))).await;
    // Then the two that were queued, as the window frees, and the release of d/3.
    let (mut queued, mut released) = (Vec::new(), false);
    while queued.len() < 2 || !released {
        match new.recv().await {
            Some(Packet::Publish(p)) => {
                assert!(!p.dup, "{p:?}");
                new.send(&ack(PUBACK, p.packet_id.unwrap())).await;
                queued.push(p.topic.to_string());
            }
            Some(Packet::PubRel(r)) if r.packet_id == pid("d/3") && !released => {
                new.send(&ack(PUBCOMP, r.packet_id)).await;
                released = true;
            }
            other => panic!("expected d/4, d/5 and PUBREL for d/3, got {other:?}"),
        }
    }
    assert_eq!(queued, ["d/4", "d/5"]);
    // The client's own QoS 2 message: its retransmission on b is recognised (PUBREC, not
    // routed again), and the release completes.
    let mut dup = publish_packet("x/in", 2, Some(77), false, Some(&[]), b"once");
    dup[0] |= 0x08;
    new.send(&dup).await;
    assert!(matches!(new.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 77));
    new.send(&ack(PUBREL, 77)).await;
    match new.recv().await {
        Some(Packet::PubComp(r)) => assert_eq!((r.packet_id, r.reason_code), (77, ReasonCode::Success)),
        other => panic!("expected PUBCOMP, got {other:?}"),
    }
    // A marker published on b after all that: the watcher sees "once" once, then the marker.
    let mut marker = Raw::connected(b.addr, ProtocolVersion::V5, "marker").await;
    marker.send(&publish_packet("x/in", 0, None, false, Some(&[]), b"end")).await;
    let mut got = Vec::new();
    while got.last().map(Vec::as_slice) != Some(b"end".as_slice()) {
        match watcher.recv().await {
            Some(Packet::Publish(p)) => got.push(p.payload.to_vec()),
            other => panic!("expected PUBLISH, got {other:?}"),
        }
    }
    assert_eq!(got, [b"once".to_vec(), b"end".to_vec()], "the QoS 2 message was routed exactly once");
    assert_eq!(counter(&b, |s| &s.registry_messages_received), 5);
    assert!(a.broker().session(&mesgd_core::model::SessionKey::mqtt("mover")).is_none(), "gone from a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_message_is_lost_when_a_nats_server_of_three_is_killed() {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    const TOTAL: usize = 400;
    const WINDOW: usize = 20;
    let mut nats = common::nats_cluster::NatsCluster::start().await;
    let a = TestServer::start(&format!(
        "[cluster]\nnode = \"a\"\nnats = [{}]\nretained_replicas = 3\nregistry_replicas = 3\n\
         [cluster.durable]\nreplicas = 3\nstore_timeout_ms = 2000\n",
        nats.nats_list()
    ))
    .await;
    // The server a's connection is on is the one that dies: a must fail over as well.
    let victim: usize = cluster(&a).nats_server_name().trim_start_matches('n').parse().expect("n<i>");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut acked, mut unacked) = (BTreeSet::new(), VecDeque::new());
    let (mut next, mut packet_id, mut killed_at) = (0usize, 0u16, None);
    let mut reconnects = 0;
    while acked.len() < TOTAL {
        assert!(std::time::Instant::now() < deadline, "{} of {TOTAL} acknowledged in time", acked.len());
        // (Re)connect; a CONNECT the registry cannot serve yet (its stream electing a leader)
        // is refused with 0x88, and the client tries again, as a real one would.
        let mut raw = Raw::open(a.addr, ProtocolVersion::V5).await;
        raw.send(&common::packets::connect_bytes(5, "streamer", 0x02)).await;
        match raw.recv().await {
            Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success => {}
            Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::ServerUnavailable => {
                // A retry interval, as a client's reconnect back-off (not a wait for an event).
                reconnects += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
            other => panic!("expected CONNACK, got {other:?}"),
        }
        let mut pending: BTreeMap<u16, usize> = BTreeMap::new();
        loop {
            while pending.len() < WINDOW && acked.len() + pending.len() < TOTAL {
                // What was sent and not acknowledged before a close goes again first.
                let n = unacked.pop_front().unwrap_or_else(|| {
                    next += 1;
                    next
                });
                packet_id = packet_id % u16::MAX + 1;
                pending.insert(packet_id, n);
                let payload = format!("m{n}");
                raw.send(&publish_packet("s/1", 1, Some(packet_id), false, Some(&[]), payload.as_bytes()))
                    .await;
            }
            match raw.recv().await {
                Some(Packet::PubAck(ack)) => {
                    let n = pending.remove(&ack.packet_id).expect("a PUBACK for a packet sent");
                    acked.insert(n);
                    if acked.len() == TOTAL / 4 && killed_at.is_none() {
                        nats.kill(victim).await;
                        killed_at = Some(acked.len());
                    }
                    if acked.len() == TOTAL {
                        break;
                    }
                }
                Some(Packet::Disconnect(d)) => {
                    assert_eq!(d.reason_code, ReasonCode::UnspecifiedError, "a store that failed: {d:?}");
                }
                None => break,
                other => panic!("expected PUBACK, got {other:?}"),
            }
        }
        unacked.extend(pending.into_values().filter(|n| !acked.contains(n)));
        reconnects += 1;
    }
    assert_eq!(killed_at, Some(TOTAL / 4));
    assert_ne!(cluster(&a).nats_server_name(), format!("n{victim}"), "a failed over to a live server");
    eprintln!(
        "{reconnects} reconnects, {} stores failed",
        counter(&a, |s| &s.durable_store_errors) + counter(&a, |s| &s.durable_queue_full)
    );
    let stored: BTreeSet<usize> =
        within("the stream's messages", cluster(&a).durable_stream_messages("MESGD_QOS"))
            .await
            .expect("the stream is readable with two servers of three")
            .into_iter()
            .map(|(subject, payload)| {
                assert_eq!(subject, "mqs.s.1");
                std::str::from_utf8(&payload).unwrap()[1..].parse().unwrap()
            })
            .collect();
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged but not in the stream: {lost:?} ({reconnects} reconnects)");
    assert_eq!(acked.len(), TOTAL);
}
