//! One topic space for both protocols: a relay client and an MQTT client (rumqttc, MQTT
//! 3.1.1) see each other's publishes and share the retained store, through the same ACL.

mod common;

use common::relay::{self, Client, KINDS};
use common::v3::{self, QoS};
use serde_json::{Value, json};

#[tokio::test]
async fn relay_and_mqtt_publishes_reach_each_other() {
    let server = relay::server("").await;
    let (mut mqtt, _) = v3::connect(v3::options("mqtt-sub", server.port())).await;
    mqtt.subscribe("sensors/+", QoS::AtMostOnce).await;
    for kind in KINDS {
        let addr = format!("relay-{kind:?}").to_lowercase();
        let mut r = Client::connect(&server, kind).await;
        r.register(&addr).await;
        r.send(json!({"t": "subscribe", "topic": "cmd/#"})).await;
        r.expect("subscribed").await;

        // relay → MQTT: the payload is the ct string's bytes, escapes resolved.
        r.send(json!({"t": "publish", "topic": "sensors/1", "ct": "21.5 \u{b0}C"})).await;
        let publish = mqtt.next_publish().await;
        assert_eq!(publish.topic, "sensors/1");
        assert_eq!(&publish.payload[..], "21.5 °C".as_bytes());

        // MQTT → relay: ct is the payload's text, from is the MQTT client id.
        mqtt.client.publish("cmd/lamp", QoS::AtMostOnce, false, "on").await.unwrap();
        let message = r.expect("message").await;
        assert_eq!(message["topic"], "cmd/lamp");
        assert_eq!(message["ct"], "on");
        assert_eq!(message["from"], "mqtt-sub");
        assert_eq!(message["retained"], false);
        assert!(message.get("enc").is_none(), "{message}");

        // A payload that is not UTF-8 arrives as base64, marked.
        mqtt.client.publish("cmd/raw", QoS::AtMostOnce, false, vec![0xff, 0x00, 0x80]).await.unwrap();
        let message = r.expect("message").await;
        assert_eq!((&message["ct"], &message["enc"]), (&json!("/wCA"), &json!("base64")));
        r.close().await;
    }
}

#[tokio::test]
async fn retained_messages_are_shared() {
    let server = relay::server("").await;
    let mut publisher = Client::connect(&server, relay::Kind::Tcp).await;
    publisher.register("thermostat").await;
    publisher.send(json!({"t": "publish", "topic": "home/temp", "ct": "19", "retain": true})).await;
    // The relay publisher sees its own publish once it is routed (it is subscribed to it).
    publisher.send(json!({"t": "subscribe", "topic": "home/temp"})).await;
    publisher.expect("subscribed").await;
    assert_eq!(publisher.expect("message").await["retained"], true);

    let (mut mqtt, _) = v3::connect(v3::options("late-mqtt", server.port())).await;
    mqtt.subscribe("home/#", QoS::AtMostOnce).await;
    let replay = mqtt.next_publish().await;
    assert!(replay.retain);
    assert_eq!(&replay.payload[..], b"19");

    mqtt.client.publish("home/door", QoS::AtLeastOnce, true, "closed").await.unwrap();
    let mut late = Client::connect(&server, relay::Kind::Ws).await;
    late.register("late-relay").await;
    // Wait until the MQTT publish is routed: the MQTT subscriber gets it too.
    assert_eq!(&mqtt.next_publish().await.payload[..], b"closed");
    late.send(json!({"t": "subscribe", "topic": "home/+"})).await;
    late.expect("subscribed").await;
    let mut replays: Vec<(Value, Value)> = Vec::new();
    for _ in 0..2 {
        let m = late.expect("message").await;
        assert_eq!((&m["from"], &m["retained"]), (&Value::Null, &json!(true)), "{m}");
        replays.push((m["topic"].clone(), m["ct"].clone()));
    }
    replays.sort_by_key(|(t, _)| t.to_string());
    assert_eq!(replays, vec![(json!("home/door"), json!("closed")), (json!("home/temp"), json!("19"))]);
}

#[tokio::test]
async fn the_same_acl_gates_both_protocols() {
    let jwt = common::auth::jwt_provider("");
    let server = common::TestServer::start_with(&format!(
        "{}[auth]\nallow_anonymous = true\n{jwt}[mqtt]\nsys_interval = 0\n",
        relay::LISTENERS
    ))
    .await;
    let acl = json!([
        {"pattern": "$relay/addr/%u", "permission": "read"},
        {"pattern": "public/#", "permission": "readwrite"},
        {"pattern": "secret/#", "permission": "deny"},
    ]);
    let token = common::auth::token("reader", Some(acl));
    let mut r = Client::connect(&server, relay::Kind::Tcp).await;
    r.send(json!({"t": "register", "addr": "reader", "username": "reader", "password": token})).await;
    r.expect("registered").await;
    r.send(json!({"t": "subscribe", "topic": "secret/#"})).await;
    r.expect_error("not authorized").await;
    r.send(json!({"t": "subscribe", "topic": "public/#"})).await;
    r.expect("subscribed").await;

    // An anonymous (unrestricted) MQTT publisher reaches the relay client where its rules allow.
    let (mqtt, _) = v3::connect(v3::options("anon-pub", server.port())).await;
    mqtt.client.publish("public/a", QoS::AtMostOnce, false, "one").await.unwrap();
    assert_eq!(r.expect("message").await["ct"], "one");
    // A relay publish the ACL refuses never reaches an MQTT subscriber.
    let (mut sub, _) = v3::connect(v3::options("anon-sub", server.port())).await;
    sub.subscribe("#", QoS::AtMostOnce).await;
    r.send(json!({"t": "publish", "topic": "private/x", "ct": "leak"})).await;
    r.expect_error("not authorized").await;
    r.send(json!({"t": "publish", "topic": "public/b", "ct": "marker"})).await;
    let next = sub.next_publish().await;
    assert_eq!((next.topic.as_str(), &next.payload[..]), ("public/b", &b"marker"[..]));
}

#[tokio::test]
async fn relay_counters_are_published_under_sys() {
    let server = relay::server("[mqtt]\nsys_interval = 1\n").await;
    let mut r = Client::connect(&server, relay::Kind::Tcp).await;
    r.register("counted").await;
    r.send(json!({"t": "send", "to": "absent", "ct": "x"})).await;
    r.expect("queued").await;
    let (mut mqtt, _) = v3::connect(v3::options("sys-watch", server.port())).await;
    mqtt.subscribe("$SYS/broker/relay/+/+", QoS::AtMostOnce).await;
    // Values are published every second; wait for the ones that include this client's work.
    loop {
        let p = mqtt.next_publish().await;
        if p.topic == "$SYS/broker/relay/queue/messages" && &p.payload[..] == b"1" {
            break;
        }
    }
}

#[tokio::test]
async fn builtin_rule_changes_apply_live_to_relay_clients() {
    use common::auth::Storage;
    let storage = Storage::new();
    storage.add_user("rita", "pw").await;
    storage.add_rule("rita", "$relay/addr/rita", "read").await;
    storage.add_rule("rita", "$relay/room/lobby", "readwrite").await;
    storage.add_rule("rita", "news/#", "read").await;
    let server = common::TestServer::start_on(
        &storage,
        &format!(
            "{}[auth]\nallow_anonymous = true\n[[auth.providers]]\ntype = \"builtin\"\npoll_interval_ms = 10\n\
             [mqtt]\nsys_interval = 0\n",
            relay::LISTENERS
        ),
    )
    .await;
    let mut r = Client::connect(&server, relay::Kind::Ws).await;
    r.send(json!({"t": "register", "addr": "rita", "username": "rita", "password": "wrong"})).await;
    r.expect_error("not authorized").await;
    r.send(json!({"t": "register", "addr": "rita", "username": "rita", "password": "pw"})).await;
    r.expect("registered").await;
    r.send(json!({"t": "join_room", "room": "lobby"})).await;
    r.expect("joined_room").await;
    r.send(json!({"t": "subscribe", "topic": "news/#"})).await;
    r.expect("subscribed").await;

    // The address rule goes: the client can no longer hold it and is disconnected, told why.
    storage.mesgd(&["acl", "remove", "rita", "--pattern", "$relay/addr/rita"], "").await;
    let before = r.closed().await;
    let last = before.last().expect("an error before the close");
    assert_eq!((&last["msg"], &last["fatal"]), (&json!("not authorized"), &json!(true)), "{before:?}");
    // And it cannot come back.
    let mut again = Client::connect(&server, relay::Kind::Tcp).await;
    again.send(json!({"t": "register", "addr": "rita", "username": "rita", "password": "pw"})).await;
    again.expect_error("not authorized").await;
}
