//! A real `nats-server -js` for the cluster tests, on a free loopback port with its own
//! JetStream store in a temporary directory, killed when dropped. A missing nats-server fails
//! the test with instructions: the cluster tests never skip.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{TestServer, within};

/// A running nats-server.
pub struct NatsServer {
    child: Child,
    /// `nats://127.0.0.1:<port>`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts nats-server with JetStream and waits until it says it is ready.
    pub async fn start() -> NatsServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
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
        let mut log = Vec::new();
        let ready = tokio::time::timeout(super::WAIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                let done = line.contains("Server is ready");
                log.push(line);
                if done {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(matches!(ready, Ok(true)), "nats-server did not start:\n{}", log.join("\n"));
        // Keep reading its log so that the pipe never fills.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        NatsServer { child, url: format!("nats://127.0.0.1:{port}"), _dir: dir }
    }

    /// Kills the server now.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Starts a mesgd node named `node` in the cluster of `nats`, with `extra` config.
pub async fn node(nats: &NatsServer, node: &str, extra: &str) -> TestServer {
    TestServer::start(&format!("{extra}\n[cluster]\nnode = {node:?}\nnats = [{:?}]\n", nats.url)).await
}

/// The node's cluster membership.
pub fn cluster(server: &TestServer) -> &mesgd_cluster::Cluster {
    server.server.as_ref().expect("running").cluster().expect("the node is in a cluster")
}

/// Waits until every subscription made on `server` so far receives other nodes' messages.
pub async fn synced(server: &TestServer) {
    within("NATS interest in place", cluster(server).interest_synced()).await;
}

/// Waits until `server`'s retained store satisfies `done`, woken by each retained change it
/// applies from the stream.
pub async fn retained_until(server: &TestServer, what: &str, done: impl Fn(&TestServer) -> bool) {
    let mut applied = cluster(server).retained_applied();
    within(what, async {
        while !done(server) {
            applied.changed().await.expect("cluster running");
        }
    })
    .await;
}

/// Starts node `node` again on the storage directory of `stopped` (stopped with
/// [`TestServer::stop`]), so that its persistent sessions are restored from storage.
pub async fn restart(nats: &NatsServer, node: &str, stopped: TestServer) -> TestServer {
    assert!(stopped.server.is_none(), "stop the node first");
    let text = format!(
        "[storage]\ndir = {:?}\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
         [auth]\nallow_anonymous = true\n[mqtt]\nsys_interval = 0\n[cluster]\nnode = {node:?}\nnats = [{:?}]\n",
        stopped.dir.path().display().to_string(),
        nats.url
    );
    let config = mesgd::config::Config::from_toml(&text, None).expect("test config");
    let server = mesgd::Server::start(config).await.expect("server restarts");
    let addr = server.local_addr("mqtt").expect("listener");
    TestServer { server: Some(server), addr, dir: stopped.dir }
}
