//! Three real `nats-server -js` processes clustered on loopback ports (JetStream with a meta
//! leader, so streams can have three replicas), each with its own store directory, killed
//! when dropped. A missing nats-server fails the test with instructions.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::within;

/// A running three-server NATS cluster.
pub struct NatsCluster {
    children: Vec<Child>,
    /// The client URLs, `nats://127.0.0.1:<port>`, one per server.
    pub urls: Vec<String>,
    _dirs: Vec<tempfile::TempDir>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl NatsCluster {
    /// Starts three servers routed to each other and waits until JetStream has elected its
    /// meta leader.
    pub async fn start() -> NatsCluster {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let routes = ports.iter().map(|(_, c)| format!("nats://127.0.0.1:{c}")).collect::<Vec<_>>().join(",");
        let (tx, mut leader) = mpsc::unbounded_channel::<String>();
        let mut children = Vec::new();
        let mut dirs = Vec::new();
        for (i, (port, cport)) in ports.iter().enumerate() {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut child = Command::new("nats-server")
                .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-n", &format!("n{i}")])
                .args(["--cluster_name", "mesgd-test", "--cluster", &format!("nats://127.0.0.1:{cport}")])
                .args(["--routes", &routes, "-sd"])
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot run nats-server ({e}): the cluster tests need a real NATS server; \
                         install it with `apt-get install nats-server` (Debian) or put it on PATH"
                    )
                });
            let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains("new metadata leader") {
                        let _ = tx.send(line);
                    }
                }
            });
            children.push(child);
            dirs.push(dir);
        }
        within("the NATS cluster's JetStream meta leader", leader.recv()).await.expect("a server's log");
        let urls = ports.iter().map(|(p, _)| format!("nats://127.0.0.1:{p}")).collect();
        NatsCluster { children, urls, _dirs: dirs }
    }

    /// Kills server `i` with SIGKILL, now.
    pub async fn kill(&mut self, i: usize) {
        let _ = self.children[i].kill().await;
    }

    /// The `nats = [...]` value listing every server.
    pub fn nats_list(&self) -> String {
        self.urls.iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", ")
    }
}
