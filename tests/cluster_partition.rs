//! A network partition of the NATS cluster (three real `nats-server -js` processes whose routes
//! run through relays in the test, so that one server can be cut off and joined again): the
//! node on the minority side acknowledges no QoS 1 publish and admits no CONNECT while it is
//! cut off, closes its clients' connections (MQTT 5: DISCONNECT 0x9C Use another server) once
//! its lease has not been renewed for `nats_lost_close_ms`, and serves again after the
//! partition heals; the node on the majority side goes on acknowledging; and every message
//! acknowledged on either side is in the durable stream afterwards.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::nats::cluster;
use common::nats_cluster::NatsCluster;
use common::packets::{connect_bytes, publish_packet};
use common::{Raw, TestServer, within};
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};

/// A node whose only NATS server is `url` (so that it stays on that server's side). Three
/// servers whose routes run through the test's relays can take longer than the default 30 s to
/// place a stream's three replicas on a loaded machine (once seen in CI: "no suitable peers for
/// placement" until the start gave up), so the start waits up to 90 s.
async fn node(name: &str, url: &str) -> TestServer {
    TestServer::start(&format!(
        "[cluster]\nnode = {name:?}\nnats = [{url:?}]\njetstream_ready_timeout_ms = 90000\nretained_replicas = 3\nregistry_replicas = 3\n\
         users_replicas = 3\nlease_ms = 3000\nnats_lost_close_ms = 4000\nregistry_timeout_ms = 1000\n\
         [cluster.durable]\nreplicas = 3\nstore_timeout_ms = 1000\n"
    ))
    .await
}

/// One CONNECT of a clean MQTT 5 session: the connection when it is admitted, the CONNACK's
/// reason code (or `None` for a closed socket) when it is not.
async fn try_connect(addr: SocketAddr, client_id: &str) -> Result<Raw, Option<ReasonCode>> {
    let mut raw = Raw::open(addr, ProtocolVersion::V5).await;
    raw.send(&connect_bytes(5, client_id, 0x02)).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success => Ok(raw),
        Some(Packet::ConnAck(c)) => Err(Some(c.reason_code)),
        None => Err(None),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

/// Publishes `payload` at QoS 1 on `s/1`; `Some(true)` when it is acknowledged, `Some(false)`
/// when the broker refuses it or closes the connection instead.
async fn publish(raw: &mut Raw, packet_id: u16, payload: &str) -> bool {
    raw.send(&publish_packet("s/1", 1, Some(packet_id), false, Some(&[]), payload.as_bytes())).await;
    match raw.recv().await {
        Some(Packet::PubAck(ack)) => {
            assert_eq!(ack.packet_id, packet_id);
            !ack.reason_code.is_error()
        }
        Some(Packet::Disconnect(_)) | None => false,
        other => panic!("expected PUBACK or DISCONNECT, got {other:?}"),
    }
}

/// Connects and publishes `payload` until it is acknowledged (a client that retries, with a
/// reconnect back-off), within `bound`; returns how many attempts failed first.
async fn publish_until_acknowledged(
    addr: SocketAddr,
    client_id: &str,
    payload: &str,
    bound: Duration,
) -> usize {
    let deadline = Instant::now() + bound;
    let mut failed = 0;
    loop {
        assert!(Instant::now() < deadline, "{payload} not acknowledged within {bound:?} ({failed} attempts)");
        if let Ok(mut raw) = try_connect(addr, client_id).await
            && publish(&mut raw, 1, payload).await
        {
            return failed;
        }
        failed += 1;
        // A client's reconnect back-off (not a wait for an event).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minority_side_of_a_partition_acknowledges_nothing_and_sends_its_clients_away() {
    let nats = NatsCluster::start_partitionable().await;
    let a = node("a", &nats.urls[0]).await;
    let b = node("b", &nats.urls[1]).await;
    let mut acked = BTreeSet::new();
    // Both sides serve while the cluster is whole (streams may still be electing leaders).
    for (server, id, payload) in [(&a, "pa", "a-before"), (&b, "pb", "b-before")] {
        publish_until_acknowledged(server.addr, id, payload, Duration::from_secs(30)).await;
        acked.insert(payload.to_owned());
    }
    let mut watcher = within("a connection on a", async {
        loop {
            if let Ok(raw) = try_connect(a.addr, "watcher").await {
                break raw;
            }
        }
    })
    .await;
    let mut publisher = try_connect(a.addr, "pa").await.expect("pa connects on a");

    // Server 0, a's only server, is cut off from the other two.
    nats.isolate(0);
    let cut_at = Instant::now();

    // The minority side: no publish acknowledged, no client admitted.
    let mut refused = 0;
    for n in 0..5 {
        let payload = format!("a-cut-{n}");
        if let Ok(mut raw) = try_connect(a.addr, "pa").await {
            assert!(!publish(&mut raw, 1, &payload).await, "{payload} was acknowledged on the minority side");
        } else {
            refused += 1;
        }
    }
    assert!(!publish(&mut publisher, 2, "a-cut-old").await, "acknowledged on the minority side");

    // The majority side goes on acknowledging (once its streams have a leader there).
    let failed = publish_until_acknowledged(b.addr, "pb", "b-during", Duration::from_secs(30)).await;
    acked.insert("b-during".to_owned());

    // The node cut off sends its clients away once its lease has failed for
    // nats_lost_close_ms.
    let closed = within("a's watcher sent away", async {
        loop {
            match watcher.recv().await {
                Some(Packet::Disconnect(d)) => break Some(d.reason_code),
                None => break None,
                Some(_) => {}
            }
        }
    })
    .await;
    assert_eq!(closed, Some(ReasonCode::UseAnotherServer), "the watcher's close");
    let sent_away_after = cut_at.elapsed();
    assert!(
        sent_away_after >= Duration::from_millis(4000),
        "closed after {sent_away_after:?}, before nats_lost_close_ms"
    );
    assert!(cluster(&a).stats().nats_lost_closes.load(Ordering::Relaxed) >= 1);
    eprintln!(
        "minority: {refused} of 5 CONNECTs refused; majority: {failed} attempts before the first \
         acknowledgement; clients sent away after {sent_away_after:?}"
    );

    // Healed: the node takes clients and acknowledges again.
    nats.heal();
    publish_until_acknowledged(a.addr, "pa", "a-after", Duration::from_secs(30)).await;
    acked.insert("a-after".to_owned());

    // Read as a client would: JetStream may answer "temporarily unavailable" while the
    // healed server catches up, and is asked again.
    let deadline = Instant::now() + Duration::from_secs(30);
    let messages = loop {
        match within("the stream's messages", cluster(&b).durable_stream_messages("MESGD_QOS")).await {
            Ok(messages) => break messages,
            Err(e) => assert!(Instant::now() < deadline, "the stream is not readable: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stored: BTreeSet<String> =
        messages.into_iter().map(|(_, payload)| String::from_utf8(payload.to_vec()).unwrap()).collect();
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged but not in the stream: {lost:?} (stored: {stored:?})");
}

/// A node started together with its NATS cluster, before the servers have found each other:
/// JetStream has no quorum, so no meta leader, and every stream creation is refused or
/// unanswered. The start waits (`jetstream_ready_timeout_ms`, 30 s by default) instead of
/// failing, and the node serves once the servers are joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_before_its_nats_cluster_has_a_quorum_waits_for_it() {
    let nats = NatsCluster::start_cut().await;
    let url = nats.urls[0].clone();
    let mut starting = tokio::spawn(async move { node("a", &url).await });
    // Longer than one JetStream request's timeout (5 s): a start that gave up at the first
    // refusal or timeout has ended (failed) by now.
    let early = tokio::time::timeout(Duration::from_secs(7), &mut starting).await;
    if let Ok(ended) = early {
        panic!("the start ended while JetStream had no quorum: {:?}", ended.err());
    }

    nats.heal();
    let a = tokio::time::timeout(Duration::from_secs(60), starting)
        .await
        .expect("the node started within 60 s of the servers joining")
        .expect("the node started");
    publish_until_acknowledged(a.addr, "p", "joined", Duration::from_secs(30)).await;
}
