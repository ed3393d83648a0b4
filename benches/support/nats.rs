//! A real `nats-server -js` for the cluster benchmarks: Debian's, on a free loopback port with
//! its monitoring port, its JetStream store in a temporary directory, killed when dropped.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running nats-server.
pub(crate) struct Nats {
    pub(crate) child: Child,
    /// `nats://127.0.0.1:<port>`.
    pub(crate) url: String,
    /// The HTTP monitoring port (`/jsz`, `/connz`).
    pub(crate) monitor: u16,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts nats-server with JetStream and waits (at most 30 s) until it says it is ready.
pub(crate) async fn start() -> Nats {
    let dir = tempfile::tempdir().unwrap();
    let (port, monitor) = (free_port(), free_port());
    let mut child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-m", &monitor.to_string(), "-sd"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("this benchmark needs nats-server on PATH (Debian: apt-get install nats-server)");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("Server is ready") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(matches!(ready, Ok(true)), "nats-server did not start");
    // Keep reading its log so that the pipe never fills.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Nats { child, url: format!("nats://127.0.0.1:{port}"), monitor, _dir: dir }
}
