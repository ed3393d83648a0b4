//! Builtin users, their ACLs and their content-routing access, and the administrators and API
//! tokens, on every node: one JetStream stream that keeps the last message per user
//! (`mesgd.users.<key>`), content-routing role (`mesgd.users.role.<key>`), administrator
//! (`mesgd.users.admin.<key>`) and API token (`mesgd.users.apitoken.<key>`;
//! `max_messages_per_subject = 1`): the record as JSON ([`ReplicatedUser`], its direct patterns
//! and role names included, [`ReplicatedRole`], [`ReplicatedAdmin`], [`ReplicatedApiToken`]),
//! or an empty payload once it was removed. Every kind follows the same rules below (one
//! `Side` each); a node publishes a change of roles before the users that name them, and a
//! removed role after them.
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
//!   ([`mesgd_providers::builtin::Store::replace_replicated`]), its own included; writing what
//!   the store already holds writes nothing, and the read, the comparison and the write are one
//!   transaction, so a local command committing the same record meanwhile is never
//!   overwritten. The directory is then told to look at once, and its usual path takes it from
//!   there: new rules for connected clients, revocation of a disabled or removed user's
//!   connections, dropped cached password checks.
//!
//! The stream's order is the one order: two nodes changing one user at once converge on the
//! change the stream stored last. A message from the stream never overwrites a change made
//! here that has not gone out yet (the store holds something other than what the replicator
//! last wrote or saw): that change is published next and wins. On joining, a node first applies what the
//! stream holds (the stream wins over its own copy of a user), then publishes the users only
//! it has. Every few seconds the replicator compares the store with the stream again, which
//! retries what failed (NATS down, a store error), and checks that the stream it follows is
//! still the one it joined: a stream deleted (or lost with NATS's storage) is created again,
//! and a new stream is joined as at start, everything the node knew of the old one forgotten,
//! so that the node's records are published into it again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, Context, consumer, stream};
use mesgd_core::cluster::client_key;
use mesgd_providers::builtin::{
    Expect, Replaced, Replica, ReplicaError, ReplicatedAdmin, ReplicatedApiToken, ReplicatedRole,
    ReplicatedUser, Store, StoreError, UserDirectory,
};
use tokio::task::JoinHandle;

use crate::stats::ClusterStats;
use crate::streams::{Following, Found, Loading, Watched};

/// The subjects' prefix: a user's subject is `mesgd.users.<client_key of the username>`.
const PREFIX: &str = "mesgd.users";
/// A role's subject is `mesgd.users.role.<client_key of the name>`: four tokens, never a
/// user's three; an administrator's `mesgd.users.admin.<key>`, an API token's
/// `mesgd.users.apitoken.<key of its name>`.
const ROLE_TOKEN: &str = "role";
const ADMIN_TOKEN: &str = "admin";
const API_TOKEN_TOKEN: &str = "apitoken";

/// How often the store is compared with the stream regardless of changes.
const RECONCILE: Duration = Duration::from_secs(5);

/// How long one publish may wait for the stream's acknowledgement.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// The configuration of the stream of users named `name`.
pub(crate) fn stream_config(name: &str, replicas: usize) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: vec![format!("{PREFIX}.>")],
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        description: Some("mesgd builtin users and content-routing roles: the last state of each".to_owned()),
        ..Default::default()
    }
}

/// The stream of users, created if it does not exist.
pub(crate) async fn stream(
    js: &Context,
    config: stream::Config,
    patience: Duration,
) -> Result<stream::Stream, crate::StartError> {
    crate::streams::get_or_create(js, config, patience).await.map_err(crate::StartError::Users)
}

/// Applies what the stream holds to the local store (waiting at most `load_timeout` for it),
/// publishes the users and roles only this node has, and then keeps both in step until the
/// node stops. `config` is the stream's (from [`stream_config`]): a stream that was deleted is
/// created again with it.
pub(crate) async fn start(
    js: Context,
    stream: stream::Stream,
    config: stream::Config,
    directory: Arc<UserDirectory>,
    stats: Arc<ClusterStats>,
    load_timeout: Duration,
) -> Result<JoinHandle<()>, crate::StartError> {
    let mut replicator = Replicator {
        node: Node { js, directory, stats },
        users: Side::default(),
        roles: Side::default(),
        admins: Side::default(),
        api_tokens: Side::default(),
        followed: Followed { watched: Watched::new(config, &stream), load_timeout },
    };
    // Boxed: the join's state (the consumer, the store's snapshots) is large, and the node's
    // start awaits it inline.
    let messages = Box::pin(replicator.join(&stream)).await.map_err(crate::StartError::Users)?;
    Ok(tokio::spawn(replicator.run(messages)))
}

/// The stream the replicator follows, and how long a join waits for its records.
struct Followed {
    watched: Watched,
    load_timeout: Duration,
}

/// What the two sides share: the connection, the store, the counters (users and roles are
/// counted together in the `users_*` counters).
struct Node {
    js: Context,
    directory: Arc<UserDirectory>,
    stats: Arc<ClusterStats>,
}

/// One kind of record in the stream: users, roles, administrators or API tokens.
trait Kind: Send + 'static {
    type Value: Replica + Clone + Send + Sync + 'static;
    /// What the log lines call it.
    const NAME: &'static str;
    /// The subject of the record named `key` (already escaped).
    fn subject(key: &str) -> String;
    /// Reads the wire form, checking every field as the store would.
    fn parse(bytes: &[u8]) -> Result<Self::Value, String>;
    /// The name a record is stored (and its subject keyed) under.
    fn name_of(value: &Self::Value) -> &str;
    fn encode(value: &Self::Value) -> Vec<u8>;
    /// Reads a message of the subject of record `name`: it must hold that record.
    fn decode(bytes: &[u8], name: &str) -> Result<Self::Value, String> {
        let value = Self::parse(bytes)?;
        if Self::name_of(&value) != name {
            return Err(format!("a {} under another's subject", Self::NAME));
        }
        Ok(value)
    }
    /// Every record the node has now, by name.
    fn snapshot(node: &Node) -> impl Future<Output = Option<HashMap<String, Self::Value>>> + Send;
    /// Whether a record the stream does not know is published on its own: an empty role is
    /// not ([`Replica::is_placeholder`]), since the users that hold it bring it (a node that
    /// writes such a user makes the role, empty, and must not send that empty role over the
    /// real one on its way).
    fn travels_alone(value: &Self::Value) -> bool {
        !value.is_placeholder()
    }
}

struct Users;

impl Kind for Users {
    type Value = ReplicatedUser;
    const NAME: &'static str = "user";

    fn subject(key: &str) -> String {
        format!("{PREFIX}.{key}")
    }

    fn parse(bytes: &[u8]) -> Result<ReplicatedUser, String> {
        ReplicatedUser::decode(bytes).map_err(|e| e.to_string())
    }

    fn name_of(value: &ReplicatedUser) -> &str {
        &value.username
    }

    fn encode(user: &ReplicatedUser) -> Vec<u8> {
        user.encode()
    }

    async fn snapshot(node: &Node) -> Option<HashMap<String, ReplicatedUser>> {
        // The directory's copy: in memory, what its last poll installed.
        let records = node.directory.records();
        Some(records.iter().map(|(name, record)| (name.clone(), ReplicatedUser::of(record))).collect())
    }
}

struct Roles;

impl Kind for Roles {
    type Value = ReplicatedRole;
    const NAME: &'static str = "role";

    fn subject(key: &str) -> String {
        format!("{PREFIX}.{ROLE_TOKEN}.{key}")
    }

    fn parse(bytes: &[u8]) -> Result<ReplicatedRole, String> {
        ReplicatedRole::decode(bytes).map_err(|e| e.to_string())
    }

    fn name_of(value: &ReplicatedRole) -> &str {
        &value.name
    }

    fn encode(role: &ReplicatedRole) -> Vec<u8> {
        role.encode()
    }

    async fn snapshot(node: &Node) -> Option<HashMap<String, ReplicatedRole>> {
        read_all(node, Self::NAME, Store::replicated_roles).await
    }
}

/// Every record of one kind the store holds, read on a blocking thread; `None` (logged) if the
/// store cannot be read.
async fn read_all<V: Send + 'static>(
    node: &Node,
    what: &'static str,
    read: fn(&Store) -> Result<HashMap<String, V>, StoreError>,
) -> Option<HashMap<String, V>> {
    let directory = node.directory.clone();
    match tokio::task::spawn_blocking(move || read(directory.store())).await {
        Ok(Ok(records)) => Some(records),
        Ok(Err(e)) => {
            tracing::warn!(kind = what, error = %e, "cluster: cannot read the store; retried later");
            None
        }
        Err(_) => None,
    }
}

struct Admins;

impl Kind for Admins {
    type Value = ReplicatedAdmin;
    const NAME: &'static str = "administrator";

    fn subject(key: &str) -> String {
        format!("{PREFIX}.{ADMIN_TOKEN}.{key}")
    }

    fn parse(bytes: &[u8]) -> Result<ReplicatedAdmin, String> {
        ReplicatedAdmin::decode(bytes).map_err(|e| e.to_string())
    }

    fn name_of(value: &ReplicatedAdmin) -> &str {
        &value.name
    }

    fn encode(admin: &ReplicatedAdmin) -> Vec<u8> {
        admin.encode()
    }

    async fn snapshot(node: &Node) -> Option<HashMap<String, ReplicatedAdmin>> {
        read_all(node, Self::NAME, Store::replicated_admins).await
    }
}

struct ApiTokens;

impl Kind for ApiTokens {
    type Value = ReplicatedApiToken;
    const NAME: &'static str = "API token";

    fn subject(key: &str) -> String {
        format!("{PREFIX}.{API_TOKEN_TOKEN}.{key}")
    }

    fn parse(bytes: &[u8]) -> Result<ReplicatedApiToken, String> {
        ReplicatedApiToken::decode(bytes).map_err(|e| e.to_string())
    }

    fn name_of(value: &ReplicatedApiToken) -> &str {
        &value.name
    }

    fn encode(token: &ReplicatedApiToken) -> Vec<u8> {
        token.encode()
    }

    async fn snapshot(node: &Node) -> Option<HashMap<String, ReplicatedApiToken>> {
        read_all(node, Self::NAME, Store::replicated_api_tokens).await
    }
}

/// The replicator's knowledge of one kind of record.
struct Side<K: Kind> {
    /// What the stream last said of each record: `None` once removed.
    known: HashMap<String, Option<K::Value>>,
    /// The node's records when the replicator last looked.
    seen: HashMap<String, K::Value>,
    /// Records changed here whose publish failed: the store has the newer state.
    unsent: HashSet<String>,
    /// The stream sequence of this node's last stored publish of each record whose echo has
    /// not come back yet: a message of the record with a lower sequence is an older state,
    /// already replaced in the stream (above all the echo of an earlier publish of this node),
    /// and is not written.
    published: HashMap<String, u64>,
    /// What the store held of each record when the replicator last knew it (what it wrote, or
    /// what it saw there): a store that holds something else has a local change not yet
    /// published, which a message from the stream must not overwrite.
    base: HashMap<String, Option<K::Value>>,
}

impl<K: Kind> Default for Side<K> {
    fn default() -> Self {
        Side {
            known: HashMap::new(),
            seen: HashMap::new(),
            unsent: HashSet::new(),
            published: HashMap::new(),
            base: HashMap::new(),
        }
    }
}

impl<K: Kind> Side<K> {
    /// A message of the stream for record `key`: remembered, and written into the local
    /// store; whether the store changed.
    async fn received(&mut self, node: &Node, key: &str, payload: &[u8], sequence: u64) -> bool {
        let Ok(name) = client_key::decode(key) else {
            ClusterStats::add(&node.stats.users_invalid, 1);
            return false;
        };
        match self.published.get(&name) {
            // Without this, the echo of the first of two quick changes made here undid the
            // second on this node until the second's echo came.
            Some(&last) if sequence < last => return false,
            // The echo of the last publish (or later): nothing older is on its way.
            Some(_) => {
                self.published.remove(&name);
            }
            None => {}
        }
        let value = if payload.is_empty() {
            None
        } else {
            match K::decode(payload, &name) {
                Ok(value) => Some(value),
                Err(e) => {
                    ClusterStats::add(&node.stats.users_invalid, 1);
                    tracing::warn!(kind = K::NAME, name = %name, error = %e, "cluster: unusable replicated record; ignored");
                    return false;
                }
            }
        };
        self.known.insert(name.clone(), value.clone());
        self.write_local(node, &name, value).await
    }

    /// Writes what the stream says of `name` into the local store, unless the store holds a
    /// local change not yet published (then the change is published next and wins); whether
    /// it changed anything.
    async fn write_local(&mut self, node: &Node, name: &str, value: Option<K::Value>) -> bool {
        if self.unsent.contains(name) {
            // A change made here whose publish failed: the store holds it, and the retry
            // publishes what the store holds, so writing now would send the stream's older
            // state back as if it were this node's change.
            ClusterStats::add(&node.stats.users_kept_local, 1);
            return false;
        }
        let directory = node.directory.clone();
        let owned = name.to_owned();
        let base = match self.base.get(name) {
            Some(state) => state.clone(),
            None => self.seen.get(name).cloned(),
        };
        if base == value {
            // The stream says what the store held when this side last knew it: above all the
            // echo of this node's own publish. Nothing to write: the store holds it still, or
            // holds a local change that wins (the transaction below would find the same).
            return false;
        }
        let wanted = value.clone();
        let written = tokio::task::spawn_blocking(move || {
            // One transaction from the read to the write: a local command that commits the same
            // record meanwhile is either seen here (and kept) or comes after (and is published).
            directory.store().replace_replicated(&owned, Expect::Holds(base.as_ref()), wanted.as_ref())
        })
        .await
        .unwrap_or_else(|e| Err(ReplicaError::Inconsistent(e.to_string())));
        match written {
            Ok(done @ (Replaced::Written | Replaced::Unchanged)) => {
                self.base.insert(name.to_owned(), value);
                let changed = done == Replaced::Written;
                if changed {
                    ClusterStats::add(&node.stats.users_applied, 1);
                }
                changed
            }
            Ok(Replaced::KeptLocal) => {
                ClusterStats::add(&node.stats.users_kept_local, 1);
                false
            }
            Err(e) => {
                ClusterStats::add(&node.stats.users_apply_errors, 1);
                tracing::warn!(kind = K::NAME, name = %name, error = %e, "cluster: cannot write a replicated record to the store; retried later");
                false
            }
        }
    }

    /// The node's records are now `now`: what changed here and is not what the stream says,
    /// to be published.
    ///
    /// `now` can lag the store (the users are the directory's copy): a record this side just
    /// wrote from the stream may show its state before that write there. Taken for a local
    /// change, that older state was published and undid the newer one everywhere. So each
    /// changed record is read from the store, and what the store holds is a local change only
    /// if it is not what this side last wrote or saw there.
    async fn local_changes(
        &mut self,
        node: &Node,
        now: HashMap<String, K::Value>,
    ) -> Vec<(String, Option<K::Value>)> {
        let before = std::mem::replace(&mut self.seen, now);
        let names: HashSet<&String> = before.keys().chain(self.seen.keys()).collect();
        let changed: Vec<String> =
            names.into_iter().filter(|name| before.get(*name) != self.seen.get(*name)).cloned().collect();
        if changed.is_empty() {
            return Vec::new();
        }
        let directory = node.directory.clone();
        let wanted = changed.clone();
        let read =
            tokio::task::spawn_blocking(move || directory.store().replicated_records::<K::Value>(&wanted))
                .await
                .map_err(|e| e.to_string())
                .and_then(|read| read.map_err(|e| e.to_string()));
        let mut current = match read {
            Ok(current) => current,
            Err(e) => {
                // Unread, the copy's state is the best there is: the older behaviour.
                tracing::warn!(kind = K::NAME, error = %e, "cluster: cannot read the store; using the broker's copy");
                changed.iter().map(|name| (name.clone(), self.seen.get(name).cloned())).collect()
            }
        };
        let mut out = Vec::new();
        for name in changed {
            let state = current.remove(&name).flatten();
            if self.base.get(&name) == Some(&state) {
                continue;
            }
            self.base.insert(name.clone(), state.clone());
            match (&state, self.known.get(&name)) {
                // Removed here, and the stream does not know it (or knows it removed).
                (None, None | Some(None)) => {}
                (Some(value), Some(Some(said))) if value == said => {}
                (Some(value), None) if !K::travels_alone(value) => {}
                _ => out.push((name, state)),
            }
        }
        out
    }

    /// Brings the store (as `now`) and the stream level: a change here whose publish failed,
    /// and a record only the store has, are published again; a record the stream has and the
    /// store does not hold the same (a write that failed) is written again. Whether the store
    /// changed.
    async fn reconcile(&mut self, node: &Node, now: &HashMap<String, K::Value>) -> bool {
        let retry: Vec<String> = self.unsent.iter().cloned().collect();
        for name in retry {
            self.publish(node, &name, now.get(&name).cloned()).await;
        }
        let rewrite: Vec<(String, Option<K::Value>)> = self
            .known
            .iter()
            .filter(|(name, said)| !self.unsent.contains(*name) && now.get(*name) != said.as_ref())
            .map(|(name, said)| (name.clone(), said.clone()))
            .collect();
        let mut changed = false;
        for (name, said) in rewrite {
            changed |= self.write_local(node, &name, said).await;
        }
        self.publish_unknown_in(node, now).await;
        changed
    }

    /// Publishes the records in `seen` the stream does not know.
    async fn publish_unknown(&mut self, node: &Node) {
        let seen = self.seen.clone();
        self.publish_unknown_in(node, &seen).await;
    }

    async fn publish_unknown_in(&mut self, node: &Node, records: &HashMap<String, K::Value>) {
        let unpublished: Vec<(String, K::Value)> = records
            .iter()
            .filter(|(name, value)| !self.known.contains_key(*name) && K::travels_alone(value))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        for (name, value) in unpublished {
            self.publish(node, &name, Some(value)).await;
        }
    }

    /// Stores `state` of `name` in the stream and remembers it as what the stream says.
    async fn publish(&mut self, node: &Node, name: &str, state: Option<K::Value>) {
        let Ok(key) = client_key::encode(name) else {
            ClusterStats::add(&node.stats.users_unreplicable, 1);
            return;
        };
        let payload = state.as_ref().map(K::encode).unwrap_or_default();
        let stored = async {
            let ack = node.js.publish(K::subject(&key), payload.into()).await.map_err(|e| e.to_string())?;
            ack.await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(PUBLISH_TIMEOUT, stored).await {
            Ok(Ok(ack)) => {
                ClusterStats::add(&node.stats.users_published, 1);
                self.published.insert(name.to_owned(), ack.sequence);
                self.unsent.remove(name);
                self.known.insert(name.to_owned(), state);
            }
            Ok(Err(e)) => self.publish_failed(node, name, &e),
            Err(_) => self.publish_failed(node, name, "timed out"),
        }
    }

    /// The stream followed was replaced by a new one, which holds none of what the old one
    /// said: what it said, and the echoes awaited from it, are forgotten. Local changes not yet
    /// published stay to be published.
    fn forget_stream(&mut self) {
        self.known.clear();
        self.published.clear();
    }

    fn publish_failed(&mut self, node: &Node, name: &str, why: &str) {
        self.unsent.insert(name.to_owned());
        ClusterStats::add(&node.stats.users_publish_errors, 1);
        tracing::warn!(kind = K::NAME, name = %name, error = %why, "cluster: a change was not stored in the cluster; retried later");
    }
}

struct Replicator {
    node: Node,
    users: Side<Users>,
    roles: Side<Roles>,
    admins: Side<Admins>,
    api_tokens: Side<ApiTokens>,
    followed: Followed,
}

impl Replicator {
    /// Follows `stream` from the last message of every record: applies what it holds to the
    /// store (the stream wins over this node's copy of a record), waiting at most the load
    /// timeout, then publishes the records only this node has. The consumer's messages are
    /// what follows.
    async fn join(&mut self, stream: &stream::Stream) -> Result<consumer::pull::Ordered, String> {
        let config = consumer::pull::OrderedConfig {
            filter_subject: format!("{PREFIX}.>"),
            deliver_policy: consumer::DeliverPolicy::LastPerSubject,
            description: Some("mesgd node: builtin users".to_owned()),
            ..Default::default()
        };
        let mut loading = Loading::start(stream, config).await?;
        // What the store holds before the stream is applied: a record of the stream replaces
        // this node's copy of it instead of being kept as a local change.
        self.node.directory.sync().await;
        self.look_at_store().await;
        let loaded = tokio::time::timeout(self.followed.load_timeout, async {
            while let Some(m) = loading.next().await {
                self.received(&m).await;
            }
        })
        .await;
        if loaded.is_err() {
            tracing::warn!(
                "cluster: the builtin users in the stream were not all loaded in time; the rest arrive later"
            );
        }
        self.node.directory.sync().await;
        self.look_at_store().await;
        // Records only this node has join the cluster; those the stream has are the stream's.
        // Roles first, so that a user's roles are there before it.
        self.roles.publish_unknown(&self.node).await;
        self.users.publish_unknown(&self.node).await;
        self.admins.publish_unknown(&self.node).await;
        self.api_tokens.publish_unknown(&self.node).await;
        Ok(loading.into_messages())
    }

    /// Joins `stream`, a new stream in place of the one followed, which holds none of the
    /// records the old one did: everything this node knew of the stream is forgotten, so that
    /// its records are published again (those another node has put there first are taken).
    async fn rejoin(&mut self, stream: stream::Stream) -> Option<consumer::pull::Ordered> {
        self.users.forget_stream();
        self.roles.forget_stream();
        self.admins.forget_stream();
        self.api_tokens.forget_stream();
        match Box::pin(self.join(&stream)).await {
            Ok(messages) => {
                self.followed.watched.following(&stream);
                ClusterStats::add(&self.node.stats.users_rejoins, 1);
                tracing::info!(stream = %self.followed.watched.name(), "cluster: following the new stream of builtin users");
                Some(messages)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cluster: cannot follow the new stream of builtin users; trying again later");
                None
            }
        }
    }

    /// Takes the store's records as what this side has seen of them.
    async fn look_at_store(&mut self) {
        self.users.seen = Users::snapshot(&self.node).await.unwrap_or_default();
        self.roles.seen = Roles::snapshot(&self.node).await.unwrap_or_default();
        self.admins.seen = Admins::snapshot(&self.node).await.unwrap_or_default();
        self.api_tokens.seen = ApiTokens::snapshot(&self.node).await.unwrap_or_default();
    }

    async fn run(mut self, messages: consumer::pull::Ordered) {
        let mut changes = self.node.directory.changes();
        let mut reconcile = tokio::time::interval(RECONCILE);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut following = Following::new("builtin users stream", messages);
        loop {
            tokio::select! {
                m = following.next() => self.received(&m).await,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.local_changes().await;
                }
                _ = reconcile.tick() => {
                    let lost = following.checked();
                    if let Found::Replaced(stream) = self.followed.watched.check(&self.node.js, PUBLISH_TIMEOUT, lost).await {
                        following.follow(self.rejoin(*stream).await);
                    }
                    self.reconcile().await;
                }
            }
        }
    }

    /// A message of the stream, to the side its subject names.
    async fn received(&mut self, m: &jetstream::Message) {
        let Some(rest) = m.subject.as_str().strip_prefix(PREFIX).and_then(|s| s.strip_prefix('.')) else {
            ClusterStats::add(&self.node.stats.users_invalid, 1);
            return;
        };
        let sequence = m.info().map(|i| i.stream_sequence).unwrap_or(0);
        let (node, payload) = (&self.node, &m.payload);
        // A user's key is one token; the other kinds have a kind token before theirs.
        let changed = match rest.split_once('.') {
            None => self.users.received(node, rest, payload, sequence).await,
            Some((ROLE_TOKEN, key)) => self.roles.received(node, key, payload, sequence).await,
            Some((ADMIN_TOKEN, key)) => self.admins.received(node, key, payload, sequence).await,
            Some((API_TOKEN_TOKEN, key)) => self.api_tokens.received(node, key, payload, sequence).await,
            Some(_) => {
                ClusterStats::add(&self.node.stats.users_invalid, 1);
                false
            }
        };
        if changed {
            // The directory's poll would find it within its interval; at once is better.
            self.node.directory.check_now();
        }
    }

    /// The directory installed a new copy: publishes what changed here and is not what the
    /// stream says; roles that are new or changed before the users (who may name them),
    /// removed ones after.
    async fn local_changes(&mut self) {
        let roles_out = match Roles::snapshot(&self.node).await {
            Some(now) => self.roles.local_changes(&self.node, now).await,
            None => Vec::new(),
        };
        let users_out = match Users::snapshot(&self.node).await {
            Some(now) => self.users.local_changes(&self.node, now).await,
            None => Vec::new(),
        };
        let (removed_roles, roles): (Vec<_>, Vec<_>) = roles_out.into_iter().partition(|(_, s)| s.is_none());
        for (name, state) in roles {
            self.roles.publish(&self.node, &name, state).await;
        }
        for (name, state) in users_out {
            self.users.publish(&self.node, &name, state).await;
        }
        for (name, state) in removed_roles {
            self.roles.publish(&self.node, &name, state).await;
        }
        if let Some(now) = Admins::snapshot(&self.node).await {
            for (name, state) in self.admins.local_changes(&self.node, now).await {
                self.admins.publish(&self.node, &name, state).await;
            }
        }
        if let Some(now) = ApiTokens::snapshot(&self.node).await {
            for (name, state) in self.api_tokens.local_changes(&self.node, now).await {
                self.api_tokens.publish(&self.node, &name, state).await;
            }
        }
    }

    async fn reconcile(&mut self) {
        // A change whose notice found the store unreadable (its kind's snapshot failed) is
        // still in the store and not in `seen`: looking again here publishes it, instead of
        // waiting for the next change of that kind.
        self.local_changes().await;
        let mut changed = false;
        if let Some(now) = Roles::snapshot(&self.node).await {
            changed |= self.roles.reconcile(&self.node, &now).await;
        }
        if let Some(now) = Users::snapshot(&self.node).await {
            changed |= self.users.reconcile(&self.node, &now).await;
        }
        if let Some(now) = Admins::snapshot(&self.node).await {
            changed |= self.admins.reconcile(&self.node, &now).await;
        }
        if let Some(now) = ApiTokens::snapshot(&self.node).await {
            changed |= self.api_tokens.reconcile(&self.node, &now).await;
        }
        if changed {
            self.node.directory.check_now();
        }
    }
}
