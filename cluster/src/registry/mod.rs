//! The cluster-wide session registry: one JetStream KV bucket with one record per MQTT client
//! id, naming the node that owns it (one bucket whatever the number of clients: its assets do
//! not grow with them).
//!
//! - **Claim** (a CONNECT, with the client lock held): read the record, then write this node's
//!   record at the revision read (compare-and-swap; revision 0 creates), and on a conflict read
//!   and try again. Bounded by `registry_timeout_ms`; NATS down or past the bound, the claim
//!   fails and the client is refused (Server unavailable).
//! - **Takeover**: if the record read named another node, this node sends it a
//!   [`TakeoverRequest`] (core NATS request/reply on that node's subject) carrying the new
//!   revision, and waits (bounded) for its answer; that node closes its connection to the
//!   client (MQTT 5 DISCONNECT 0x8E Session taken over) and ends its session there
//!   (`takeover`). A dead owner has no subscription on its subject: NATS answers "no
//!   responders" at once and the claim stands, the dead owner fenced by the CAS.
//! - **Release**: when the session ends here (clean disconnect with expiry 0, expiry, an
//!   operator), the record is deleted at this node's revision, so that a newer owner's record
//!   is never deleted: the stale delete of a node that lost the id fails.
//!
//! `docs/cluster.md` discusses the choices (request/reply rather than watching the bucket) and
//! the failure behaviour.

pub(crate) mod handover;
mod holdings;
mod rejoin;
pub(crate) mod sweep;
mod takeover;

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use async_nats::jetstream;
use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};
use async_nats::{Client, RequestErrorKind};
use bytes::Bytes;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::client_key;
use mesgd_core::cluster::handover::HandedMessage;
use mesgd_core::cluster::registry::{
    ClaimError, ClaimFuture, Handover, MAX_MESSAGE_LEN, Record, SessionRegistry, TakeoverOutcome,
    TakeoverReply, TakeoverRequest, takeover_subject, tracked,
};
use mesgd_core::model::{MessageId, SessionKey};
use tokio::task::JoinHandle;

use self::holdings::{Holdings, Release};
use crate::stats::ClusterStats;

/// How many compare-and-swap rounds a claim tries before giving up (contention).
const MAX_ATTEMPTS: usize = 16;
/// JetStream's default duplicate window, which a bucket whose records expire sooner shortens.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// A KV bucket with the settings of [`bucket_config`] (`max_message_size` -1: the server's
/// limit; `max_age` zero: records stay until deleted), created if it does not exist: every
/// bucket of the cluster is made here. The error says why, for the caller's own [`crate::StartError`]
/// variant.
pub(crate) async fn named_bucket(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    description: &str,
    max_message_size: i32,
    max_age: Duration,
    patience: Duration,
) -> Result<kv::Store, String> {
    bucket_with(js, bucket_config(name, replicas, description, max_message_size, max_age), patience).await
}

/// The bucket whose stream `config` ([`bucket_config`]) describes, created if it does not exist.
pub(crate) async fn bucket_with(
    js: &jetstream::Context,
    config: stream::Config,
    patience: Duration,
) -> Result<kv::Store, String> {
    let name = config.name.strip_prefix("KV_").unwrap_or(&config.name).to_owned();
    let stream = crate::streams::get_or_create(js, config, patience).await?;
    // The store over the stream just created or found, as async-nats's `get_key_value` makes
    // it, without reading the stream's information a second time.
    let settings = &stream.cached_info().config;
    if settings.max_messages_per_subject < 1 || settings.mirror.is_some() {
        return Err(format!(
            "stream KV_{name} exists but is not a key-value bucket this node can use \
             (max_messages_per_subject {}, mirror {}): remove it or name another bucket",
            settings.max_messages_per_subject,
            settings.mirror.is_some()
        ));
    }
    Ok(kv::Store {
        name: name.clone(),
        stream_name: format!("KV_{name}"),
        prefix: format!("$KV.{name}."),
        put_prefix: None,
        use_jetstream_prefix: false,
        stream,
    })
}

/// What [`named_bucket`] makes a bucket's stream with: the settings the KV API gives a bucket
/// (async-nats's own bucket creation first reads account information in a form nats-server 2.9
/// does not send): `KV_<bucket>` on `$KV.<bucket>.>`, one message per key, roll-ups allowed,
/// deletes only through the KV markers, direct gets.
pub(crate) fn bucket_config(
    name: &str,
    replicas: usize,
    description: &str,
    max_message_size: i32,
    max_age: Duration,
) -> stream::Config {
    stream::Config {
        name: format!("KV_{name}"),
        description: Some(description.to_owned()),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        max_message_size,
        storage: StorageType::File,
        num_replicas: replicas,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: DiscardPolicy::New,
        max_age,
        // The server refuses a duplicate window longer than the records live (zero: its
        // default of two minutes).
        duplicate_window: if max_age.is_zero() { Duration::ZERO } else { max_age.min(DUPLICATE_WINDOW) },
        ..Default::default()
    }
}

/// What the session registry bucket's stream is made with.
pub(crate) fn registry_bucket_config(name: &str, replicas: usize) -> stream::Config {
    bucket_config(name, replicas, REGISTRY_DESCRIPTION, registry_max_message_size(), Duration::ZERO)
}

const REGISTRY_DESCRIPTION: &str = "mesgd session registry: the node owning each MQTT client id";

fn registry_max_message_size() -> i32 {
    i32::try_from(MAX_MESSAGE_LEN).unwrap_or(i32::MAX)
}

/// The broker's [`SessionRegistry`] seam; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Registry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    kv: kv::Store,
    client: Client,
    node: Arc<str>,
    instance: String,
    broker: Weak<Broker>,
    holdings: Holdings,
    stats: Arc<ClusterStats>,
    timeout: Duration,
    /// The sessions' copies, read when a session's previous owner is gone.
    sessions: Arc<crate::sessions::store::SessionStore>,
    /// Tells the takeover task to unsubscribe and end.
    stop: tokio::sync::Notify,
    /// Replays the durable stream for a recovered session (installed once the node's stream
    /// and subscriptions are up).
    replayer: std::sync::OnceLock<Arc<crate::sessions::replay::Replayer>>,
}

impl Registry {
    pub(crate) fn new(
        kv: kv::Store,
        client: Client,
        me: &crate::live::Identity,
        broker: &Arc<Broker>,
        stats: Arc<ClusterStats>,
        timeout: Duration,
        sessions: Arc<crate::sessions::store::SessionStore>,
    ) -> Registry {
        Registry {
            inner: Arc::new(Inner {
                kv,
                client,
                node: me.node.clone(),
                instance: format!("{:016x}", me.instance),
                broker: Arc::downgrade(broker),
                holdings: Holdings::default(),
                stats,
                timeout,
                sessions,
                stop: tokio::sync::Notify::new(),
                replayer: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Subscribes to this node's takeover subject and answers the requests there.
    pub(crate) async fn serve(&self) -> Result<JoinHandle<()>, crate::StartError> {
        let subject = takeover_subject(&self.inner.node);
        let requests = self
            .inner
            .client
            .subscribe(subject)
            .await
            .map_err(|e| crate::StartError::Registry(e.to_string()))?;
        self.inner.client.flush().await.map_err(|e| crate::StartError::Registry(e.to_string()))?;
        Ok(tokio::spawn(takeover::serve(self.clone(), requests)))
    }

    /// Installs the replay of the durable stream for recovered sessions (once).
    pub(crate) fn set_replayer(&self, replayer: Arc<crate::sessions::replay::Replayer>) {
        let _ = self.inner.replayer.set(replayer);
    }

    /// Has the task of [`Registry::serve`] unsubscribe from the takeover subject and end.
    pub(crate) fn stop_serving(&self) {
        self.inner.stop.notify_one();
    }

    /// The registry revision at which this node owns `id`, if it does.
    pub(crate) fn owned_revision(&self, id: &str) -> Option<u64> {
        self.inner.holdings.owned_revision(id)
    }

    /// How many client ids this node holds in the registry (or is claiming).
    pub(crate) fn held(&self) -> usize {
        self.inner.holdings.len()
    }

    async fn claim_id(&self, key: &SessionKey, resume: bool) -> Result<Handover, ClaimError> {
        let me = &self.inner;
        let kv_key = client_key::encode(&key.id).map_err(|_| ClaimError::IdTooLong)?;
        if me.client.connection_state() != async_nats::connection::State::Connected {
            ClusterStats::add(&me.stats.registry_unavailable, 1);
            return Err(ClaimError::Unavailable);
        }
        me.holdings.begin(&key.id);
        let (revision, previous) = match tokio::time::timeout(me.timeout, self.swap(&kv_key)).await {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(why)) => return Err(self.claim_failed(&key.id, &why)),
            Err(_) => return Err(self.claim_failed(&key.id, "timed out")),
        };
        ClusterStats::add(&me.stats.registry_claims, 1);
        // Whether or not a newer claim elsewhere came while ours was in flight (the broker
        // then closes the new connection right after attaching it, `still_owner`), the owner
        // our CAS replaced must close its connection: the newer claimer read our record, and
        // asks only us.
        me.holdings.claimed(&key.id, revision);
        let Some(previous) = previous.filter(|p| *p.node != *me.node) else { return Ok(Handover::default()) };
        match self.ask_to_close(&previous.node, &key.id, revision, resume).await {
            Some((handover, reply)) => {
                if handover.resumed {
                    // What reached the old owner's copy after the handover, or no node before
                    // this node's subscriptions are in place, comes from the stream.
                    self.replay(&key.id, &reply.checkpoint_ms, &reply.finished, &reply.messages, &handover);
                }
                Ok(handover)
            }
            // The previous owner is gone (or does not answer): its copy of a persistent
            // session, if the client asked to resume it.
            None if resume => Ok(self.recover(&key.id, revision).await),
            None => Ok(Handover::default()),
        }
    }

    fn claim_failed(&self, id: &str, why: &str) -> ClaimError {
        self.inner.holdings.failed(id);
        ClusterStats::add(&self.inner.stats.registry_unavailable, 1);
        tracing::warn!(
            client_id = id,
            reason = why,
            "cluster: cannot claim the client id in the session registry"
        );
        ClaimError::Unavailable
    }

    /// The compare-and-swap loop: this node's record over whatever the bucket holds. Returns
    /// the new revision and the record it replaced.
    async fn swap(&self, kv_key: &str) -> Result<(u64, Option<Record>), String> {
        let me = &self.inner;
        let value = self.record();
        for _ in 0..MAX_ATTEMPTS {
            let (expected, previous) = match me.kv.entry(kv_key).await.map_err(|e| e.to_string())? {
                None => (0, None),
                Some(e) if e.operation == Operation::Put => {
                    let previous = Record::decode(&e.value).ok();
                    if previous.is_none() {
                        ClusterStats::add(&me.stats.registry_unreadable, 1);
                    }
                    (e.revision, previous)
                }
                // Deleted: the tombstone's revision is the one to replace.
                Some(e) => (e.revision, None),
            };
            match me.kv.update(kv_key, value.clone(), expected).await {
                Ok(revision) => return Ok((revision, previous)),
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                    ClusterStats::add(&me.stats.registry_conflicts, 1);
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(format!("{MAX_ATTEMPTS} compare-and-swap conflicts in a row"))
    }

    /// This node's record, claiming an id now.
    fn record(&self) -> Bytes {
        let me = &self.inner;
        let since_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let record = Record {
            node: me.node.to_string(),
            instance: me.instance.clone(),
            since_ms: u64::try_from(since_ms).unwrap_or(u64::MAX),
        };
        Bytes::from(record.encode())
    }

    /// Whether `record` is this node's (this instance's).
    fn is_mine(&self, record: &Record) -> bool {
        *record.node == *self.inner.node && record.instance == self.inner.instance
    }

    /// Asks `node` to close its connection to `id` (and, with `resume`, to hand its session
    /// over); bounded, and the claim stands whatever the answer (the CAS already fenced
    /// `node`). `None`: `node` did not answer (gone, or too slow).
    async fn ask_to_close(
        &self,
        node: &str,
        id: &str,
        revision: u64,
        resume: bool,
    ) -> Option<(Handover, TakeoverReply)> {
        let me = &self.inner;
        ClusterStats::add(&me.stats.registry_takeovers_sent, 1);
        let request =
            TakeoverRequest { client_id: id.to_owned(), revision, node: me.node.to_string(), resume };
        let asked = me.client.request(takeover_subject(node), Bytes::from(request.encode()));
        match tokio::time::timeout(me.timeout, asked).await {
            Ok(Ok(reply)) => match TakeoverReply::decode(&reply.payload) {
                Ok(reply) => {
                    tracing::debug!(client_id = id, node, outcome = ?reply.outcome, "cluster: took the client over");
                    return Some((self.handed_over(&reply, node), reply));
                }
                Err(e) => {
                    ClusterStats::add(&me.stats.decode_errors, 1);
                    tracing::debug!(error = %e, "cluster: unreadable takeover reply");
                    return Some((
                        Handover::default(),
                        TakeoverReply::without_session(TakeoverOutcome::Unknown),
                    ));
                }
            },
            Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => {
                // The owner is gone (its subscription with it): nobody to close.
                ClusterStats::add(&me.stats.registry_owner_gone, 1);
            }
            Ok(Err(e)) => {
                ClusterStats::add(&me.stats.registry_takeover_timeouts, 1);
                tracing::warn!(client_id = id, node, error = %e, "cluster: takeover request failed");
            }
            Err(_) => {
                ClusterStats::add(&me.stats.registry_takeover_timeouts, 1);
                tracing::warn!(client_id = id, node, "cluster: the previous owner did not answer in time");
            }
        }
        None
    }

    /// The session of `id` from its record, its previous owner being gone; bounded by the
    /// registry timeout. Nothing (a fresh session) without a record, or past the bound.
    async fn recover(&self, id: &Arc<str>, revision: u64) -> Handover {
        let me = &self.inner;
        let Ok(Some(record)) = tokio::time::timeout(me.timeout, me.sessions.recover(id, revision)).await
        else {
            return Handover::default();
        };
        tracing::info!(
            client_id = &**id,
            node = record.node,
            "cluster: resumed a session of a node that is gone"
        );
        let reply = TakeoverReply {
            resumed: true,
            subscriptions: record.subscriptions.clone(),
            messages: record.messages.clone(),
            incoming_qos2: record.incoming_qos2.clone(),
            ..TakeoverReply::without_session(TakeoverOutcome::Offline)
        };
        let handover = self.handed_over(&reply, &record.node);
        // What the record cannot hold (messages on their way to the dead node, published while
        // the session had no node, queued in the last write delay) comes from the stream.
        self.replay(id, &record.checkpoint_ms, &record.finished, &record.messages, &handover);
        handover
    }

    /// Starts the replay of the durable stream for `id`'s session, just handed over (from its
    /// record, or by its live previous owner) with `messages` and what it finished since
    /// `checkpoint_ms`.
    fn replay(
        &self,
        id: &Arc<str>,
        checkpoint_ms: &Option<u64>,
        finished: &[String],
        messages: &[HandedMessage],
        handover: &Handover,
    ) {
        let (Some(replayer), Some(checkpoint_ms)) = (self.inner.replayer.get(), *checkpoint_ms) else {
            return;
        };
        let finished: Vec<MessageId> = finished.iter().filter_map(|f| f.parse().ok()).collect();
        let held = messages.iter().filter_map(|m| m.id.as_deref()?.parse().ok());
        replayer.start(id, checkpoint_ms, finished, held, &handover.subscriptions);
    }

    /// The checkpoint of `id`'s session here and the ids it finished since, for a handover
    /// (`None` before the node's replay is installed).
    fn checkpoint(&self, id: &str) -> (Option<u64>, Vec<MessageId>) {
        match self.inner.replayer.get() {
            Some(replayer) => {
                let (checkpoint, finished) = replayer.copies.checkpoint(id);
                (Some(checkpoint), finished)
            }
            None => (None, Vec::new()),
        }
    }

    /// The session a takeover reply hands over; a subscription that does not parse is dropped
    /// and counted.
    fn handed_over(&self, reply: &TakeoverReply, node: &str) -> Handover {
        if !reply.resumed {
            return Handover::default();
        }
        ClusterStats::add(&self.inner.stats.registry_sessions_received, 1);
        let mut subscriptions = Vec::with_capacity(reply.subscriptions.len());
        for handed in &reply.subscriptions {
            match handed.parse() {
                Ok(subscription) => subscriptions.push(subscription),
                Err(e) => {
                    ClusterStats::add(&self.inner.stats.decode_errors, 1);
                    tracing::debug!(error = %e, "cluster: unreadable handed-over subscription");
                }
            }
        }
        let entries = handover::entries(&reply.messages, node, &self.inner.stats);
        let incoming_qos2 = reply.incoming_qos2.iter().map(|q| (q.packet_id, q.digest)).collect();
        Handover { resumed: true, subscriptions, entries, incoming_qos2 }
    }

    /// With the client lock held and no session of `key` left here: deletes the record at this
    /// node's revision, if it still owns it.
    async fn release_now(&self, key: &SessionKey, broker: &Broker) {
        let me = &self.inner;
        let _held = broker.lock_client(key).await;
        if broker.session(key).is_some() {
            // Admitted again meanwhile: that admission holds the id now.
            return;
        }
        let Ok(kv_key) = client_key::encode(&key.id) else { return };
        let revision = match me.holdings.release(&key.id) {
            Release::Delete(revision) => revision,
            Release::Nothing => return,
            // Restored from storage at start, never claimed since: the record is this node's
            // to delete only if it still names this node (the delete is at the revision read,
            // so a claim in between wins).
            Release::Unknown => match tokio::time::timeout(me.timeout, me.kv.entry(&kv_key)).await {
                Ok(Ok(Some(e)))
                    if e.operation == Operation::Put
                        && Record::decode(&e.value).is_ok_and(|r| *r.node == *me.node) =>
                {
                    e.revision
                }
                _ => return,
            },
        };
        match tokio::time::timeout(me.timeout, me.kv.delete_expect_revision(&kv_key, Some(revision))).await {
            Ok(Ok(())) => ClusterStats::add(&me.stats.registry_released, 1),
            Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                // A newer owner's record: this node was fenced, and deletes nothing.
                ClusterStats::add(&me.stats.registry_fenced, 1);
            }
            failed => {
                ClusterStats::add(&me.stats.registry_release_errors, 1);
                let reason = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".to_owned(),
                };
                tracing::warn!(client_id = %key.id, reason, "cluster: cannot delete the session registry record");
            }
        }
    }
}

impl SessionRegistry for Registry {
    fn claim<'a>(&'a self, key: &'a SessionKey, resume: bool) -> ClaimFuture<'a> {
        Box::pin(self.claim_id(key, resume))
    }

    fn still_owner(&self, key: &SessionKey) -> bool {
        self.inner.holdings.still_owner(&key.id)
    }

    fn released(&self, key: &SessionKey) {
        if !tracked(key) {
            return;
        }
        let Some(broker) = self.inner.broker.upgrade() else { return };
        let (registry, key) = (self.clone(), key.clone());
        tokio::spawn(async move { registry.release_now(&key, &broker).await });
    }
}
