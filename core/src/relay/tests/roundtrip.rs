//! Round trips: every relay → client message encoded and read back with serde_json (an
//! independent parser), the send → deliver forwarding path against serde_json's reading of the
//! original frame, and `pipe_data` forwarded verbatim.

use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::relay::capabilities::{Capabilities, ClientLimits, Load};
use crate::relay::client::{ClientMessage, parse};
use crate::relay::error::{Limit, RelayError};
use crate::relay::frame;
use crate::relay::json::JsonStr;
use crate::relay::limits::RateLimits;
use crate::relay::payload::{CtEncoding, MqttCt};
use crate::relay::server::{Deliver, DeliverKind, ServerMessage};
use crate::relay::store::QueueLimits;
use crate::relay::turn::TurnCredentials;

fn encoded(message: &ServerMessage<'_>) -> Value {
    let mut buf = BytesMut::new();
    message.encode(&mut buf);
    let value: Value =
        serde_json::from_slice(&buf).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&buf)));
    assert!(buf.starts_with(b"{\"t\":"), "t comes first");
    assert_eq!(value["t"], message.type_name());
    value
}

#[test]
fn every_relay_message() {
    let odd = "q\"\\\n\u{1}é";
    let urls = ["turn:a:3478".to_string(), "turns:a:5349".to_string()];
    let creds = TurnCredentials {
        urls: &urls,
        username: Some("1700000000:alice".into()),
        credential: Some("abc=".into()),
        ttl: 600,
    };
    let no_turn = TurnCredentials { urls: &[], username: None, credential: None, ttl: 0 };
    let transports = [("tcp".to_string(), 7000)];
    let caps = Capabilities {
        transports: &transports,
        load: Load { connections: 1, max_connections: 4, queued_bytes: 0, queue_budget: 10 },
        limits: ClientLimits {
            max_frame_tcp: 1,
            max_frame_ws: 2,
            max_frame_udp: 3,
            rate: RateLimits::default(),
            queue: QueueLimits::default(),
            key_proof_required: false,
        },
    };
    let pipe_frame = br#"{"t":"pipe_data","pipe_id":"p1","n":[1,2],"s":"x"}"#;
    let ClientMessage::PipeData(pipe_data) = parse(pipe_frame).unwrap() else { panic!() };
    let ct = JsonStr::text(odd);

    let cases: Vec<(ServerMessage<'_>, Value)> = vec![
        (ServerMessage::Registered { addr: odd, queued: 3 }, json!({"t":"registered","addr":odd,"queued":3})),
        (
            ServerMessage::Deliver(Deliver {
                from: odd,
                ct,
                public_key: None,
                nonce: Some(JsonStr::text("n")),
                id: None,
                kind: DeliverKind::Queued,
            }),
            json!({"t":"deliver","from":odd,"ct":odd,"pub":null,"nonce":"n","kind":"queued"}),
        ),
        (
            ServerMessage::Deliver(Deliver {
                from: "a",
                ct,
                public_key: Some(JsonStr::text("k")),
                nonce: None,
                id: Some(JsonStr::text("9")),
                kind: DeliverKind::Live,
            }),
            json!({"t":"deliver","from":"a","ct":odd,"pub":"k","nonce":null,"id":"9","kind":"live"}),
        ),
        (ServerMessage::Ack { id: JsonStr::text("9"), from: odd }, json!({"t":"ack","id":"9","from":odd})),
        (ServerMessage::Queued { to: odd }, json!({"t":"queued","to":odd})),
        (ServerMessage::OnlineCount { count: 12 }, json!({"t":"online_count","count":12})),
        (
            ServerMessage::TurnCredentials(&creds),
            json!({"t":"turn_credentials","urls":urls,"username":"1700000000:alice","credential":"abc=","ttl":600}),
        ),
        (
            ServerMessage::TurnCredentials(&no_turn),
            json!({"t":"turn_credentials","urls":[],"username":null,"credential":null,"ttl":0}),
        ),
        (
            ServerMessage::PipeOpen { pipe_id: "p1", peer: odd },
            json!({"t":"pipe_open","pipe_id":"p1","peer":odd}),
        ),
        (
            ServerMessage::PipeIncoming { pipe_id: "p1", peer: odd },
            json!({"t":"pipe_incoming","pipe_id":"p1","peer":odd}),
        ),
        (pipe_data.forward(), json!({"t":"pipe_data","pipe_id":"p1","n":[1,2],"s":"x"})),
        (ServerMessage::PipeClosed { pipe_id: "p1" }, json!({"t":"pipe_closed","pipe_id":"p1"})),
        (ServerMessage::Waiting { game: odd }, json!({"t":"waiting","game":odd})),
        (ServerMessage::Matched { game: "g", peer: odd }, json!({"t":"matched","game":"g","peer":odd})),
        (
            ServerMessage::JoinedRoom { room: odd, members: 2 },
            json!({"t":"joined_room","room":odd,"members":2}),
        ),
        (
            ServerMessage::RoomDeliver { room: "r", from: odd, ct },
            json!({"t":"room_deliver","room":"r","from":odd,"ct":odd}),
        ),
        (ServerMessage::Subscribed { topic: "a/+" }, json!({"t":"subscribed","topic":"a/+"})),
        (ServerMessage::Unsubscribed { topic: "a/#" }, json!({"t":"unsubscribed","topic":"a/#"})),
        (
            ServerMessage::Message {
                topic: "a/b",
                from: Some(odd),
                ct,
                retained: false,
                encoding: CtEncoding::Text,
            },
            json!({"t":"message","topic":"a/b","from":odd,"ct":odd,"retained":false}),
        ),
        (
            ServerMessage::Message {
                topic: "a/b",
                from: None,
                ct,
                retained: true,
                encoding: CtEncoding::Text,
            },
            json!({"t":"message","topic":"a/b","from":null,"ct":odd,"retained":true}),
        ),
        (
            ServerMessage::Error { error: RelayError::RegisterFirst, fatal: false },
            json!({"t":"error","msg":"register first"}),
        ),
        (
            ServerMessage::Error { error: RelayError::FrameTooLarge, fatal: true },
            json!({"t":"error","msg":"frame too large","fatal":true}),
        ),
        (
            ServerMessage::Error { error: RelayError::LimitReached(Limit::Rooms), fatal: false },
            json!({"t":"error","msg":"limit reached: rooms"}),
        ),
        (ServerMessage::Challenge { nonce: "bm9uY2U=" }, json!({"t":"challenge","nonce":"bm9uY2U="})),
    ];
    for (message, expected) in cases {
        assert_eq!(encoded(&message), expected, "{}", message.type_name());
    }
    let caps = encoded(&ServerMessage::Capabilities(&caps));
    assert_eq!((caps["transports"]["tcp"].as_u64(), caps["load_factor"].as_f64()), (Some(7000), Some(0.25)));
}

#[test]
fn binary_mqtt_payload_carries_enc() {
    let payload = [0xde, 0xad, 0xbe, 0xef];
    let ct = MqttCt::from_payload(&payload);
    let v = encoded(&ServerMessage::Message {
        topic: "raw",
        from: Some("sensor-1"),
        ct: ct.ct(),
        retained: false,
        encoding: ct.encoding(),
    });
    assert_eq!(
        v,
        json!({"t":"message","topic":"raw","from":"sensor-1","ct":"3q2+7w==","retained":false,"enc":"base64"})
    );
}

#[test]
fn framed_encoding() {
    let mut buf = BytesMut::new();
    frame::encode_with(&mut buf, |b| ServerMessage::Queued { to: "bob" }.encode(b));
    let body = frame::decode(&mut buf, frame::MAX_TCP_FRAME).unwrap().unwrap();
    assert_eq!(&body[..], br#"{"t":"queued","to":"bob"}"#);
}

/// Builds a `send` frame with serde_json (an independent encoder), parses it, builds the
/// `deliver`, and checks that serde_json reads the same values out of the `deliver`.
fn forward(send: &Value, from: &str) -> Value {
    let frame = serde_json::to_vec(send).unwrap();
    let ClientMessage::Send(parsed) = parse(&frame).unwrap() else { panic!("not a send") };
    assert_eq!(parsed.to, send["to"].as_str().unwrap());
    encoded(&ServerMessage::Deliver(parsed.deliver(from, DeliverKind::Live)))
}

#[test]
fn deliver_copies_the_senders_literals() {
    let frame = br#"{"t":"send","to":"bob","ct":"a\u00e9\n\/","pub":"K\"","nonce":"N","id":"x\u0031"}"#;
    let ClientMessage::Send(send) = parse(frame).unwrap() else { panic!() };
    let mut buf = BytesMut::new();
    ServerMessage::Deliver(send.deliver("alice", DeliverKind::Live)).encode(&mut buf);
    assert_eq!(
        std::str::from_utf8(&buf).unwrap(),
        r#"{"t":"deliver","from":"alice","ct":"a\u00e9\n\/","pub":"K\"","nonce":"N","id":"x\u0031","kind":"live"}"#,
        "the escapes are the sender's, byte for byte"
    );
}

proptest! {
    /// Whatever strings the sender uses, the recipient reads the same `ct`, `pub`, `nonce` and
    /// `id` (and `from`) as serde_json reads from the original frame.
    #[test]
    fn send_to_deliver(
        to in "[^\u{0}]{1,20}",
        ct in any::<String>(),
        public_key in proptest::option::of(any::<String>()),
        nonce in proptest::option::of(any::<String>()),
        id in proptest::option::of(any::<String>()),
        from in "\\PC{1,30}",
    ) {
        let mut send = json!({"t":"send","to":to,"ct":ct});
        for (key, value) in [("pub", &public_key), ("nonce", &nonce), ("id", &id)] {
            if let Some(v) = value {
                send[key] = json!(v);
            }
        }
        let deliver = forward(&send, &from);
        prop_assert_eq!(&deliver["from"], &json!(from));
        prop_assert_eq!(&deliver["ct"], &json!(ct));
        prop_assert_eq!(&deliver["pub"], &json!(public_key));
        prop_assert_eq!(&deliver["nonce"], &json!(nonce));
        let want_id = id.map(|i| json!(i));
        prop_assert_eq!(deliver.get("id"), want_id.as_ref());
        prop_assert_eq!(&deliver["kind"], "live");
    }

    /// `pipe_data` reaches the other end with every member but `t` verbatim, whatever JSON the
    /// sender put in.
    #[test]
    fn pipe_data_is_forwarded_verbatim(members in proptest::collection::btree_map("[a-z]{1,6}", json_value(), 0..6)) {
        let mut object = serde_json::Map::new();
        object.insert("t".into(), json!("pipe_data"));
        object.insert("pipe_id".into(), json!("p7"));
        for (k, v) in &members {
            if k != "t" && k != "pipe_id" {
                object.insert(k.clone(), v.clone());
            }
        }
        let sent = Value::Object(object);
        let frame = serde_json::to_vec_pretty(&sent).unwrap();
        let ClientMessage::PipeData(data) = parse(&frame).unwrap() else { panic!() };
        prop_assert_eq!(encoded(&data.forward()), sent);
    }
}

/// Arbitrary JSON values a few levels deep.
pub(super) fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        // Sixteenths print and parse back exactly (serde_json's default float parsing is not
        // correctly rounded for every double).
        (-1_000_000_000i64..1_000_000_000).prop_map(|n| json!(n as f64 / 16.0)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
