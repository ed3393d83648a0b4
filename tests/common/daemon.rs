//! The real `mesgd` binary as a child process: start it with a config file, learn its listener
//! addresses from its log, send it signals, wait for it to exit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::common::within;

/// Writes `<dir>/<node>.toml` for a clustered node `node` on the NATS server `nats` with one
/// MQTT listener (`mqtt`), anonymous clients, storage in `dir`, and `tables` (whole TOML
/// tables; `cluster_keys` go into `[cluster]`). Returns the file.
pub fn cluster_node_config(dir: &Path, node: &str, nats: &str, tables: &str, cluster_keys: &str) -> PathBuf {
    let config = dir.join(format!("{node}.toml"));
    std::fs::write(
        &config,
        format!(
            "[storage]\ndir = {:?}\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
             [auth]\nallow_anonymous = true\n{tables}\n[cluster]\nnode = {node:?}\nnats = [{nats:?}]\n{cluster_keys}\n",
            dir.display().to_string(),
        ),
    )
    .expect("write the config");
    config
}

/// An in-process relay node `a` and the real binary as relay node `d` (its config and storage
/// in `dir`), both with the relay listeners and leases of `lease_ms`, in the cluster of `nats`:
/// for tests that kill `d`.
pub async fn relay_node_and_process(
    nats: &crate::common::nats::NatsServer,
    dir: &Path,
    lease_ms: u64,
) -> (crate::common::TestServer, Daemon) {
    use crate::common::relay::LISTENERS;
    let a = crate::common::TestServer::start(&format!(
        "{LISTENERS}[cluster]\nnode = \"a\"\nnats = [{:?}]\nlease_ms = {lease_ms}\n",
        nats.url
    ))
    .await;
    let config = cluster_node_config(dir, "d", &nats.url, LISTENERS, &format!("lease_ms = {lease_ms}"));
    let d = Daemon::start(&config, &["mqtt", "relay-tcp", "relay-ws", "relay-udp"]).await;
    (a, d)
}

/// A running `mesgd serve`.
pub struct Daemon {
    pub child: Child,
    pub addrs: HashMap<String, SocketAddr>,
    /// Log lines after start-up, as they come.
    pub log: mpsc::UnboundedReceiver<String>,
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mesgd"))
}

/// Runs `mesgd ARGS` to completion with `stdin` as input; returns (status, stdout, stderr).
pub async fn run(args: &[&str], stdin: &str) -> (ExitStatus, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new(binary())
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mesgd");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = within("mesgd to finish", child.wait_with_output()).await.unwrap();
    (out.status, String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

impl Daemon {
    /// Starts `mesgd --config CONFIG serve` and waits until every listener in `names` is bound.
    pub async fn start(config: &Path, names: &[&str]) -> Daemon {
        let mut child = Command::new(binary())
            .arg("--config")
            .arg(config)
            .arg("serve")
            .env("RUST_LOG", std::env::var("MESGD_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mesgd");
        let stderr = child.stderr.take().unwrap();
        let (tx, mut log) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let echo = std::env::var_os("MESGD_TEST_LOG").is_some();
            while let Ok(Some(line)) = lines.next_line().await {
                if echo {
                    eprintln!("mesgd: {line}");
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut addrs = HashMap::new();
        within("listeners to bind", async {
            while addrs.len() < names.len() {
                let line = log.recv().await.expect("mesgd exited during start-up");
                // e.g. `INFO listening listener=mqtt addr=127.0.0.1:4711 kind="mqtt" tls=false`
                if !line.contains("listening") {
                    continue;
                }
                let field = |key: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(key))
                        .map(|v| v.trim_matches('"').to_string())
                };
                if let (Some(name), Some(addr)) = (field("listener="), field("addr=")) {
                    addrs.insert(name, addr.parse().expect("listener address"));
                }
            }
        })
        .await;
        Daemon { child, addrs, log }
    }

    pub fn addr(&self, name: &str) -> SocketAddr {
        self.addrs[name]
    }

    pub fn pid(&self) -> String {
        self.child.id().expect("running").to_string()
    }

    /// Sends a signal by name (`TERM`, `KILL`, `HUP`, `INT`).
    pub async fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid()).status().await.unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> ExitStatus {
        within("mesgd to exit", self.child.wait()).await.unwrap()
    }

    /// Waits for a log line containing `needle`.
    pub async fn log_line(&mut self, needle: &str) -> String {
        let log = &mut self.log;
        within(needle, async {
            loop {
                let line = log.recv().await.expect("log ended");
                if line.contains(needle) {
                    return line;
                }
            }
        })
        .await
    }
}
