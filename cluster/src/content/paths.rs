//! The listener paths of every node in one KV bucket: writing this node's own (coalesced, in
//! the background, retried after a failure) and following the other nodes' into the matcher.
//!
//! A key is `<node>.<hash of the canonical path>` and its value the canonical text. A node that
//! stops deletes its keys ([`ContentNode::withdraw_own`]); a node that dies has them deleted by
//! the node that takes over its lease ([`withdraw_paths_of`]); a node's keys from an earlier run
//! that are left anyway are deleted when its watcher first sees them (they are not among its
//! current paths).

use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::{self};
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::cluster::content::path_key;
use mesgd_core::content::Path;
use mesgd_core::sync::lock;
use tokio::task::JoinHandle;

use super::{ContentClusterStats, ContentNode};

/// How long a failed write of this node's paths waits before it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The bucket, created if it does not exist (the session registry's settings; see there why
/// async-nats's own bucket creation is not used).
pub(super) async fn bucket(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    patience: Duration,
) -> Result<kv::Store, crate::StartError> {
    crate::registry::named_bucket(
        js,
        name,
        replicas,
        "mesgd content routing: each node's listener paths",
        8192,
        Duration::ZERO,
        patience,
    )
    .await
    .map_err(crate::StartError::Content)
}

/// Deletes the listener paths `node` left in the bucket (a dead node's, by the node that took
/// over its lease), each at the revision listed, so that a path the node writes again after a
/// restart stays; how many were deleted.
pub(crate) async fn withdraw_paths_of(kv: &kv::Store, node: &str) -> Result<u64, String> {
    let mut withdrawn = 0;
    for entry in crate::bucket_entries::live_entries_matching(kv, &format!("{node}.>")).await? {
        if kv.delete_expect_revision(&entry.key, Some(entry.revision)).await.is_ok() {
            withdrawn += 1;
        }
    }
    Ok(withdrawn)
}

impl ContentNode {
    /// Deletes this node's own paths from the bucket (a node that stops: other nodes stop
    /// sending it messages for listeners that are gone).
    pub(crate) async fn withdraw_own(&self) {
        let keys: Vec<String> = lock(&self.inner.mine).drain().collect();
        for key in keys {
            let _ = self.inner.kv.delete(&key).await;
        }
    }

    /// The bucket, for the node that takes over a dead node's lease.
    pub(crate) fn bucket(&self) -> &kv::Store {
        &self.inner.kv
    }

    /// Records that this node now has (`true`) or no longer has a listener on `path`.
    pub(super) fn want(&self, path: &Path, present: bool) {
        let key = path_key(&self.inner.node, path);
        let value = present.then(|| path.to_string());
        lock(&self.inner.wanted).insert(key, value);
        self.inner.changed.notify_one();
    }

    /// Writes this node's path changes into the bucket, latest state per path.
    pub(super) async fn write_paths(self) {
        let me = &self.inner;
        loop {
            me.changed.notified().await;
            let batch: Vec<(String, Option<String>)> = lock(&me.wanted).drain().collect();
            let mut failed = false;
            for (key, value) in batch {
                let written = match &value {
                    Some(text) => {
                        lock(&me.mine).insert(key.clone());
                        me.kv
                            .put(&key, Bytes::from(text.clone()))
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }
                    None => {
                        lock(&me.mine).remove(&key);
                        me.kv.delete(&key).await.map_err(|e| e.to_string())
                    }
                };
                if let Err(why) = written {
                    ContentClusterStats::add(&self.stats().path_errors, 1);
                    tracing::warn!(reason = why, "cluster: cannot write a content listener path");
                    // Again later, unless a newer change of the path came meanwhile.
                    lock(&me.wanted).entry(key).or_insert(value);
                    failed = true;
                }
            }
            if failed {
                tokio::time::sleep(RETRY_AFTER).await;
                me.changed.notify_one();
            }
        }
    }

    /// Follows the bucket from its current contents on: other nodes' paths into the matcher,
    /// this node's stale ones deleted.
    pub(super) async fn follow(&self) -> Result<JoinHandle<()>, crate::StartError> {
        let mut watch = self
            .inner
            .kv
            .watch_with_history(">")
            .await
            .map_err(|e| crate::StartError::Content(e.to_string()))?;
        let node = self.clone();
        Ok(tokio::spawn(async move {
            while let Some(entry) = watch.next().await {
                match entry {
                    Ok(entry) => node.apply(entry).await,
                    Err(e) => tracing::warn!(error = %e, "cluster: content path watcher"),
                }
            }
        }))
    }

    async fn apply(&self, entry: kv::Entry) {
        let me = &self.inner;
        let Some((owner, _)) = entry.key.split_once('.') else {
            ContentClusterStats::add(&self.stats().remote_paths_refused, 1);
            return;
        };
        if owner == &*me.node {
            let stale = entry.operation == Operation::Put && !lock(&me.mine).contains(&entry.key);
            if stale {
                let _ = me.kv.delete(&entry.key).await;
            }
            return;
        }
        let mut remote = lock(&me.remote);
        if let Some(id) = remote.by_key.remove(&entry.key) {
            remote.node_of.remove(&id);
            me.matcher.remove(id);
            ContentClusterStats::sub_gauge(&self.stats().remote_paths);
        }
        if entry.operation == Operation::Put {
            let path = std::str::from_utf8(&entry.value).ok().and_then(|t| Path::parse(t).ok());
            let id = remote.next_id;
            match path.map(|p| me.matcher.insert(id, p)) {
                Some(Ok(_)) => {
                    remote.next_id += 1;
                    remote.by_key.insert(entry.key.clone(), id);
                    remote.node_of.insert(id, std::sync::Arc::from(owner));
                    ContentClusterStats::add(&self.stats().remote_paths, 1);
                }
                _ => ContentClusterStats::add(&self.stats().remote_paths_refused, 1),
            }
        }
        drop(remote);
        me.applied.send_modify(|n| *n += 1);
    }
}
