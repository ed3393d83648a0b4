//! Content routing across nodes, sent only to the nodes with a matching listener.
//!
//! - **Paths** (`paths`): each node writes its distinct listener paths into one KV bucket
//!   (`content_bucket`), one key per node and path (`<node>.<hash>`, the canonical text as the
//!   value), and follows the bucket (one watcher per node) into a [`Matcher`] of the other
//!   nodes' paths. The exact paths, not a lossy summary: a match is never missed, and a node
//!   is never sent what none of its listeners matches (except a listener that left meanwhile).
//! - **Out**: after local delivery, a message is matched against the other nodes' paths (a
//!   grant sender's only against the paths its patterns cover) and queued once for each node
//!   with a match; one task publishes the queue in order on one connection, so one sender's
//!   messages arrive at every node in order. A node is never sent its own messages.
//! - **In**: a node's subject `mesgd.content.<node>` (core NATS); a message is matched against
//!   the local listeners and handed to each once, as if sent here (a grant sender's patterns
//!   travel in the `Mesgd-Reach` header).
//!
//! JetStream assets: one bucket, one watcher per node; no consumer per listener.

mod paths;

pub(crate) use self::paths::withdraw_paths_of;
pub(crate) mod stats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_nats::{Client, HeaderMap, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::cluster::content::{
    ContentCluster, LocalContent, REACH_HEADER, Reach, decode_reach, encode_reach, node_subject,
};
use mesgd_core::content::{Matcher, Message, Path};
use mesgd_core::sync::lock;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

pub use self::stats::ContentClusterStats;
use crate::stats::ClusterStats;

/// Other nodes' listener paths this node keeps at most.
const MAX_REMOTE_PATHS: usize = 1_000_000;

/// Where content routing's cluster state lives.
#[derive(Clone, Debug)]
pub(crate) struct ContentSetup {
    pub(crate) bucket: String,
    pub(crate) replicas: usize,
    pub(crate) capacity: usize,
    /// How long creating the bucket waits for JetStream ([`crate::streams::get_or_create`]).
    pub(crate) patience: std::time::Duration,
}

/// A message for one node.
struct Outgoing {
    node: Arc<str>,
    text: Bytes,
    reach: Option<String>,
}

/// Other nodes' paths: the matcher and which node each id stands for.
#[derive(Debug, Default)]
struct Remote {
    by_key: HashMap<String, u64>,
    node_of: HashMap<u64, Arc<str>>,
    next_id: u64,
}

/// Content routing's [`ContentCluster`] seam; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ContentNode {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    kv: async_nats::jetstream::kv::Store,
    node: Arc<str>,
    stats: Arc<ClusterStats>,
    local: Arc<dyn LocalContent>,
    matcher: Matcher<u64>,
    remote: Mutex<Remote>,
    out: mpsc::Sender<Outgoing>,
    /// This node's own paths waiting to be written (`Some`) or deleted (`None`), by key.
    wanted: Mutex<HashMap<String, Option<String>>>,
    /// The keys of this node's paths in the bucket (or being written).
    mine: Mutex<std::collections::HashSet<String>>,
    changed: Notify,
    /// Rises with each change of other nodes' paths applied here.
    applied: watch::Sender<u64>,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing").field("node", &self.node).field("len", &self.text.len()).finish()
    }
}

impl ContentNode {
    /// Opens (or creates) the bucket, follows it, subscribes to this node's subject and
    /// starts the sending task.
    pub(crate) async fn start(
        client: Client,
        node: Arc<str>,
        setup: &ContentSetup,
        local: Arc<dyn LocalContent>,
        stats: Arc<ClusterStats>,
    ) -> Result<(ContentNode, Vec<JoinHandle<()>>), crate::StartError> {
        let js = async_nats::jetstream::new(client.clone());
        let kv = paths::bucket(&js, &setup.bucket, setup.replicas, setup.patience).await?;
        let (out, out_rx) = mpsc::channel(setup.capacity);
        let content = ContentNode {
            inner: Arc::new(Inner {
                client: client.clone(),
                kv,
                node: node.clone(),
                stats,
                local,
                matcher: Matcher::with_max_listeners(MAX_REMOTE_PATHS),
                remote: Mutex::new(Remote::default()),
                out,
                wanted: Mutex::new(HashMap::new()),
                mine: Mutex::new(std::collections::HashSet::new()),
                changed: Notify::new(),
                applied: watch::channel(0).0,
            }),
        };
        let incoming = client
            .subscribe(node_subject(&node))
            .await
            .map_err(|e| crate::StartError::Content(e.to_string()))?;
        client.flush().await.map_err(|e| crate::StartError::Content(e.to_string()))?;
        let follow = content.follow().await?;
        let tasks = vec![
            follow,
            tokio::spawn(content.clone().write_paths()),
            tokio::spawn(content.clone().send_loop(out_rx)),
            tokio::spawn(content.clone().receive(incoming)),
        ];
        Ok((content, tasks))
    }

    fn stats(&self) -> &ContentClusterStats {
        &self.inner.stats.content
    }

    /// Rises with each change of other nodes' paths applied here (tests wait on it).
    pub(crate) fn applied(&self) -> watch::Receiver<u64> {
        self.inner.applied.subscribe()
    }

    async fn send_loop(self, mut out: mpsc::Receiver<Outgoing>) {
        while let Some(message) = out.recv().await {
            let subject = node_subject(&message.node);
            let sent = match message.reach {
                Some(reach) => {
                    let mut headers = HeaderMap::new();
                    headers.insert(REACH_HEADER, reach.as_str());
                    self.inner.client.publish_with_headers(subject, headers, message.text).await
                }
                None => self.inner.client.publish(subject, message.text).await,
            };
            match sent {
                Ok(()) => ContentClusterStats::add(&self.stats().forwarded, 1),
                Err(_) => ContentClusterStats::add(&self.stats().publish_errors, 1),
            }
        }
    }

    async fn receive(self, mut incoming: Subscriber) {
        while let Some(message) = incoming.next().await {
            let patterns = match message.headers.as_ref().and_then(|h| h.get(REACH_HEADER)) {
                None => None,
                Some(value) => match decode_reach(value.as_str()) {
                    Ok(patterns) => Some(patterns),
                    Err(e) => {
                        ContentClusterStats::add(&self.stats().decode_errors, 1);
                        tracing::debug!(error = %e, "cluster: unreadable content reach header");
                        continue;
                    }
                },
            };
            if std::str::from_utf8(&message.payload).is_err() {
                ContentClusterStats::add(&self.stats().decode_errors, 1);
                continue;
            }
            let Ok(scanned) = Message::scan(&message.payload) else {
                ContentClusterStats::add(&self.stats().decode_errors, 1);
                continue;
            };
            let reach = match &patterns {
                Some(p) => Reach::Covered(p),
                None => Reach::All,
            };
            ContentClusterStats::add(&self.stats().received, 1);
            if self.inner.local.deliver(&scanned, &message.payload, reach) == 0 {
                ContentClusterStats::add(&self.stats().unmatched, 1);
            }
        }
    }
}

impl ContentCluster for ContentNode {
    fn path_added(&self, path: &Path) {
        self.want(path, true);
    }

    fn path_removed(&self, path: &Path) {
        self.want(path, false);
    }

    fn forward(&self, message: &Message<'_>, text: &Bytes, reach: Reach<'_>) {
        let me = &self.inner;
        let mut ids = Vec::new();
        match reach {
            Reach::All => me.matcher.for_each_match(message, |id| ids.push(id)),
            Reach::Covered([]) => return,
            Reach::Covered(patterns) => me.matcher.for_each_match_with_path(message, |id, path| {
                if patterns.iter().any(|p| p.covers(path)) {
                    ids.push(id);
                }
            }),
        }
        if ids.is_empty() {
            return;
        }
        let mut nodes: Vec<Arc<str>> = Vec::new();
        {
            let remote = lock(&me.remote);
            for id in ids {
                if let Some(node) = remote.node_of.get(&id) {
                    if !nodes.contains(node) {
                        nodes.push(node.clone());
                    }
                }
            }
        }
        let header = match reach {
            Reach::Covered(patterns) => Some(encode_reach(patterns)),
            Reach::All => None,
        };
        for node in nodes {
            let outgoing = Outgoing { node, text: text.clone(), reach: header.clone() };
            if me.out.try_send(outgoing).is_err() {
                ContentClusterStats::add(&self.stats().queue_full, 1);
            }
        }
    }
}
