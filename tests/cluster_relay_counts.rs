//! Relay-wide counts across nodes over a real nats-server (`nats-server -js` on a loopback
//! port), with in-process mesgd nodes and, for a node that dies, the real binary killed with
//! SIGKILL; real relay clients over TCP and WebSocket: `list_online`, the load factor of
//! `capabilities` and `joined_room{members}` count every live node.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use common::nats::{NatsServer, cluster, node};
use common::relay::{Client, Kind, LISTENERS};
use common::{TestServer, within};
use serde_json::{Value, json};

/// Asks `ask` of `client` until `done` holds for the answer, woken by each change of the other
/// nodes' figures that `server` applies.
async fn answer_until(
    server: &TestServer,
    client: &mut Client,
    ask: Value,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut applied = cluster(server).relay_figures_applied().expect("relay attached");
    within(&format!("an answer to {ask}"), async {
        loop {
            client.send(ask.clone()).await;
            let answer = client.recv().await;
            if done(&answer) {
                return answer;
            }
            applied.changed().await.expect("cluster running");
        }
    })
    .await
}

async fn online_until(server: &TestServer, client: &mut Client, count: u64) {
    answer_until(server, client, json!({"t": "list_online"}), |a| a["count"] == count).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_online_counts_the_addresses_of_every_node() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", LISTENERS).await;
    let b = node(&nats, "b", LISTENERS).await;
    let c = node(&nats, "c", LISTENERS).await;
    let _a1 = Client::registered(&a, Kind::Tcp, "a1").await;
    let _b1 = Client::registered(&b, Kind::Ws, "b1").await;
    let b2 = Client::registered(&b, Kind::Tcp, "b2").await;
    let _c1 = Client::registered(&c, Kind::Ws, "c1").await;
    // An unregistered client may ask too.
    let mut asker = Client::connect(&a, Kind::Tcp).await;
    online_until(&a, &mut asker, 4).await;
    let mut other = Client::connect(&c, Kind::Ws).await;
    online_until(&c, &mut other, 4).await;

    // One leaves b, and a node stops with its clients: neither counts any more.
    b2.close().await;
    online_until(&a, &mut asker, 3).await;
    drop(other);
    let mut c = c;
    c.stop().await;
    online_until(&a, &mut asker, 2).await;
    for n in [&a, &b] {
        let stats = cluster(n).stats();
        assert_eq!(stats.relay.figures_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(stats.relay.decode_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_factor_counts_the_connections_of_every_node() {
    let nats = NatsServer::start().await;
    let capped = format!("{LISTENERS}[relay]\nmax_connections = 4\n");
    let a = node(&nats, "a", &capped).await;
    let b = node(&nats, "b", &capped).await;
    let mut busy = Vec::new();
    for i in 0..3 {
        busy.push(Client::registered(&a, Kind::Tcp, &format!("a{i}")).await);
    }
    // b has one connection (the asker) of 4, a three of 4: the cluster has 4 of 8.
    let mut asker = Client::connect(&b, Kind::Ws).await;
    let caps = answer_until(&b, &mut asker, json!({"t": "capabilities"}), |c| c["load_factor"] == 0.5).await;
    assert_eq!(caps["load_tier"], "medium", "{caps}");
    // a's own connections weigh more than the cluster's: a says so.
    let caps =
        answer_until(&a, &mut busy[0], json!({"t": "capabilities"}), |c| c["load_factor"] == 0.75).await;
    assert_eq!(caps["load_tier"], "medium", "{caps}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_room_counts_the_members_on_every_node() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", LISTENERS).await;
    let b = node(&nats, "b", LISTENERS).await;
    let c = node(&nats, "c", LISTENERS).await;
    let mut members = Vec::new();
    for (i, (server, kind)) in
        [(&a, Kind::Tcp), (&b, Kind::Ws), (&c, Kind::Tcp), (&b, Kind::Tcp)].into_iter().enumerate()
    {
        let mut member = Client::registered(server, kind, &format!("m{i}")).await;
        member.send(json!({"t": "join_room", "room": "lobby"})).await;
        // A frame right behind the join waits for it: the room_send is a member's (no
        // `join a room first` before the next answer).
        member.send(json!({"t": "room_send", "room": "lobby", "ct": format!("hi from m{i}")})).await;
        member.send(json!({"t": "list_online"})).await;
        let joined = member.expect("joined_room").await;
        assert_eq!((&joined["room"], &joined["members"]), (&json!("lobby"), &json!(i + 1)), "m{i}");
        member.expect("online_count").await;
        members.push(member);
    }
    // m0 leaves a; a joiner on c counts the three left and itself.
    members.remove(0).close().await;
    let mut late = Client::registered(&c, Kind::Ws, "late").await;
    late.send(json!({"t": "join_room", "room": "lobby"})).await;
    assert_eq!(late.expect("joined_room").await["members"], 4);
    // Joining again changes nothing, and says so.
    late.send(json!({"t": "join_room", "room": "lobby"})).await;
    assert_eq!(late.expect("joined_room").await["members"], 4);
    assert_eq!(cluster(&c).stats().relay.room_count_failures.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// The figures of a node that dies (the real binary, SIGKILL) stop counting once its lease is
/// taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_addresses_stop_counting_with_its_lease() {
    const LEASE_MS: u64 = 1000;
    let nats = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, mut d) = daemon::relay_node_and_process(&nats, dir.path(), LEASE_MS).await;
    let mut on_d = Vec::new();
    for name in ["d1", "d2"] {
        let mut c = Client::connect_to(d.addr("relay-tcp"), Kind::Tcp, "/").await;
        c.register(name).await;
        on_d.push(c);
    }
    let mut alice = Client::registered(&a, Kind::Tcp, "alice").await;
    online_until(&a, &mut alice, 3).await;
    d.child.kill().await.expect("SIGKILL");
    online_until(&a, &mut alice, 1).await;
}
