//! MQTT 5.0 end to end: rumqttc's v5 client against the in-process server, and raw bytes where
//! the library cannot say what a case needs (topic aliases in both directions, DISCONNECT with a
//! reason, a client that falls silent, QoS 2 flows left open).
//!
//! A few behaviours are about time (will delay, message and session expiry, keep-alive); their
//! intervals are 1–2 s, and each asserts both "not yet" (through a round trip) and "then yes".

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::packets::{property_block, publish_packet, subscribe_packet};
use common::v5::{self, QoS};
use common::{Raw, TestServer, mqtt_str, packet};
use mesgd_core::mqtt::{ConnAck, Packet, ProtocolVersion, ReasonCode};
use rumqttc::v5::mqttbytes::v5::{
    ConnectReturnCode, Filter, LastWill, LastWillProperties, PubAckReason, PubCompReason, PubRecReason,
    Publish, PublishProperties, RetainForwardRule, SubscribeProperties, SubscribeReasonCode, UnsubAckReason,
};

const V5: ProtocolVersion = ProtocolVersion::V5;

// ----------------------------------------------------------------------------------------- helpers

fn topic(p: &Publish) -> &str {
    std::str::from_utf8(&p.topic).expect("UTF-8 topic")
}

async fn puback(c: &mut v5::Client) -> PubAckReason {
    c.next("PUBACK", |p| if let v5::Packet::PubAck(a) = p { Some(a.reason) } else { None }).await
}

async fn pubrec(c: &mut v5::Client) -> PubRecReason {
    c.next("PUBREC", |p| if let v5::Packet::PubRec(r) = p { Some(r.reason) } else { None }).await
}

async fn pubcomp(c: &mut v5::Client) -> PubCompReason {
    c.next("PUBCOMP", |p| if let v5::Packet::PubComp(r) = p { Some(r.reason) } else { None }).await
}

/// Publishes at QoS 1 and waits for the PUBACK, so the broker has routed the message when this
/// returns.
async fn publish_acked(
    c: &mut v5::Client,
    topic: &str,
    retain: bool,
    payload: impl Into<Bytes>,
) -> PubAckReason {
    c.client.publish(topic, QoS::AtLeastOnce, retain, payload).await.expect("publish request");
    puback(c).await
}

async fn publish_acked_with(
    c: &mut v5::Client,
    topic: &str,
    retain: bool,
    payload: impl Into<Bytes>,
    properties: PublishProperties,
) -> PubAckReason {
    c.client
        .publish_with_properties(topic, QoS::AtLeastOnce, retain, payload, properties)
        .await
        .expect("publish request");
    puback(c).await
}

fn expiring(seconds: u32) -> PublishProperties {
    PublishProperties { message_expiry_interval: Some(seconds), ..Default::default() }
}

/// The topics `sub` receives up to and including `marker`: everything queued for it before the
/// marker was published.
async fn topics_until(sub: &mut v5::Client, marker: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let p = sub.next_publish().await;
        let t = topic(&p).to_owned();
        if t == marker {
            return seen;
        }
        seen.push(t);
    }
}

/// Waits until `client_id`'s connection has been detached from its session (or the session is
/// gone), so that what follows happens with the client offline.
async fn wait_offline(server: &TestServer, client_id: &str) {
    if let Some(session) = server.broker().session(&mesgd_core::model::SessionKey::mqtt(client_id)) {
        common::within("the session to go offline", session.wait_detached()).await;
    }
}

fn persistent(id: &str, port: u16, session_expiry: u32) -> v5::MqttOptions {
    let mut o = v5::options(id, port);
    o.set_clean_start(false);
    o.set_session_expiry_interval(Some(session_expiry));
    o
}

fn filter(path: &str, qos: QoS) -> Filter {
    Filter::new(path, qos)
}

fn assert_server_disconnect(error: &str, reason: &str) {
    assert!(
        error.contains("ServerDisconnect") && error.contains(&format!("reason_code: {reason}")),
        "expected DISCONNECT {reason}, got {error}"
    );
}

// --------------------------------------------------------------------------------------- raw bytes

/// A clean-start MQTT 5 CONNECT with the given CONNECT properties and an optional QoS 0 will
/// (topic, payload) without will properties.
fn connect_v5(client_id: &str, keep_alive: u16, properties: &[u8], will: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut body = mqtt_str("MQTT");
    body.push(5);
    body.push(if will.is_some() { 0x02 | 0x04 } else { 0x02 });
    body.extend_from_slice(&keep_alive.to_be_bytes());
    body.extend(property_block(properties));
    body.extend(mqtt_str(client_id));
    if let Some((topic, payload)) = will {
        body.push(0);
        body.extend(mqtt_str(topic));
        body.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        body.extend_from_slice(payload);
    }
    packet(0x10, &body)
}

fn publish_v5(topic: &str, qos: u8, packet_id: Option<u16>, properties: &[u8], payload: &[u8]) -> Vec<u8> {
    publish_packet(topic, qos, packet_id, false, Some(properties), payload)
}

fn subscribe_v5(packet_id: u16, filter: &str, options: u8) -> Vec<u8> {
    subscribe_packet(packet_id, filter, options, true)
}

/// Topic Alias property (0x23).
fn alias(a: u16) -> Vec<u8> {
    let mut v = vec![0x23];
    v.extend_from_slice(&a.to_be_bytes());
    v
}

async fn open_v5(server: &TestServer, connect: &[u8]) -> (Raw, ConnAck) {
    let mut raw = Raw::open(server.addr, V5).await;
    raw.send(connect).await;
    match raw.recv().await {
        Some(Packet::ConnAck(c)) => (raw, c),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

async fn disconnect_reason(raw: &mut Raw) -> Option<ReasonCode> {
    raw.until_closed().await.into_iter().find_map(|p| match p {
        Packet::Disconnect(d) => Some(d.reason_code),
        _ => None,
    })
}

async fn raw_publish(raw: &mut Raw) -> mesgd_core::mqtt::Publish {
    match raw.recv().await {
        Some(Packet::Publish(p)) => p,
        other => panic!("expected PUBLISH, got {other:?}"),
    }
}

// -------------------------------------------------------------------------------------- 1. CONNACK

#[tokio::test]
async fn connack_advertises_limits_features_and_what_the_server_chose() {
    let server = TestServer::start(
        "[mqtt]\nsys_interval = 0\nmax_qos = 1\n\
         [limits]\nmax_keep_alive = 10\nmax_session_expiry = 100\nmax_inflight = 7\n\
         max_packet_size = 4096\nmax_topic_alias = 5\n",
    )
    .await;
    let mut o = v5::options("", server.port());
    o.set_keep_alive(Duration::from_secs(60));
    o.set_session_expiry_interval(Some(1000));
    let (mut c, connack) = v5::connect(o).await;
    assert_eq!(connack.code, ConnectReturnCode::Success);
    let p = connack.properties.expect("CONNACK properties");
    assert_eq!(p.receive_max, Some(7));
    assert_eq!(p.max_packet_size, Some(4096));
    assert_eq!(p.topic_alias_max, Some(5));
    assert_eq!(p.retain_available, Some(1));
    assert_eq!(p.wildcard_subscription_available, Some(1));
    assert_eq!(p.subscription_identifiers_available, Some(1));
    assert_eq!(p.shared_subscription_available, Some(1));
    assert_eq!(p.max_qos, Some(1));
    assert_eq!(p.server_keep_alive, Some(10), "asked for 60, capped at max_keep_alive");
    assert_eq!(p.session_expiry_interval, Some(100), "asked for 1000, capped at max_session_expiry");
    let id = p.assigned_client_identifier.expect("an assigned client identifier for an empty id");
    assert!(id.starts_with("mesgd-") && id.len() == "mesgd-".len() + 16, "{id}");
    assert!(
        server.broker().session(&mesgd_core::model::SessionKey::mqtt(id.as_str())).is_some(),
        "the session lives under the assigned id"
    );
    // Maximum QoS 1 is what a QoS 2 subscription is granted.
    let ack = c.subscribe("anything", QoS::ExactlyOnce).await;
    assert_eq!(ack.return_codes, [SubscribeReasonCode::Success(QoS::AtLeastOnce)]);

    // Defaults: QoS 2 is not advertised (absent means 2), nothing was changed, no id assigned.
    let plain = TestServer::start("").await;
    let (_c, connack) = v5::connect(v5::options("named", plain.port())).await;
    let p = connack.properties.expect("CONNACK properties");
    assert_eq!((p.max_qos, p.server_keep_alive, p.session_expiry_interval), (None, None, None));
    assert_eq!(p.assigned_client_identifier, None);
    assert_eq!(p.receive_max, Some(32));

    // Features turned off are advertised as unavailable.
    let off = TestServer::start(
        "[mqtt]\nsys_interval = 0\nretain_available = false\nwildcard_subscriptions = false\n\
         shared_subscriptions = false\nsubscription_identifiers = false\n",
    )
    .await;
    let (_c, connack) = v5::connect(v5::options("spartan", off.port())).await;
    let p = connack.properties.expect("CONNACK properties");
    assert_eq!(p.retain_available, Some(0));
    assert_eq!(p.wildcard_subscription_available, Some(0));
    assert_eq!(p.subscription_identifiers_available, Some(0));
    assert_eq!(p.shared_subscription_available, Some(0));
}

// --------------------------------------------------------------------------------- 2. reason codes

#[tokio::test]
async fn acknowledgements_carry_reason_codes() {
    let server = TestServer::start("").await;
    let (mut publisher, _) = v5::connect(v5::options("rc-pub", server.port())).await;

    // Nobody subscribed: QoS 1 gets PUBACK 0x10; QoS 2 gets PUBREC 0x10 and the flow completes.
    assert_eq!(publish_acked(&mut publisher, "rc/x", false, "1").await, PubAckReason::NoMatchingSubscribers);
    publisher.client.publish("rc/x", QoS::ExactlyOnce, false, "2").await.unwrap();
    assert_eq!(pubrec(&mut publisher).await, PubRecReason::NoMatchingSubscribers);
    assert_eq!(pubcomp(&mut publisher).await, PubCompReason::Success);

    // SUBACK: the granted QoS per filter, 0x8F for filters the server refuses.
    let (mut sub, _) = v5::connect(v5::options("rc-sub", server.port())).await;
    sub.client
        .subscribe_many([
            filter("rc/0", QoS::AtMostOnce),
            filter("rc/1", QoS::AtLeastOnce),
            filter("rc/+", QoS::ExactlyOnce),
            filter("$share/g", QoS::AtLeastOnce),
            filter("$share//rc/x", QoS::AtLeastOnce),
        ])
        .await
        .unwrap();
    let ack = sub.suback().await;
    assert_eq!(
        ack.return_codes,
        [
            SubscribeReasonCode::Success(QoS::AtMostOnce),
            SubscribeReasonCode::Success(QoS::AtLeastOnce),
            SubscribeReasonCode::Success(QoS::ExactlyOnce),
            SubscribeReasonCode::TopicFilterInvalid,
            SubscribeReasonCode::TopicFilterInvalid,
        ]
    );
    assert_eq!(server.broker().router().len(), 3, "refused filters were not added");

    // Now someone listens: success codes, and the QoS 2 message arrives once, at QoS 2.
    assert_eq!(publish_acked(&mut publisher, "rc/x", false, "3").await, PubAckReason::Success);
    publisher.client.publish("rc/x", QoS::ExactlyOnce, false, "4").await.unwrap();
    assert_eq!(pubrec(&mut publisher).await, PubRecReason::Success);
    assert_eq!(pubcomp(&mut publisher).await, PubCompReason::Success);
    let first = sub.next_publish().await;
    assert_eq!((&first.payload[..], first.qos), (&b"3"[..], QoS::AtLeastOnce));
    let second = sub.next_publish().await;
    assert_eq!((&second.payload[..], second.qos), (&b"4"[..], QoS::ExactlyOnce));

    // UNSUBACK: 0x11 for a filter never subscribed, 0x00 for one that was.
    sub.client.unsubscribe("rc/never").await.unwrap();
    let reasons =
        sub.next("UNSUBACK", |p| if let v5::Packet::UnsubAck(u) = p { Some(u.reasons) } else { None }).await;
    assert_eq!(reasons, [UnsubAckReason::NoSubscriptionExisted]);
    sub.client.unsubscribe("rc/+").await.unwrap();
    let reasons =
        sub.next("UNSUBACK", |p| if let v5::Packet::UnsubAck(u) = p { Some(u.reasons) } else { None }).await;
    assert_eq!(reasons, [UnsubAckReason::Success]);
    assert_eq!(server.broker().router().len(), 2);
}

// -------------------------------------------------------------------------------- 3, 4. properties

#[tokio::test]
async fn message_properties_are_forwarded_unchanged() {
    let server = TestServer::start("").await;
    let (mut sub, _) = v5::connect(v5::options("props-sub", server.port())).await;
    sub.subscribe("props/#", QoS::AtLeastOnce).await;
    let (mut publisher, _) = v5::connect(v5::options("props-pub", server.port())).await;
    let user_properties: Vec<(String, String)> = [("k", "first"), ("a", "second"), ("k", "third")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let sent = PublishProperties {
        payload_format_indicator: Some(1),
        content_type: Some("application/json".into()),
        response_topic: Some("props/replies/42".into()),
        correlation_data: Some(Bytes::from_static(&[0, 1, 2, 0xff])),
        user_properties: user_properties.clone(),
        ..Default::default()
    };
    assert_eq!(
        publish_acked_with(&mut publisher, "props/req", false, r#"{"q":1}"#, sent).await,
        PubAckReason::Success
    );
    let got = sub.next_publish().await;
    let p = got.properties.expect("properties forwarded");
    assert_eq!(p.user_properties, user_properties, "user properties, in order, repeats kept");
    assert_eq!(p.payload_format_indicator, Some(1));
    assert_eq!(p.content_type.as_deref(), Some("application/json"));
    assert_eq!(p.response_topic.as_deref(), Some("props/replies/42"));
    assert_eq!(p.correlation_data.as_deref(), Some(&[0, 1, 2, 0xff][..]));
    assert_eq!(p.message_expiry_interval, None);

    // A message without properties arrives without them.
    assert_eq!(publish_acked(&mut publisher, "props/bare", false, "x").await, PubAckReason::Success);
    let bare = sub.next_publish().await;
    let p = bare.properties.unwrap_or_default();
    assert!(p.user_properties.is_empty() && p.content_type.is_none() && p.payload_format_indicator.is_none());
}

#[tokio::test]
async fn payload_that_is_not_utf8_despite_its_format_indicator_is_refused() {
    let server = TestServer::start("").await;
    let (mut sub, _) = v5::connect(v5::options("pfi-sub", server.port())).await;
    sub.subscribe("pfi/#", QoS::AtLeastOnce).await;
    let (mut publisher, _) = v5::connect(v5::options("pfi-pub", server.port())).await;
    let utf8 = || PublishProperties { payload_format_indicator: Some(1), ..Default::default() };
    let bad = vec![b'o', 0xff, 0xfe, b'k'];
    assert_eq!(
        publish_acked_with(&mut publisher, "pfi/bad", false, bad.clone(), utf8()).await,
        PubAckReason::PayloadFormatInvalid
    );
    // Format indicator 0 makes the same bytes acceptable.
    let binary = PublishProperties { payload_format_indicator: Some(0), ..Default::default() };
    assert_eq!(
        publish_acked_with(&mut publisher, "pfi/binary", false, bad.clone(), binary).await,
        PubAckReason::Success
    );
    assert_eq!(
        publish_acked_with(&mut publisher, "pfi/good", false, "ok ✓", utf8()).await,
        PubAckReason::Success
    );
    assert_eq!(topics_until(&mut sub, "pfi/good").await, ["pfi/binary"], "pfi/bad was not delivered");

    // At QoS 0 there is no acknowledgement to refuse with: the connection is closed with 0x99.
    publisher.client.publish_with_properties("pfi/bad", QoS::AtMostOnce, false, bad, utf8()).await.unwrap();
    assert_server_disconnect(&publisher.closed().await, "PayloadFormatInvalid");
}

// ------------------------------------------------------------------------------- 5. message expiry

#[tokio::test]
async fn retained_message_is_replayed_until_it_expires() {
    let server = TestServer::start("").await;
    let (mut publisher, _) = v5::connect(v5::options("exp-pub", server.port())).await;
    publish_acked_with(&mut publisher, "exp/short", true, "soon gone", expiring(1)).await;
    let published = Instant::now();
    publish_acked(&mut publisher, "exp/kept", true, "stays").await;

    // Not yet expired: replayed, with a remaining lifetime of at most the original.
    let (mut early, _) = v5::connect(v5::options("exp-early", server.port())).await;
    early.subscribe("exp/short", QoS::AtLeastOnce).await;
    let p = early.next_publish().await;
    assert_eq!((topic(&p), &p.payload[..], p.retain), ("exp/short", &b"soon gone"[..], true));
    assert_eq!(p.properties.and_then(|p| p.message_expiry_interval), Some(1));

    tokio::time::sleep_until((published + Duration::from_millis(1100)).into()).await;
    let (mut late, _) = v5::connect(v5::options("exp-late", server.port())).await;
    late.subscribe("exp/#", QoS::AtLeastOnce).await;
    publish_acked(&mut publisher, "exp/marker", false, "m").await;
    assert_eq!(topics_until(&mut late, "exp/marker").await, ["exp/kept"], "the expired message is gone");
}

#[tokio::test]
async fn queued_message_expires_offline_and_the_remaining_lifetime_is_sent() {
    let server = TestServer::start("").await;
    let options = persistent("exp-offline", server.port(), 60);
    let (mut sub, _) = v5::connect(options.clone()).await;
    sub.subscribe("q/#", QoS::AtLeastOnce).await;
    sub.disconnect().await;
    wait_offline(&server, "exp-offline").await;

    let (mut publisher, _) = v5::connect(v5::options("exp-q-pub", server.port())).await;
    let published = Instant::now();
    publish_acked_with(&mut publisher, "q/short", false, "1", expiring(1)).await;
    publish_acked_with(&mut publisher, "q/long", false, "2", expiring(60)).await;
    publish_acked(&mut publisher, "q/forever", false, "3").await;
    let session = server
        .broker()
        .session(&mesgd_core::model::SessionKey::mqtt("exp-offline"))
        .expect("persistent session");
    assert_eq!(session.queue_len(), 3, "all three are queued while the client is away");

    tokio::time::sleep_until((published + Duration::from_millis(1100)).into()).await;
    let (mut sub, connack) = v5::connect(options).await;
    assert!(connack.session_present);
    let long = sub.next_publish().await;
    assert_eq!(topic(&long), "q/long", "q/short expired in the queue");
    let left = long.properties.and_then(|p| p.message_expiry_interval).expect("an expiry interval");
    assert!(left > 0 && left < 60, "the remaining lifetime, not the original: {left}");
    let forever = sub.next_publish().await;
    assert_eq!(topic(&forever), "q/forever");
    assert_eq!(forever.properties.and_then(|p| p.message_expiry_interval), None);
}

// ------------------------------------------------------------------------------- 6. session expiry

#[tokio::test]
async fn session_expiry_interval_decides_how_long_a_session_outlives_its_connection() {
    let server = TestServer::start("").await;

    // 1 s: resumed right after a disconnect, gone a second later.
    let brief = persistent("brief", server.port(), 1);
    let (mut c, connack) = v5::connect(brief.clone()).await;
    assert!(!connack.session_present);
    c.subscribe("se/brief", QoS::AtLeastOnce).await;
    c.disconnect().await;
    wait_offline(&server, "brief").await;
    let (c, connack) = v5::connect(brief.clone()).await;
    assert!(connack.session_present, "not expired yet");
    c.disconnect().await;
    wait_offline(&server, "brief").await;
    let offline = Instant::now();

    // 60 s: queued QoS 1 messages wait for the client.
    let lasting = persistent("lasting", server.port(), 60);
    let (mut c, _) = v5::connect(lasting.clone()).await;
    c.subscribe("se/lasting", QoS::AtLeastOnce).await;
    c.disconnect().await;
    wait_offline(&server, "lasting").await;
    let (mut publisher, _) = v5::connect(v5::options("se-pub", server.port())).await;
    for i in 0..3u8 {
        assert_eq!(publish_acked(&mut publisher, "se/lasting", false, vec![i]).await, PubAckReason::Success);
    }

    tokio::time::sleep_until((offline + Duration::from_millis(1200)).into()).await;
    let (_c, connack) = v5::connect(brief).await;
    assert!(!connack.session_present, "the 1 s session expired");
    assert_eq!(
        server
            .broker()
            .session(&mesgd_core::model::SessionKey::mqtt("brief"))
            .map(|s| s.subscription_count()),
        Some(0),
        "a fresh session without the old subscription"
    );

    let (mut c, connack) = v5::connect(lasting).await;
    assert!(connack.session_present, "the 60 s session was resumed");
    for i in 0..3u8 {
        let p = c.next_publish().await;
        assert_eq!((topic(&p), &p.payload[..], p.qos), ("se/lasting", &[i][..], QoS::AtLeastOnce));
    }
}

// ------------------------------------------------------------------------- 7. subscription options

#[tokio::test]
async fn subscription_identifiers_travel_with_each_delivery() {
    let server = TestServer::start("").await;
    let (mut sub, _) = v5::connect(v5::options("ids", server.port())).await;
    for (path, id) in [("sid/+", 1), ("sid/a", 2)] {
        sub.client
            .subscribe_with_properties(
                path,
                QoS::AtLeastOnce,
                SubscribeProperties { id: Some(id), user_properties: Vec::new() },
            )
            .await
            .unwrap();
        sub.suback().await;
    }
    sub.subscribe("sid/#", QoS::AtLeastOnce).await;
    let (mut publisher, _) = v5::connect(v5::options("ids-pub", server.port())).await;
    for t in ["sid/a", "sid/b", "sid/c/d"] {
        publish_acked(&mut publisher, t, false, "x").await;
    }
    let mut expected: Vec<(&str, Vec<usize>)> =
        vec![("sid/a", vec![1, 2]), ("sid/b", vec![1]), ("sid/c/d", vec![])];
    for (t, ids) in expected.drain(..) {
        let p = sub.next_publish().await;
        assert_eq!(topic(&p), t, "one delivery per message");
        let mut got = p.properties.map(|p| p.subscription_identifiers).unwrap_or_default();
        got.sort();
        assert_eq!(got, ids, "identifiers on {t}");
    }
    // A retained message replayed at subscribe time carries that subscription's identifier.
    publish_acked(&mut publisher, "sidr/x", true, "r").await;
    sub.client
        .subscribe_with_properties(
            "sidr/+",
            QoS::AtLeastOnce,
            SubscribeProperties { id: Some(7), user_properties: Vec::new() },
        )
        .await
        .unwrap();
    sub.suback().await;
    let replayed = sub.next_publish().await;
    assert_eq!((topic(&replayed), replayed.retain), ("sidr/x", true));
    assert_eq!(replayed.properties.map(|p| p.subscription_identifiers), Some(vec![7]));
}

#[tokio::test]
async fn no_local_keeps_a_clients_own_messages_from_it() {
    let server = TestServer::start("").await;
    let (mut me, _) = v5::connect(v5::options("me", server.port())).await;
    me.client.subscribe_many([Filter { nolocal: true, ..filter("nl/#", QoS::AtLeastOnce) }]).await.unwrap();
    me.suback().await;
    me.subscribe("echo", QoS::AtLeastOnce).await;
    publish_acked(&mut me, "nl/mine", false, "m").await;
    publish_acked(&mut me, "echo", false, "e").await;
    let (mut other, _) = v5::connect(v5::options("other", server.port())).await;
    publish_acked(&mut other, "nl/theirs", false, "t").await;
    let first = me.next_publish().await;
    assert_eq!(topic(&first), "echo", "own message without no-local comes back; nl/mine did not");
    assert_eq!(topic(&me.next_publish().await), "nl/theirs");
}

#[tokio::test]
async fn retain_as_published_keeps_the_retain_flag_on_live_deliveries() {
    let server = TestServer::start("").await;
    let (mut keeps, _) = v5::connect(v5::options("rap-keeps", server.port())).await;
    keeps
        .client
        .subscribe_many([Filter { preserve_retain: true, ..filter("rap", QoS::AtLeastOnce) }])
        .await
        .unwrap();
    keeps.suback().await;
    let (mut clears, _) = v5::connect(v5::options("rap-clears", server.port())).await;
    clears.subscribe("rap", QoS::AtLeastOnce).await;
    let (mut publisher, _) = v5::connect(v5::options("rap-pub", server.port())).await;
    publish_acked(&mut publisher, "rap", true, "r").await;
    publish_acked(&mut publisher, "rap", false, "n").await;
    for (client, first_retain) in [(&mut keeps, true), (&mut clears, false)] {
        let p = client.next_publish().await;
        assert_eq!((&p.payload[..], p.retain), (&b"r"[..], first_retain));
        let p = client.next_publish().await;
        assert_eq!((&p.payload[..], p.retain), (&b"n"[..], false));
    }
}

#[tokio::test]
async fn retain_handling_decides_when_retained_messages_are_sent() {
    let server = TestServer::start("").await;
    let (mut publisher, _) = v5::connect(v5::options("rh-pub", server.port())).await;
    publish_acked(&mut publisher, "rh/t", true, "kept").await;
    let (mut sub, _) = v5::connect(v5::options("rh-sub", server.port())).await;
    sub.subscribe("rh/marker", QoS::AtLeastOnce).await;
    let steps = [
        ("rh/t", RetainForwardRule::OnEverySubscribe, &["rh/t"][..], "0: sent"),
        ("rh/t", RetainForwardRule::OnEverySubscribe, &["rh/t"][..], "0: sent again"),
        ("rh/+", RetainForwardRule::OnNewSubscribe, &["rh/t"][..], "1: new subscription, sent"),
        ("rh/+", RetainForwardRule::OnNewSubscribe, &[][..], "1: existing subscription, not sent"),
        ("rh/#", RetainForwardRule::Never, &[][..], "2: never sent"),
    ];
    for (path, rule, expected, what) in steps {
        sub.client
            .subscribe_many([Filter { retain_forward_rule: rule, ..filter(path, QoS::AtLeastOnce) }])
            .await
            .unwrap();
        sub.suback().await;
        publish_acked(&mut publisher, "rh/marker", false, "m").await;
        assert_eq!(topics_until(&mut sub, "rh/marker").await, expected, "retain handling {what}");
    }
}

// -------------------------------------------------------------------------------- 8. topic aliases

#[tokio::test]
async fn topic_aliases_from_the_client_are_resolved_and_can_be_remapped() {
    let server = TestServer::start("[limits]\nmax_topic_alias = 2\n").await;
    let (mut sub, _) = v5::connect(v5::options("alias-sub", server.port())).await;
    sub.subscribe("al/#", QoS::AtLeastOnce).await;
    let (mut raw, connack) = open_v5(&server, &connect_v5("alias-pub", 60, &[], None)).await;
    assert_eq!(connack.properties.topic_alias_maximum, Some(2));
    let sends = [("al/one", 1u8), ("", 2), ("al/two", 3), ("", 4)];
    for (i, (t, payload)) in sends.into_iter().enumerate() {
        let id = i as u16 + 1;
        raw.send(&publish_v5(t, 1, Some(id), &alias(1), &[payload])).await;
        match raw.recv().await {
            Some(Packet::PubAck(a)) => assert_eq!((a.packet_id, a.reason_code), (id, ReasonCode::Success)),
            other => panic!("expected PUBACK, got {other:?}"),
        }
    }
    for (t, payload) in [("al/one", 1u8), ("al/one", 2), ("al/two", 3), ("al/two", 4)] {
        let p = sub.next_publish().await;
        assert_eq!((topic(&p), &p.payload[..]), (t, &[payload][..]));
    }
}

#[tokio::test]
async fn topic_aliases_towards_the_client_up_to_its_maximum() {
    let server = TestServer::start("").await;
    // Topic Alias Maximum (0x22) 2.
    let (mut raw, _) = open_v5(&server, &connect_v5("alias-rx", 60, &[0x22, 0, 2], None)).await;
    raw.send(&subscribe_v5(1, "ta/#", 0)).await;
    assert!(matches!(raw.recv().await, Some(Packet::SubAck(_))));
    let (mut publisher, _) = v5::connect(v5::options("alias-tx", server.port())).await;
    let topics = ["ta/x", "ta/x", "ta/y", "ta/z", "ta/x", "ta/z"];
    for (i, t) in topics.iter().enumerate() {
        publish_acked(&mut publisher, t, false, vec![i as u8]).await;
    }
    let expected =
        [("ta/x", Some(1)), ("", Some(1)), ("ta/y", Some(2)), ("ta/z", None), ("", Some(1)), ("ta/z", None)];
    for (i, (t, a)) in expected.into_iter().enumerate() {
        let p = raw_publish(&mut raw).await;
        assert_eq!((&*p.topic, p.properties.topic_alias, &p.payload[..]), (t, a, &[i as u8][..]), "#{i}");
    }
}

// ---------------------------------------------------------------------------------------- 9. wills

fn will_options(id: &str, port: u16, will_topic: &str, delay: u32) -> v5::MqttOptions {
    let mut o = persistent(id, port, 10);
    let properties = LastWillProperties {
        delay_interval: Some(delay),
        payload_format_indicator: None,
        message_expiry_interval: None,
        content_type: None,
        response_topic: None,
        correlation_data: None,
        user_properties: Vec::new(),
    };
    o.set_last_will(LastWill::new(will_topic, "gone", QoS::AtLeastOnce, false, Some(properties)));
    o
}

#[tokio::test]
async fn will_delay_postpones_the_will_and_a_reconnect_cancels_it() {
    let server = TestServer::start("").await;
    let (mut watcher, _) = v5::connect(v5::options("watcher", server.port())).await;
    watcher.subscribe("will/#", QoS::AtLeastOnce).await;
    let (mut publisher, _) = v5::connect(v5::options("marker", server.port())).await;

    let (delayed, _) = v5::connect(will_options("delayed", server.port(), "will/delayed", 1)).await;
    let (returning, _) = v5::connect(will_options("returning", server.port(), "will/returning", 1)).await;
    let killed = Instant::now();
    delayed.kill();
    returning.kill();
    wait_offline(&server, "delayed").await;
    wait_offline(&server, "returning").await;
    // "returning" comes back within its delay.
    let (_back, connack) = v5::connect(will_options("returning", server.port(), "will/returning", 1)).await;
    assert!(connack.session_present);

    // Not yet: a marker published now overtakes the delayed will.
    publish_acked(&mut publisher, "will/marker", false, "1").await;
    assert_eq!(topic(&watcher.next_publish().await), "will/marker");
    // Then: the will arrives, no earlier than its delay.
    let will = watcher.next_publish().await;
    assert_eq!((topic(&will), &will.payload[..]), ("will/delayed", &b"gone"[..]));
    assert!(killed.elapsed() >= Duration::from_secs(1), "published after the delay");

    // Past the delay of "returning": its will was cancelled by the reconnect.
    tokio::time::sleep_until((killed + Duration::from_millis(1500)).into()).await;
    publish_acked(&mut publisher, "will/marker", false, "2").await;
    let next = watcher.next_publish().await;
    assert_eq!((topic(&next), &next.payload[..]), ("will/marker", &b"2"[..]));
}

#[tokio::test]
async fn a_reconnect_with_clean_start_ends_the_session_and_sends_its_delayed_will_at_once() {
    let server = TestServer::start("").await;
    let (mut watcher, _) = v5::connect(v5::options("watcher", server.port())).await;
    watcher.subscribe("will/#", QoS::AtLeastOnce).await;
    // A will delay of an hour, in a session kept for an hour: only the clean start can send it
    // in time for this test.
    let mut o = will_options("fresh", server.port(), "will/fresh", 3600);
    o.set_session_expiry_interval(Some(3600));
    let (gone, _) = v5::connect(o).await;
    gone.kill();
    wait_offline(&server, "fresh").await;
    let mut again = v5::options("fresh", server.port());
    again.set_clean_start(true);
    let (_back, connack) = v5::connect(again).await;
    assert!(!connack.session_present);
    let will = watcher.next_publish().await;
    assert_eq!((topic(&will), &will.payload[..]), ("will/fresh", &b"gone"[..]));
}

#[tokio::test]
async fn disconnect_with_reason_0x04_publishes_the_will_and_a_normal_one_does_not() {
    let server = TestServer::start("").await;
    let (mut watcher, _) = v5::connect(v5::options("watcher", server.port())).await;
    watcher.subscribe("will/#", QoS::AtLeastOnce).await;

    let mut o = v5::options("polite", server.port());
    o.set_last_will(LastWill::new("will/polite", "gone", QoS::AtLeastOnce, false, None));
    let (polite, _) = v5::connect(o).await;
    polite.disconnect().await;
    wait_offline(&server, "polite").await;

    let (mut raw, _) =
        open_v5(&server, &connect_v5("leaving", 60, &[], Some(("will/leaving", b"bye")))).await;
    raw.send(&packet(0xE0, &[0x04, 0x00])).await; // DISCONNECT, "disconnect with will message"
    assert!(raw.until_closed().await.is_empty(), "the server answers a DISCONNECT by closing");
    let will = watcher.next_publish().await;
    assert_eq!((topic(&will), &will.payload[..]), ("will/leaving", &b"bye"[..]), "only 0x04 sent its will");
}

// ------------------------------------------------------------- 10–12. DISCONNECT and CONNACK codes

#[tokio::test]
async fn takeover_sends_0x8e_to_the_old_connection() {
    let server = TestServer::start("").await;
    // The old connection is raw: rumqttc 0.25 cannot decode a DISCONNECT without a property
    // length (remaining length 1, valid per §3.14.2.2.1) and reports a plain close instead.
    // Session Expiry Interval (0x11) 60, so the session outlives the old connection.
    let (mut first, _) = open_v5(&server, &connect_v5("twin", 60, &[0x11, 0, 0, 0, 60], None)).await;
    first.send(&subscribe_v5(1, "tk", 1)).await;
    assert!(matches!(first.recv().await, Some(Packet::SubAck(_))));
    let (mut second, connack) = v5::connect(persistent("twin", server.port(), 60)).await;
    assert!(connack.session_present, "the session is taken over, not discarded");
    assert_eq!(disconnect_reason(&mut first).await, Some(ReasonCode::SessionTakenOver));
    let (mut publisher, _) = v5::connect(v5::options("tk-pub", server.port())).await;
    publish_acked(&mut publisher, "tk", false, "x").await;
    assert_eq!(topic(&second.next_publish().await), "tk", "the subscription came along");
}

#[tokio::test]
async fn shutdown_sends_0x8b_to_connected_clients() {
    let mut server = TestServer::start("").await;
    // Raw clients, for the reason rumqttc 0.25 cannot report (see the takeover test).
    let mut first = Raw::connected(server.addr, V5, "stayer-1").await;
    let mut second = Raw::connected(server.addr, V5, "stayer-2").await;
    let (mut library, _) = v5::connect(v5::options("stayer-3", server.port())).await;
    server.stop().await;
    assert_eq!(disconnect_reason(&mut first).await, Some(ReasonCode::ServerShuttingDown));
    assert_eq!(disconnect_reason(&mut second).await, Some(ReasonCode::ServerShuttingDown));
    library.closed().await;
}

#[tokio::test]
async fn connect_with_an_authentication_method_is_refused_with_0x8c() {
    let server = TestServer::start("").await;
    let mut o = v5::options("scram", server.port());
    o.set_authentication_method(Some("SCRAM-SHA-256".into()));
    let error = v5::connect_err(o).await;
    assert!(error.contains("ConnectionRefused(BadAuthenticationMethod)"), "{error}");
    assert!(server.broker().session(&mesgd_core::model::SessionKey::mqtt("scram")).is_none());
}

// ---------------------------------------------------------------- 13. client's maximum packet size

#[tokio::test]
async fn messages_larger_than_the_clients_maximum_packet_size_are_not_sent() {
    let server = TestServer::start("").await;
    let mut o = v5::options("small", server.port());
    o.set_max_packet_size(Some(256));
    let (mut sub, _) = v5::connect(o).await;
    sub.subscribe("mps/#", QoS::AtLeastOnce).await;
    let (mut publisher, _) = v5::connect(v5::options("mps-pub", server.port())).await;
    publish_acked(&mut publisher, "mps/big", false, vec![7u8; 1000]).await;
    // QoS 0, so that once it arrives nothing of the client's can be in flight but the big one.
    publisher.client.publish("mps/small", QoS::AtMostOnce, false, "fits").await.unwrap();
    let p = sub.next_publish().await;
    assert_eq!((topic(&p), &p.payload[..]), ("mps/small", &b"fits"[..]));
    let session = server.broker().session(&mesgd_core::model::SessionKey::mqtt("small")).expect("session");
    assert_eq!(session.inflight_len(), 0, "the dropped QoS 1 message is not left in flight");
}

#[tokio::test]
async fn a_topic_alias_is_not_used_before_the_client_has_seen_it() {
    let server = TestServer::start("").await;
    // Maximum Packet Size (0x27) 100, Topic Alias Maximum (0x22) 4.
    let (mut raw, _) =
        open_v5(&server, &connect_v5("alias-small", 60, &[0x27, 0, 0, 0, 100, 0x22, 0, 4], None)).await;
    raw.send(&subscribe_v5(1, "mpa/#", 0)).await;
    assert!(matches!(raw.recv().await, Some(Packet::SubAck(_))));
    let (mut publisher, _) = v5::connect(v5::options("mpa-pub", server.port())).await;
    publish_acked(&mut publisher, "mpa/t", false, vec![1u8; 200]).await;
    publish_acked(&mut publisher, "mpa/t", false, "small").await;
    publish_acked(&mut publisher, "mpa/t", false, "again").await;
    let first = raw_publish(&mut raw).await;
    assert_eq!(
        (&*first.topic, &first.payload[..]),
        ("mpa/t", &b"small"[..]),
        "the dropped packet set no alias"
    );
    let alias = first.properties.topic_alias.expect("an alias is set with the topic");
    let second = raw_publish(&mut raw).await;
    assert_eq!(
        (&*second.topic, second.properties.topic_alias, &second.payload[..]),
        ("", Some(alias), &b"again"[..])
    );
}

// ------------------------------------------------------------------------ 14. shared subscriptions

#[tokio::test]
async fn shared_subscription_round_robins_and_hands_unacknowledged_messages_on() {
    let server = TestServer::start("").await;
    let mut oa = v5::options("member-a", server.port());
    oa.set_manual_acks(true);
    let (mut a, _) = v5::connect(oa).await;
    a.subscribe("$share/workers/jobs", QoS::AtLeastOnce).await;
    let (mut b, _) = v5::connect(v5::options("member-b", server.port())).await;
    b.subscribe("$share/workers/jobs", QoS::AtLeastOnce).await;
    let (mut publisher, _) = v5::connect(v5::options("jobs-pub", server.port())).await;
    for i in 0..4u8 {
        assert_eq!(publish_acked(&mut publisher, "jobs", false, vec![i]).await, PubAckReason::Success);
    }
    let mut got_a = vec![a.next_publish().await.payload[0], a.next_publish().await.payload[0]];
    let mut got_b = vec![b.next_publish().await.payload[0], b.next_publish().await.payload[0]];
    got_a.sort();
    got_b.sort();
    let mut turns = [got_a.clone(), got_b.clone()];
    turns.sort();
    assert_eq!(turns, [vec![0, 2], vec![1, 3]], "members take turns");

    // "a" acknowledged nothing; when it leaves, its two messages go to "b".
    assert_eq!(
        server.broker().session(&mesgd_core::model::SessionKey::mqtt("member-a")).map(|s| s.inflight_len()),
        Some(2)
    );
    a.disconnect().await;
    let mut handed_on = vec![b.next_publish().await.payload[0], b.next_publish().await.payload[0]];
    handed_on.sort();
    assert_eq!(handed_on, got_a);
}

// ---------------------------------------------------------------------------------- 15, 16. limits

async fn expect_pubrec(raw: &mut Raw, id: u16) {
    match raw.recv().await {
        Some(Packet::PubRec(r)) => assert_eq!(r.packet_id, id),
        other => panic!("expected PUBREC {id}, got {other:?}"),
    }
}

#[tokio::test]
async fn keep_alive_timeout_sends_0x8d_before_closing() {
    let server = TestServer::start("").await;
    let (mut raw, connack) = open_v5(&server, &connect_v5("sleepy", 1, &[], None)).await;
    assert!(!connack.reason_code.is_error());
    let connected = Instant::now();
    assert_eq!(disconnect_reason(&mut raw).await, Some(ReasonCode::KeepAliveTimeout));
    assert!(connected.elapsed() >= Duration::from_millis(1400), "not before 1.5 × keep-alive");
}

#[tokio::test]
async fn more_qos2_messages_in_flight_than_the_receive_maximum_is_0x93() {
    let server = TestServer::start("[limits]\nmax_inflight = 2\n").await;
    let (mut raw, connack) = open_v5(&server, &connect_v5("eager", 60, &[], None)).await;
    assert_eq!(connack.properties.receive_maximum, Some(2));
    for id in [1, 2] {
        raw.send(&publish_v5("rm", 2, Some(id), &[], b"x")).await;
        expect_pubrec(&mut raw, id).await;
    }
    // Releasing one makes room for one more.
    raw.send(&packet(0x62, &1u16.to_be_bytes())).await;
    assert!(matches!(raw.recv().await, Some(Packet::PubComp(c)) if c.packet_id == 1));
    raw.send(&publish_v5("rm", 2, Some(3), &[], b"x")).await;
    expect_pubrec(&mut raw, 3).await;
    // Ids 2 and 3 await PUBREL: a third unreleased one is over the limit.
    raw.send(&publish_v5("rm", 2, Some(4), &[], b"x")).await;
    assert_eq!(disconnect_reason(&mut raw).await, Some(ReasonCode::ReceiveMaximumExceeded));
}
