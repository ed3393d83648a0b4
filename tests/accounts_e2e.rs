//! Accounts against a real server: login sessions (login, `/account`, logout), grant tokens
//! (issue, connect, live revocation at the very next message, disable and delete closing
//! connections, `/auth` refused), and anonymous tokens through the real binary.

#[path = "common/content.rs"]
mod content;

use std::process::Command;

use content::{Carrier, ContentServer, Ended};
use mesgd_providers::builtin::{AuthType, Scope, Store, config_db_path};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// The server's store, opened as another process (the command line) would.
fn store(s: &ContentServer) -> Store {
    Store::open(&config_db_path(&s.storage())).expect("store")
}

/// A server with user alice (password `pw`) and an admin API token.
async fn server() -> (ContentServer, String) {
    let s = ContentServer::start("").await;
    let st = store(&s);
    st.set_pbkdf2_iterations(1000).unwrap();
    st.add_user("alice", AuthType::Basic, Some(b"pw"), false).unwrap();
    st.add_admin("root", b"a long admin password", Scope::Admin).unwrap();
    let admin = st.create_token("ops", Scope::Admin).unwrap().token;
    (s, admin)
}

fn field(body: &str, name: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v[name].clone()
}

async fn login(s: &ContentServer, user: &str, password: &str) -> (u16, String) {
    let body = serde_json::json!({ "username": user, "password": password }).to_string();
    s.http("POST", "/auth/login", "content-type: application/json\r\n", &body).await
}

async fn session(s: &ContentServer) -> String {
    let (status, body) = login(s, "alice", "pw").await;
    assert_eq!(status, 200, "{body}");
    field(&body, "token").as_str().unwrap().to_owned()
}

async fn grant(s: &ContentServer, admin: &str, user: &str) -> (u16, String) {
    let body = serde_json::json!({ "user": user }).to_string();
    s.http("POST", "/auth/admin/issue", &format!("authorization: Bearer {admin}\r\n"), &body).await
}

fn b64url_json(part: &str) -> serde_json::Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_account_and_logout() {
    let (s, _) = server().await;
    assert_eq!(login(&s, "alice", "wrong").await.0, 401);
    let (status, body) = login(&s, "nobody", "pw").await;
    assert_eq!(status, 401);
    assert!(field(&body, "error").is_string(), "{body}");
    assert_eq!(login(&s, "alice", "").await.0, 400);

    let (status, body) = login(&s, "alice", "pw").await;
    assert_eq!(status, 200, "{body}");
    let token = field(&body, "token").as_str().unwrap().to_owned();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "a compact JWT");
    assert_eq!(b64url_json(parts[0])["alg"], "HS256");
    let claims = b64url_json(parts[1]);
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 86_400);
    assert_eq!(field(&body, "expires_at"), claims["exp"]);

    let bearer = format!("authorization: Bearer {token}\r\n");
    let (status, body) = s.http("GET", "/account", &bearer, "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(field(&body, "name"), "alice");
    assert_eq!(s.http("GET", "/account", "", "").await.0, 401);

    // A login session opens any content path as a listener.
    let mut listener = s.connect("/kind=chat", Carrier::Bearer(&token)).await.expect("admitted");
    let mut sender = s.connect("/other", Carrier::Bearer(&token)).await.expect("admitted");
    sender.send(r#"{"kind":"chat","n":1}"#).await;
    assert_eq!(listener.recv().await, r#"{"kind":"chat","n":1}"#);

    assert_eq!(s.http("POST", "/auth/logout", &bearer, "").await.0, 204);
    let (status, body) = s.http("GET", "/account", &bearer, "").await;
    assert_eq!(status, 401);
    assert!(body.contains("ended by logout"), "{body}");
    let refused = s.connect("/kind=chat", Carrier::Bearer(&token)).await.err().expect("refused after logout");
    assert_eq!(refused.status, 401);
    // Another session of the same account is untouched.
    let other = session(&s).await;
    assert_eq!(s.http("GET", "/account", &format!("authorization: Bearer {other}\r\n"), "").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_assignment_stops_the_very_next_message() {
    let (s, admin) = server().await;
    let st = store(&s);
    st.assign_pattern("alice", "/room=lobby").unwrap();
    st.assign_pattern("alice", "/room=kitchen").unwrap();
    let (status, body) = grant(&s, &admin, "alice").await;
    assert_eq!(status, 200, "{body}");
    let token = field(&body, "token").as_str().unwrap().to_owned();
    let exp = field(&body, "expires_at").as_u64().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!((3599..=3601).contains(&(exp - now)), "one hour: {exp} - {now}");
    assert_eq!(token.split('.').count(), 2, "the PKI wire format, not a JWT");

    let watcher = session(&s).await;
    let mut lobby = s.connect("/room=lobby", Carrier::Bearer(&watcher)).await.unwrap();
    let mut kitchen = s.connect("/room=kitchen", Carrier::Bearer(&watcher)).await.unwrap();
    let mut marker = s.connect("/marker", Carrier::Bearer(&watcher)).await.unwrap();
    // Not a listener itself: nothing sent to /room=lobby reaches it.
    let mut g = s.connect("/room=lobby", Carrier::Bearer(&token)).await.expect("grant admitted");
    assert_eq!(s.connect("/room=attic", Carrier::Bearer(&token)).await.err().unwrap().status, 403);

    g.send(r#"{"room":"lobby","n":1}"#).await;
    assert_eq!(lobby.recv().await, r#"{"room":"lobby","n":1}"#);
    g.send(r#"{"room":"kitchen","n":1}"#).await;
    assert_eq!(kitchen.recv().await, r#"{"room":"kitchen","n":1}"#);

    // Unassigned as the command line does (another connection to the file), within the same
    // second as the token's issue: the next message is checked against it.
    st.unassign_pattern("alice", "/room=lobby").unwrap();
    g.send(r#"{"room":"lobby","n":2}"#).await;
    g.send(r#"{"room":"kitchen","n":2}"#).await;
    assert_eq!(kitchen.recv().await, r#"{"room":"kitchen","n":2}"#, "still assigned: still reached");
    marker.send(r#"{"room":"lobby","marker":true}"#).await;
    assert_eq!(lobby.recv().await, r#"{"room":"lobby","marker":true}"#, "n=2 was not delivered");

    // Through the REST API too; and a new upgrade is refused for the unassigned path.
    let (status, body) = s
        .http(
            "DELETE",
            "/api/v1/users/alice/patterns?path=/room%3Dkitchen",
            &format!("authorization: Bearer {admin}\r\n"),
            "",
        )
        .await;
    assert_eq!(status, 204, "{body}");
    g.send(r#"{"room":"kitchen","n":3}"#).await;
    marker.send(r#"{"room":"kitchen","marker":true}"#).await;
    assert_eq!(kitchen.recv().await, r#"{"room":"kitchen","marker":true}"#);
    assert_eq!(s.connect("/room=lobby", Carrier::Bearer(&token)).await.err().unwrap().status, 403);
    // Assigning it again does not widen the token beyond what it carries, but restores it.
    st.assign_pattern("alice", "/room=lobby").unwrap();
    g.send(r#"{"room":"lobby","n":4}"#).await;
    assert_eq!(lobby.recv().await, r#"{"room":"lobby","n":4}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_removal_is_live_too() {
    let (s, admin) = server().await;
    let st = store(&s);
    st.add_role("chat").unwrap();
    st.role_add_pattern("chat", "/kind=chat").unwrap();
    st.assign_role("alice", "chat").unwrap();
    let token = field(&grant(&s, &admin, "alice").await.1, "token").as_str().unwrap().to_owned();
    let watcher = session(&s).await;
    let mut chat = s.connect("/kind=chat", Carrier::Bearer(&watcher)).await.unwrap();
    let mut marker = s.connect("/m", Carrier::Bearer(&watcher)).await.unwrap();
    let mut g = s.connect("/kind=chat", Carrier::Bearer(&token)).await.unwrap();
    g.send(r#"{"kind":"chat","n":1}"#).await;
    assert_eq!(chat.recv().await, r#"{"kind":"chat","n":1}"#);
    st.role_remove_pattern("chat", "/kind=chat").unwrap();
    g.send(r#"{"kind":"chat","n":2}"#).await;
    marker.send(r#"{"kind":"chat","marker":1}"#).await;
    assert_eq!(chat.recv().await, r#"{"kind":"chat","marker":1}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_or_deleting_the_account_closes_its_connections() {
    let (s, admin) = server().await;
    let st = store(&s);
    st.assign_pattern("alice", "/room=lobby").unwrap();
    let token = field(&grant(&s, &admin, "alice").await.1, "token").as_str().unwrap().to_owned();
    let login_session = session(&s).await;
    let mut g = s.connect("/room=lobby", Carrier::Bearer(&token)).await.unwrap();
    let mut l = s.connect("/room=lobby", Carrier::Bearer(&login_session)).await.unwrap();
    st.set_disabled("alice", true).unwrap();
    assert_eq!(g.ended().await, Ended::Closed(CloseCode::Policy, "the account is disabled".into()));
    assert_eq!(l.ended().await, Ended::Closed(CloseCode::Policy, "the account is disabled".into()));
    assert_eq!(s.connect("/room=lobby", Carrier::Bearer(&token)).await.err().unwrap().status, 403);
    assert_eq!(s.connect("/room=lobby", Carrier::Bearer(&login_session)).await.err().unwrap().status, 401);
    assert_eq!(grant(&s, &admin, "alice").await.0, 409, "no grant for a disabled account");

    st.set_disabled("alice", false).unwrap();
    let token = field(&grant(&s, &admin, "alice").await.1, "token").as_str().unwrap().to_owned();
    let mut g = s.connect("/room=lobby", Carrier::Bearer(&token)).await.unwrap();
    st.remove_user("alice").unwrap();
    assert_eq!(g.ended().await, Ended::Closed(CloseCode::Policy, "the account was deleted".into()));
    assert_eq!(grant(&s, &admin, "alice").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_never_permitted_for_a_grant_token() {
    let (s, admin) = server().await;
    store(&s).assign_pattern("alice", "/a").unwrap();
    let token = field(&grant(&s, &admin, "alice").await.1, "token").as_str().unwrap().to_owned();
    let bearer = format!("authorization: Bearer {token}\r\n");
    for (method, path) in [("GET", "/account"), ("POST", "/auth/logout")] {
        let (status, body) = s.http(method, path, &bearer, "").await;
        assert_eq!(status, 403, "{method} {path}: {body}");
    }
    let (status, _) = s.http("POST", "/auth/admin/issue", &bearer, r#"{"user":"alice"}"#).await;
    assert_eq!(status, 401, "a grant token is no admin credential");
    let login = session(&s).await;
    let (status, _) = s
        .http(
            "POST",
            "/auth/admin/issue",
            &format!("authorization: Bearer {login}\r\n"),
            r#"{"user":"alice"}"#,
        )
        .await;
    assert_eq!(status, 401, "nor is a login session");
    // An account with no pattern gets no grant.
    store(&s).add_user("bob", AuthType::Basic, Some(b"pw"), false).unwrap();
    assert_eq!(grant(&s, &admin, "bob").await.0, 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_tokens_admit_covered_paths_and_keep_their_limits() {
    let s = ContentServer::start("").await;
    let config = s.dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\ndir = {:?}\n[[listeners]]\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n",
            s.storage().display().to_string()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mesgd"))
            .args(["token", "anonymous", "--config"])
            .arg(&config)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, token, err) = run(&["/room=lobby", "/kind=news"]);
    assert!(ok, "{err}");
    assert!(s.connect("/room=lobby/from=ann", Carrier::Bearer(&token)).await.is_ok());
    assert!(s.connect("/kind=news", Carrier::Bearer(&token)).await.is_ok());
    assert_eq!(s.connect("/room=*", Carrier::Bearer(&token)).await.err().unwrap().status, 403);
    let nine: Vec<String> = (0..9).map(|i| format!("/n={i}")).collect();
    let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
    let eight = &nine[..8];
    assert!(run(eight).0, "eight prefixes are allowed");
    for (args, words) in [
        (&nine[..], "at most 8"),
        (&["/"][..], "covers every path"),
        (&["/*"][..], "covers every path"),
        (&["/*/*"][..], "covers every path"),
    ] {
        let (ok, out, err) = run(args);
        assert!(!ok && out.is_empty(), "{args:?} should fail");
        assert!(err.contains(words), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_and_roles_over_rest() {
    let (s, admin) = server().await;
    let h = format!("authorization: Bearer {admin}\r\ncontent-type: application/json\r\n");
    let (status, body) =
        s.http("POST", "/api/v1/users/alice/patterns", &h, r#"{"path":"/room=lobby/kind=chat"}"#).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(field(&body, "patterns"), serde_json::json!(["/kind=chat/room=lobby"]), "canonical");
    let compiled = r#"{"sample":{"kind":"news","room":"x"},"modes":{"kind":"exact"}}"#;
    let (status, body) = s.http("POST", "/api/v1/users/alice/patterns", &h, compiled).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(field(&body, "direct"), serde_json::json!(["/kind=chat/room=lobby", "/kind=news"]));
    for bad in [
        r#"{"path":"/k=v*"}"#,
        r#"{}"#,
        r#"{"path":"/a","sample":{}}"#,
        r#"{"sample":{"a":1},"modes":{"a":"maybe"}}"#,
    ] {
        let (status, body) = s.http("POST", "/api/v1/users/alice/patterns", &h, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    assert_eq!(s.http("POST", "/api/v1/users/nobody/patterns", &h, r#"{"path":"/a"}"#).await.0, 404);

    assert_eq!(s.http("POST", "/api/v1/roles", &h, r#"{"name":"ops"}"#).await.0, 201);
    assert_eq!(s.http("POST", "/api/v1/roles", &h, r#"{"name":"ops"}"#).await.0, 409);
    assert_eq!(s.http("POST", "/api/v1/roles/ops/patterns", &h, r#"{"path":"/kind=alert"}"#).await.0, 200);
    let (status, body) = s.http("POST", "/api/v1/users/alice/roles", &h, r#"{"role":"ops"}"#).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(field(&body, "roles"), serde_json::json!(["ops"]));
    assert_eq!(field(&body, "patterns").as_array().unwrap().len(), 3);
    let (_, roles) = s.http("GET", "/api/v1/roles", &h, "").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&roles).unwrap()[0]["patterns"],
        serde_json::json!(["/kind=alert"])
    );
    assert_eq!(s.http("DELETE", "/api/v1/roles/ops/patterns?path=/kind%3Dalert", &h, "").await.0, 204);
    assert_eq!(s.http("DELETE", "/api/v1/users/alice/roles/ops", &h, "").await.0, 204);
    assert_eq!(s.http("DELETE", "/api/v1/roles/ops", &h, "").await.0, 204);
    assert_eq!(s.http("GET", "/api/v1/roles/ops", &h, "").await.0, 404);
    // The command line sees the same assignments.
    let config = s.dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\ndir = {:?}\n[[listeners]]\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n",
            s.storage().display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mesgd"))
        .args(["grant", "list", "--config"])
        .arg(&config)
        .arg("alice")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/kind=chat/room=lobby\n/kind=news\n");
    let out = Command::new(env!("CARGO_BIN_EXE_mesgd"))
        .args(["grant", "unassign", "--config"])
        .arg(&config)
        .args(["alice", "/kind=news"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_mesgd"))
        .args(["grant", "issue", "--config"])
        .arg(&config)
        .arg("alice")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        s.connect("/kind=chat/room=lobby", Carrier::Bearer(&token)).await.is_ok(),
        "the CLI's grant token works"
    );
    assert_eq!(s.connect("/kind=news", Carrier::Bearer(&token)).await.err().unwrap().status, 403);
}

/// `POST /api/v1/users/{name}/grant-token` (the console's way to issue): the same token as
/// `/auth/admin/issue`, refused for an unknown user, a user without patterns and a read-scope
/// credential, and admitted where the user's patterns reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_token_from_the_rest_api() {
    let (s, admin) = server().await;
    let h = format!("authorization: Bearer {admin}\r\ncontent-type: application/json\r\n");
    let route = "/api/v1/users/alice/grant-token";
    let (status, body) = s.http("POST", route, &h, "").await;
    assert_eq!(status, 409, "no pattern yet: {body}");
    assert_eq!(s.http("POST", "/api/v1/users/nobody/grant-token", &h, "").await.0, 404);
    let reader = store(&s).create_token("looker", Scope::Read).unwrap().token;
    let (status, body) = s
        .http(
            "POST",
            route,
            &format!("authorization: Bearer {reader}\r\ncontent-type: application/json\r\n"),
            "",
        )
        .await;
    assert_eq!(status, 403, "a read-scope token may not issue: {body}");

    store(&s).assign_pattern("alice", "/room=lobby").unwrap();
    let (status, body) = s.http("POST", route, &h, "").await;
    assert_eq!(status, 200, "{body}");
    let token = field(&body, "token").as_str().unwrap().to_owned();
    let exp = field(&body, "expires_at").as_u64().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!((3599..=3601).contains(&(exp - now)), "one hour, as /auth/admin/issue: {exp} - {now}");
    assert_eq!(token.split('.').count(), 2, "the PKI wire format, as /auth/admin/issue");
    assert!(s.connect("/room=lobby", Carrier::Bearer(&token)).await.is_ok(), "admitted where it reaches");
    assert_eq!(s.connect("/room=attic", Carrier::Bearer(&token)).await.err().unwrap().status, 403);
}
