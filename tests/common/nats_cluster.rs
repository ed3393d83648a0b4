//! Three real `nats-server -js` processes clustered on loopback ports (JetStream with a meta
//! leader, so streams can have three replicas), each with its own store directory, killed
//! when dropped. A missing nats-server fails the test with instructions.
//!
//! [`NatsCluster::start_partitionable`] routes every server-to-server connection through a TCP
//! relay in the test, so that a server can be cut off from the other two (a network partition
//! on loopback, without firewall rules) and joined again.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::within;

/// A running three-server NATS cluster.
pub struct NatsCluster {
    children: Vec<Child>,
    /// The client URLs, `nats://127.0.0.1:<port>`, one per server.
    pub urls: Vec<String>,
    _dirs: Vec<tempfile::TempDir>,
    /// Per server, whether its routes are cut (only with relayed routes).
    cuts: Vec<watch::Sender<bool>>,
}

/// Relays connections from `listener` to `target` while `cut` is false: cutting closes every
/// relayed connection at once, and a connection that arrives while cut is closed unanswered.
async fn relay_route(
    listener: TcpListener,
    target: u16,
    from: watch::Receiver<bool>,
    to: watch::Receiver<bool>,
) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else { return };
        let (mut from, mut to) = (from.clone(), to.clone());
        tokio::spawn(async move {
            if *from.borrow() || *to.borrow() {
                return;
            }
            let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await else { return };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                _ = from.wait_for(|cut| *cut) => {}
                _ = to.wait_for(|cut| *cut) => {}
            }
        });
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl NatsCluster {
    /// Starts three servers routed to each other and waits until JetStream has elected its
    /// meta leader.
    pub async fn start() -> NatsCluster {
        NatsCluster::start_with(false, false).await
    }

    /// Like [`NatsCluster::start`], with every route between two servers relayed through the
    /// test, so that [`NatsCluster::isolate`] can cut a server off.
    pub async fn start_partitionable() -> NatsCluster {
        NatsCluster::start_with(true, false).await
    }

    /// Like [`NatsCluster::start_partitionable`] with every server cut off from the others
    /// from the start: JetStream has no quorum, hence no meta leader, until
    /// [`NatsCluster::heal`] (returns once the servers run, without waiting for a leader).
    pub async fn start_cut() -> NatsCluster {
        NatsCluster::start_with(true, true).await
    }

    async fn start_with(relayed: bool, cut: bool) -> NatsCluster {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let cuts: Vec<watch::Sender<bool>> = (0..3).map(|_| watch::channel(cut).0).collect();
        // Server i's routes: straight to every cluster port, or through one relay per other
        // server. Relayed servers advertise a port nobody listens on, so that the routes they
        // learn from each other (gossip) cannot bypass the relays.
        let mut routes = Vec::new();
        for i in 0..3 {
            let mut mine = Vec::new();
            for (j, (_, cport)) in ports.iter().enumerate() {
                if !relayed {
                    mine.push(format!("nats://127.0.0.1:{cport}"));
                } else if i != j {
                    let listener = TcpListener::bind("127.0.0.1:0").await.expect("relay port");
                    mine.push(format!("nats://127.0.0.1:{}", listener.local_addr().unwrap().port()));
                    tokio::spawn(relay_route(listener, *cport, cuts[i].subscribe(), cuts[j].subscribe()));
                }
            }
            routes.push(mine.join(","));
        }
        let nowhere = free_port();
        let (tx, mut leader) = mpsc::unbounded_channel::<String>();
        let mut children = Vec::new();
        let mut dirs = Vec::new();
        for (i, (port, cport)) in ports.iter().enumerate() {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut command = Command::new("nats-server");
            command
                .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-n", &format!("n{i}")])
                .args(["--cluster_name", "mesgd-test", "--cluster", &format!("nats://127.0.0.1:{cport}")])
                .args(["--routes", &routes[i]]);
            if relayed {
                command.args(["--cluster_advertise", &format!("127.0.0.1:{nowhere}")]);
            }
            let mut child = command
                .arg("-c")
                .arg(super::nats::jetstream_config(dir.path()))
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
                    if line.contains("new metadata leader") || line.contains("Server is ready") {
                        let _ = tx.send(line);
                    }
                }
            });
            children.push(child);
            dirs.push(dir);
        }
        if cut {
            // Every server says it is ready; none can become the leader.
            let mut ready = 0;
            while ready < 3 {
                let line = within("the NATS servers ready", leader.recv()).await.expect("a server's log");
                ready += usize::from(line.contains("Server is ready"));
            }
        } else {
            loop {
                let line = within("the NATS cluster's JetStream meta leader", leader.recv())
                    .await
                    .expect("a server's log");
                if line.contains("new metadata leader") {
                    break;
                }
            }
        }
        let urls = ports.iter().map(|(p, _)| format!("nats://127.0.0.1:{p}")).collect();
        NatsCluster { children, urls, _dirs: dirs, cuts }
    }

    /// Cuts server `i` off from the other two (a partition: `i` alone on the minority side).
    /// Only for a cluster started with [`NatsCluster::start_partitionable`].
    pub fn isolate(&self, i: usize) {
        self.cuts[i].send_replace(true);
    }

    /// Ends every partition: the servers route to each other again.
    pub fn heal(&self) {
        for cut in &self.cuts {
            cut.send_replace(false);
        }
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
