//! The cluster-wide session registry over a real nats-server (`nats-server -js` on a loopback
//! port): a client id connecting on another node takes the session over (the first node's
//! client sees DISCONNECT 0x8E), the same id connecting to two nodes at once leaves exactly one
//! live connection and one record, a dead owner is fenced by the compare-and-swap, a node
//! that cannot reach the registry refuses CONNECT within its bound, a node cut off from NATS
//! closes its clients' connections after `nats_lost_close_ms`, a persistent session resumed
//! on another node keeps its subscriptions, and a NATS server back without its storage gets
//! every node's claims back.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::nats::{NatsServer, cluster, node, synced};
use common::packets::{connect_bytes, mqtt_str, packet, publish_packet, subscribe_packet};
use common::persistent::connect_persistent;
use common::{Raw, TestServer, v3, v5, within};
use mesgd_core::model::SessionKey;
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};

/// Re-checks `done` (a read of cluster state that settles asynchronously, such as a record
/// deleted after a disconnect) until it holds, for at most [`common::WAIT`].
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    within(what, async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

fn counter(
    server: &TestServer,
    pick: impl Fn(&mesgd_cluster::ClusterStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    pick(cluster(server).stats()).load(Ordering::Relaxed)
}

async fn owner(server: &TestServer, client_id: &str) -> Option<String> {
    cluster(server).registry_record(client_id).await.expect("registry readable").map(|(r, _)| r.node)
}

/// A raw CONNECT of `client_id` (clean start; MQTT 5 or 3.1.1); returns the connection and the
/// CONNACK's reason code.
async fn raw_connect(server: &TestServer, v5: bool, client_id: &str) -> (Raw, ReasonCode) {
    let version = if v5 { ProtocolVersion::V5 } else { ProtocolVersion::V311 };
    let mut raw = Raw::open(server.addr, version).await;
    raw.send(&connect_bytes(if v5 { 5 } else { 4 }, client_id, 0x02)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) => (raw, c.reason_code),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_on_another_node_takes_the_session_over() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;

    // MQTT 5, through rumqttc: the client on a is told 0x8E Session taken over.
    let (mut on_a, _) = v5::connect(v5::options("dev", a.port())).await;
    assert_eq!(owner(&a, "dev").await.as_deref(), Some("a"));
    let (mut on_b, connack) = v5::connect(v5::options("dev", b.port())).await;
    assert_eq!(connack.code, rumqttc::v5::mqttbytes::v5::ConnectReturnCode::Success);
    // rumqttc reports the server's DISCONNECT as the end of the connection, with its reason.
    let end = on_a.closed().await;
    assert!(end.contains("ServerDisconnect { reason_code: SessionTakenOver"), "{end}");
    assert_eq!(owner(&b, "dev").await.as_deref(), Some("b"));
    assert_eq!(counter(&b, |s| &s.registry_takeovers_sent), 1);
    assert_eq!(counter(&a, |s| &s.registry_taken_over), 1);
    // The session ended on a (it started afresh on b).
    eventually("the session to end on a", || async { a.broker().session_count() == 0 }).await;
    assert_eq!(cluster(&a).registry_held(), 0);

    // The new session works, across nodes.
    on_b.subscribe("dev/in", v5::QoS::AtLeastOnce).await;
    synced(&b).await;
    let (publisher, _) = v3::connect(v3::options("pub", a.port())).await;
    publisher.client.publish("dev/in", rumqttc::QoS::AtLeastOnce, false, "hello").await.unwrap();
    assert_eq!(&on_b.next_publish().await.payload[..], b"hello");

    // MQTT 3.1.1, raw: the connection on b is closed without a DISCONNECT.
    let (mut old, code) = raw_connect(&b, false, "legacy").await;
    assert_eq!(code, ReasonCode::Success);
    let (mut new, code) = raw_connect(&a, false, "legacy").await;
    assert_eq!(code, ReasonCode::Success);
    let seen = old.until_closed().await;
    assert!(seen.is_empty(), "3.1.1 has no DISCONNECT from the server: {seen:?}");
    new.send(&packet(0xC0, &[])).await;
    assert!(matches!(new.recv().await, Some(Packet::PingResp)));
    assert_eq!(owner(&a, "legacy").await.as_deref(), Some("a"));

    // A clean disconnect with session expiry 0 deletes the record.
    on_b.disconnect().await;
    eventually("the record of dev to go", || async { owner(&b, "dev").await.is_none() }).await;
    // Visible to the read before b has counted the delete's acknowledgement.
    eventually("b to count the release", || async { counter(&b, |s| &s.registry_released) >= 1 }).await;
    assert_eq!(counter(&b, |s| &s.registry_released), 1);
    assert_eq!(counter(&a, |s| &s.registry_fenced) + counter(&b, |s| &s.registry_fenced), 0);
}

/// One round of the race: `id` connects to `a` and `b` at once. Returns which node holds the
/// one live connection, and that connection.
async fn race(a: &TestServer, b: &TestServer, id: &str, v5: bool) -> (&'static str, Raw) {
    let ((mut on_a, code_a), (mut on_b, code_b)) =
        tokio::join!(raw_connect(a, v5, id), raw_connect(b, v5, id));
    assert_eq!((code_a, code_b), (ReasonCode::Success, ReasonCode::Success), "{id}");
    // Exactly one is closed as taken over; the other never is, so the first to end is it.
    let (loser_seen, a_lost) = tokio::select! {
        seen = until_end(&mut on_a) => (seen, true),
        seen = until_end(&mut on_b) => (seen, false),
    };
    let (winner, mut live) = if a_lost { ("b", on_b) } else { ("a", on_a) };
    if v5 {
        assert_eq!(loser_seen, Some(ReasonCode::SessionTakenOver), "{id}: the loser is told why");
    }
    live.send(&packet(0xC0, &[])).await;
    assert!(matches!(live.recv().await, Some(Packet::PingResp)), "{id}: the winner on {winner} is live");
    (winner, live)
}

/// Reads until the server closes; the DISCONNECT reason, if it sent one.
async fn until_end(raw: &mut Raw) -> Option<ReasonCode> {
    let mut reason = None;
    while let Some(p) = raw.recv().await {
        if let Packet::Disconnect(d) = p {
            reason = Some(d.reason_code);
        }
    }
    reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_client_id_on_two_nodes_at_once_leaves_one_live_connection_and_one_record() {
    const ROUNDS: usize = 1000;
    // Every tenth winner stays connected; the others disconnect cleanly (expiry 0).
    const KEEP_EVERY: usize = 10;
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let started = Instant::now();
    let mut live = BTreeMap::new();
    let mut wins = BTreeMap::new();
    for round in 0..ROUNDS {
        let id = format!("race-{round}");
        let (winner, mut connection) = race(&a, &b, &id, round % 2 == 0).await;
        *wins.entry(winner).or_insert(0) += 1;
        let server = if winner == "a" { &a } else { &b };
        assert_eq!(owner(server, &id).await.as_deref(), Some(winner), "{id}: the record names the live node");
        if round % KEEP_EVERY == 0 {
            live.insert(id, (winner.to_owned(), connection));
        } else {
            connection.send(&packet(0xE0, &[])).await;
            assert!(connection.until_closed().await.is_empty());
        }
    }
    let elapsed = started.elapsed();
    eprintln!("{ROUNDS} rounds in {elapsed:?}; wins {wins:?}");
    // Both nodes win some rounds (neither is always first).
    assert_eq!(wins.len(), 2, "{wins:?}");
    // The registry ends with exactly one record per live client id, naming its node, and no
    // orphan: every other record was deleted, and each node holds exactly its live ids.
    let expected: BTreeMap<String, String> =
        live.iter().map(|(id, (node, _))| (id.clone(), node.clone())).collect();
    let on = |node: &str| expected.values().filter(|n| *n == node).count();
    eventually("each node to hold exactly its live ids", || async {
        cluster(&a).registry_held() == on("a") && cluster(&b).registry_held() == on("b")
    })
    .await;
    let records: BTreeMap<String, String> =
        cluster(&a).registry_records().await.unwrap().into_iter().map(|(id, r)| (id, r.node)).collect();
    assert_eq!(records, expected);
    assert_eq!(a.broker().session_count() + b.broker().session_count(), live.len());
    for (id, (_, connection)) in &mut live {
        connection.send(&packet(0xC0, &[])).await;
        assert!(matches!(connection.recv().await, Some(Packet::PingResp)), "{id} is still live");
    }
    let fenced = counter(&a, |s| &s.registry_fenced) + counter(&b, |s| &s.registry_fenced);
    let unavailable = counter(&a, |s| &s.registry_unavailable) + counter(&b, |s| &s.registry_unavailable);
    assert_eq!((fenced, unavailable), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_is_fenced_by_the_compare_and_swap() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let (mut stale, code) = raw_connect(&a, true, "x").await;
    assert_eq!(code, ReasonCode::Success);
    let (_, first) = cluster(&a).registry_record("x").await.unwrap().expect("a's record");

    // a stops taking part in the cluster (its takeover subject gone with its tasks), but its
    // NATS connection and its client stay: a node cut off from the others.
    cluster(&a).shutdown().await;
    let (mut on_b, code) = raw_connect(&b, true, "x").await;
    assert_eq!(code, ReasonCode::Success, "the claim stands without the old owner's answer");
    assert_eq!(counter(&b, |s| &s.registry_owner_gone), 1);
    let (record, second) = cluster(&b).registry_record("x").await.unwrap().expect("b's record");
    assert_eq!(record.node, "b");
    assert!(second > first);
    on_b.send(&subscribe_packet(1, "x/in", 1, true)).await;
    assert!(matches!(on_b.recv().await, Some(Packet::SubAck(_))));
    on_b.send(&publish_packet("x/in", 0, None, false, Some(&[]), b"works")).await;
    match on_b.recv().await {
        Some(Packet::Publish(p)) => assert_eq!(&p.payload[..], b"works"),
        other => panic!("expected the PUBLISH, got {other:?}"),
    }

    // a's client disconnects cleanly: a deletes the record at its own, stale revision, which
    // the compare-and-swap refuses. b's record stays.
    stale.send(&packet(0xE0, &[0])).await;
    stale.until_closed().await;
    eventually("a's stale delete to be refused", || async { counter(&a, |s| &s.registry_fenced) == 1 }).await;
    let (record, revision) = cluster(&b).registry_record("x").await.unwrap().expect("b's record stays");
    assert_eq!((record.node.as_str(), revision), ("b", second));
    assert_eq!(counter(&a, |s| &s.registry_released), 0);

    // A node that is gone altogether: c's persistent client's record names c until another
    // node claims the id, which it can at once.
    let mut c = node(&nats, "c", "").await;
    let mut raw = Raw::open(c.addr, ProtocolVersion::V5).await;
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x02, 0, 60, 5, 0x11, 0, 0, 0x0E, 0x10]);
    body.extend(mqtt_str("persistent"));
    raw.send(&packet(0x10, &body)).await;
    assert!(matches!(raw.recv().await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success));
    c.stop().await;
    raw.until_closed().await;
    assert_eq!(
        owner(&b, "persistent").await.as_deref(),
        Some("c"),
        "a persistent session's record outlives its node"
    );
    let took = Instant::now();
    let (_on_b, code) = raw_connect(&b, true, "persistent").await;
    assert_eq!(code, ReasonCode::Success);
    assert_eq!(counter(&b, |s| &s.registry_owner_gone), 2);
    assert!(took.elapsed() < Duration::from_secs(1), "no wait for a gone owner: {:?}", took.elapsed());
    assert_eq!(owner(&b, "persistent").await.as_deref(), Some("b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_fails_closed_without_the_registry() {
    let mut nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    // A client id whose registry key would be too long is refused as not valid.
    let (_, code) = raw_connect(&a, true, &".".repeat(700)).await;
    assert_eq!(code, ReasonCode::ClientIdentifierNotValid);

    let (mut before, code) = raw_connect(&a, true, "before").await;
    assert_eq!(code, ReasonCode::Success);
    nats.kill().await;
    for v5 in [true, false] {
        let started = Instant::now();
        let (_, code) = raw_connect(&a, v5, "during").await;
        // 0x88 Server unavailable; 3.1.1's return code 3 reads back as the same.
        assert_eq!(code, ReasonCode::ServerUnavailable, "v5: {v5}");
        // registry_timeout_ms is 2000 by default.
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "refused within the bound: {:?}",
            started.elapsed()
        );
    }
    assert!(counter(&a, |s| &s.registry_unavailable) >= 2);
    // Clients already connected keep working locally.
    before.send(&packet(0xC0, &[])).await;
    assert!(matches!(before.recv().await, Some(Packet::PingResp)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_session_resumed_on_another_node_keeps_its_subscriptions() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;

    // MQTT 5, taken over while connected: two subscriptions, one with no-local.
    let (mut old, present) = connect_persistent(a.addr, ProtocolVersion::V5, "keeper").await;
    assert!(!present);
    old.send(&subscribe_packet(1, "keep/+", 0x01, true)).await;
    assert!(matches!(old.recv().await, Some(Packet::SubAck(_))));
    old.send(&subscribe_packet(2, "mine/#", 0x05, true)).await;
    assert!(matches!(old.recv().await, Some(Packet::SubAck(_))));
    let (mut new, present) = connect_persistent(b.addr, ProtocolVersion::V5, "keeper").await;
    assert!(present, "the session moved with its subscriptions");
    assert_eq!(until_end(&mut old).await, Some(ReasonCode::SessionTakenOver));
    let key = SessionKey::mqtt("keeper");
    let moved = b.broker().session(&key).expect("the session is on b");
    let mut filters: Vec<(String, bool)> =
        moved.subscriptions().into_iter().map(|(text, r)| (text.to_string(), r.options.no_local)).collect();
    filters.sort();
    assert_eq!(filters, [("keep/+".to_owned(), false), ("mine/#".to_owned(), true)]);
    eventually("the session to end on a", || async { a.broker().session(&key).is_none() }).await;
    assert_eq!(counter(&a, |s| &s.registry_sessions_handed), 1);
    assert_eq!(counter(&b, |s| &s.registry_sessions_received), 1);
    // The subscriptions work on b, for messages published on a, without a new SUBSCRIBE.
    synced(&b).await;
    let (publisher, _) = v3::connect(v3::options("pub", a.port())).await;
    publisher.client.publish("keep/x", rumqttc::QoS::AtMostOnce, false, "still here").await.unwrap();
    match new.recv().await {
        Some(Packet::Publish(p)) => {
            assert_eq!((&*p.topic, &p.payload[..]), ("keep/x", &b"still here"[..]))
        }
        other => panic!("expected the PUBLISH, got {other:?}"),
    }

    // MQTT 3.1.1, resumed while offline on b; a clean start on the other node takes nothing.
    let (mut legacy, _) = connect_persistent(b.addr, ProtocolVersion::V311, "legacy-keeper").await;
    legacy.send(&subscribe_packet(1, "lk/#", 1, false)).await;
    assert!(matches!(legacy.recv().await, Some(Packet::SubAck(_))));
    legacy.send(&packet(0xE0, &[])).await;
    legacy.until_closed().await;
    let (_legacy, present) = connect_persistent(a.addr, ProtocolVersion::V311, "legacy-keeper").await;
    assert!(present);
    let key = SessionKey::mqtt("legacy-keeper");
    assert_eq!(a.broker().session(&key).expect("on a").subscription_count(), 1);
    let (_fresh, code) = raw_connect(&b, true, "legacy-keeper").await;
    assert_eq!(code, ReasonCode::Success);
    let fresh = b.broker().session(&key).expect("on b");
    assert_eq!(fresh.subscription_count(), 0, "clean start: nothing handed over");
    assert_eq!(counter(&a, |s| &s.registry_sessions_handed), 1, "nothing asked of a");
}

/// A v5 CONNECT with clean start 0 and a session expiry of `expiry_s` seconds.
fn persistent_v5(client_id: &str, expiry_s: u32) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x00, 0, 60, 5, 0x11]);
    body.extend_from_slice(&expiry_s.to_be_bytes());
    body.extend(mqtt_str(client_id));
    packet(0x10, &body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_restored_from_storage_are_handed_over_and_their_records_released() {
    let nats = NatsServer::start().await;
    let b = node(&nats, "b", "").await;
    let mut c = node(&nats, "c", "").await;
    // Two persistent sessions on c: one for an hour with a subscription, one for three seconds
    // (long enough that it cannot expire on the old c while c stops, even on a loaded machine).
    let (mut long, _) = connect_persistent(c.addr, ProtocolVersion::V5, "restored").await;
    long.send(&subscribe_packet(1, "rs/#", 1, true)).await;
    assert!(matches!(long.recv().await, Some(Packet::SubAck(_))));
    long.send(&packet(0xE0, &[])).await;
    long.until_closed().await;
    let mut short = Raw::open(c.addr, ProtocolVersion::V5).await;
    short.send(&persistent_v5("brief", 3)).await;
    assert!(matches!(short.recv().await, Some(Packet::ConnAck(a)) if a.reason_code == ReasonCode::Success));
    short.send(&packet(0xE0, &[])).await;
    short.until_closed().await;

    // c restarts: both sessions come back from storage, never claimed by this run of c, and
    // their records still name c.
    c.stop().await;
    let c = common::nats::restart(&nats, "c", c).await;
    assert_eq!(c.broker().session_count(), 2);
    assert_eq!(cluster(&c).registry_held(), 0);
    assert_eq!(owner(&b, "restored").await.as_deref(), Some("c"));

    // The short one expires on c: c deletes the record that named it.
    eventually("the expired session's record to go", || async { owner(&b, "brief").await.is_none() }).await;
    // The delete is visible to b before c has read its acknowledgement and counted it.
    eventually("c to count the release", || async { counter(&c, |s| &s.registry_released) >= 1 }).await;
    assert_eq!(counter(&c, |s| &s.registry_released), 1);

    // The long one resumes on b: c hands it over with its subscription and ends its copy.
    let (_on_b, present) = connect_persistent(b.addr, ProtocolVersion::V5, "restored").await;
    assert!(present);
    let key = SessionKey::mqtt("restored");
    assert!(b.broker().session(&key).expect("on b").has_subscription("rs/#"));
    eventually("c's copy to end", || async { c.broker().session(&key).is_none() }).await;
    assert_eq!(counter(&c, |s| &s.registry_sessions_handed), 1);
    assert_eq!(owner(&b, "restored").await.as_deref(), Some("b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_nats_closes_its_clients_after_nats_lost_close_ms() {
    const CLOSE_AFTER: Duration = Duration::from_millis(1500);
    let mut nats = NatsServer::start().await;
    let a = TestServer::start(&format!(
        "[cluster]\nnode = \"a\"\nnats = [{:?}]\nnats_lost_close_ms = {}\n",
        nats.url,
        CLOSE_AFTER.as_millis()
    ))
    .await;
    let (mut v5_client, code) = raw_connect(&a, true, "five").await;
    assert_eq!(code, ReasonCode::Success);
    let (mut v3_client, code) = raw_connect(&a, false, "three").await;
    assert_eq!(code, ReasonCode::Success);

    nats.kill().await;
    let lost = Instant::now();
    // Within the bound the node still serves its clients alone.
    v5_client.send(&packet(0xC0, &[])).await;
    assert!(matches!(v5_client.recv().await, Some(Packet::PingResp)));
    // Past it, MQTT 5 is told to use another server; 3.1.1 has no DISCONNECT from the server.
    assert_eq!(until_end(&mut v5_client).await, Some(ReasonCode::UseAnotherServer));
    let waited = lost.elapsed();
    assert!(waited >= CLOSE_AFTER, "closed only after nats_lost_close_ms: {waited:?}");
    assert!(v3_client.until_closed().await.is_empty());
    assert_eq!(counter(&a, |s| &s.nats_lost_closes), 2);
    // No connection is left on the node (persistent sessions would stay, for their expiry).
    eventually("both connections to detach", || async { a.broker().online_sessions().is_empty() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_back_without_its_storage_gets_the_registry_back_and_clients_connect() {
    let mut nats = NatsServer::start().await;
    let port: u16 = nats.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port in the URL");
    let a = node(&nats, "a", "").await;
    let b = node(&nats, "b", "").await;
    let (mut held, code) = raw_connect(&a, true, "held").await;
    assert_eq!(code, ReasonCode::Success);

    // The server comes back on the same port with an empty JetStream store: every bucket and
    // stream is gone.
    nats.kill().await;
    let _nats = NatsServer::start_on(port).await;
    within("both nodes to claim their ids again in a new registry bucket", async {
        while counter(&a, |s| &s.registry_reclaimed) == 0
            || counter(&a, |s| &s.assets_replaced) < 5
            || counter(&b, |s| &s.assets_replaced) < 5
        {
            // Polled: a counter has no notification (the nodes check every 5 s).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(owner(&a, "held").await.as_deref(), Some("a"), "a's record is in the new bucket");

    // New clients connect on either node.
    let (_fresh, code) = raw_connect(&b, true, "fresh").await;
    assert_eq!(code, ReasonCode::Success, "a connect on b after the loss");
    let (_other, code) = raw_connect(&a, false, "other").await;
    assert_eq!(code, ReasonCode::Success, "a connect on a after the loss");
    // And the client held on a since before the loss is taken over when it connects on b:
    // one live connection per client id still.
    let (_again, code) = raw_connect(&b, true, "held").await;
    assert_eq!(code, ReasonCode::Success);
    match held.recv().await {
        Some(Packet::Disconnect(d)) => assert_eq!(d.reason_code, ReasonCode::SessionTakenOver),
        other => panic!("expected DISCONNECT 0x8E on a, got {other:?}"),
    }
    assert_eq!(owner(&b, "held").await.as_deref(), Some("b"));

    // And QoS 1 goes across nodes (its stream was created again as well).
    let (mut reader, _) = v3::connect(v3::options("reader", b.port())).await;
    reader.subscribe("after/#", rumqttc::QoS::AtLeastOnce).await;
    synced(&b).await;
    let (publisher, _) = v3::connect(v3::options("writer", a.port())).await;
    publisher.client.publish("after/loss", rumqttc::QoS::AtLeastOnce, false, "delivered").await.unwrap();
    let got = reader.next_publish().await;
    assert_eq!((got.topic.as_str(), &got.payload[..]), ("after/loss", &b"delivered"[..]));
}
