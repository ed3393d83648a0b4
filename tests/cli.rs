//! The real `mesgd` binary: start-up, config errors, signals, and the user / acl commands.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use daemon::Daemon;
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};

fn write_config(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("mesgd.toml");
    std::fs::write(&path, body).unwrap();
    path
}

const BASIC: &str = r#"
[storage]
dir = "data"
[[listeners]]
name = "mqtt"
kind = "mqtt"
bind = "127.0.0.1:0"
[auth]
allow_anonymous = true
"#;

/// A client id of 65,000 bytes is valid MQTT, but the log shows only its first 128 bytes and
/// how much was left out: one client cannot make every line about it 64 KiB long (nor stall a
/// broker whose log goes to a pipe), and the broker still exits at SIGTERM.
#[tokio::test]
async fn a_long_client_id_is_cut_short_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), BASIC);
    let mut daemon = Daemon::start(&config, &["mqtt"]).await;
    let id = "a".repeat(65_000);
    let mut first = common::Raw::connected(daemon.addr("mqtt"), ProtocolVersion::V5, &id).await;
    // A takeover logs at info, in the connection's span (which carries the client id).
    let _second = common::Raw::connected(daemon.addr("mqtt"), ProtocolVersion::V5, &id).await;
    first.until_closed().await;
    let line = daemon.log_line("taking the session over").await;
    assert!(line.len() < 1024, "{} bytes", line.len());
    assert!(line.contains(&format!("{}…(+{} bytes)", "a".repeat(128), 65_000 - 128)), "{line}");
    daemon.signal("TERM").await;
    assert!(daemon.wait().await.success());
}

#[tokio::test]
async fn sigterm_tells_v5_clients_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), BASIC);
    let mut daemon = Daemon::start(&config, &["mqtt"]).await;
    let mut client = common::Raw::connected(daemon.addr("mqtt"), ProtocolVersion::V5, "c").await;
    daemon.signal("TERM").await;
    let seen = client.until_closed().await;
    assert!(
        matches!(seen.as_slice(), [Packet::Disconnect(d)] if d.reason_code == ReasonCode::ServerShuttingDown),
        "{seen:?}"
    );
    let status = daemon.wait().await;
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn a_config_error_names_the_key_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &format!("{BASIC}[limits]\nmax_inflite = 5\n"));
    let (status, _, stderr) = daemon::run(&["--config", config.to_str().unwrap(), "serve"], "").await;
    assert!(!status.success());
    assert!(stderr.contains("max_inflite"), "{stderr}");
    let (status, _, stderr) = daemon::run(&["--config", "/nonexistent/mesgd.toml", "serve"], "").await;
    assert!(!status.success());
    assert!(stderr.contains("/nonexistent/mesgd.toml"), "{stderr}");
}

#[tokio::test]
async fn user_and_acl_commands_manage_the_store_the_broker_reads() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &BASIC.replace(
            "allow_anonymous = true",
            "allow_anonymous = false\n[[auth.providers]]\ntype = \"builtin\"\npbkdf2_iterations = 1000\npoll_interval_ms = 50",
        ),
    );
    let cfg = config.to_str().unwrap();
    let (status, _, stderr) =
        daemon::run(&["--config", cfg, "user", "add", "alice", "--password-stdin"], "s3cret\n").await;
    assert!(status.success(), "{stderr}");
    let (status, _, stderr) =
        daemon::run(&["--config", cfg, "acl", "add", "alice", "sensors/#", "read"], "").await;
    assert!(status.success(), "{stderr}");
    let (status, out, _) = daemon::run(&["--config", cfg, "user", "list"], "").await;
    assert!(status.success());
    assert!(out.contains("alice"), "{out}");
    assert!(!out.contains("s3cret"));

    let daemon = Daemon::start(&config, &["mqtt"]).await;
    let port = daemon.addr("mqtt").port();
    let mut o = common::v3::options("alice-1", port);
    o.set_credentials("alice", "s3cret");
    let (mut alice, _) = common::v3::connect(o).await;
    let ok = alice.subscribe("sensors/#", common::v3::QoS::AtLeastOnce).await;
    assert_eq!(ok.return_codes, [rumqttc::SubscribeReasonCode::Success(common::v3::QoS::AtLeastOnce)]);
    let no = alice.subscribe("admin/#", common::v3::QoS::AtLeastOnce).await;
    assert_eq!(no.return_codes, [rumqttc::SubscribeReasonCode::Failure]);
    let mut o = common::v3::options("alice-2", port);
    o.set_credentials("alice", "wrong");
    let err = common::v3::connect_err(o).await;
    assert!(err.contains("BadUserNamePassword"), "{err}");
}

#[path = "common/pki.rs"]
#[allow(unreachable_pub, dead_code)]
mod pki;

#[tokio::test]
async fn sighup_reloads_tls_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let old_ca = pki::Ca::new("old CA");
    old_ca.server(dir.path(), "server");
    let config = write_config(
        dir.path(),
        r#"
[storage]
dir = "data"
[[listeners]]
name = "tls"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = { cert = "server.pem", key = "server.key" }
[auth]
allow_anonymous = true
"#,
    );
    let mut daemon = Daemon::start(&config, &["tls"]).await;
    let port = daemon.addr("tls").port();
    let options = |ca: &pki::Ca| {
        let mut o = common::v3::options("c", port);
        o.set_transport(rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Simple {
            ca: ca.pem().into_bytes(),
            alpn: None,
            client_auth: None,
        }));
        o
    };
    common::v3::connect(options(&old_ca)).await;
    let new_ca = pki::Ca::new("new CA");
    new_ca.server(dir.path(), "server");
    daemon.signal("HUP").await;
    daemon.log_line("TLS certificates reloaded").await;
    common::v3::connect(options(&new_ca)).await;
    common::v3::connect_err(options(&old_ca)).await;
}

/// A provisioning script: `mesgd user add` while the broker runs, then connect straight away.
/// The poll interval is a minute, so only the read on a miss can let these logins in.
#[tokio::test]
async fn a_user_added_while_the_broker_runs_can_log_in_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("fleet CA");
    ca.server(dir.path(), "server");
    ca.write(dir.path(), "ca.pem");
    let config = write_config(
        dir.path(),
        r#"
[storage]
dir = "data"
[[listeners]]
name = "mqtt"
kind = "mqtt"
bind = "127.0.0.1:0"
[[listeners]]
name = "mtls"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = { cert = "server.pem", key = "server.key", client_ca = "ca.pem", require_client_cert = true }
[auth]
allow_anonymous = false
[[auth.providers]]
type = "x509"
[[auth.providers]]
type = "builtin"
pbkdf2_iterations = 1000
poll_interval_ms = 60000
"#,
    );
    let cfg = config.to_str().unwrap();
    let daemon = Daemon::start(&config, &["mqtt", "mtls"]).await;

    let (status, _, stderr) =
        daemon::run(&["--config", cfg, "user", "add", "sensor-7", "--password-stdin"], "pw-7\n").await;
    assert!(status.success(), "{stderr}");
    let mut o = common::v3::options("sensor-7", daemon.addr("mqtt").port());
    o.set_credentials("sensor-7", "pw-7");
    common::v3::connect(o).await;

    let (status, _, stderr) =
        daemon::run(&["--config", cfg, "user", "add", "device-9", "--auth-type", "x509"], "").await;
    assert!(status.success(), "{stderr}");
    let device = ca.client(dir.path(), "device-9");
    let mut o = common::v3::options("device-9", daemon.addr("mtls").port());
    o.set_transport(rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Simple {
        ca: ca.pem().into_bytes(),
        alpn: None,
        client_auth: Some((device.cert_bytes(), device.key_bytes())),
    }));
    common::v3::connect(o).await;

    // A name nobody added is still refused.
    let mut o = common::v3::options("nobody", daemon.addr("mqtt").port());
    o.set_credentials("nobody", "pw");
    let err = common::v3::connect_err(o).await;
    assert!(err.contains("BadUserNamePassword"), "{err}");
}
