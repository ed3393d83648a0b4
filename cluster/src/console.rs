//! The console's browser sessions on every node: one JetStream KV bucket (`console_bucket`)
//! with one record per open session ([`ConsoleRecord`]), which every node follows into its
//! REST API's session table, so that a session made on one node is valid on all of them, a
//! logout on one ends it on all, and the idle timeout and the cap on sessions count every
//! node's use.
//!
//! - **Writes** come from the API's table ([`ConsoleCluster`]): a login stores its session
//!   (`create`) and a logout deletes it (`end`), both awaited, bounded by
//!   `registry_timeout_ms`; a session's later uses (`touch`, at most every
//!   [`touch_every`](mesgd_core::cluster::console::touch_every) of the idle timeout) and the
//!   sessions the table drops by itself (idle, ended to make room, administrator gone:
//!   `forget`) go through one bounded queue to one task, each a compare-and-swap at the
//!   revision the table knows, so that a session ended elsewhere is never written back and
//!   one used elsewhere meanwhile is not deleted.
//! - **Reads**: before the listeners open, the node takes in every record (bounded by
//!   `retained_load_timeout_ms`), then one KV watcher per node (from the revision after that
//!   listing) applies every change, its own writes included. Every [`RECONCILE`] the bucket is
//!   listed again and compared with the table, which heals what a watch missed (a long NATS
//!   outage during which deletes aged out of the bucket).
//! - **Bounded**: the bucket's `max_age` is twice the idle timeout of the node that creates
//!   it, so the records of sessions nobody ended and the delete markers of those that were
//!   ended go by themselves; a session in use is written again long before.
//!
//! - **Unknown sessions**: a cookie naming a session the table does not have is looked up in
//!   the bucket once ([`ConsoleCluster::fetch`]), since the browser's next request after a
//!   login may reach another node before that node's watcher brings the session.
//!
//! JetStream assets: one bucket whatever the number of sessions, and one watcher per node.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::cluster::console::{
    Applied, Change, ConsoleCluster, ConsoleFuture, ConsoleRecord, LocalConsole, MAX_RECORD_LEN, Unreachable,
    is_session_id,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::StartError;
use crate::stats::ClusterStats;

/// How often the table is compared with the whole bucket.
const RECONCILE: Duration = Duration::from_secs(60);
/// Lookups of unknown sessions at once ([`ConsoleCluster::fetch`]): one per request that
/// presents a cookie this node does not know, so a flood of made-up cookies costs NATS at most
/// this many round trips in flight.
const MAX_FETCHES: usize = 16;
/// How long a watcher that ended waits before it is made again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where the sessions live and how long to wait for them.
#[derive(Clone, Debug)]
pub(crate) struct ConsoleSetup {
    pub(crate) bucket: String,
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
    pub(crate) load_timeout: Duration,
    pub(crate) capacity: usize,
    /// How long creating the bucket waits for JetStream ([`crate::streams::get_or_create`]).
    pub(crate) patience: Duration,
}

/// The API's [`ConsoleCluster`] seam; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ConsoleNode {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    kv: kv::Store,
    local: Arc<dyn LocalConsole>,
    timeout: Duration,
    stats: Arc<ClusterStats>,
    jobs: mpsc::Sender<Job>,
    /// Lookups of sessions this node does not know, at most [`MAX_FETCHES`] at once.
    fetching: Arc<tokio::sync::Semaphore>,
}

/// A write the API does not wait for.
#[derive(Debug)]
enum Job {
    Touch { id: String, value: Bytes, revision: u64 },
    Forget { id: String, revision: u64 },
}

impl ConsoleNode {
    /// Creates (or finds) the bucket with records living `max_age`, takes in what it holds
    /// (bounded), and starts the writing, watching and comparing tasks.
    pub(crate) async fn start(
        js: &async_nats::jetstream::Context,
        setup: &ConsoleSetup,
        local: Arc<dyn LocalConsole>,
        max_age: Duration,
        stats: Arc<ClusterStats>,
    ) -> Result<(ConsoleNode, Vec<JoinHandle<()>>), StartError> {
        let kv = crate::registry::named_bucket(
            js,
            &setup.bucket,
            setup.replicas,
            "mesgd console: the administrators' browser sessions",
            i32::try_from(MAX_RECORD_LEN).unwrap_or(i32::MAX),
            max_age,
            setup.patience,
        )
        .await
        .map_err(StartError::Console)?;
        let (jobs, jobs_rx) = mpsc::channel(setup.capacity);
        let fetching = Arc::new(tokio::sync::Semaphore::new(MAX_FETCHES));
        let inner = Inner { kv, local, timeout: setup.timeout, stats, jobs, fetching };
        let node = ConsoleNode { inner: Arc::new(inner) };
        let listed = match tokio::time::timeout(setup.load_timeout, node.reconcile()).await {
            Ok(Ok(listed)) => listed,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e,
                    _ => "timed out".to_owned(),
                };
                tracing::warn!(error = %why, "cluster: the console sessions were not all loaded; the rest arrive later");
                0
            }
        };
        let writing = tokio::spawn(node.clone().write(jobs_rx));
        let following = tokio::spawn(node.clone().follow(listed));
        let comparing = tokio::spawn(node.clone().compare());
        Ok((node, vec![writing, following, comparing]))
    }

    fn stats(&self) -> &ClusterStats {
        &self.inner.stats
    }

    /// Applies one entry of the bucket to the table.
    fn apply(&self, key: &str, operation: Operation, value: &[u8], revision: u64) {
        if !is_session_id(key) {
            ClusterStats::add(&self.stats().console_invalid, 1);
            return;
        }
        let change = match operation {
            Operation::Put => match ConsoleRecord::decode(value) {
                Ok(record) => Change::Put(record, revision),
                Err(e) => {
                    ClusterStats::add(&self.stats().console_invalid, 1);
                    tracing::warn!(error = %e, "cluster: an unreadable console session record");
                    return;
                }
            },
            Operation::Delete | Operation::Purge => Change::Gone,
        };
        match self.inner.local.apply(key, change) {
            Applied::Kept => ClusterStats::add(&self.stats().console_applied, 1),
            Applied::Stale => {}
            Applied::Full => ClusterStats::add(&self.stats().console_refused, 1),
        }
    }

    /// Takes in every session the bucket holds and drops from the table those it stored
    /// before the listing and the bucket no longer has; returns the bucket's last revision
    /// before the listing (what a watch resumes after).
    async fn reconcile(&self) -> Result<u64, String> {
        let me = &self.inner;
        let before = me.kv.stream.get_info().await.map_err(|e| e.to_string())?.state.last_sequence;
        let entries = crate::bucket_entries::live_entries(&me.kv).await?;
        let mut listed = HashSet::with_capacity(entries.len());
        for entry in entries {
            self.apply(&entry.key, entry.operation, &entry.value, entry.revision);
            listed.insert(entry.key);
        }
        for (id, revision) in me.local.revisions() {
            if revision != 0 && revision <= before && !listed.contains(&id) {
                self.apply(&id, Operation::Delete, &[], revision);
            }
        }
        Ok(before)
    }

    /// Applies every change of the bucket after revision `listed`, for as long as the node runs.
    async fn follow(self, listed: u64) {
        let mut next = listed + 1;
        loop {
            match self.inner.kv.watch_all_from_revision(next).await {
                Ok(mut watch) => {
                    while let Some(Ok(entry)) = watch.next().await {
                        next = entry.revision + 1;
                        self.apply(&entry.key, entry.operation, &entry.value, entry.revision);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cluster: cannot watch the console sessions; retrying"),
            }
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }

    /// Compares the table with the bucket every [`RECONCILE`].
    async fn compare(self) {
        let mut tick = tokio::time::interval(RECONCILE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(e) = self.reconcile().await {
                tracing::warn!(error = %e, "cluster: cannot compare the console sessions with the bucket");
            }
        }
    }

    /// Writes the queued touches and forgets, in order.
    async fn write(self, mut jobs: mpsc::Receiver<Job>) {
        let me = &self.inner;
        while let Some(job) = jobs.recv().await {
            let (written, counter) = match job {
                Job::Touch { id, value, revision } => {
                    let update = async { me.kv.update(&id, value, revision).await.map(drop) };
                    (tokio::time::timeout(me.timeout, update).await, &me.stats.console_touched)
                }
                Job::Forget { id, revision } => {
                    let delete = me.kv.delete_expect_revision(&id, (revision != 0).then_some(revision));
                    (tokio::time::timeout(me.timeout, delete).await, &me.stats.console_forgotten)
                }
            };
            match written {
                Ok(Ok(_)) => ClusterStats::add(counter, 1),
                // Ended, or used, on another node meanwhile: the watch brings what it is now.
                Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                    ClusterStats::add(&me.stats.console_conflicts, 1);
                }
                _ => ClusterStats::add(&me.stats.console_write_errors, 1),
            }
        }
    }

    fn queue(&self, job: Job) {
        if self.inner.jobs.try_send(job).is_err() {
            ClusterStats::add(&self.stats().console_queue_full, 1);
        }
    }
}

impl ConsoleCluster for ConsoleNode {
    fn create(&self, id: &str, record: &ConsoleRecord) -> ConsoleFuture<Result<u64, Unreachable>> {
        let (node, id, value) = (self.clone(), id.to_owned(), Bytes::from(record.encode()));
        Box::pin(async move {
            let me = &node.inner;
            match tokio::time::timeout(me.timeout, me.kv.create(&id, value)).await {
                Ok(Ok(revision)) => {
                    ClusterStats::add(&me.stats.console_stored, 1);
                    Ok(revision)
                }
                failed => {
                    ClusterStats::add(&me.stats.console_write_errors, 1);
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".to_owned(),
                    };
                    tracing::warn!(error = %why, "cluster: a console session could not be stored");
                    Err(Unreachable)
                }
            }
        })
    }

    fn end(&self, id: &str) -> ConsoleFuture<Result<(), Unreachable>> {
        let (node, id) = (self.clone(), id.to_owned());
        Box::pin(async move {
            let me = &node.inner;
            match tokio::time::timeout(me.timeout, me.kv.delete(&id)).await {
                Ok(Ok(())) => {
                    ClusterStats::add(&me.stats.console_ended, 1);
                    Ok(())
                }
                _ => {
                    ClusterStats::add(&me.stats.console_write_errors, 1);
                    tracing::warn!("cluster: a console logout could not be stored; the session stays open");
                    Err(Unreachable)
                }
            }
        })
    }

    fn touch(&self, id: &str, record: &ConsoleRecord, revision: u64) {
        self.queue(Job::Touch { id: id.to_owned(), value: Bytes::from(record.encode()), revision });
    }

    fn forget(&self, id: &str, revision: u64) {
        self.queue(Job::Forget { id: id.to_owned(), revision });
    }

    fn fetch(&self, id: &str) -> ConsoleFuture<()> {
        let Ok(permit) = self.inner.fetching.clone().try_acquire_owned() else {
            ClusterStats::add(&self.stats().console_fetch_busy, 1);
            return Box::pin(std::future::ready(()));
        };
        let (node, id) = (self.clone(), id.to_owned());
        Box::pin(async move {
            let _permit = permit;
            let me = &node.inner;
            ClusterStats::add(&me.stats.console_fetched, 1);
            match tokio::time::timeout(me.timeout, me.kv.entry(&id)).await {
                Ok(Ok(Some(entry))) => node.apply(&entry.key, entry.operation, &entry.value, entry.revision),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "cluster: cannot look up a console session"),
                Err(_) => tracing::debug!("cluster: a console session lookup timed out"),
            }
        })
    }
}
