//! The authentication chain end to end, in MQTT 3.1.1 and 5.0: builtin users created with the
//! real `mesgd` binary, chain order and the anonymous fallback, JWTs signed here, a real HTTP
//! webhook on 127.0.0.1, providers that fail, failed-login protection, and the example
//! configurations in `config/examples/`.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use common::TestServer;
use common::auth::{
    BOTH, JWT_SECRET, Login, Proto, Storage, disconnect_reason, jwt_provider, raw_login, sign_with, token,
    unix_now,
};
use common::{mqtt_str, packet};
use http_body_util::{BodyExt as _, Full};
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Failed logins are not slowed down, so that tests full of refusals stay fast.
const NO_THROTTLE: &str = "[auth.failed_login]\nmax_failures = 0\n";
const NO_SYS: &str = "[mqtt]\nsys_interval = 0\n";

fn builtin(extra: &str) -> String {
    format!("[[auth.providers]]\ntype = \"builtin\"\n{extra}\n")
}

fn auth(allow_anonymous: bool, providers: &[String]) -> String {
    format!("[auth]\nallow_anonymous = {allow_anonymous}\n{}{NO_THROTTLE}{NO_SYS}", providers.concat())
}

fn id(name: &str, proto: Proto) -> String {
    format!("{name}-{proto:?}")
}

// ------------------------------------------------------------------------- builtin

#[tokio::test]
async fn builtin_users_created_with_the_cli_log_in_with_their_password() {
    let storage = Storage::new();
    storage.add_user("alice", "correct horse").await;
    storage.add_rule("alice", "alice/#", "readwrite").await;
    storage.add_user("bob", "battery staple").await;
    let out = storage.mesgd(&["user", "disable", "bob"], "").await;
    assert_eq!(out, "user bob disabled\n");
    let list = storage.mesgd(&["user", "list"], "").await;
    assert_eq!(list, "alice\tbasic\tenabled\trules=1\nbob\tbasic\tdisabled\trules=0\n");
    let (ok, out, err) = storage.run(&["user", "add", "alice", "--password-stdin"], "other\n").await;
    assert!(!ok && out.is_empty(), "a second alice is refused: {err}");
    assert!(!err.contains("other"), "the password is not echoed: {err}");

    let server = TestServer::start_on(&storage, &auth(false, &[builtin("")])).await;
    for proto in BOTH {
        let login = |user: &str, password: &str| {
            Login::new(proto, server.port(), &id(user, proto)).user(user, password)
        };
        let mut alice = login("alice", "correct horse").connect().await;
        alice.subscribe_ok("alice/x").await;
        assert_eq!(alice.subscribe("bob/x").await, proto.sub_refused(), "the rules from the CLI apply");

        assert_eq!(login("alice", "wrong").refused().await, proto.bad_credentials());
        assert_eq!(login("alice", "").refused().await, proto.bad_credentials());
        assert_eq!(login("mallory", "correct horse").refused().await, proto.bad_credentials(), "unknown");
        assert_eq!(login("bob", "battery staple").refused().await, proto.not_authorized(), "disabled");
        // A wrong password does not tell whether the account is disabled.
        assert_eq!(login("bob", "wrong").refused().await, proto.bad_credentials());
        let anonymous = Login::new(proto, server.port(), &id("anon", proto));
        assert_eq!(anonymous.refused().await, proto.not_authorized(), "anonymous access is off");
    }
}

// ------------------------------------------------------------------------- chain order

#[tokio::test]
async fn unknown_users_fall_through_and_the_first_decisive_provider_wins() {
    let storage = Storage::new();
    storage.add_user("dave", "dave-pw").await;
    storage.add_rule("dave", "builtin/#", "readwrite").await;
    let acl = json!([{"pattern": "jwt/#", "permission": "readwrite"}]);
    let dave_token = token("dave", Some(acl.clone()));
    let carol_token = token("carol", Some(acl));
    let builtin_first = TestServer::start_on(&storage, &auth(false, &[builtin(""), jwt_provider("")])).await;
    let jwt_first = TestServer::start_on(&storage, &auth(false, &[jwt_provider(""), builtin("")])).await;

    for proto in BOTH {
        let login = |server: &TestServer, user: &str, password: &str| {
            Login::new(proto, server.port(), &id(user, proto)).user(user, password)
        };
        // Unknown to builtin (Next): the jwt provider after it decides.
        let mut carol = login(&builtin_first, "carol", &carol_token).connect().await;
        carol.subscribe_ok("jwt/x").await;
        // Known to builtin, which decides: a token is not dave's password.
        assert_eq!(login(&builtin_first, "dave", &dave_token).refused().await, proto.bad_credentials());
        let mut dave = login(&builtin_first, "dave", "dave-pw").connect().await;
        assert_eq!(dave.subscribe("jwt/x").await, proto.sub_refused(), "builtin's rules, not the token's");
        dave.subscribe_ok("builtin/x").await;

        // The other order: the token admits dave through jwt; a password is no token, so jwt
        // passes and builtin admits.
        let mut dave = login(&jwt_first, "dave", &dave_token).connect().await;
        dave.subscribe_ok("jwt/x").await;
        assert_eq!(dave.subscribe("builtin/x").await, proto.sub_refused());
        let mut dave = login(&jwt_first, "dave", "dave-pw").connect().await;
        dave.subscribe_ok("builtin/x").await;
        assert_eq!(login(&jwt_first, "carol", "carol-pw").refused().await, proto.bad_credentials());
    }
}

#[tokio::test]
async fn anonymous_access_is_only_for_clients_without_a_username() {
    let storage = Storage::new();
    let open = TestServer::start_on(&storage, &auth(true, &[builtin("")])).await;
    let closed = TestServer::start_on(&storage, &auth(false, &[builtin("")])).await;
    for proto in BOTH {
        let mut anonymous = Login::new(proto, open.port(), &id("anon", proto)).connect().await;
        anonymous.subscribe_ok("#").await;
        anonymous.subscribe_ok("$SYS/#").await;
        assert_eq!(anonymous.publish("any/topic", 1, false, b"x").await, Some(0));
        expect_topic(&mut anonymous, "any/topic").await;
        let nobody = Login::new(proto, open.port(), &id("nobody", proto)).user("nobody", "pw");
        assert_eq!(nobody.refused().await, proto.bad_credentials(), "a username nobody resolves");

        let anonymous = Login::new(proto, closed.port(), &id("anon", proto));
        assert_eq!(anonymous.refused().await, proto.not_authorized());
    }
}

async fn expect_topic(client: &mut common::auth::Client, topic: &str) {
    assert_eq!(client.next_publish().await.topic, topic);
}

// ------------------------------------------------------------------------- failing providers

/// A `http://127.0.0.1:<port>/` URL where nothing listens.
async fn closed_port_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}/auth")
}

#[tokio::test]
async fn a_failing_provider_denies_unless_on_error_is_next() {
    let storage = Storage::new();
    storage.add_user("alice", "pw").await;
    let url = closed_port_url().await;
    let failing =
        |on_error: &str| format!("[[auth.providers]]\ntype = \"http\"\nurl = {url:?}\n{on_error}\n");
    let fail_closed = TestServer::start_on(&storage, &auth(true, &[failing(""), builtin("")])).await;
    let skip =
        TestServer::start_on(&storage, &auth(true, &[failing("on_error = \"next\""), builtin("")])).await;
    for proto in BOTH {
        let alice =
            |server: &TestServer| Login::new(proto, server.port(), &id("alice", proto)).user("alice", "pw");
        let anonymous = |server: &TestServer| Login::new(proto, server.port(), &id("anon", proto));
        assert_eq!(alice(&fail_closed).refused().await, proto.not_authorized());
        assert_eq!(anonymous(&fail_closed).refused().await, proto.not_authorized(), "no fallback either");
        alice(&skip).connect().await;
        anonymous(&skip).connect().await;
    }
}

// ------------------------------------------------------------------------- jwt

/// A token whose header says `alg` and whose signature is `signature`, built by hand because
/// no library makes unsigned tokens.
fn hand_built(header: &Value, claims: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

fn rs256(claims: &Value) -> String {
    let pem = include_bytes!("../providers/tests/it/data/rs256-test-key.pem");
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem).expect("RSA test key");
    jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256), claims, &key)
        .expect("signs")
}

#[tokio::test]
async fn jwt_tokens_are_verified_and_carry_the_acl() {
    let server = TestServer::start_with(&auth(false, &[jwt_provider("")])).await;
    let acl = json!([{"pattern": "jwt/%u/#", "permission": "readwrite"}]);
    let claims = |exp: u64| json!({"sub": "alice", "exp": exp, "acl": acl});
    let valid = sign_with(&claims(unix_now() + 600), JWT_SECRET.as_bytes());
    let refused = [
        ("expired", sign_with(&claims(unix_now() - 3600), JWT_SECRET.as_bytes())),
        ("alg none", hand_built(&json!({"alg": "none", "typ": "JWT"}), &claims(unix_now() + 600), "")),
        ("RS256", rs256(&claims(unix_now() + 600))),
        ("wrong secret", sign_with(&claims(unix_now() + 600), b"another key of at least thirty-two bytes!!")),
        ("no exp", sign_with(&json!({"sub": "alice", "acl": acl}), JWT_SECRET.as_bytes())),
    ];
    for proto in BOTH {
        let login =
            |user: &str, token: &str| Login::new(proto, server.port(), &id("c", proto)).user(user, token);
        let mut alice = login("alice", &valid).connect().await;
        alice.subscribe_ok("jwt/alice/x").await;
        assert_eq!(alice.subscribe("jwt/bob/x").await, proto.sub_refused(), "the token's ACL applies");
        assert_eq!(alice.publish("jwt/bob/x", 1, false, b"x").await, Some(proto.pub_refused()));
        assert_eq!(alice.publish("jwt/alice/x", 1, false, b"x").await, Some(0));
        drop(alice);
        for (what, token) in &refused {
            assert_eq!(login("alice", token).refused().await, proto.bad_credentials(), "{what}");
        }
        assert_eq!(login("bob", &valid).refused().await, proto.bad_credentials(), "username is not sub");
        // Within the leeway (30 s by default) a token just past `exp` is still good: clocks
        // differ, and the connection lasts until `exp` plus the same allowance.
        let just_expired = sign_with(&claims(unix_now() - 5), JWT_SECRET.as_bytes());
        let late = login("alice", &just_expired).connect().await;
        drop(late);
    }
}

#[tokio::test]
async fn a_v5_client_may_send_the_token_without_a_username() {
    let server = TestServer::start_with(&auth(false, &[jwt_provider("")])).await;
    let acl = json!([{"pattern": "jwt/%u/#", "permission": "read"}]);
    let token = token("alice", Some(acl));
    let (mut raw, code) =
        raw_login(server.addr, ProtocolVersion::V5, "c", None, Some(token.as_bytes())).await;
    assert_eq!(code, ReasonCode::Success);
    let subscribe = |filter: &str| {
        let mut body = 1u16.to_be_bytes().to_vec();
        body.push(0); // no properties
        body.extend_from_slice(&mqtt_str(filter));
        body.push(1);
        packet(0x82, &body)
    };
    for (filter, expected) in
        [("jwt/alice/x", ReasonCode::GrantedQoS1), ("jwt/bob/x", ReasonCode::NotAuthorized)]
    {
        raw.send(&subscribe(filter)).await;
        match raw.recv().await {
            Some(Packet::SubAck(s)) => {
                assert_eq!(s.reason_codes, [expected], "{filter}: %u is the token's sub")
            }
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_connected_client_is_disconnected_when_its_token_expires() {
    // No clock-skew allowance, so the connection ends at `exp` itself.
    let server = TestServer::start_with(&auth(false, &[jwt_provider("leeway_s = 0")])).await;
    let acl = json!([{"pattern": "#", "permission": "readwrite"}]);
    let exp = unix_now() + 2;
    let token = sign_with(&json!({"sub": "alice", "exp": exp, "acl": acl}), JWT_SECRET.as_bytes());
    let expires = UNIX_EPOCH + Duration::from_secs(exp);

    // 3.1.1 through rumqttc: the connection works, then is closed.
    let v3 = async {
        let mut client = Login::new(Proto::V3, server.port(), "v3").user("alice", &token).connect().await;
        client.subscribe_ok("t").await;
        client.closed().await;
        SystemTime::now()
    };
    // 5.0 over a raw connection, to read the DISCONNECT reason.
    let v5 = async {
        let (mut raw, code) =
            raw_login(server.addr, ProtocolVersion::V5, "v5", Some("alice"), Some(token.as_bytes())).await;
        assert_eq!(code, ReasonCode::Success);
        let reason = disconnect_reason(&mut raw).await;
        (reason, SystemTime::now())
    };
    let (v3_closed, (v5_reason, v5_closed)) = tokio::join!(v3, v5);
    assert_eq!(v5_reason, Some(ReasonCode::MaximumConnectTime));
    for closed in [v3_closed, v5_closed] {
        // Not before the token's exp (allowing for the clocks' granularity).
        assert!(closed + Duration::from_millis(50) >= expires, "closed {closed:?}, expires {expires:?}");
    }
}

// ------------------------------------------------------------------------- http webhook

/// How the test webhook answers one request.
enum Answer {
    Reply(u16, String),
    /// Never answers.
    Hang,
}

/// A real HTTP/1.1 server on 127.0.0.1 that answers by the username in the question, and
/// reports every question it receives.
struct Webhook {
    addr: SocketAddr,
    questions: mpsc::UnboundedReceiver<Value>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Webhook {
    async fn start(answer: fn(&Value) -> Answer) -> Webhook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (report, questions) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let report = report.clone();
                let service =
                    hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                        let report = report.clone();
                        async move {
                            let body =
                                request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let question: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let _ = report.send(question.clone());
                            let (status, text) = match answer(&question) {
                                Answer::Reply(status, text) => (status, text),
                                Answer::Hang => std::future::pending().await,
                            };
                            let response = hyper::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from(text)))
                                .expect("valid response");
                            Ok::<_, Infallible>(response)
                        }
                    });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Webhook { addr, questions, task }
    }

    /// The provider table for this webhook.
    fn provider(&self, extra: &str) -> String {
        format!("[[auth.providers]]\ntype = \"http\"\nurl = \"http://{}/mqtt/auth\"\n{extra}\n", self.addr)
    }

    /// The next question whose username is `username`.
    async fn question_from(&mut self, username: &str) -> Value {
        let questions = &mut self.questions;
        common::within("the webhook to be asked", async {
            loop {
                let question = questions.recv().await.expect("webhook running");
                if question["username"] == username {
                    return question;
                }
            }
        })
        .await
    }
}

fn answer_by_username(question: &Value) -> Answer {
    let reply = |status, body: Value| Answer::Reply(status, body.to_string());
    match question["username"].as_str().unwrap_or_default() {
        "hook-acl" => {
            reply(200, json!({"allow": true, "acl": [{"pattern": "hook/%u/#", "permission": "readwrite"}]}))
        }
        "hook-free" => reply(200, json!({"allow": true})),
        "hook-deny" => reply(200, json!({"allow": false})),
        "known401" => reply(401, json!({})),
        "carl" => reply(500, json!({"error": "database down"})),
        "garbage" => Answer::Reply(200, "<html>not json</html>".into()),
        "slow" => Answer::Hang,
        _ => reply(404, json!({})),
    }
}

#[tokio::test]
async fn webhook_answers_decide_or_pass_to_the_next_provider() {
    let mut hook = Webhook::start(answer_by_username).await;
    let storage = Storage::new();
    for user in ["known401", "known404", "carl"] {
        storage.add_user(user, "pw").await;
    }
    let server = TestServer::start_on(&storage, &auth(false, &[hook.provider(""), builtin("")])).await;
    for proto in BOTH {
        let login = |user: &str, password: &str| {
            Login::new(proto, server.port(), &id(user, proto)).user(user, password)
        };

        let mut restricted = login("hook-acl", "s3cret").connect().await;
        let question = hook.question_from("hook-acl").await;
        let protocol = if proto == Proto::V3 { "mqtt-3.1.1" } else { "mqtt-5" };
        assert_eq!(question["client_id"], id("hook-acl", proto));
        assert_eq!(question["password"], STANDARD.encode("s3cret"), "the password travels as base64");
        assert_eq!(
            (question["protocol"].as_str(), question["listener"].as_str()),
            (Some(protocol), Some("mqtt"))
        );
        restricted.subscribe_ok("hook/hook-acl/x").await;
        assert_eq!(restricted.subscribe("hook/other/x").await, proto.sub_refused(), "the answer's ACL");

        let mut free = login("hook-free", "x").connect().await;
        free.subscribe_ok("#").await;

        assert_eq!(login("hook-deny", "x").refused().await, proto.bad_credentials(), "200 allow=false");
        // 401 and 404: the webhook does not know them, builtin decides.
        login("known401", "pw").connect().await;
        login("known404", "pw").connect().await;
        assert_eq!(login("known401", "wrong").refused().await, proto.bad_credentials());
        assert_eq!(login("stranger", "pw").refused().await, proto.bad_credentials(), "nobody knows it");
        // Any other status refuses, even a user builtin would admit.
        assert_eq!(login("carl", "pw").refused().await, proto.bad_credentials(), "500");
        // A 200 that is not an answer is a failure: the chain fails closed.
        assert_eq!(login("garbage", "pw").refused().await, proto.not_authorized());
    }
}

#[tokio::test]
async fn a_slow_webhook_times_out_without_stalling_other_connects() {
    let mut hook = Webhook::start(answer_by_username).await;
    let storage = Storage::new();
    storage.add_user("slow", "pw").await;
    let timeout = "timeout_ms = 1000";
    let fail_closed =
        TestServer::start_on(&storage, &auth(false, &[hook.provider(timeout), builtin("")])).await;
    let next = format!("{timeout}\non_error = \"next\"");
    let skip = TestServer::start_on(&storage, &auth(false, &[hook.provider(&next), builtin("")])).await;

    for (server, admitted) in [(&fail_closed, false), (&skip, true)] {
        for proto in BOTH {
            let slow = Login::new(proto, server.port(), &id("slow", proto)).user("slow", "pw");
            let started = Instant::now();
            let waiting = tokio::spawn(async move { slow.try_connect().await.map(|_| ()) });
            hook.question_from("slow").await;
            // While the slow connect waits for the webhook, another client gets in.
            Login::new(proto, server.port(), &id("free", proto)).user("hook-free", "x").connect().await;
            assert!(!waiting.is_finished(), "the fast connect did not wait for the slow one");
            let outcome = waiting.await.expect("connect task");
            assert!(started.elapsed() >= Duration::from_millis(1000), "answered after timeout_ms");
            if admitted {
                assert_eq!(outcome, Ok(()), "on_error = \"next\": builtin decides");
            } else {
                assert_eq!(outcome, Err(proto.not_authorized()), "a timeout fails closed");
            }
        }
    }
}

// ------------------------------------------------------------------------- failed-login protection

#[tokio::test]
async fn repeated_failures_slow_the_next_attempt_down_and_are_counted() {
    let storage = Storage::new();
    storage.add_user("alice", "pw").await;
    let config = format!(
        "[auth]\nallow_anonymous = true\n{}[auth.failed_login]\nmax_failures = 2\nbase_delay_ms = 300\n[mqtt]\nsys_interval = 1\n",
        builtin("")
    );
    let server = TestServer::start_on(&storage, &config).await;
    let mut watcher = Login::new(Proto::V3, server.port(), "watcher").connect().await;
    watcher.subscribe_ok("$SYS/broker/auth/failures").await;

    let wrong = |proto: Proto, n: u32| {
        Login::new(proto, server.port(), &format!("guess{n}")).user("alice", &format!("guess{n}"))
    };
    for (n, proto) in [(1, Proto::V3), (2, Proto::V5)] {
        assert_eq!(wrong(proto, n).refused().await, proto.bad_credentials());
    }
    let started = Instant::now();
    assert_eq!(wrong(Proto::V3, 3).refused().await, Proto::V3.bad_credentials());
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "the third failure in a row waited only {took:?}");

    common::within("$SYS/broker/auth/failures to count 3", async {
        loop {
            let update = watcher.next_publish().await;
            if update.payload == b"3" {
                return;
            }
        }
    })
    .await;
}

// ------------------------------------------------------------------------- example configurations

/// Every file in `config/examples/` is a valid configuration, and its provider chain builds (in
/// a scratch directory, with the secret files it names created there).
#[test]
fn every_example_configuration_parses_and_its_chain_builds() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&examples).expect("config/examples exists") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        seen += 1;
        let name = path.display().to_string();
        let config = mesgd::config::Config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!config.auth.providers.is_empty(), "{name} configures a chain");

        let scratch = tempfile::tempdir().expect("temp dir");
        let copy = scratch.path().join("mesgd.toml");
        std::fs::copy(&path, &copy).expect("copy");
        let config = mesgd::config::Config::load(&copy).expect("the copy parses too");
        for table in &config.auth.providers {
            for (key, value) in table {
                if let (true, Some(file)) = (key.ends_with("_file"), value.as_str()) {
                    let file = config.resolve(std::path::Path::new(file));
                    std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
                    std::fs::write(&file, "a scratch secret of well over thirty-two bytes\n").expect("write");
                }
            }
        }
        std::fs::create_dir_all(config.storage_dir()).expect("storage dir");
        let mut ctx =
            mesgd_providers::BuildContext::new(config.storage_dir()).with_base_dir(config.base_dir.clone());
        let chain = mesgd_providers::Registry::with_builtin_providers()
            .build_chain(&config.auth.providers, config.auth.allow_anonymous, &mut ctx)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let types: Vec<&str> =
            config.auth.providers.iter().map(|t| t["type"].as_str().expect("type")).collect();
        let names: Vec<&str> = chain.entries().iter().map(|e| e.provider.name()).collect();
        assert_eq!(names, types, "{name}: the chain is built in the configured order");
    }
    assert!(seen >= 5, "config/examples has {seen} example files");
}
