//! The independent hostile-input suite (`tests/hostile/`, Python: raw sockets, ssl, a minimal
//! WebSocket client and paho-mqtt as the healthy client) against the real `mesgd` binary with
//! every front end a client can reach: MQTT over TCP and TLS, the HTTP listener (MQTT over
//! WebSocket, content routing, the REST API), and the relay over TCP and WebSocket.
//!
//! The suite prints one line per case; after every case a fresh paho-mqtt client must connect,
//! subscribe at QoS 1, publish at QoS 1 and receive its message. This test asserts that every
//! case listed by the suite ran and passed (or is a known finding, `XFAIL`, listed with its
//! reason in `tests/hostile/hostile/expectations.py`), that the daemon is still running and
//! that its log holds no panic.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;
#[path = "common/pki.rs"]
#[allow(unreachable_pub, dead_code)]
mod pki;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use daemon::Daemon;

/// The version of paho-mqtt the suite is written against (also in `.ci/run`).
const PAHO: &str = "paho-mqtt==2.2.0";

/// The limits the suite is told about, so that it can check the broker keeps them.
const CONNECT_TIMEOUT_MS: u64 = 1500;
const MAX_CONNECTIONS_PER_IP: u32 = 32;
const MAX_SUBSCRIPTIONS: u32 = 50;

const SUITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile");

/// The interpreter with paho-mqtt: `MESGD_TEST_PYTHON` (which must have it), else
/// `target/ci-venv` (which `.ci/run` fills), made and filled here with the pinned version when
/// it lacks paho-mqtt, so that `cargo test` works on a fresh machine too. Never skips: a missing
/// interpreter or package fails the test, saying what to install.
fn python() -> String {
    let has_paho = |python: &str| {
        Command::new(python)
            .args(["-c", "import paho.mqtt, sys; sys.exit(paho.mqtt.__version__ != '2.2.0')"])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if let Ok(python) = std::env::var("MESGD_TEST_PYTHON") {
        assert!(
            has_paho(&python),
            "MESGD_TEST_PYTHON={python} has no {PAHO}: run `{python} -m pip install {PAHO}` (.ci/run does)"
        );
        return python;
    }
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/target/ci-venv");
    let python = format!("{venv}/bin/python");
    if !has_paho(&python) {
        let made = Command::new("python3").args(["-m", "venv", venv]).status();
        assert!(
            made.is_ok_and(|s| s.success()),
            "python3 -m venv {venv} failed: the suite needs Python 3.11"
        );
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", PAHO])
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "pip install {PAHO} into {venv} failed: the hostile suite needs it (PyPI or a pip cache)"
        );
        assert!(has_paho(&python), "{venv} still has no {PAHO}");
    }
    python
}

fn config(dir: &Path) -> std::path::PathBuf {
    let d = dir.display();
    let text = format!(
        r#"[storage]
dir = "{d}/data"
durability = "none"
[auth]
allow_anonymous = true
[mqtt]
sys_interval = 0
[limits]
connect_timeout_ms = {CONNECT_TIMEOUT_MS}
max_connections_per_ip = {MAX_CONNECTIONS_PER_IP}
max_subscriptions_per_client = {MAX_SUBSCRIPTIONS}
max_packet_size = 65536
max_queued_bytes = 1048576
[content]
public_paths = ["/hostile"]
[relay]
rate_messages_per_s = 50
rate_message_burst = 100
[[listeners]]
name = "mqtt"
kind = "mqtt"
bind = "127.0.0.1:0"
[[listeners]]
name = "mqtts"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = {{ cert = "{d}/server.pem", key = "{d}/server.key" }}
[[listeners]]
name = "http"
kind = "http"
bind = "127.0.0.1:0"
[[listeners]]
name = "relay-tcp"
kind = "relay-tcp"
bind = "127.0.0.1:0"
[[listeners]]
name = "relay-ws"
kind = "relay-ws"
bind = "127.0.0.1:0"
"#
    );
    let path = dir.join("mesgd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_survives_the_hostile_suite() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("mesgd hostile suite CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    ca.server(dir.path(), "server");
    let cfg = config(dir.path());
    let mut d = Daemon::start(&cfg, &["mqtt", "mqtts", "http", "relay-tcp", "relay-ws"]).await;

    let listed =
        Command::new(&python).arg("run.py").args(["--mqtt", "1", "--list"]).current_dir(SUITE).output();
    let listed = listed.expect("the suite lists its cases");
    assert!(listed.status.success(), "run.py --list: {}", String::from_utf8_lossy(&listed.stderr));
    let cases: Vec<String> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(' '))
        .map(str::to_owned)
        .collect();
    assert!(cases.len() > 80, "the suite lists only {} cases", cases.len());
    let table =
        Command::new(&python).arg("run.py").args(["--mqtt", "1", "--markdown"]).current_dir(SUITE).output();
    let table = String::from_utf8(table.expect("the suite prints its case table").stdout).unwrap();
    let readme = std::fs::read_to_string(format!("{SUITE}/README.md")).unwrap();
    assert!(
        readme.contains(&format!("<!-- cases -->\n{table}<!-- /cases -->")),
        "tests/hostile/README.md's case tables differ from the cases: regenerate them with `run.py --markdown`"
    );

    let port = |name: &str| d.addr(name).port().to_string();
    let mut suite = tokio::process::Command::new(&python);
    suite
        .arg("run.py")
        .args(["--mqtt", &port("mqtt"), "--mqtts", &port("mqtts")])
        .args(["--ws", &port("http"), "--http", &port("http")])
        .args(["--relay-tcp", &port("relay-tcp"), "--relay-ws", &port("relay-ws")])
        .arg("--ca")
        .arg(&ca_file)
        .args(["--pid", &d.pid()])
        .args(["--connect-timeout", &(CONNECT_TIMEOUT_MS as f64 / 1000.0).to_string()])
        .args(["--max-connections-per-ip", &MAX_CONNECTIONS_PER_IP.to_string()])
        .args(["--max-subscriptions", &MAX_SUBSCRIPTIONS.to_string(), "--no-skips"])
        .current_dir(SUITE)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(170), suite.output())
        .await
        .expect("the suite finishes within 170 s")
        .expect("the suite runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(out.status.success(), "the hostile suite failed:\n{stdout}\n{stderr}");
    for case in &cases {
        let ran = stdout.lines().any(|l| {
            (l.starts_with("PASS ") || l.starts_with("XFAIL ")) && l.contains(&format!(" {case} ("))
        });
        assert!(ran, "case {case} did not pass:\n{stdout}");
    }
    assert!(stdout.lines().any(|l| l.starts_with("PASS  final.transports")), "{stdout}");

    assert!(d.child.try_wait().unwrap().is_none(), "mesgd exited during the suite");
    // A clean shutdown after all that, and every log line read (the channel ends with stderr).
    d.signal("TERM").await;
    assert!(d.wait().await.success(), "mesgd did not shut down cleanly after the suite");
    let mut panicked = Vec::new();
    while let Some(line) = common::within("the rest of the log", d.log.recv()).await {
        if line.contains("panicked") {
            panicked.push(line);
        }
    }
    assert!(panicked.is_empty(), "mesgd panicked:\n{}", panicked.join("\n"));
}
