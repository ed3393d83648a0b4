//! The running server: listeners, the timer task, `$SYS`, and an orderly shutdown.
//!
//! [`Server::start`] binds every listener before it returns, so a caller (the CLI, or a test
//! that binds `127.0.0.1:0`) can read the real addresses from [`Server::local_addr`] and
//! connect at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::Either;
use mesgd_core::auth::Chain;
use mesgd_core::broker::{Broker, BrokerLimits, Stats};
use mesgd_core::message::{Message, Origin};
use mesgd_core::mqtt::QoS;
use mesgd_core::session::{Kick, QueueLimits};
use mesgd_core::topic::TopicName;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, ListenerKind};
use crate::login_guard::LoginGuard;
use crate::mqtt::{self, Settings};
use crate::persist::{self, WriterHandle};
use crate::tls::{ReloadableAcceptor, TlsError};
use crate::ws::{self, WsEndpoint};

/// How long shutdown waits for connections to say goodbye.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A listener could not bind.
    #[error("listener {name:?} cannot bind {addr}: {source}")]
    Bind {
        /// The listener's name.
        name: String,
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The authentication chain could not be built.
    #[error("{0}")]
    Auth(String),
    /// The state store cannot be opened or read.
    #[error(transparent)]
    State(#[from] crate::persist::StoreError),
    /// A listener's TLS files are unusable.
    #[error("listener {name:?}: {source}")]
    Tls {
        /// The listener's name.
        name: String,
        /// What is wrong.
        source: TlsError,
    },
    /// The storage directory is unusable.
    #[error("storage directory {dir}: {source}")]
    Storage {
        /// The directory.
        dir: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A bound listener.
#[derive(Clone, Debug)]
pub struct BoundListener {
    /// Its name.
    pub name: String,
    /// What it speaks.
    pub kind: ListenerKind,
    /// The address it actually listens on.
    pub addr: SocketAddr,
}

/// Counts open connections, for `max_connections` and for waiting at shutdown.
#[derive(Debug, Default)]
struct Connections {
    open: AtomicUsize,
    all_closed: Notify,
}

/// Held by each connection task; the count drops with it.
struct ConnectionSlot(Arc<Connections>);

impl Connections {
    fn try_open(self: &Arc<Self>, max: usize) -> Option<ConnectionSlot> {
        let mut n = self.open.load(Ordering::Relaxed);
        loop {
            if n >= max {
                return None;
            }
            match self.open.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(ConnectionSlot(self.clone())),
                Err(actual) => n = actual,
            }
        }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.all_closed.notify_waiters();
        }
    }
}

/// A running mesgd.
#[derive(Debug)]
pub struct Server {
    broker: Arc<Broker>,
    listeners: Vec<BoundListener>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    connections: Arc<Connections>,
    tls: Vec<Arc<ReloadableAcceptor>>,
    persistence: Option<WriterHandle>,
}

fn build_chain(config: &Config) -> Result<Chain, StartError> {
    let mut ctx =
        mesgd_providers::BuildContext::new(config.storage_dir()).with_base_dir(config.base_dir.clone());
    let mut registry = mesgd_providers::Registry::with_builtin_providers();
    mesgd_plugin_host::register(&mut registry);
    registry
        .build_chain(&config.auth.providers, config.auth.allow_anonymous, &mut ctx)
        .map_err(|e| StartError::Auth(e.to_string()))
}

impl Server {
    /// Builds the broker from `config`, binds every listener and starts serving.
    pub async fn start(config: Config) -> Result<Server, StartError> {
        if !config.auth.providers.is_empty() {
            let dir = config.storage_dir();
            std::fs::create_dir_all(&dir).map_err(|source| StartError::Storage { dir, source })?;
        }
        let chain = build_chain(&config)?;
        let l = &config.limits;
        let broker = Arc::new(Broker::new(BrokerLimits {
            queue: QueueLimits {
                max_messages: l.max_queued_messages,
                max_bytes: l.max_queued_bytes,
                queue_qos0_offline: l.queue_qos0_offline,
            },
        }));
        let persistence = persist::open(
            &config.storage_dir(),
            config.storage.durability,
            Duration::from_millis(config.storage.flush_interval_ms),
            &broker,
        )?;
        let persistence = persistence.map(|p| {
            let journal: Arc<dyn mesgd_core::journal::Journal> = p.journal.clone();
            broker.set_journal(&journal);
            p.writer
        });
        let shared = Arc::new(mqtt::Shared {
            broker: broker.clone(),
            chain,
            settings: Settings::from_config(&config),
            login_guard: LoginGuard::new(config.auth.failed_login.clone()),
        });
        let (stop, stopped) = watch::channel(false);
        let connections = Arc::new(Connections::default());
        let mut listeners = Vec::new();
        let mut tasks = Vec::new();
        let mut acceptors = Vec::new();
        for (i, lc) in config.listeners.iter().enumerate() {
            let name = config.listener_name(i);
            let tls = match &lc.tls {
                Some(t) => {
                    let acceptor = ReloadableAcceptor::new(t.clone(), config.base_dir.clone(), name.clone())
                        .map_err(|source| StartError::Tls { name: name.clone(), source })?;
                    let acceptor = Arc::new(acceptor);
                    acceptors.push(acceptor.clone());
                    Some(acceptor)
                }
                None => None,
            };
            let socket = TcpListener::bind(lc.bind).await.map_err(|source| StartError::Bind {
                name: name.clone(),
                addr: lc.bind,
                source,
            })?;
            let addr = socket.local_addr().map_err(|source| StartError::Bind {
                name: name.clone(),
                addr: lc.bind,
                source,
            })?;
            tracing::info!(listener = %name, %addr, kind = lc.kind.as_str(), tls = tls.is_some(), "listening");
            listeners.push(BoundListener { name: name.clone(), kind: lc.kind, addr });
            let name: Arc<str> = Arc::from(name);
            let endpoint = Arc::new(Endpoint {
                ws: (lc.kind == ListenerKind::MqttWs).then(|| {
                    Arc::new(WsEndpoint {
                        path: Arc::from(lc.ws_path()),
                        listener: name.clone(),
                        shared: shared.clone(),
                        header_timeout: shared.settings.connect_timeout,
                    })
                }),
                tls,
                name,
                shared: shared.clone(),
            });
            tasks.push(tokio::spawn(accept_loop(
                socket,
                endpoint,
                connections.clone(),
                config.limits.max_connections,
                stopped.clone(),
            )));
        }
        tasks.push(tokio::spawn(timer_loop(broker.clone(), stopped.clone())));
        if config.mqtt.sys_interval > 0 {
            tasks.push(tokio::spawn(sys_loop(
                broker.clone(),
                Duration::from_secs(config.mqtt.sys_interval),
                stopped.clone(),
            )));
        }
        Ok(Server { broker, listeners, tasks, stop, connections, tls: acceptors, persistence })
    }

    /// Re-reads every listener's TLS certificate and key (on SIGHUP). Established connections
    /// keep theirs; a listener whose new files are unusable keeps the old ones, and the error
    /// is logged.
    pub fn reload_tls(&self) {
        for acceptor in &self.tls {
            if let Err(e) = acceptor.reload() {
                tracing::error!(error = %e, "TLS reload failed; keeping the previous certificates");
            }
        }
    }

    /// The broker core.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Every bound listener.
    pub fn listeners(&self) -> &[BoundListener] {
        &self.listeners
    }

    /// The address of the listener called `name`.
    pub fn local_addr(&self, name: &str) -> Option<SocketAddr> {
        self.listeners.iter().find(|l| l.name == name).map(|l| l.addr)
    }

    /// Stops accepting, tells every client the server is shutting down (MQTT 5 DISCONNECT
    /// 0x8B), waits a bounded time for connections to close, and stops the background tasks.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        loop {
            for session in self.broker.online_sessions() {
                session.kick(Kick::ShuttingDown);
            }
            let all_closed = self.connections.all_closed.notified();
            if self.connections.open.load(Ordering::Acquire) == 0 {
                break;
            }
            // Connections still in their handshake attach later: kick again shortly.
            let step = (tokio::time::Instant::now() + Duration::from_millis(100)).min(deadline);
            tokio::select! {
                _ = all_closed => {}
                _ = tokio::time::sleep_until(step) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    open = self.connections.open.load(Ordering::Relaxed),
                    "shutdown: connections still open after the grace period"
                );
                break;
            }
        }
        for t in self.tasks {
            t.abort();
        }
        if let Some(writer) = self.persistence {
            // The last changes (wills, session ends) are written before the process exits.
            let _ = tokio::task::spawn_blocking(move || writer.close()).await;
        }
        tracing::info!("stopped");
    }
}

/// One listener's way of serving an accepted socket.
struct Endpoint {
    name: Arc<str>,
    shared: Arc<mqtt::Shared>,
    tls: Option<Arc<ReloadableAcceptor>>,
    ws: Option<Arc<WsEndpoint>>,
}

/// A connection's whole life as one boxed future (TLS and WebSocket connections).
type BoxedConnection = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Endpoint {
    /// The task that serves one accepted socket: the TLS handshake if the listener has TLS, then
    /// MQTT or MQTT over WebSocket.
    ///
    /// An idle connection costs what this future holds, so it holds little: the plain MQTT path
    /// boxes its handshake and its connection state separately (see `mqtt::serve`), and the TLS
    /// and WebSocket paths live in their own box, allocated only for their connections.
    /// `slot` is held until the connection ends (for a WebSocket, until the MQTT connection on
    /// it ends, which outlives the HTTP exchange).
    fn connection(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        slot: ConnectionSlot,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        match (&self.tls, &self.ws) {
            (None, None) => {
                let serve = mqtt::serve(stream, peer, self.name.clone(), None, self.shared.clone());
                Either::Left(async move {
                    serve.await;
                    drop(slot);
                })
            }
            (None, Some(ws)) => {
                let boxed: BoxedConnection = Box::pin(ws::serve_http(stream, peer, None, ws.clone(), slot));
                Either::Right(boxed)
            }
            (Some(_), _) => {
                let endpoint = self.clone();
                let boxed: BoxedConnection =
                    Box::pin(async move { endpoint.serve_tls(stream, peer, slot).await });
                Either::Right(boxed)
            }
        }
    }

    async fn serve_tls(&self, stream: TcpStream, peer: SocketAddr, slot: ConnectionSlot) {
        let Some(acceptor) = &self.tls else { return };
        match acceptor.accept(stream, self.shared.settings.connect_timeout).await {
            Ok((stream, info)) => {
                tracing::debug!(listener = %self.name, %peer, client_cn = ?info.common_name, "TLS handshake done");
                match &self.ws {
                    None => {
                        mqtt::serve(stream, peer, self.name.clone(), Some(info), self.shared.clone()).await;
                        drop(slot);
                    }
                    Some(ws) => ws::serve_http(stream, peer, Some(info), ws.clone(), slot).await,
                }
            }
            Err(e) => tracing::info!(listener = %self.name, %peer, error = %e, "TLS handshake failed"),
        }
    }
}

async fn accept_loop(
    socket: TcpListener,
    endpoint: Arc<Endpoint>,
    connections: Arc<Connections>,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
) {
    let name = endpoint.name.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            r = socket.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and similar: back off instead of spinning.
                tracing::warn!(listener = %name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = connections.try_open(max_connections) else {
            tracing::warn!(listener = %name, %peer, max_connections, "connection refused: max_connections reached");
            continue;
        };
        Stats::add(&endpoint.shared.broker.stats().connections_total, 1);
        let _ = stream.set_nodelay(true);
        tokio::spawn(endpoint.connection(stream, peer, slot));
    }
}

async fn timer_loop(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = Instant::now();
        let next = broker.tick(now).unwrap_or(now + Duration::from_secs(60));
        let next = tokio::time::Instant::from_std(next.min(now + Duration::from_secs(60)));
        tokio::select! {
            _ = stop.changed() => return,
            _ = broker.timers_changed().notified() => {}
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}

/// Publishes the `$SYS/broker/...` statistics as retained messages every `interval`.
async fn sys_loop(broker: Arc<Broker>, interval: Duration, mut stop: watch::Receiver<bool>) {
    let started = Instant::now();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticker.tick() => {}
        }
        for (topic, value) in sys_values(&broker, started) {
            let Ok(topic) = TopicName::try_from(format!("$SYS/broker/{topic}")) else { continue };
            broker.publish(Message::new(topic, Bytes::from(value), QoS::AtMostOnce, true, Origin::BROKER));
        }
    }
}

fn sys_values(broker: &Broker, started: Instant) -> Vec<(&'static str, String)> {
    let s = broker.stats();
    vec![
        ("version", format!("mesgd {}", env!("CARGO_PKG_VERSION"))),
        ("uptime", format!("{} seconds", started.elapsed().as_secs())),
        ("clients/connected", Stats::get(&s.clients_connected).to_string()),
        ("clients/total", broker.session_count().to_string()),
        ("messages/received", Stats::get(&s.messages_received).to_string()),
        ("messages/sent", Stats::get(&s.messages_sent).to_string()),
        ("messages/dropped", Stats::get(&s.messages_dropped).to_string()),
        ("subscriptions/count", broker.router().len().to_string()),
        ("retained messages/count", broker.retained().len().to_string()),
        ("load/bytes/received", Stats::get(&s.bytes_received).to_string()),
        ("load/bytes/sent", Stats::get(&s.bytes_sent).to_string()),
        ("auth/failures", Stats::get(&s.auth_failures).to_string()),
        ("publish/denied", Stats::get(&s.publishes_denied).to_string()),
    ]
}
