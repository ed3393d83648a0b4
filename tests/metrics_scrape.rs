//! `/metrics` parsed by the reference Prometheus text parser (Python `prometheus_client`,
//! installed into `target/ci-venv` by `.ci/run`, or by this test when it is missing;
//! `MESGD_TEST_PYTHON` names another interpreter), and its counters moving as a real MQTT client
//! publishes.

mod common;

use std::collections::HashMap;

use common::{TestServer, v3};
use reqwest::StatusCode;

const BODY: &str = "[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n\
    [http]\nmetrics_token = \"scrape-secret\"\n";

/// The interpreter with `prometheus_client`: `MESGD_TEST_PYTHON`, else `target/ci-venv` (which
/// `.ci/run` fills), made and filled here with the pinned version when it is missing, so that
/// `cargo test --workspace` passes on a fresh machine too.
fn python() -> String {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            if let Ok(python) = std::env::var("MESGD_TEST_PYTHON") {
                return python;
            }
            let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/target/ci-venv");
            let python = format!("{venv}/bin/python");
            let has_parser = |python: &str| {
                std::process::Command::new(python)
                    .args(["-c", "import prometheus_client"])
                    .output()
                    .is_ok_and(|out| out.status.success())
            };
            if !has_parser(&python) {
                let made = std::process::Command::new("python3").args(["-m", "venv", venv]).status();
                assert!(made.is_ok_and(|s| s.success()), "python3 -m venv {venv} failed");
                let installed = std::process::Command::new(&python)
                    .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                    .arg("prometheus-client==0.26.0")
                    .status();
                assert!(installed.is_ok_and(|s| s.success()), "pip install prometheus-client failed");
            }
            python
        })
        .clone()
}

/// Every sample, keyed by name and sorted labels.
type Samples = HashMap<String, f64>;

fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

async fn scrape(client: &reqwest::Client, url: &str) -> Samples {
    let resp = client.get(url).bearer_auth("scrape-secret").send().await.expect("scrape");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = resp.text().await.unwrap();
    let mut child = tokio::process::Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/parse_metrics.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(text.as_bytes()).await.unwrap();
    }
    let out = common::within("the parser", child.wait_with_output()).await.unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the page (is prometheus-client installed? .ci/run installs it): {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut samples = Samples::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let labels: Vec<(String, String)> = v["labels"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        samples.insert(key(v["name"].as_str().unwrap(), &labels), v["value"].as_f64().unwrap());
    }
    samples
}

fn get(s: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    *s.get(&key(name, labels)).unwrap_or_else(|| panic!("no sample {}", key(name, labels)))
}

#[tokio::test]
async fn metrics_parse_and_move_with_traffic() {
    let server = TestServer::start(BODY).await;
    let addr = server.server.as_ref().unwrap().local_addr("http").unwrap();
    let url = format!("http://{addr}/metrics");
    let client = reqwest::Client::new();
    let refused = client.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "the token is required");
    let wrong = client.get(&url).bearer_auth("guess").send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let before = scrape(&client, &url).await;
    let (mut sub, _) = v3::connect(v3::options("sub", server.port())).await;
    sub.subscribe("t/#", v3::QoS::AtMostOnce).await;
    let (publisher, _) = v3::connect(v3::options("pub", server.port())).await;
    for i in 0..3 {
        publisher.client.publish(format!("t/{i}"), v3::QoS::AtMostOnce, i == 0, "hello").await.unwrap();
    }
    for _ in 0..3 {
        sub.next_publish().await;
    }
    let after = scrape(&client, &url).await;

    let mqtt = [("protocol", "mqtt-3.1.1")];
    let delta = |name: &str, labels: &[(&str, &str)]| get(&after, name, labels) - get(&before, name, labels);
    assert_eq!(delta("mesgd_messages_received_total", &mqtt), 3.0);
    assert_eq!(delta("mesgd_messages_sent_total", &mqtt), 3.0);
    assert!(delta("mesgd_bytes_received_total", &mqtt) > 0.0 && delta("mesgd_bytes_sent_total", &mqtt) > 0.0);
    assert_eq!(get(&after, "mesgd_connections", &[("protocol", "mqtt-3.1.1"), ("listener", "mqtt")]), 2.0);
    assert_eq!(get(&after, "mesgd_retained_messages", &[]), 1.0);
    assert_eq!(get(&after, "mesgd_subscriptions", &[]), 1.0);
    assert_eq!(delta("mesgd_auth_fallback_total", &[("result", "anonymous")]), 2.0);
    assert_eq!(delta("mesgd_auth_duration_seconds_count", &[]), 2.0);
    assert_eq!(
        get(&after, "mesgd_auth_duration_seconds_bucket", &[("le", "+Inf")]),
        get(&after, "mesgd_auth_duration_seconds_count", &[])
    );
    for point in ["publish", "subscribe", "delivery"] {
        assert_eq!(get(&after, "mesgd_acl_denials_total", &[("point", point)]), 0.0);
    }
    for reason in ["queue_full", "expired", "too_large"] {
        assert_eq!(get(&after, "mesgd_deliveries_dropped_total", &[("reason", reason)]), 0.0);
    }
    assert!(get(&after, "mesgd_store_bytes", &[("file", "state.db")]) > 0.0);
    assert!(after.contains_key(&key("mesgd_journal_commit_duration_seconds_count", &[])));
    assert!(after.contains_key(&key("mesgd_journal_unwritten_changes", &[])));
}

#[tokio::test]
async fn content_and_relay_traffic_shows_in_their_metrics() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;

    let body = format!(
        "{BODY}[content]\ndisable_auth = true\n\
         [[listeners]]\nname = \"relay-tcp\"\nkind = \"relay-tcp\"\nbind = \"127.0.0.1:0\"\n"
    );
    let server = TestServer::start(&body).await;
    let running = server.server.as_ref().unwrap();
    let http = running.local_addr("http").unwrap();
    let url = format!("http://{http}/metrics");
    let client = reqwest::Client::new();
    let before = scrape(&client, &url).await;

    // Content: a listener on /kind=chat and a sender; one message routed to the listener.
    let open = |path: &'static str| async move {
        let stream = tokio::net::TcpStream::connect(http).await.unwrap();
        tokio_tungstenite::client_async(format!("ws://{http}{path}"), stream).await.unwrap().0
    };
    let mut listener = open("/kind=chat").await;
    let mut sender = open("/kind=other").await;
    let text = r#"{"kind":"chat","text":"hi"}"#;
    sender.send(Message::text(text)).await.unwrap();
    let got = common::within("the routed message", listener.next()).await.unwrap().unwrap();
    assert_eq!(got.into_text().unwrap().as_str(), text);

    // Relay: two registered addresses, one send delivered live.
    let relay_addr = running.local_addr("relay-tcp").unwrap();
    let kind = common::relay::Kind::Tcp;
    let mut alice = common::relay::Client::connect_to(relay_addr, kind, "/").await;
    let mut bob = common::relay::Client::connect_to(relay_addr, kind, "/").await;
    alice.register("metrics-alice").await;
    bob.register("metrics-bob").await;
    alice.send(serde_json::json!({"t": "send", "to": "metrics-bob", "ct": "hello"})).await;
    bob.expect("deliver").await;

    let after = scrape(&client, &url).await;
    let delta = |name: &str| get(&after, name, &[]) - get(&before, name, &[]);
    assert_eq!(get(&after, "mesgd_content_connections", &[]), 2.0);
    assert_eq!(delta("mesgd_content_upgrades_total"), 2.0);
    assert_eq!(delta("mesgd_content_messages_received_total"), 1.0);
    assert_eq!(delta("mesgd_content_messages_sent_total"), 1.0);
    assert_eq!(get(&after, "mesgd_relay_connections", &[]), 2.0);
    assert_eq!(get(&after, "mesgd_relay_addresses", &[]), 2.0);
    assert_eq!(delta("mesgd_relay_registrations_total"), 2.0);
    assert_eq!(delta("mesgd_relay_sends_live_total"), 1.0);
    assert_eq!(
        get(&after, "mesgd_connections", &[("protocol", "relay"), ("listener", "relay-tcp")]),
        2.0,
        "relay clients are connections of the broker like any other"
    );
}
