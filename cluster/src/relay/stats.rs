//! The counters of the relay across nodes, exported with the other cluster counters
//! (`mesgd_cluster_relay_…`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::stats::Kind;

/// Counters of the relay's traffic through the cluster, since start.
#[derive(Debug, Default)]
pub struct RelayClusterStats {
    /// Addresses this node claimed in the relay bucket.
    pub claims: AtomicU64,
    /// Registrations refused because a client on another node holds the address.
    pub claims_in_use: AtomicU64,
    /// Registrations refused because the bucket or the holder could not be reached in time.
    pub claims_unavailable: AtomicU64,
    /// Compare-and-swap conflicts while claiming an address.
    pub conflicts: AtomicU64,
    /// Records naming a node that is gone (no responder): overwritten, or the message queued.
    pub owner_gone: AtomicU64,
    /// Records deleted when an address left this node.
    pub released: AtomicU64,
    /// Deletes refused because another node holds the address now.
    pub fenced: AtomicU64,
    /// Deletes that failed or timed out.
    pub release_errors: AtomicU64,
    /// Direct messages this node sent to a client on another node.
    pub sent_remote: AtomicU64,
    /// Direct messages from another node written to a client here.
    pub received: AtomicU64,
    /// Direct messages from another node for an address no client here holds.
    pub not_here: AtomicU64,
    /// Messages stored in the cluster's store-and-forward queue.
    pub queued: AtomicU64,
    /// Messages the queue stream refused (full) or did not acknowledge: the sender was told.
    pub queue_refused: AtomicU64,
    /// Sends that failed: the holder did not answer in time, or NATS was unreachable.
    pub send_failures: AtomicU64,
    /// Sends refused at once because the queue to the cluster task was full.
    pub send_queue_full: AtomicU64,
    /// Messages taken from the cluster queue and written to their recipient here.
    pub flushed: AtomicU64,
    /// Messages taken from the cluster queue and dropped: older than the TTL.
    pub flush_expired: AtomicU64,
    /// Messages taken from the cluster queue and dropped: the oldest, past the per-address
    /// byte cap.
    pub flush_over_bytes: AtomicU64,
    /// Messages put back into the cluster queue (their recipient left during the flush).
    pub requeued: AtomicU64,
    /// Relay messages from other nodes that could not be read.
    pub decode_errors: AtomicU64,
    /// Alias bindings this node created in the relay bucket (first key wins cluster-wide).
    pub aliases_bound: AtomicU64,
    /// Registrations refused by a cluster-wide alias binding.
    pub alias_refused: AtomicU64,
    /// Rooms this node subscribes to now (it has a member; a gauge).
    pub rooms: AtomicU64,
    /// Room messages of this node's members published to the other nodes.
    pub room_sent: AtomicU64,
    /// Room messages from other nodes handed to this node's members.
    pub room_received: AtomicU64,
    /// Room messages from other nodes that found no member here (the last left meanwhile).
    pub room_unmatched: AtomicU64,
    /// Room messages not sent to other nodes: the queue to NATS was full.
    pub room_queue_full: AtomicU64,
    /// Room publishes to NATS that failed.
    pub room_publish_errors: AtomicU64,
    /// Room subscriptions that could not be made.
    pub room_subscribe_errors: AtomicU64,
    /// `joined_room` answers sent after the bound (`registry_timeout_ms`) without this node's
    /// room subscriptions confirmed at its NATS server.
    pub room_sync_timeouts: AtomicU64,
    /// Pipes from a client here opened on the peer's node.
    pub pipes_opened: AtomicU64,
    /// Pipes from a client of another node opened to a client here.
    pub pipes_accepted: AtomicU64,
    /// Pipe opens to another node refused: the peer not connected there, or a pipe cap.
    pub pipe_opens_refused: AtomicU64,
    /// Pipe opens not answered in time, with NATS down, or with an unreadable answer.
    pub pipe_open_failures: AtomicU64,
    /// `pipe_data` frames published to the other end's node.
    pub pipe_data_sent: AtomicU64,
    /// `pipe_data` frames from another node written to the end here.
    pub pipe_data_received: AtomicU64,
    /// `pipe_data` frames from another node for a pipe not here (its sender is told it is
    /// closed).
    pub pipe_data_unknown: AtomicU64,
    /// `pipe_data` frames from another node the end here could not take (over its transport
    /// limit, or past its output cap).
    pub pipe_data_dropped: AtomicU64,
    /// Pipe closes published to the other end's node.
    pub pipe_closes_sent: AtomicU64,
    /// Pipe closes from another node that closed the end here.
    pub pipe_closes_received: AtomicU64,
    /// Pipes closed here because the other end's node instance is gone (lease taken over, or
    /// restarted).
    pub pipes_node_gone: AtomicU64,
    /// Pipe frames refused at once: the queue to NATS was full.
    pub pipe_queue_full: AtomicU64,
    /// Pipe frames NATS did not take.
    pub pipe_publish_errors: AtomicU64,
    /// Clients here made a game's waiter (its record written in the bucket).
    pub match_waiting: AtomicU64,
    /// Pairs made here with a waiter of this node, through the bucket.
    pub matched_here: AtomicU64,
    /// Pairs made here with a waiter on another node.
    pub matched_remote: AtomicU64,
    /// Waiters here paired by a caller on another node.
    pub match_told: AtomicU64,
    /// Waiter records taken whose waiter was gone (left, its node dead, or restarted).
    pub match_stale: AtomicU64,
    /// Compare-and-swap conflicts on games' records.
    pub match_conflicts: AtomicU64,
    /// Waiter records deleted as their waiter left or lost the right to the game.
    pub match_withdrawn: AtomicU64,
    /// `find_match`es or withdrawals that could not reach the bucket or the waiter's node in
    /// time (the caller was told `relay overloaded, retry later`).
    pub match_errors: AtomicU64,
    /// `find_match`es or withdrawals refused at once: the queue to the cluster was full.
    pub match_queue_full: AtomicU64,
    /// This node's figures written to the bucket.
    pub figures_published: AtomicU64,
    /// Writes of this node's figures that failed (tried again at the next change or tick).
    pub figures_errors: AtomicU64,
    /// Nodes that did not answer in time how many members a room has there (counted as none).
    pub room_count_failures: AtomicU64,
}

impl RelayClusterStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Every counter: its name (`relay_<name>`), help text, kind and value.
    pub fn values(&self) -> Vec<(&'static str, &'static str, Kind, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = Kind::Counter;
        vec![
            ("relay_claims", "Relay addresses claimed in the cluster", c, get(&self.claims)),
            (
                "relay_claims_in_use",
                "Relay registrations refused: the address is held on another node",
                c,
                get(&self.claims_in_use),
            ),
            (
                "relay_claims_unavailable",
                "Relay registrations refused: the cluster could not be reached in time",
                c,
                get(&self.claims_unavailable),
            ),
            (
                "relay_conflicts",
                "Compare-and-swap conflicts claiming relay addresses",
                c,
                get(&self.conflicts),
            ),
            (
                "relay_owner_gone",
                "Relay address records naming a node that is gone",
                c,
                get(&self.owner_gone),
            ),
            ("relay_released", "Relay address records deleted as addresses left", c, get(&self.released)),
            (
                "relay_fenced",
                "Relay address deletes refused: another node holds it now",
                c,
                get(&self.fenced),
            ),
            ("relay_release_errors", "Relay address deletes that failed", c, get(&self.release_errors)),
            (
                "relay_sent_remote",
                "Direct messages sent to clients on other nodes",
                c,
                get(&self.sent_remote),
            ),
            (
                "relay_received",
                "Direct messages from other nodes written to clients here",
                c,
                get(&self.received),
            ),
            (
                "relay_not_here",
                "Direct messages from other nodes for addresses not held here",
                c,
                get(&self.not_here),
            ),
            ("relay_queued", "Messages stored in the cluster store-and-forward queue", c, get(&self.queued)),
            (
                "relay_queue_refused",
                "Messages the cluster queue refused or did not acknowledge",
                c,
                get(&self.queue_refused),
            ),
            (
                "relay_send_failures",
                "Relay sends through the cluster that failed",
                c,
                get(&self.send_failures),
            ),
            (
                "relay_send_queue_full",
                "Relay sends refused: the queue to the cluster was full",
                c,
                get(&self.send_queue_full),
            ),
            (
                "relay_flushed",
                "Messages flushed from the cluster queue to clients here",
                c,
                get(&self.flushed),
            ),
            (
                "relay_flush_expired",
                "Cluster-queued messages dropped at flush: expired",
                c,
                get(&self.flush_expired),
            ),
            (
                "relay_flush_over_bytes",
                "Cluster-queued messages dropped at flush: past the per-address byte cap",
                c,
                get(&self.flush_over_bytes),
            ),
            ("relay_requeued", "Messages put back into the cluster queue", c, get(&self.requeued)),
            (
                "relay_decode_errors",
                "Relay messages from other nodes that could not be read",
                c,
                get(&self.decode_errors),
            ),
            ("relay_aliases_bound", "Alias bindings created in the cluster", c, get(&self.aliases_bound)),
            (
                "relay_alias_refused",
                "Relay registrations refused by a cluster-wide alias binding",
                c,
                get(&self.alias_refused),
            ),
            (
                "relay_rooms",
                "Rooms with a member here, subscribed across nodes",
                Kind::Gauge,
                get(&self.rooms),
            ),
            ("relay_room_sent", "Room messages published to other nodes", c, get(&self.room_sent)),
            (
                "relay_room_received",
                "Room messages from other nodes handed to members here",
                c,
                get(&self.room_received),
            ),
            (
                "relay_room_unmatched",
                "Room messages from other nodes with no member here",
                c,
                get(&self.room_unmatched),
            ),
            (
                "relay_room_queue_full",
                "Room messages not sent: the queue to NATS was full",
                c,
                get(&self.room_queue_full),
            ),
            (
                "relay_room_publish_errors",
                "Room publishes to NATS that failed",
                c,
                get(&self.room_publish_errors),
            ),
            (
                "relay_room_subscribe_errors",
                "Room subscriptions that could not be made",
                c,
                get(&self.room_subscribe_errors),
            ),
            (
                "relay_room_sync_timeouts",
                "joined_room answers sent after the bound without the room subscription confirmed",
                c,
                get(&self.room_sync_timeouts),
            ),
            (
                "relay_pipes_opened",
                "Pipes from clients here opened on other nodes",
                c,
                get(&self.pipes_opened),
            ),
            (
                "relay_pipes_accepted",
                "Pipes from clients of other nodes opened to clients here",
                c,
                get(&self.pipes_accepted),
            ),
            (
                "relay_pipe_opens_refused",
                "Pipe opens refused by the peer's node (not connected, or a pipe cap)",
                c,
                get(&self.pipe_opens_refused),
            ),
            (
                "relay_pipe_open_failures",
                "Pipe opens to other nodes not answered in time or unreadable",
                c,
                get(&self.pipe_open_failures),
            ),
            ("relay_pipe_data_sent", "Pipe data frames sent to other nodes", c, get(&self.pipe_data_sent)),
            (
                "relay_pipe_data_received",
                "Pipe data frames from other nodes written to clients here",
                c,
                get(&self.pipe_data_received),
            ),
            (
                "relay_pipe_data_unknown",
                "Pipe data frames from other nodes for pipes not here",
                c,
                get(&self.pipe_data_unknown),
            ),
            (
                "relay_pipe_data_dropped",
                "Pipe data frames from other nodes the end here could not take",
                c,
                get(&self.pipe_data_dropped),
            ),
            ("relay_pipe_closes_sent", "Pipe closes sent to other nodes", c, get(&self.pipe_closes_sent)),
            (
                "relay_pipe_closes_received",
                "Pipe closes from other nodes that closed an end here",
                c,
                get(&self.pipe_closes_received),
            ),
            (
                "relay_pipes_node_gone",
                "Pipes closed because the other end's node died or restarted",
                c,
                get(&self.pipes_node_gone),
            ),
            (
                "relay_pipe_queue_full",
                "Pipe frames refused: the queue to NATS was full",
                c,
                get(&self.pipe_queue_full),
            ),
            ("relay_pipe_publish_errors", "Pipe frames NATS did not take", c, get(&self.pipe_publish_errors)),
            (
                "relay_match_waiting",
                "Clients here made a game's waiter in the cluster",
                c,
                get(&self.match_waiting),
            ),
            ("relay_matched_here", "Pairs made with a waiter of this node", c, get(&self.matched_here)),
            (
                "relay_matched_remote",
                "Pairs made with a waiter on another node",
                c,
                get(&self.matched_remote),
            ),
            ("relay_match_told", "Waiters here paired by callers on other nodes", c, get(&self.match_told)),
            ("relay_match_stale", "Game waiter records whose waiter was gone", c, get(&self.match_stale)),
            (
                "relay_match_conflicts",
                "Compare-and-swap conflicts on game records",
                c,
                get(&self.match_conflicts),
            ),
            (
                "relay_match_withdrawn",
                "Game waiter records deleted as their waiter left",
                c,
                get(&self.match_withdrawn),
            ),
            (
                "relay_match_errors",
                "Matchmaking requests that could not reach the cluster in time",
                c,
                get(&self.match_errors),
            ),
            (
                "relay_match_queue_full",
                "Matchmaking requests refused: the queue to the cluster was full",
                c,
                get(&self.match_queue_full),
            ),
            ("relay_figures_published", "This node's relay figures written", c, get(&self.figures_published)),
            (
                "relay_figures_errors",
                "Writes of this node's relay figures that failed",
                c,
                get(&self.figures_errors),
            ),
            (
                "relay_room_count_failures",
                "Nodes that did not answer a room's member count in time",
                c,
                get(&self.room_count_failures),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    /// Every counter of [`super::RelayClusterStats`] is exported under `relay_<field>`, as the
    /// cluster's own test checks for [`crate::ClusterStats`].
    #[test]
    fn every_counter_is_exported() {
        let fields = crate::stats::counter_fields(include_str!("stats.rs"), "impl RelayClusterStats");
        let exported = super::RelayClusterStats::default().values();
        for field in &fields {
            let name = format!("relay_{field}");
            assert!(
                exported.iter().any(|(n, ..)| *n == name),
                "RelayClusterStats::{field} is not in values()"
            );
        }
        assert_eq!(fields.len(), exported.len(), "a value without its field, or a field counted twice");
    }
}
