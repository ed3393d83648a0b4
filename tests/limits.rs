//! Every client-reachable limit through the real server: the abusive client is stopped, the
//! refusal is counted, and a healthy client (another address, or the same address where the
//! limit is per client) still connects and exchanges messages at QoS 1.
//!
//! Several hosts are simulated with the loopback network: Linux routes all of 127.0.0.0/8 to
//! the loopback interface, so a client can bind 127.0.0.2 as its source address.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::packets::{publish_packet, subscribe_packet};
use common::{Raw, TestServer, auth, connect_bytes};
use mesgd::limits::LimitCounts;
use mesgd_core::mqtt::{Packet, ProtocolVersion, QoS, ReasonCode};

const V3: ProtocolVersion = ProtocolVersion::V311;
const V5: ProtocolVersion = ProtocolVersion::V5;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

fn counts(server: &TestServer) -> LimitCounts {
    server.server.as_ref().expect("running").context().limits().counters.snapshot()
}

/// A healthy client from `source` subscribes at QoS 1, another publishes at QoS 1, and the
/// message arrives at QoS 1 and is acknowledged end to end.
async fn healthy_exchange(server: &TestServer, source: &str, tag: &str) {
    let topic = format!("healthy/{tag}");
    let mut sub = Raw::open_from(server.addr, ip(source), V5).await;
    sub.send(&connect_bytes(5, &format!("{tag}-sub"), 0x02)).await;
    assert!(matches!(sub.recv().await, Some(Packet::ConnAck(c)) if !c.reason_code.is_error()), "{tag}: sub");
    sub.send(&subscribe_packet(1, &topic, 1, true)).await;
    match sub.recv().await {
        Some(Packet::SubAck(s)) => assert_eq!(s.reason_codes, vec![ReasonCode::GrantedQoS1], "{tag}"),
        other => panic!("{tag}: expected SUBACK, got {other:?}"),
    }
    let mut publisher = Raw::open_from(server.addr, ip(source), V3).await;
    publisher.send(&connect_bytes(4, &format!("{tag}-pub"), 0x02)).await;
    match publisher.recv().await {
        Some(Packet::ConnAck(c)) => assert!(!c.reason_code.is_error(), "{tag}: publisher {c:?}"),
        other => panic!("{tag}: publisher: {other:?}"),
    }
    publisher.send(&publish_packet(&topic, 1, Some(7), false, None, b"still fine")).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(a)) if a.packet_id == 7), "{tag}: PUBACK");
    match sub.recv().await {
        Some(Packet::Publish(p)) => {
            assert_eq!(p.qos, QoS::AtLeastOnce, "{tag}");
            assert_eq!(&p.payload[..], b"still fine", "{tag}");
        }
        other => panic!("{tag}: expected the PUBLISH, got {other:?}"),
    }
}

/// Whether the server closes `raw` without answering its CONNECT.
async fn refused_at_once(raw: &mut Raw, client_id: &str) -> bool {
    // The write may already fail if the server's close arrived first; either way nothing but
    // the close may come back.
    let _ = tokio::io::AsyncWriteExt::write_all(&mut raw.stream, &connect_bytes(4, client_id, 0x02)).await;
    raw.until_closed().await.is_empty()
}

#[tokio::test]
async fn connections_per_ip_stop_one_address_and_not_another() {
    let server = TestServer::start("[limits]\nmax_connections_per_ip = 3\nexempt = [\"127.0.0.3\"]\n").await;
    let mut held = Vec::new();
    for i in 0..3 {
        let mut raw = Raw::open_from(server.addr, ip("127.0.0.2"), V3).await;
        raw.send(&connect_bytes(4, &format!("flood-{i}"), 0x02)).await;
        assert!(matches!(raw.recv().await, Some(Packet::ConnAck(_))), "connection {i} is within the limit");
        held.push(raw);
    }
    let mut fourth = Raw::open_from(server.addr, ip("127.0.0.2"), V3).await;
    assert!(refused_at_once(&mut fourth, "flood-3").await, "the fourth connection is closed unanswered");
    assert_eq!(counts(&server).connections_per_ip, 1);

    // Other addresses are untouched, and an exempt address is not counted at all.
    healthy_exchange(&server, "127.0.0.1", "other-address").await;
    let mut exempt = Vec::new();
    for i in 0..5 {
        exempt.push(Raw::connected_from(&server, ip("127.0.0.3"), &format!("proxy-{i}")).await);
    }
    assert_eq!(counts(&server).connections_per_ip, 1);

    // Closing a connection gives its address the place back.
    drop(held.pop());
    let limits = server.server.as_ref().expect("running").context().limits();
    common::within("the closed connection to be uncounted", async {
        while limits.per_ip.open_from(ip("127.0.0.2")) > 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    Raw::connected_from(&server, ip("127.0.0.2"), "flood-again").await;
}

#[tokio::test]
async fn subscriptions_per_client_are_capped_for_that_client_only() {
    let server = TestServer::start("[limits]\nmax_subscriptions_per_client = 3\n").await;
    for (version, level, over) in [(V5, 5, ReasonCode::QuotaExceeded), (V3, 4, ReasonCode::UnspecifiedError)]
    {
        let mut greedy = Raw::open(server.addr, version).await;
        greedy.send(&connect_bytes(level, &format!("greedy-{level}"), 0x02)).await;
        assert!(matches!(greedy.recv().await, Some(Packet::ConnAck(_))));
        for (id, filter) in [(1, "a/1"), (2, "a/2"), (3, "a/3"), (4, "a/4"), (5, "a/2")] {
            greedy.send(&subscribe_packet(id, filter, 1, version == V5)).await;
            let Some(Packet::SubAck(ack)) = greedy.recv().await else { panic!("no SUBACK for {filter}") };
            let expected = if id == 4 { over } else { ReasonCode::GrantedQoS1 };
            // The fifth re-subscribes an existing filter: a replacement, not a new subscription.
            assert_eq!(ack.reason_codes, vec![expected], "v{level} {filter} (#{id})");
        }
    }
    assert_eq!(counts(&server).subscriptions, 2);
    healthy_exchange(&server, "127.0.0.1", "subscriptions").await;
}

#[tokio::test]
async fn topics_longer_than_the_limit_are_refused_and_counted() {
    let server = TestServer::start("[limits]\nmax_topic_length = 32\n").await;
    let long = "x/".repeat(20);
    let mut client = Raw::connected(server.addr, V5, "long-topics").await;
    client.send(&subscribe_packet(1, &long, 1, true)).await;
    let Some(Packet::SubAck(ack)) = client.recv().await else { panic!("no SUBACK") };
    assert_eq!(ack.reason_codes, vec![ReasonCode::TopicFilterInvalid]);
    client.send(&subscribe_packet(2, "x/fits", 1, true)).await;
    let Some(Packet::SubAck(ack)) = client.recv().await else { panic!("no SUBACK") };
    assert_eq!(ack.reason_codes, vec![ReasonCode::GrantedQoS1], "a filter within the limit");

    client.send(&publish_packet(&long, 1, Some(3), false, Some(&[]), b"too long")).await;
    assert_eq!(auth::disconnect_reason(&mut client).await, Some(ReasonCode::TopicNameInvalid));
    assert_eq!(counts(&server).topic_length, 2);
    healthy_exchange(&server, "127.0.0.1", "topics").await;
}

#[tokio::test]
async fn a_slowloris_is_closed_at_the_connect_deadline() {
    let server = TestServer::start("[limits]\nconnect_timeout_ms = 400\n").await;
    let connect = connect_bytes(4, "drip", 0x02);
    // The first connection sends half a CONNECT and stops; the second drips one byte every 50
    // ms, which would finish the CONNECT well after the deadline: the deadline is counted from
    // the accept, not from the last byte.
    let mut stalled = Raw::open_from(server.addr, ip("127.0.0.2"), V3).await;
    stalled.send(&connect[..connect.len() / 2]).await;
    let mut drip = Raw::open_from(server.addr, ip("127.0.0.2"), V3).await;
    assert!(
        Duration::from_millis(50) * connect.len() as u32 > Duration::from_millis(800),
        "outlasts the deadline"
    );
    for byte in &connect {
        if tokio::io::AsyncWriteExt::write_all(&mut drip.stream, std::slice::from_ref(byte)).await.is_err() {
            break; // the server has closed it
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(drip.until_closed().await.is_empty(), "no CONNACK for the drip");
    assert!(stalled.until_closed().await.is_empty(), "no CONNACK for the stalled one");
    assert_eq!(counts(&server).handshake_timeouts, 2);
    healthy_exchange(&server, "127.0.0.1", "slowloris").await;
}

/// Writes `request` on a new connection to `addr` and reads until the server closes it.
async fn http_exchange(addr: std::net::SocketAddr, request: &[u8], what: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    let mut answer = Vec::new();
    common::within(what, stream.read_to_end(&mut answer)).await.expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_request_body_that_stops_is_answered_408_at_the_connect_deadline() {
    let server = TestServer::start(
        "[limits]\nconnect_timeout_ms = 400\n[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n",
    )
    .await;
    let http = server.server.as_ref().unwrap().local_addr("http").expect("http listener");
    // Headers complete, a body announced as 100 bytes, ten of them sent, then nothing: the
    // header timeout is over, so only the body deadline can end it. Neither route needs a
    // credential, so neither refuses before reading.
    for path in ["/api/patterns/compile", "/auth/login"] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"sample\":"
        );
        let started = Instant::now();
        let answer = http_exchange(http, request.as_bytes(), path).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{path}: {answer}");
        assert!(started.elapsed() >= Duration::from_millis(400), "{path}: not before the deadline");
    }
    assert_eq!(counts(&server).body_timeouts, 2);
    let metrics = reqwest::get(format!("http://{http}/metrics")).await.unwrap().text().await.unwrap();
    assert!(
        metrics.lines().any(|l| l == r#"mesgd_limit_refusals_total{limit="body_timeouts"} 2"#),
        "{metrics}"
    );
    // A body that arrives in time is answered as before.
    let body = br#"{"sample":{"kind":"chat"},"modes":{"kind":"exact"}}"#;
    let mut request = format!(
        "POST /api/patterns/compile HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    let answer = http_exchange(http, &request, "the compile answer").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#"{"pattern":"/kind=chat"}"#), "{answer}");
    assert_eq!(counts(&server).body_timeouts, 2);
    healthy_exchange(&server, "127.0.0.1", "body").await;
}

#[tokio::test]
async fn a_request_body_over_its_routes_cap_is_answered_413_and_counted() {
    let server =
        TestServer::start("[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n").await;
    let http = server.server.as_ref().unwrap().local_addr("http").expect("http listener");
    let client = reqwest::Client::new();
    let sample = |text_len: usize| {
        format!(
            r#"{{"sample":{{"kind":"chat","text":"{}"}},"modes":{{"kind":"exact"}}}}"#,
            "x".repeat(text_len)
        )
    };
    // Over the cap, on each route that reads a body without a credential first: the pattern
    // compiler (64 KiB) and /auth (16 KiB). The REST API's cap (`http.max_body_bytes`) is
    // checked in tests/api_rest.rs, behind an API token.
    for (path, size) in [("/api/patterns/compile", 65 * 1024), ("/auth/login", 17 * 1024)] {
        let answer = client
            .post(format!("http://{http}{path}"))
            .header("content-type", "application/json")
            .body(sample(size))
            .send()
            .await
            .expect("an answer");
        assert_eq!(answer.status(), reqwest::StatusCode::PAYLOAD_TOO_LARGE, "{path}");
    }
    assert_eq!(counts(&server).body_size, 2);
    let metrics = reqwest::get(format!("http://{http}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == r#"mesgd_limit_refusals_total{limit="body_size"} 2"#), "{metrics}");
    // Under the cap, the same request is answered.
    let answer = client
        .post(format!("http://{http}/api/patterns/compile"))
        .header("content-type", "application/json")
        .body(sample(1000))
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    assert_eq!(answer.text().await.unwrap(), r#"{"pattern":"/kind=chat"}"#);
    assert_eq!(counts(&server).body_size, 2);
    healthy_exchange(&server, "127.0.0.1", "body-size").await;
}

#[tokio::test]
async fn a_guesser_behind_a_nat_slows_its_neighbours_only_by_the_address_delay() {
    let config = format!(
        "[auth]\nallow_anonymous = false\n[auth.failed_login]\nmax_failures = 2\nbase_delay_ms = 400\n\
         max_delay_ms = 5000\naddress_max_failures = 3\nmax_address_delay_ms = 100\n[mqtt]\nsys_interval = 0\n{}",
        auth::jwt_provider("")
    );
    let server = TestServer::start_with(&config).await;
    let nat = ip("127.0.0.2");
    let login = |source: IpAddr, user: &'static str, password: Vec<u8>| {
        let addr = server.addr;
        async move {
            let mut raw = Raw::open_from(addr, source, V5).await;
            let started = Instant::now();
            raw.send(&auth::login_bytes(5, user, Some(user), Some(&password))).await;
            match raw.recv().await {
                Some(Packet::ConnAck(c)) => (c.reason_code, started.elapsed()),
                other => panic!("expected CONNACK, got {other:?}"),
            }
        }
    };
    for _ in 0..4 {
        let (code, _) = login(nat, "mallory", b"not a token".to_vec()).await;
        assert_eq!(code, ReasonCode::BadUserNameOrPassword);
    }
    // Attempts 3 and 4 were slowed (400 ms, 800 ms); the next of mallory's waits 1.6 s.
    assert_eq!(counts(&server).logins_throttled, 2);
    let alice_token = auth::token("alice", None).into_bytes();
    let (code, waited) = login(nat, "alice", alice_token.clone()).await;
    assert_eq!(code, ReasonCode::Success, "alice behind the same address logs in");
    assert!(waited >= Duration::from_millis(100), "the address's delay applies: {waited:?}");
    assert!(waited < Duration::from_millis(1600), "but not mallory's: {waited:?}");
    assert_eq!(counts(&server).logins_throttled, 3);
    let (code, waited) = login(ip("127.0.0.1"), "mallory", b"still not a token".to_vec()).await;
    assert_eq!(code, ReasonCode::BadUserNameOrPassword);
    assert!(waited >= Duration::from_millis(1600), "mallory is slowed from anywhere: {waited:?}");
    let (code, _) = login(ip("127.0.0.4"), "alice", alice_token).await;
    assert_eq!(code, ReasonCode::Success);
    assert_eq!(counts(&server).logins_throttled, 4, "alice from another address was not slowed");
}

impl Raw {
    /// Opens a connection from `source` and completes a 3.1.1 CONNECT, asserting success.
    async fn connected_from(server: &TestServer, source: IpAddr, client_id: &str) -> Raw {
        let mut raw = Raw::open_from(server.addr, source, V3).await;
        raw.send(&connect_bytes(4, client_id, 0x02)).await;
        assert!(
            matches!(raw.recv().await, Some(Packet::ConnAck(c)) if !c.reason_code.is_error()),
            "{client_id}"
        );
        raw
    }
}

#[tokio::test]
async fn retained_messages_past_the_caps_are_delivered_but_not_kept() {
    // Weights: topic + payload. "r/0".."r/9" with a 7-byte payload weigh 10 each.
    let server = TestServer::start(
        "[limits]\nmax_retained_messages = 3\nmax_retained_bytes = 35\n[mqtt]\nsys_interval = 0\n",
    )
    .await;
    let mut live = Raw::connected(server.addr, V3, "retained-live").await;
    live.send(&subscribe_packet(1, "r/#", 1, false)).await;
    assert!(matches!(live.recv().await, Some(Packet::SubAck(_))));
    let mut publisher = Raw::connected(server.addr, V3, "retained-pub").await;
    for i in 0..5u16 {
        publisher.send(&publish_packet(&format!("r/{i}"), 1, Some(i + 1), true, None, b"payload")).await;
        assert!(
            matches!(publisher.recv().await, Some(Packet::PubAck(a)) if a.packet_id == i + 1),
            "PUBACK {i}"
        );
        // Every one reaches the subscriber that is there, kept or not.
        match live.recv().await {
            Some(Packet::Publish(p)) => assert_eq!(&*p.topic, format!("r/{i}").as_str()),
            other => panic!("expected r/{i}, got {other:?}"),
        }
    }
    let ctx = server.server.as_ref().unwrap().context();
    assert_eq!(ctx.limit_counts().retained, 2, "r/3 and r/4 were not kept");
    // A replacement that fits the bytes is kept; one that does not is refused.
    publisher.send(&publish_packet("r/0", 1, Some(10), true, None, b"p")).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(_))));
    publisher.send(&publish_packet("r/1", 1, Some(11), true, None, &[b'x'; 30])).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(_))));
    assert_eq!(ctx.limit_counts().retained, 3);

    // A new subscriber gets what was kept: r/0 (replaced), r/1 (the first one), r/2.
    let mut late = Raw::connected(server.addr, V3, "retained-late").await;
    late.send(&subscribe_packet(1, "r/#", 0, false)).await;
    assert!(matches!(late.recv().await, Some(Packet::SubAck(_))));
    let mut kept = Vec::new();
    for _ in 0..3 {
        match late.recv().await {
            Some(Packet::Publish(p)) => kept.push((p.topic.to_string(), p.payload.to_vec())),
            other => panic!("expected a retained message, got {other:?}"),
        }
    }
    kept.sort();
    let expected: Vec<(String, Vec<u8>)> = vec![
        ("r/0".into(), b"p".to_vec()),
        ("r/1".into(), b"payload".to_vec()),
        ("r/2".into(), b"payload".to_vec()),
    ];
    assert_eq!(kept, expected);
    // Nothing more: a PINGREQ's answer comes next.
    late.send(&[0xC0, 0]).await;
    assert!(matches!(late.recv().await, Some(Packet::PingResp)), "only the kept messages are replayed");

    // A delete always goes through, and makes room for a new topic.
    publisher.send(&publish_packet("r/2", 1, Some(12), true, None, b"")).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(_))));
    publisher.send(&publish_packet("r/9", 1, Some(13), true, None, b"payload")).await;
    assert!(matches!(publisher.recv().await, Some(Packet::PubAck(_))));
    assert_eq!(ctx.broker().retained().len(), 3);
    assert_eq!(ctx.limit_counts().retained, 3);
    healthy_exchange(&server, "127.0.0.1", "retained").await;
}

/// An MQTT 5 CONNECT asking for a session that outlives the connection (expiry one hour).
fn connect_v5_persistent(client_id: &str) -> Vec<u8> {
    let mut body = common::packets::mqtt_str("MQTT");
    body.extend_from_slice(&[5, 0x00, 0, 60]);
    body.extend(common::packets::property_block(&[0x11, 0, 0, 0x0E, 0x10]));
    body.extend_from_slice(&common::packets::mqtt_str(client_id));
    common::packets::packet(0x10, &body)
}

#[tokio::test]
async fn max_sessions_refuses_new_persistent_sessions_only() {
    let server = TestServer::start("[limits]\nmax_connections = 3\nmax_sessions = 3\n").await;
    // Three persistent sessions, left offline (3.1.1 clean session 0).
    for i in 0..3 {
        let mut raw = Raw::open(server.addr, V3).await;
        raw.send(&connect_bytes(4, &format!("kept-{i}"), 0x00)).await;
        assert!(
            matches!(raw.recv().await, Some(Packet::ConnAck(c)) if !c.reason_code.is_error()),
            "kept-{i}"
        );
        raw.send(&[0xE0, 0]).await;
        raw.until_closed().await;
    }
    let ctx = server.server.as_ref().unwrap().context();
    // A fourth is refused: 5.0 with 0x97, 3.1.1 with return code 3 (server unavailable).
    let mut v5 = Raw::open(server.addr, V5).await;
    v5.send(&connect_v5_persistent("fourth-5")).await;
    match v5.recv().await {
        Some(Packet::ConnAck(c)) => assert_eq!(c.reason_code, ReasonCode::QuotaExceeded),
        other => panic!("expected CONNACK 0x97, got {other:?}"),
    }
    let mut v3 = Raw::open(server.addr, V3).await;
    v3.send(&connect_bytes(4, "fourth-3", 0x00)).await;
    match v3.recv().await {
        Some(Packet::ConnAck(c)) => assert_eq!(c.reason_code, ReasonCode::ServerUnavailable, "3.x code 3"),
        other => panic!("expected CONNACK 3, got {other:?}"),
    }
    assert_eq!(ctx.limit_counts().sessions, 2);
    assert_eq!(ctx.broker().session_count(), 3);
    // The refused connections are closed (their places in max_connections free again).
    assert!(v5.until_closed().await.is_empty() && v3.until_closed().await.is_empty());
    // A client resuming its own session, and clients with clean sessions, still connect.
    let mut back = Raw::open(server.addr, V3).await;
    back.send(&connect_bytes(4, "kept-0", 0x00)).await;
    assert!(matches!(back.recv().await, Some(Packet::ConnAck(c)) if c.session_present));
    back.send(&[0xE0, 0]).await;
    back.until_closed().await;
    // Every place in max_connections is free once the server has ended those connections.
    let running = server.server.as_ref().unwrap();
    common::within("the closed connections' places back", async {
        while running.open_connections() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    healthy_exchange(&server, "127.0.0.1", "sessions").await;
    assert_eq!(ctx.limit_counts().sessions, 2);
}
