//! Content-routing access on every node of a cluster, over a real nats-server (`nats-server
//! -js` on a loopback port): a role and the patterns assigned to a user on one node's store
//! reach the other node, so a grant token issued by one node (with the cluster's token keys)
//! is admitted by the other exactly where the user may reach; a pattern taken from the role,
//! or the role removed, on one node narrows the user on the other (and her token with her); a
//! role changed on the second node reaches the first. Administrators and API tokens too: a token
//! made on one node opens the REST API of the other, and revoked on one it is refused by both.

mod common;
#[path = "common/content.rs"]
mod content;

use common::nats::NatsServer;
use common::within;
use content::{Carrier, ContentServer};
use mesgd_providers::builtin::{AuthType, Scope, UserRecord};

/// A node whose builtin store is polled every 50 ms, in the cluster on `nats`.
async fn node(nats: &NatsServer, name: &str) -> ContentServer {
    ContentServer::start(&format!(
        "[[auth.providers]]\ntype = \"builtin\"\npoll_interval_ms = 50\n[cluster]\nnode = {name:?}\nnats = [{:?}]\n",
        nats.url
    ))
    .await
}

/// Waits until `node` has installed a copy of its store in which `done` holds for alice.
async fn alice_on(node: &ContentServer, what: &str, done: impl Fn(Option<&UserRecord>) -> bool) {
    let directory = node.directory();
    let mut changes = directory.changes();
    within(what, async {
        while !done(directory.records().get("alice").map(|r| &**r)) {
            changes.changed().await.expect("directory running");
        }
    })
    .await;
}

fn patterns(user: Option<&UserRecord>) -> Vec<&str> {
    user.map(|u| u.patterns.iter().map(String::as_str).collect()).unwrap_or_default()
}

/// A grant token for alice from `node`'s REST API.
async fn grant_token(node: &ContentServer, admin: &str) -> String {
    let h = format!("authorization: Bearer {admin}\r\ncontent-type: application/json\r\n");
    let (status, body) = node.http("POST", "/api/v1/users/alice/grant-token", &h, "").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["token"].as_str().expect("a token").to_owned()
}

/// The status of an upgrade at `path` on `node` with `token`: 101 when admitted.
async fn upgrade(node: &ContentServer, path: &str, token: &str) -> u16 {
    match node.connect(path, Carrier::Bearer(token)).await {
        Ok(_) => 101,
        Err(refused) => refused.status,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_and_patterns_reach_every_node_and_a_grant_of_one_node_holds_on_the_other() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a").await;
    let b = node(&nats, "b").await;
    let on_a = a.store();
    on_a.set_pbkdf2_iterations(1000).expect("iterations");
    on_a.add_user("alice", AuthType::Basic, Some(b"pw"), false).expect("user");
    on_a.add_role("ops").expect("role");
    on_a.role_add_pattern("ops", "/room=lobby").expect("role pattern");
    on_a.assign_role("alice", "ops").expect("role assigned");
    on_a.assign_pattern("alice", "/room=attic").expect("pattern assigned");
    on_a.add_admin("root", b"a long admin password", Scope::Admin).expect("admin");
    let admin = on_a.create_token("issuer", Scope::Admin).expect("API token").token;

    alice_on(&b, "alice's access to reach b", |u| {
        patterns(u) == ["/room=attic", "/room=lobby"] && u.is_some_and(|u| u.roles == ["ops"])
    })
    .await;
    let on_b = b.store();
    assert_eq!(on_b.role("ops").expect("ops on b").patterns, ["/room=lobby"]);
    assert_eq!(on_b.direct_patterns("alice").expect("alice on b"), ["/room=attic"]);

    // Issued on a, admitted on b where alice may reach, and only there.
    let token = grant_token(&a, &admin).await;
    assert_eq!(upgrade(&b, "/room=lobby", &token).await, 101, "through the role");
    assert_eq!(upgrade(&b, "/room=attic", &token).await, 101, "assigned directly");
    assert_eq!(upgrade(&b, "/room=kitchen", &token).await, 403, "never assigned");

    // The role narrowed on a: b narrows alice too, and her token no longer reaches the lobby.
    on_a.role_remove_pattern("ops", "/room=lobby").expect("pattern removed");
    alice_on(&b, "the role's change to reach b", |u| patterns(u) == ["/room=attic"]).await;
    assert_eq!(upgrade(&b, "/room=lobby", &token).await, 403, "the role no longer covers it");

    // The role changed on b reaches a.
    on_b.role_add_pattern("ops", "/room=hall").expect("pattern added on b");
    alice_on(&a, "b's change of the role to reach a", |u| patterns(u) == ["/room=attic", "/room=hall"]).await;
    assert_eq!(upgrade(&a, "/room=hall", &token).await, 403, "a token carries what alice held at its issue");
    let token = grant_token(&a, &admin).await;
    assert_eq!(upgrade(&b, "/room=hall", &token).await, 101, "a new token of a, on b");

    // The role removed on a: gone on b, with alice's assignment of it.
    on_a.remove_role("ops").expect("role removed");
    alice_on(&b, "the role's removal to reach b", |u| {
        patterns(u) == ["/room=attic"] && u.is_some_and(|u| u.roles.is_empty())
    })
    .await;
    within("the role to be gone from b's store", async {
        while on_b.roles().expect("roles").iter().any(|r| r.name == "ops") {
            b.directory().changes().changed().await.expect("directory running");
        }
    })
    .await;
    assert_eq!(upgrade(&b, "/room=hall", &token).await, 403);
}

/// `GET /api/v1/users` on `node` with `token`: its status.
async fn users_api(node: &ContentServer, token: &str) -> u16 {
    node.http("GET", "/api/v1/users", &format!("authorization: Bearer {token}\r\n"), "").await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_token_and_an_administrator_of_one_node_work_on_the_other_until_removed() {
    let nats = NatsServer::start().await;
    let a = node(&nats, "a").await;
    let b = node(&nats, "b").await;
    let (on_a, on_b) = (a.store(), b.store());
    on_a.set_pbkdf2_iterations(1000).expect("iterations");
    on_a.add_admin("root", b"a long admin password", Scope::Admin).expect("admin");
    // The REST API answers only while some administrator exists.
    on_a.add_admin("backup", b"another long password", Scope::Admin).expect("admin");
    let made = on_a.create_token("ci", Scope::Read).expect("API token");
    assert_eq!(users_api(&a, &made.token).await, 200);
    within("the token to reach b", async {
        while users_api(&b, &made.token).await != 200 {
            b.directory().changes().changed().await.expect("directory running");
        }
    })
    .await;
    assert!(
        on_b.verify_admin("root", b"a long admin password").expect("b's store").is_some(),
        "a's admin on b"
    );
    let from_b = on_b.create_token("deploy", Scope::Admin).expect("API token on b");
    within("b's token to reach a", async {
        while users_api(&a, &from_b.token).await != 200 {
            a.directory().changes().changed().await.expect("directory running");
        }
    })
    .await;

    // Revoked on a: refused on b. The administrator removed on b: gone from a.
    on_a.revoke_token("ci").expect("revoked");
    within("the revocation to reach b", async {
        while users_api(&b, &made.token).await != 401 {
            b.directory().changes().changed().await.expect("directory running");
        }
    })
    .await;
    on_b.remove_admin("root").expect("removed");
    within("the removal to reach a", async {
        while on_a.verify_admin("root", b"a long admin password").expect("a's store").is_some() {
            a.directory().changes().changed().await.expect("directory running");
        }
    })
    .await;
    assert_eq!(users_api(&b, &from_b.token).await, 200, "the other token lives on");
}
