//! Login sessions on every node of a cluster, over a real nats-server (`nats-server -js` on a
//! loopback port): a session from `POST /auth/login` on one node is accepted by the others
//! (`GET /account`, and as the CONNECT password of a rumqttc client through the `session`
//! provider), a logout on one node ends it on every node, and a node that joins later takes
//! the cluster's key and the sessions already ended. The delay from the logout's answer to the
//! other node refusing the session is printed (measured, not asserted: the machine may be slow).

mod common;
#[path = "common/content.rs"]
mod content;

use std::time::{Duration, Instant};

use common::nats::NatsServer;
use common::{v3, within};
use content::ContentServer;
use mesgd_providers::builtin::{AuthType, StoreError};

/// A node with the `session` provider before the builtin store (polled every 50 ms), an MQTT
/// listener besides the http one, in the cluster on `nats`.
async fn node(nats: &NatsServer, name: &str) -> ContentServer {
    ContentServer::start(&format!(
        "[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
         [[auth.providers]]\ntype = \"session\"\n[[auth.providers]]\ntype = \"builtin\"\npoll_interval_ms = 50\n\
         [cluster]\nnode = {name:?}\nnats = [{:?}]\n",
        nats.url
    ))
    .await
}

/// Waits until `node` has installed `username` (replicated from another node).
async fn has_user(node: &ContentServer, username: &str) {
    let directory = node.directory();
    let mut changes = directory.changes();
    within(&format!("{username} to reach the node"), async {
        while !directory.records().contains_key(username) {
            changes.changed().await.expect("directory running");
        }
    })
    .await;
}

/// A fresh NATS server and two nodes on it, `a` and `b`, where alice (password `pw`) was added
/// on a and has reached b.
async fn two_nodes_with_alice() -> (NatsServer, ContentServer, ContentServer) {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a").await;
    let b = node(&nats, "b").await;
    let store = a.store();
    store.set_pbkdf2_iterations(1000).expect("iterations");
    store.add_user("alice", AuthType::Basic, Some(b"pw"), false).expect("user added");
    has_user(&b, "alice").await;
    (nats, a, b)
}

async fn login(node: &ContentServer) -> String {
    let body = r#"{"username":"alice","password":"pw"}"#;
    let (status, body) = node.http("POST", "/auth/login", "content-type: application/json\r\n", body).await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["token"].as_str().expect("a token").to_owned()
}

fn bearer(token: &str) -> String {
    format!("authorization: Bearer {token}\r\n")
}

/// `GET /account`'s status with `token`.
async fn account(node: &ContentServer, token: &str) -> u16 {
    node.http("GET", "/account", &bearer(token), "").await.0
}

/// Waits until `node` refuses `token`; how long that took from `since`.
async fn refused(node: &ContentServer, token: &str, since: Instant) -> Duration {
    within("the logout to reach the node", async {
        // The node tells nothing when it applies a logout: ask it again, a few times a second.
        while account(node, token).await == 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    since.elapsed()
}

fn mqtt_options(node: &ContentServer, id: &str, token: &str) -> rumqttc::MqttOptions {
    let port = node.server.as_ref().expect("running").local_addr("mqtt").expect("mqtt listener").port();
    let mut o = v3::options(id, port);
    o.set_credentials("alice", token);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_session_works_on_every_node_and_a_logout_ends_it_everywhere() {
    let (nats, a, b) = two_nodes_with_alice().await;

    // Issued on a, accepted on b; issued on b, accepted on a.
    let from_a = login(&a).await;
    assert_eq!(account(&b, &from_a).await, 200, "a's session on b");
    let from_b = login(&b).await;
    assert_eq!(account(&a, &from_b).await, 200, "b's session on a");
    let (c, connack) = v3::connect(mqtt_options(&b, "alice-b", &from_a)).await;
    assert_eq!(connack.code, rumqttc::ConnectReturnCode::Success, "a's session as b's CONNECT password");
    c.disconnect().await;

    // Logged out on a: refused on b too, over HTTP and MQTT; the other session lives on.
    assert_eq!(a.http("POST", "/auth/logout", &bearer(&from_a), "").await.0, 204);
    let started = Instant::now();
    let took = refused(&b, &from_a, started).await;
    println!("logout on a, refused on b after {took:?}");
    assert_eq!(account(&b, &from_a).await, 401);
    let e = v3::connect_err(mqtt_options(&b, "alice-b2", &from_a)).await;
    assert!(e.contains("BadUserNamePassword"), "{e}");
    assert_eq!(account(&b, &from_b).await, 200, "only that session ended");

    // A node that joins later signs and verifies with the cluster's key, and knows the logout.
    let c = node(&nats, "c").await;
    has_user(&c, "alice").await;
    assert_eq!(account(&c, &from_a).await, 401, "ended before c joined");
    assert_eq!(account(&c, &from_b).await, 200, "b's session on c");
    let from_c = login(&c).await;
    assert_eq!(account(&a, &from_c).await, 200, "c's session on a");

    // Logged out on c: refused on a and b.
    assert_eq!(c.http("POST", "/auth/logout", &bearer(&from_c), "").await.0, 204);
    let started = Instant::now();
    let on_a = refused(&a, &from_c, started).await;
    let on_b = refused(&b, &from_c, started).await;
    println!("logout on c, refused on a after {on_a:?}, on b after {on_b:?}");
    let stats = b.server.as_ref().expect("running").cluster().expect("in a cluster").stats();
    assert_eq!(stats.logins_key_adopted.load(std::sync::atomic::Ordering::Relaxed), 1, "b took a's key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_start_at_once_agree_on_one_key() {
    let nats = NatsServer::start().await;
    let (a, b) = tokio::join!(node(&nats, "a"), node(&nats, "b"));
    for n in [&a, &b] {
        let store = n.store();
        store.set_pbkdf2_iterations(1000).expect("iterations");
        // Added on both, unless the other's addition already reached this one (users are the
        // same on every node).
        match store.add_user("alice", AuthType::Basic, Some(b"pw"), false) {
            Ok(_) | Err(StoreError::UserExists(_)) => {}
            Err(e) => panic!("user not added: {e}"),
        }
    }
    let (from_a, from_b) = (login(&a).await, login(&b).await);
    assert_eq!(account(&b, &from_a).await, 200, "a's session on b");
    assert_eq!(account(&a, &from_b).await, 200, "b's session on a");
}

/// The logins stream deleted while the nodes run (an operator's `nats stream rm`, or NATS's
/// storage lost): the nodes notice at their next check, create it again and store the
/// cluster's key and the logouts they know in it. A logout made afterwards still ends the
/// session everywhere, and a node that joins afterwards verifies the sessions the others signed
/// and refuses those ended before and after the deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_logins_stream_is_created_again_with_the_key_and_the_logouts() {
    let (nats, a, b) = two_nodes_with_alice().await;
    let ended_before = login(&a).await;
    assert_eq!(a.http("POST", "/auth/logout", &bearer(&ended_before), "").await.0, 204);
    refused(&b, &ended_before, Instant::now()).await;
    let (from_a, from_b) = (login(&a).await, login(&b).await);

    nats.delete_stream("MESGD_LOGINS").await;
    let rejoins = |n: &ContentServer| {
        let stats = n.server.as_ref().expect("running").cluster().expect("in a cluster").stats().clone();
        stats.logins_rejoins.load(std::sync::atomic::Ordering::Relaxed)
    };
    within("both nodes to follow a new logins stream", async {
        while rejoins(&a) == 0 || rejoins(&b) == 0 {
            // Polled: a counter has no notification (the nodes check every 5 s).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // Logged out on b after the deletion: refused on a.
    assert_eq!(b.http("POST", "/auth/logout", &bearer(&from_b), "").await.0, 204);
    refused(&a, &from_b, Instant::now()).await;

    // A node that joins afterwards takes the cluster's key and both logouts.
    let c = node(&nats, "c").await;
    has_user(&c, "alice").await;
    assert_eq!(account(&c, &from_a).await, 200, "a's session verifies on c: one key");
    assert_eq!(account(&c, &ended_before).await, 401, "ended before the deletion");
    assert_eq!(account(&c, &from_b).await, 401, "ended after the deletion");
    assert_eq!(account(&b, &from_a).await, 200, "a's session still works on b");
}
