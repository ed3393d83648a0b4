//! The relay and content routing across nodes over a real nats-server (`nats-server -js` on a
//! loopback port) and three in-process mesgd nodes, with real relay clients over TCP and
//! WebSocket and real content-routing WebSocket clients: direct sends to a client on another
//! node, the cluster-wide store-and-forward queue flushed by the node an address registers on
//! next, one holder per address in the whole cluster, and content messages sent only to the
//! nodes with a matching listener.

mod common;
#[path = "common/content.rs"]
mod content;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::sync::atomic::Ordering;

use common::nats::{NatsServer, cluster, node};
use common::relay::{Client, KINDS, Kind, LISTENERS};
use common::{TestServer, within};
use serde_json::json;

async fn relay_node(nats: &NatsServer, name: &str) -> TestServer {
    node(nats, name, LISTENERS).await
}

fn relay_stat(server: &TestServer, pick: fn(&mesgd_cluster::RelayClusterStats) -> u64) -> u64 {
    pick(&cluster(server).stats().relay)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_a_sends_to_an_address_on_b_and_to_one_that_registers_later_on_c() {
    let nats = NatsServer::start().await;
    let a = relay_node(&nats, "a").await;
    let b = relay_node(&nats, "b").await;
    let c = relay_node(&nats, "c").await;
    let mut alice = Client::connect(&a, Kind::Tcp).await;
    alice.register("alice").await;
    let mut bob = Client::connect(&b, Kind::Ws).await;
    bob.register("bob").await;

    // Live to another node, and the recipient's ack back.
    alice.send(json!({"t": "send", "to": "bob", "ct": "hello bob", "id": "m1"})).await;
    let got = bob.expect("deliver").await;
    assert_eq!(
        (&got["from"], &got["ct"], &got["id"], &got["kind"]),
        (&json!("alice"), &json!("hello bob"), &json!("m1"), &json!("live")),
        "{got}"
    );
    bob.send(json!({"t": "ack", "to": "alice", "id": "m1"})).await;
    let ack = alice.expect("ack").await;
    assert_eq!((&ack["id"], &ack["from"]), (&json!("m1"), &json!("bob")), "{ack}");

    // Offline everywhere: queued in the cluster, each answered `queued`.
    for i in 0..3 {
        alice.send(json!({"t": "send", "to": "carol", "ct": format!("c{i}"), "pub": "K"})).await;
        let queued = alice.expect("queued").await;
        assert_eq!(queued["to"], "carol");
    }
    // Carol registers on a third node: the backlog, in order, before `registered`.
    let mut carol = Client::connect(&c, Kind::Tcp).await;
    carol.send(json!({"t": "register", "addr": "carol"})).await;
    for i in 0..3 {
        let got = carol.expect("deliver").await;
        assert_eq!(
            (&got["from"], &got["ct"], &got["pub"], &got["kind"]),
            (&json!("alice"), &json!(format!("c{i}")), &json!("K"), &json!("queued")),
            "{got}"
        );
    }
    let registered = carol.expect("registered").await;
    assert_eq!((&registered["addr"], &registered["queued"]), (&json!("carol"), &json!(3)));

    // Now online on c: live from a.
    alice.send(json!({"t": "send", "to": "carol", "ct": "live now"})).await;
    let got = carol.expect("deliver").await;
    assert_eq!((&got["ct"], &got["kind"]), (&json!("live now"), &json!("live")), "{got}");

    // Taken out exactly once: carol registering again elsewhere finds nothing queued.
    drop(carol);
    let mut again = Client::connect(&b, Kind::Ws).await;
    let registered = register_when_free(&mut again, "carol").await;
    assert_eq!(registered["queued"], 0, "{registered}");

    assert_eq!(relay_stat(&a, |s| s.sent_remote.load(Ordering::Relaxed)), 2, "bob and carol, live");
    assert_eq!(relay_stat(&a, |s| s.queued.load(Ordering::Relaxed)), 3);
    assert_eq!(relay_stat(&b, |s| s.sent_remote.load(Ordering::Relaxed)), 1, "the ack");
    assert_eq!(relay_stat(&b, |s| s.received.load(Ordering::Relaxed)), 1);
    assert_eq!(relay_stat(&c, |s| s.flushed.load(Ordering::Relaxed)), 3);
    assert_eq!(relay_stat(&c, |s| s.received.load(Ordering::Relaxed)), 1);
    for n in [&a, &b, &c] {
        assert_eq!(relay_stat(n, |s| s.send_failures.load(Ordering::Relaxed)), 0);
        assert_eq!(relay_stat(n, |s| s.decode_errors.load(Ordering::Relaxed)), 0);
    }
}

/// Registers `addr`, retrying while a node that held it has not yet released its record.
async fn register_when_free(client: &mut Client, addr: &str) -> serde_json::Value {
    within("the address to be free", async {
        loop {
            client.send(json!({"t": "register", "addr": addr})).await;
            let answer = client.recv().await;
            match answer["t"].as_str() {
                Some("registered") => return answer,
                Some("error") if answer["msg"] == "address in use" => {
                    tokio::task::yield_now().await;
                }
                _ => panic!("unexpected answer to register: {answer}"),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_on_another_node_right_after_subscribed_arrives() {
    let nats = NatsServer::start().await;
    let a = relay_node(&nats, "a").await;
    let b = relay_node(&nats, "b").await;
    let mut publisher =
        common::Raw::connected(b.addr, mesgd_core::mqtt::ProtocolVersion::V5, "publisher").await;
    for kind in KINDS {
        let mut subscriber = Client::connect(&a, kind).await;
        subscriber.register(&format!("{kind:?}").to_lowercase()).await;
        // Each round a filter no node has subscribed to yet, so that a needs a new NATS
        // subscription for it; the publish follows `subscribed` at once, with no other wait.
        for round in 0..10 {
            let topic = format!("fresh/{kind:?}/{round}");
            subscriber.send(json!({"t": "subscribe", "topic": topic})).await;
            subscriber.expect("subscribed").await;
            publisher
                .send(&common::packets::publish_packet(&topic, 0, None, false, Some(&[]), b"right after"))
                .await;
            let message = subscriber.expect("message").await;
            assert_eq!(
                (&message["topic"], &message["ct"]),
                (&json!(topic), &json!("right after")),
                "{kind:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_message_sent_on_another_node_right_after_joined_room_arrives() {
    let nats = NatsServer::start().await;
    let a = relay_node(&nats, "a").await;
    let b = relay_node(&nats, "b").await;
    let mut member = Client::registered(&b, Kind::Tcp, "member").await;
    let mut missed = Vec::new();
    for kind in KINDS {
        let mut joiner = Client::registered(&a, kind, &format!("joiner-{kind:?}").to_lowercase()).await;
        // Each round a room a has no member of, so that a needs a new NATS subscription for
        // it; the member on b sends as soon as the joiner has `joined_room`, with no other wait.
        for round in 0..10 {
            let room = format!("fresh-{kind:?}-{round}");
            member.send(json!({"t": "join_room", "room": room})).await;
            member.expect("joined_room").await;
            joiner.send(json!({"t": "join_room", "room": room})).await;
            let joined = joiner.expect("joined_room").await;
            assert_eq!((&joined["room"], &joined["members"]), (&json!(room), &json!(2)), "{kind:?}");
            member.send(json!({"t": "room_send", "room": room, "ct": "right after"})).await;
            // A marker sent once a's subscription is surely in place: the joiner gets it after
            // the first message, or alone when the first was missed.
            within("a's room subscription", cluster(&a).relay_rooms_synced()).await;
            member.send(json!({"t": "room_send", "room": room, "ct": "marker"})).await;
            let first = joiner.expect("room_deliver").await;
            assert_eq!((&first["room"], &first["from"]), (&json!(room), &json!("member")), "{first}");
            if first["ct"] == "marker" {
                missed.push(room);
                continue;
            }
            assert_eq!(first["ct"], "right after", "{first}");
            assert_eq!(joiner.expect("room_deliver").await["ct"], "marker", "{kind:?}");
        }
    }
    assert!(missed.is_empty(), "the message sent right after joined_room missed a in {missed:?}");
    assert_eq!(relay_stat(&a, |s| s.room_sync_timeouts.load(Ordering::Relaxed)), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_is_answered_within_the_bound_when_nats_does_not_confirm() {
    let mut nats = NatsServer::start().await;
    let config =
        format!("{LISTENERS}[cluster]\nnode = \"a\"\nnats = [{:?}]\nregistry_timeout_ms = 300\n", nats.url);
    let a = TestServer::start(&config).await;
    let mut first = Client::registered(&a, Kind::Tcp, "first").await;
    let mut second = Client::registered(&a, Kind::Ws, "second").await;
    within("room subscriptions", cluster(&a).relay_rooms_synced()).await;

    // A server that hangs: its connection stays up, the confirmation never comes.
    nats.pause().await;
    let started = std::time::Instant::now();
    first.send(json!({"t": "join_room", "room": "hung"})).await;
    let joined = first.expect("joined_room").await;
    let waited = started.elapsed();
    nats.resume();
    assert_eq!((&joined["room"], &joined["members"]), (&json!("hung"), &json!(1)));
    assert!(waited >= std::time::Duration::from_millis(300), "answered after {waited:?}, before the bound");
    assert_eq!(relay_stat(&a, |s| s.room_sync_timeouts.load(Ordering::Relaxed)), 1);
    // Confirmed once the server answers again; a later join waits no more.
    within("the room subscription confirmed", cluster(&a).relay_rooms_synced()).await;
    second.send(json!({"t": "join_room", "room": "hung"})).await;
    assert_eq!(second.expect("joined_room").await["members"], 2);
    assert_eq!(relay_stat(&a, |s| s.room_sync_timeouts.load(Ordering::Relaxed)), 1);

    // NATS gone: answered all the same (the room is this node's until NATS is back).
    nats.kill().await;
    first.send(json!({"t": "join_room", "room": "alone"})).await;
    assert_eq!(first.expect("joined_room").await["members"], 1);
    second.send(json!({"t": "room_send", "room": "hung", "ct": "still here"})).await;
    assert_eq!(first.expect("room_deliver").await["ct"], "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_held_on_one_node_is_in_use_on_the_others_until_it_leaves() {
    let nats = NatsServer::start().await;
    let a = relay_node(&nats, "a").await;
    let b = relay_node(&nats, "b").await;
    let mut first = Client::connect(&a, Kind::Tcp).await;
    first.register("dave").await;
    for kind in [Kind::Tcp, Kind::Ws] {
        let mut second = Client::connect(&b, kind).await;
        second.send(json!({"t": "register", "addr": "dave"})).await;
        second.expect_error("address in use").await;
        // Refused, not registered: it may try another address.
        second.register(&format!("dave-{kind:?}")).await;
    }
    assert_eq!(relay_stat(&b, |s| s.claims_in_use.load(Ordering::Relaxed)), 2);

    // Two clients on two nodes racing for one free address: exactly one wins.
    let mut x = Client::connect(&a, Kind::Tcp).await;
    let mut y = Client::connect(&b, Kind::Tcp).await;
    let register = json!({"t": "register", "addr": "erin"});
    tokio::join!(x.send(register.clone()), y.send(register));
    let (ax, ay) = tokio::join!(x.recv(), y.recv());
    let won: Vec<bool> = [&ax, &ay].iter().map(|m| m["t"] == "registered").collect();
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{ax} / {ay}");
    let loser = if won[0] { &ay } else { &ax };
    assert_eq!(loser["msg"], "address in use", "{loser}");

    // Dave leaves a: the address is free on b, and a's clients reach it there.
    drop(first);
    let mut moved = Client::connect(&b, Kind::Ws).await;
    register_when_free(&mut moved, "dave").await;
    let mut sender = Client::connect(&a, Kind::Tcp).await;
    sender.register("frank").await;
    sender.send(json!({"t": "send", "to": "dave", "ct": "found you"})).await;
    let got = moved.expect("deliver").await;
    assert_eq!(
        (&got["from"], &got["ct"], &got["kind"]),
        (&json!("frank"), &json!("found you"), &json!("live"))
    );
    assert!(relay_stat(&a, |s| s.released.load(Ordering::Relaxed)) >= 1);
}

async fn content_node(nats: &NatsServer, name: &str) -> content::ContentServer {
    content::ContentServer::start(&format!(
        "[content]\ndisable_auth = true\n[cluster]\nnode = {name:?}\nnats = [{:?}]\n",
        nats.url
    ))
    .await
}

fn content_cluster(server: &content::ContentServer) -> &mesgd_cluster::Cluster {
    server.server.as_ref().expect("running").cluster().expect("clustered")
}

fn content_stat(
    server: &content::ContentServer,
    pick: fn(&mesgd_cluster::ContentClusterStats) -> u64,
) -> u64 {
    pick(&content_cluster(server).stats().content)
}

/// Waits until `server` knows exactly `n` listener paths of other nodes.
async fn knows_paths(server: &content::ContentServer, n: u64) {
    let mut applied = content_cluster(server).content_paths_applied().expect("content attached");
    let known = |s: &content::ContentServer| content_stat(s, |c| c.remote_paths.load(Ordering::Relaxed));
    within("the other nodes' listener paths", applied.wait_for(|_| known(server) == n))
        .await
        .expect("the watcher runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_messages_go_only_to_nodes_with_a_matching_listener_once_and_in_order() {
    let nats = NatsServer::start().await;
    let a = content_node(&nats, "a").await;
    let b = content_node(&nats, "b").await;
    let c = content_node(&nats, "c").await;
    // Two matching listeners on b, one that matches nothing sent here on c.
    let mut chat = b.open("/kind=chat").await;
    let mut lobby = b.open("/room=lobby/kind=chat").await;
    let _other = c.open("/kind=other").await;
    // The sender listens on a path its own messages do not match.
    let mut sender = a.open("/kind=sender").await;
    knows_paths(&a, 3).await;

    const N: usize = 20;
    for i in 0..N {
        sender.send(&format!(r#"{{"kind":"chat","room":"lobby","n":{i}}}"#)).await;
    }
    sender.send(r#"{"kind":"chat","room":"lobby","n":"end"}"#).await;
    let expected: Vec<String> = (0..N)
        .map(|i| format!(r#"{{"kind":"chat","room":"lobby","n":{i}}}"#))
        .chain([r#"{"kind":"chat","room":"lobby","n":"end"}"#.to_owned()])
        .collect();
    assert_eq!(chat.recv_n(N + 1).await, expected);
    assert_eq!(lobby.recv_n(N + 1).await, expected);
    // One copy per message for b's two listeners; nothing at all for c.
    assert_eq!(content_stat(&b, |s| s.received.load(Ordering::Relaxed)), N as u64 + 1);
    assert_eq!(content_stat(&a, |s| s.forwarded.load(Ordering::Relaxed)), N as u64 + 1);
    assert_eq!(content_stat(&c, |s| s.received.load(Ordering::Relaxed)), 0, "c has no matching listener");

    // A matching listener on c too: the next message reaches both nodes once each.
    let mut room = c.open("/room=lobby").await;
    knows_paths(&a, 4).await;
    sender.send(r#"{"kind":"chat","room":"lobby","n":"both"}"#).await;
    // And one that only c's new listener matches.
    sender.send(r#"{"room":"lobby","n":"c only"}"#).await;
    assert_eq!(chat.recv().await, r#"{"kind":"chat","room":"lobby","n":"both"}"#);
    assert_eq!(lobby.recv().await, r#"{"kind":"chat","room":"lobby","n":"both"}"#);
    assert_eq!(
        room.recv_n(2).await,
        [r#"{"kind":"chat","room":"lobby","n":"both"}"#, r#"{"room":"lobby","n":"c only"}"#]
    );
    // A marker to b proves nothing else was queued there for chat or lobby.
    sender.send(r#"{"kind":"chat","n":"marker"}"#).await;
    assert_eq!(chat.recv().await, r#"{"kind":"chat","n":"marker"}"#);
    assert_eq!(content_stat(&b, |s| s.received.load(Ordering::Relaxed)), N as u64 + 3);
    assert_eq!(content_stat(&c, |s| s.received.load(Ordering::Relaxed)), 2);
    assert_eq!(content_stat(&a, |s| s.forwarded.load(Ordering::Relaxed)), N as u64 + 5);
    // No node read a bad message or dropped one.
    for n in [&a, &b, &c] {
        assert_eq!(content_stat(n, |s| s.decode_errors.load(Ordering::Relaxed)), 0);
        assert_eq!(content_stat(n, |s| s.queue_full.load(Ordering::Relaxed)), 0);
    }

    // A listener leaving withdraws its path: a no longer sends c what only it matched.
    room.close().await;
    knows_paths(&a, 3).await;
    sender.send(r#"{"room":"lobby","n":"nobody"}"#).await;
    sender.send(r#"{"kind":"chat","n":"after"}"#).await;
    assert_eq!(chat.recv().await, r#"{"kind":"chat","n":"after"}"#);
    assert_eq!(content_stat(&c, |s| s.received.load(Ordering::Relaxed)), 2);
}

/// A node that stops with a content listener still connected withdraws its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_withdraws_its_content_paths() {
    let nats = NatsServer::start().await;
    let a = content_node(&nats, "a").await;
    let mut b = content_node(&nats, "b").await;
    let _listener = b.open("/room=lobby").await;
    knows_paths(&a, 1).await;
    b.stop().await;
    knows_paths(&a, 0).await;
}

/// A node that dies with a content listener (the real binary, killed with SIGKILL) has its
/// listener path withdrawn by the node that takes over its lease: the others stop sending it
/// messages. (Before, the path stayed in the bucket until the dead node started again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_has_its_content_paths_withdrawn_with_its_lease() {
    const LEASE_MS: u64 = 1000;
    let nats = NatsServer::start().await;
    let a = content::ContentServer::start(&format!(
        "[content]\ndisable_auth = true\n[cluster]\nnode = \"a\"\nnats = [{:?}]\nlease_ms = {LEASE_MS}\n",
        nats.url
    ))
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let tables = "[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n[content]\ndisable_auth = true\n";
    let config =
        daemon::cluster_node_config(dir.path(), "d", &nats.url, tables, &format!("lease_ms = {LEASE_MS}"));
    let mut d = daemon::Daemon::start(&config, &["mqtt", "http"]).await;
    let addr = d.addr("http");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("tcp connect");
    let (_listener, _) = within(
        "the listener's upgrade on d",
        tokio_tungstenite::client_async(format!("ws://{addr}/room=lobby"), tcp),
    )
    .await
    .expect("upgraded on d");
    knows_paths(&a, 1).await;

    d.child.kill().await.expect("SIGKILL");
    knows_paths(&a, 0).await;
    // The watcher may apply the delete before the withdrawing task counts it.
    within("a to count the path it withdrew for d", async {
        while content_stat(&a, |s| s.paths_withdrawn.load(Ordering::Relaxed)) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(content_stat(&a, |s| s.paths_withdrawn.load(Ordering::Relaxed)), 1, "a took d's lease");
}

/// The next `room_deliver` `client` gets: (from, ct).
async fn room_message(client: &mut Client) -> (String, String) {
    let got = client.expect("room_deliver").await;
    assert_eq!(got["room"], "lobby", "{got}");
    (got["from"].as_str().unwrap().to_owned(), got["ct"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_message_reaches_every_member_on_every_node_once() {
    let nats = NatsServer::start().await;
    let a = relay_node(&nats, "a").await;
    let b = relay_node(&nats, "b").await;
    let c = relay_node(&nats, "c").await;
    let mut members = Vec::new();
    for (name, server, kind) in
        [("m1", &a, Kind::Tcp), ("m2", &b, Kind::Ws), ("m3", &c, Kind::Tcp), ("m4", &b, Kind::Tcp)]
    {
        let mut client = Client::connect(server, kind).await;
        client.register(name).await;
        client.send(json!({"t": "join_room", "room": "lobby"})).await;
        let joined = client.expect("joined_room").await;
        assert_eq!(joined["room"], "lobby");
        members.push(client);
    }
    // A node without members is not subscribed.
    let outsider = relay_node(&nats, "d").await;
    for n in [&a, &b, &c, &outsider] {
        within("room subscriptions", cluster(n).relay_rooms_synced()).await;
    }
    assert_eq!(relay_stat(&b, |s| s.rooms.load(Ordering::Relaxed)), 1, "one subscription for two members");
    assert_eq!(relay_stat(&outsider, |s| s.rooms.load(Ordering::Relaxed)), 0);

    // From a member on a, and from one on b (whose neighbour m4 gets it locally, not again).
    let senders = [0, 1, 2];
    for (round, &from) in senders.iter().enumerate() {
        let ct = format!("round {round}");
        members[from].send(json!({"t": "room_send", "room": "lobby", "ct": ct})).await;
        for (i, member) in members.iter_mut().enumerate() {
            if i != from {
                let name = format!("m{}", from + 1);
                assert_eq!(room_message(member).await, (name, ct.clone()), "member m{}", i + 1);
            }
        }
    }
    // The last message each got was the one above: a duplicate would come before this marker.
    members[3].send(json!({"t": "room_send", "room": "lobby", "ct": "marker"})).await;
    for member in &mut members[..3] {
        assert_eq!(room_message(member).await, ("m4".to_owned(), "marker".to_owned()));
    }
    assert_eq!(relay_stat(&a, |s| s.room_received.load(Ordering::Relaxed)), 3, "from m2, m3, m4");
    assert_eq!(relay_stat(&b, |s| s.room_received.load(Ordering::Relaxed)), 2, "from m1, m3");
    assert_eq!(relay_stat(&c, |s| s.room_received.load(Ordering::Relaxed)), 3, "from m1, m2, m4");
    assert_eq!(relay_stat(&outsider, |s| s.room_received.load(Ordering::Relaxed)), 0);

    // The last member on c leaves: c unsubscribes and is sent nothing more.
    drop(members.remove(2));
    within("c's member to leave", async {
        while relay_stat(&c, |s| s.rooms.load(Ordering::Relaxed)) != 0 {
            cluster(&c).relay_rooms_synced().await;
            tokio::task::yield_now().await;
        }
    })
    .await;
    members[0].send(json!({"t": "room_send", "room": "lobby", "ct": "after"})).await;
    assert_eq!(room_message(&mut members[1]).await, ("m1".to_owned(), "after".to_owned()));
    assert_eq!(room_message(&mut members[2]).await, ("m1".to_owned(), "after".to_owned()));
    assert_eq!(relay_stat(&c, |s| s.room_received.load(Ordering::Relaxed)), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_bound_to_a_key_on_one_node_admits_only_that_key_on_every_node() {
    const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
    let nats = NatsServer::start().await;
    let a = relay_node(&nats, "a").await;
    let b = relay_node(&nats, "b").await;
    let c = relay_node(&nats, "c").await;
    let mut first = Client::connect(&a, Kind::Tcp).await;
    first.send(json!({"t": "register", "addr": "gina", "pubkey": K1})).await;
    first.expect("registered").await;
    drop(first);
    // Another key, or none, on the other nodes: refused, and the address is not held after.
    let mut other = Client::connect(&b, Kind::Ws).await;
    let mut keyless = Client::connect(&c, Kind::Tcp).await;
    within("gina's record to be released on a", async {
        loop {
            other.send(json!({"t": "register", "addr": "gina", "pubkey": K2})).await;
            let answer = other.expect("error").await;
            match answer["msg"].as_str() {
                Some("alias bound to a different key") => break,
                Some("address in use") => tokio::task::yield_now().await,
                _ => panic!("{answer}"),
            }
        }
    })
    .await;
    keyless.send(json!({"t": "register", "addr": "gina"})).await;
    keyless.expect_error("alias bound to a different key").await;
    // The bound key reclaims it on any node.
    let mut again = Client::connect(&c, Kind::Tcp).await;
    again.send(json!({"t": "register", "addr": "gina", "pubkey": K1})).await;
    again.expect("registered").await;
    assert_eq!(relay_stat(&a, |s| s.aliases_bound.load(Ordering::Relaxed)), 1);
    assert_eq!(relay_stat(&c, |s| s.aliases_bound.load(Ordering::Relaxed)), 0, "reclaimed, not bound again");
    assert_eq!(relay_stat(&b, |s| s.alias_refused.load(Ordering::Relaxed)), 1);
    assert_eq!(relay_stat(&c, |s| s.alias_refused.load(Ordering::Relaxed)), 1);
    // A plain alias nobody bound stays usable without a key everywhere.
    keyless.register("hank").await;
}
