//! The counters of content routing across nodes, exported with the other cluster counters
//! (`mesgd_cluster_content_…`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::stats::Kind;

/// Counters of content routing through the cluster, since start (except the gauge).
#[derive(Debug, Default)]
pub struct ContentClusterStats {
    /// Messages sent to another node (one per node with a matching listener).
    pub forwarded: AtomicU64,
    /// Messages not sent to a node because the queue to NATS was full.
    pub queue_full: AtomicU64,
    /// Publishes to NATS that failed.
    pub publish_errors: AtomicU64,
    /// Messages from other nodes handed to this node's listeners.
    pub received: AtomicU64,
    /// Messages from other nodes that matched no listener here (it left meanwhile).
    pub unmatched: AtomicU64,
    /// Messages from other nodes that could not be read (UTF-8, JSON, reach header).
    pub decode_errors: AtomicU64,
    /// Other nodes' listener paths known here now (a gauge).
    pub remote_paths: AtomicU64,
    /// Other nodes' paths not taken into the matcher (its cap, or unreadable).
    pub remote_paths_refused: AtomicU64,
    /// Writes of this node's own paths to the bucket that failed (retried), and withdrawals
    /// of a dead node's paths that failed.
    pub path_errors: AtomicU64,
    /// A dead node's listener paths withdrawn from the bucket by this node (it took over the
    /// dead node's lease).
    pub paths_withdrawn: AtomicU64,
}

impl ContentClusterStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sub_gauge(gauge: &AtomicU64) {
        gauge.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every counter: its name (`content_<name>`), help text, kind and value.
    pub fn values(&self) -> Vec<(&'static str, &'static str, Kind, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = Kind::Counter;
        vec![
            (
                "content_forwarded",
                "Content messages sent to nodes with a matching listener",
                c,
                get(&self.forwarded),
            ),
            (
                "content_queue_full",
                "Content messages not sent: the queue to NATS was full",
                c,
                get(&self.queue_full),
            ),
            ("content_publish_errors", "Content publishes to NATS that failed", c, get(&self.publish_errors)),
            (
                "content_received",
                "Content messages from other nodes handed to listeners here",
                c,
                get(&self.received),
            ),
            (
                "content_unmatched",
                "Content messages from other nodes that matched no listener here",
                c,
                get(&self.unmatched),
            ),
            (
                "content_decode_errors",
                "Content messages from other nodes that could not be read",
                c,
                get(&self.decode_errors),
            ),
            (
                "content_remote_paths",
                "Other nodes' listener paths known here",
                Kind::Gauge,
                get(&self.remote_paths),
            ),
            (
                "content_remote_paths_refused",
                "Other nodes' listener paths not taken into the matcher",
                c,
                get(&self.remote_paths_refused),
            ),
            (
                "content_path_errors",
                "Writes of this node's listener paths that failed",
                c,
                get(&self.path_errors),
            ),
            (
                "content_paths_withdrawn",
                "A dead node's listener paths withdrawn by this node",
                c,
                get(&self.paths_withdrawn),
            ),
        ]
    }
}
