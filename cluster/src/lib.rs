//! `mesgd-cluster`: mesgd nodes as one broker over NATS with JetStream.
//!
//! Each node is a client of a NATS system (one nats-server or a NATS cluster); nodes never
//! talk to each other directly. [`Cluster::start`] connects, then installs two seams in the
//! broker, so that without `[cluster]` none of this code is on any path:
//!
//! - the [`Forward`](mesgd_core::broker::Forward) seam: every message published on this node is,
//!   after local delivery, queued for NATS (`live`), and a retained one for the retained stream
//!   (`retained`);
//! - the [`SessionRegistry`](mesgd_core::cluster::registry::SessionRegistry) seam: an MQTT
//!   CONNECT claims its client id cluster-wide, and the previous owner node closes its
//!   connection (`registry`);
//! - the router's [`Interest`](mesgd_core::cluster::Interest) seam: the filters this node has
//!   subscribers for become NATS subscriptions (`interest`), and what they bring is routed
//!   through the local router once (`live`); each shared group with a member here becomes a
//!   NATS queue subscription on a second connection, so each message reaches one member in the
//!   whole cluster.
//!
//! The subject mapping is `mesgd_core::cluster::subject`; the header format is `wire`;
//! `docs/cluster.md` describes the whole design, its consistency and its failure modes.
//!
//! # Layout
//!
//! - `config`: `[cluster]` ([`ClusterConfig`]).
//! - `durable`: the stream of QoS 1/2 messages, stored before their acknowledgement.
//! - `interest`: the subjects this node wants, counted per filter.
//! - `live`: the forwarder, the sending task, the receiving task with its subscriptions.
//! - `retained`: the retained stream, storing into it and following it.
//! - `registry`: the session registry (which node owns each MQTT client id) in a KV bucket,
//!   and the takeover requests between nodes.
//! - `wire`: message headers.
//! - `stats`: the counters `/metrics` exposes.

mod config;
mod durable;
mod interest;
mod live;
mod registry;
mod retained;
mod stats;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{ConnectOptions, Event};
use futures_util::StreamExt;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::client_key;
pub use mesgd_core::cluster::registry::Record;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use self::config::{ClusterConfig, ClusterConfigError, ClusterTls};
pub use self::durable::DurableConfig;
pub use self::stats::{ClusterStats, Kind};
pub use self::wire::WireError;

/// Why the node could not join the cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// `[cluster]` is unusable.
    #[error(transparent)]
    Config(#[from] ClusterConfigError),
    /// `[cluster] credentials_file` cannot be read or parsed.
    #[error("[cluster] credentials_file {path}: {source}")]
    Credentials {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No NATS server of `[cluster] nats` accepted the connection.
    #[error("cannot connect to NATS at {servers}: {reason}")]
    Connect {
        /// The configured servers.
        servers: String,
        /// Why.
        reason: String,
    },
    /// The retained stream cannot be created or followed (JetStream off on the server?).
    #[error("JetStream retained stream: {0}")]
    Stream(String),
    /// The session registry's KV bucket cannot be created or opened, or the takeover subject
    /// not subscribed.
    #[error("JetStream session registry: {0}")]
    Registry(String),
    /// The durable stream of QoS 1/2 messages cannot be created or opened.
    #[error("JetStream durable stream: {0}")]
    Durable(String),
}

/// A node's membership in the cluster: its tasks and what tests and metrics observe.
#[derive(Debug)]
pub struct Cluster {
    client: async_nats::Client,
    group_client: async_nats::Client,
    stats: Arc<ClusterStats>,
    interest: Arc<interest::InterestTable>,
    synced: watch::Receiver<u64>,
    groups_synced: watch::Receiver<u64>,
    retained_applied: watch::Receiver<u64>,
    registry: registry::Registry,
    registry_kv: async_nats::jetstream::kv::Store,
    registry_task: std::sync::Mutex<Option<JoinHandle<()>>>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl Cluster {
    /// Connects to NATS, creates (or finds) the retained stream, loads the retained messages
    /// it holds into `broker` (bounded by `retained_load_timeout_ms`), and installs the seams.
    /// Relative paths in `config` must already be resolved ([`ClusterConfig::resolve_paths`]).
    pub async fn start(config: &ClusterConfig, broker: &Arc<Broker>) -> Result<Cluster, StartError> {
        config.validate()?;
        let stats = Arc::new(ClusterStats::default());
        let client = connect(config, &stats, true).await?;
        let js = async_nats::jetstream::new(client.clone());
        let stream = retained::stream(&js, &config.retained_stream, config.retained_replicas).await?;
        let me = live::Identity { node: Arc::from(config.node.as_str()), instance: rand::random() };
        let registry_kv = registry::bucket(&js, &config.registry_bucket, config.registry_replicas).await?;
        let registry = registry::Registry::new(
            registry_kv.clone(),
            client.clone(),
            &me,
            broker,
            stats.clone(),
            Duration::from_millis(config.registry_timeout_ms),
        );

        let (applied_tx, retained_applied) = watch::channel(0);
        let loaded = retained::follow(&stream, broker, &stats, &Arc::new(applied_tx)).await?;
        let wait = Duration::from_millis(config.retained_load_timeout_ms);
        if tokio::time::timeout(wait, futures_util::future::join_all(loaded)).await.is_err() {
            tracing::warn!(
                timeout_ms = config.retained_load_timeout_ms,
                "cluster: the retained messages were not all loaded in time; the rest arrive later"
            );
        }

        let capacity = config.queue_capacity;
        let (live_tx, live_rx) = mpsc::channel(capacity);
        let (retained_tx, retained_rx) = mpsc::channel(capacity);
        let interest = Arc::new(interest::InterestTable::new(stats.clone()));
        let (synced_tx, synced) = watch::channel(0);
        let receiver = live::Receiver {
            client: client.clone(),
            broker: broker.clone(),
            me: me.clone(),
            interest: interest.clone(),
            stats: stats.clone(),
            capacity,
            synced: synced_tx,
        };
        // Shared groups' queue subscriptions, on a connection without no_echo.
        let group_client = connect(config, &stats, false).await?;
        let (groups_synced_tx, groups_synced) = watch::channel(0);
        let group_receiver = live::GroupReceiver {
            client: group_client.clone(),
            broker: broker.clone(),
            interest: interest.clone(),
            stats: stats.clone(),
            capacity,
            synced: groups_synced_tx,
        };
        let registry_task = registry.serve().await?;
        durable::stream(&js, &config.durable).await.map_err(StartError::Durable)?;
        let durable_js = async_nats::jetstream::ContextBuilder::new()
            .timeout(Duration::from_millis(config.durable.store_timeout_ms))
            .build(client.clone());
        let (store, store_task) =
            durable::DurableStore::start(durable_js, broker.clone(), me.clone(), capacity, stats.clone());
        let tasks = vec![
            store_task,
            tokio::spawn(receiver.run()),
            tokio::spawn(group_receiver.run()),
            tokio::spawn(live::send_loop(client.clone(), broker.clone(), me.clone(), live_rx, stats.clone())),
            tokio::spawn(retained::store_loop(js, broker.clone(), me, retained_rx, stats.clone())),
        ];
        let as_interest: Arc<dyn mesgd_core::cluster::Interest> = interest.clone();
        broker.router().set_interest(&as_interest);
        broker.set_session_registry(Arc::new(registry.clone()));
        broker.set_message_store(Arc::new(store));
        broker.set_forward(Arc::new(live::Forwarder {
            live: live_tx,
            retained: retained_tx,
            stats: stats.clone(),
        }));
        tracing::info!(node = config.node, servers = ?config.nats, "joined the cluster");
        Ok(Cluster {
            client,
            group_client,
            stats,
            interest,
            synced,
            groups_synced,
            retained_applied,
            registry,
            registry_kv,
            registry_task: std::sync::Mutex::new(Some(registry_task)),
            tasks: std::sync::Mutex::new(tasks),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<ClusterStats> {
        &self.stats
    }

    /// Waits until every subscription made on this node so far has its NATS subscription in
    /// place at the server, so that messages other nodes publish from now on reach it. (With
    /// a NATS cluster, interest still takes a moment to reach the other servers.)
    pub async fn interest_synced(&self) {
        let wanted = self.interest.generation();
        for synced in [&self.synced, &self.groups_synced] {
            let _ = synced.clone().wait_for(|&g| g >= wanted).await;
        }
    }

    /// How many retained changes this node has applied from the stream: rises with each.
    pub fn retained_applied(&self) -> watch::Receiver<u64> {
        self.retained_applied.clone()
    }

    /// How many MQTT client ids this node holds in the session registry (or is claiming).
    pub fn registry_held(&self) -> usize {
        self.registry.held()
    }

    /// The session registry's record of `client_id` and its revision, read from the bucket.
    pub async fn registry_record(&self, client_id: &str) -> Result<Option<(Record, u64)>, String> {
        let key = client_key::encode(client_id).map_err(|e| e.to_string())?;
        match self.registry_kv.entry(key).await.map_err(|e| e.to_string())? {
            Some(e) if e.operation == async_nats::jetstream::kv::Operation::Put => {
                Ok(Some((Record::decode(&e.value).map_err(|e| e.to_string())?, e.revision)))
            }
            _ => Ok(None),
        }
    }

    /// Every record in the session registry, by client id: one read of the whole bucket, for
    /// operators and tests (it costs a pass over every key).
    pub async fn registry_records(&self) -> Result<BTreeMap<String, Record>, String> {
        let mut keys = self.registry_kv.keys().await.map_err(|e| e.to_string())?;
        let mut ids = Vec::new();
        while let Some(key) = keys.next().await {
            ids.push(client_key::decode(&key.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?);
        }
        let mut records = BTreeMap::new();
        for id in ids {
            if let Some((record, _)) = self.registry_record(&id).await? {
                records.insert(id, record);
            }
        }
        Ok(records)
    }

    /// Flushes what was sent to NATS (bounded) and stops the tasks: from then on the node
    /// neither sends nor receives cluster traffic.
    pub async fn shutdown(&self) {
        // The takeover subject first, explicitly: the flush below then makes the server
        // forget it before this returns, so other nodes' requests find no responder at once.
        self.registry.stop_serving();
        let serving = mesgd_core::sync::lock(&self.registry_task).take();
        if let Some(task) = serving {
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        }
        for t in mesgd_core::sync::lock(&self.tasks).drain(..) {
            t.abort();
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.flush()).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.group_client.flush()).await;
    }

    /// Leaves NATS for good, after [`Cluster::shutdown`]: both connections are drained, so
    /// nothing of this node can receive or write there any more. A process that exits gets
    /// this from the operating system; a server stopped inside a process that goes on (an
    /// embedding, the tests) would otherwise leave a node whose last tasks still answer
    /// takeover requests or release registry records, e.g. when a session it still holds in
    /// memory expires after the stop.
    pub async fn leave(&self) {
        let _ = self.client.drain().await;
        let _ = self.group_client.drain().await;
    }
}

/// A connection to NATS; `no_echo` for the one that publishes (this node delivers its own
/// publishes locally: NATS must not hand them back).
async fn connect(
    config: &ClusterConfig,
    stats: &Arc<ClusterStats>,
    no_echo: bool,
) -> Result<async_nats::Client, StartError> {
    let events = stats.clone();
    let name =
        if no_echo { format!("mesgd-{}", config.node) } else { format!("mesgd-{}-shared", config.node) };
    let mut options = ConnectOptions::new().name(name);
    if no_echo {
        options = options.no_echo();
    }
    let mut options = options
        .connection_timeout(Duration::from_millis(config.connect_timeout_ms))
        .event_callback(move |event| {
            let stats = events.clone();
            async move {
                match event {
                    Event::Disconnected => ClusterStats::add(&stats.disconnects, 1),
                    Event::SlowConsumer(_) => ClusterStats::add(&stats.slow_consumers, 1),
                    _ => {}
                }
                tracing::info!(%event, "cluster: NATS connection");
            }
        });
    if let Some(path) = &config.credentials_file {
        options = options
            .credentials_file(path)
            .await
            .map_err(|source| StartError::Credentials { path: path.clone(), source })?;
    }
    if let (Some(user), Some(password)) = (&config.user, &config.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &config.token {
        options = options.token(token.clone());
    }
    if let Some(tls) = &config.tls {
        options = options.require_tls(tls.required);
        if let Some(ca) = &tls.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    let servers = config.nats.join(", ");
    let deadline = Duration::from_millis(config.connect_timeout_ms.saturating_mul(2).max(1));
    match tokio::time::timeout(deadline, options.connect(config.nats.as_slice())).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(StartError::Connect { servers, reason: e.to_string() }),
        Err(_) => Err(StartError::Connect { servers, reason: "timed out".into() }),
    }
}
