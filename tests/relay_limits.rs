//! The relay's defences through the real interface: key proof (`require_key_proof` on and
//! off), load refusal, a client that stops reading, and the count caps per connection (rooms,
//! pipes, games), each refusing only the request over it.

mod common;

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::relay::{self, Client, Kind};
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// The bytes a key-proof signature covers, written from docs/relay.md: the context string, a
/// zero byte, the raw nonce, the address.
fn proof_message(nonce: &[u8], address: &str) -> Vec<u8> {
    let mut m = b"mesgd relay register v1\0".to_vec();
    m.extend_from_slice(nonce);
    m.extend_from_slice(address.as_bytes());
    m
}

fn key(seed: u8) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).expect("ed25519 seed")
}

/// Asks for a challenge and returns the register message for `addr` signed by `key`.
async fn signed_register(c: &mut Client, key: &Ed25519KeyPair, addr: &str) -> serde_json::Value {
    c.send(json!({"t": "challenge"})).await;
    let nonce =
        STANDARD.decode(c.expect("challenge").await["nonce"].as_str().expect("nonce")).expect("base64");
    assert_eq!(nonce.len(), 32);
    let sig = key.sign(&proof_message(&nonce, addr));
    let pubkey = STANDARD.encode(key.public_key().as_ref());
    json!({"t": "register", "addr": addr, "pubkey": pubkey, "sig": STANDARD.encode(sig.as_ref())})
}

#[tokio::test]
async fn key_proof_required() {
    let server = relay::server("[relay]\nrequire_key_proof = true\n").await;
    for kind in relay::KINDS {
        let owner = key(7);
        let pubkey = STANDARD.encode(owner.public_key().as_ref());
        let alias = format!("proven-{kind:?}").to_lowercase();
        let mut c = Client::connect(&server, kind).await;
        // Knowing the key is not enough.
        c.send(json!({"t": "register", "addr": alias, "pubkey": pubkey})).await;
        c.expect_error("key proof required").await;
        // A signature by another key, or over another address, is refused.
        let mut forged = signed_register(&mut c, &key(8), &alias).await;
        forged["pubkey"] = json!(pubkey);
        c.send(forged).await;
        c.expect_error("invalid signature").await;
        let other = signed_register(&mut c, &owner, "elsewhere").await;
        let mut replayed = other.clone();
        replayed["addr"] = json!(alias);
        c.send(replayed).await;
        c.expect_error("invalid signature").await;
        // A challenge is good for one register.
        c.send(other).await;
        c.expect_error("key proof required").await;
        let good = signed_register(&mut c, &owner, &alias).await;
        c.send(good).await;
        assert_eq!(c.expect("registered").await["addr"], alias.as_str());
        // A plain address needs no proof.
        let mut plain = Client::connect(&server, kind).await;
        plain.register(&format!("plain-{kind:?}").to_lowercase()).await;
        c.close().await;
        plain.close().await;
    }
}

#[tokio::test]
async fn key_proof_off_takes_the_key_alone_but_checks_a_signature_sent() {
    let server = relay::server("").await;
    let owner = key(9);
    let pubkey = STANDARD.encode(owner.public_key().as_ref());
    let mut c = Client::connect(&server, Kind::Tcp).await;
    let mut bad = signed_register(&mut c, &key(10), "lax").await;
    bad["pubkey"] = json!(pubkey);
    c.send(bad).await;
    c.expect_error("invalid signature").await;
    c.send(json!({"t": "register", "addr": "lax", "pubkey": pubkey})).await;
    c.expect("registered").await;
}

#[tokio::test]
async fn an_overloaded_relay_refuses_register() {
    let server = relay::server("[relay]\nmax_connections = 2\n").await;
    let mut first = Client::connect(&server, Kind::Tcp).await;
    first.register("first").await;
    let mut second = Client::connect(&server, Kind::Ws).await;
    // Wait until the relay counts the second connection: its load shows in capabilities.
    loop {
        second.send(json!({"t": "capabilities"})).await;
        let caps = second.expect("capabilities").await;
        if caps["load_factor"].as_f64() == Some(1.0) {
            assert_eq!(caps["load_tier"], "high");
            break;
        }
    }
    second.send(json!({"t": "register", "addr": "second"})).await;
    second.expect_error("relay overloaded, retry later").await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_at_its_output_cap() {
    let server = relay::server(
        "[relay]\nmax_output_bytes = 262144\nrate_bytes_per_s = 1000000000\nrate_byte_burst = 1000000000\n",
    )
    .await;
    let mut sleeper = Client::connect(&server, Kind::Tcp).await;
    sleeper.register("sleeper").await;
    let mut sender = Client::connect(&server, Kind::Tcp).await;
    sender.register("firehose").await;
    let body = json!({"t": "send", "to": "sleeper", "ct": "x".repeat(60_000)}).to_string();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body.as_bytes());
    let stats = server.server.as_ref().unwrap().context().relay().stats();
    let disconnected = || mesgd::relay::RelayStats::get(&stats.slow_consumer_disconnects);
    // Socket buffers take some megabytes first; bounded at 100 MB sent.
    let mut sent = 0;
    while disconnected() == 0 && sent < 1_700 {
        sender.tcp().write_all(&frame).await.unwrap();
        sent += 1;
    }
    assert_eq!(disconnected(), 1, "after {sent} messages of 60 kB");
    // Its address was released: sends to it are queued now.
    let mut probe = Client::connect(&server, Kind::Ws).await;
    probe.register("probe").await;
    loop {
        probe.send(json!({"t": "send", "to": "sleeper", "ct": "?"})).await;
        if probe.recv().await["t"] == "queued" {
            break;
        }
    }
}

#[tokio::test]
async fn a_silent_tcp_client_is_closed_and_its_address_released() {
    let server = relay::server("[relay]\ntcp_idle_s = 1\n").await;
    let mut silent = Client::connect(&server, Kind::Tcp).await;
    silent.register("silent").await;
    // The relay closes the connection after a second without a frame; the address is released
    // before the close.
    assert!(silent.closed().await.is_empty());
    let mut next = Client::connect(&server, Kind::Ws).await;
    next.register("silent").await;
    let stats = server.server.as_ref().unwrap().context().relay().stats();
    assert_eq!(mesgd::relay::RelayStats::get(&stats.dead_peer_releases), 1);
}

#[tokio::test]
async fn a_silent_udp_source_is_forgotten_after_udp_idle_s() {
    let server = relay::server("[relay]\nudp_idle_s = 1\n").await;
    let mut silent = Client::connect(&server, Kind::Udp).await;
    silent.register("udp-silent").await;
    let stats = server.server.as_ref().unwrap().context().relay().stats();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    common::within("the source to be forgotten", async {
        while mesgd::relay::RelayStats::get(&stats.dead_peer_releases) == 0 {
            tick.tick().await;
        }
    })
    .await;
    let mut next = Client::connect(&server, Kind::Tcp).await;
    next.register("udp-silent").await;
}

#[tokio::test]
async fn turn_credentials_follow_the_turn_rest_api() {
    use aws_lc_rs::hmac;
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("turn.secret");
    std::fs::write(&secret_file, "north-secret\n").unwrap();
    let server = relay::server(&format!(
        "[relay.turn]\nsecret_file = {:?}\nurls = [\"turn:turn.example.net:3478\"]\nttl_s = 600\n",
        secret_file.display().to_string()
    ))
    .await;
    let mut c = Client::connect(&server, Kind::Ws).await;
    c.register("caller").await;
    let before = common::auth::unix_now();
    c.send(json!({"t": "turn_credentials"})).await;
    let turn = c.expect("turn_credentials").await;
    assert_eq!(turn["urls"], json!(["turn:turn.example.net:3478"]));
    assert_eq!(turn["ttl"], 600);
    let username = turn["username"].as_str().expect("username");
    let (expiry, addr) = username.split_once(':').expect("<expiry>:<addr>");
    assert_eq!(addr, "caller");
    let expiry: u64 = expiry.parse().unwrap();
    assert!((before + 600..=common::auth::unix_now() + 600).contains(&expiry), "{username}");
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, b"north-secret");
    let expected = STANDARD.encode(hmac::sign(&key, username.as_bytes()).as_ref());
    assert_eq!(turn["credential"], expected);
}

#[tokio::test]
async fn count_caps_refuse_only_the_request_over_them_and_are_counted() {
    let server = relay::server(
        "[relay]\nmax_rooms_per_connection = 2\nmax_pipes_per_connection = 1\nmax_games_per_connection = 1\n",
    )
    .await;
    let mut ann = Client::connect(&server, Kind::Tcp).await;
    ann.register("ann").await;
    let mut bob = Client::connect(&server, Kind::Ws).await;
    bob.register("bob").await;
    let mut cid = Client::connect(&server, Kind::Tcp).await;
    cid.register("cid").await;

    for room in ["r1", "r2"] {
        ann.send(json!({"t": "join_room", "room": room})).await;
        ann.expect("joined_room").await;
    }
    ann.send(json!({"t": "join_room", "room": "r3"})).await;
    ann.expect_error("limit reached: rooms per connection").await;

    ann.send(json!({"t": "open_pipe", "to": "bob"})).await;
    let pipe = ann.expect("pipe_open").await["pipe_id"].clone();
    bob.expect("pipe_incoming").await;
    ann.send(json!({"t": "open_pipe", "to": "cid"})).await;
    ann.expect_error("limit reached: pipes per connection").await;
    // bob, the other end, is at the cap as well.
    cid.send(json!({"t": "open_pipe", "to": "bob"})).await;
    cid.expect_error("limit reached: pipes per connection").await;

    ann.send(json!({"t": "find_match", "game": "chess"})).await;
    ann.expect("waiting").await;
    ann.send(json!({"t": "find_match", "game": "go"})).await;
    ann.expect_error("limit reached: games per connection").await;

    let ctx = server.server.as_ref().unwrap().context();
    assert_eq!(ctx.limits().counters.snapshot().relay_caps, 4);
    let refused = ctx.relay().sizes().refused;
    assert_eq!((refused.0, refused.1, refused.2), (1, 2, 1), "rooms, pipes, games");

    // What was granted still works, and the others are not held to ann's caps.
    ann.send(json!({"t": "pipe_data", "pipe_id": pipe, "n": 1})).await;
    assert_eq!(bob.expect("pipe_data").await["n"], 1);
    cid.send(json!({"t": "join_room", "room": "r3"})).await;
    cid.expect("joined_room").await;
    cid.send(json!({"t": "join_room", "room": "r1"})).await;
    cid.expect("joined_room").await;
    cid.send(json!({"t": "room_send", "room": "r1", "ct": "hello"})).await;
    let delivered = ann.expect("room_deliver").await;
    assert_eq!((&delivered["from"], &delivered["ct"]), (&json!("cid"), &json!("hello")));
    cid.send(json!({"t": "find_match", "game": "chess"})).await;
    assert_eq!(cid.expect("matched").await["peer"], "ann");
    assert_eq!(ann.expect("matched").await["peer"], "cid");
    assert_eq!(ctx.limits().counters.snapshot().relay_caps, 4);
}
