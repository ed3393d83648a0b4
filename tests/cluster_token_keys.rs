//! The token key store on every node of a cluster, over a real nats-server (`nats-server -js`
//! on a loopback port): a claim token forged with one node's keys is admitted by the others, a
//! rotation with no grace made on any node while it runs (as `mesgd keys rotate --grace 0s`
//! makes it) ends the old key on every node, a node that joins with keys of its own takes the
//! cluster's, and nodes that start at once agree on one store. The delay from the rotation to
//! another node refusing the old key is printed (measured, not asserted: the machine may be
//! slow).

mod common;
#[path = "common/content.rs"]
mod content;

use std::time::{Duration, Instant, SystemTime};

use common::nats::NatsServer;
use common::within;
use content::{Carrier, ContentServer};

async fn node(nats: &NatsServer, name: &str) -> ContentServer {
    node_with(nats, name, "").await
}

async fn node_with(nats: &NatsServer, name: &str, extra: &str) -> ContentServer {
    ContentServer::start(&format!("[cluster]\nnode = {name:?}\nnats = [{:?}]\n{extra}", nats.url)).await
}

/// Whether `node` admits `token` on `/room=lobby`.
async fn admits(node: &ContentServer, token: &str) -> bool {
    node.connect("/room=lobby", Carrier::Bearer(token)).await.is_ok()
}

/// Waits until `node` refuses `token`; how long that took from `since`.
async fn refused(node: &ContentServer, token: &str, since: Instant) -> Duration {
    within("the rotation to reach the node", async {
        // The node tells nothing when it reloads its keys: try the token again.
        while admits(node, token).await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    since.elapsed()
}

fn adopted(node: &ContentServer) -> u64 {
    let stats = node.server.as_ref().expect("running").cluster().expect("in a cluster").stats();
    stats.token_keys_adopted.load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_one_node_is_admitted_by_every_node_and_a_rotation_holds_on_all() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a").await;
    let b = node(&nats, "b").await;
    assert_eq!(b.keys().key_ids(), a.keys().key_ids(), "b took a's store");
    assert_eq!(adopted(&b), 1, "b replaced the store it made at start");
    assert_eq!(adopted(&a), 0, "a stored its own");

    let first = a.forge(&["room", "lobby"]);
    assert!(admits(&b, &first).await, "a's token on b");
    let from_b = b.forge(&["room", "lobby"]);
    assert!(admits(&a, &from_b).await, "b's token on a");

    // A leaked key: rotated on a with no grace, while both run.
    a.keys().rotate(SystemTime::now(), Duration::ZERO).expect("rotated");
    let started = Instant::now();
    let took = refused(&b, &first, started).await;
    println!("rotation on a, old key refused on b after {took:?}");
    refused(&a, &first, started).await;
    let second = a.forge(&["room", "lobby"]);
    assert!(admits(&b, &second).await, "the new key's token on b");
    assert_eq!(b.keys().key_ids(), a.keys().key_ids());

    // A node that joins later, with a store of its own made at its start, takes the cluster's.
    let c = node(&nats, "c").await;
    assert_eq!(c.keys().key_ids(), a.keys().key_ids());
    assert!(admits(&c, &second).await, "a's token on c");
    assert!(!admits(&c, &first).await, "the rotated-out key is not back");

    // A rotation on c, with a grace period this time, reaches a and b.
    c.keys().rotate(SystemTime::now(), Duration::from_secs(3600)).expect("rotated");
    let third = c.forge(&["room", "lobby"]);
    within("c's rotation to reach a and b", async {
        while !(admits(&a, &third).await && admits(&b, &third).await) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(admits(&b, &second).await, "the key rotated out with a grace still verifies");
    assert_eq!(a.keys().key_ids(), c.keys().key_ids());
    assert_eq!(b.keys().key_ids(), c.keys().key_ids());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_start_at_once_agree_on_one_store() {
    let nats = NatsServer::start().await;
    let (a, b) = tokio::join!(node(&nats, "a"), node(&nats, "b"));
    assert_eq!(a.keys().key_ids(), b.keys().key_ids());
    assert!(admits(&b, &a.forge(&["room", "lobby"])).await);
    assert!(admits(&a, &b.forge(&["room", "lobby"])).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sharing_off_each_node_keeps_its_own_keys() {
    let nats = NatsServer::start().await;
    let a = node_with(&nats, "a", "share_token_keys = false\n").await;
    let b = node_with(&nats, "b", "share_token_keys = false\n").await;
    assert_ne!(a.keys().current_key_id(), b.keys().current_key_id());
    let r =
        b.connect("/room=lobby", Carrier::Bearer(&a.forge(&["room", "lobby"]))).await.err().expect("refused");
    assert_eq!(r.status, 401, "{}", r.body);
}

/// The logins stream, which holds the token key store, deleted while the nodes run: the nodes
/// notice at their next check, create it again and store the cluster's keys in it, so that a
/// node that joins afterwards takes them (and admits the others' tokens) instead of storing
/// keys of its own, and a rotation still reaches every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_logins_stream_gets_the_cluster_s_token_keys_again() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a").await;
    let b = node(&nats, "b").await;
    let token = a.forge(&["room", "lobby"]);
    assert!(admits(&b, &token).await, "a's token on b");

    nats.delete_stream("MESGD_LOGINS").await;
    let rejoins = |n: &ContentServer| {
        let stats = n.server.as_ref().expect("running").cluster().expect("in a cluster").stats().clone();
        stats.token_keys_rejoins.load(std::sync::atomic::Ordering::Relaxed)
    };
    within("both nodes to follow the token keys in a new logins stream", async {
        while rejoins(&a) == 0 || rejoins(&b) == 0 {
            // Polled: a counter has no notification (the nodes check every 5 s).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    let c = node(&nats, "c").await;
    assert_eq!(c.keys().key_ids(), a.keys().key_ids(), "c took the cluster's keys");
    assert!(admits(&c, &token).await, "a's token on c");
    assert!(admits(&a, &c.forge(&["room", "lobby"])).await, "c's token on a");

    // A leaked key rotated out on a after the deletion: refused on b and c too.
    a.keys().rotate(SystemTime::now(), Duration::ZERO).expect("rotated");
    let started = Instant::now();
    refused(&b, &token, started).await;
    refused(&c, &token, started).await;
}
