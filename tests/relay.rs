//! The JSON relay end to end over its three real transports (length-prefixed TCP,
//! tokio-tungstenite WebSocket, UDP datagrams): every message type of the specification's two
//! tables, every error string, and sends between clients on different transports.

mod common;

use common::relay::{self, Client, KINDS, Kind};
use serde_json::{Value, json};

/// The other transport a client of `kind` talks to, so every pair crosses transports.
fn peer_of(kind: Kind) -> Kind {
    match kind {
        Kind::Tcp => Kind::Ws,
        Kind::Ws => Kind::Udp,
        Kind::Udp => Kind::Tcp,
    }
}

fn name(kind: Kind, who: &str) -> String {
    format!("{who}-{kind:?}").to_lowercase()
}

#[tokio::test]
async fn every_message_type_over_every_transport() {
    let server = relay::server("").await;
    for kind in KINDS {
        let (a_name, b_name) = (name(kind, "alice"), name(kind, "bob"));
        let mut a = Client::connect(&server, kind).await;
        let mut b = Client::connect(&server, peer_of(kind)).await;

        // Before registering, only register, capabilities, list_online (and challenge) are served.
        a.send(json!({"t": "send", "to": b_name, "ct": "x"})).await;
        a.expect_error("register first").await;
        a.send(json!({"t": "list_online"})).await;
        let before = a.expect("online_count").await["count"].as_u64().expect("count");
        let registered = a.register(&a_name).await;
        assert_eq!(registered["queued"], 0);
        b.register(&b_name).await;

        a.send(json!({"t": "capabilities"})).await;
        let caps = a.expect("capabilities").await;
        for (transport, listener) in [("tcp", Kind::Tcp), ("ws", Kind::Ws), ("udp", Kind::Udp)] {
            assert_eq!(caps["transports"][transport], relay::addr(&server, listener).port(), "{caps}");
        }
        assert_eq!(caps["load_tier"], "low", "{caps}");
        let factor = caps["load_factor"].as_f64().expect("load_factor is a number");
        assert!((0.0..0.5).contains(&factor), "{caps}");

        a.send(json!({"t": "list_online"})).await;
        let count = a.expect("online_count").await;
        assert_eq!(count["count"], before + 2, "{count}");
        assert_eq!(count.as_object().unwrap().len(), 2, "a count and nothing else: {count}");

        a.send(json!({"t": "turn_credentials"})).await;
        let turn = a.expect("turn_credentials").await;
        assert_eq!(turn["username"], Value::Null);
        assert_eq!(turn["credential"], Value::Null);

        // send → deliver (live), ack → ack.
        a.send(
            json!({"t": "send", "to": b_name, "ct": "hello \"bob\"", "pub": "PK", "nonce": "N", "id": "m1"}),
        )
        .await;
        let deliver = b.expect("deliver").await;
        assert_eq!(deliver["from"], a_name.as_str());
        assert_eq!(deliver["ct"], "hello \"bob\"");
        assert_eq!(deliver["pub"], "PK");
        assert_eq!(deliver["nonce"], "N");
        assert_eq!(deliver["id"], "m1");
        assert_eq!(deliver["kind"], "live");
        b.send(json!({"t": "ack", "to": a_name, "id": "m1"})).await;
        let ack = a.expect("ack").await;
        assert_eq!((&ack["id"], &ack["from"]), (&json!("m1"), &json!(b_name)));
        // Without an id, deliver carries none.
        a.send(json!({"t": "send", "to": b_name, "ct": "no id"})).await;
        let deliver = b.expect("deliver").await;
        assert!(deliver.get("id").is_none(), "{deliver}");

        // send to an offline address → queued.
        let offline = name(kind, "nobody");
        a.send(json!({"t": "send", "to": offline, "ct": "later"})).await;
        assert_eq!(a.expect("queued").await["to"], offline.as_str());

        // Pipes.
        a.send(json!({"t": "open_pipe", "to": b_name})).await;
        let open = a.expect("pipe_open").await;
        assert_eq!(open["peer"], b_name.as_str());
        let pipe_id = open["pipe_id"].as_str().expect("pipe_id").to_owned();
        let incoming = b.expect("pipe_incoming").await;
        assert_eq!((&incoming["pipe_id"], &incoming["peer"]), (&json!(pipe_id), &json!(a_name)));
        a.send(json!({"t": "pipe_data", "pipe_id": pipe_id, "seq": 7, "chunk": {"k": [1, 2]}})).await;
        let data = b.expect("pipe_data").await;
        assert_eq!(data, json!({"t": "pipe_data", "pipe_id": pipe_id, "seq": 7, "chunk": {"k": [1, 2]}}));
        b.send(json!({"t": "pipe_data", "pipe_id": pipe_id, "back": true})).await;
        assert_eq!(a.expect("pipe_data").await["back"], true);
        b.send(json!({"t": "close_pipe", "pipe_id": pipe_id})).await;
        assert_eq!(a.expect("pipe_closed").await["pipe_id"], pipe_id.as_str());
        a.send(json!({"t": "open_pipe", "to": offline})).await;
        a.expect_error("peer not connected").await;

        // Matchmaking.
        let game = name(kind, "chess");
        a.send(json!({"t": "find_match", "game": game})).await;
        assert_eq!(a.expect("waiting").await["game"], game.as_str());
        b.send(json!({"t": "find_match", "game": game})).await;
        let (ma, mb) = (a.expect("matched").await, b.expect("matched").await);
        assert_eq!((&ma["game"], &ma["peer"]), (&json!(game), &json!(b_name)));
        assert_eq!((&mb["game"], &mb["peer"]), (&json!(game), &json!(a_name)));

        // Rooms.
        let room = name(kind, "lobby");
        a.send(json!({"t": "room_send", "room": room, "ct": "early"})).await;
        a.expect_error("join a room first").await;
        a.send(json!({"t": "join_room", "room": room})).await;
        let joined = a.expect("joined_room").await;
        assert_eq!((&joined["room"], &joined["members"]), (&json!(room), &json!(1)));
        b.send(json!({"t": "join_room", "room": room})).await;
        assert_eq!(b.expect("joined_room").await["members"], 2);
        a.send(json!({"t": "room_send", "room": room, "ct": "hi all"})).await;
        let got = b.expect("room_deliver").await;
        assert_eq!(got, json!({"t": "room_deliver", "room": room, "from": a_name, "ct": "hi all"}));

        // Pub/sub, with a retained message replayed to a later subscriber.
        let topic = format!("{}/temp", name(kind, "sensors"));
        a.send(json!({"t": "subscribe", "topic": format!("{}/+", name(kind, "sensors"))})).await;
        a.expect("subscribed").await;
        b.send(json!({"t": "publish", "topic": topic, "ct": "21.5", "retain": true})).await;
        let message = a.expect("message").await;
        assert_eq!(message["topic"], topic.as_str());
        assert_eq!(message["from"], b_name.as_str());
        assert_eq!(message["ct"], "21.5");
        assert_eq!(message["retained"], false);
        b.send(json!({"t": "subscribe", "topic": format!("{}/#", name(kind, "sensors"))})).await;
        b.expect("subscribed").await;
        let replay = b.expect("message").await;
        assert_eq!(
            (&replay["from"], &replay["retained"], &replay["ct"]),
            (&Value::Null, &json!(true), &json!("21.5"))
        );
        a.send(json!({"t": "unsubscribe", "topic": format!("{}/+", name(kind, "sensors"))})).await;
        assert_eq!(a.expect("unsubscribed").await["topic"], format!("{}/+", name(kind, "sensors")));
        b.send(json!({"t": "publish", "topic": topic, "ct": "22"})).await;
        assert_eq!(b.expect("message").await["ct"], "22", "b still subscribed");
        // a is no longer subscribed: its next message is this marker, not the publish.
        b.send(json!({"t": "send", "to": a_name, "ct": "marker"})).await;
        assert_eq!(a.expect("deliver").await["ct"], "marker");

        // Unknown type, bad JSON.
        a.send(json!({"t": "teleport"})).await;
        a.expect_error("unknown message type").await;
        a.send_raw(b"{\"t\": \"send\", ").await;
        a.expect_error("invalid json").await;
        a.send_raw(b"[1, 2]").await;
        a.expect_error("invalid json").await;

        a.close().await;
        b.close().await;
    }
}

#[tokio::test]
async fn register_errors_over_every_transport() {
    let server = relay::server("").await;
    for kind in KINDS {
        let holder_name = name(kind, "taken");
        let mut holder = Client::connect(&server, peer_of(kind)).await;
        holder.register(&holder_name).await;

        let mut c = Client::connect(&server, kind).await;
        c.send(json!({"t": "register", "addr": ""})).await;
        c.expect_error("invalid address").await;
        c.send(json!({"t": "register", "addr": "é".repeat(257)})).await;
        c.expect_error("invalid address").await;
        c.send(json!({"t": "register", "addr": holder_name})).await;
        c.expect_error("address in use").await;
        c.send(json!({"t": "register", "pubkey": "not base64!"})).await;
        c.expect_error("invalid pubkey").await;
        // 256 characters of two bytes each is a valid address: characters, not bytes.
        let long = "é".repeat(256);
        c.register(&long).await;
        c.send(json!({"t": "register", "addr": "again"})).await;
        c.expect_error("already registered").await;
        c.close().await;
        holder.close().await;
    }
}

/// Raw key bytes 1..=32 and 101..=132, and the address derived from the first (computed
/// independently: lowercase unpadded base32 of SHA-256 over the raw key).
const KEY_1: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
const KEY_1_ADDRESS: &str = "vyqwylxver5dpawbgxx2e6nd4tg4meeue4hv2k7frrrajn5gcleq";
const KEY_2: &str = "ZWZnaGlqa2xtbm9wcXJzdHV2d3h5ent8fX5/gIGCg4Q=";

#[tokio::test]
async fn pubkey_addresses_and_alias_bindings() {
    let server = relay::server("").await;
    let mut c = Client::connect(&server, Kind::Tcp).await;
    c.send(json!({"t": "register", "pubkey": KEY_1})).await;
    assert_eq!(c.expect("registered").await["addr"], KEY_1_ADDRESS);
    c.close().await;

    // An alias binds to the first key that registers it.
    let mut c = Client::connect(&server, Kind::Ws).await;
    c.send(json!({"t": "register", "addr": "carol", "pubkey": KEY_1})).await;
    assert_eq!(c.expect("registered").await["addr"], "carol");
    c.close().await;
    let mut other = Client::connect(&server, Kind::Tcp).await;
    other.send(json!({"t": "register", "addr": "carol", "pubkey": KEY_2})).await;
    other.expect_error("alias bound to a different key").await;
    other.send(json!({"t": "register", "addr": "carol"})).await;
    other.expect_error("alias bound to a different key").await;
    // An alias may not look like a derived address.
    other.send(json!({"t": "register", "addr": KEY_1_ADDRESS, "pubkey": KEY_2})).await;
    other.expect_error("invalid address").await;
    // The same key reclaims it.
    other.send(json!({"t": "register", "addr": "carol", "pubkey": KEY_1})).await;
    assert_eq!(other.expect("registered").await["addr"], "carol");
}

#[tokio::test]
async fn store_and_forward_flushes_before_registered() {
    let server = relay::server("").await;
    for kind in KINDS {
        let (sender_name, target) = (name(kind, "sender"), name(kind, "offline"));
        let mut sender = Client::connect(&server, peer_of(kind)).await;
        sender.register(&sender_name).await;
        for i in 0..5 {
            sender
                .send(json!({"t": "send", "to": target, "ct": format!("m{i}"), "id": format!("id{i}")}))
                .await;
            assert_eq!(sender.expect("queued").await["to"], target.as_str());
        }
        let mut target_client = Client::connect(&server, kind).await;
        target_client.send(json!({"t": "register", "addr": target})).await;
        for i in 0..5 {
            let d = target_client.expect("deliver").await;
            assert_eq!(
                (&d["ct"], &d["kind"], &d["from"]),
                (&json!(format!("m{i}")), &json!("queued"), &json!(sender_name))
            );
            assert_eq!(d["id"], format!("id{i}"));
        }
        assert_eq!(target_client.expect("registered").await["queued"], 5);
        // Acknowledging a queued message reaches its sender.
        target_client.send(json!({"t": "ack", "to": sender_name, "id": "id3"})).await;
        assert_eq!(sender.expect("ack").await["from"], target.as_str());
        // Then live.
        sender.send(json!({"t": "send", "to": target, "ct": "now"})).await;
        assert_eq!(target_client.expect("deliver").await["kind"], "live");
        target_client.close().await;
        sender.close().await;
    }
}

#[tokio::test]
async fn queue_caps_drop_the_oldest() {
    let server = relay::server("[relay]\nmax_queued_messages = 3\n").await;
    let mut sender = Client::connect(&server, Kind::Tcp).await;
    sender.register("producer").await;
    for i in 0..5 {
        sender.send(json!({"t": "send", "to": "sink", "ct": format!("m{i}")})).await;
        sender.expect("queued").await;
    }
    let mut sink = Client::connect(&server, Kind::Tcp).await;
    sink.send(json!({"t": "register", "addr": "sink"})).await;
    for i in 2..5 {
        assert_eq!(sink.expect("deliver").await["ct"], format!("m{i}"));
    }
    assert_eq!(sink.expect("registered").await["queued"], 3);
    let sizes = server.server.as_ref().unwrap().context().relay().sizes();
    assert_eq!(sizes.queue_drops.0, 2, "two dropped at the count cap: {sizes:?}");
}

#[tokio::test]
async fn an_address_is_released_when_its_connection_closes() {
    let server = relay::server("").await;
    for kind in [Kind::Tcp, Kind::Ws] {
        let who = name(kind, "fleeting");
        let mut first = Client::connect(&server, kind).await;
        first.register(&who).await;
        first.close().await;
        let mut second = Client::connect(&server, peer_of(kind)).await;
        // The close is seen by the relay's task, which releases the address; retry on the
        // brief window until it has.
        let mut answer;
        loop {
            second.send(json!({"t": "register", "addr": who})).await;
            answer = second.recv().await;
            if answer["t"] != "error" {
                break;
            }
            assert_eq!(answer["msg"], "address in use");
            tokio::task::yield_now().await;
        }
        assert_eq!(answer["t"], "registered");
    }
}

#[tokio::test]
async fn rate_limit_answers_without_closing() {
    let server = relay::server("[relay]\nrate_messages_per_s = 10\nrate_message_burst = 20\n").await;
    let mut c = Client::connect(&server, Kind::Tcp).await;
    c.register("chatty").await;
    for _ in 0..50 {
        c.send(json!({"t": "list_online"})).await;
    }
    let mut counts = 0;
    let mut limited = 0;
    for _ in 0..50 {
        let m = c.recv().await;
        match m["t"].as_str() {
            Some("online_count") => counts += 1,
            Some("error") => {
                assert_eq!(m["msg"], "rate limit exceeded");
                limited += 1;
            }
            _ => panic!("unexpected {m}"),
        }
    }
    assert!(counts >= 19 && limited >= 20, "{counts} served, {limited} limited");
    // Teardown messages pass, and the connection is still open.
    c.send(json!({"t": "unsubscribe", "topic": "a/b"})).await;
    assert_eq!(c.expect("unsubscribed").await["topic"], "a/b");
}

#[tokio::test]
async fn far_over_the_rate_budget_disconnects() {
    let server = relay::server("[relay]\nrate_messages_per_s = 1\nrate_message_burst = 2\n").await;
    let mut c = Client::connect(&server, Kind::Tcp).await;
    c.register("flooder").await;
    let mut frame = Vec::new();
    let body = json!({"t": "list_online"}).to_string();
    for _ in 0..200 {
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(body.as_bytes());
    }
    use tokio::io::AsyncWriteExt;
    let _ = c.tcp().write_all(&frame).await;
    let before = c.closed().await;
    let last = before.last().expect("an error before the close");
    assert_eq!(
        (&last["t"], &last["msg"], &last["fatal"]),
        (&json!("error"), &json!("rate limit exceeded"), &json!(true))
    );
}

#[tokio::test]
async fn oversize_tcp_frame_gets_an_error_then_the_close() {
    use tokio::io::AsyncWriteExt;
    let server = relay::server("").await;
    let mut c = Client::connect(&server, Kind::Tcp).await;
    c.tcp().write_all(&70_000u32.to_be_bytes()).await.unwrap();
    let before = c.closed().await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["msg"], "frame too large");
}

#[tokio::test]
async fn oversize_websocket_message_is_closed_with_1009() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let server = relay::server("").await;
    let mut c = Client::connect(&server, Kind::Ws).await;
    let big = format!("{{\"t\":\"send\",\"to\":\"x\",\"ct\":\"{}\"}}", "a".repeat(70_000));
    c.ws().send(Message::text(big)).await.unwrap();
    let close = c
        .ws_until("the close frame", |m| match m {
            Message::Close(frame) => Some(frame),
            _ => None,
        })
        .await
        .expect("a close frame with a code");
    assert_eq!(u16::from(close.code), 1009);
    assert_eq!(close.reason.as_str(), "frame too large");
}

#[tokio::test]
async fn oversize_udp_datagram_is_dropped_and_counted() {
    let server = relay::server("").await;
    let mut c = Client::connect(&server, Kind::Udp).await;
    c.register("udp-big").await;
    let big = format!("{{\"t\":\"list_online\",\"pad\":\"{}\"}}", "a".repeat(20_000));
    c.send_raw(big.as_bytes()).await;
    // The datagram is not read, and a registered source is told.
    c.expect_error("frame too large").await;
    c.send(json!({"t": "list_online"})).await;
    c.expect("online_count").await;
    let stats = server.server.as_ref().unwrap().context().relay().stats();
    assert_eq!(mesgd::relay::RelayStats::get(&stats.oversize_udp), 1);
}

#[tokio::test]
async fn an_unregistered_udp_source_gets_at_most_three_times_its_bytes() {
    let server = relay::server("").await;
    let mut c = Client::connect(&server, Kind::Udp).await;
    // The capabilities reply is far more than three times these 20 bytes: dropped, counted.
    c.send(json!({"t": "capabilities"})).await;
    let stats = server.server.as_ref().unwrap().context().relay().stats();
    common::within("the reply to be dropped", async {
        while mesgd::relay::RelayStats::get(&stats.udp_amplification_drops) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // A request padded to more than a third of the reply gets it.
    let padded = json!({"t": "capabilities", "pad": "p".repeat(2000)});
    c.send(padded).await;
    let caps = c.expect("capabilities").await;
    assert!(caps["transports"]["udp"].is_number(), "{caps}");
    assert_eq!(mesgd::relay::RelayStats::get(&stats.udp_amplification_drops), 1);
}

#[tokio::test]
async fn provider_chain_and_acl_gate_relay_clients() {
    let jwt = common::auth::jwt_provider("");
    let server = common::TestServer::start_with(&format!(
        "{}[auth]\nallow_anonymous = false\n{jwt}[mqtt]\nsys_interval = 0\n",
        relay::LISTENERS
    ))
    .await;
    let acl = json!([
        {"pattern": "$relay/addr/%u", "permission": "read"},
        {"pattern": "$relay/addr/%u-ws", "permission": "read"},
        {"pattern": "$relay/addr/friends/#", "permission": "write"},
        {"pattern": "$relay/room/public", "permission": "readwrite"},
        {"pattern": "$relay/game/chess", "permission": "write"},
        {"pattern": "open/#", "permission": "readwrite"},
    ]);
    let token = common::auth::token("dana", Some(acl));
    // Without a credential, anonymous access is off.
    let mut anonymous = Client::connect(&server, Kind::Tcp).await;
    anonymous.send(json!({"t": "register", "addr": "dana"})).await;
    anonymous.expect_error("not authorized").await;
    // A token in register.
    anonymous.send(json!({"t": "register", "addr": "dana", "username": "dana", "token": token})).await;
    anonymous.expect("registered").await;
    // A token in the WebSocket URL.
    let to = relay::addr(&server, Kind::Ws);
    let mut ws = Client::connect_to(to, Kind::Ws, &format!("/?token={token}")).await;
    ws.send(json!({"t": "register", "addr": "dana-ws", "username": "dana"})).await;
    ws.expect("registered").await;

    // The same ACL gates addresses, rooms, games and topics.
    let mut other = Client::connect(&server, Kind::Udp).await;
    other.send(json!({"t": "register", "addr": "eve", "username": "dana", "token": token})).await;
    other.expect_error("not authorized").await;
    let c = &mut anonymous;
    c.send(json!({"t": "send", "to": "strangers/x", "ct": "hi"})).await;
    c.expect_error("not authorized").await;
    c.send(json!({"t": "send", "to": "friends/x", "ct": "hi"})).await;
    c.expect("queued").await;
    c.send(json!({"t": "join_room", "room": "vip"})).await;
    c.expect_error("not authorized").await;
    c.send(json!({"t": "join_room", "room": "public"})).await;
    c.expect("joined_room").await;
    c.send(json!({"t": "find_match", "game": "poker"})).await;
    c.expect_error("not authorized").await;
    c.send(json!({"t": "find_match", "game": "chess"})).await;
    c.expect("waiting").await;
    c.send(json!({"t": "subscribe", "topic": "closed/#"})).await;
    c.expect_error("not authorized").await;
    c.send(json!({"t": "subscribe", "topic": "open/#"})).await;
    c.expect("subscribed").await;
    c.send(json!({"t": "publish", "topic": "closed/x", "ct": "no"})).await;
    c.expect_error("not authorized").await;
    c.send(json!({"t": "publish", "topic": "open/x", "ct": "yes"})).await;
    assert_eq!(c.expect("message").await["ct"], "yes");
    // `$relay/` is reserved: no publish goes there.
    c.send(json!({"t": "publish", "topic": "$relay/addr/dana", "ct": "forged"})).await;
    c.expect_error("not authorized").await;
}

#[tokio::test]
async fn half_a_tcp_frame_holds_up_nobody() {
    use tokio::io::AsyncWriteExt;
    let server = relay::server("").await;
    let mut half = Client::connect(&server, Kind::Tcp).await;
    half.register("half").await;
    let body = json!({"t": "send", "to": "whole", "ct": "late"}).to_string();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body.as_bytes());
    let (first, rest) = frame.split_at(10);
    half.tcp().write_all(first).await.unwrap();
    // The server (on this test's one thread) keeps serving others meanwhile.
    let mut whole = Client::connect(&server, Kind::Tcp).await;
    whole.register("whole").await;
    half.tcp().write_all(rest).await.unwrap();
    assert_eq!(whole.expect("deliver").await["ct"], "late");
}
