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
//! - `backoff`: the pauses between attempts of a start-up step that waits for NATS.
//! - `bucket_entries`: listing a KV bucket's entries (for operators and tests).
//! - `config`: `[cluster]` ([`ClusterConfig`]).
//! - `connect`: the connections to NATS at start, tried again while the servers are not up yet.
//! - `assets`: the buckets and streams without a follower of their own (registry, session
//!   copies, wills, leases, QoS 1/2 stream) checked every 5 s and created again when deleted.
//! - `durable`: the stream of QoS 1/2 messages, stored before their acknowledgement.
//! - `features`: what the NATS server offers beyond 2.9, from the version it reports.
//! - `interest`: the subjects this node wants, counted per filter, and whether NATS has
//!   confirmed them (what a SUBACK waits for).
//! - `live`: the forwarder, the sending task, the receiving task with its subscriptions.
//! - `liveness`: which node instances are alive, from the node leases (what the relay's pipes
//!   and figures of other nodes follow).
//! - `lost`: closing the clients' connections when NATS has been lost, or the node's lease not
//!   renewed, for too long.
//! - `retained`: the retained stream, storing into it and following it.
//! - `registry`: the session registry (which node owns each MQTT client id) in a KV bucket,
//!   the takeover requests between nodes, the release of a dead node's records, and the
//!   claims made again in a bucket that replaced a deleted one.
//! - `sessions`: persistent sessions copied into a KV bucket through the journal
//!   ([`SessionCopies`]), resumed from there when their node died, and the replay of the
//!   durable stream for a session resumed here.
//! - `streams`: creating a stream at start when other nodes may be creating it too, or while
//!   a NATS cluster is still electing its leaders; noticing that a followed stream was deleted
//!   or replaced (the users, logins and retained streams, and `assets`).
//! - `users`: builtin users, their ACLs and content-routing access, administrators and API
//!   tokens the same on every node, through a stream.
//! - `logins`: the login sessions' signing key and the ended sessions the same on every node.
//! - `token_keys`: the token key store (claim, grant and anonymous tokens) the same on every
//!   node, in the logins stream.
//! - `wills`: node leases, and the wills of a dead node's clients sent by the node that
//!   takes its lease over.
//! - `wire`: message headers.
//! - `console`: the console's browser sessions the same on every node (a KV bucket each node
//!   follows into its REST API's session table), attached with [`Cluster::attach_console`].
//! - `content`: content routing across nodes (each node's listener paths in a bucket, messages
//!   sent only to the nodes with a match), attached with [`Cluster::attach_content`].
//! - `relay`: the relay across nodes (addresses, direct sends, store-and-forward queues),
//!   attached by the relay front end with [`Cluster::attach_relay`].
//! - `stats`: the counters `/metrics` exposes.

mod assets;
mod backoff;
mod bucket_entries;
mod config;
mod connect;
mod console;
mod content;
mod durable;
mod features;
mod interest;
mod live;
mod liveness;
mod logins;
mod lost;
mod registry;
mod relay;
mod retained;
mod sessions;
mod stats;
mod streams;
mod token_keys;
mod users;
mod wills;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::client_key;
pub use mesgd_core::cluster::registry::Record;
pub use mesgd_core::cluster::session_record::SessionRecord;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use self::config::{ClusterConfig, ClusterConfigError, ClusterTls};
pub use self::content::ContentClusterStats;
pub use self::durable::DurableConfig;
pub use self::relay::RelayClusterStats;
pub use self::sessions::SessionCopies;
pub use self::stats::{ClusterStats, Kind};
pub use self::token_keys::ReloadKeys;
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
    /// The builtin users' stream cannot be created or followed.
    #[error("JetStream users stream: {0}")]
    Users(String),
    /// The login sessions' stream cannot be created or followed, or holds an unusable key.
    #[error("JetStream logins stream: {0}")]
    Logins(String),
    /// The relay's address bucket or queue stream cannot be created or opened, or its subject
    /// not subscribed.
    #[error("JetStream relay state: {0}")]
    Relay(String),
    /// Content routing's path bucket cannot be created or followed, or its subject not
    /// subscribed.
    #[error("JetStream content paths: {0}")]
    Content(String),
    /// The durable stream of QoS 1/2 messages cannot be created or opened.
    #[error("JetStream durable stream: {0}")]
    Durable(String),
    /// The console sessions' bucket cannot be created or opened.
    #[error("JetStream console sessions: {0}")]
    Console(String),
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
    sessions: Arc<sessions::store::SessionStore>,
    registry_task: std::sync::Mutex<Option<JoinHandle<()>>>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    js: async_nats::jetstream::Context,
    config: ClusterConfig,
    wills_kv: async_nats::jetstream::kv::Store,
    me: live::Identity,
    /// Which node instances are alive, from the leases.
    liveness: Arc<liveness::Liveness>,
    relay_setup: relay::RelaySetup,
    content_setup: content::ContentSetup,
    content_applied: std::sync::OnceLock<watch::Receiver<u64>>,
    /// Content routing's seam, once attached: its paths are withdrawn at shutdown.
    content: Arc<std::sync::OnceLock<content::ContentNode>>,
    relay: std::sync::OnceLock<relay::RelayNode>,
}

impl Cluster {
    /// Connects to NATS, creates (or finds) the retained stream, loads the retained messages
    /// it holds into `broker` (bounded by `retained_load_timeout_ms`), and installs the seams.
    /// Relative paths in `config` must already be resolved ([`ClusterConfig::resolve_paths`]).
    /// `copies`, the broker's journal, has this node's persistent sessions written to the
    /// cluster (without it, sessions are read from there on recovery but not written).
    pub async fn start(
        config: &ClusterConfig,
        broker: &Arc<Broker>,
        copies: Option<Arc<SessionCopies>>,
    ) -> Result<Cluster, StartError> {
        config.validate()?;
        let stats = Arc::new(ClusterStats::default());
        let client = connect::connect(config, &stats, true).await?;
        let patience = Duration::from_millis(config.jetstream_ready_timeout_ms);
        let js = async_nats::jetstream::new(client.clone());
        let users_js = js.clone();
        let retained_config = retained::stream_config(&config.retained_stream, config.retained_replicas);
        let stream = retained::stream(&js, retained_config.clone(), patience).await?;
        let me = live::Identity { node: Arc::from(config.node.as_str()), instance: rand::random() };
        let registry_config =
            registry::registry_bucket_config(&config.registry_bucket, config.registry_replicas);
        let registry_kv = registry::bucket_with(&js, registry_config.clone(), patience)
            .await
            .map_err(StartError::Registry)?;
        let session_state_config = registry::bucket_config(
            &config.session_state_bucket,
            config.registry_replicas,
            "mesgd persistent sessions' state, for recovery when their node dies",
            -1,
            Duration::ZERO,
        );
        let session_state_kv = registry::bucket_with(&js, session_state_config.clone(), patience)
            .await
            .map_err(StartError::Registry)?;
        let mut assets = vec![assets::Asset::new(session_state_config, &session_state_kv.stream)];
        let session_store = Arc::new(sessions::store::SessionStore::new(
            session_state_kv,
            me.node.clone(),
            stats.clone(),
            Duration::from_millis(config.registry_timeout_ms),
        ));
        let registry = registry::Registry::new(
            registry_kv.clone(),
            client.clone(),
            &me,
            broker,
            stats.clone(),
            Duration::from_millis(config.registry_timeout_ms),
            session_store.clone(),
        );

        let (applied_tx, retained_applied) = watch::channel(0);
        let version = client.server_info().version;
        let features = features::ServerFeatures::of(&version);
        tracing::info!(version, ?features, "cluster: NATS server features");
        let retained_follower = retained::Follower::start(
            js.clone(),
            &stream,
            retained_config,
            features,
            broker.clone(),
            me.clone(),
            stats.clone(),
            Arc::new(applied_tx),
            Duration::from_millis(config.retained_load_timeout_ms),
        )
        .await?;

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
        let group_client = connect::connect(config, &stats, false).await?;
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
        let durable_stream =
            durable::stream(&js, &config.durable, patience).await.map_err(StartError::Durable)?;
        assets.push(assets::Asset::new(durable::stream_config(&config.durable), &durable_stream));
        let durable_js = async_nats::jetstream::ContextBuilder::new()
            .timeout(Duration::from_millis(config.durable.store_timeout_ms))
            .build(client.clone());
        let (store, store_task) =
            durable::DurableStore::start(durable_js, broker.clone(), me.clone(), capacity, stats.clone());
        let content: Arc<std::sync::OnceLock<content::ContentNode>> = Arc::default();
        let liveness = Arc::new(liveness::Liveness::default());
        let wills_config = registry::bucket_config(
            &config.wills_bucket,
            config.registry_replicas,
            "mesgd wills of live connections",
            -1,
            Duration::ZERO,
        );
        let nodes_config = registry::bucket_config(
            &config.nodes_bucket,
            config.registry_replicas,
            "mesgd node leases",
            1024,
            Duration::ZERO,
        );
        let wills = wills::Wills {
            wills: registry::bucket_with(&js, wills_config.clone(), patience)
                .await
                .map_err(StartError::Registry)?,
            nodes: registry::bucket_with(&js, nodes_config.clone(), patience)
                .await
                .map_err(StartError::Registry)?,
            registry: registry_kv.clone(),
            sessions: session_store.clone(),
            lease: Duration::from_millis(config.lease_ms),
            client: client.clone(),
            content: content.clone(),
            liveness: liveness.clone(),
        };
        // Leases first: a node whose renewals fail closes its clients after nats_lost_close_ms.
        assets.insert(0, assets::Asset::new(nodes_config, &wills.nodes.stream));
        assets.push(assets::Asset::new(wills_config, &wills.wills.stream));
        assets.push(assets::Asset::registry(registry_config, &registry_kv.stream, registry.clone()));
        let wills_kv = wills.wills.clone();
        let renewals = Arc::new(lost::Renewals::default());
        let sweep_every =
            (config.registry_sweep_ms > 0).then(|| Duration::from_millis(config.registry_sweep_ms));
        let will_tasks =
            wills::start(wills, broker, me.clone(), renewals.clone(), sweep_every, stats.clone()).await?;
        let mut tasks = vec![
            tokio::spawn(assets::watch(js.clone(), assets, stats.clone())),
            store_task,
            tokio::spawn(receiver.run()),
            tokio::spawn(group_receiver.run()),
            tokio::spawn(live::send_loop(client.clone(), broker.clone(), me.clone(), live_rx, stats.clone())),
            tokio::spawn(retained::store_loop(
                js,
                stream.clone(),
                Duration::from_millis(config.retained_tombstone_ms),
                broker.clone(),
                me.clone(),
                retained_rx,
                stats.clone(),
            )),
            tokio::spawn(retained_follower.run()),
            tokio::spawn(interest.clone().watch_reachability(client.clone())),
            tokio::spawn(lost::watch(
                client.clone(),
                renewals,
                broker.clone(),
                Duration::from_millis(config.nats_lost_close_ms),
                stats.clone(),
            )),
        ];
        tasks.extend(will_tasks);
        let session_store_handle = session_store.clone();
        if let Some(copies) = copies {
            registry.set_replayer(Arc::new(sessions::replay::Replayer {
                js: users_js.clone(),
                stream: config.durable.stream.clone(),
                broker: Arc::downgrade(broker),
                interest: interest.clone(),
                synced: synced.clone(),
                copies: copies.clone(),
                stats: stats.clone(),
            }));
            tasks.push(tokio::spawn(sessions::store::write_loop(
                copies,
                session_store,
                registry.clone(),
                Arc::downgrade(broker),
                Duration::from_millis(config.session_write_delay_ms),
            )));
        }
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
            sessions: session_store_handle,
            registry_task: std::sync::Mutex::new(Some(registry_task)),
            tasks: std::sync::Mutex::new(tasks),
            js: users_js,
            config: config.clone(),
            wills_kv,
            me,
            liveness,
            relay_setup: relay::RelaySetup {
                bucket: config.relay_bucket.clone(),
                stream: config.relay_queue_stream.clone(),
                replicas: config.registry_replicas,
                timeout: Duration::from_millis(config.registry_timeout_ms),
                capacity: config.queue_capacity,
                patience,
            },
            content_setup: content::ContentSetup {
                bucket: config.content_bucket.clone(),
                replicas: config.registry_replicas,
                capacity: config.queue_capacity,
                patience,
            },
            content_applied: std::sync::OnceLock::new(),
            content,
            relay: std::sync::OnceLock::new(),
        })
    }

    /// The keys (`<node>.<client key>`) of every will kept in the wills bucket: the live
    /// connections with a will on every node, and those of dead nodes not yet sent. One pass
    /// over the bucket, for operators and tests.
    pub async fn kept_wills(&self) -> Result<Vec<String>, String> {
        Ok(bucket_entries::live_entries(&self.wills_kv).await?.into_iter().map(|entry| entry.key).collect())
    }

    /// Keeps the builtin users (ACLs and content-routing access), roles, administrators and API
    /// tokens of `directory`'s store the same on every node (the
    /// `users` module describes how): first applies what the cluster holds to this node's
    /// store, waiting at most `retained_load_timeout_ms` for it, then follows both.
    pub async fn replicate_users(
        &self,
        directory: Arc<mesgd_providers::builtin::UserDirectory>,
    ) -> Result<(), StartError> {
        let config = users::stream_config(&self.config.users_stream, self.config.users_replicas);
        let stream = users::stream(&self.js, config.clone(), self.patience()).await?;
        let wait = Duration::from_millis(self.config.retained_load_timeout_ms);
        let task = users::start(self.js.clone(), stream, config, directory, self.stats.clone(), wait).await?;
        mesgd_core::sync::lock(&self.tasks).push(task);
        Ok(())
    }

    /// Makes login sessions work on every node (the `logins` module describes how): adopts
    /// the cluster's signing key, applies the sessions ended elsewhere (waiting at most
    /// `retained_load_timeout_ms` for them), then follows the logouts of every node.
    pub async fn replicate_logins(
        &self,
        sessions: Arc<mesgd_providers::sessions::Sessions>,
    ) -> Result<(), StartError> {
        let config = logins::stream_config(&self.config.logins_stream, self.config.users_replicas);
        let stream = logins::stream(&self.js, config.clone(), self.patience()).await?;
        let wait = Duration::from_millis(self.config.retained_load_timeout_ms);
        let task = logins::start(
            self.js.clone(),
            stream,
            config,
            sessions,
            self.stats.clone(),
            wait,
            self.patience(),
        )
        .await?;
        mesgd_core::sync::lock(&self.tasks).push(task);
        Ok(())
    }

    /// Makes the token key store in `dir` the same on every node (the `token_keys` module
    /// describes how), unless `share_token_keys` is off: takes the cluster's store, or stores
    /// this one when the cluster has none, then follows both; `reload` is called each time the
    /// store in `dir` was replaced by the cluster's.
    pub async fn share_token_keys(
        &self,
        dir: std::path::PathBuf,
        reload: ReloadKeys,
    ) -> Result<(), StartError> {
        if !self.config.share_token_keys {
            return Ok(());
        }
        let config = logins::stream_config(&self.config.logins_stream, self.config.users_replicas);
        let stream = logins::stream(&self.js, config.clone(), self.patience()).await?;
        let task =
            token_keys::start(self.js.clone(), stream, config, dir, reload, self.stats.clone()).await?;
        mesgd_core::sync::lock(&self.tasks).push(task);
        Ok(())
    }

    /// Takes content routing across nodes: opens (or creates) the path bucket, follows the
    /// other nodes' paths, receives their messages for this node's listeners through `local`,
    /// and returns the seam the content front end sends through.
    pub async fn attach_content(
        &self,
        local: Arc<dyn mesgd_core::cluster::content::LocalContent>,
    ) -> Result<Arc<dyn mesgd_core::cluster::content::ContentCluster>, StartError> {
        let (node, tasks) = content::ContentNode::start(
            self.client.clone(),
            self.me.node.clone(),
            &self.content_setup,
            local,
            self.stats.clone(),
        )
        .await?;
        mesgd_core::sync::lock(&self.tasks).extend(tasks);
        let _ = self.content_applied.set(node.applied());
        let _ = self.content.set(node.clone());
        Ok(Arc::new(node))
    }

    /// Takes the console's browser sessions across nodes (the `console` module describes
    /// how): opens (or creates) the sessions' bucket, its records living `max_age` (twice the
    /// idle timeout), takes in the sessions it holds (waiting at most
    /// `retained_load_timeout_ms`), then keeps `local` (the REST API's table) in step with it;
    /// returns the seam the table writes through.
    pub async fn attach_console(
        &self,
        local: Arc<dyn mesgd_core::cluster::console::LocalConsole>,
        max_age: Duration,
    ) -> Result<Arc<dyn mesgd_core::cluster::console::ConsoleCluster>, StartError> {
        let setup = console::ConsoleSetup {
            bucket: self.config.console_bucket.clone(),
            replicas: self.config.users_replicas,
            timeout: Duration::from_millis(self.config.registry_timeout_ms),
            load_timeout: Duration::from_millis(self.config.retained_load_timeout_ms),
            capacity: self.config.queue_capacity,
            patience: self.patience(),
        };
        let (node, tasks) =
            console::ConsoleNode::start(&self.js, &setup, local, max_age, self.stats.clone()).await?;
        mesgd_core::sync::lock(&self.tasks).extend(tasks);
        Ok(Arc::new(node))
    }

    /// Rises with each change of other nodes' content listener paths this node applied
    /// (`None` before [`Cluster::attach_content`]).
    pub fn content_paths_applied(&self) -> Option<watch::Receiver<u64>> {
        self.content_applied.get().cloned()
    }

    /// Takes the relay across nodes: creates (or finds) the relay's address bucket and queue
    /// stream, answers other nodes' relay requests, and returns the seam the relay hub sends
    /// through. `local` writes to this node's relay clients; `limits` are the relay's queue
    /// limits (the stream is created with them).
    pub async fn attach_relay(
        &self,
        local: Arc<dyn mesgd_core::cluster::relay::LocalRelay>,
        limits: mesgd_core::relay::QueueLimits,
    ) -> Result<Arc<dyn mesgd_core::cluster::relay::RelayCluster>, StartError> {
        let (node, tasks) = relay::RelayNode::start(
            self.client.clone(),
            &self.me,
            self.liveness.clone(),
            &self.relay_setup,
            local,
            limits,
            self.stats.clone(),
        )
        .await?;
        mesgd_core::sync::lock(&self.tasks).extend(tasks);
        let _ = self.relay.set(node.clone());
        Ok(Arc::new(node))
    }

    /// Rises with each change of other nodes' relay figures this node applied (`None` before
    /// [`Cluster::attach_relay`]).
    pub fn relay_figures_applied(&self) -> Option<watch::Receiver<u64>> {
        self.relay.get().map(relay::RelayNode::figures_applied)
    }

    /// Waits until every relay room this node has members of has its NATS subscription in
    /// place (and every room it left has none), so that other nodes' room messages from now on
    /// reach its members.
    pub async fn relay_rooms_synced(&self) {
        if let Some(relay) = self.relay.get() {
            relay.rooms_synced().await;
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<ClusterStats> {
        &self.stats
    }

    /// How long creating a stream or bucket waits for JetStream (`jetstream_ready_timeout_ms`).
    fn patience(&self) -> Duration {
        Duration::from_millis(self.config.jetstream_ready_timeout_ms)
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

    /// The copy of `client_id`'s persistent session in the sessions bucket, if there is one
    /// that parses (an unreadable one is counted, `session_records_unreadable`).
    pub async fn session_record(&self, client_id: &str) -> Result<Option<SessionRecord>, String> {
        let key = client_key::encode(client_id).map_err(|e| e.to_string())?;
        Ok(self.sessions.read(&key).await?.and_then(|(_, record)| record))
    }

    /// Writes `bytes` as `client_id`'s session record the way this node writes its sessions'
    /// records, as holder of the client id at `registry_revision`: refused (`Ok(false)`,
    /// counted as `sessions_fenced`) when the stored record comes from a newer claim. For
    /// repair tools and tests; the node's own writes go through the journal.
    pub async fn write_session_record(
        &self,
        client_id: &str,
        bytes: Vec<u8>,
        registry_revision: u64,
    ) -> Result<bool, String> {
        let id: Arc<str> = Arc::from(client_id);
        let key = client_key::encode(client_id).map_err(|e| e.to_string())?;
        self.sessions.put_checked(&id, &key, Bytes::from(bytes), registry_revision).await
    }

    /// Every record in the session registry, by client id: one read of the whole bucket, for
    /// operators and tests (it costs a pass over every key).
    pub async fn registry_records(&self) -> Result<BTreeMap<String, Record>, String> {
        let mut records = BTreeMap::new();
        for entry in bucket_entries::live_entries(&self.registry_kv).await? {
            let id = client_key::decode(&entry.key).map_err(|e| e.to_string())?;
            records.insert(id, Record::decode(&entry.value).map_err(|e| e.to_string())?);
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
        // Its content listeners are gone with it: other nodes stop sending to it.
        if let Some(content) = self.content.get() {
            let _ = tokio::time::timeout(Duration::from_secs(2), content.withdraw_own()).await;
        }
        // And its relay clients: they no longer count elsewhere.
        if let Some(relay) = self.relay.get() {
            let _ = tokio::time::timeout(Duration::from_secs(2), relay.withdraw_figures()).await;
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
