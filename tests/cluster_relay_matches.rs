//! Matchmaking across nodes over a real nats-server (`nats-server -js` on a loopback port)
//! with in-process mesgd nodes and real relay clients over TCP and WebSocket: callers waiting
//! under one tag on any node are paired first come first served, each at most once however
//! the nodes race, and a waiter that leaves is withdrawn.

mod common;

use std::collections::BTreeMap;

use common::nats::{NatsServer, node, relay_counted, relay_stat};
use common::relay::{Client, Kind, LISTENERS};
use serde_json::json;

async fn find(client: &mut Client, game: &str) {
    client.send(json!({"t": "find_match", "game": game})).await;
}

async fn matched(client: &mut Client, game: &str) -> String {
    let got = client.expect("matched").await;
    assert_eq!(got["game"], game, "{got}");
    got["peer"].as_str().expect("peer").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_on_different_nodes_are_paired_in_arrival_order() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", LISTENERS).await;
    let b = node(&nats, "b", LISTENERS).await;
    let c = node(&nats, "c", LISTENERS).await;
    let mut p1 = Client::registered(&a, Kind::Tcp, "p1").await;
    let mut p2 = Client::registered(&b, Kind::Ws, "p2").await;
    let mut p3 = Client::registered(&c, Kind::Tcp, "p3").await;
    let mut p4 = Client::registered(&a, Kind::Ws, "p4").await;

    find(&mut p1, "chess").await;
    assert_eq!(p1.expect("waiting").await["game"], "chess");
    // Asking again while waiting changes nothing.
    find(&mut p1, "chess").await;
    p1.expect("waiting").await;
    find(&mut p2, "chess").await;
    assert_eq!(matched(&mut p2, "chess").await, "p1");
    assert_eq!(matched(&mut p1, "chess").await, "p2");

    // The longest waiter first: p3 waits, then p4 on a is paired with p3 on c, not with the
    // next one to come.
    find(&mut p3, "chess").await;
    p3.expect("waiting").await;
    find(&mut p4, "chess").await;
    assert_eq!(matched(&mut p4, "chess").await, "p3");
    assert_eq!(matched(&mut p3, "chess").await, "p4");

    // Two callers of one node pair through the bucket too.
    find(&mut p1, "go").await;
    p1.expect("waiting").await;
    find(&mut p4, "go").await;
    assert_eq!(matched(&mut p4, "go").await, "p1");
    assert_eq!(matched(&mut p1, "go").await, "p4");

    assert_eq!((relay_stat(&a, |s| &s.match_waiting), relay_stat(&c, |s| &s.match_waiting)), (2, 1));
    assert_eq!(relay_stat(&b, |s| &s.matched_remote), 1);
    assert_eq!(relay_stat(&a, |s| &s.matched_remote), 1);
    assert_eq!(relay_stat(&a, |s| &s.matched_here), 1);
    relay_counted(&a, "p1 told by b", |s| &s.match_told, 1).await;
    relay_counted(&c, "p3 told by a", |s| &s.match_told, 1).await;
    for n in [&a, &b, &c] {
        assert_eq!(relay_stat(n, |s| &s.match_stale), 0);
        assert_eq!(relay_stat(n, |s| &s.match_errors), 0);
        assert_eq!(relay_stat(n, |s| &s.decode_errors), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiter_is_matched_once_when_callers_on_two_nodes_race() {
    const PER_NODE: usize = 12;
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", LISTENERS).await;
    let b = node(&nats, "b", LISTENERS).await;
    let mut clients = Vec::new();
    for i in 0..PER_NODE {
        clients.push((format!("a{i}"), Client::registered(&a, Kind::Tcp, &format!("a{i}")).await));
        clients.push((format!("b{i}"), Client::registered(&b, Kind::Ws, &format!("b{i}")).await));
    }
    // Everyone at once.
    futures_util::future::join_all(clients.iter_mut().map(|(_, c)| find(c, "race"))).await;
    // Each gets one `matched` (after a `waiting` if it waited first), and pairs are mutual.
    let peers: Vec<(String, String)> =
        futures_util::future::join_all(clients.iter_mut().map(|(me, c)| async move {
            loop {
                let got = c.recv().await;
                match got["t"].as_str() {
                    Some("waiting") => continue,
                    Some("matched") => return (me.clone(), got["peer"].as_str().unwrap().to_owned()),
                    _ => panic!("{me}: {got}"),
                }
            }
        }))
        .await;
    let pairs: BTreeMap<&str, &str> = peers.iter().map(|(me, peer)| (me.as_str(), peer.as_str())).collect();
    assert_eq!(pairs.len(), 2 * PER_NODE);
    for (me, peer) in &pairs {
        assert_ne!(me, peer);
        assert_eq!(pairs.get(peer), Some(me), "{me} was paired with {peer}, who was paired elsewhere");
    }
    // Nobody is told anything more: a second `matched` would come before this answer.
    for (me, c) in &mut clients {
        c.send(json!({"t": "list_online"})).await;
        assert_eq!(c.recv().await["t"], "online_count", "{me}");
    }
    let waiting = relay_stat(&a, |s| &s.match_waiting) + relay_stat(&b, |s| &s.match_waiting);
    let made = [&a, &b]
        .iter()
        .map(|n| relay_stat(n, |s| &s.matched_here) + relay_stat(n, |s| &s.matched_remote))
        .sum::<u64>();
    assert_eq!(made, PER_NODE as u64, "one pair per two callers");
    assert_eq!(waiting, PER_NODE as u64, "one waiter per pair");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_is_withdrawn_and_not_matched() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a", LISTENERS).await;
    let b = node(&nats, "b", LISTENERS).await;
    let mut gone = Client::registered(&a, Kind::Tcp, "gone").await;
    find(&mut gone, "tennis").await;
    gone.expect("waiting").await;
    gone.close().await;
    relay_counted(&a, "the waiter's record withdrawn", |s| &s.match_withdrawn, 1).await;

    let mut late = Client::registered(&b, Kind::Ws, "late").await;
    find(&mut late, "tennis").await;
    late.expect("waiting").await;
    assert_eq!(relay_stat(&b, |s| &s.match_stale), 0, "the record was gone before b read it");

    // The same address back on a is a new connection: not the waiter that left.
    let mut back = Client::registered(&a, Kind::Tcp, "gone").await;
    find(&mut back, "tennis").await;
    assert_eq!(matched(&mut back, "tennis").await, "late");
    assert_eq!(matched(&mut late, "tennis").await, "gone");
}
