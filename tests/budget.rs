//! The broker-wide queue budget and the per-client in-flight byte cap, through the real server:
//! publishers are paused (not read) while the bytes queued in all sessions are over the pause
//! threshold, nothing is lost, a connection with deliveries of its own is never paused, a
//! healthy client keeps working, and huge messages go in flight one at a time.
//!
//! Waits are for events (a packet, the broker's paused-connections gauge), bounded by
//! `common::WAIT`; nothing sleeps.

mod common;

use common::packets::{packet, publish_packet, subscribe_packet};
use common::{Raw, TestServer, connect_bytes, within};
use mesgd_core::model::SessionKey;
use mesgd_core::mqtt::{Packet, ProtocolVersion, QoS, ReasonCode};
use mesgd_core::session::QueueBudget;

const V3: ProtocolVersion = ProtocolVersion::V311;

/// Topic `budget/t` plus a 992-byte payload: 1000 bytes of budget per queued copy.
const TOPIC: &str = "budget/t";
const PAYLOAD: usize = 992;
const WEIGHT: u64 = 1000;

/// A budget of 10,000 bytes that pauses publishers at 5,000 (five messages) and resumes them
/// below 4,500.
const LIMITS: &str =
    "[limits]\nmax_queued_bytes = 10000\nmax_queued_bytes_total = 10000\nqueue_pause_percent = 50\n";

/// An HTTP listener for `/metrics`.
const METRICS: &str = "[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n";

/// The `/metrics` samples (name with labels, then value) of the running server.
async fn metrics(server: &TestServer) -> Vec<String> {
    let addr = server.server.as_ref().expect("running").local_addr("http").expect("http listener");
    let text = within("/metrics", async {
        reqwest::get(format!("http://{addr}/metrics")).await.expect("scrape").text().await.expect("body")
    })
    .await;
    text.lines().filter(|l| !l.starts_with('#')).map(str::to_owned).collect()
}

fn payload(i: u16) -> Vec<u8> {
    let mut p = format!("{i:05}").into_bytes();
    p.resize(PAYLOAD, b'.');
    p
}

fn budget(server: &TestServer) -> &std::sync::Arc<QueueBudget> {
    server.broker().budget()
}

fn puback(packet_id: u16) -> Vec<u8> {
    packet(0x40, &packet_id.to_be_bytes())
}

/// Waits until `cond` holds, letting the server's tasks run in between.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    within(what, async {
        while !cond() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Nothing more has arrived on `raw`'s socket.
fn nothing_more(raw: &mut Raw) -> bool {
    let mut byte = [0u8; 1];
    matches!(raw.stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

async fn expect_puback(raw: &mut Raw, packet_id: u16, what: &str) {
    match raw.recv().await {
        Some(Packet::PubAck(a)) => assert_eq!(a.packet_id, packet_id, "{what}"),
        other => panic!("{what}: expected PUBACK {packet_id}, got {other:?}"),
    }
}

async fn expect_suback(raw: &mut Raw, what: &str) {
    match raw.recv().await {
        Some(Packet::SubAck(s)) => assert_eq!(s.reason_codes, vec![ReasonCode::GrantedQoS1], "{what}"),
        other => panic!("{what}: expected SUBACK, got {other:?}"),
    }
}

/// A persistent 3.1.1 session `id` subscribed to `TOPIC` at QoS 1, left offline.
async fn offline_subscriber(server: &TestServer, id: &str) {
    let mut sub = Raw::open(server.addr, V3).await;
    sub.send(&connect_bytes(4, id, 0x00)).await;
    assert!(matches!(sub.recv().await, Some(Packet::ConnAck(_))));
    sub.send(&subscribe_packet(1, TOPIC, 1, false)).await;
    expect_suback(&mut sub, "the persistent subscriber").await;
    sub.send(&[0xE0, 0x00]).await;
    assert!(sub.until_closed().await.is_empty(), "DISCONNECT ends the connection quietly");
    until("the subscriber's session to go offline", || {
        server.broker().session(&SessionKey::mqtt(id)).is_some_and(|s| !s.is_online())
    })
    .await;
}

/// Writes `count` QoS 1 PUBLISHes (ids and payload numbers from 1) to `TOPIC` at once, then
/// reads PUBACKs until the budget pauses the publisher: returns how many were acknowledged.
async fn publish_until_paused(server: &TestServer, publisher: &mut Raw, count: u16) -> u16 {
    let before = budget(server).used();
    let mut all = Vec::new();
    for i in 1..=count {
        all.extend(publish_packet(TOPIC, 1, Some(i), false, None, &payload(i)));
    }
    publisher.send(&all).await;
    // Five messages reach the pause threshold of 5,000 bytes: the sixth PUBLISH is not read.
    for i in 1..=5 {
        expect_puback(publisher, i, "within the budget").await;
    }
    until("the publisher to be paused", || budget(server).paused_readers() == 1).await;
    assert!(budget(server).under_pressure());
    assert_eq!(budget(server).used() - before, 5 * WEIGHT, "the offline session holds five messages");
    5
}

/// The offline subscriber `id` reconnects and reads `count` messages in order, acknowledging
/// each; the publisher's remaining PUBLISHes are then read and acknowledged.
async fn drain_all(server: &TestServer, id: &str, count: u16) -> Raw {
    let mut sub = Raw::open(server.addr, V3).await;
    sub.send(&connect_bytes(4, id, 0x00)).await;
    assert!(matches!(sub.recv().await, Some(Packet::ConnAck(c)) if c.session_present));
    for i in 1..=count {
        match sub.recv().await {
            Some(Packet::Publish(p)) => {
                assert_eq!(&p.payload[..], &payload(i)[..], "message {i} arrives, in order");
                sub.send(&puback(p.packet_id.expect("QoS 1"))).await;
            }
            other => panic!("expected message {i}, got {other:?}"),
        }
    }
    sub
}

#[tokio::test]
async fn a_publisher_is_paused_while_offline_sessions_fill_the_budget_and_nothing_is_lost() {
    let server = TestServer::start(&format!("{LIMITS}{METRICS}")).await;
    offline_subscriber(&server, "offline-sub").await;
    let mut publisher = Raw::connected(server.addr, V3, "flooder").await;
    const N: u16 = 20;
    let acked = publish_until_paused(&server, &mut publisher, N).await;
    assert!(nothing_more(&mut publisher), "no PUBACK for the messages past the pause threshold");
    assert_eq!(budget(&server).pauses(), 1);
    assert_eq!(budget(&server).dropped(), 0, "back-pressure, not drops");
    let samples = metrics(&server).await;
    for expected in [
        "mesgd_queued_bytes 5000",
        "mesgd_queued_bytes_budget 10000",
        "mesgd_publishers_paused 1",
        "mesgd_publisher_pauses_total 1",
        "mesgd_deliveries_dropped_total{reason=\"budget\"} 0",
    ] {
        assert!(samples.iter().any(|l| l == expected), "{expected} in {samples:#?}");
    }

    // The subscriber comes back and drains: the publisher is read again, its messages go
    // straight to the now online subscriber, and every one is acknowledged in order.
    let reader = tokio::spawn(async move {
        let mut acks = Vec::new();
        for _ in acked + 1..=N {
            match publisher.recv().await {
                Some(Packet::PubAck(a)) => acks.push(a.packet_id),
                other => panic!("expected a PUBACK, got {other:?}"),
            }
        }
        acks
    });
    let mut sub = drain_all(&server, "offline-sub", N).await;
    let acks = within("the publisher's acknowledgements", reader).await.expect("reader");
    assert_eq!(acks, (acked + 1..=N).collect::<Vec<_>>(), "the rest are acknowledged, in order");
    until("the budget to empty", || budget(&server).used() == 0).await;
    assert!(!budget(&server).under_pressure());
    assert_eq!(budget(&server).paused_readers(), 0);
    assert_eq!(budget(&server).dropped(), 0, "nothing was dropped");
    assert!(nothing_more(&mut sub), "no message twice");
}

/// The budget is over the pause threshold (an offline session holds it) and a flooder is
/// paused; returns the flooder.
async fn pressure(server: &TestServer) -> Raw {
    offline_subscriber(server, "offline-sub").await;
    let mut flooder = Raw::connected(server.addr, V3, "flooder").await;
    publish_until_paused(server, &mut flooder, 10).await;
    flooder
}

#[tokio::test]
async fn a_connection_with_deliveries_of_its_own_is_read_while_publishers_are_paused() {
    let server = TestServer::start(LIMITS).await;
    // `busy` subscribes to its own topic and holds one delivery unacknowledged: it has
    // something in flight when the budget comes under pressure.
    let mut busy = Raw::connected(server.addr, V3, "busy").await;
    busy.send(&subscribe_packet(1, "busy/echo", 1, false)).await;
    expect_suback(&mut busy, "busy").await;
    busy.send(&publish_packet("busy/echo", 1, Some(100), false, None, b"held")).await;
    let mut held = None;
    for _ in 0..2 {
        match busy.recv().await {
            Some(Packet::PubAck(a)) => assert_eq!(a.packet_id, 100),
            Some(Packet::Publish(p)) => held = p.packet_id,
            other => panic!("expected PUBACK and PUBLISH, got {other:?}"),
        }
    }
    let held = held.expect("the delivery arrived");
    let _flooder = pressure(&server).await;

    // It publishes to itself and reads at once, with the budget over its pause threshold:
    // every PUBLISH is acknowledged and every delivery arrives (and is acknowledged in turn).
    let mut burst = Vec::new();
    for i in 1..=10u16 {
        burst.extend(publish_packet("busy/echo", 1, Some(i), false, None, format!("echo {i}").as_bytes()));
    }
    busy.send(&burst).await;
    let (mut pubacks, mut deliveries) = (Vec::new(), Vec::new());
    while pubacks.len() < 10 || deliveries.len() < 10 {
        match busy.recv().await {
            Some(Packet::PubAck(a)) => pubacks.push(a.packet_id),
            Some(Packet::Publish(p)) => {
                deliveries.push(String::from_utf8_lossy(&p.payload).into_owned());
                busy.send(&puback(p.packet_id.expect("QoS 1"))).await;
            }
            other => panic!("expected PUBACKs and PUBLISHes, got {other:?}"),
        }
    }
    assert_eq!(pubacks, (1..=10).collect::<Vec<_>>());
    assert_eq!(deliveries, (1..=10).map(|i| format!("echo {i}")).collect::<Vec<_>>());
    busy.send(&puback(held)).await;
    assert!(budget(&server).under_pressure(), "the offline session still holds the budget");
    assert_eq!(budget(&server).paused_readers(), 1, "the flooder is still paused");
}

#[tokio::test]
async fn a_healthy_client_connects_subscribes_and_receives_while_a_publisher_is_paused() {
    let server = TestServer::start(LIMITS).await;
    let mut busy = Raw::connected(server.addr, V3, "busy").await;
    busy.send(&subscribe_packet(1, "busy/t", 1, false)).await;
    expect_suback(&mut busy, "busy").await;
    busy.send(&publish_packet("busy/t", 1, Some(1), false, None, b"keep me busy")).await;
    expect_puback(&mut busy, 1, "busy").await;
    assert!(matches!(busy.recv().await, Some(Packet::Publish(_))), "busy holds one in flight");
    let _flooder = pressure(&server).await;

    // A new client connects and subscribes during the pause: only PUBLISH waits.
    let mut healthy = Raw::connected(server.addr, V3, "healthy").await;
    healthy.send(&subscribe_packet(1, "healthy/t", 1, false)).await;
    expect_suback(&mut healthy, "healthy").await;
    // A message from a connection that is read (it has a delivery in flight) reaches it at
    // QoS 1, and its acknowledgement is read.
    busy.send(&publish_packet("healthy/t", 1, Some(2), false, None, b"still fine")).await;
    expect_puback(&mut busy, 2, "busy's publish").await;
    match healthy.recv().await {
        Some(Packet::Publish(p)) => {
            assert_eq!((p.qos, &p.payload[..]), (QoS::AtLeastOnce, &b"still fine"[..]));
            healthy.send(&puback(p.packet_id.expect("QoS 1"))).await;
        }
        other => panic!("expected the PUBLISH, got {other:?}"),
    }

    // Its own PUBLISH waits like any publisher's: no PUBACK until the budget drains.
    healthy.send(&publish_packet("healthy/t", 1, Some(9), false, None, b"mine")).await;
    until("the healthy client's PUBLISH to wait", || budget(&server).paused_readers() == 2).await;
    assert!(nothing_more(&mut healthy), "no PUBACK while the budget is under pressure");
    let _sub = drain_all(&server, "offline-sub", 10).await;
    expect_puback(&mut healthy, 9, "after the drain").await;
    match healthy.recv().await {
        Some(Packet::Publish(p)) => assert_eq!(&p.payload[..], b"mine"),
        other => panic!("expected its own message, got {other:?}"),
    }
}

#[tokio::test]
async fn the_hard_cap_drops_what_paused_publishers_cannot_stop() {
    // A connection with a delivery in flight is never paused: if it floods offline sessions,
    // the hard cap drops, and counts, what does not fit.
    let server = TestServer::start(LIMITS).await;
    offline_subscriber(&server, "offline-sub").await;
    let mut busy = Raw::connected(server.addr, V3, "busy").await;
    busy.send(&subscribe_packet(1, "busy/t", 1, false)).await;
    expect_suback(&mut busy, "busy").await;
    busy.send(&publish_packet("busy/t", 1, Some(1), false, None, b"in flight")).await;
    expect_puback(&mut busy, 1, "busy").await;
    assert!(matches!(busy.recv().await, Some(Packet::Publish(_))));
    for i in 1..=12u16 {
        busy.send(&publish_packet(TOPIC, 1, Some(i + 1), false, None, &payload(i))).await;
        expect_puback(&mut busy, i + 1, "never paused").await;
    }
    // 9 bytes in flight to `busy`, then nine 1,000-byte messages fit under 10,000; three do not.
    assert_eq!(budget(&server).dropped(), 3);
    assert_eq!(budget(&server).used(), 9 * WEIGHT + "busy/t".len() as u64 + 9);
    assert_eq!(budget(&server).paused_readers(), 0);
}

#[tokio::test]
async fn large_messages_go_in_flight_one_at_a_time_small_ones_fill_the_window() {
    let server = TestServer::start("[limits]\nmax_inflight = 4\nmax_inflight_bytes = 2000\n").await;
    let mut sub = Raw::connected(server.addr, V3, "inflight-sub").await;
    sub.send(&subscribe_packet(1, "big", 1, false)).await;
    expect_suback(&mut sub, "sub").await;
    let session = server.broker().session(&SessionKey::mqtt("inflight-sub")).expect("session");
    let mut publisher = Raw::connected(server.addr, V3, "inflight-pub").await;

    // Three 1,500-byte messages: two would be 3,000 bytes in flight, so one goes at a time.
    for i in 1..=3u16 {
        publisher.send(&publish_packet("big", 1, Some(i), false, None, &vec![b'0' + i as u8; 1497])).await;
        expect_puback(&mut publisher, i, "big").await;
    }
    for i in 1..=3u16 {
        let p = match sub.recv().await {
            Some(Packet::Publish(p)) => p,
            other => panic!("expected big message {i}, got {other:?}"),
        };
        assert_eq!(p.payload[0], b'0' + i as u8, "in order");
        until("the rest to wait in the queue", || session.queue_len() == usize::from(3 - i)).await;
        assert_eq!(session.inflight_len(), 1, "one large message in flight");
        assert!(nothing_more(&mut sub), "the next only after this one's PUBACK");
        sub.send(&puback(p.packet_id.expect("QoS 1"))).await;
    }
    until("the last acknowledgement", || session.inflight_len() == 0).await;

    // Six 10-byte messages: the count window (4) stops them, not the bytes.
    for i in 1..=6u16 {
        publisher.send(&publish_packet("big", 1, Some(10 + i), false, None, b"small msg!")).await;
        expect_puback(&mut publisher, 10 + i, "small").await;
    }
    let mut ids = Vec::new();
    for _ in 0..4 {
        match sub.recv().await {
            Some(Packet::Publish(p)) => ids.push(p.packet_id.expect("QoS 1")),
            other => panic!("expected a small message, got {other:?}"),
        }
    }
    until("two to wait in the queue", || session.queue_len() == 2).await;
    assert_eq!(session.inflight_len(), 4, "the window is full, by count");
    for id in ids {
        sub.send(&puback(id)).await;
    }
    for _ in 0..2 {
        assert!(matches!(sub.recv().await, Some(Packet::Publish(_))), "the last two follow the acks");
    }
}
