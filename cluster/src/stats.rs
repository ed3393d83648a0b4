//! The cluster's counters, read by `/metrics` (`mesgd_cluster_…`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the traffic between this node and NATS. All counts since start unless the name
/// says otherwise.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Messages sent to other nodes.
    pub forwarded: AtomicU64,
    /// Messages not sent to other nodes because the queue to NATS was full.
    pub forward_queue_full: AtomicU64,
    /// Messages whose topic has no NATS subject (too long): delivered on this node only.
    pub unmappable_topics: AtomicU64,
    /// Filters whose subject is too long: they receive this node's messages only.
    pub unmappable_filters: AtomicU64,
    /// Publishes to NATS that failed (connection closed).
    pub publish_errors: AtomicU64,
    /// Messages from other nodes routed here.
    pub received: AtomicU64,
    /// Messages delivered to a shared group here because its NATS queue group chose this node.
    pub shared_received: AtomicU64,
    /// Copies of a message from another node dropped because an overlapping subscription of
    /// this node brought it already.
    pub duplicates_dropped: AtomicU64,
    /// Duplicate-filter entries forgotten before all their copies came (a later copy would be
    /// delivered again).
    pub dedupe_forgotten: AtomicU64,
    /// Messages of this node's own that came back (none while `no_echo` works).
    pub echoes_dropped: AtomicU64,
    /// Messages from NATS that could not be read (headers, subject).
    pub decode_errors: AtomicU64,
    /// Messages from other nodes dropped because the queue from NATS was full.
    pub receive_queue_full: AtomicU64,
    /// NATS subscriptions now (a gauge).
    pub subscriptions: AtomicU64,
    /// Retained changes stored in the retained stream.
    pub retained_stored: AtomicU64,
    /// Retained changes not stored because the queue to the stream was full.
    pub retained_queue_full: AtomicU64,
    /// Retained changes the stream refused or did not acknowledge.
    pub retained_store_errors: AtomicU64,
    /// Retained changes read from the stream and applied here (this node's own included).
    pub retained_applied: AtomicU64,
    /// NATS slow-consumer events (the server or the client dropped messages for this node).
    pub slow_consumers: AtomicU64,
    /// Times the NATS connection was lost.
    pub disconnects: AtomicU64,
    /// Client ids this node claimed in the session registry.
    pub registry_claims: AtomicU64,
    /// Compare-and-swap conflicts while claiming (another node wrote the record meanwhile).
    pub registry_conflicts: AtomicU64,
    /// Claims that failed (NATS unreachable, timed out): the client was refused.
    pub registry_unavailable: AtomicU64,
    /// Records that could not be read (overwritten by the claim).
    pub registry_unreadable: AtomicU64,
    /// Takeover requests sent to a previous owner node.
    pub registry_takeovers_sent: AtomicU64,
    /// Takeover requests nobody answered at once: the previous owner is gone.
    pub registry_owner_gone: AtomicU64,
    /// Takeover requests that failed or got no answer in time (the claim stands).
    pub registry_takeover_timeouts: AtomicU64,
    /// Clients of this node another node took over.
    pub registry_taken_over: AtomicU64,
    /// Takeover requests ignored because this node's claim is newer.
    pub registry_stale_requests: AtomicU64,
    /// Records deleted when a session ended here.
    pub registry_released: AtomicU64,
    /// Deletes refused because a newer owner holds the record (this node was fenced).
    pub registry_fenced: AtomicU64,
    /// Deletes that failed or timed out (the record stays, naming this node).
    pub registry_release_errors: AtomicU64,
    /// Persistent sessions this node handed over to the client's new node.
    pub registry_sessions_handed: AtomicU64,
    /// Persistent sessions another node handed over to this one.
    pub registry_sessions_received: AtomicU64,
    /// Sessions not handed over: their subscriptions did not fit in a reply.
    pub registry_handover_too_large: AtomicU64,
    /// QoS 1/2 messages stored in the durable stream (their acknowledgement could go).
    pub durable_stored: AtomicU64,
    /// Queued messages of a session handed over that did not fit in the reply (lost).
    pub registry_messages_not_handed: AtomicU64,
    /// Queued and in-flight messages of sessions handed over to this node.
    pub registry_messages_received: AtomicU64,
    /// QoS 1/2 messages the durable stream refused or did not acknowledge in time.
    pub durable_store_errors: AtomicU64,
    /// QoS 1/2 messages not stored because the queue to the durable stream was full.
    pub durable_queue_full: AtomicU64,
    /// The most stores that awaited the durable stream's acknowledgement at once (a gauge).
    pub durable_in_flight_peak: AtomicU64,
}

/// Whether a value is a level (gauge) or a count (counter), for the exporter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Counts since start.
    Counter,
    /// A level now.
    Gauge,
}

impl ClusterStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Every counter: its name (for `mesgd_cluster_<name>`), help text, kind and value.
    pub fn values(&self) -> Vec<(&'static str, &'static str, Kind, u64)> {
        use Kind::{Counter, Gauge};
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("forwarded", "Messages sent to other nodes", Counter, get(&self.forwarded)),
            (
                "forward_queue_full",
                "Messages not sent to other nodes: the queue to NATS was full",
                Counter,
                get(&self.forward_queue_full),
            ),
            (
                "unmappable_topics",
                "Messages kept on this node: their topic has no NATS subject",
                Counter,
                get(&self.unmappable_topics),
            ),
            (
                "unmappable_filters",
                "Filters without a NATS subject (local messages only)",
                Counter,
                get(&self.unmappable_filters),
            ),
            ("publish_errors", "Publishes to NATS that failed", Counter, get(&self.publish_errors)),
            ("received", "Messages from other nodes routed here", Counter, get(&self.received)),
            (
                "duplicates_dropped",
                "Copies dropped that an overlapping NATS subscription brought already",
                Counter,
                get(&self.duplicates_dropped),
            ),
            (
                "dedupe_forgotten",
                "Duplicate-filter entries forgotten before every copy came",
                Counter,
                get(&self.dedupe_forgotten),
            ),
            (
                "echoes_dropped",
                "This node's own messages that came back from NATS",
                Counter,
                get(&self.echoes_dropped),
            ),
            ("decode_errors", "Messages from NATS that could not be read", Counter, get(&self.decode_errors)),
            (
                "receive_queue_full",
                "Messages from other nodes dropped: the queue from NATS was full",
                Counter,
                get(&self.receive_queue_full),
            ),
            ("subscriptions", "NATS subscriptions of this node", Gauge, get(&self.subscriptions)),
            (
                "retained_stored",
                "Retained changes stored in the retained stream",
                Counter,
                get(&self.retained_stored),
            ),
            (
                "retained_queue_full",
                "Retained changes not stored: the queue to the stream was full",
                Counter,
                get(&self.retained_queue_full),
            ),
            (
                "retained_store_errors",
                "Retained changes the stream refused or did not acknowledge",
                Counter,
                get(&self.retained_store_errors),
            ),
            (
                "retained_applied",
                "Retained changes read from the stream and applied here",
                Counter,
                get(&self.retained_applied),
            ),
            ("slow_consumers", "NATS slow-consumer events", Counter, get(&self.slow_consumers)),
            ("disconnects", "Times the NATS connection was lost", Counter, get(&self.disconnects)),
            (
                "registry_claims",
                "Client ids claimed in the session registry",
                Counter,
                get(&self.registry_claims),
            ),
            (
                "registry_conflicts",
                "Compare-and-swap conflicts while claiming a client id",
                Counter,
                get(&self.registry_conflicts),
            ),
            (
                "registry_unavailable",
                "Connects refused: the session registry was unavailable",
                Counter,
                get(&self.registry_unavailable),
            ),
            (
                "registry_unreadable",
                "Unreadable session registry records",
                Counter,
                get(&self.registry_unreadable),
            ),
            (
                "registry_takeovers_sent",
                "Takeover requests sent to a client's previous node",
                Counter,
                get(&self.registry_takeovers_sent),
            ),
            (
                "registry_owner_gone",
                "Takeover requests with no responder: the previous node is gone",
                Counter,
                get(&self.registry_owner_gone),
            ),
            (
                "registry_takeover_timeouts",
                "Takeover requests that failed or were not answered in time",
                Counter,
                get(&self.registry_takeover_timeouts),
            ),
            (
                "registry_taken_over",
                "Clients of this node taken over by another",
                Counter,
                get(&self.registry_taken_over),
            ),
            (
                "registry_stale_requests",
                "Takeover requests ignored: this node's claim is newer",
                Counter,
                get(&self.registry_stale_requests),
            ),
            (
                "registry_released",
                "Registry records deleted as sessions ended",
                Counter,
                get(&self.registry_released),
            ),
            (
                "registry_fenced",
                "Registry deletes refused: a newer owner holds the record",
                Counter,
                get(&self.registry_fenced),
            ),
            (
                "registry_release_errors",
                "Registry deletes that failed or timed out",
                Counter,
                get(&self.registry_release_errors),
            ),
            (
                "registry_sessions_handed",
                "Persistent sessions handed over to another node",
                Counter,
                get(&self.registry_sessions_handed),
            ),
            (
                "registry_sessions_received",
                "Persistent sessions handed over by another node",
                Counter,
                get(&self.registry_sessions_received),
            ),
            (
                "registry_handover_too_large",
                "Sessions not handed over: too many subscriptions for a reply",
                Counter,
                get(&self.registry_handover_too_large),
            ),
            (
                "durable_stored",
                "QoS 1/2 messages stored in the durable stream",
                Counter,
                get(&self.durable_stored),
            ),
            (
                "durable_store_errors",
                "QoS 1/2 messages the durable stream refused or did not acknowledge in time",
                Counter,
                get(&self.durable_store_errors),
            ),
            (
                "durable_queue_full",
                "QoS 1/2 messages not stored: the queue to the durable stream was full",
                Counter,
                get(&self.durable_queue_full),
            ),
            (
                "durable_in_flight_peak",
                "The most QoS 1/2 stores awaiting the durable stream at once",
                Gauge,
                get(&self.durable_in_flight_peak),
            ),
        ]
    }
}
