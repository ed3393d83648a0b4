//! Relay pipes whose ends are on two nodes, over a real nats-server (`nats-server -js` on a
//! loopback port) with in-process mesgd nodes and, for a node that dies, the real binary
//! killed with SIGKILL; real relay clients over TCP and WebSocket.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::time::{Duration, Instant};

use common::nats::{NatsServer, node, relay_counted, relay_stat};
use common::relay::{Client, Kind, LISTENERS};
use serde_json::{Value, json};

/// `opener` opens a pipe to `peer`, whose client is `incoming`: the opener gets `pipe_open`, the
/// peer `pipe_incoming` with the same id. Returns the id.
async fn open(opener: &mut Client, from: &str, incoming: &mut Client, peer: &str) -> String {
    opener.send(json!({"t": "open_pipe", "to": peer})).await;
    let opened = opener.expect("pipe_open").await;
    assert_eq!(opened["peer"], peer, "{opened}");
    let id = opened["pipe_id"].as_str().expect("pipe_id").to_owned();
    assert!(id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')), "{id}");
    let told = incoming.expect("pipe_incoming").await;
    assert_eq!((&told["pipe_id"], &told["peer"]), (&json!(id), &json!(from)), "{told}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_between_two_nodes_carries_data_both_ways_in_order_and_closes_from_either_end() {
    const N: u64 = 100;
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", LISTENERS).await;
    let b = node(&nats, "b", LISTENERS).await;
    let mut alice = Client::registered(&a, Kind::Tcp, "alice").await;
    let mut bob = Client::registered(&b, Kind::Ws, "bob").await;
    let id = open(&mut alice, "alice", &mut bob, "bob").await;

    // Verbatim, in order, both ways, the members in the sender's order.
    for n in 0..N {
        alice
            .send_raw(
                format!(r#"{{"t":"pipe_data","pipe_id":"{id}","z":[1,{{"k":"é"}}],"n":{n}}}"#).as_bytes(),
            )
            .await;
    }
    for n in 0..N {
        let got = bob.recv_raw().await.expect("open");
        assert_eq!(
            String::from_utf8(got).unwrap(),
            format!(r#"{{"t":"pipe_data","pipe_id":"{id}","z":[1,{{"k":"é"}}],"n":{n}}}"#)
        );
        bob.send(json!({"t": "pipe_data", "pipe_id": id, "echo": n})).await;
    }
    for n in 0..N {
        let got = alice.expect("pipe_data").await;
        assert_eq!((&got["pipe_id"], &got["echo"]), (&json!(id), &json!(n)), "{got}");
    }

    // Nobody else can use the pipe, on either node.
    let mut carol = Client::registered(&a, Kind::Tcp, "carol").await;
    let mut dave = Client::registered(&b, Kind::Tcp, "dave").await;
    for third in [&mut carol, &mut dave] {
        third.send(json!({"t": "pipe_data", "pipe_id": id, "x": 1})).await;
        third.expect_error("unknown pipe").await;
    }

    // The peer closes: the opener is told, and the pipe is gone on both nodes.
    bob.send(json!({"t": "close_pipe", "pipe_id": id})).await;
    let closed = alice.expect("pipe_closed").await;
    assert_eq!(closed["pipe_id"], json!(id));
    alice.send(json!({"t": "pipe_data", "pipe_id": id, "x": 1})).await;
    alice.expect_error("unknown pipe").await;
    bob.send(json!({"t": "pipe_data", "pipe_id": id, "x": 1})).await;
    bob.expect_error("unknown pipe").await;

    // The other way round, and closed by a disconnect of the opener.
    let id2 = open(&mut dave, "dave", &mut carol, "carol").await;
    dave.send(json!({"t": "pipe_data", "pipe_id": id2, "last": true})).await;
    assert_eq!(carol.expect("pipe_data").await["last"], true);
    dave.close().await;
    assert_eq!(carol.expect("pipe_closed").await["pipe_id"], json!(id2));

    assert_eq!((relay_stat(&a, |s| &s.pipes_opened), relay_stat(&b, |s| &s.pipes_opened)), (1, 1));
    assert_eq!((relay_stat(&a, |s| &s.pipes_accepted), relay_stat(&b, |s| &s.pipes_accepted)), (1, 1));
    relay_counted(&a, "alice's data sent", |s| &s.pipe_data_sent, N).await;
    relay_counted(&b, "alice's data received", |s| &s.pipe_data_received, N).await;
    relay_counted(&b, "bob's and dave's data sent", |s| &s.pipe_data_sent, N + 1).await;
    relay_counted(&a, "bob's and dave's data received", |s| &s.pipe_data_received, N + 1).await;
    relay_counted(&b, "bob's close and dave's disconnect sent", |s| &s.pipe_closes_sent, 2).await;
    relay_counted(&a, "the two closes received", |s| &s.pipe_closes_received, 2).await;
    for n in [&a, &b] {
        assert_eq!(relay_stat(n, |s| &s.pipe_data_unknown), 0);
        assert_eq!(relay_stat(n, |s| &s.pipe_open_failures), 0);
        assert_eq!(relay_stat(n, |s| &s.decode_errors), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_the_peer_sends_at_once_reaches_the_opener_after_pipe_open() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", LISTENERS).await;
    let b = node(&nats, "b", LISTENERS).await;
    let mut alice = Client::registered(&a, Kind::Ws, "alice").await;
    let mut bob = Client::registered(&b, Kind::Tcp, "bob").await;
    for round in 0..20 {
        alice.send(json!({"t": "open_pipe", "to": "bob"})).await;
        let incoming = bob.expect("pipe_incoming").await;
        let id = incoming["pipe_id"].as_str().unwrap().to_owned();
        // The peer answers before the opener may have heard from its node.
        bob.send(json!({"t": "pipe_data", "pipe_id": id, "round": round})).await;
        bob.send(json!({"t": "close_pipe", "pipe_id": id})).await;
        assert_eq!(alice.expect("pipe_open").await["pipe_id"], json!(id), "round {round}");
        assert_eq!(alice.expect("pipe_data").await["round"], round);
        assert_eq!(alice.expect("pipe_closed").await["pipe_id"], json!(id));
    }
    relay_counted(&a, "the twenty opens", |s| &s.pipes_opened, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_held_nowhere_is_not_connected_and_the_pipe_caps_hold_across_nodes() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", &format!("{LISTENERS}[relay]\nmax_pipes_per_connection = 2\n")).await;
    let b =
        node(&nats, "b", &format!("{LISTENERS}[relay]\nmax_pipes_per_connection = 1\nmax_pipes = 2\n")).await;
    let mut x = Client::registered(&a, Kind::Tcp, "x").await;
    x.send(json!({"t": "open_pipe", "to": "nobody"})).await;
    x.expect_error("peer not connected").await;
    x.send(json!({"t": "open_pipe", "to": "x"})).await;
    x.expect_error("cannot open a pipe to yourself").await;
    relay_counted(&a, "the open to nobody", |s| &s.pipe_opens_refused, 1).await;

    // On the peer's node: one pipe per connection there, two in all.
    let mut bob1 = Client::registered(&b, Kind::Tcp, "bob1").await;
    let mut bob2 = Client::registered(&b, Kind::Ws, "bob2").await;
    let _bob3 = Client::registered(&b, Kind::Tcp, "bob3").await;
    let mut y = Client::registered(&a, Kind::Ws, "y").await;
    open(&mut x, "x", &mut bob1, "bob1").await;
    y.send(json!({"t": "open_pipe", "to": "bob1"})).await;
    y.expect_error("limit reached: pipes per connection").await;
    open(&mut y, "y", &mut bob2, "bob2").await;
    let mut z = Client::registered(&a, Kind::Tcp, "z").await;
    z.send(json!({"t": "open_pipe", "to": "bob3"})).await;
    z.expect_error("limit reached: pipes").await;

    // On the opener's node: x may be an end of two, whatever node the peers are on.
    let _bob4 = Client::registered(&b, Kind::Tcp, "bob4").await;
    let mut w = Client::registered(&a, Kind::Tcp, "w").await;
    open(&mut x, "x", &mut w, "w").await;
    x.send(json!({"t": "open_pipe", "to": "bob4"})).await;
    x.expect_error("limit reached: pipes per connection").await;
    relay_counted(&a, "nobody, bob1's cap, b's cap", |s| &s.pipe_opens_refused, 3).await;
    assert_eq!(relay_stat(&b, |s| &s.pipes_accepted), 2);
    // Each refusal by a cap is counted once, on the refused client's node (y's and z's were
    // decided on b); each was counted before its error was sent.
    let caps =
        |n: &common::TestServer| n.server.as_ref().expect("running").context().limit_counts().relay_caps;
    assert_eq!((caps(&a), caps(&b)), (3, 0));
}

/// A pipe whose other end's node is killed (the real binary, SIGKILL) is closed on the
/// surviving node once the dead node's lease is taken over; the dead node's address is then
/// `peer not connected`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_to_a_node_that_dies_is_closed_within_the_lease_bound() {
    const LEASE_MS: u64 = 1000;
    let nats = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, mut d) = daemon::relay_node_and_process(&nats, dir.path(), LEASE_MS).await;
    let mut bob = Client::connect_to(d.addr("relay-tcp"), Kind::Tcp, "/").await;
    bob.register("bob").await;
    let mut alice = Client::registered(&a, Kind::Tcp, "alice").await;
    let id = open(&mut alice, "alice", &mut bob, "bob").await;
    bob.send(json!({"t": "pipe_data", "pipe_id": id, "alive": true})).await;
    assert_eq!(alice.expect("pipe_data").await["alive"], true);

    d.child.kill().await.expect("SIGKILL");
    let killed = Instant::now();
    let closed: Value = alice.expect("pipe_closed").await;
    let took = killed.elapsed();
    assert_eq!(closed["pipe_id"], json!(id));
    // At most a lease and the watcher's tick (a third of it) after d's last renewal, plus the
    // takeover's round trips on a loaded machine.
    assert!(took < Duration::from_millis(LEASE_MS * 4 / 3) + Duration::from_secs(3), "{took:?}");
    eprintln!("the pipe to the killed node was closed {took:?} after the kill");
    relay_counted(&a, "the pipe closed for d's death", |s| &s.pipes_node_gone, 1).await;
    alice.send(json!({"t": "pipe_data", "pipe_id": id, "x": 1})).await;
    alice.expect_error("unknown pipe").await;
    // bob's record still names d, which no longer answers.
    alice.send(json!({"t": "open_pipe", "to": "bob"})).await;
    alice.expect_error("peer not connected").await;
}
