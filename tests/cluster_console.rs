//! The console's browser sessions on every node of a cluster, over a real nats-server
//! (`nats-server -js` on a loopback port) and in-process nodes with their own stores: a login
//! whose CSRF token came from another node, the session used on the other node (a `GET` and
//! a CSRF-protected `POST`, with the cross-origin and CSRF refusals kept), forged and altered
//! cookies refused, a node that joins later accepting the session, a logout on one node
//! refused on the others, an administrator demoted and then removed on one node limited and
//! then refused on the other, and with NATS gone a login and a logout refused rather than
//! kept on one node. The delays from a logout's answer to the other nodes refusing the
//! session are printed (measured, not asserted: the machine may be slow).

mod common;
#[path = "common/content.rs"]
mod content;

use std::time::{Duration, Instant};

use common::nats::NatsServer;
use common::within;
use content::ContentServer;
use mesgd_providers::builtin::Scope;
use serde_json::Value;

const PASSWORD: &str = "a long admin password";

/// A node whose builtin store is polled every 50 ms, in the cluster on `nats`.
async fn node(nats: &NatsServer, name: &str) -> ContentServer {
    ContentServer::start(&format!(
        "[[auth.providers]]\ntype = \"builtin\"\npoll_interval_ms = 50\n[cluster]\nnode = {name:?}\nnats = [{:?}]\nregistry_timeout_ms = 500\n",
        nats.url
    ))
    .await
}

/// Waits until `node`'s store says `done` of administrator `name`'s role (`None`: no such
/// administrator), woken by each copy of the store the node installs.
async fn admin_on(node: &ContentServer, name: &str, what: &str, done: impl Fn(Option<Scope>) -> bool) {
    let (store, directory) = (node.store(), node.directory());
    within(what, async {
        loop {
            let mut changes = directory.changes();
            if done(store.admin(name).expect("store").map(|a| a.role)) {
                return;
            }
            changes.changed().await.expect("directory running");
        }
    })
    .await;
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Vec<&'h str> {
    headers.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect()
}

/// A console login: the login CSRF token from `GET /api/v1/login` on `asked`, the login on
/// `on`. The status, the session cookie's `Set-Cookie` and the answer.
async fn login(asked: &ContentServer, on: &ContentServer, name: &str) -> (u16, Option<String>, Value) {
    let (status, headers, body) = asked.http_with_headers("GET", "/api/v1/login", "", "").await;
    assert_eq!(status, 200, "{body}");
    let token = json(&body)["csrf_token"].as_str().expect("a login token").to_owned();
    let cookie = header(&headers, "set-cookie")[0].split(';').next().expect("a cookie").to_owned();
    let request = format!("x-csrf-token: {token}\r\ncookie: {cookie}\r\ncontent-type: application/json\r\n");
    let credentials = format!(r#"{{"username":{name:?},"password":{PASSWORD:?}}}"#);
    let (status, headers, body) = on.http_with_headers("POST", "/api/v1/login", &request, &credentials).await;
    let session = header(&headers, "set-cookie")
        .into_iter()
        .find(|c| c.starts_with("mesgd_session="))
        .map(str::to_owned);
    (status, session, json(&body))
}

fn json(body: &str) -> Value {
    if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap_or(Value::String(body.into()))
    }
}

/// A request with the session `cookie` (`mesgd_session=...`), its CSRF token if given, and
/// more header lines.
async fn with_session(
    node: &ContentServer,
    method: &str,
    path: &str,
    cookie: &str,
    csrf: Option<&str>,
    more: &str,
    body: &str,
) -> (u16, Value) {
    let mut headers = format!("cookie: {cookie}\r\n{more}");
    if let Some(csrf) = csrf {
        headers.push_str(&format!("x-csrf-token: {csrf}\r\n"));
    }
    if !body.is_empty() {
        headers.push_str("content-type: application/json\r\n");
    }
    let (status, body) = node.http(method, path, &headers, body).await;
    (status, json(&body))
}

async fn whoami(node: &ContentServer, cookie: &str) -> (u16, Value) {
    with_session(node, "GET", "/api/v1/whoami", cookie, None, "", "").await
}

/// Waits until `node` refuses the session `cookie`; how long that took from `since`.
async fn refused(node: &ContentServer, cookie: &str, since: Instant) -> Duration {
    within("the logout to reach the node", async {
        // The node tells nothing when it applies a logout: ask it again, a few times a second.
        while whoami(node, cookie).await.0 == 200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    since.elapsed()
}

fn code(answer: &Value) -> &str {
    answer["error"]["code"].as_str().unwrap_or_else(|| panic!("not the error shape: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_made_on_one_node_works_on_every_node_and_ends_everywhere() {
    let mut nats = NatsServer::start().await;
    let a = node(&nats, "a").await;
    let b = node(&nats, "b").await;
    let on_a = a.store();
    on_a.set_pbkdf2_iterations(1000).expect("iterations");
    on_a.add_admin("root", PASSWORD.as_bytes(), Scope::Admin).expect("admin");
    on_a.add_admin("ops", PASSWORD.as_bytes(), Scope::Admin).expect("admin");
    admin_on(&b, "ops", "a's administrators to reach b", |role| role.is_some()).await;

    // The login token of b's GET serves the login on a: the login CSRF key is the cluster's.
    let (status, set_cookie, body) = login(&b, &a, "root").await;
    assert_eq!(status, 200, "{body}");
    let set_cookie = set_cookie.expect("a session cookie");
    assert!(
        set_cookie.contains("HttpOnly")
            && set_cookie.contains("SameSite=Strict")
            && set_cookie.contains("Path=/")
            && !set_cookie.contains("Max-Age")
            && !set_cookie.contains("Secure"),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().expect("the cookie").to_owned();
    let csrf = body["csrf_token"].as_str().expect("the session's CSRF token").to_owned();

    // Used on b: a GET, and a POST that needs the session's CSRF token and the same origin.
    let (status, me) = whoami(&b, &cookie).await;
    assert_eq!(status, 200, "a's session on b: {me}");
    assert_eq!(
        (&me["kind"], &me["name"], &me["csrf_token"]),
        (&"session".into(), &"root".into(), &csrf.clone().into())
    );
    let alice = r#"{"username":"alice","password":"a user password"}"#;
    let (status, answer) = with_session(&b, "POST", "/api/v1/users", &cookie, None, "", alice).await;
    assert_eq!((status, code(&answer)), (403, "csrf"));
    let (status, answer) =
        with_session(&b, "POST", "/api/v1/users", &cookie, Some("not the token"), "", alice).await;
    assert_eq!((status, code(&answer)), (403, "csrf"));
    let evil = "origin: http://evil.example\r\n";
    let (status, answer) = with_session(&b, "POST", "/api/v1/users", &cookie, Some(&csrf), evil, alice).await;
    assert_eq!((status, code(&answer)), (403, "cross_origin"));
    let (status, answer) = with_session(&b, "POST", "/api/v1/users", &cookie, Some(&csrf), "", alice).await;
    assert_eq!(status, 201, "{answer}");

    // A well-formed cookie of no session: looked up once in the bucket, then refused.
    let fetched = |n: &ContentServer| {
        let stats = n.server.as_ref().expect("running").cluster().expect("in a cluster").stats();
        stats.console_fetched.load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = fetched(&b);
    let nobody = format!("mesgd_session={}.{}", "0".repeat(32), "A".repeat(43));
    let (status, answer) = whoami(&b, &nobody).await;
    assert_eq!((status, code(&answer)), (401, "unauthenticated"));
    assert_eq!(fetched(&b), before + 1);

    // Forged and altered cookies: refused on both nodes.
    let (id, secret) =
        cookie.strip_prefix("mesgd_session=").expect("the name").split_once('.').expect("id.secret");
    let flipped = |c: char| if c == 'A' { 'B' } else { 'A' };
    let altered: String =
        secret.chars().enumerate().map(|(i, c)| if i == 5 { flipped(c) } else { c }).collect();
    let other_id: String = id.chars().rev().collect();
    for forged in [
        format!("mesgd_session={id}.{altered}"),
        format!("mesgd_session={other_id}.{secret}"),
        format!("mesgd_session={id}.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        format!("mesgd_session={id}"),
        "mesgd_session=garbage".to_owned(),
    ] {
        for n in [&a, &b] {
            let (status, answer) = whoami(n, &forged).await;
            assert_eq!((status, code(&answer)), (401, "unauthenticated"), "{forged}");
        }
    }

    // A node that joins later accepts the session.
    let c = node(&nats, "c").await;
    let (status, me) = whoami(&c, &cookie).await;
    assert_eq!((status, &me["csrf_token"]), (200, &csrf.clone().into()), "a's session on c: {me}");

    // Logged out on b: refused on a and c.
    let (status, _) = with_session(&b, "POST", "/api/v1/logout", &cookie, Some(&csrf), "", "").await;
    assert_eq!(status, 204);
    let started = Instant::now();
    assert_eq!(whoami(&b, &cookie).await.0, 401, "at once on the node of the logout");
    let on_a = refused(&a, &cookie, started).await;
    let on_c = refused(&c, &cookie, started).await;
    println!("logout on b, refused on a after {on_a:?}, on c after {on_c:?}");

    // An administrator demoted on a is limited on b, and removed on a, refused on b.
    let (status, set_cookie, body) = login(&a, &a, "ops").await;
    assert_eq!(status, 200, "{body}");
    let ops = set_cookie.expect("a cookie").split(';').next().expect("the cookie").to_owned();
    let ops_csrf = body["csrf_token"].as_str().expect("a token").to_owned();
    let bob = r#"{"username":"bob","password":"a user password"}"#;
    let (status, answer) = with_session(&b, "POST", "/api/v1/users", &ops, Some(&ops_csrf), "", bob).await;
    assert_eq!(status, 201, "{answer}");
    let mut demoted = a.store().replicated_admins().expect("a's admins").remove("ops").expect("ops");
    demoted.role = "read".to_owned();
    a.store().put_replicated_admin(&demoted).expect("demoted");
    admin_on(&b, "ops", "the demotion to reach b", |role| role == Some(Scope::Read)).await;
    let carol = r#"{"username":"carol","password":"a user password"}"#;
    let (status, answer) = with_session(&b, "POST", "/api/v1/users", &ops, Some(&ops_csrf), "", carol).await;
    assert_eq!((status, code(&answer)), (403, "forbidden"));
    assert_eq!(with_session(&b, "GET", "/api/v1/users", &ops, None, "", "").await.0, 200, "reading still");
    a.store().remove_admin("ops").expect("removed");
    admin_on(&b, "ops", "the removal to reach b", |role| role.is_none()).await;
    let (status, answer) = whoami(&b, &ops).await;
    assert_eq!((status, code(&answer)), (401, "unauthenticated"));

    // NATS gone: a login is refused rather than kept on one node, and a logout is refused with
    // the session left open (it would still be valid on the other nodes).
    let (status, set_cookie, _) = login(&a, &a, "root").await;
    assert_eq!(status, 200);
    let root = set_cookie.expect("a cookie").split(';').next().expect("the cookie").to_owned();
    let root_csrf = whoami(&a, &root).await.1["csrf_token"].as_str().expect("a token").to_owned();
    nats.kill().await;
    let (status, set_cookie, answer) = login(&a, &a, "root").await;
    assert_eq!((status, code(&answer)), (503, "cluster_unavailable"), "{answer}");
    assert!(set_cookie.is_none());
    let (status, answer) = with_session(&a, "POST", "/api/v1/logout", &root, Some(&root_csrf), "", "").await;
    assert_eq!((status, code(&answer)), (503, "cluster_unavailable"), "{answer}");
    assert_eq!(whoami(&a, &root).await.0, 200, "the session is still open");

    let stats = a.server.as_ref().expect("running").cluster().expect("in a cluster").stats();
    assert_eq!(stats.console_invalid.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert!(stats.console_stored.load(std::sync::atomic::Ordering::Relaxed) >= 3);
}
