//! The sessions bucket: writing a session's record (fenced by the registry revision), the task
//! that writes the sessions [`SessionCopies`] marks, and reading a dead node's record back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::client_key;
use mesgd_core::cluster::session_record::{MAX_RECORD_LEN, SessionRecord};
use mesgd_core::model::{Kick, MessageId, SessionExpiry, SessionKey};
use mesgd_core::session::Session;
use mesgd_core::sync::lock;

use super::SessionCopies;
use crate::registry::{Registry, handover};
use crate::stats::ClusterStats;

/// How many session records are written at once.
const MAX_CONCURRENT_WRITES: usize = 64;
/// Compare-and-swap rounds of one write before it is tried again later.
const MAX_ATTEMPTS: usize = 4;

/// What became of one session's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Stored (or deleted), or never to be: not this node's, too large.
    Settled,
    /// Refused: the stored record comes from a newer claim.
    Fenced,
    /// NATS failed or timed out: tried again.
    Failed,
}

/// The sessions bucket as this node writes and reads it.
#[derive(Debug)]
pub(crate) struct SessionStore {
    kv: kv::Store,
    node: Arc<str>,
    stats: Arc<ClusterStats>,
    timeout: Duration,
    /// The bucket revision of this node's last write of each client id's record, so that the
    /// next write is one compare-and-swap without a read.
    revisions: Mutex<HashMap<Arc<str>, u64>>,
}

pub(crate) fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

impl SessionStore {
    pub(crate) fn new(kv: kv::Store, node: Arc<str>, stats: Arc<ClusterStats>, timeout: Duration) -> Self {
        SessionStore { kv, node, stats, timeout, revisions: Mutex::new(HashMap::new()) }
    }

    /// The stored record of `kv_key`: its bucket revision, and the record when there is one that
    /// parses (an unreadable one is counted and treated as none).
    pub(crate) async fn read(&self, kv_key: &str) -> Result<Option<(u64, Option<SessionRecord>)>, String> {
        let entry = tokio::time::timeout(self.timeout, self.kv.entry(kv_key))
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        Ok(entry.map(|e| {
            if e.operation != Operation::Put {
                return (e.revision, None);
            }
            match SessionRecord::decode(&e.value) {
                Ok(record) => (e.revision, Some(record)),
                Err(why) => {
                    ClusterStats::add(&self.stats.session_records_unreadable, 1);
                    tracing::warn!(key = kv_key, error = %why, "cluster: unreadable session record");
                    (e.revision, None)
                }
            }
        }))
    }

    /// Whether the stored record of `kv_key` is a session that can still be resumed (its node
    /// is gone); one that expired is deleted (at its revision: a newer write wins). An error
    /// reading it counts as resumable, so that nothing is released on a guess.
    pub(crate) async fn resumable(&self, kv_key: &str) -> bool {
        match self.read(kv_key).await {
            Ok(Some((revision, Some(record)))) if record.expired(now_ms()) => {
                let _ = tokio::time::timeout(
                    self.timeout,
                    self.kv.delete_expect_revision(kv_key, Some(revision)),
                )
                .await;
                false
            }
            Ok(Some((_, Some(_)))) | Err(_) => true,
            Ok(Some((_, None))) | Ok(None) => false,
        }
    }

    /// Writes `value` (a record; `None` deletes) for client id `id` held at registry revision
    /// `registry_revision`, unless the stored record comes from a newer claim.
    async fn put(
        &self,
        id: &Arc<str>,
        kv_key: &str,
        value: Option<Bytes>,
        registry_revision: u64,
    ) -> Written {
        let mut expected = lock(&self.revisions).get(id).copied();
        for _ in 0..MAX_ATTEMPTS {
            let revision = match expected {
                Some(r) => r,
                None => match self.read(kv_key).await {
                    Ok(None) if value.is_none() => return Written::Settled,
                    Ok(None) => 0,
                    Ok(Some((_, Some(stored)))) if stored.registry_revision > registry_revision => {
                        ClusterStats::add(&self.stats.sessions_fenced, 1);
                        lock(&self.revisions).remove(id);
                        return Written::Fenced;
                    }
                    Ok(Some((_, None))) if value.is_none() => return Written::Settled,
                    Ok(Some((r, _))) => r,
                    Err(why) => return self.failed(id, &why),
                },
            };
            let result = match &value {
                Some(bytes) => {
                    tokio::time::timeout(self.timeout, self.kv.update(kv_key, bytes.clone(), revision))
                        .await
                        .map(|r| {
                            r.map(|r| {
                                lock(&self.revisions).insert(id.clone(), r);
                            })
                        })
                }
                None => {
                    tokio::time::timeout(self.timeout, self.kv.delete_expect_revision(kv_key, Some(revision)))
                        .await
                        .map(|r| {
                            r.map(|()| {
                                lock(&self.revisions).remove(id);
                            })
                        })
                }
            };
            match result {
                Ok(Ok(())) => {
                    ClusterStats::add(&self.stats.sessions_written, 1);
                    return Written::Settled;
                }
                Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => expected = None,
                Ok(Err(e)) => return self.failed(id, &e.to_string()),
                Err(_) => return self.failed(id, "timed out"),
            }
        }
        self.failed(id, "compare-and-swap conflicts")
    }

    /// [`SessionStore::put`] of a record's bytes, saying whether it was stored (`false`:
    /// fenced) or why it failed.
    pub(crate) async fn put_checked(
        &self,
        id: &Arc<str>,
        kv_key: &str,
        bytes: Bytes,
        registry_revision: u64,
    ) -> Result<bool, String> {
        match self.put(id, kv_key, Some(bytes), registry_revision).await {
            Written::Failed => Err("the write failed (see the log)".to_owned()),
            Written::Fenced => Ok(false),
            Written::Settled => Ok(true),
        }
    }

    fn failed(&self, id: &str, why: &str) -> Written {
        ClusterStats::add(&self.stats.session_write_errors, 1);
        tracing::warn!(client_id = id, reason = why, "cluster: cannot write the session record");
        Written::Failed
    }

    /// Writes the session of `id` as it is now (or deletes its record when it ended), if this
    /// node holds the client id.
    async fn write_session(
        &self,
        broker: &Broker,
        registry: &Registry,
        copies: &SessionCopies,
        id: &Arc<str>,
    ) -> Written {
        let Some(registry_revision) = registry.owned_revision(id) else {
            // Not this node's (any more): a newer owner writes it.
            lock(&self.revisions).remove(id);
            return Written::Settled;
        };
        let Ok(kv_key) = client_key::encode(id) else { return Written::Settled };
        let session = broker
            .session(&SessionKey::mqtt(&**id))
            .filter(|s| !s.is_ended() && s.expiry() != SessionExpiry::OnDisconnect);
        let Some(session) = session else {
            return self.put(id, &kv_key, None, registry_revision).await;
        };
        let bytes = self.snapshot(&session, registry_revision, copies.checkpoint(id)).encode();
        if bytes.len() > MAX_RECORD_LEN {
            ClusterStats::add(&self.stats.sessions_too_large, 1);
            tracing::warn!(
                client_id = &**id,
                len = bytes.len(),
                limit = MAX_RECORD_LEN,
                "cluster: the session's record is too large to copy; it is not recovered if this node dies"
            );
            // An older record would bring back a state that is no longer true.
            return self.put(id, &kv_key, None, registry_revision).await;
        }
        let written = self.put(id, &kv_key, Some(Bytes::from(bytes)), registry_revision).await;
        if written == Written::Fenced {
            // A newer claim elsewhere holds the client id: this copy of the session is stale,
            // and its connection must not go on (the packets it held are let go with it).
            tracing::warn!(
                client_id = &**id,
                "cluster: a newer owner holds the session; closing its connection here"
            );
            session.kick(Kick::TakenOver);
        }
        written
    }

    fn snapshot(
        &self,
        session: &Session,
        registry_revision: u64,
        (checkpoint, finished): (u64, Vec<MessageId>),
    ) -> SessionRecord {
        let (messages, incoming_qos2) = handover::handed_messages(session);
        SessionRecord {
            node: self.node.to_string(),
            registry_revision,
            written_ms: now_ms(),
            expiry_s: match session.expiry() {
                SessionExpiry::After(d) => Some(u32::try_from(d.as_secs()).unwrap_or(u32::MAX)),
                SessionExpiry::OnDisconnect => Some(0),
                SessionExpiry::Never => None,
            },
            subscriptions: handover::handed_subscriptions(session),
            messages,
            incoming_qos2,
            checkpoint_ms: Some(checkpoint),
            finished: finished.iter().map(MessageId::to_string).collect(),
        }
    }

    /// The record of `id`, whose previous owner `node` is gone, for this node that claimed the
    /// id at `registry_revision`: written back at once as this node's (so that the old owner,
    /// were it alive after all, can no longer write), and returned unless it expired.
    pub(crate) async fn recover(&self, id: &Arc<str>, registry_revision: u64) -> Option<SessionRecord> {
        let kv_key = client_key::encode(id).ok()?;
        let (revision, record) = match self.read(&kv_key).await {
            Ok(Some((revision, Some(record)))) => (revision, record),
            Ok(Some((revision, None))) => {
                // Deleted or unreadable (counted): this node's first write replaces it without
                // reading it again.
                lock(&self.revisions).insert(id.clone(), revision);
                return None;
            }
            Ok(None) => return None,
            Err(why) => {
                tracing::warn!(client_id = &**id, reason = why, "cluster: cannot read the session record");
                return None;
            }
        };
        if record.registry_revision >= registry_revision {
            return None;
        }
        if record.expired(now_ms()) {
            ClusterStats::add(&self.stats.sessions_recovered_expired, 1);
            return None;
        }
        let mine = SessionRecord {
            node: self.node.to_string(),
            registry_revision,
            written_ms: now_ms(),
            ..record.clone()
        };
        lock(&self.revisions).insert(id.clone(), revision);
        if self.put(id, &kv_key, Some(Bytes::from(mine.encode())), registry_revision).await == Written::Failed
        {
            tracing::warn!(client_id = &**id, "cluster: the recovered session's record was not written back");
        }
        ClusterStats::add(&self.stats.sessions_recovered, 1);
        Some(record)
    }
}

/// Writes the sessions `copies` marks: at once for a change a packet waits for, else within
/// `delay` of the first change; a failed write is tried again after `delay`.
pub(crate) async fn write_loop(
    copies: Arc<SessionCopies>,
    store: Arc<SessionStore>,
    registry: Registry,
    broker: Weak<Broker>,
    delay: Duration,
) {
    let mut again = false;
    loop {
        if again {
            tokio::time::sleep(delay).await;
        } else {
            copies.changed().await;
            if !copies.urgent() {
                // Batch: more changes within the delay go in the same round; one a packet
                // waits for ends the wait.
                let _ = tokio::time::timeout(delay, copies.changed()).await;
            }
        }
        let Some(broker) = broker.upgrade() else { return };
        let batch = copies.take();
        again = false;
        let mut writes = futures_util::stream::iter(batch.into_iter().map(|(id, seqs)| {
            let (store, registry, broker, copies) = (&store, &registry, &broker, &copies);
            async move { (store.write_session(broker, registry, copies, &id).await, id, seqs) }
        }))
        .buffer_unordered(MAX_CONCURRENT_WRITES);
        while let Some((written, id, seqs)) = writes.next().await {
            match written {
                // Fenced: a newer owner has the client id, and this node's connection to it is
                // closed; nothing more may wait for this copy (it would hold every connection
                // whose packets come after it).
                Written::Settled | Written::Fenced => copies.written(&seqs),
                Written::Failed => {
                    copies.retry(id);
                    again = true;
                }
            }
        }
        store
            .stats
            .session_copies_waiting
            .store(copies.waiting() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}
