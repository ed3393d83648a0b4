//! Builtin users and their ACLs on every node: one JetStream stream that keeps the last
//! message per user (`mesgd.users.<key>`, `max_messages_per_subject = 1`), the user's
//! [`ReplicatedUser`] as JSON, or an empty payload once the user was removed.
//!
//! Each node keeps its own SQLite store, written by its command line and REST API, and its
//! [`UserDirectory`] notices every change (its poll). The replicator here sits between that
//! store and the stream:
//!
//! - **out**: when the directory installs a new copy, every user that changed in it since the
//!   copy before, and differs from what the stream last said of it, is published (a removed
//!   one as an empty message). A change this node applied from the stream is what the stream
//!   said, so it is never sent back.
//! - **in**: one ordered consumer per node (not per user) follows the stream from the last
//!   message of every user, and writes each into the local store
//!   ([`mesgd_providers::builtin::Store::put_replicated`]), its own included; writing what the
//!   store already holds writes nothing. The directory is then told to look at once, and its
//!   usual path takes it from there: new rules for connected clients, revocation of a
//!   disabled or removed user's connections, dropped cached password checks.
//!
//! The stream's order is the one order: two nodes changing one user at once converge on the
//! change the stream stored last. A message from the stream never overwrites a change made
//! here that has not gone out yet (the store holds something other than what the replicator
//! last wrote or saw): that change is published next and wins. On joining, a node first applies what the
//! stream holds (the stream wins over its own copy of a user), then publishes the users only
//! it has. Every few seconds the replicator compares the store with the stream again, which
//! retries what failed (NATS down, a store error).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, Context, consumer, stream};
use futures_util::StreamExt;
use mesgd_core::cluster::client_key;
use mesgd_providers::builtin::{ReplicatedUser, UserDirectory, UserRecord};
use tokio::task::JoinHandle;

use crate::stats::ClusterStats;

/// The subjects' prefix: a user's subject is `mesgd.users.<client_key of the username>`.
const PREFIX: &str = "mesgd.users";

/// How often the store is compared with the stream regardless of changes.
const RECONCILE: Duration = Duration::from_secs(5);

/// How long one publish may wait for the stream's acknowledgement.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// What the stream last said of each user: `None` once removed.
type Known = HashMap<String, Option<ReplicatedUser>>;

/// The stream of users, created if it does not exist.
pub(crate) async fn stream(
    js: &Context,
    name: &str,
    replicas: usize,
) -> Result<stream::Stream, crate::StartError> {
    let config = stream::Config {
        name: name.to_owned(),
        subjects: vec![format!("{PREFIX}.>")],
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        description: Some("mesgd builtin users: the last state of each".to_owned()),
        ..Default::default()
    };
    crate::streams::get_or_create(js, config).await.map_err(crate::StartError::Users)
}

/// Applies what the stream holds to the local store (waiting at most `load_timeout` for it),
/// publishes the users only this node has, and then keeps both in step until the node stops.
pub(crate) async fn start(
    js: Context,
    stream: &stream::Stream,
    directory: Arc<UserDirectory>,
    stats: Arc<ClusterStats>,
    load_timeout: Duration,
) -> Result<JoinHandle<()>, crate::StartError> {
    let config = consumer::pull::OrderedConfig {
        filter_subject: format!("{PREFIX}.>"),
        deliver_policy: consumer::DeliverPolicy::LastPerSubject,
        description: Some("mesgd node: builtin users".to_owned()),
        ..Default::default()
    };
    let error = |e: &dyn std::fmt::Display| crate::StartError::Users(e.to_string());
    let mut consumer = stream.create_consumer(config).await.map_err(|e| error(&e))?;
    let mut pending = consumer.info().await.map_err(|e| error(&e))?.num_pending;
    let mut messages = consumer.messages().await.map_err(|e| error(&e))?;
    let mut replicator = Replicator {
        js,
        directory,
        stats,
        known: Known::new(),
        seen: Arc::default(),
        unsent: HashSet::new(),
        base: Known::new(),
    };
    let loaded = tokio::time::timeout(load_timeout, async {
        while pending > 0 {
            let Some(Ok(m)) = messages.next().await else { break };
            pending = m.info().map(|i| i.pending).unwrap_or(0);
            replicator.received(&m).await;
        }
    })
    .await;
    if loaded.is_err() {
        tracing::warn!(
            "cluster: the builtin users in the stream were not all loaded in time; the rest arrive later"
        );
    }
    replicator.directory.sync().await;
    replicator.seen = replicator.directory.records();
    // Users only this node has join the cluster; those the stream has are the stream's.
    let only_here: Vec<Arc<UserRecord>> = replicator
        .seen
        .iter()
        .filter(|(name, _)| !replicator.known.contains_key(*name))
        .map(|(_, record)| record.clone())
        .collect();
    for record in only_here {
        replicator.publish(&record.username, Some(ReplicatedUser::of(&record))).await;
    }
    Ok(tokio::spawn(replicator.run(messages)))
}

struct Replicator {
    js: Context,
    directory: Arc<UserDirectory>,
    stats: Arc<ClusterStats>,
    known: Known,
    /// The directory's copy when the replicator last looked.
    seen: Arc<HashMap<String, Arc<UserRecord>>>,
    /// Users changed here whose publish failed: the store has the newer state.
    unsent: HashSet<String>,
    /// What the store held of each user when the replicator last knew it (what it wrote, or
    /// what the directory showed it): a store that holds something else has a local change
    /// not yet published, which a message from the stream must not overwrite.
    base: Known,
}

impl Replicator {
    async fn run(mut self, mut messages: consumer::pull::Ordered) {
        let mut changes = self.directory.changes();
        let mut reconcile = tokio::time::interval(RECONCILE);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                next = messages.next() => match next {
                    Some(Ok(m)) => self.received(&m).await,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "cluster: builtin users stream consumer");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    None => return,
                },
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.local_changes().await;
                }
                _ = reconcile.tick() => self.reconcile().await,
            }
        }
    }

    /// A message of the stream: remembered, and written into the local store.
    async fn received(&mut self, m: &jetstream::Message) {
        let Some(name) = m.subject.as_str().strip_prefix(PREFIX).and_then(|s| s.strip_prefix('.')) else {
            ClusterStats::add(&self.stats.users_invalid, 1);
            return;
        };
        let Ok(username) = client_key::decode(name) else {
            ClusterStats::add(&self.stats.users_invalid, 1);
            return;
        };
        let user = if m.payload.is_empty() {
            None
        } else {
            match ReplicatedUser::decode(&m.payload) {
                Ok(user) if user.username == username => Some(user),
                Ok(_) => {
                    ClusterStats::add(&self.stats.users_invalid, 1);
                    tracing::warn!(user = %username, "cluster: a replicated user under another user's subject; ignored");
                    return;
                }
                Err(e) => {
                    ClusterStats::add(&self.stats.users_invalid, 1);
                    tracing::warn!(user = %username, error = %e, "cluster: unusable replicated user; ignored");
                    return;
                }
            }
        };
        self.known.insert(username.clone(), user.clone());
        if self.write_local(&username, user).await {
            // The directory's poll would find it within its interval; at once is better.
            self.directory.check_now();
        }
    }

    /// Writes what the stream says of `username` into the local store, unless the store holds
    /// a local change not yet published (then the change is published next and wins); whether
    /// it changed anything.
    async fn write_local(&mut self, username: &str, user: Option<ReplicatedUser>) -> bool {
        let directory = self.directory.clone();
        let name = username.to_owned();
        let base = match self.base.get(username) {
            Some(state) => state.clone(),
            None => self.seen.get(username).map(|r| ReplicatedUser::of(r)),
        };
        let wanted = user.clone();
        let written = tokio::task::spawn_blocking(move || {
            let store = directory.store();
            let current = store.user(&name).map_err(|e| e.to_string())?.map(|r| ReplicatedUser::of(&r));
            if current != base && current != wanted {
                return Ok(None);
            }
            match &wanted {
                Some(user) => store.put_replicated(user).map_err(|e| e.to_string()),
                None => store.remove_replicated(&name).map_err(|e| e.to_string()),
            }
            .map(Some)
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        match written {
            Ok(Some(changed)) => {
                self.base.insert(username.to_owned(), user);
                if changed {
                    ClusterStats::add(&self.stats.users_applied, 1);
                }
                changed
            }
            Ok(None) => {
                ClusterStats::add(&self.stats.users_kept_local, 1);
                false
            }
            Err(e) => {
                ClusterStats::add(&self.stats.users_apply_errors, 1);
                tracing::warn!(user = %username, error = %e, "cluster: cannot write a replicated user to the store; retried later");
                false
            }
        }
    }

    /// The directory installed a new copy: publishes what changed here and is not what the
    /// stream says.
    async fn local_changes(&mut self) {
        let now = self.directory.records();
        let before = std::mem::replace(&mut self.seen, now.clone());
        let names: HashSet<&String> = before.keys().chain(now.keys()).collect();
        let mut out = Vec::new();
        for name in names {
            let (old, new) = (before.get(name), now.get(name));
            if old == new {
                continue;
            }
            let state = new.map(|r| ReplicatedUser::of(r));
            self.base.insert(name.clone(), state.clone());
            let stream_says = self.known.get(name);
            match (&state, stream_says) {
                // Removed here, and the stream does not know the user (or knows it removed).
                (None, None | Some(None)) => {}
                (Some(user), Some(Some(said))) if user == said => {}
                _ => out.push((name.clone(), state)),
            }
        }
        for (name, state) in out {
            self.publish(&name, state).await;
        }
    }

    /// Brings the store and the stream level: a change here whose publish failed, and a user
    /// only the store has, are published again; a user the stream has and the store does not
    /// hold the same (a write that failed) is written again.
    async fn reconcile(&mut self) {
        let now = self.directory.records();
        let retry: Vec<String> = self.unsent.iter().cloned().collect();
        for name in retry {
            let state = now.get(&name).map(|r| ReplicatedUser::of(r));
            self.publish(&name, state).await;
        }
        let mut rewrite = Vec::new();
        for (name, said) in &self.known {
            if self.unsent.contains(name) {
                continue;
            }
            let same = match (said, now.get(name)) {
                (Some(user), Some(record)) => user.same_as(record),
                (None, None) => true,
                _ => false,
            };
            if !same {
                rewrite.push((name.clone(), said.clone()));
            }
        }
        let mut changed = false;
        for (name, said) in rewrite {
            changed |= self.write_local(&name, said).await;
        }
        if changed {
            self.directory.check_now();
        }
        let unpublished: Vec<Arc<UserRecord>> =
            now.iter().filter(|(name, _)| !self.known.contains_key(*name)).map(|(_, r)| r.clone()).collect();
        for record in unpublished {
            self.publish(&record.username, Some(ReplicatedUser::of(&record))).await;
        }
    }

    /// Stores `state` of `username` in the stream and remembers it as what the stream says.
    async fn publish(&mut self, username: &str, state: Option<ReplicatedUser>) {
        let Ok(key) = client_key::encode(username) else {
            ClusterStats::add(&self.stats.users_unreplicable, 1);
            return;
        };
        let payload = state.as_ref().map(ReplicatedUser::encode).unwrap_or_default();
        let stored = async {
            let ack = self
                .js
                .publish(format!("{PREFIX}.{key}"), payload.into())
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(PUBLISH_TIMEOUT, stored).await {
            Ok(Ok(_)) => {
                ClusterStats::add(&self.stats.users_published, 1);
                self.unsent.remove(username);
                self.known.insert(username.to_owned(), state);
            }
            Ok(Err(e)) => self.publish_failed(username, &e),
            Err(_) => self.publish_failed(username, "timed out"),
        }
    }

    fn publish_failed(&mut self, username: &str, why: &str) {
        self.unsent.insert(username.to_owned());
        ClusterStats::add(&self.stats.users_publish_errors, 1);
        tracing::warn!(user = %username, error = %why, "cluster: a user change was not stored in the cluster; retried later");
    }
}
