//! The REST API against the real server: every route with its errors and pagination, the
//! security rules (authentication, scopes, CSRF, cross-origin, lockout, no administrator,
//! no secret in any answer), and live effect on connected MQTT clients.

mod common;

use std::net::SocketAddr;

use common::auth::Storage;
use common::{TestServer, v3, within};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const ADMIN_PASSWORD: &str = "admin-pw-Zq8";
const USER_PASSWORD: &str = "user-pw-Kx3";

const BODY: &str = "[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n\
    [mqtt]\nsys_interval = 0\n[auth]\nallow_anonymous = true\n[[auth.providers]]\ntype = \"builtin\"\n\
    [http]\nlogin_delay_ms = 1\nlogin_max_failures = 3\n";

struct Api {
    base: String,
    client: reqwest::Client,
    /// Every body any request answered, to scan for secrets at the end.
    seen: std::sync::Mutex<Vec<String>>,
}

impl Api {
    fn new(addr: SocketAddr) -> Api {
        Api {
            base: format!("http://{addr}/api/v1"),
            client: reqwest::Client::new(),
            seen: Default::default(),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = within("an API answer", req.send()).await.expect("the request is answered");
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("a body");
        self.seen.lock().unwrap().push(text.clone());
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, headers, value)
    }

    async fn with_token(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let auth = format!("Bearer {token}");
        let (status, _, value) = self.send(method, path, &[("authorization", &auth)], body).await;
        (status, value)
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_else(|| panic!("not the error shape: {v}"))
}

async fn start() -> (Storage, TestServer, Api) {
    let storage = Storage::new();
    let server = TestServer::start_on(&storage, BODY).await;
    let addr = server.server.as_ref().unwrap().local_addr("http").expect("http listener");
    (storage, server, Api::new(addr))
}

async fn admin_token(storage: &Storage, scope: &str, name: &str) -> String {
    storage.mesgd(&["admin", "token", "create", name, "--scope", scope], "").await.trim().to_owned()
}

#[tokio::test]
async fn without_an_administrator_every_route_says_how_to_make_one() {
    let (storage, _server, api) = start().await;
    for (method, path) in [
        (Method::GET, "/users"),
        (Method::GET, "/login"),
        (Method::POST, "/acl/test"),
        (Method::GET, "/nope"),
    ] {
        let (status, _, body) = api.send(method, path, &[], None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(code(&body), "no_admin");
        assert!(body["error"]["message"].as_str().unwrap().contains("mesgd admin add"), "{body}");
    }
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], &format!("{ADMIN_PASSWORD}\n")).await;
    let (status, _, body) = api.send(Method::GET, "/users", &[], None).await;
    assert_eq!((status, code(&body)), (StatusCode::UNAUTHORIZED, "unauthenticated"));
}

/// The OpenAPI document is served without credentials, is OpenAPI 3.1, and every operation it
/// lists is a mounted route that refuses a request without credentials (401, never 404/405).
#[tokio::test]
async fn the_openapi_document_lists_exactly_the_mounted_routes() {
    let (storage, _server, api) = start().await;
    let (status, headers, doc) = api.send(Method::GET, "/openapi.json", &[], None).await;
    assert_eq!(status, StatusCode::OK, "served before any administrator exists");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(doc["openapi"], "3.1.0");
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], &format!("{ADMIN_PASSWORD}\n")).await;
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let path = path.strip_prefix("/api/v1").expect("under /api/v1");
        let concrete = path.replace("{namespace}", "mqtt").replace("{position}", "1").replace(['{', '}'], "");
        for method in item.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, _, body) = api.send(method.clone(), &concrete, &[], None).await;
            // The login itself needs no credentials: its GET gives the login CSRF token, its
            // POST without that token is refused.
            let expected = match (path, &method) {
                ("/login", &Method::GET) => StatusCode::OK,
                ("/login", _) => StatusCode::FORBIDDEN,
                _ => StatusCode::UNAUTHORIZED,
            };
            assert_eq!(status, expected, "{method} {concrete}: {body}");
            operations += 1;
        }
    }
    assert_eq!(operations, 39, "every operation of the API is in the document");
    let (status, _, body) = api.send(Method::PUT, "/users", &[("authorization", "Bearer x")], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "credentials are checked before the method: {body}");
}

#[tokio::test]
async fn a_body_over_max_body_bytes_is_refused_413_and_counted() {
    let (storage, server, api) = start().await;
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], &format!("{ADMIN_PASSWORD}\n")).await;
    let token = admin_token(&storage, "admin", "ci").await;
    let huge = "x".repeat(1024 * 1024 + 1);
    let (status, body) = api
        .with_token(&token, Method::POST, "/users", Some(json!({"username": "big", "password": huge})))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let counts = server.server.as_ref().unwrap().context().limits().counters.snapshot();
    assert_eq!(counts.body_size, 1);
    // Nothing was made, and a body under the cap is read as before.
    let (status, body) = api
        .with_token(
            &token,
            Method::POST,
            "/users",
            Some(json!({"username": "big", "password": USER_PASSWORD})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn users_rules_and_the_acl_tester() {
    let (storage, server, api) = start().await;
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], &format!("{ADMIN_PASSWORD}\n")).await;
    let token = admin_token(&storage, "admin", "ci").await;
    let t = token.as_str();

    // Create, with the errors.
    for name in ["dev-3", "alice", "dev-1", "dev-2", "bob"] {
        let (status, body) = api
            .with_token(t, Method::POST, "/users", Some(json!({"username": name, "password": USER_PASSWORD})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, body) =
        api.with_token(t, Method::POST, "/users", Some(json!({"username": "alice", "password": "x"}))).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "conflict"));
    let (status, body) = api.with_token(t, Method::POST, "/users", Some(json!({"username": "carol"}))).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "bad_request"), "basic needs a password");
    let (status, body) =
        api.with_token(t, Method::POST, "/users", Some(json!({"username": "x", "password": ""}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = api.with_token(t, Method::POST, "/users", Some(json!({"nam": "x"}))).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "bad_request"));

    // Pagination: 5 users, pages of 2.
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..5 {
        let path = match &cursor {
            Some(c) => format!("/users?limit=2&cursor={c}"),
            None => "/users?limit=2".to_owned(),
        };
        let (status, body) = api.with_token(t, Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        names.extend(
            body["items"].as_array().unwrap().iter().map(|u| u["username"].as_str().unwrap().to_owned()),
        );
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(names, ["alice", "bob", "dev-1", "dev-2", "dev-3"]);
    let (status, body) = api.with_token(t, Method::GET, "/users?prefix=dev-&limit=10", None).await;
    assert_eq!((status, body["items"].as_array().unwrap().len()), (StatusCode::OK, 3));
    for bad in
        ["/users?limit=0", "/users?limit=5000", "/users?cursor=%%%", "/users?limit=x", "/users?colour=red"]
    {
        let (status, body) = api.with_token(t, Method::GET, bad, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(matches!(code(&body), "bad_request" | "invalid_cursor"));
    }
    let (status, body) = api.with_token(t, Method::GET, "/users/nobody", None).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = api.with_token(t, Method::GET, "/users/alice", None).await;
    assert_eq!(
        (status, body["auth_type"].as_str(), body["has_password"].as_bool()),
        (StatusCode::OK, Some("basic"), Some(true))
    );

    // Rules: insert, insert at a position, move, replace, delete.
    for (pattern, permission, position) in
        [("devices/%u/#", "read", None), ("#", "deny", None), ("public/#", "readwrite", Some(1))]
    {
        let mut rule = json!({"pattern": pattern, "permission": permission});
        if let Some(p) = position {
            rule["position"] = json!(p);
        }
        let (status, body) = api.with_token(t, Method::POST, "/users/alice/rules", Some(rule)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let rules = |body: &Value| {
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["position"].as_u64().unwrap(), r["pattern"].as_str().unwrap().to_owned()))
            .collect::<Vec<_>>()
    };
    let (_, body) = api.with_token(t, Method::GET, "/users/alice/rules", None).await;
    assert_eq!(
        rules(&body),
        [(1, "public/#".to_owned()), (2, "devices/%u/#".to_owned()), (3, "#".to_owned())]
    );
    let (status, _) =
        api.with_token(t, Method::POST, "/users/alice/rules/3/move", Some(json!({"to": 1}))).await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = api.with_token(t, Method::GET, "/users/alice/rules?limit=2", None).await;
    assert_eq!(rules(&body), [(1, "#".to_owned()), (2, "public/#".to_owned())]);
    let next = body["next_cursor"].as_str().unwrap().to_owned();
    let (_, body) =
        api.with_token(t, Method::GET, &format!("/users/alice/rules?limit=2&cursor={next}"), None).await;
    assert_eq!(rules(&body), [(3, "devices/%u/#".to_owned())]);
    assert!(body["next_cursor"].is_null());
    let (status, _) =
        api.with_token(t, Method::POST, "/users/alice/rules/1/move", Some(json!({"to": 3}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) =
        api.with_token(t, Method::POST, "/users/alice/rules/9/move", Some(json!({"to": 1}))).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = api
        .with_token(
            t,
            Method::PUT,
            "/users/alice/rules/1",
            Some(json!({"pattern": "a/#/b", "permission": "read"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = api
        .with_token(
            t,
            Method::PUT,
            "/users/alice/rules/1",
            Some(json!({"pattern": "public/#", "permission": "read"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // The tester: "may alice read devices/alice/x?" and who decides.
    let ask = |access: &str, topic: &str| json!({"username": "alice", "access": access, "topic": topic});
    let (status, body) =
        api.with_token(t, Method::POST, "/acl/test", Some(ask("read", "devices/alice/x"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["allowed"].as_bool(), body["rule"]["position"].as_u64()), (Some(true), Some(2)));
    assert!(body["reason"].as_str().unwrap().starts_with("rule 2 (read devices/%u/#) allows"), "{body}");
    let (_, body) = api.with_token(t, Method::POST, "/acl/test", Some(ask("read", "devices/bob/x"))).await;
    assert_eq!((body["allowed"].as_bool(), body["rule"]["position"].as_u64()), (Some(false), Some(3)));
    let (_, body) = api.with_token(t, Method::POST, "/acl/test", Some(ask("read", "$SYS/x"))).await;
    assert_eq!(
        (body["allowed"].as_bool(), body["reason"].as_str()),
        (Some(false), Some("no rule matched: deny"))
    );
    let (status, _) = api.with_token(t, Method::POST, "/acl/test", Some(ask("write", "a/+"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a filter is not a topic");

    // What the tester says, a real client gets; a change applies to it live.
    let mut options = v3::options("alice-1", server.port());
    options.set_credentials("alice", USER_PASSWORD);
    let (mut alice, _) = v3::connect(options).await;
    let granted = alice.subscribe("devices/alice/#", v3::QoS::AtMostOnce).await;
    assert_eq!(granted.return_codes, [rumqttc::SubscribeReasonCode::Success(v3::QoS::AtMostOnce)]);
    let refused = alice.subscribe("devices/bob/#", v3::QoS::AtMostOnce).await;
    assert_eq!(refused.return_codes, [rumqttc::SubscribeReasonCode::Failure]);
    let (status, body) =
        api.with_token(t, Method::PATCH, "/users/alice", Some(json!({"disabled": true}))).await;
    assert_eq!((status, body["disabled"].as_bool()), (StatusCode::OK, Some(true)));
    alice.closed().await;
    let (status, body) = api
        .with_token(t, Method::PATCH, "/users/alice", Some(json!({"password": "p", "auth_type": "x509"})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = api
        .with_token(
            t,
            Method::PATCH,
            "/users/alice",
            Some(json!({"unrestricted": true, "disabled": false, "password": "new-pw"})),
        )
        .await;
    assert_eq!((status, body["unrestricted"].as_bool()), (StatusCode::OK, Some(true)));

    let (status, _) = api.with_token(t, Method::DELETE, "/users/alice/rules/3", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api.with_token(t, Method::DELETE, "/users/alice/rules/3", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api.with_token(t, Method::DELETE, "/users/alice", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api.with_token(t, Method::GET, "/users/alice", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The command line sees the API's changes: one store.
    let listed = storage.mesgd(&["user", "list"], "").await;
    assert!(!listed.contains("alice") && listed.contains("bob"), "{listed}");

    let bodies = api.seen.lock().unwrap().join("\n");
    for secret in [USER_PASSWORD, "new-pw", ADMIN_PASSWORD, "$pbkdf2", &token[10..]] {
        assert!(!bodies.contains(secret), "an answer contains {secret:?}");
    }
}

#[tokio::test]
async fn sessions_subscriptions_retained_providers_and_stats() {
    let (storage, server, api) = start().await;
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], &format!("{ADMIN_PASSWORD}\n")).await;
    let token = admin_token(&storage, "admin", "ops").await;
    let t = token.as_str();

    let (mut a, _) = v3::connect(v3::options("client-a", server.port())).await;
    a.subscribe("sensors/+/temp", v3::QoS::AtLeastOnce).await;
    let mut persistent = v3::options("client-b", server.port());
    persistent.set_clean_session(false);
    let (mut b, _) = v3::connect(persistent).await;
    b.subscribe("sensors/#", v3::QoS::AtMostOnce).await;
    a.client.publish("sensors/1/temp", v3::QoS::AtLeastOnce, true, "21.5").await.unwrap();
    a.client.publish("sensors/2/temp", v3::QoS::AtLeastOnce, true, vec![0xffu8, 0xfe]).await.unwrap();
    a.next_publish().await;
    a.next_publish().await;

    let (status, body) = api.with_token(t, Method::GET, "/sessions?online=true&limit=1", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first = &body["items"][0];
    assert_eq!(
        (first["client_id"].as_str(), first["protocol"].as_str(), first["listener"].as_str()),
        (Some("client-a"), Some("mqtt-3.1.1"), Some("mqtt"))
    );
    assert_eq!(first["subscriptions"].as_u64(), Some(1));
    assert!(
        first["connected_since"].as_u64().is_some()
            && first["peer"].as_str().unwrap().starts_with("127.0.0.1:")
    );
    let cursor = body["next_cursor"].as_str().unwrap().to_owned();
    let (_, body) =
        api.with_token(t, Method::GET, &format!("/sessions?online=true&cursor={cursor}"), None).await;
    assert_eq!(body["items"][0]["client_id"].as_str(), Some("client-b"));
    let (status, body) = api.with_token(t, Method::GET, "/sessions/mqtt/client-a", None).await;
    assert_eq!(
        (status, body["subscription_list"][0]["filter"].as_str()),
        (StatusCode::OK, Some("sensors/+/temp"))
    );
    let (status, _) = api.with_token(t, Method::GET, "/sessions/mqtt/nobody", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api.with_token(t, Method::GET, "/sessions/carrier-pigeon/x", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (_, body) = api.with_token(t, Method::GET, "/subscriptions?matching=sensors/9/temp", None).await;
    assert_eq!(body["items"].as_array().unwrap().len(), 2, "{body}");
    let (_, body) = api.with_token(t, Method::GET, "/subscriptions?client_id=client-b", None).await;
    assert_eq!(body["items"][0]["filter"].as_str(), Some("sensors/#"));
    let (_, body) = api.with_token(t, Method::GET, "/subscriptions?filter=sensors/%2B/temp", None).await;
    assert_eq!(body["items"][0]["client_id"].as_str(), Some("client-a"));

    // Deleting a connected session is refused; a kick closes it; then it can go.
    let (status, body) = api.with_token(t, Method::DELETE, "/sessions/mqtt/client-b", None).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "conflict"));
    let (status, _) = api.with_token(t, Method::POST, "/sessions/mqtt/client-b/kick", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    b.closed().await;
    within("the session to go offline", async {
        loop {
            let (_, body) = api.with_token(t, Method::GET, "/sessions/mqtt/client-b", None).await;
            if body["online"] == json!(false) {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let (status, _) = api.with_token(t, Method::POST, "/sessions/mqtt/client-b/kick", None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = api.with_token(t, Method::DELETE, "/sessions/mqtt/client-b", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api.with_token(t, Method::GET, "/sessions/mqtt/client-b", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Retained: list with previews, get, delete; a new subscriber then gets nothing.
    let (_, body) = api.with_token(t, Method::GET, "/retained?filter=sensors/%2B/temp&limit=1", None).await;
    assert_eq!(
        (body["items"][0]["topic"].as_str(), body["items"][0]["preview"].as_str()),
        (Some("sensors/1/temp"), Some("21.5"))
    );
    let cursor = body["next_cursor"].as_str().unwrap().to_owned();
    let (_, body) = api
        .with_token(t, Method::GET, &format!("/retained?filter=sensors/%2B/temp&cursor={cursor}"), None)
        .await;
    assert_eq!(
        (body["items"][0]["topic"].as_str(), body["items"][0]["payload_bytes"].as_u64()),
        (Some("sensors/2/temp"), Some(2))
    );
    let (_, body) = api.with_token(t, Method::GET, "/retained/sensors%2F2%2Ftemp", None).await;
    assert_eq!((body["payload_base64"].as_str(), body["payload_text"].is_null()), (Some("//4="), true));
    let (status, _) = api.with_token(t, Method::GET, "/retained?filter=a/%23/b", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = api.with_token(t, Method::DELETE, "/retained/sensors%2F1%2Ftemp", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api.with_token(t, Method::DELETE, "/retained/sensors%2F1%2Ftemp", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (mut c, _) = v3::connect(v3::options("client-c", server.port())).await;
    c.subscribe("sensors/+/temp", v3::QoS::AtMostOnce).await;
    let replayed = c.next_publish().await;
    assert_eq!(replayed.topic, "sensors/2/temp", "only the message not deleted is replayed");

    // The chain with its counters, and the statistics.
    let (status, body) = api.with_token(t, Method::GET, "/providers", None).await;
    assert_eq!((status, body["providers"][0]["name"].as_str()), (StatusCode::OK, Some("builtin")));
    assert!(body["providers"][0]["next"].as_u64().unwrap() >= 3, "anonymous clients passed it: {body}");
    assert!(body["anonymous_admitted"].as_u64().unwrap() >= 3);
    let (status, body) = api.with_token(t, Method::GET, "/stats", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["messages_received"].as_u64().unwrap() >= 2 && body["retained"].as_u64() == Some(1),
        "{body}"
    );
}

/// A browser login: the login CSRF token from GET /login, then the session cookie.
async fn browser_login(api: &Api, name: &str, password: &str) -> (StatusCode, Option<String>, Value) {
    let (status, headers, body) = api.send(Method::GET, "/login", &[], None).await;
    assert_eq!(status, StatusCode::OK);
    let token = body["csrf_token"].as_str().unwrap().to_owned();
    let set = headers.get("set-cookie").unwrap().to_str().unwrap().to_owned();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let (status, headers, body) = api
        .send(
            Method::POST,
            "/login",
            &[("x-csrf-token", &token), ("cookie", &cookie)],
            Some(json!({"username": name, "password": password})),
        )
        .await;
    let session = headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("mesgd_session="));
    (status, session, body)
}

#[tokio::test]
async fn security_of_every_route() {
    let (storage, _server, api) = start().await;
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], &format!("{ADMIN_PASSWORD}\n")).await;
    storage
        .mesgd(
            &["admin", "add", "viewer", "--role", "read", "--password-stdin"],
            &format!("{ADMIN_PASSWORD}\n"),
        )
        .await;
    let reader = admin_token(&storage, "read", "dashboards").await;
    let admin = admin_token(&storage, "admin", "ops").await;
    api.with_token(&admin, Method::POST, "/users", Some(json!({"username": "u", "password": USER_PASSWORD})))
        .await;

    let routes: &[(Method, &str, Option<Value>)] = &[
        (Method::GET, "/users", None),
        (Method::POST, "/users", Some(json!({"username": "v", "password": "pw"}))),
        (Method::GET, "/users/u", None),
        (Method::PATCH, "/users/u", Some(json!({"disabled": true}))),
        (Method::DELETE, "/users/u", None),
        (Method::GET, "/users/u/rules", None),
        (Method::POST, "/users/u/rules", Some(json!({"pattern": "a", "permission": "read"}))),
        (Method::PUT, "/users/u/rules/1", Some(json!({"pattern": "a", "permission": "read"}))),
        (Method::DELETE, "/users/u/rules/1", None),
        (Method::POST, "/users/u/rules/1/move", Some(json!({"to": 1}))),
        (Method::POST, "/acl/test", Some(json!({"username": "u", "access": "read", "topic": "a"}))),
        (Method::GET, "/sessions", None),
        (Method::GET, "/sessions/mqtt/x", None),
        (Method::DELETE, "/sessions/mqtt/x", None),
        (Method::POST, "/sessions/mqtt/x/kick", None),
        (Method::GET, "/subscriptions", None),
        (Method::GET, "/retained", None),
        (Method::GET, "/retained/a", None),
        (Method::DELETE, "/retained/a", None),
        (Method::GET, "/providers", None),
        (Method::GET, "/stats", None),
        (Method::GET, "/whoami", None),
        (Method::POST, "/logout", None),
    ];
    for (method, path, body) in routes {
        let (status, _, answer) = api.send(method.clone(), path, &[], body.clone()).await;
        assert_eq!((status, code(&answer)), (StatusCode::UNAUTHORIZED, "unauthenticated"), "{method} {path}");
        let (status, answer) =
            api.with_token("mesgd_0011223344556677_forged", method.clone(), path, body.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path} with a forged token: {answer}");
        let read_only = *method == Method::GET || *path == "/acl/test" || *path == "/logout";
        if !read_only {
            let (status, answer) = api.with_token(&reader, method.clone(), path, body.clone()).await;
            assert_eq!(
                (status, code(&answer)),
                (StatusCode::FORBIDDEN, "forbidden"),
                "a read token may not {method} {path}"
            );
        }
    }

    // A browser session: state changes need the CSRF token; cross-origin is refused first.
    let (status, cookie, body) = browser_login(&api, "root", ADMIN_PASSWORD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let cookie = cookie.expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && !cookie.contains("Secure"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let csrf = body["csrf_token"].as_str().unwrap().to_owned();
    let new_user = Some(json!({"username": "w", "password": USER_PASSWORD}));
    let (status, _, body) = api.send(Method::POST, "/users", &[("cookie", &cookie)], new_user.clone()).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "csrf"));
    let (status, _, body) = api
        .send(Method::POST, "/users", &[("cookie", &cookie), ("x-csrf-token", "guess")], new_user.clone())
        .await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "csrf"));
    let evil =
        [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str()), ("origin", "http://evil.example")];
    let (status, _, body) = api.send(Method::POST, "/users", &evil, new_user.clone()).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "cross_origin"));
    let cross =
        [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str()), ("sec-fetch-site", "cross-site")];
    let (status, _, body) = api.send(Method::POST, "/users", &cross, new_user.clone()).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "cross_origin"));
    let (status, _, body) = api
        .send(Method::POST, "/users", &[("cookie", &cookie), ("x-csrf-token", &csrf)], new_user.clone())
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, body) = api.send(Method::GET, "/whoami", &[("cookie", &cookie)], None).await;
    assert_eq!(
        (status, body["name"].as_str(), body["csrf_token"].as_str()),
        (StatusCode::OK, Some("root"), Some(csrf.as_str()))
    );
    let (status, _, _) =
        api.send(Method::POST, "/logout", &[("cookie", &cookie), ("x-csrf-token", &csrf)], None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = api.send(Method::GET, "/whoami", &[("cookie", &cookie)], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the session ended");

    // A read account's session may look, not change.
    let (_, cookie, body) = browser_login(&api, "viewer", ADMIN_PASSWORD).await;
    let cookie = cookie.unwrap().split(';').next().unwrap().to_owned();
    let csrf = body["csrf_token"].as_str().unwrap().to_owned();
    let (status, _, body) =
        api.send(Method::DELETE, "/users/u", &[("cookie", &cookie), ("x-csrf-token", &csrf)], None).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));

    // A login without its CSRF token is refused; so is one with a made-up token.
    let (status, _, body) = api
        .send(Method::POST, "/login", &[], Some(json!({"username": "root", "password": ADMIN_PASSWORD})))
        .await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "csrf"));
    let forged = [("x-csrf-token", "1.2.3"), ("cookie", "mesgd_login_csrf=1.2.3")];
    let (status, _, body) = api
        .send(Method::POST, "/login", &forged, Some(json!({"username": "root", "password": ADMIN_PASSWORD})))
        .await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "csrf"));

    // Lockout: three failures (this test's setting) lock the name, even with the right password.
    for _ in 0..3 {
        let (status, _, body) = browser_login(&api, "root", "wrong").await;
        assert_eq!((status, code(&body)), (StatusCode::UNAUTHORIZED, "bad_credentials"));
    }
    let (status, session, body) = browser_login(&api, "root", ADMIN_PASSWORD).await;
    assert_eq!((status, code(&body)), (StatusCode::TOO_MANY_REQUESTS, "locked"));
    assert!(session.is_none());
    // Tokens are not locked out.
    let (status, _) = api.with_token(&admin, Method::GET, "/users", None).await;
    assert_eq!(status, StatusCode::OK);

    // A revoked token stops working at once.
    storage.mesgd(&["admin", "token", "revoke", "dashboards"], "").await;
    let (status, _) = api.with_token(&reader, Method::GET, "/users", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let bodies = api.seen.lock().unwrap().join("\n");
    for secret in [ADMIN_PASSWORD, USER_PASSWORD, &admin[10..], &reader[10..]] {
        assert!(!bodies.contains(secret), "an answer contains {secret:?}");
    }
}
