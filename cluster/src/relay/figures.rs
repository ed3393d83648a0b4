//! Relay-wide counts: each node's figures in the relay bucket (`n.<node>`), and the members of
//! a room on the other nodes.
//!
//! - **Publishing.** Every [`PUBLISH_EVERY`] a node reads its figures (addresses registered,
//!   relay connections, its `max_connections`) and writes them under its own key when they
//!   changed. Its own figures are never read from the bucket: this node's part of every count
//!   is exact.
//! - **Following.** One KV watcher per node (`n.>`) keeps the other nodes' last figures. Only
//!   those of a node instance that holds its lease count (the lease watcher's view,
//!   `crate::liveness`): a node that dies stops counting when its lease is taken over, and its
//!   key is deleted then (at the revision seen, so a quick restart's figures stay). A node that
//!   stops deletes its own key.
//! - **Staleness.** Another node's change is counted here at most [`PUBLISH_EVERY`] plus the
//!   watcher's delivery (about a millisecond on loopback) later; a dead node's figures at most
//!   `4/3 × lease_ms` after its death. The cluster queue's bytes are read from the stream every
//!   [`QUEUE_EVERY`].
//! - **Room members** are asked of each live node when a client joins (`R`, request and
//!   reply, all nodes at once, each bounded by `registry_timeout_ms`): exact at that moment,
//!   with no per-room state in NATS. A node with no responder counts none; one that does not
//!   answer in time counts none and is counted (`relay_room_count_failures`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::RequestErrorKind;
use async_nats::jetstream::kv::Operation;
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::cluster::relay::{CountFuture, Elsewhere, NodeFigures, node_subject};
use mesgd_core::cluster::relay_kv::{Figures, figures_key, instance_text};
use mesgd_core::cluster::relay_wire::{RelayReply, RelayRequest};
use mesgd_core::sync::lock;
use tokio::sync::watch;

use super::{RelayClusterStats, RelayNode};

/// How often a node looks at its figures, and publishes them if they changed.
pub(super) const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// How often the cluster queue's bytes are read from the stream.
pub(super) const QUEUE_EVERY: Duration = Duration::from_secs(1);

/// What this node knows of the others' figures.
#[derive(Debug)]
pub(super) struct OtherFigures {
    /// By node: its figures, its instance, the revision of its key.
    nodes: Mutex<HashMap<String, (Figures, u64, u64)>>,
    /// The cluster queue's bytes, and its budget, as last read.
    queued_bytes: AtomicU64,
    queue_budget: AtomicU64,
    /// Rises with each change applied.
    applied: watch::Sender<u64>,
}

impl Default for OtherFigures {
    fn default() -> Self {
        OtherFigures {
            nodes: Mutex::default(),
            queued_bytes: AtomicU64::new(0),
            queue_budget: AtomicU64::new(0),
            applied: watch::channel(0).0,
        }
    }
}

impl RelayNode {
    /// Publishes this node's figures when they change, and reads the queue's bytes.
    pub(super) async fn publish_figures(self) {
        let me = &self.inner;
        let key = figures_key(&me.node);
        let mut last: Option<NodeFigures> = None;
        let mut tick = tokio::time::interval(PUBLISH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut queue_read: Option<tokio::time::Instant> = None;
        loop {
            tick.tick().await;
            let now = me.local.figures();
            if last != Some(now) {
                let record = Figures {
                    instance: instance_text(me.instance_id),
                    addresses: now.addresses,
                    connections: now.connections,
                    max_connections: now.max_connections,
                };
                match tokio::time::timeout(me.timeout, me.kv.put(&key, Bytes::from(record.encode()))).await {
                    Ok(Ok(_)) => {
                        last = Some(now);
                        RelayClusterStats::add(&self.stats().figures_published, 1);
                    }
                    _ => RelayClusterStats::add(&self.stats().figures_errors, 1),
                }
            }
            if queue_read.is_none_or(|at| at.elapsed() >= QUEUE_EVERY) {
                queue_read = Some(tokio::time::Instant::now());
                if let Ok(Ok(info)) = tokio::time::timeout(me.timeout, me.queue.get_info()).await {
                    let budget = u64::try_from(info.config.max_bytes).unwrap_or(0);
                    me.figures.queued_bytes.store(info.state.bytes, Ordering::Relaxed);
                    me.figures.queue_budget.store(budget, Ordering::Relaxed);
                }
            }
        }
    }

    /// Keeps the other nodes' figures as the bucket has them.
    pub(super) async fn follow_figures(self) {
        let me = &self.inner;
        loop {
            let mut watch = match me.kv.watch_with_history(figures_key(">")).await {
                Ok(watch) => watch,
                Err(e) => {
                    tracing::warn!(error = %e, "cluster: cannot watch the relay figures; retrying");
                    tokio::time::sleep(QUEUE_EVERY).await;
                    continue;
                }
            };
            while let Some(Ok(entry)) = watch.next().await {
                let Some(node) = entry.key.strip_prefix("n.") else { continue };
                if *node == *me.node {
                    continue;
                }
                let figures = (entry.operation == Operation::Put)
                    .then(|| Figures::decode(&entry.value))
                    .transpose()
                    .unwrap_or_else(|_| {
                        RelayClusterStats::add(&self.stats().decode_errors, 1);
                        None
                    });
                let mut nodes = lock(&me.figures.nodes);
                match figures.and_then(|f| Some((f.instance_id()?, f))) {
                    Some((instance, figures)) => {
                        nodes.insert(node.to_owned(), (figures, instance, entry.revision));
                    }
                    None => {
                        nodes.remove(node);
                    }
                }
                drop(nodes);
                me.figures.applied.send_modify(|n| *n += 1);
            }
        }
    }

    /// The other live nodes' figures, summed, and the cluster queue.
    pub(super) fn elsewhere(&self) -> Elsewhere {
        let me = &self.inner;
        let mut sum = Elsewhere {
            queued_bytes: me.figures.queued_bytes.load(Ordering::Relaxed),
            queue_budget: me.figures.queue_budget.load(Ordering::Relaxed),
            ..Elsewhere::default()
        };
        for (node, (figures, instance, _)) in lock(&me.figures.nodes).iter() {
            if !me.liveness.is_alive(node, *instance) {
                continue;
            }
            sum.addresses += figures.addresses;
            // Nodes without a cap (0) take any number: they neither load nor bound the rest.
            if figures.max_connections > 0 {
                sum.connections += figures.connections;
                sum.max_connections += figures.max_connections;
            }
        }
        sum
    }

    /// Rises with each change of other nodes' figures applied here.
    pub(crate) fn figures_applied(&self) -> watch::Receiver<u64> {
        self.inner.figures.applied.subscribe()
    }

    /// Deletes the figures of node instances that are gone (each at the revision seen: a
    /// restart's new figures stay).
    pub(super) async fn forget_dead_figures(&self) {
        let me = &self.inner;
        let dead: Vec<(String, u64)> = lock(&me.figures.nodes)
            .iter()
            .filter(|(node, (_, instance, _))| me.liveness.is_gone(node, Some(*instance)))
            .map(|(node, (_, _, revision))| (node.clone(), *revision))
            .collect();
        for (node, revision) in dead {
            let deleted = me.kv.delete_expect_revision(figures_key(&node), Some(revision));
            // Another node deleted them first, or the node came back: nothing to do.
            let _ = tokio::time::timeout(me.timeout, deleted).await;
        }
    }

    /// Deletes this node's own figures (it stops).
    pub(crate) async fn withdraw_figures(&self) {
        let _ = self.inner.kv.delete(figures_key(&self.inner.node)).await;
    }

    /// The members of `room` on every other live node, asked of each at once.
    pub(super) fn room_members_elsewhere(&self, room: &str) -> CountFuture {
        let node = self.clone();
        let room = room.to_owned();
        Box::pin(async move {
            let me = &node.inner;
            let stats = &me.stats.relay;
            let request = RelayRequest::RoomMembers { room }.encode();
            let asks = me.liveness.alive_nodes(&me.node).into_iter().map(|other| {
                let asked = me.client.request(node_subject(&other), request.clone());
                async move {
                    match tokio::time::timeout(me.timeout, asked).await {
                        Ok(Ok(reply)) => match RelayReply::decode(&reply.payload) {
                            Ok(RelayReply::Members(n)) => Some(u64::from(n)),
                            _ => {
                                RelayClusterStats::add(&stats.decode_errors, 1);
                                None
                            }
                        },
                        // A node without the relay, or just gone.
                        Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => Some(0),
                        _ => None,
                    }
                }
            });
            let mut members = 0;
            for answer in futures_util::future::join_all(asks).await {
                match answer {
                    Some(n) => members += n,
                    None => RelayClusterStats::add(&stats.room_count_failures, 1),
                }
            }
            members
        })
    }
}
