//! The token key store the same on every node: claim, grant and anonymous tokens are signed
//! with the private keys in `<storage.dir>/keys` ([`mesgd_providers::tokens::KeyStore`]), and
//! behind a load balancer a token issued by one node must verify on every other, and a
//! rotation on one (`--grace 0s` for a leaked key above all) must hold on all of them.
//!
//! The subject `mesgd.logins.pki` of the logins stream (one message per subject) holds the
//! whole store ([`SharedKeys`]: `keys.json` and the private keys it names, a few KiB):
//!
//! - **joining**: a node reads it and makes its own store that one (a node whose store differs
//!   loses its own keys, and the tokens they signed); if there is none, it stores its own with
//!   `Nats-Expected-Last-Subject-Sequence: 0`, a compare-and-swap, so nodes that start at once
//!   agree on one store.
//! - **out**: every second the node compares its `keys.json` with the version the cluster
//!   holds; a change here (`mesgd keys rotate`, or a first store made by `mesgd forge`) is
//!   published with the sequence it replaces as the expected one. A node that loses that race
//!   keeps the cluster's store (its rotation is undone, logged as an error: rotate again).
//! - **in**: one ordered consumer per node follows the subject and imports each new store,
//!   then tells the node to reload its keys at once.
//! - **the stream deleted or lost**: checked every few seconds ([`crate::streams::Watched`]);
//!   a new logins stream is joined as at start.
//!
//! The store holds private keys: the NATS connections should be authenticated and encrypted,
//! as for the users' password hashes and the login key. `share_token_keys = false` leaves
//! every node its own store.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::HeaderMap;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, Context, consumer, stream};
use mesgd_providers::tokens::{KeysVersion, SharedKeys};
use tokio::task::JoinHandle;

use crate::StartError;
use crate::stats::ClusterStats;
use crate::streams::{Following, Found, Watched};

/// The subject of the cluster's token key store.
pub(crate) const SUBJECT: &str = "mesgd.logins.pki";

/// How often this node's `keys.json` is compared with the cluster's version.
const WATCH: Duration = Duration::from_secs(1);
/// How often the logins stream is checked (deleted, or replaced by a new one).
const CHECK_STREAM: Duration = Duration::from_secs(5);
/// How long one publish may wait for the stream's acknowledgement.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Called (on a blocking thread) after the node's key store was replaced, so that it reloads
/// its keys at once.
pub type ReloadKeys = Arc<dyn Fn() + Send + Sync>;

/// Makes the store in `dir` the cluster's (or the cluster's this one), then keeps both in step
/// until the node stops.
pub(crate) async fn start(
    js: Context,
    stream: stream::Stream,
    config: stream::Config,
    dir: PathBuf,
    reload: ReloadKeys,
    stats: Arc<ClusterStats>,
) -> Result<JoinHandle<()>, StartError> {
    let watched = Watched::new(config, &stream);
    let mut keys = TokenKeys { js, dir, reload, stats, sequence: 0, version: None, watched };
    let messages = Box::pin(keys.join(&stream)).await?;
    Ok(tokio::spawn(keys.run(messages)))
}

struct TokenKeys {
    js: Context,
    dir: PathBuf,
    reload: ReloadKeys,
    stats: Arc<ClusterStats>,
    /// The stream sequence of the cluster's store as this node last saw it (0: none yet).
    sequence: u64,
    /// Its version.
    version: Option<KeysVersion>,
    /// The logins stream, checked every few seconds: a deleted one is created again and a new
    /// one joined, as at start.
    watched: Watched,
}

impl TokenKeys {
    /// Takes the store `stream` holds (or stores this node's there when it holds none), then
    /// follows the subject; the consumer's messages are what follows.
    async fn join(&mut self, stream: &stream::Stream) -> Result<consumer::pull::Ordered, StartError> {
        self.agree(stream).await?;
        let config = consumer::pull::OrderedConfig {
            filter_subject: SUBJECT.to_owned(),
            deliver_policy: consumer::DeliverPolicy::LastPerSubject,
            description: Some("mesgd node: token keys".to_owned()),
            ..Default::default()
        };
        let error = |e: &dyn std::fmt::Display| StartError::Logins(format!("token keys: {e}"));
        let consumer = stream.create_consumer(config).await.map_err(|e| error(&e))?;
        consumer.messages().await.map_err(|e| error(&e))
    }

    /// Joins `stream`, a new logins stream in place of the one followed: it holds no store, or
    /// the one a node that noticed first put there (the cluster's, unless a node started
    /// meanwhile stored its own: then every node takes that one).
    async fn rejoin(&mut self, stream: stream::Stream) -> Option<consumer::pull::Ordered> {
        self.sequence = 0;
        match Box::pin(self.join(&stream)).await {
            Ok(messages) => {
                self.watched.following(&stream);
                ClusterStats::add(&self.stats.token_keys_rejoins, 1);
                tracing::info!(stream = %self.watched.name(), "cluster: following the token keys in the new logins stream");
                Some(messages)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cluster: cannot follow the token keys in the new logins stream; trying again later");
                None
            }
        }
    }

    /// Reads the cluster's store and imports it, or stores this node's own when there is none.
    async fn agree(&mut self, stream: &stream::Stream) -> Result<(), StartError> {
        let error = |why: String| StartError::Logins(why);
        // Twice at most: a node that loses the race to store its keys reads the winner's.
        for _ in 0..2 {
            match stream.get_last_raw_message_by_subject(SUBJECT).await {
                Ok(message) => {
                    let shared = SharedKeys::decode(&message.payload).map_err(|e| {
                        error(format!(
                            "the token keys on {SUBJECT} cannot be used ({e}); purge that subject so that a \
                             node stores its keys again (every claim, grant and anonymous token then fails)"
                        ))
                    })?;
                    self.import(shared, message.sequence)
                        .await
                        .map_err(|e| error(format!("cannot store the cluster's token keys: {e}")))?;
                    return Ok(());
                }
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {
                    match self.publish_local().await {
                        Published::Stored | Published::Nothing => return Ok(()),
                        // Another node stored its keys first: read them.
                        Published::Raced => continue,
                        Published::Failed(why) => {
                            return Err(error(format!("cannot store the token keys: {why}")));
                        }
                    }
                }
                Err(e) => return Err(error(format!("cannot read the token keys: {e}"))),
            }
        }
        Err(error("the token keys changed while this node was reading them".to_owned()))
    }

    async fn run(mut self, messages: consumer::pull::Ordered) {
        let mut watch = tokio::time::interval(WATCH);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut check = tokio::time::interval(CHECK_STREAM);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut following = Following::new("token keys", messages);
        loop {
            tokio::select! {
                m = following.next() => self.received(&m).await,
                _ = watch.tick() => self.watch().await,
                _ = check.tick() => {
                    let lost = following.checked();
                    if let Found::Replaced(stream) = self.watched.check(&self.js, REQUEST_TIMEOUT, lost).await {
                        following.follow(self.rejoin(*stream).await);
                    }
                }
            }
        }
    }

    /// A store from the stream: imported unless it is the one this node already holds.
    async fn received(&mut self, m: &jetstream::Message) {
        let sequence = m.info().map(|i| i.stream_sequence).unwrap_or(0);
        if sequence != 0 && sequence <= self.sequence {
            return;
        }
        let shared = match SharedKeys::decode(&m.payload) {
            Ok(shared) => shared,
            Err(e) => {
                ClusterStats::add(&self.stats.token_keys_invalid, 1);
                tracing::error!(error = %e, "cluster: unusable token keys from the cluster; this node keeps its keys");
                return;
            }
        };
        let local = self.local_version().await;
        if local.is_some() && local != self.version && local != Some(shared.version()) {
            ClusterStats::add(&self.stats.token_keys_publish_errors, 1);
            tracing::error!(
                "cluster: another node changed the token keys while this node's own change had not gone out; \
                 the cluster's keys are in force here: run `mesgd keys rotate` again if this node's rotation was needed"
            );
        }
        if let Err(e) = self.import(shared, sequence).await {
            ClusterStats::add(&self.stats.token_keys_invalid, 1);
            tracing::error!(error = %e, "cluster: cannot store the cluster's token keys; this node keeps its keys");
        }
    }

    /// Makes the local store `shared` (stream sequence `sequence`) and reloads it if it changed.
    async fn import(&mut self, shared: SharedKeys, sequence: u64) -> Result<(), String> {
        let (dir, reload) = (self.dir.clone(), self.reload.clone());
        let version = shared.version();
        let changed = tokio::task::spawn_blocking(move || {
            let changed = shared.import(&dir, SystemTime::now())?;
            if changed {
                reload();
            }
            Ok::<_, mesgd_providers::tokens::KeyError>(changed)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        self.sequence = sequence;
        if changed {
            ClusterStats::add(&self.stats.token_keys_adopted, 1);
            tracing::info!(current = version.current_id(), "cluster: token keys from the cluster in force");
        }
        self.version = Some(version);
        Ok(())
    }

    /// Publishes a change of the local store.
    async fn watch(&mut self) {
        let local = self.local_version().await;
        if local.is_some() && local != self.version {
            match self.publish_local().await {
                Published::Stored | Published::Nothing => {}
                // The other node's store arrives through the consumer and wins.
                Published::Raced => {
                    ClusterStats::add(&self.stats.token_keys_publish_errors, 1);
                }
                Published::Failed(why) => {
                    ClusterStats::add(&self.stats.token_keys_publish_errors, 1);
                    tracing::warn!(error = %why, "cluster: a change of the token keys was not stored in the cluster; retried");
                }
            }
        }
    }

    async fn local_version(&self) -> Option<KeysVersion> {
        let dir = self.dir.clone();
        match tokio::task::spawn_blocking(move || KeysVersion::of(&dir)).await {
            Ok(Ok(version)) => version,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cluster: cannot read this node's token keys");
                None
            }
            Err(_) => None,
        }
    }

    /// Stores the local store in the stream in place of the one at `self.sequence`.
    async fn publish_local(&mut self) -> Published {
        let dir = self.dir.clone();
        let shared = match tokio::task::spawn_blocking(move || SharedKeys::export(&dir)).await {
            Ok(Ok(Some(shared))) => shared,
            Ok(Ok(None)) => return Published::Nothing,
            Ok(Err(e)) => return Published::Failed(e.to_string()),
            Err(e) => return Published::Failed(e.to_string()),
        };
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Expected-Last-Subject-Sequence", self.sequence.to_string().as_str());
        let stored = async {
            let ack = self
                .js
                .publish_with_headers(SUBJECT, headers, shared.encode().into())
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, stored).await {
            Ok(Ok(ack)) => {
                ClusterStats::add(&self.stats.token_keys_published, 1);
                tracing::info!(
                    current = shared.version().current_id(),
                    "cluster: this node's token keys stored in the cluster"
                );
                self.sequence = ack.sequence;
                self.version = Some(shared.version());
                Published::Stored
            }
            Ok(Err(e)) if e.contains("wrong last sequence") => Published::Raced,
            Ok(Err(e)) => Published::Failed(e),
            Err(_) => Published::Failed("timed out".to_owned()),
        }
    }
}

enum Published {
    Stored,
    /// There is no local store.
    Nothing,
    /// The stream holds a newer store than the one this node last saw.
    Raced,
    Failed(String),
}
