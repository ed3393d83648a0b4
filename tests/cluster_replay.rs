//! Persistent sessions that move in the middle of a QoS 1/2 stream, with one real nats-server.
//! A node killed with SIGKILL: a real `mesgd` process as node a, in-process nodes b (the
//! publisher's) and c (where the sessions resume); what never reached a's copies of the
//! sessions comes from the durable stream (the replay from the record's checkpoint), given as
//! the clients read it even where it is more than a session's queue holds. A live takeover:
//! what reached the old node after it handed the sessions over, or no node while they moved,
//! comes from the stream too (the replay from the checkpoint in the handover).

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::nats::{NatsServer, cluster, node};
use common::packets::{packet, publish_packet, subscribe_packet};
use common::persistent::{connect_persistent, nothing_more, persistent_v5};
use common::{Raw, within};
use daemon::Daemon;
use mesgd_core::mqtt::{Packet, ProtocolVersion, QoS, ReasonCode};
use tokio::sync::watch;

const V5: ProtocolVersion = ProtocolVersion::V5;
const V311: ProtocolVersion = ProtocolVersion::V311;
/// Messages per stream (d/… at QoS 2 for the MQTT 5 session, e/… at QoS 1 for the 3.1.1 one).
const STREAM: usize = 300;
/// Acknowledged publishes after which node a is killed.
const KILL_AFTER: usize = 120;
/// How far past that the publisher goes before the kill has happened (on a loaded machine
/// the test's task may run late): the kill comes in the middle of the stream, whatever the
/// scheduling.
const KILL_WITHIN: usize = 60;
/// The bound on the whole exchange after the kill (a loaded machine, a debug build).
const LONG: Duration = Duration::from_secs(90);

/// A subscriber as an application sees it: what it was given, per payload, across its
/// connections. QoS 2 follows the MQTT receiver: a PUBLISH whose packet id awaits PUBREL is
/// the same message again, not a new one.
#[derive(Default)]
struct Received {
    given: BTreeMap<String, usize>,
    awaiting_release: BTreeSet<u16>,
    /// PUBLISH packets with DUP set.
    dups: usize,
}

impl Received {
    /// Handles one packet: acknowledges it as the protocol asks and counts what it gives.
    /// Returns false when the connection closed, also when it closes under the answer (a node
    /// killed between its PUBLISH and our acknowledgement resets the socket).
    async fn on(&mut self, raw: &mut Raw, next: Option<Packet>) -> bool {
        match next {
            Some(Packet::Publish(p)) => {
                let id = p.packet_id.unwrap_or(0);
                self.dups += usize::from(p.dup);
                let payload = String::from_utf8(p.payload.to_vec()).unwrap();
                match p.qos {
                    QoS::ExactlyOnce => {
                        if self.awaiting_release.insert(id) {
                            *self.given.entry(payload).or_default() += 1;
                        }
                        raw.try_send(&packet(0x50, &id.to_be_bytes())).await
                    }
                    QoS::AtLeastOnce => {
                        *self.given.entry(payload).or_default() += 1;
                        raw.try_send(&packet(0x40, &id.to_be_bytes())).await
                    }
                    QoS::AtMostOnce => panic!("a QoS 0 delivery on a QoS 1/2 subscription: {p:?}"),
                }
            }
            Some(Packet::PubRel(r)) => {
                self.awaiting_release.remove(&r.packet_id);
                raw.try_send(&packet(0x70, &r.packet_id.to_be_bytes())).await
            }
            // Taken over (MQTT 5 0x8E): the node closes the connection next.
            Some(Packet::Disconnect(d)) if d.reason_code == ReasonCode::SessionTakenOver => false,
            Some(other) => panic!("unexpected {other:?}"),
            None => false,
        }
    }

    fn has_all(&self, payloads: &[String]) -> bool {
        payloads.iter().all(|p| self.given.contains_key(p))
    }
}

/// Reads `raw` on a until the node is gone (the socket closes), acknowledging everything
/// (each packet within the common bound: the stream keeps coming until the kill).
async fn until_node_gone(mut raw: Raw, mut received: Received) -> Received {
    loop {
        let next = raw.recv().await;
        if !received.on(&mut raw, next).await {
            return received;
        }
    }
}

/// The publisher on b: the two streams interleaved, one message at a time (QoS 2 completed
/// with PUBREL); reports each acknowledged payload (PUBACK / PUBREC: in the durable stream).
/// Past [`KILL_AFTER`] + [`KILL_WITHIN`] acknowledgements it waits for `killed`.
async fn publish_streams(mut raw: Raw, acked: watch::Sender<Vec<String>>, mut killed: watch::Receiver<bool>) {
    let mut pid = 0u16;
    for i in 1..=STREAM {
        for (topic, qos) in [("d", 2u8), ("e", 1u8)] {
            if acked.borrow().len() == KILL_AFTER + KILL_WITHIN {
                within("the kill of node a", killed.wait_for(|k| *k)).await.unwrap();
            }
            pid = pid % 60_000 + 1;
            let payload = format!("{topic}-{i}");
            raw.send(&publish_packet(
                &format!("{topic}/{i}"),
                qos,
                Some(pid),
                false,
                Some(&[]),
                payload.as_bytes(),
            ))
            .await;
            let reply = raw.recv().await;
            match (qos, reply) {
                (1, Some(Packet::PubAck(a))) if a.packet_id == pid => {}
                (2, Some(Packet::PubRec(a))) if a.packet_id == pid => {
                    raw.send(&packet(0x62, &pid.to_be_bytes())).await;
                    let comp = raw.recv().await;
                    assert!(matches!(&comp, Some(Packet::PubComp(c)) if c.packet_id == pid), "{comp:?}");
                }
                (_, other) => panic!("{payload}: expected its acknowledgement, got {other:?}"),
            }
            acked.send_modify(|all| all.push(payload));
        }
    }
}

fn all_len(acked: &watch::Receiver<Vec<String>>) -> usize {
    acked.borrow().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_stream_loses_no_acknowledged_message_and_qos2_stays_exactly_once() {
    let nats = NatsServer::start().await;
    let b = node(&nats, "b", "[mqtt]\nsys_interval = 0").await;
    // c's queues hold 16 messages, of which a replay fills 8 at most (the rest is left to live
    // messages): a replay of dozens per session, past the in-flight window of 20, must give its
    // messages as the clients take them, not drop what does not fit at once.
    let c = node(&nats, "c", "[mqtt]\nsys_interval = 0\n[limits]\nmax_queued_messages = 16").await;
    let dir = tempfile::tempdir().unwrap();
    let config = daemon::cluster_node_config(dir.path(), "a", &nats.url, "[mqtt]\nsys_interval = 0", "");
    let mut a = Daemon::start(&config, &["mqtt"]).await;
    let on_a = a.addr("mqtt");

    let (s5, s3) = subscribers_on(on_a, b.addr).await;
    // a's records hold the subscriptions.
    for id in ["s5", "s3"] {
        within("a's record", async {
            while cluster(&b).session_record(id).await.unwrap().is_none_or(|r| r.subscriptions.len() != 1) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }

    // The stream from b, read on a by both subscribers, until a is killed in its middle.
    let (acked_tx, mut acked) = watch::channel(Vec::new());
    let (killed_tx, killed) = watch::channel(false);
    let publisher =
        tokio::spawn(publish_streams(Raw::connected(b.addr, V5, "publisher").await, acked_tx, killed));
    let on_a5 = tokio::spawn(until_node_gone(s5, Received::default()));
    let on_a3 = tokio::spawn(until_node_gone(s3, Received::default()));
    within("the stream's first acknowledgements", acked.wait_for(|all| all.len() >= KILL_AFTER))
        .await
        .unwrap();
    a.child.kill().await.expect("SIGKILL");
    let acked_at_kill = acked.borrow().len();
    killed_tx.send_replace(true);
    let mut r5 = tokio::time::timeout(LONG, on_a5).await.expect("s5's connection to a closes").unwrap();
    let mut r3 = tokio::time::timeout(LONG, on_a3).await.expect("s3's connection to a closes").unwrap();
    let given_on_a = (r5.given.len(), r3.given.len());
    // Messages acknowledged while the sessions have no node: in the stream only.
    const WHILE_NOWHERE: usize = 100;
    within(
        "acknowledgements while the sessions have no node",
        acked.wait_for(|all| all.len() >= acked_at_kill + 2 + WHILE_NOWHERE),
    )
    .await
    .unwrap();

    // Both resume on c with clean start 0 while b goes on publishing: session present, no
    // SUBSCRIBE, and every acknowledged message comes, QoS 2 ones once.
    let (mut s5, mut s3) = resume_on(c.addr).await;
    let acked_at_resume = acked.borrow().len();
    read_the_rest(&c, &acked, &publisher, (&mut s5, &mut r5), (&mut s3, &mut r3)).await;
    publisher.await.expect("the publisher got every acknowledgement");
    // The replays have ended; nothing more is on its way.
    replays_ended(&c, 2, [(&mut s5, &mut r5), (&mut s3, &mut r3)]).await;

    let stats = cluster(&c).stats();
    let replayed = stats.replayed.load(Ordering::Relaxed);
    let skipped = stats.replay_skipped.load(Ordering::Relaxed);
    let duplicates3: usize = r3.given.values().map(|n| n - 1).sum();
    println!(
        "acknowledged {} ({acked_at_kill} at the kill, {acked_at_resume} at the resume); given on a: {given_on_a:?}; \
         replayed {replayed}, skipped {skipped}; QoS 1 duplicates {duplicates3}; DUP packets {} and {}",
        acked.borrow().len(),
        r5.dups,
        r3.dups
    );
    every_message_once(&r5, &r3);
    assert!(acked_at_kill <= KILL_AFTER + KILL_WITHIN, "a was killed in the middle of the stream");
    assert_eq!(stats.sessions_recovered.load(Ordering::Relaxed), 2);
    // Those came from the stream (the two around the kill may have reached a's copies).
    assert!(replayed as usize >= WHILE_NOWHERE, "replayed {replayed}");
    no_replay_failed(stats);
}

/// Reads both subscribers (s5, s3) until the publisher is done and each has every message it
/// acknowledged on its topic.
async fn read_the_rest(
    node: &common::TestServer,
    acked: &watch::Receiver<Vec<String>>,
    publisher: &tokio::task::JoinHandle<()>,
    (s5, r5): (&mut Raw, &mut Received),
    (s3, r3): (&mut Raw, &mut Received),
) {
    let read_all = async {
        loop {
            let all = acked.borrow().clone();
            let (want5, want3): (Vec<String>, Vec<String>) =
                all.into_iter().partition(|p| p.starts_with('d'));
            // Done once the publisher is (a publisher that failed is reported below).
            let complete = all_len(acked) == 2 * STREAM;
            if publisher.is_finished() && (!complete || (r5.has_all(&want5) && r3.has_all(&want3))) {
                return;
            }
            // Either subscriber's next packet (reading is cancel-safe: what was read stays in
            // the connection's buffer), or a look at the publisher's progress again.
            let next = tokio::select! {
                next = s5.recv() => Some((true, next)),
                next = s3.recv() => Some((false, next)),
                () = tokio::time::sleep(Duration::from_millis(50)) => None,
            };
            match next {
                Some((true, next)) => assert!(r5.on(s5, next).await, "s5's new connection closed"),
                Some((false, next)) => assert!(r3.on(s3, next).await, "s3's new connection closed"),
                None => {}
            }
        }
    };
    if tokio::time::timeout(LONG, read_all).await.is_err() {
        let all = acked.borrow().clone();
        let missing: Vec<&String> =
            all.iter().filter(|p| !r5.given.contains_key(*p) && !r3.given.contains_key(*p)).collect();
        // What the node holds for the sessions (online, queued, in flight and queued, dropped at
        // the queue limits), to tell a message lost from one held back.
        let held: Vec<_> = ["s5", "s3"]
            .into_iter()
            .filter_map(|id| node.broker().session(&mesgd_core::model::SessionKey::mqtt(id)))
            .map(|s| {
                (
                    s.client_id().clone(),
                    s.is_online(),
                    s.queue_len(),
                    s.handover_entries().0.len(),
                    s.dropped(),
                )
            })
            .collect();
        panic!(
            "timed out; acknowledged but never received: {missing:?}; sessions: \
             {held:?}; {:?}",
            cluster(node).stats()
        );
    }
}

/// Waits until `node` has ended `replays` replays, then takes what is still on its way to the
/// subscribers.
async fn replays_ended(node: &common::TestServer, replays: u64, subscribers: [(&mut Raw, &mut Received); 2]) {
    within("the replays to end", async {
        while cluster(node).stats().replays.load(Ordering::Relaxed) < replays {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    for (raw, r) in subscribers {
        for p in nothing_more(raw).await {
            assert!(r.on(raw, Some(p)).await);
        }
    }
}

/// Every message of both streams reached its subscriber, each QoS 2 one exactly once.
fn every_message_once(r5: &Received, r3: &Received) {
    let expected = |topic: &str| (1..=STREAM).map(|i| format!("{topic}-{i}")).collect::<BTreeSet<_>>();
    assert_eq!(r5.given.keys().cloned().collect::<BTreeSet<_>>(), expected("d"), "every QoS 2 message");
    assert_eq!(r3.given.keys().cloned().collect::<BTreeSet<_>>(), expected("e"), "every QoS 1 message");
    let twice: Vec<_> = r5.given.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "QoS 2 messages given more than once: {twice:?}");
}

fn no_replay_failed(stats: &mesgd_cluster::ClusterStats) {
    assert_eq!(
        stats.replay_errors.load(Ordering::Relaxed)
            + stats.replay_truncated.load(Ordering::Relaxed)
            + stats.replay_dropped.load(Ordering::Relaxed),
        0
    );
}

/// s5 (MQTT 5, clean start 0, receive maximum 20, d/# at QoS 2) and s3 (3.1.1, clean session 0,
/// e/# at QoS 1) on the node at `addr`, once they receive `publisher_node`'s messages (QoS 0
/// probes).
async fn subscribers_on(addr: std::net::SocketAddr, publisher_node: std::net::SocketAddr) -> (Raw, Raw) {
    let mut s5 = Raw::open(addr, V5).await;
    s5.send(&persistent_v5("s5", 20)).await;
    assert!(matches!(s5.recv().await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success));
    s5.send(&subscribe_packet(1, "d/#", 2, true)).await;
    assert!(matches!(s5.recv().await, Some(Packet::SubAck(_))));
    let (mut s3, _) = connect_persistent(addr, V311, "s3").await;
    s3.send(&subscribe_packet(1, "e/#", 1, false)).await;
    assert!(matches!(s3.recv().await, Some(Packet::SubAck(_))));
    let mut prober = Raw::connected(publisher_node, V5, "prober").await;
    for (raw, topic) in [(&mut s5, "d/probe"), (&mut s3, "e/probe")] {
        within("the subscribers to receive the publisher node's messages", async {
            loop {
                prober.send(&publish_packet(topic, 0, None, false, Some(&[]), b"probe")).await;
                match tokio::time::timeout(Duration::from_millis(200), raw.recv()).await {
                    Ok(Some(Packet::Publish(p))) if &p.payload[..] == b"probe" => return,
                    Ok(other) => panic!("expected the probe, got {other:?}"),
                    Err(_) => {}
                }
            }
        })
        .await;
    }
    (s5, s3)
}

/// s5 and s3 connect to the node at `addr` with clean start 0, and their sessions are there
/// (CONNACK session present).
async fn resume_on(addr: std::net::SocketAddr) -> (Raw, Raw) {
    let mut s5 = Raw::open(addr, V5).await;
    s5.send(&persistent_v5("s5", 20)).await;
    match s5.recv().await {
        Some(Packet::ConnAck(c)) => {
            assert!(c.reason_code == ReasonCode::Success && c.session_present, "{c:?}")
        }
        other => panic!("expected CONNACK, got {other:?}"),
    }
    let (s3, present) = connect_persistent(addr, V311, "s3").await;
    assert!(present, "s3's session is there");
    (s5, s3)
}

/// Both sessions move from a live node (a) to another (b) with clean start 0 in the middle of
/// the stream from a third (c): b's takeover asks a, which closes the connections and hands the
/// sessions over; what reached a's copy after that, or no node before b's subscriptions were in
/// place, comes to b from the stream (a replay from the checkpoint a handed over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_taken_over_from_a_live_node_mid_stream_miss_no_acknowledged_message() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "[mqtt]\nsys_interval = 0").await;
    let b = node(&nats, "b", "[mqtt]\nsys_interval = 0").await;
    let c = node(&nats, "c", "[mqtt]\nsys_interval = 0").await;
    let (s5, s3) = subscribers_on(a.addr, c.addr).await;

    let (acked_tx, mut acked) = watch::channel(Vec::new());
    let (moved_tx, moved) = watch::channel(false);
    let publisher =
        tokio::spawn(publish_streams(Raw::connected(c.addr, V5, "publisher").await, acked_tx, moved));
    let on_a5 = tokio::spawn(until_node_gone(s5, Received::default()));
    let on_a3 = tokio::spawn(until_node_gone(s3, Received::default()));
    within("the stream's first acknowledgements", acked.wait_for(|all| all.len() >= KILL_AFTER))
        .await
        .unwrap();
    // Both move to b while the stream goes on: session present, no SUBSCRIBE.
    let (mut s5, mut s3) = resume_on(b.addr).await;
    let acked_at_move = acked.borrow().len();
    moved_tx.send_replace(true);
    let mut r5 = within("s5's connection to a closes", on_a5).await.unwrap();
    let mut r3 = within("s3's connection to a closes", on_a3).await.unwrap();
    let given_on_a = (r5.given.len(), r3.given.len());
    read_the_rest(&b, &acked, &publisher, (&mut s5, &mut r5), (&mut s3, &mut r3)).await;
    publisher.await.expect("the publisher got every acknowledgement");
    replays_ended(&b, 2, [(&mut s5, &mut r5), (&mut s3, &mut r3)]).await;

    let stats = cluster(&b).stats();
    println!(
        "acknowledged {} ({acked_at_move} at the move); given on a: {given_on_a:?}; replayed {}, skipped {}; \
         QoS 1 duplicates {}",
        acked.borrow().len(),
        stats.replayed.load(Ordering::Relaxed),
        stats.replay_skipped.load(Ordering::Relaxed),
        r3.given.values().map(|n| n - 1).sum::<usize>(),
    );
    every_message_once(&r5, &r3);
    assert!(acked_at_move <= KILL_AFTER + KILL_WITHIN, "the sessions moved in the middle of the stream");
    assert_eq!(stats.registry_sessions_received.load(Ordering::Relaxed), 2, "both handed over live");
    assert_eq!(stats.sessions_recovered.load(Ordering::Relaxed), 0, "none from a record");
    no_replay_failed(stats);
}
