//! Wills of a node that dies: sent once, by the node that takes over its lease.
//!
//! A single broker sends a client's will when its connection ends without a DISCONNECT. A node
//! that is killed (`kill -9`, a crashed machine) ends nothing, so its clients' wills would be
//! lost. Two JetStream KV buckets prevent that:
//!
//! - **`wills_bucket`** (`mesgd_wills`): while a connection with a will is live, its will is
//!   kept under `<node>.<client key>` (the message with its headers as the cluster sends
//!   messages, the will delay and expiry, and the ACL the will is checked against when sent).
//!   The connection's end deletes it, whatever happened to the will then (sent, scheduled by
//!   this node, or dropped after a clean DISCONNECT): from then on only this node decides.
//! - **`nodes_bucket`** (`mesgd_nodes`): every node holds a lease, its record rewritten every
//!   `lease_ms / 3`. Every node watches the bucket; a lease not rewritten for `lease_ms` (on
//!   the watcher's own monotonic clock, so clocks need not agree) is taken over by
//!   compare-and-swap, `taken_by` naming the new holder. Only the node whose swap succeeded
//!   sends the dead node's wills, each after deleting its record by compare-and-swap: a will is
//!   sent at most once. A lease already taken by a node that then died is taken over again
//!   along with that node's.
//!
//! A node that restarts under its old name sends the wills its previous instance left (those
//! connections died with it) before it writes its new lease. A will with a delay whose client
//! is connected again somewhere when the lease is taken over is not sent (MQTT 5: the session
//! was resumed within the delay); one without a delay always is (the connection did end
//! abnormally). Wills are sent when the lease is taken over, so up to `lease_ms` after the node
//! died; a will a live node had scheduled for later (a delay that had not run out) is lost if
//! that node then dies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::kv::{self, Operation};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::acl::{Acl, Rule};
use mesgd_core::broker::Broker;
use mesgd_core::cluster::client_key;
use mesgd_core::cluster::wills::WillKeeper;
use mesgd_core::model::{SessionKey, Will};
use mesgd_core::topic::TopicName;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::content::ContentClusterStats;
use crate::live::Identity;
use crate::liveness::NodeLease;
use crate::lost::Renewals;
use crate::sessions::store::SessionStore;
use crate::stats::ClusterStats;
use crate::wire::{self, ExpiryAs};

/// How many will changes may wait for the bucket; past it a will is kept on this node only.
const QUEUE: usize = 8192;

/// A kept will, as stored.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WillRecord {
    instance: u64,
    generation: u64,
    client_id: String,
    topic: String,
    payload: String,
    headers: Vec<(String, String)>,
    expiry_interval: Option<u32>,
    delay_ms: u64,
    rules: Option<Vec<Rule>>,
    username: Option<String>,
}

/// A node's lease, as stored.
#[derive(Serialize, Deserialize, PartialEq, Eq, Debug, Clone)]
#[serde(deny_unknown_fields)]
struct Lease {
    instance: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    taken_by: Option<String>,
}

enum Change {
    Keep(Arc<str>, Box<WillRecord>),
    Release(Arc<str>, u64),
}

/// The broker's [`WillKeeper`]: queues each change for the task that writes the bucket.
#[derive(Debug)]
pub(crate) struct Keeper {
    queue: mpsc::Sender<Change>,
    me: Identity,
    broker: std::sync::Weak<Broker>,
    stats: Arc<ClusterStats>,
}

impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Keep(id, _) => write!(f, "Keep({id})"),
            Change::Release(id, g) => write!(f, "Release({id}, {g})"),
        }
    }
}

impl WillKeeper for Keeper {
    fn keep(&self, client_id: &Arc<str>, generation: u64, will: &Will, acl: &Acl) {
        let Some(broker) = self.broker.upgrade() else { return };
        let headers =
            wire::encode(&will.message, &self.me.node, (self.me.instance, 0), ExpiryAs::Deadline, |i| {
                broker.wall_time(i)
            });
        let (rules, username) = acl.source().map_or((None, None), |s| (s.rules, s.username));
        let record = WillRecord {
            instance: self.me.instance,
            generation,
            client_id: client_id.to_string(),
            topic: will.message.topic.as_str().to_owned(),
            payload: B64.encode(&will.message.payload),
            headers: headers
                .iter()
                .flat_map(|(k, vs)| vs.iter().map(move |v| (k.to_string(), v.as_str().to_owned())))
                .collect(),
            expiry_interval: will.expiry_interval,
            delay_ms: u64::try_from(will.delay.as_millis()).unwrap_or(u64::MAX),
            rules,
            username,
        };
        self.send(Change::Keep(client_id.clone(), Box::new(record)));
    }

    fn release(&self, client_id: &Arc<str>, generation: u64) {
        self.send(Change::Release(client_id.clone(), generation));
    }
}

impl Keeper {
    fn send(&self, change: Change) {
        if self.queue.try_send(change).is_err() {
            ClusterStats::add(&self.stats.wills_queue_full, 1);
        }
    }
}

/// Where this node keeps its wills and leases, and how long a lease lasts.
pub(crate) struct Wills {
    pub(crate) wills: kv::Store,
    pub(crate) nodes: kv::Store,
    pub(crate) registry: kv::Store,
    /// The persistent sessions' copies: a dead node's registry records of sessions that can
    /// still be resumed are kept.
    pub(crate) sessions: Arc<SessionStore>,
    pub(crate) lease: Duration,
    /// For the inboxes of the consumers that read one node's wills.
    pub(crate) client: async_nats::Client,
    /// Content routing, once attached: a dead node's listener paths are withdrawn with its
    /// lease.
    pub(crate) content: Arc<std::sync::OnceLock<crate::content::ContentNode>>,
    /// Told every lease the watcher reads, for what follows other nodes' lives (the relay's
    /// pipes and figures).
    pub(crate) liveness: Arc<crate::liveness::Liveness>,
}

/// Sends what this node's previous instance left, writes its lease, and starts the tasks (with
/// `sweep_every`, the periodic release of expired sessions' records); the keeper is then
/// installed in the broker.
pub(crate) async fn start(
    buckets: Wills,
    broker: &Arc<Broker>,
    me: Identity,
    renewals: Arc<Renewals>,
    sweep_every: Option<Duration>,
    stats: Arc<ClusterStats>,
) -> Result<Vec<JoinHandle<()>>, crate::StartError> {
    let buckets = Arc::new(buckets);
    // Left by this node's previous instance: those connections died with it.
    fire_wills_of(&buckets, broker, &stats, &me.node, Some(me.instance)).await;
    let lease = Lease { instance: me.instance, taken_by: None };
    buckets
        .nodes
        .put(&*me.node, encode_lease(&lease))
        .await
        .map_err(|e| crate::StartError::Registry(format!("node lease: {e}")))?;
    let (queue, changes) = mpsc::channel(QUEUE);
    broker.set_will_keeper(Arc::new(Keeper {
        queue,
        me: me.clone(),
        broker: Arc::downgrade(broker),
        stats: stats.clone(),
    }));
    let mut tasks = vec![
        tokio::spawn(sweep_registry_of(
            buckets.clone(),
            broker.clone(),
            me.node.to_string(),
            me.instance,
            true,
            stats.clone(),
        )),
        tokio::spawn(write_loop(buckets.clone(), me.clone(), changes, stats.clone())),
        tokio::spawn(heartbeat(buckets.clone(), me.clone(), lease, renewals, stats.clone())),
        tokio::spawn(watch_leases(buckets.clone(), broker.clone(), me.clone(), stats.clone())),
    ];
    if let Some(every) = sweep_every {
        tasks.push(tokio::spawn(sweep_expired_every(every, buckets, broker.clone(), me, stats)));
    }
    Ok(tasks)
}

fn encode_lease(lease: &Lease) -> Bytes {
    serde_json::to_vec(lease).unwrap_or_default().into()
}

fn will_key(node: &str, client_id: &str) -> Option<String> {
    client_key::encode(client_id).ok().map(|k| format!("{node}.{k}"))
}

async fn write_loop(
    buckets: Arc<Wills>,
    me: Identity,
    mut changes: mpsc::Receiver<Change>,
    stats: Arc<ClusterStats>,
) {
    // The revision each client's record was written at, to delete only our own.
    let mut written: HashMap<Arc<str>, (u64, u64)> = HashMap::new();
    while let Some(change) = changes.recv().await {
        match change {
            Change::Keep(client_id, record) => {
                let Some(key) = will_key(&me.node, &client_id) else {
                    ClusterStats::add(&stats.wills_unkept, 1);
                    continue;
                };
                let generation = record.generation;
                let value: Bytes = serde_json::to_vec(&*record).unwrap_or_default().into();
                match buckets.wills.put(&key, value).await {
                    Ok(revision) => {
                        ClusterStats::add(&stats.wills_kept, 1);
                        written.insert(client_id, (generation, revision));
                    }
                    Err(e) => {
                        ClusterStats::add(&stats.wills_unkept, 1);
                        tracing::warn!(error = %e, "cluster: a will could not be kept cluster-wide");
                    }
                }
            }
            Change::Release(client_id, generation) => {
                let Some(&(kept, revision)) = written.get(&client_id) else { continue };
                if kept != generation {
                    continue;
                }
                written.remove(&client_id);
                let Some(key) = will_key(&me.node, &client_id) else { continue };
                if buckets.wills.delete_expect_revision(&key, Some(revision)).await.is_err() {
                    // A newer connection's record (or NATS down): left for its owner.
                    ClusterStats::add(&stats.wills_release_errors, 1);
                }
            }
        }
    }
}

async fn heartbeat(
    buckets: Arc<Wills>,
    me: Identity,
    lease: Lease,
    renewals: Arc<Renewals>,
    stats: Arc<ClusterStats>,
) {
    let mut tick = tokio::time::interval(buckets.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let attempt = tokio::time::Instant::now();
        match buckets.nodes.put(&*me.node, encode_lease(&lease)).await {
            Ok(_) => renewals.renewed(),
            Err(e) => {
                ClusterStats::add(&stats.lease_errors, 1);
                if renewals.failed(attempt) {
                    tracing::warn!(
                        error = %e,
                        "cluster: this node's lease cannot be renewed (JetStream unreachable or \
                         without a quorum: the minority side of a partition?)"
                    );
                }
            }
        }
    }
}

/// What the watcher knows of one other node's lease.
struct Seen {
    lease: Option<Lease>,
    revision: u64,
    at: tokio::time::Instant,
}

async fn watch_leases(buckets: Arc<Wills>, broker: Arc<Broker>, me: Identity, stats: Arc<ClusterStats>) {
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut tick = tokio::time::interval(buckets.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut watch = match buckets.nodes.watch_with_history(">").await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cluster: cannot watch the node leases; retrying");
                tokio::time::sleep(buckets.lease / 3).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                entry = watch.next() => match entry {
                    Some(Ok(e)) => {
                        let lease = (e.operation == Operation::Put)
                            .then(|| serde_json::from_slice::<Lease>(&e.value).ok())
                            .flatten();
                        let state = lease
                            .as_ref()
                            .map(|l| NodeLease { instance: l.instance, alive: l.taken_by.is_none() });
                        buckets.liveness.seen(&e.key, state);
                        seen.insert(e.key.clone(), Seen { lease, revision: e.revision, at: tokio::time::Instant::now() });
                    }
                    _ => break,
                },
                _ = tick.tick() => {
                    let now = tokio::time::Instant::now();
                    let expired: Vec<(String, u64, Lease)> = seen
                        .iter()
                        .filter(|(node, s)| **node != *me.node && now.duration_since(s.at) >= buckets.lease)
                        .filter_map(|(node, s)| {
                            let lease = s.lease.clone()?;
                            // Taken by a node that is itself alive: not ours to take.
                            let holder_alive = lease.taken_by.as_ref().is_some_and(|by| {
                                *by == *me.node || seen.get(by).is_some_and(|h| now.duration_since(h.at) < buckets.lease)
                            });
                            (!holder_alive).then(|| (node.clone(), s.revision, lease))
                        })
                        .collect();
                    for (node, revision, lease) in expired {
                        let taken = Lease { instance: lease.instance, taken_by: Some(me.node.to_string()) };
                        // An error: another node was first, or the node came back.
                        if buckets.nodes.update(&node, encode_lease(&taken), revision).await.is_ok() {
                            ClusterStats::add(&stats.leases_taken, 1);
                            tracing::warn!(node = %node, "cluster: node lease expired; taking it over and sending its clients' wills");
                            fire_wills_of(&buckets, &broker, &stats, &node, None).await;
                            if let Some(content) = buckets.content.get() {
                                tokio::spawn(withdraw_content_paths_of(content.clone(), node.clone(), stats.clone()));
                            }
                            tokio::spawn(sweep_registry_of(
                                buckets.clone(),
                                broker.clone(),
                                node.clone(),
                                lease.instance,
                                false,
                                stats.clone(),
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// Deletes the content listener paths the dead `node` left, so that no node sends it messages.
async fn withdraw_content_paths_of(
    content: crate::content::ContentNode,
    node: String,
    stats: Arc<ClusterStats>,
) {
    match crate::content::withdraw_paths_of(content.bucket(), &node).await {
        Ok(withdrawn) => {
            ContentClusterStats::add(&stats.content.paths_withdrawn, withdrawn);
            tracing::info!(node = %node, withdrawn, "cluster: withdrew a dead node's content listener paths");
        }
        Err(e) => {
            ContentClusterStats::add(&stats.content.path_errors, 1);
            tracing::warn!(node = %node, error = %e, "cluster: cannot withdraw a dead node's content listener paths");
        }
    }
}

/// Releases the registry records the dead `node` left (at `instance`, or at any instance but
/// `instance` with `restarted`: this node's own previous runs), but those of sessions that can
/// still be resumed ([`crate::registry::sweep`]).
async fn sweep_registry_of(
    buckets: Arc<Wills>,
    broker: Arc<Broker>,
    node: String,
    instance: u64,
    restarted: bool,
    stats: Arc<ClusterStats>,
) {
    let instance = format!("{instance:016x}");
    let dead =
        |r: &mesgd_core::cluster::registry::Record| r.node == node && (r.instance == instance) != restarted;
    match release_dead(&buckets, &broker, dead, &stats).await {
        Ok(released) => {
            tracing::info!(node = %node, released, "cluster: released a dead node's registry records")
        }
        Err(e) => {
            tracing::warn!(node = %node, error = e, "cluster: cannot release a dead node's registry records")
        }
    }
}

/// Every `every`, releases the registry records that dead nodes left (their lease taken over)
/// and this node's previous instances left, but those of sessions that can still be resumed:
/// a lease takeover keeps the records of persistent sessions whose copies had not expired, and
/// when such a copy expires with its client never back, nothing else releases its record (the
/// pass deletes the expired copy with it). Every node runs it; a record is deleted at the
/// revision read, so two passes at once, or a claim meanwhile, do no harm. A record claimed
/// less than a lease ago is left alone (its node may not have written its lease yet).
async fn sweep_expired_every(
    every: Duration,
    buckets: Arc<Wills>,
    broker: Arc<Broker>,
    me: Identity,
    stats: Arc<ClusterStats>,
) {
    let mine = format!("{:016x}", me.instance);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let leases: HashMap<String, Lease> = match crate::bucket_entries::live_entries(&buckets.nodes).await {
            Ok(entries) => entries
                .into_iter()
                .filter_map(|e| Some((e.key, serde_json::from_slice::<Lease>(&e.value).ok()?)))
                .collect(),
            Err(e) => {
                tracing::warn!(error = e, "cluster: cannot read the node leases for the registry sweep");
                continue;
            }
        };
        let lease_ms = u64::try_from(buckets.lease.as_millis()).unwrap_or(u64::MAX);
        let settled = crate::sessions::store::now_ms().saturating_sub(lease_ms);
        let dead = |r: &mesgd_core::cluster::registry::Record| {
            let gone = if *r.node == *me.node {
                r.instance != mine
            } else {
                leases.get(&r.node).is_some_and(|l| l.taken_by.is_some())
            };
            gone && r.since_ms < settled
        };
        match release_dead(&buckets, &broker, dead, &stats).await {
            Ok(0) => {}
            Ok(released) => {
                tracing::info!(released, "cluster: released registry records of expired sessions")
            }
            Err(e) => tracing::warn!(error = e, "cluster: the periodic registry sweep failed"),
        }
    }
}

/// Releases the registry records for which `dead` holds, but those of sessions that can still
/// be resumed or that this node holds ([`crate::registry::sweep::release_dead`]).
async fn release_dead(
    buckets: &Wills,
    broker: &Broker,
    dead: impl Fn(&mesgd_core::cluster::registry::Record) -> bool,
    stats: &ClusterStats,
) -> Result<u64, String> {
    let held = |id: &str| broker.session(&SessionKey::mqtt(id)).is_some();
    crate::registry::sweep::release_dead(
        &buckets.registry,
        &buckets.client,
        &buckets.sessions,
        dead,
        held,
        stats,
    )
    .await
}

/// Sends (at most once each) the wills kept under `node`, except those of instance `keep`.
async fn fire_wills_of(
    buckets: &Wills,
    broker: &Arc<Broker>,
    stats: &ClusterStats,
    node: &str,
    keep: Option<u64>,
) {
    let Some(mine) = keys_of(buckets, node, stats).await else {
        ClusterStats::add(&stats.wills_unread, 1);
        return;
    };
    for key in mine {
        let Ok(Some(entry)) = buckets.wills.entry(&key).await else { continue };
        if entry.operation != Operation::Put {
            continue;
        }
        let Ok(record) = serde_json::from_slice::<WillRecord>(&entry.value) else {
            ClusterStats::add(&stats.wills_unread, 1);
            let _ = buckets.wills.delete_expect_revision(&key, Some(entry.revision)).await;
            continue;
        };
        if keep == Some(record.instance) {
            continue;
        }
        // Deleted first: whoever deletes it is the one who sends it.
        if buckets.wills.delete_expect_revision(&key, Some(entry.revision)).await.is_err() {
            continue;
        }
        if record.delay_ms > 0 && reconnected(buckets, &record.client_id, node).await {
            ClusterStats::add(&stats.wills_cancelled, 1);
            continue;
        }
        match will_of(&record, broker) {
            Some(will) => {
                ClusterStats::add(&stats.wills_sent, 1);
                broker.publish_will(will, tokio::time::Instant::now().into_std());
            }
            None => ClusterStats::add(&stats.wills_unread, 1),
        }
    }
}

/// How long reading one node's will keys may wait for the next one.
const SCAN_WAIT: Duration = Duration::from_secs(5);

/// The keys of the wills kept under `node`, read through a consumer filtered on `<node>.>`
/// (headers only, the last message of each key): the cost of a start-up or a takeover is that
/// node's wills, not the whole bucket. The inbox is subscribed before the consumer exists, so
/// none of what it pushes at once is lost. `None` if the bucket cannot be read in time.
async fn keys_of(buckets: &Wills, node: &str, stats: &ClusterStats) -> Option<Vec<String>> {
    let wills = &buckets.wills;
    let inbox = buckets.client.new_inbox();
    let mut delivered = buckets.client.subscribe(inbox.clone()).await.ok()?;
    let config = push::Config {
        deliver_subject: inbox,
        description: Some("mesgd wills of one node".into()),
        filter_subject: format!("{}{node}.>", wills.prefix),
        headers_only: true,
        ack_policy: AckPolicy::None,
        replay_policy: ReplayPolicy::Instant,
        deliver_policy: DeliverPolicy::LastPerSubject,
        // Removed by the server if this node dies before deleting it.
        inactive_threshold: Duration::from_secs(30),
        ..Default::default()
    };
    let consumer = wills.stream.create_consumer(config).await.ok()?;
    let info = consumer.cached_info();
    let mut keys = Vec::new();
    // What the consumer had to deliver when it was made: the node's keys then.
    for _ in 0..info.num_pending {
        let message = tokio::time::timeout(SCAN_WAIT, delivered.next()).await.ok()??;
        ClusterStats::add(&stats.wills_scanned, 1);
        if let Some(key) = message.subject.strip_prefix(wills.prefix.as_str()) {
            keys.push(key.to_owned());
        }
    }
    let _ = delivered.unsubscribe().await;
    let _ = wills.stream.delete_consumer(&info.name).await;
    Some(keys)
}

/// Whether `client_id` is connected again on a node other than `dead`.
async fn reconnected(buckets: &Wills, client_id: &str, dead: &str) -> bool {
    let Ok(key) = client_key::encode(client_id) else { return false };
    match buckets.registry.entry(key).await {
        Ok(Some(e)) if e.operation == Operation::Put => {
            mesgd_core::cluster::registry::Record::decode(&e.value).is_ok_and(|r| *r.node != *dead)
        }
        _ => false,
    }
}

fn will_of(record: &WillRecord, broker: &Broker) -> Option<Will> {
    let topic = TopicName::try_from(record.topic.as_str()).ok()?;
    let payload = Bytes::from(B64.decode(&record.payload).ok()?);
    let mut headers = HeaderMap::new();
    for (k, v) in &record.headers {
        headers.append(k.as_str(), v.as_str());
    }
    let sender = wire::sender(&headers).ok()?;
    let now = tokio::time::Instant::now().into_std();
    let message = wire::decode(topic, payload, &headers, &sender, now, |at| broker.instant_of(at)).ok()?;
    let acl = Acl::compile(record.rules.as_deref(), record.username.as_deref(), &record.client_id);
    Some(Will { message, expiry_interval: record.expiry_interval, delay: Duration::ZERO, acl })
}
