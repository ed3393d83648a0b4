//! Wills of a node that dies: a real `mesgd` process as node a, killed with SIGKILL while two
//! clients are connected to it with wills (one of them had disconnected cleanly before, so its
//! will must not go out); in-process nodes b and c, over a real nats-server. Exactly one of b
//! and c takes a's lease over and sends the will of the client that was still connected, once,
//! reading a's wills only (b and c keep wills of their own clients meanwhile); it also releases
//! a's registry record of the clean session and keeps the persistent sessions', one of which
//! then resumes on b; the other's client never comes back, and once its copy expired a
//! periodic sweep releases its record and the copy.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::sync::atomic::Ordering;

use common::nats::{NatsServer, cluster, synced};
use common::packets::{mqtt_str, packet};
use common::{Raw, TestServer, v5, within};
use daemon::Daemon;
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};

const LEASE_MS: u64 = 1000;
/// The session expiry of `fades`, a persistent session whose client never comes back.
const FADES_EXPIRY_S: u8 = 5;

async fn node(nats: &NatsServer, name: &str) -> TestServer {
    TestServer::start(&format!(
        "[cluster]\nnode = {name:?}\nnats = [{:?}]\nlease_ms = {LEASE_MS}\nregistry_sweep_ms = 200\n",
        nats.url
    ))
    .await
}

/// An MQTT 5 CONNECT with clean start 0 and a session expiry of `expiry_s` seconds.
fn connect_expiring(client_id: &str, expiry_s: u8) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x00, 0, 60, 5, 0x11, 0, 0, 0, expiry_s]);
    body.extend_from_slice(&mqtt_str(client_id));
    packet(0x10, &body)
}

/// An MQTT 5 CONNECT (clean start) with a QoS 1 will on `topic`.
fn connect_with_will(client_id: &str, topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.push(5);
    body.push(0x02 | 0x04 | (1 << 3));
    body.extend_from_slice(&60u16.to_be_bytes());
    body.push(0); // no properties
    body.extend_from_slice(&mqtt_str(client_id));
    body.push(0); // no will properties
    body.extend_from_slice(&mqtt_str(topic));
    body.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    body.extend_from_slice(payload);
    packet(0x10, &body)
}

async fn connected(addr: std::net::SocketAddr, client_id: &str, topic: &str, payload: &[u8]) -> Raw {
    let mut raw = Raw::open(addr, ProtocolVersion::V5).await;
    raw.send(&connect_with_will(client_id, topic, payload)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) => assert_eq!(c.reason_code, ReasonCode::Success),
        other => panic!("expected CONNACK, got {other:?}"),
    }
    raw
}

fn total(
    servers: &[&TestServer],
    pick: impl Fn(&mesgd_cluster::ClusterStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    servers.iter().map(|s| pick(cluster(s).stats()).load(Ordering::Relaxed)).sum()
}

async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    within(what, async {
        while !done().await {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wills_of_a_killed_node_are_sent_once_by_the_node_that_takes_its_lease() {
    let nats = NatsServer::start().await;
    let b = node(&nats, "b").await;
    let c = node(&nats, "c").await;
    let (mut watcher, _) = v5::connect(v5::options("watcher", b.port())).await;
    watcher.subscribe("will/#", v5::QoS::AtLeastOnce).await;
    synced(&b).await;

    let dir = tempfile::tempdir().unwrap();
    let config =
        daemon::cluster_node_config(dir.path(), "a", &nats.url, "", &format!("lease_ms = {LEASE_MS}"));
    let mut a = Daemon::start(&config, &["mqtt"]).await;
    let on_a = a.addrs["mqtt"];

    // One client leaves cleanly (no will), the other stays connected until a dies. b and c
    // keep a will each of their own clients: the node taking a's lease must not read them.
    let mut polite = connected(on_a, "polite", "will/polite", b"polite gone").await;
    let _stays = connected(on_a, "stays", "will/stays", b"stays gone").await;
    // A persistent session on a (expiry one hour): its registry record must outlive a, for the
    // session to be resumed elsewhere from its copy.
    let (_keeps, _) = common::persistent::connect_persistent(on_a, ProtocolVersion::V5, "keeps").await;
    // One whose client never comes back: its record is kept at the takeover (its copy has not
    // expired), and released by the periodic sweep once the copy expired.
    let mut fades = Raw::open(on_a, ProtocolVersion::V5).await;
    fades.send(&connect_expiring("fades", FADES_EXPIRY_S)).await;
    assert!(matches!(fades.recv().await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success));
    let local = |s: &TestServer| std::net::SocketAddr::from(([127, 0, 0, 1], s.port()));
    let _on_b = connected(local(&b), "on-b", "will/on-b", b"on b gone").await;
    let _on_c = connected(local(&c), "on-c", "will/on-c", b"on c gone").await;
    polite.send(&packet(0xE0, &[])).await;
    polite.until_closed().await;
    eventually(
        "the registry to name a for stays, keeps and fades, and its copies of keeps and fades",
        || async {
            let records = cluster(&b).registry_records().await.expect("registry readable");
            ["stays", "keeps", "fades"].iter().all(|id| records.get(*id).is_some_and(|r| r.node == "a"))
                && cluster(&b).session_record("keeps").await.expect("readable").is_some()
                && cluster(&b).session_record("fades").await.expect("readable").is_some()
        },
    )
    .await;
    let fades_copied = std::time::Instant::now();
    eventually("a to keep exactly the will of its connected client, b and c theirs", || async {
        let mut kept = cluster(&b).kept_wills().await.expect("bucket readable");
        kept.sort();
        kept == ["a.stays", "b.on-b", "c.on-c"]
    })
    .await;
    assert_eq!(total(&[&b, &c], |s| &s.wills_scanned), 0, "b and c started with no wills to read");

    a.child.kill().await.expect("SIGKILL");
    let will = watcher.next_publish().await;
    assert_eq!((&will.topic[..], &will.payload[..]), (&b"will/stays"[..], &b"stays gone"[..]));
    eventually("a's record to be gone, b's and c's kept", || async {
        let mut kept = cluster(&b).kept_wills().await.expect("readable");
        kept.sort();
        kept == ["b.on-b", "c.on-c"]
    })
    .await;
    assert_eq!(total(&[&b, &c], |s| &s.leases_taken), 1, "one node took the lease over");
    assert_eq!(total(&[&b, &c], |s| &s.wills_sent), 1, "the will was sent once");
    assert_eq!(total(&[&b, &c], |s| &s.wills_unread), 0);
    // a's two keys (the will of `stays`, the delete marker of `polite`'s), none of b's or c's.
    assert_eq!(total(&[&b, &c], |s| &s.wills_scanned), 2, "only a's wills were read");
    // The node that took a's lease released a's record of the clean session, and kept the
    // persistent session's; b's and c's own clients keep theirs.
    eventually("a's record of stays released", || async {
        let records = cluster(&b).registry_records().await.expect("registry readable");
        !records.contains_key("stays")
    })
    .await;
    let records = cluster(&b).registry_records().await.expect("registry readable");
    assert_eq!(records.get("keeps").map(|r| r.node.as_str()), Some("a"), "{records:?}");
    assert_eq!(records.get("on-b").map(|r| r.node.as_str()), Some("b"));
    assert_eq!(records.get("on-c").map(|r| r.node.as_str()), Some("c"));
    let takeover_at = fades_copied.elapsed();
    if takeover_at < std::time::Duration::from_secs(u64::from(FADES_EXPIRY_S) - 1) {
        assert_eq!(records.get("fades").map(|r| r.node.as_str()), Some("a"), "kept at the takeover");
        assert_eq!(total(&[&b, &c], |s| &s.registry_swept), 1, "exactly one record released");
    } else {
        println!("the takeover came {takeover_at:?} after fades' copy: it may have expired already");
    }
    // Once fades' copy expired, a periodic sweep releases its record and deletes the copy;
    // keeps' stays.
    eventually("fades' record and copy released after its expiry", || async {
        !cluster(&b).registry_records().await.expect("registry readable").contains_key("fades")
            && cluster(&b).session_record("fades").await.expect("readable").is_none()
    })
    .await;
    let released_after = fades_copied.elapsed();
    // Not before the copy expired (it was written shortly before it was seen).
    assert!(
        released_after >= std::time::Duration::from_secs(u64::from(FADES_EXPIRY_S) - 1),
        "{released_after:?}"
    );
    let records = cluster(&b).registry_records().await.expect("registry readable");
    assert_eq!(records.get("keeps").map(|r| r.node.as_str()), Some("a"), "{records:?}");
    assert_eq!(total(&[&b, &c], |s| &s.registry_swept), 2, "stays and fades released, once each");
    // The persistent session resumes on b from its copy, through the record kept.
    let (_resumed, present) =
        common::persistent::connect_persistent(local(&b), ProtocolVersion::V5, "keeps").await;
    assert!(present, "keeps' session resumed on b");
}
