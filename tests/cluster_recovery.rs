//! Persistent sessions of a node that dies resume on another node: a real `mesgd` process as
//! node a, killed with SIGKILL while its clients have messages in flight; in-process nodes b
//! and c over a real nats-server. Also: a stale write of a node that lost the client id does
//! not overwrite the new owner's record, and a record too large is refused and counted.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use common::nats::{NatsServer, cluster, node, synced};
use common::packets::{packet, publish_packet, subscribe_packet};
use common::persistent::{connect_persistent, persistent_v5, publish_acked};
use common::{Raw, TestServer, within};
use daemon::Daemon;
use mesgd_core::mqtt::{Packet, ProtocolVersion, QoS, ReasonCode};

const V5: ProtocolVersion = ProtocolVersion::V5;
const V311: ProtocolVersion = ProtocolVersion::V311;
const PUBACK: u8 = 0x40;
const PUBREC: u8 = 0x50;
const PUBREL: u8 = 0x62;
const PUBCOMP: u8 = 0x70;

fn ack(kind: u8, packet_id: u16) -> Vec<u8> {
    packet(kind, &packet_id.to_be_bytes())
}

fn counter(
    server: &TestServer,
    pick: impl Fn(&mesgd_cluster::ClusterStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    pick(cluster(server).stats()).load(Ordering::Relaxed)
}

async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    within(what, async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// The record of `client_id` once node `node` has written it.
async fn record_written_by(server: &TestServer, client_id: &str, node: &str) -> mesgd_cluster::SessionRecord {
    within("the node's record", async {
        loop {
            match cluster(server).session_record(client_id).await.unwrap() {
                Some(r) if r.node == node => return r,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
}

/// Connects `client_id` persistently (MQTT 5, receive maximum `receive_max`).
async fn connect_v5(addr: std::net::SocketAddr, client_id: &str, receive_max: u16) -> (Raw, bool) {
    let mut raw = Raw::open(addr, V5).await;
    raw.send(&persistent_v5(client_id, receive_max)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success => (raw, c.session_present),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

async fn subscribed(raw: &mut Raw, filter: &str, qos: u8) {
    let v5 = raw.version == V5;
    raw.send(&subscribe_packet(1, filter, qos, v5)).await;
    assert!(matches!(raw.recv().await, Some(Packet::SubAck(_))));
}

/// Publishes QoS 0 probes on `topic` from `publisher` until `subscriber` receives one: the
/// subscriber's node then has its NATS subscription in place.
async fn probe(publisher: &mut Raw, subscriber: &mut Raw, topic: &str) {
    within("the subscriber's node to receive other nodes' messages", async {
        loop {
            publisher.send(&publish_packet(topic, 0, None, false, Some(&[]), b"probe")).await;
            match tokio::time::timeout(Duration::from_millis(200), subscriber.recv()).await {
                Ok(Some(Packet::Publish(p))) if &p.payload[..] == b"probe" => return,
                Ok(other) => panic!("expected the probe, got {other:?}"),
                Err(_) => {}
            }
        }
    })
    .await;
}

/// Waiting until `subscriber`'s node receives other nodes' messages while reading its other
/// packets: until one comes back, each call sends a QoS 0 probe on `probe_topic` from
/// `publisher`; the first probe back has `then` (topic, QoS, payload) published once, with
/// packet id `pid` + 1. Returns the next packet that is not a probe, `None` for none yet.
async fn next_beside_probes(
    publisher: &mut Raw,
    subscriber: &mut Raw,
    probe_topic: &str,
    probed: &mut bool,
    pid: &mut u16,
    (topic, qos, payload): (&str, u8, &[u8]),
) -> Option<Option<Packet>> {
    if !*probed {
        publisher.send(&publish_packet(probe_topic, 0, None, false, Some(&[]), b"probe")).await;
    }
    let next = tokio::time::timeout(Duration::from_millis(200), subscriber.recv()).await.ok()?;
    if let Some(Packet::Publish(p)) = &next {
        if &p.payload[..] == b"probe" {
            if !*probed {
                *probed = true;
                *pid += 1;
                publish_acked(publisher, topic, qos, *pid, false, payload).await;
            }
            return None;
        }
    }
    Some(next)
}

/// What a subscriber saw: each payload's PUBLISH packets (packet id, DUP) in arrival order.
type Seen = BTreeMap<String, Vec<(u16, bool)>>;

fn saw(seen: &mut Seen, p: &mesgd_core::mqtt::Publish) {
    let payload = String::from_utf8(p.payload.to_vec()).unwrap();
    seen.entry(payload).or_default().push((p.packet_id.unwrap_or(0), p.dup));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_of_a_killed_node_resume_elsewhere_with_their_in_flight_messages() {
    let nats = NatsServer::start().await;
    let b = node(&nats, "b", "").await;
    let c = node(&nats, "c", "").await;
    let dir = tempfile::tempdir().unwrap();
    let tables = "[limits]\nmax_inflight = 3\n[mqtt]\nsys_interval = 0";
    let config = daemon::cluster_node_config(dir.path(), "a", &nats.url, tables, "");
    let mut a = Daemon::start(&config, &["mqtt"]).await;
    let on_a = a.addr("mqtt");

    // A watcher on c of what s5 publishes at QoS 2.
    let mut watcher = Raw::connected(c.addr, V5, "watcher").await;
    subscribed(&mut watcher, "x/in", 0).await;
    synced(&c).await;
    // On a: s5 (MQTT 5, receive maximum 3, d/# at QoS 2), s3 (3.1.1, e/# at QoS 1; a's
    // max_inflight is 3), and two sessions whose records are spoilt below.
    let (mut s5, _) = connect_v5(on_a, "s5", 3).await;
    subscribed(&mut s5, "d/#", 2).await;
    let (mut s3, _) = connect_persistent(on_a, V311, "s3").await;
    subscribed(&mut s3, "e/#", 1).await;
    for id in ["bad", "big"] {
        let (mut raw, _) = connect_v5(on_a, id, 3).await;
        subscribed(&mut raw, "z/#", 1).await;
    }
    let mut publisher = Raw::connected(b.addr, V5, "publisher").await;
    probe(&mut publisher, &mut s5, "d/probe").await;
    probe(&mut publisher, &mut s3, "e/probe").await;

    // The stream: d/1..d/8 alternating QoS 1 and 2, e/1..e/6 at QoS 1, each acknowledged to
    // the publisher (stored in the durable stream).
    let mut pid = 0;
    for i in 1..=8u16 {
        pid += 1;
        publish_acked(
            &mut publisher,
            &format!("d/{i}"),
            if i % 2 == 1 { 1 } else { 2 },
            pid,
            false,
            format!("d-{i}").as_bytes(),
        )
        .await;
    }
    for i in 1..=6u16 {
        pid += 1;
        publish_acked(&mut publisher, &format!("e/{i}"), 1, pid, false, format!("e-{i}").as_bytes()).await;
    }

    // s5 completes d-1..d-4, then leaves d-5 and d-7 (QoS 1) unacknowledged and d-6 (QoS 2)
    // PUBREC'd but not completed: three in flight, d-8 queued behind them.
    let mut seen5 = Seen::new();
    let mut ids5: BTreeMap<u16, String> = BTreeMap::new();
    let (mut completed, mut released6) = (0, false);
    while seen5.len() < 7 || completed < 4 || !released6 {
        match s5.recv().await {
            Some(Packet::Publish(p)) => {
                saw(&mut seen5, &p);
                let (payload, id) = (String::from_utf8(p.payload.to_vec()).unwrap(), p.packet_id.unwrap());
                ids5.insert(id, payload.clone());
                match (payload.as_str(), p.qos) {
                    ("d-1" | "d-3", _) => {
                        s5.send(&ack(PUBACK, id)).await;
                        completed += 1;
                    }
                    ("d-2" | "d-4" | "d-6", QoS::ExactlyOnce) => s5.send(&ack(PUBREC, id)).await,
                    ("d-5" | "d-7", QoS::AtLeastOnce) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            Some(Packet::PubRel(r)) if ids5[&r.packet_id] == "d-6" => released6 = true,
            Some(Packet::PubRel(r)) => {
                s5.send(&ack(PUBCOMP, r.packet_id)).await;
                completed += 1;
            }
            other => panic!("expected a PUBLISH or PUBREL, got {other:?}"),
        }
    }
    let pid_of = |ids: &BTreeMap<u16, String>, payload: &str| {
        *ids.iter().find(|(_, p)| *p == payload).expect("seen").0
    };
    // And s5 publishes at QoS 2 itself without releasing: packet id 77 awaits PUBREL.
    s5.send(&publish_packet("x/in", 2, Some(77), false, Some(&[]), b"once")).await;
    assert!(matches!(s5.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 77));
    // s3 completes e-1 and e-2; e-3..e-5 stay in flight, e-6 queued.
    let mut seen3 = Seen::new();
    let mut ids3: BTreeMap<u16, String> = BTreeMap::new();
    while seen3.len() < 5 {
        match s3.recv().await {
            Some(Packet::Publish(p)) => {
                saw(&mut seen3, &p);
                let (payload, id) = (String::from_utf8(p.payload.to_vec()).unwrap(), p.packet_id.unwrap());
                ids3.insert(id, payload.clone());
                if payload == "e-1" || payload == "e-2" {
                    s3.send(&ack(PUBACK, id)).await;
                }
            }
            other => panic!("expected a PUBLISH, got {other:?}"),
        }
    }
    let watched = watcher.recv().await;
    assert!(matches!(&watched, Some(Packet::Publish(p)) if &p.payload[..] == b"once"), "{watched:?}");

    // The records in the cluster hold that state (written within the write delay; d-6's
    // release and the id 77 before their packets left).
    let state = |r: &mesgd_cluster::SessionRecord| {
        r.messages.iter().map(|m| (B64.decode(&m.payload).unwrap(), m.state)).collect::<Vec<_>>()
    };
    eventually("a's records to hold the in-flight state", || async {
        let r5 = cluster(&b).session_record("s5").await.unwrap();
        let r3 = cluster(&b).session_record("s3").await.unwrap();
        let (Some(r5), Some(r3)) = (r5, r3) else { return false };
        state(&r5)
            == [
                (b"d-5".to_vec(), Some(1)),
                (b"d-6".to_vec(), Some(3)),
                (b"d-7".to_vec(), Some(1)),
                (b"d-8".to_vec(), None),
            ]
            && r5.incoming_qos2.iter().map(|q| q.packet_id).collect::<Vec<_>>() == [77]
            && state(&r3)
                == [
                    (b"e-3".to_vec(), Some(1)),
                    (b"e-4".to_vec(), Some(1)),
                    (b"e-5".to_vec(), Some(1)),
                    (b"e-6".to_vec(), None),
                ]
    })
    .await;

    a.child.kill().await.expect("SIGKILL");
    s5.until_closed().await;
    s3.until_closed().await;

    // Two records spoilt while their node is gone: not JSON, and longer than the limit.
    assert!(cluster(&b).write_session_record("bad", b"{not json".to_vec(), u64::MAX).await.unwrap());
    assert!(cluster(&b).write_session_record("big", vec![b' '; 600 * 1024], u64::MAX).await.unwrap());
    for id in ["bad", "big"] {
        let (_raw, present) = connect_v5(c.addr, id, 3).await;
        assert!(!present, "{id}: an unreadable record starts a fresh session");
    }
    assert_eq!(counter(&c, |s| &s.session_records_unreadable), 2);

    // s5 on c: its session, with what was in flight resent in order: d-5 again (DUP, same id),
    // PUBREL for d-6 (never the message again), d-7 again; then d-8.
    let (mut s5, present) = connect_v5(c.addr, "s5", 3).await;
    assert!(present, "the session of the dead node resumed");
    let expect_publish = |p: Option<Packet>, payload: &str, id: u16| match p {
        Some(Packet::Publish(p)) => {
            assert_eq!((&p.payload[..], p.packet_id, p.dup), (payload.as_bytes(), Some(id), true));
            p
        }
        other => panic!("expected {payload} again, got {other:?}"),
    };
    let p = expect_publish(s5.recv().await, "d-5", pid_of(&ids5, "d-5"));
    saw(&mut seen5, &p);
    assert!(matches!(s5.recv().await, Some(Packet::PubRel(r)) if r.packet_id == pid_of(&ids5, "d-6")));
    let p = expect_publish(s5.recv().await, "d-7", pid_of(&ids5, "d-7"));
    saw(&mut seen5, &p);
    s5.send(&ack(PUBACK, pid_of(&ids5, "d-5"))).await;
    s5.send(&ack(PUBCOMP, pid_of(&ids5, "d-6"))).await;
    s5.send(&ack(PUBACK, pid_of(&ids5, "d-7"))).await;
    // Its own QoS 2 message: the retransmission is recognised (PUBREC, not routed again).
    let mut dup = publish_packet("x/in", 2, Some(77), false, Some(&[]), b"once");
    dup[0] |= 0x08;
    s5.send(&dup).await;
    // The subscriptions hold without subscribing again: once b's QoS 0 probes on d/probe
    // reach s5 on c (c's NATS subscription in place), d-9 from b does too.
    let (mut got77, mut done, mut probed) = (false, Vec::new(), false);
    within("d-8, d-9 and the release of 77 on c", async {
        while done.len() < 2 || !got77 {
            let Some(next) = next_beside_probes(
                &mut publisher,
                &mut s5,
                "d/probe",
                &mut probed,
                &mut pid,
                ("d/9", 2, b"d-9"),
            )
            .await
            else {
                continue;
            };
            match next {
                Some(Packet::Publish(p)) => {
                    assert!(!p.dup, "{p:?}");
                    saw(&mut seen5, &p);
                    s5.send(&ack(PUBREC, p.packet_id.unwrap())).await;
                }
                Some(Packet::PubRel(r)) => {
                    s5.send(&ack(PUBCOMP, r.packet_id)).await;
                    done.push(r.packet_id);
                }
                Some(Packet::PubRec(r)) if r.packet_id == 77 => s5.send(&ack(PUBREL, 77)).await,
                Some(Packet::PubComp(r)) if r.packet_id == 77 => {
                    assert_eq!(r.reason_code, ReasonCode::Success);
                    got77 = true;
                }
                other => panic!("expected d-8, d-9 and PUBREC 77, got {other:?}"),
            }
        }
    })
    .await;

    // s3 (3.1.1) on c: e-3..e-5 again with DUP and their ids, then e-6, then e-7 published now.
    let (mut s3, present) = connect_persistent(c.addr, V311, "s3").await;
    assert!(present);
    for payload in ["e-3", "e-4", "e-5"] {
        let p = expect_publish(s3.recv().await, payload, pid_of(&ids3, payload));
        saw(&mut seen3, &p);
        s3.send(&ack(PUBACK, p.packet_id.unwrap())).await;
    }
    // Then e-6 (queued), and e-7 once b's probes on e/probe reach s3 on c.
    let mut probed = false;
    within("e-6 and e-7 on c", async {
        while !(seen3.contains_key("e-6") && seen3.contains_key("e-7")) {
            let Some(next) = next_beside_probes(
                &mut publisher,
                &mut s3,
                "e/probe",
                &mut probed,
                &mut pid,
                ("e/7", 1, b"e-7"),
            )
            .await
            else {
                continue;
            };
            match next {
                Some(Packet::Publish(p)) if !p.dup => {
                    saw(&mut seen3, &p);
                    s3.send(&ack(PUBACK, p.packet_id.unwrap())).await;
                }
                other => panic!("expected e-6 and e-7, got {other:?}"),
            }
        }
    })
    .await;
    // Every acknowledged message was received; QoS 2 ones exactly once; the QoS 1 duplicates
    // are exactly the messages in flight, unacknowledged, when a died (at most the receive
    // maximum per session).
    let all5: Vec<String> = (1..=9).map(|i| format!("d-{i}")).collect();
    assert_eq!(seen5.keys().cloned().collect::<Vec<_>>(), {
        let mut sorted = all5.clone();
        sorted.sort();
        sorted
    });
    for (payload, copies) in &seen5 {
        let i: u32 = payload[2..].parse().unwrap();
        let expected = if i == 5 || i == 7 { 2 } else { 1 };
        assert_eq!(copies.len(), expected, "{payload}: {copies:?}");
    }
    for (payload, copies) in &seen3 {
        let expected = if ["e-3", "e-4", "e-5"].contains(&payload.as_str()) { 2 } else { 1 };
        assert_eq!(copies.len(), expected, "{payload}: {copies:?}");
    }
    assert_eq!(seen3.len(), 7);
    // s5's own QoS 2 message reached the watcher once.
    let mut marker = Raw::connected(c.addr, V5, "marker").await;
    marker.send(&publish_packet("x/in", 0, None, false, Some(&[]), b"end")).await;
    match watcher.recv().await {
        Some(Packet::Publish(p)) => assert_eq!(&p.payload[..], b"end", "the QoS 2 message was routed once"),
        other => panic!("expected the marker, got {other:?}"),
    }
    assert_eq!(counter(&c, |s| &s.sessions_recovered), 2);
    // The four previous-owner requests to a found no one (or, had the server not yet seen a's
    // connection drop, no answer).
    assert_eq!(counter(&c, |s| &s.registry_owner_gone) + counter(&c, |s| &s.registry_takeover_timeouts), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_write_of_a_node_that_lost_the_client_id_does_not_overwrite_the_new_owners_record() {
    let nats = NatsServer::start().await;
    let b = node(&nats, "b", "").await;
    let c = node(&nats, "c", "").await;
    let (mut on_b, _) = connect_v5(b.addr, "f", 3).await;
    subscribed(&mut on_b, "f/#", 1).await;
    let old = record_written_by(&b, "f", "b").await;
    // The client moves to c (b alive: a live takeover); c writes its own record.
    let (_on_c, present) = connect_v5(c.addr, "f", 3).await;
    assert!(present);
    let new = record_written_by(&c, "f", "c").await;
    assert!(new.registry_revision > old.registry_revision);
    // b writes what it had, as holder of its older claim: refused.
    let stale = mesgd_cluster::SessionRecord { written_ms: new.written_ms + 1, ..old.clone() };
    assert!(!cluster(&b).write_session_record("f", stale.encode(), old.registry_revision).await.unwrap());
    assert_eq!(counter(&b, |s| &s.sessions_fenced), 1);
    let stored = cluster(&c).session_record("f").await.unwrap().expect("a record");
    assert_eq!((stored.node.as_str(), stored.registry_revision), ("c", new.registry_revision));
    // The new owner's next write goes through.
    assert!(cluster(&c).write_session_record("f", new.encode(), new.registry_revision).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_record_is_too_large_is_not_copied_and_is_counted() {
    let nats = NatsServer::start().await;
    let b = node(&nats, "b", "").await;
    let (mut raw, _) = connect_v5(b.addr, "huge", 3).await;
    subscribed(&mut raw, "h/#", 1).await;
    eventually("the record", || async { cluster(&b).session_record("huge").await.unwrap().is_some() }).await;
    raw.send(&packet(0xE0, &[0])).await; // DISCONNECT, the session stays
    raw.until_closed().await;
    // Five 120 KB messages queued for it: the record would be past 512 KiB in base64.
    let mut publisher = Raw::connected(b.addr, V5, "publisher").await;
    for id in 1..=5 {
        publish_acked(&mut publisher, "h/x", 1, id, false, &vec![b'x'; 120_000]).await;
    }
    eventually("the session to be refused", || async { counter(&b, |s| &s.sessions_too_large) >= 1 }).await;
    eventually("its older record to be deleted", || async {
        cluster(&b).session_record("huge").await.unwrap().is_none()
    })
    .await;
    // The node goes on: the session is still there for its client.
    let (_raw, present) = connect_v5(b.addr, "huge", 3).await;
    assert!(present);
}
