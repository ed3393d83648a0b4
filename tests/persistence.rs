//! Durable state across restarts of the real binary: SIGKILL under durability `always`, SIGTERM
//! in every mode, QoS 2 exactly once in both directions across a crash, retained messages,
//! subscriptions and expiry, a crash loop, and `mesgd store stats`.
//!
//! Clients here are raw sockets speaking hand-assembled MQTT 3.1.1 (and 5.0 where the session
//! expiry interval matters), so every acknowledgement is explicit: a message counts as
//! acknowledged by the broker exactly when its PUBACK / PUBCOMP arrived.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::persistent::{
    connect_persistent, nothing_more, publish, publish_acked, receive, subscribe, subscribe_persistent,
};
use common::{Raw, mqtt_str, packet, within};
use daemon::Daemon;
use mesgd_core::mqtt::{Packet, ProtocolVersion};

const V3: ProtocolVersion = ProtocolVersion::V311;
const V5: ProtocolVersion = ProtocolVersion::V5;

fn config(dir: &Path, durability: &str) -> std::path::PathBuf {
    let path = dir.join("mesgd.toml");
    std::fs::write(
        &path,
        format!(
            "[storage]\ndir = \"data\"\ndurability = \"{durability}\"\nflush_interval_ms = 20\n\
             [[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
             [auth]\nallow_anonymous = true\n[mqtt]\nsys_interval = 0\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn acknowledged_messages_survive_sigkill_under_always() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "always");
    let mut d = Daemon::start(&cfg, &["mqtt"]).await;
    let addr = d.addr("mqtt");
    subscribe_persistent(addr, V3, "keeper-311", "d/#", 2).await;
    subscribe_persistent(addr, V5, "keeper-5", "d/#", 2).await;

    let mut publisher = Raw::connected(addr, V3, "publisher").await;
    for i in 0..20u16 {
        let qos = if i % 2 == 0 { 1 } else { 2 };
        publish_acked(&mut publisher, "d/x", qos, i + 1, false, format!("m{i:02}").as_bytes()).await;
    }
    publish_acked(&mut publisher, "kept/a", 1, 100, true, b"retained").await;
    d.signal("KILL").await;
    d.wait().await;

    let d = Daemon::start(&cfg, &["mqtt"]).await;
    let addr = d.addr("mqtt");
    for (version, id) in [(V3, "keeper-311"), (V5, "keeper-5")] {
        let (mut raw, present) = connect_persistent(addr, version, id).await;
        assert!(present, "{id}: session survived");
        let got = receive(&mut raw, 20).await;
        let expected: Vec<Vec<u8>> = (0..20).map(|i| format!("m{i:02}").into_bytes()).collect();
        // In order; QoS 2 ones exactly once; QoS 1 ones at least once (never reordered).
        let mut firsts: Vec<Vec<u8>> = Vec::new();
        for p in &got {
            if !firsts.contains(p) {
                firsts.push(p.clone());
            }
        }
        assert_eq!(firsts, expected, "{id}: all acknowledged messages, in order");
        for i in (1..20).step_by(2) {
            let m = format!("m{i:02}").into_bytes();
            assert_eq!(got.iter().filter(|p| **p == m).count(), 1, "{id}: QoS 2 {i} exactly once");
        }
        let extra = nothing_more(&mut raw).await;
        assert!(extra.is_empty(), "{id}: nothing else queued, got {extra:?}");
    }
    // The subscription itself survived: a new message reaches the session without resubscribing.
    let mut publisher = Raw::connected(addr, V3, "publisher").await;
    publish_acked(&mut publisher, "d/y", 1, 1, false, b"after").await;
    let (mut raw, _) = connect_persistent(addr, V3, "keeper-311").await;
    assert_eq!(receive(&mut raw, 1).await, [b"after".to_vec()]);
    // And the retained message.
    let mut fresh = Raw::connected(addr, V3, "fresh").await;
    fresh.send(&subscribe(1, "kept/#", 1, false)).await;
    assert!(matches!(fresh.recv().await, Some(Packet::SubAck(_))));
    match fresh.recv().await {
        Some(Packet::Publish(p)) => assert!(p.retain && &p.payload[..] == b"retained"),
        other => panic!("expected the retained message, got {other:?}"),
    }
}

#[tokio::test]
async fn sigterm_keeps_state_in_always_and_periodic_and_none_forgets() {
    for durability in ["always", "periodic", "none"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), durability);
        let mut d = Daemon::start(&cfg, &["mqtt"]).await;
        let addr = d.addr("mqtt");
        subscribe_persistent(addr, V3, "keeper", "t/#", 1).await;
        let mut publisher = Raw::connected(addr, V3, "publisher").await;
        for i in 0..5u16 {
            publish_acked(&mut publisher, "t/x", 1, i + 1, false, format!("p{i}").as_bytes()).await;
        }
        publish_acked(&mut publisher, "t/r", 1, 9, true, b"retained").await;
        d.signal("TERM").await;
        assert!(d.wait().await.success());

        let d = Daemon::start(&cfg, &["mqtt"]).await;
        let (mut raw, present) = connect_persistent(d.addr("mqtt"), V3, "keeper").await;
        if durability == "none" {
            assert!(!present, "none: nothing survives a restart");
            assert!(nothing_more(&mut raw).await.is_empty());
            continue;
        }
        assert!(present, "{durability}: session survived");
        let got = receive(&mut raw, 5).await;
        assert_eq!(got, (0..5).map(|i| format!("p{i}").into_bytes()).collect::<Vec<_>>(), "{durability}");
        let mut fresh = Raw::connected(d.addr("mqtt"), V3, "fresh").await;
        fresh.send(&subscribe(1, "t/r", 1, false)).await;
        assert!(matches!(fresh.recv().await, Some(Packet::SubAck(_))));
        assert!(matches!(fresh.recv().await, Some(Packet::Publish(p)) if p.retain), "{durability}: retained");
    }
}

#[tokio::test]
async fn qos2_is_exactly_once_in_both_directions_across_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "always");
    let mut d = Daemon::start(&cfg, &["mqtt"]).await;
    let addr = d.addr("mqtt");
    subscribe_persistent(addr, V3, "receiver", "x/#", 2).await;

    // Inbound: PUBREC received (the broker has the message), PUBREL not yet sent.
    let (mut sender, _) = connect_persistent(addr, V3, "sender").await;
    sender.send(&publish("x/1", 2, 7, false, b"once", None)).await;
    assert!(matches!(sender.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 7));

    // Outbound: the receiver gets the PUBLISH and answers PUBREC, but never PUBCOMP.
    let (mut receiver, _) = connect_persistent(addr, V3, "receiver").await;
    let first_id = match receiver.recv().await {
        Some(Packet::Publish(p)) => {
            assert_eq!(&p.payload[..], b"once");
            p.packet_id.unwrap()
        }
        other => panic!("expected PUBLISH, got {other:?}"),
    };
    receiver.send(&packet(0x50, &first_id.to_be_bytes())).await;
    assert!(matches!(receiver.recv().await, Some(Packet::PubRel(r)) if r.packet_id == first_id));
    // Under `always` the PUBREL leaves only once the release is on disk, so killing the broker
    // now must bring back a PUBREL, never the PUBLISH again.
    assert!(nothing_more(&mut receiver).await.is_empty());
    d.signal("KILL").await;
    d.wait().await;
    drop((sender, receiver));

    let d = Daemon::start(&cfg, &["mqtt"]).await;
    let addr = d.addr("mqtt");
    // The sender retries the same packet id with DUP: the broker must not route it again.
    let (mut sender, present) = connect_persistent(addr, V3, "sender").await;
    assert!(present);
    let mut dup = publish("x/1", 2, 7, false, b"once", None);
    dup[0] |= 0x08;
    sender.send(&dup).await;
    assert!(matches!(sender.recv().await, Some(Packet::PubRec(r)) if r.packet_id == 7));
    sender.send(&packet(0x62, &7u16.to_be_bytes())).await;
    assert!(matches!(sender.recv().await, Some(Packet::PubComp(r)) if r.packet_id == 7));

    // The receiver is owed a PUBREL for the same id, and no second PUBLISH.
    let (mut receiver, present) = connect_persistent(addr, V3, "receiver").await;
    assert!(present);
    assert!(matches!(receiver.recv().await, Some(Packet::PubRel(r)) if r.packet_id == first_id));
    receiver.send(&packet(0x70, &first_id.to_be_bytes())).await;
    assert!(nothing_more(&mut receiver).await.is_empty(), "delivered exactly once");
}

#[tokio::test]
async fn expired_messages_and_sessions_are_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "always");
    let mut d = Daemon::start(&cfg, &["mqtt"]).await;
    let addr = d.addr("mqtt");
    // A 5.0 session that expires 1 s after its connection ends, and one that lasts.
    let mut short = Raw::open(addr, V5).await;
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x00, 0, 60, 5, 0x11, 0, 0, 0, 1]);
    body.extend_from_slice(&mqtt_str("short"));
    short.send(&packet(0x10, &body)).await;
    assert!(matches!(short.recv().await, Some(Packet::ConnAck(_))));
    short.send(&subscribe(1, "e/#", 1, true)).await;
    assert!(matches!(short.recv().await, Some(Packet::SubAck(_))));
    short.send(&packet(0xE0, &[])).await;
    short.until_closed().await;
    subscribe_persistent(addr, V5, "long", "e/#", 1).await;

    let mut publisher = Raw::connected(addr, V5, "publisher").await;
    // Message expiry 1 s (property 0x02), one lasting, and a retained message expiring in 1 s.
    let expiring = [0x02, 0, 0, 0, 1];
    publisher.send(&publish("e/1", 1, 1, false, b"brief", Some(&expiring))).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(_))));
    publish_acked(&mut publisher, "e/2", 1, 2, false, b"lasting").await;
    publisher.send(&publish("e/r", 1, 3, true, b"brief-retained", Some(&expiring))).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(_))));
    d.signal("TERM").await;
    d.wait().await;
    // Down for longer than every expiry above.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let d = Daemon::start(&cfg, &["mqtt"]).await;
    let addr = d.addr("mqtt");
    let (mut long, present) = connect_persistent(addr, V5, "long").await;
    assert!(present);
    assert_eq!(receive(&mut long, 1).await, [b"lasting".to_vec()], "the expired message was dropped");
    assert!(nothing_more(&mut long).await.is_empty());
    let (_, present) = connect_persistent(addr, V5, "short").await;
    assert!(!present, "the session expired while the broker was down");
    let mut fresh = Raw::connected(addr, V3, "fresh").await;
    fresh.send(&subscribe(1, "e/#", 1, false)).await;
    assert!(matches!(fresh.recv().await, Some(Packet::SubAck(_))));
    assert!(nothing_more(&mut fresh).await.is_empty(), "the expired retained message is gone");
}

#[tokio::test]
async fn a_crash_loop_loses_no_acknowledged_message() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "always");
    let mut d = Daemon::start(&cfg, &["mqtt"]).await;
    subscribe_persistent(d.addr("mqtt"), V3, "sink", "loop/#", 1).await;
    let mut acked: Vec<Vec<u8>> = Vec::new();
    let mut n = 0u32;
    for round in 0..4 {
        let mut publisher = Raw::connected(d.addr("mqtt"), V3, "pump").await;
        // Keep up to 16 publishes in flight and kill the broker in the middle of the stream.
        let mut in_flight = std::collections::VecDeque::new();
        for _ in 0..200 {
            n += 1;
            let id = (n % 60_000 + 1) as u16;
            let payload = format!("r{round}-{n}").into_bytes();
            publisher.send(&publish("loop/x", 1, id, false, &payload, None)).await;
            in_flight.push_back((id, payload));
            while in_flight.len() >= 16 {
                match publisher.recv().await {
                    Some(Packet::PubAck(a)) => {
                        let pos = in_flight.iter().position(|(id, _)| *id == a.packet_id).expect("known id");
                        acked.push(in_flight.remove(pos).unwrap().1);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        d.signal("KILL").await;
        d.wait().await;
        // Acks that were already on the wire count too.
        while let Some(p) = publisher.recv().await {
            if let Packet::PubAck(a) = p {
                if let Some(pos) = in_flight.iter().position(|(id, _)| *id == a.packet_id) {
                    acked.push(in_flight.remove(pos).unwrap().1);
                }
            }
        }
        d = Daemon::start(&cfg, &["mqtt"]).await;
    }
    let (mut sink, present) = connect_persistent(d.addr("mqtt"), V3, "sink").await;
    assert!(present);
    let expected: BTreeSet<Vec<u8>> = acked.iter().cloned().collect();
    let mut got = BTreeSet::new();
    within("every acknowledged message", async {
        while !expected.is_subset(&got) {
            for p in receive(&mut sink, 1).await {
                got.insert(p);
            }
        }
    })
    .await;
    assert!(acked.len() >= 4 * 184, "most publishes were acknowledged before each kill: {}", acked.len());
}

#[tokio::test]
async fn store_stats_and_compact() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "always");
    let mut d = Daemon::start(&cfg, &["mqtt"]).await;
    let addr = d.addr("mqtt");
    subscribe_persistent(addr, V3, "s1", "a/#", 1).await;
    let mut publisher = Raw::connected(addr, V3, "publisher").await;
    for i in 0..3u16 {
        publish_acked(&mut publisher, "a/b", 1, i + 1, false, b"queued").await;
    }
    publish_acked(&mut publisher, "a/r", 1, 9, true, b"retained").await;
    let (status, out, err) = daemon::run(&["--config", cfg.to_str().unwrap(), "store", "stats"], "").await;
    assert!(status.success(), "{err}");
    for expected in ["sessions\t1", "subscriptions\t1", "queued\t4", "retained\t1"] {
        assert!(out.contains(expected), "{expected} in {out}");
    }
    d.signal("TERM").await;
    d.wait().await;
    let (status, out, err) = daemon::run(&["--config", cfg.to_str().unwrap(), "store", "compact"], "").await;
    assert!(status.success(), "{err}");
    assert!(out.contains("bytes"), "{out}");
}

#[tokio::test]
async fn a_corrupt_store_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "always");
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/state.db"), vec![0x5a; 8192]).unwrap();
    let (status, _, stderr) = daemon::run(&["--config", cfg.to_str().unwrap(), "serve"], "").await;
    assert!(!status.success());
    assert!(stderr.contains("state.db"), "{stderr}");
    // The file was not touched.
    assert_eq!(std::fs::read(dir.path().join("data/state.db")).unwrap(), vec![0x5a; 8192]);
}
