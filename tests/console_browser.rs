//! The web console end to end: the real server, the real console in headless Chromium
//! (`playwright-core` with Debian's `chromium`, `tests/console/console.mjs`), and real MQTT and
//! WebSocket clients for what the browser's actions must do to them.
//!
//! The script drives the browser and asks this test, one JSON line at a time, for what only a
//! client of the broker can do or see: create the first administrator, check an ACL verdict
//! with a real MQTT client, connect a client and time its kick, run a bounded load, publish a
//! retained message, open a WebSocket listener and see a message delivered. Screenshots of
//! every page go to `target/console-screenshots/`.
//!
//! Needs `node`, `chromium` (or `CHROMIUM=/path`) and `npm ci --prefix tests/console` (`.ci/run`
//! installs them); without them the test fails and says what is missing.

mod common;
#[path = "common/content.rs"]
mod content;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use common::auth::Storage;
use common::{TestServer, v5};
use futures_util::{SinkExt, StreamExt};
use mesgd_core::acl::Acl;
use mesgd_core::auth::Protocol;
use mesgd_core::broker::{Admission, Admitted, OnConflict};
use mesgd_core::model::{ClientInfo, SessionExpiry, SessionKey};
use rumqttc::v5::mqttbytes::v5::{PubAckReason, SubscribeReasonCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::Message as WsMessage;

const BODY: &str = "[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n\
    [mqtt]\nsys_interval = 0\n[auth]\nallow_anonymous = true\n[[auth.providers]]\ntype = \"builtin\"\n\
    [http]\nlogin_delay_ms = 1\nlogin_max_failures = 3\nlogin_lockout_s = 300\n\
    [content]\npublic_paths = [\"/kind=chat\", \"/kind=sender\"]\n";

/// The whole browser run, start to end.
const RUN_LIMIT: Duration = Duration::from_secs(240);
/// The longest the load generator runs, and the most it publishes, whatever the script asks.
const LOAD_LIMIT: Duration = Duration::from_secs(30);
const LOAD_MAX_MESSAGES: u32 = 60_000;
/// How soon a kicked client must see its connection end.
const KICK_LIMIT: Duration = Duration::from_secs(1);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The tools the run needs, or a panic that says how to get them.
fn tools() -> (PathBuf, PathBuf) {
    let find = |name: &str| -> Option<PathBuf> {
        std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
    };
    let node = find("node").unwrap_or_else(|| {
        panic!("the console browser test needs `node` on PATH (Debian: apt-get install nodejs); .ci/run installs it")
    });
    let chromium = std::env::var_os("CHROMIUM").map(PathBuf::from).or_else(|| find("chromium")).unwrap_or_else(|| {
        panic!("the console browser test needs Chromium: apt-get install -y chromium, or set CHROMIUM=/path/to/it")
    });
    common::npm::ensure(&root().join("tests/console"), "playwright-core");
    (node, chromium)
}

/// What the Rust side holds across the script's questions.
struct Side<'a> {
    storage: &'a Storage,
    mqtt_port: u16,
    http: std::net::SocketAddr,
    server: &'a TestServer,
    kicked: Option<v5::Client>,
    kick_started: Option<Instant>,
    load: Option<(Arc<AtomicBool>, tokio::task::JoinHandle<u32>)>,
    listener: Option<content::Client>,
    grant: Option<content::Client>,
    bulk: Vec<Admitted>,
    next_id: u32,
}

impl Side<'_> {
    fn client_id(&mut self, what: &str) -> String {
        self.next_id += 1;
        format!("console-test-{what}-{}", self.next_id)
    }

    async fn answer(&mut self, q: &Value) -> Result<Value, String> {
        let s = |k: &str| q[k].as_str().map(str::to_owned).ok_or_else(|| format!("no {k} in {q}"));
        match q["ask"].as_str().unwrap_or_default() {
            "create_admin" => {
                let stdin = format!("{}\n", s("password")?);
                self.storage.mesgd(&["admin", "add", &s("name")?, "--password-stdin"], &stdin).await;
                Ok(json!({}))
            }
            "user_exists" => {
                let db = mesgd_providers::builtin::config_db_path(self.storage.dir.path());
                let store = mesgd_providers::builtin::Store::open(&db).map_err(|e| e.to_string())?;
                let exists = store.user(&s("name")?).map_err(|e| e.to_string())?.is_some();
                Ok(json!({ "exists": exists }))
            }
            "mqtt_check" => {
                let id = self.client_id("acl");
                let mut o = v5::options(&id, self.mqtt_port);
                o.set_credentials(s("username")?, s("password")?);
                let (mut c, _) = v5::connect(o).await;
                let topic = s("topic")?;
                let allowed = match s("access")?.as_str() {
                    "read" => {
                        let ack = c.subscribe(&topic, v5::QoS::AtLeastOnce).await;
                        matches!(ack.return_codes[0], SubscribeReasonCode::Success(_))
                    }
                    "write" => {
                        c.client.publish(&topic, v5::QoS::AtLeastOnce, false, "x").await.expect("publish");
                        let reason =
                            c.next("PUBACK", |p| {
                                if let v5::Packet::PubAck(a) = p { Some(a.reason) } else { None }
                            })
                            .await;
                        match reason {
                            PubAckReason::Success | PubAckReason::NoMatchingSubscribers => true,
                            PubAckReason::NotAuthorized => false,
                            other => return Err(format!("unexpected PUBACK reason {other:?}")),
                        }
                    }
                    other => return Err(format!("access {other}")),
                };
                c.disconnect().await;
                Ok(json!({ "allowed": allowed }))
            }
            "bulk_clients" => {
                // Sessions admitted straight into the broker, as a front end admits its clients:
                // the list the console pages through, without 10,000 sockets.
                let count = q["count"].as_u64().ok_or("no count")?.min(10_000);
                let now = Instant::now();
                for i in 0..count {
                    let client = ClientInfo::new(
                        Protocol::Mqtt5,
                        Arc::from("mqtt"),
                        Arc::from("anonymous"),
                        SystemTime::now(),
                    );
                    let admission = Admission {
                        key: SessionKey::mqtt(format!("bulk-{i:05}")),
                        clean_start: true,
                        expiry: SessionExpiry::OnDisconnect,
                        acl: Acl::unrestricted(),
                        on_conflict: OnConflict::TakeOver,
                        client: Some(client),
                    };
                    let admitted =
                        self.server.broker().admit(admission, now).await.map_err(|e| e.to_string())?;
                    self.bulk.push(admitted);
                }
                Ok(json!({}))
            }
            "connect_client" => {
                let (mut c, _) = v5::connect(v5::options(&s("id")?, self.mqtt_port)).await;
                c.subscribe("kick/me/#", v5::QoS::AtMostOnce).await;
                self.kicked = Some(c);
                Ok(json!({}))
            }
            "kick_start" => {
                self.kick_started = Some(Instant::now());
                Ok(json!({}))
            }
            "await_disconnect" => {
                let started = self.kick_started.ok_or("kick_start first")?;
                let mut c = self.kicked.take().ok_or("connect_client first")?;
                // The first sign of the end: the DISCONNECT the broker sends, or the closed socket.
                let ended = tokio::time::timeout(KICK_LIMIT * 3, async {
                    loop {
                        match c.events.recv().await {
                            Some(Ok(v5::Packet::Disconnect(d))) => {
                                return format!("DISCONNECT {:?}", d.reason_code);
                            }
                            Some(Ok(_)) => continue,
                            Some(Err(e)) => return e,
                            None => return "ended".into(),
                        }
                    }
                })
                .await
                .map_err(|_| "the kicked client was still connected after 3 s".to_owned())?;
                let took = started.elapsed();
                println!("console test: the kicked client saw {ended} after {took:?}");
                if took > KICK_LIMIT {
                    return Err(format!("the kicked client saw the end after {took:?}, over {KICK_LIMIT:?}"));
                }
                c.kill();
                Ok(json!({ "ms": took.as_millis() as u64 }))
            }
            "load_start" => {
                let stop = Arc::new(AtomicBool::new(false));
                let (mut sub, _) =
                    v5::connect(v5::options(&self.client_id("load-sub"), self.mqtt_port)).await;
                sub.subscribe("load/#", v5::QoS::AtMostOnce).await;
                let (publisher, _) =
                    v5::connect(v5::options(&self.client_id("load-pub"), self.mqtt_port)).await;
                let flag = stop.clone();
                let task = tokio::spawn(async move {
                    let started = Instant::now();
                    let mut sent = 0u32;
                    let mut tick = tokio::time::interval(Duration::from_millis(2));
                    while !flag.load(Ordering::Relaxed)
                        && started.elapsed() < LOAD_LIMIT
                        && sent < LOAD_MAX_MESSAGES
                    {
                        tick.tick().await;
                        if publisher
                            .client
                            .publish("load/x", v5::QoS::AtMostOnce, false, "load")
                            .await
                            .is_err()
                        {
                            break;
                        }
                        sent += 1;
                        // Keep the subscriber's channel drained.
                        while sub.events.try_recv().is_ok() {}
                    }
                    publisher.disconnect().await;
                    sub.disconnect().await;
                    sent
                });
                self.load = Some((stop, task));
                Ok(json!({}))
            }
            "load_stop" => {
                let (stop, task) = self.load.take().ok_or("load_start first")?;
                stop.store(true, Ordering::Relaxed);
                let sent = task.await.map_err(|e| e.to_string())?;
                println!("console test: the load generator published {sent} messages");
                Ok(json!({ "sent": sent }))
            }
            "publish_retained" => {
                let (mut c, _) = v5::connect(v5::options(&self.client_id("retain"), self.mqtt_port)).await;
                c.client
                    .publish(s("topic")?, v5::QoS::AtLeastOnce, true, s("payload")?)
                    .await
                    .expect("publish");
                c.next("PUBACK", |p| matches!(p, v5::Packet::PubAck(_)).then_some(())).await;
                c.disconnect().await;
                Ok(json!({}))
            }
            "no_retained_for_new_subscriber" => {
                let topic = s("topic")?;
                let (mut sub, _) =
                    v5::connect(v5::options(&self.client_id("retain-sub"), self.mqtt_port)).await;
                sub.subscribe(&topic, v5::QoS::AtLeastOnce).await;
                // A fresh message after the SUBACK: the first publish the subscriber gets must be
                // it, so no retained message came before it.
                let (p, _) = v5::connect(v5::options(&self.client_id("retain-pub"), self.mqtt_port)).await;
                p.client.publish(&topic, v5::QoS::AtLeastOnce, false, "fresh").await.expect("publish");
                let first = sub.next_publish().await;
                p.disconnect().await;
                sub.disconnect().await;
                if first.retain || first.payload.as_ref() != b"fresh" {
                    return Err(format!("the new subscriber got {:?} first", first.payload));
                }
                Ok(json!({}))
            }
            "ws_listen" => {
                let path = s("path")?;
                let server = content_server(self.http);
                self.listener = Some(server.open(&path).await);
                Ok(json!({}))
            }
            "ws_deliver" => {
                let server = content_server(self.http);
                let mut sender = server.open("/kind=sender").await;
                let message = s("message")?;
                sender.ws.send(WsMessage::text(message.clone())).await.map_err(|e| e.to_string())?;
                let listener = self.listener.as_mut().ok_or("ws_listen first")?;
                let got = common::within("the message on the listener", listener.ws.next()).await;
                match got {
                    Some(Ok(WsMessage::Text(t))) if t.as_str() == message => Ok(json!({})),
                    other => Err(format!("the listener got {other:?}")),
                }
            }
            "grant_deliver" => {
                // A client holding the console's grant token: admitted on a covered path, and
                // its message reaches the listener.
                let server = content_server(self.http);
                let path = s("path")?;
                let token = s("token")?;
                let mut grant = server
                    .connect(&path, content::Carrier::Bearer(&token))
                    .await
                    .map_err(|r| format!("the grant token was refused at {path}: {r:?}"))?;
                let message = s("message")?;
                grant.ws.send(WsMessage::text(message.clone())).await.map_err(|e| e.to_string())?;
                self.grant = Some(grant);
                let listener = self.listener.as_mut().ok_or("ws_listen first")?;
                match common::within("the grant's message on the listener", listener.ws.next()).await {
                    Some(Ok(WsMessage::Text(t))) if t.as_str() == message => Ok(json!({})),
                    other => Err(format!("the listener got {other:?}")),
                }
            }
            "grant_stopped" => {
                // After the console removed the assignment: the grant's next message is not
                // delivered. A marker from a public sender, sent after it, is the listener's
                // next message, so nothing came before it.
                let grant = self.grant.as_mut().ok_or("grant_deliver first")?;
                grant.ws.send(WsMessage::text(s("message")?)).await.map_err(|e| e.to_string())?;
                let server = content_server(self.http);
                let mut sender = server.open("/kind=sender").await;
                let marker = s("marker")?;
                sender.ws.send(WsMessage::text(marker.clone())).await.map_err(|e| e.to_string())?;
                let listener = self.listener.as_mut().ok_or("ws_listen first")?;
                match common::within("the marker on the listener", listener.ws.next()).await {
                    Some(Ok(WsMessage::Text(t))) if t.as_str() == marker => Ok(json!({})),
                    other => Err(format!("the listener got {other:?} before the marker")),
                }
            }
            "offline_session" => {
                let mut o = v5::options(&s("id")?, self.mqtt_port);
                o.set_clean_start(false);
                o.set_session_expiry_interval(Some(3600));
                let (mut c, _) = v5::connect(o).await;
                c.subscribe("persistent/#", v5::QoS::AtLeastOnce).await;
                c.disconnect().await;
                Ok(json!({}))
            }
            "session_gone" => {
                let key = SessionKey {
                    namespace: mesgd_core::model::Namespace::Mqtt,
                    id: Arc::from(s("id")?.as_str()),
                };
                match self.server.broker().session(&key) {
                    None => Ok(json!({})),
                    Some(_) => Err("the session is still in the broker".into()),
                }
            }
            other => Err(format!("unknown question {other:?}")),
        }
    }
}

/// The content-routing client helpers, pointed at this server's `http` listener.
fn content_server(http: std::net::SocketAddr) -> content::ContentServer {
    content::ContentServer { server: None, addr: http, dir: tempfile::tempdir().expect("temp dir") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() {
    let (node, chromium) = tools();
    let storage = Storage::new();
    let mut server = TestServer::start_on(&storage, BODY).await;
    let http = server.server.as_ref().unwrap().local_addr("http").expect("http listener");
    let shots = root().join("target/console-screenshots");
    let mut child = tokio::process::Command::new(node)
        .arg(root().join("tests/console/console.mjs"))
        .env("MESGD_URL", format!("http://{http}"))
        .env("CHROMIUM", chromium)
        .env("SCREENSHOTS", &shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut side = Side {
        storage: &storage,
        mqtt_port: server.port(),
        http,
        server: &server,
        kicked: None,
        kick_started: None,
        load: None,
        listener: None,
        grant: None,
        bulk: Vec::new(),
        next_id: 0,
    };
    let run = async {
        let mut failure = None;
        while let Some(line) = lines.next_line().await.expect("read the script's output") {
            let Some(question) = line.strip_prefix("ASK ") else {
                println!("{line}");
                continue;
            };
            let question: Value = serde_json::from_str(question).expect("a JSON question");
            let answer = match side.answer(&question).await {
                Ok(a) => a,
                Err(e) => {
                    failure.get_or_insert_with(|| format!("{}: {e}", question["ask"]));
                    json!({ "error": e })
                }
            };
            stdin.write_all(format!("{answer}\n").as_bytes()).await.expect("answer the script");
        }
        (failure, child.wait().await.expect("node exits"))
    };
    let (failure, status) = tokio::time::timeout(RUN_LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("the browser run took longer than {RUN_LIMIT:?}"));
    if let Some((stop, task)) = side.load.take() {
        stop.store(true, Ordering::Relaxed);
        let _ = task.await;
    }
    assert_eq!(failure, None, "a check on the broker side failed");
    assert!(status.success(), "the browser script failed ({status}); screenshots in {}", shots.display());
    for page in ["01-no-admin", "03-dashboard", "07-clients", "10-routing", "15-grants", "14-locked"] {
        assert!(shots.join(format!("{page}.png")).is_file(), "no screenshot {page}");
    }
    server.stop().await;
}

/// The two routes the console added to the API, over plain HTTP: the statistics stream's
/// events and its bound, and the route tester's answers and refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_stream_and_the_route_tester() {
    let storage = Storage::new();
    let mut server = TestServer::start_on(&storage, BODY).await;
    let http = server.server.as_ref().unwrap().local_addr("http").expect("http listener");
    storage.mesgd(&["admin", "add", "root", "--password-stdin"], "pw-for-root-1\n").await;
    let token = storage.mesgd(&["admin", "token", "create", "t", "--scope", "admin"], "").await;
    let auth = format!("Bearer {}", token.trim());
    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://{http}/api/v1{p}");

    // Without credentials the stream is refused like every route.
    let r = common::within("an answer", client.get(url("/stats/stream")).send()).await.unwrap();
    assert_eq!(r.status(), 401);

    // A stream opened under a browser session ends when the session does (here: log out).
    let cookie_of = |r: &reqwest::Response, name: &str| -> String {
        r.headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| {
                v.strip_prefix(&format!("{name}=")).map(|rest| rest.split(';').next().unwrap().to_owned())
            })
            .unwrap_or_else(|| panic!("no {name} cookie"))
    };
    let challenge = common::within("an answer", client.get(url("/login")).send()).await.unwrap();
    let login_cookie = cookie_of(&challenge, "mesgd_login_csrf");
    let login_token = challenge.json::<Value>().await.unwrap()["csrf_token"].as_str().unwrap().to_owned();
    let logged_in = client
        .post(url("/login"))
        .header("cookie", format!("mesgd_login_csrf={login_cookie}"))
        .header("x-csrf-token", &login_token)
        .json(&json!({"username": "root", "password": "pw-for-root-1"}));
    let logged_in = common::within("a login", logged_in.send()).await.unwrap();
    assert_eq!(logged_in.status(), 200);
    let session = format!("mesgd_session={}", cookie_of(&logged_in, "mesgd_session"));
    let csrf = logged_in.json::<Value>().await.unwrap()["csrf_token"].as_str().unwrap().to_owned();
    let mut stream =
        common::within("a stream", client.get(url("/stats/stream")).header("cookie", &session).send())
            .await
            .unwrap();
    assert_eq!(stream.status(), 200);
    common::within("a sample", stream.chunk()).await.unwrap().expect("a first sample");
    let out = client.post(url("/logout")).header("cookie", &session).header("x-csrf-token", &csrf);
    assert_eq!(common::within("a logout", out.send()).await.unwrap().status(), 204);
    let ended = common::within("the stream's end", async {
        while let Some(_sample) = stream.chunk().await.expect("the stream ends cleanly") {}
    });
    ended.await;

    // The console's own routes: the same page at every address, its files, nothing else.
    for page in ["/console", "/console/", "/console/clients/mqtt/x", "/console/no/such/page"] {
        let r = common::within("a page", client.get(format!("http://{http}{page}")).send()).await.unwrap();
        assert_eq!(r.status(), 200, "{page}");
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8", "{page}");
        let csp = r.headers()["content-security-policy"].to_str().unwrap().to_owned();
        assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(r.text().await.unwrap().contains("/console/assets/app.js"), "{page}");
    }
    let r = common::within("a file", client.get(format!("http://{http}/console/assets/app.js")).send())
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/javascript; charset=utf-8");
    let r = common::within("a file", client.get(format!("http://{http}/console/assets/nope.js")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = common::within("a POST", client.post(format!("http://{http}/console")).send()).await.unwrap();
    assert_eq!(r.status(), 405, "the console only answers GET and HEAD");

    // A stream's first event is a sample, with the retry hint.
    let mut streams = Vec::new();
    let mut first =
        common::within("a stream", client.get(url("/stats/stream")).header("authorization", &auth).send())
            .await
            .unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = common::within("a sample", first.chunk()).await.unwrap().expect("the stream goes on");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(text.contains("event: sample\n"), "{text}");
    assert!(text.contains("retry: 1000\n"), "{text}");
    let data = text.lines().find_map(|l| l.strip_prefix("data: ")).expect("a data line");
    let sample: Value = serde_json::from_str(data).expect("JSON data");
    for key in [
        "t",
        "connections",
        "sessions",
        "subscriptions",
        "retained",
        "messages_in_per_s",
        "messages_out_per_s",
    ] {
        assert!(sample.get(key).is_some(), "{key} in {sample}");
    }
    streams.push(first);

    // Sixteen at once at most; the seventeenth is refused in the API's error shape.
    for _ in 1..16 {
        let r = common::within(
            "a stream",
            client.get(url("/stats/stream")).header("authorization", &auth).send(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    let r =
        common::within("a refusal", client.get(url("/stats/stream")).header("authorization", &auth).send())
            .await
            .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    drop(streams);

    // The route tester: a listener's path is reached, another message reaches nothing, and
    // text that is not a routable message is a 400 that says why.
    let content = content_server(http);
    let _listener = content.open("/kind=chat/room=lobby").await;
    let test = |message: &str| {
        client
            .post(url("/content/test"))
            .header("authorization", &auth)
            .json(&json!({ "message": message }))
            .send()
    };
    let r = common::within("an answer", test(r#"{"kind":"chat","room":"lobby","text":"hi"}"#)).await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["paths"], json!([{"path": "/kind=chat/room=lobby", "listeners": 1}]), "{body}");
    assert_eq!(body["listeners_registered"], 1);
    let body: Value = common::within("an answer", test(r#"{"kind":"chat","room":"attic"}"#))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["paths"], json!([]), "{body}");
    // With a user: which of their patterns cover each reached path (`/kind=chat` and
    // `/room=lobby` do, `/kind=news` does not); an unknown user is a 404.
    let db = mesgd_providers::builtin::config_db_path(storage.dir.path());
    let store = mesgd_providers::builtin::Store::open(&db).expect("store");
    store.add_user("gina", mesgd_providers::builtin::AuthType::Basic, Some(b"pw"), false).unwrap();
    for pattern in ["/kind=chat", "/kind=news", "/room=lobby"] {
        store.assign_pattern("gina", pattern).unwrap();
    }
    let with_user = |user: &str| {
        client
            .post(url("/content/test"))
            .header("authorization", &auth)
            .json(&json!({ "message": r#"{"kind":"chat","room":"lobby"}"#, "user": user }))
            .send()
    };
    let body: Value = common::within("an answer", with_user("gina")).await.unwrap().json().await.unwrap();
    assert_eq!(
        body["paths"],
        json!([{"path": "/kind=chat/room=lobby", "listeners": 1, "grant_patterns": ["/kind=chat", "/room=lobby"]}]),
        "{body}"
    );
    assert_eq!(common::within("an answer", with_user("nobody")).await.unwrap().status(), 404);
    for bad in ["", "{", "42", "[1,"] {
        let r = common::within("an answer", test(bad)).await.unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "bad_request");
        assert!(body["error"]["message"].as_str().unwrap().contains("not routable JSON"), "{body}");
    }
    server.stop().await;
}
