//! The running server: listeners, the timer task, `$SYS`, and an orderly shutdown.
//!
//! [`Server::start`] binds every listener before it returns, so a caller (the CLI, or a test
//! that binds `127.0.0.1:0`) can read the real addresses from [`Server::local_addr`] and
//! connect at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mesgd_core::auth::Chain;
use mesgd_core::broker::{Broker, BrokerLimits, Stats};
use mesgd_core::model::Kick;
use mesgd_core::model::{Message, Origin};
use mesgd_core::mqtt::QoS;
use mesgd_core::session::QueueLimits;
use mesgd_core::topic::TopicName;
use mesgd_providers::Services;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{Config, ListenerKind};
use crate::context::ServerContext;
use crate::listener::{self, Connections, Endpoint};
use crate::metrics::broker::BrokerCollector;
use crate::metrics::cluster::ClusterCollector;
use crate::metrics::content::ContentCollector;
use crate::metrics::limits::LimitsCollector;
use crate::metrics::relay::RelayCollector;
use crate::persist::{self, WriterHandle};
use crate::tls::{ReloadableAcceptor, TlsError};

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
    #[error(transparent)]
    Auth(#[from] mesgd_providers::ConfigError),
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
    /// The builtin store (`config.db`), which the REST API needs, cannot be opened.
    #[error("the user store for the REST API: {0}")]
    UserStore(mesgd_providers::builtin::StoreError),
    /// `[http] metrics_token_file` cannot be read (or is empty).
    #[error("[http] metrics_token_file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The token key store (`<storage.dir>/keys`) cannot be opened or made.
    #[error(transparent)]
    Keys(#[from] mesgd_providers::tokens::KeyError),
    /// The relay's configuration refers to something unusable (the TURN secret file).
    #[error(transparent)]
    Relay(crate::config::ConfigError),
    /// `[cluster]` is set but the node cannot join (NATS unreachable, JetStream off).
    #[error(transparent)]
    Cluster(#[from] mesgd_cluster::StartError),
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

/// A running mesgd.
#[derive(Debug)]
pub struct Server {
    ctx: Arc<ServerContext>,
    listeners: Vec<BoundListener>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    connections: Arc<Connections>,
    tls: Vec<Arc<ReloadableAcceptor>>,
    persistence: Option<WriterHandle>,
    cluster: Option<Arc<mesgd_cluster::Cluster>>,
}

/// The token `/metrics` requires, from `[http] metrics_token` or `metrics_token_file`.
fn metrics_token(config: &Config) -> Result<Option<String>, StartError> {
    if let Some(token) = &config.http.metrics_token {
        return Ok(Some(token.trim().to_owned()));
    }
    let Some(file) = &config.http.metrics_token_file else { return Ok(None) };
    let path = config.resolve(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|source| StartError::TokenFile { path: path.clone(), source })?;
    let token = text.trim();
    if token.is_empty() {
        let source = std::io::Error::new(std::io::ErrorKind::InvalidData, "the file is empty");
        return Err(StartError::TokenFile { path, source });
    }
    Ok(Some(token.to_owned()))
}

/// Builds the provider chain, and keeps the services its providers opened.
fn build_chain(config: &Config) -> Result<(Chain, Services), StartError> {
    let mut ctx =
        mesgd_providers::BuildContext::new(config.storage_dir()).with_base_dir(config.base_dir.clone());
    let mut registry = mesgd_providers::Registry::with_builtin_providers();
    mesgd_plugin_host::register(&mut registry);
    let chain = registry.build_chain(&config.auth.providers, config.auth.allow_anonymous, &mut ctx)?;
    // The REST API manages users and authenticates administrators through the same directory
    // the builtin provider uses; without a builtin provider it is opened here for the API alone.
    if config.listeners.iter().any(|l| l.kind == ListenerKind::Http) {
        ctx.user_directory().map_err(StartError::UserStore)?;
        ctx.sessions().map_err(StartError::UserStore)?;
    }
    Ok((chain, std::mem::take(ctx.services_mut())))
}

impl Server {
    /// Builds the broker from `config`, binds every listener and starts serving.
    pub async fn start(config: Config) -> Result<Server, StartError> {
        if !config.auth.providers.is_empty() || config.listeners.iter().any(|l| l.kind == ListenerKind::Http)
        {
            let dir = config.storage_dir();
            std::fs::create_dir_all(&dir).map_err(|source| StartError::Storage { dir, source })?;
        }
        let (chain, services) = build_chain(&config)?;
        let l = &config.limits;
        let limits = BrokerLimits {
            queue: QueueLimits {
                max_messages: l.max_queued_messages,
                max_bytes: l.max_queued_bytes,
                queue_qos0_offline: l.queue_qos0_offline,
                max_inflight_bytes: l.max_inflight_bytes,
            },
            budget: crate::limits::budget::broker_budget(l),
            retained: mesgd_core::retained::RetainedLimits {
                max_messages: l.max_retained_messages,
                max_bytes: l.max_retained_bytes,
            },
            max_sessions: l.max_sessions,
        };
        // The two clocks, read once: the broker derives wall times from the instants it is given.
        let broker = Arc::new(Broker::new(limits, Instant::now(), SystemTime::now()));
        let persistence = persist::open(&config.storage_dir(), &config.storage, &broker)?;
        let journal = persistence.as_ref().map(|p| p.journal.clone());
        let mut restored_relay = crate::relay::Restored::default();
        let persistence = persistence.map(|p| {
            restored_relay = p.relay;
            (p.journal, p.writer)
        });
        let disk: Option<Arc<dyn mesgd_core::journal::Journal>> = persistence
            .as_ref()
            .map(|(journal, _)| -> Arc<dyn mesgd_core::journal::Journal> { journal.clone() });
        // A clustered node copies its persistent sessions into the cluster through the journal
        // (over the disk journal, if any), so that they resume elsewhere if it dies.
        let session_copies =
            config.cluster.as_ref().map(|_| Arc::new(mesgd_cluster::SessionCopies::new(disk.clone())));
        let as_journal = match &session_copies {
            Some(copies) => Some(copies.clone() as Arc<dyn mesgd_core::journal::Journal>),
            None => disk,
        };
        if let Some(journal) = &as_journal {
            broker.set_journal(journal);
        }
        let persistence = persistence.map(|(_, writer)| writer);
        // After the restore, so the restored subscriptions become NATS interest; before the
        // listeners, so the first client already sees the cluster's retained messages.
        let cluster = match &config.cluster {
            Some(c) => {
                let mut c = c.clone();
                c.resolve_paths(&config.base_dir);
                // Boxed: joining is a large future, and only clustered nodes pay for it.
                Some(Arc::new(
                    Box::pin(mesgd_cluster::Cluster::start(&c, &broker, session_copies.clone())).await?,
                ))
            }
            None => None,
        };
        let content = crate::content::Content::open(&config)?;
        let ctx = Arc::new(ServerContext::new(&config, broker.clone(), chain, services, content));
        ctx.metrics.register_collector(Box::new(BrokerCollector::new(
            broker.clone(),
            ctx.chain.clone(),
            journal,
            config.storage_dir(),
        )));
        ctx.metrics.register_collector(Box::new(ContentCollector::new(Arc::downgrade(&ctx))));
        ctx.metrics.register_collector(Box::new(LimitsCollector::new(Arc::downgrade(&ctx))));
        ctx.metrics.register_collector(Box::new(RelayCollector::new(Arc::downgrade(&ctx))));
        let (parked, parks, resumes) = ctx.parking.metrics();
        ctx.metrics.register(
            "mesgd_mqtt_parked_connections",
            "Idle MQTT connections parked now (mqtt.park_idle_ms)",
            parked,
        );
        ctx.metrics.register("mesgd_mqtt_parks", "Idle MQTT connections parked", parks);
        ctx.metrics.register(
            "mesgd_mqtt_resumes",
            "Parked MQTT connections given their own task again",
            resumes,
        );
        ctx.metrics.register(
            "mesgd_mqtt_parked_sockets_watched",
            "Parked MQTT connections (and ones about to park) whose TCP socket waits outside the async runtime's reactor",
            ctx.parking.sockets_watched_gauge(),
        );
        if let Some(directory) = ctx.services.get::<mesgd_providers::builtin::UserDirectory>() {
            // A builtin user's change reaches its connected clients through their sessions: the
            // broker wakes them, and each sees its live identity changed.
            let broker = Arc::downgrade(&ctx.broker);
            directory.on_identity_change(Box::new(move |names| {
                if let Some(broker) = broker.upgrade() {
                    broker.wake_users(names);
                }
            }));
        }
        if let Some(cluster) = &cluster {
            ctx.metrics.register_collector(Box::new(ClusterCollector::new(cluster.stats().clone())));
            // Before the listeners: the first login already sees the cluster's users.
            if let Some(directory) = ctx.services.get::<mesgd_providers::builtin::UserDirectory>() {
                cluster.replicate_users(directory).await?;
            }
            if let Some(sessions) = ctx.services.get::<mesgd_providers::sessions::Sessions>() {
                cluster.replicate_logins(sessions).await?;
            }
            if let Some((dir, keys)) = ctx.content.token_keys() {
                cluster
                    .share_token_keys(
                        dir,
                        Arc::new(move || {
                            keys.reload_if_changed();
                        }),
                    )
                    .await?;
            }
        }
        if let Some(token) = metrics_token(&config)? {
            ctx.metrics.require_token(token);
        }
        ctx.relay.restore(restored_relay);
        if let Some(cluster) = &cluster {
            crate::relay::cluster::attach(&ctx, cluster).await?;
            crate::content::cluster::attach(&ctx, cluster).await?;
            if config.listeners.iter().any(|l| l.kind == ListenerKind::Http) {
                crate::http::api::cluster::attach(&ctx, cluster).await?;
            }
        }
        if let Some(turn) = config.relay.load_turn(&config).map_err(StartError::Relay)? {
            ctx.relay.set_turn(turn);
        }
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
            let endpoint = Arc::new(Endpoint::new(Arc::from(name.as_str()), lc, ctx.clone(), tls));
            let running = listener::start(
                lc.bind,
                config.limits.listen_backlog,
                endpoint,
                connections.clone(),
                config.limits.max_connections,
                &stopped,
            )
            .await
            .map_err(|source| StartError::Bind { name: name.clone(), addr: lc.bind, source })?;
            tracing::info!(
                listener = %name,
                addr = %running.addr,
                kind = lc.kind.as_str(),
                tls = lc.tls.is_some(),
                "listening"
            );
            if let Some(transport) = crate::relay::transport_name(lc.kind, lc.tls.is_some()) {
                ctx.relay.add_transport(transport, running.addr.port());
            }
            listeners.push(BoundListener { name, kind: lc.kind, addr: running.addr });
            tasks.push(running.task);
        }
        tasks.push(tokio::spawn(timer_loop(broker.clone(), stopped.clone())));
        tasks.push(tokio::spawn(crate::relay::sweep_loop(ctx.clone(), stopped.clone())));
        tasks.push(tokio::spawn(crate::content::watch_keys_loop(ctx.clone(), stopped.clone())));
        if config.mqtt.sys_interval > 0 {
            tasks.push(tokio::spawn(sys_loop(
                ctx.clone(),
                Duration::from_secs(config.mqtt.sys_interval),
                stopped.clone(),
            )));
            let interval = Duration::from_secs(config.mqtt.sys_interval);
            tasks.push(tokio::spawn(crate::relay::sys::sys_loop(ctx.clone(), interval, stopped.clone())));
        }
        Ok(Server { ctx, listeners, tasks, stop, connections, tls: acceptors, persistence, cluster })
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
        &self.ctx.broker
    }

    /// What every front end shares: the broker, the chain, the providers' services.
    pub fn context(&self) -> &Arc<ServerContext> {
        &self.ctx
    }

    /// The node's cluster membership, with `[cluster]`.
    pub fn cluster(&self) -> Option<&Arc<mesgd_cluster::Cluster>> {
        self.cluster.as_ref()
    }

    /// Every bound listener.
    pub fn listeners(&self) -> &[BoundListener] {
        &self.listeners
    }

    /// How many client connections every listener holds now (each until its task, or its
    /// parked connection, ends).
    pub fn open_connections(&self) -> usize {
        self.connections.open()
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
            for session in self.ctx.broker.online_sessions() {
                session.kick(Kick::ShuttingDown);
            }
            self.ctx.content.shut_down();
            let all_closed = self.connections.all_closed().notified();
            if self.connections.open() == 0 {
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
                    open = self.connections.open(),
                    "shutdown: connections still open after the grace period"
                );
                break;
            }
        }
        for t in self.tasks {
            t.abort();
        }
        if let Some(cluster) = &self.cluster {
            cluster.shutdown().await;
            cluster.leave().await;
        }
        if let Some(writer) = self.persistence {
            // The last changes (wills, session ends) are written before the process exits.
            let _ = tokio::task::spawn_blocking(move || writer.close()).await;
        }
        tracing::info!("stopped");
    }
}

async fn timer_loop(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = crate::clock::now();
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
async fn sys_loop(ctx: Arc<ServerContext>, interval: Duration, mut stop: watch::Receiver<bool>) {
    let broker = ctx.broker();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticker.tick() => {}
        }
        let limits = ctx.limit_counts().sys_values();
        for (topic, value) in sys_values(broker, started).into_iter().chain(limits) {
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
