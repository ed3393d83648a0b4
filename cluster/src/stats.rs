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
    /// Tombstones of retained deletes this node stored and later purged from the stream.
    pub retained_tombstones_purged: AtomicU64,
    /// Retained changes read from the stream and applied here (this node's own included).
    pub retained_applied: AtomicU64,
    /// Times the retained stream was found replaced by a new one (or missing, and created
    /// again) and joined again.
    pub retained_rejoins: AtomicU64,
    /// Retained messages of this node's store put into a new retained stream on joining it
    /// (those another node had put there first are not counted).
    pub retained_republished: AtomicU64,
    /// NATS slow-consumer events (the server or the client dropped messages for this node).
    pub slow_consumers: AtomicU64,
    /// Times the NATS connection was lost.
    pub disconnects: AtomicU64,
    /// Attempts to connect to NATS at start that failed and were tried again (a server not
    /// listening, answering or resolvable yet), within `connect_timeout_ms`.
    pub initial_connect_failures: AtomicU64,
    /// Client connections closed because NATS had been lost for `nats_lost_close_ms`.
    pub nats_lost_closes: AtomicU64,
    /// Wills of live connections kept in the wills bucket.
    pub wills_kept: AtomicU64,
    /// Wills that could not be kept cluster-wide (NATS down, the queue full, an id too long):
    /// sent by this node only.
    pub wills_unkept: AtomicU64,
    /// Will changes dropped because the queue to the bucket was full.
    pub wills_queue_full: AtomicU64,
    /// Kept wills whose record could not be deleted at the connection's end.
    pub wills_release_errors: AtomicU64,
    /// Lease records this node could not rewrite.
    pub lease_errors: AtomicU64,
    /// Leases of dead nodes this node took over.
    pub leases_taken: AtomicU64,
    /// Wills of dead nodes (or of this node's previous instance) this node sent.
    pub wills_sent: AtomicU64,
    /// Wills of dead nodes not sent: delayed, and the client connected again elsewhere.
    pub wills_cancelled: AtomicU64,
    /// Kept wills that could not be read.
    pub wills_unread: AtomicU64,
    /// Will keys read from the bucket at start-up and at lease takeovers (only the keys of the
    /// node whose wills are sent).
    pub wills_scanned: AtomicU64,
    /// Builtin user changes of this node stored in the users stream.
    pub users_published: AtomicU64,
    /// Builtin user changes that could not be stored in the users stream (retried).
    pub users_publish_errors: AtomicU64,
    /// Users from the stream written into this node's store.
    pub users_applied: AtomicU64,
    /// Users from the stream that could not be written into this node's store (retried).
    pub users_apply_errors: AtomicU64,
    /// Users from the stream not written because this node's store had a newer change of its
    /// own, not yet published (which is published next and wins).
    pub users_kept_local: AtomicU64,
    /// Unusable messages in the users stream (ignored).
    pub users_invalid: AtomicU64,
    /// Users whose name is too long for a subject: kept on this node only.
    pub users_unreplicable: AtomicU64,
    /// Times this node found the users stream replaced by a new one (deleted and created
    /// again, or lost with NATS's storage) and joined it, publishing its records again.
    pub users_rejoins: AtomicU64,
    /// Times this node adopted the cluster's login-session key (0 or 1 per start, and at
    /// most 1 per rejoin).
    pub logins_key_adopted: AtomicU64,
    /// Times this node found the logins stream replaced by a new one (deleted and created
    /// again, or lost with NATS's storage) and joined it, publishing its logouts again.
    pub logins_rejoins: AtomicU64,
    /// Logouts of this node stored in the logins stream.
    pub logins_revocations_published: AtomicU64,
    /// Logouts that could not be stored in the logins stream (retried).
    pub logins_publish_errors: AtomicU64,
    /// Logouts of other nodes applied here.
    pub logins_revocations_applied: AtomicU64,
    /// Logouts of other nodes that could not be applied here (the store failed, or the list
    /// is full).
    pub logins_apply_errors: AtomicU64,
    /// Expired logouts purged from the stream by this node.
    pub logins_revocations_pruned: AtomicU64,
    /// Unusable messages in the logins stream (ignored).
    pub logins_invalid: AtomicU64,
    /// Console sessions made here and stored in the bucket.
    pub console_stored: AtomicU64,
    /// Console logouts here stored in the bucket (the session ends on every node).
    pub console_ended: AtomicU64,
    /// Console sessions' last uses written to the bucket.
    pub console_touched: AtomicU64,
    /// Console sessions this node dropped (idle, ended to make room, administrator gone)
    /// deleted from the bucket.
    pub console_forgotten: AtomicU64,
    /// Console session writes not made: the record was ended or used on another node meanwhile.
    pub console_conflicts: AtomicU64,
    /// Console session writes that failed or were not answered in time.
    pub console_write_errors: AtomicU64,
    /// Console session writes not queued: the queue was full.
    pub console_queue_full: AtomicU64,
    /// Changes of the bucket's console sessions applied to this node's table.
    pub console_applied: AtomicU64,
    /// Console sessions from the bucket not taken: this node's table was full.
    pub console_refused: AtomicU64,
    /// Unreadable console session records (or keys) in the bucket.
    pub console_invalid: AtomicU64,
    /// Lookups in the bucket of a session a request named and this node did not know.
    pub console_fetched: AtomicU64,
    /// Such lookups not made: as many were in flight as allowed.
    pub console_fetch_busy: AtomicU64,
    /// Times this node made its token key store the cluster's (at the start, and each time
    /// another node changed it).
    pub token_keys_adopted: AtomicU64,
    /// Changes of this node's token key store stored in the cluster (its first store, or a
    /// rotation here).
    pub token_keys_published: AtomicU64,
    /// Changes of this node's token key store that could not be stored (retried), or lost a
    /// race with another node's change.
    pub token_keys_publish_errors: AtomicU64,
    /// Key stores from the cluster that could not be read or written here (kept the old keys).
    pub token_keys_invalid: AtomicU64,
    /// Times this node found the logins stream replaced by a new one and took (or stored)
    /// the token keys there again.
    pub token_keys_rejoins: AtomicU64,
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
    /// Client ids this node claimed again in a registry bucket that replaced a deleted one.
    pub registry_reclaimed: AtomicU64,
    /// Times a bucket or stream of this node without a follower of its own (the session
    /// registry, the session copies, wills, leases, the QoS 1/2 stream) was found deleted
    /// (and created again) or replaced.
    pub assets_replaced: AtomicU64,
    /// Records deleted when a session ended here.
    pub registry_released: AtomicU64,
    /// Registry records of a dead node released by the node that took over its lease (their
    /// client ids had no session to resume).
    pub registry_swept: AtomicU64,
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
    /// The relay across nodes (`relay_…`).
    pub relay: crate::relay::RelayClusterStats,
    /// Content routing across nodes (`content_…`).
    pub content: crate::content::ContentClusterStats,
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
    /// Session records written to the sessions bucket.
    pub sessions_written: AtomicU64,
    /// Session record writes that failed or timed out (tried again).
    pub session_write_errors: AtomicU64,
    /// Session record writes refused: a newer claim's record is stored.
    pub sessions_fenced: AtomicU64,
    /// Sessions not copied: their record is longer than the limit.
    pub sessions_too_large: AtomicU64,
    /// Session records that do not parse.
    pub session_records_unreadable: AtomicU64,
    /// Sessions of a dead node resumed here from their record.
    pub sessions_recovered: AtomicU64,
    /// Records of a dead node's sessions found expired, not resumed.
    pub sessions_recovered_expired: AtomicU64,
    /// Packets' changes waiting for their session record's write.
    pub session_copies_waiting: AtomicU64,
    /// Replays of the durable stream for recovered sessions that ended (whatever the outcome:
    /// `replay_truncated` and `replay_errors` count the ones that did not reach the end).
    pub replays: AtomicU64,
    /// Stored messages the replays gave to recovered sessions.
    pub replayed: AtomicU64,
    /// Stored messages a replay found the session already had (finished, held, or received
    /// live since).
    pub replay_skipped: AtomicU64,
    /// Stored messages a replay left out because they had expired.
    pub replay_expired: AtomicU64,
    /// Stored messages a replay found but the session's queue limits dropped (its client did
    /// not make room within the replay's wait, or it went offline with a full queue).
    pub replay_dropped: AtomicU64,
    /// Replays ended by a bound (messages, bytes, time) before the end of the stream.
    pub replay_truncated: AtomicU64,
    /// Replays that could not read the stream (or the session was gone before it ended).
    pub replay_errors: AtomicU64,
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
        let mut values = vec![
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
                "shared_received",
                "Messages delivered to a shared group here because its NATS queue group chose this node",
                Counter,
                get(&self.shared_received),
            ),
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
                "retained_rejoins",
                "Times the retained stream was found replaced by a new one and joined again",
                Counter,
                get(&self.retained_rejoins),
            ),
            (
                "retained_republished",
                "Retained messages of this node put into a new retained stream on joining it",
                Counter,
                get(&self.retained_republished),
            ),
            (
                "retained_tombstones_purged",
                "Tombstones of retained deletes this node purged from the retained stream",
                Counter,
                get(&self.retained_tombstones_purged),
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
                "initial_connect_failures",
                "Attempts to connect to NATS at start that failed and were tried again",
                Counter,
                get(&self.initial_connect_failures),
            ),
            (
                "nats_lost_closes",
                "Client connections closed: NATS had been lost for nats_lost_close_ms",
                Counter,
                get(&self.nats_lost_closes),
            ),
            (
                "wills_kept",
                "Wills of live connections kept in the wills bucket",
                Counter,
                get(&self.wills_kept),
            ),
            (
                "wills_unkept",
                "Wills kept on this node only (NATS down, queue full, id too long)",
                Counter,
                get(&self.wills_unkept),
            ),
            (
                "wills_queue_full",
                "Will changes dropped: the queue to the wills bucket was full",
                Counter,
                get(&self.wills_queue_full),
            ),
            (
                "wills_release_errors",
                "Kept wills whose record could not be deleted at the connection's end",
                Counter,
                get(&self.wills_release_errors),
            ),
            ("lease_errors", "Lease records this node could not rewrite", Counter, get(&self.lease_errors)),
            ("leases_taken", "Leases of dead nodes this node took over", Counter, get(&self.leases_taken)),
            (
                "wills_sent",
                "Wills of dead nodes (or of this node's previous instance) sent here",
                Counter,
                get(&self.wills_sent),
            ),
            (
                "wills_cancelled",
                "Delayed wills of dead nodes not sent: the client connected again",
                Counter,
                get(&self.wills_cancelled),
            ),
            ("wills_unread", "Kept wills that could not be read", Counter, get(&self.wills_unread)),
            (
                "wills_scanned",
                "Will keys read at start-up and at lease takeovers",
                Counter,
                get(&self.wills_scanned),
            ),
            (
                "users_published",
                "Builtin user changes stored in the users stream",
                Counter,
                get(&self.users_published),
            ),
            (
                "users_publish_errors",
                "Builtin user changes not stored in the users stream (retried)",
                Counter,
                get(&self.users_publish_errors),
            ),
            (
                "users_applied",
                "Users from the stream written into this node's store",
                Counter,
                get(&self.users_applied),
            ),
            (
                "users_apply_errors",
                "Users from the stream not written into this node's store (retried)",
                Counter,
                get(&self.users_apply_errors),
            ),
            (
                "users_kept_local",
                "Users from the stream not written: a newer local change goes out instead",
                Counter,
                get(&self.users_kept_local),
            ),
            ("users_invalid", "Unusable messages in the users stream", Counter, get(&self.users_invalid)),
            (
                "users_unreplicable",
                "Users whose name is too long for a subject (this node only)",
                Counter,
                get(&self.users_unreplicable),
            ),
            (
                "users_rejoins",
                "Times the users stream was found replaced by a new one and joined again",
                Counter,
                get(&self.users_rejoins),
            ),
            (
                "logins_key_adopted",
                "Times this node adopted the cluster's login-session key",
                Counter,
                get(&self.logins_key_adopted),
            ),
            (
                "logins_rejoins",
                "Times the logins stream was found replaced by a new one and joined again",
                Counter,
                get(&self.logins_rejoins),
            ),
            (
                "logins_revocations_published",
                "Logouts of this node stored in the logins stream",
                Counter,
                get(&self.logins_revocations_published),
            ),
            (
                "logins_publish_errors",
                "Logouts that could not be stored in the logins stream (retried)",
                Counter,
                get(&self.logins_publish_errors),
            ),
            (
                "logins_revocations_applied",
                "Logouts of other nodes applied here",
                Counter,
                get(&self.logins_revocations_applied),
            ),
            (
                "logins_apply_errors",
                "Logouts of other nodes that could not be applied here",
                Counter,
                get(&self.logins_apply_errors),
            ),
            (
                "logins_revocations_pruned",
                "Expired logouts purged from the logins stream",
                Counter,
                get(&self.logins_revocations_pruned),
            ),
            ("logins_invalid", "Unusable messages in the logins stream", Counter, get(&self.logins_invalid)),
            ("console_stored", "Console sessions made here and stored", Counter, get(&self.console_stored)),
            (
                "console_ended",
                "Console logouts here stored, ending the session on every node",
                Counter,
                get(&self.console_ended),
            ),
            ("console_touched", "Console sessions' last uses written", Counter, get(&self.console_touched)),
            (
                "console_forgotten",
                "Console sessions dropped here (idle, room, administrator gone) deleted",
                Counter,
                get(&self.console_forgotten),
            ),
            (
                "console_conflicts",
                "Console session writes not made: ended or used on another node meanwhile",
                Counter,
                get(&self.console_conflicts),
            ),
            (
                "console_write_errors",
                "Console session writes that failed or timed out",
                Counter,
                get(&self.console_write_errors),
            ),
            (
                "console_queue_full",
                "Console session writes dropped: the queue was full",
                Counter,
                get(&self.console_queue_full),
            ),
            (
                "console_applied",
                "Console session changes from the bucket applied here",
                Counter,
                get(&self.console_applied),
            ),
            (
                "console_refused",
                "Console sessions from the bucket not taken: the table was full",
                Counter,
                get(&self.console_refused),
            ),
            ("console_invalid", "Unreadable console session records", Counter, get(&self.console_invalid)),
            (
                "console_fetched",
                "Lookups in the bucket of console sessions a request named and this node did not know",
                Counter,
                get(&self.console_fetched),
            ),
            (
                "console_fetch_busy",
                "Lookups of unknown console sessions not made: the bound of lookups at once was reached",
                Counter,
                get(&self.console_fetch_busy),
            ),
            (
                "token_keys_adopted",
                "Times this node's token key store was made the cluster's",
                Counter,
                get(&self.token_keys_adopted),
            ),
            (
                "token_keys_published",
                "Changes of this node's token key store stored in the cluster",
                Counter,
                get(&self.token_keys_published),
            ),
            (
                "token_keys_publish_errors",
                "Changes of this node's token key store not stored (retried, or lost a race)",
                Counter,
                get(&self.token_keys_publish_errors),
            ),
            (
                "token_keys_invalid",
                "Key stores from the cluster that could not be used here",
                Counter,
                get(&self.token_keys_invalid),
            ),
            (
                "token_keys_rejoins",
                "Times the logins stream was found replaced and the token keys joined again",
                Counter,
                get(&self.token_keys_rejoins),
            ),
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
                "registry_swept",
                "Registry records of a dead node released by the node that took over its lease",
                Counter,
                get(&self.registry_swept),
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
                "registry_reclaimed",
                "Client ids claimed again in a registry bucket that replaced a deleted one",
                Counter,
                get(&self.registry_reclaimed),
            ),
            (
                "assets_replaced",
                "Buckets and streams of this node found deleted (and created again) or replaced",
                Counter,
                get(&self.assets_replaced),
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
                "registry_messages_not_handed",
                "Queued messages of a session handed over that did not fit in the reply",
                Counter,
                get(&self.registry_messages_not_handed),
            ),
            (
                "registry_messages_received",
                "Queued and in-flight messages of sessions handed over to this node",
                Counter,
                get(&self.registry_messages_received),
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
            (
                "sessions_written",
                "Session records written to the sessions bucket",
                Counter,
                get(&self.sessions_written),
            ),
            (
                "session_write_errors",
                "Session record writes that failed or timed out (tried again)",
                Counter,
                get(&self.session_write_errors),
            ),
            (
                "sessions_fenced",
                "Session record writes refused: a newer claim's record is stored",
                Counter,
                get(&self.sessions_fenced),
            ),
            (
                "sessions_too_large",
                "Sessions not copied: their record is longer than the limit",
                Counter,
                get(&self.sessions_too_large),
            ),
            (
                "session_records_unreadable",
                "Session records that do not parse",
                Counter,
                get(&self.session_records_unreadable),
            ),
            (
                "sessions_recovered",
                "Sessions of a dead node resumed here from their record",
                Counter,
                get(&self.sessions_recovered),
            ),
            (
                "sessions_recovered_expired",
                "Records of a dead node's sessions found expired, not resumed",
                Counter,
                get(&self.sessions_recovered_expired),
            ),
            (
                "session_copies_waiting",
                "Packets' changes waiting for their session record's write",
                Gauge,
                get(&self.session_copies_waiting),
            ),
            (
                "replays",
                "Replays of the durable stream for recovered sessions that ended",
                Counter,
                get(&self.replays),
            ),
            (
                "replayed",
                "Stored messages the replays gave to recovered sessions",
                Counter,
                get(&self.replayed),
            ),
            (
                "replay_skipped",
                "Stored messages a replay found the session already had",
                Counter,
                get(&self.replay_skipped),
            ),
            (
                "replay_expired",
                "Stored messages a replay left out because they had expired",
                Counter,
                get(&self.replay_expired),
            ),
            (
                "replay_dropped",
                "Stored messages a replay found that the session's queue limits dropped",
                Counter,
                get(&self.replay_dropped),
            ),
            (
                "replay_truncated",
                "Replays ended by a bound before the end of the stream",
                Counter,
                get(&self.replay_truncated),
            ),
            (
                "replay_errors",
                "Replays that could not read the stream to its end",
                Counter,
                get(&self.replay_errors),
            ),
        ];
        values.extend(self.relay.values());
        values.extend(self.content.values());
        values
    }
}

/// The counter fields (`pub name: AtomicU64,`) declared in `source` before `until` (the
/// struct comes before its `impl`), for the tests that every counter is exported.
#[cfg(test)]
pub(crate) fn counter_fields<'a>(source: &'a str, until: &str) -> Vec<&'a str> {
    let fields = source.split(until).next().expect("the struct comes first");
    fields
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub ")?.split_once(':'))
        .filter(|(_, kind)| kind.trim() == "AtomicU64,")
        .map(|(field, _)| field)
        .collect()
}

#[cfg(test)]
mod tests {
    /// Every counter of [`super::ClusterStats`] is exported: a field added without its line in
    /// `values` would be counted and never seen (`shared_received` was).
    #[test]
    fn every_counter_is_exported() {
        let fields = super::counter_fields(include_str!("stats.rs"), "impl ClusterStats");
        let exported = super::ClusterStats::default().values();
        let names: Vec<&str> = exported.iter().map(|(name, ..)| *name).collect();
        for field in &fields {
            assert!(names.contains(field), "ClusterStats::{field} is not in values()");
        }
        assert!(fields.len() > 50, "only {} counters found in the struct", fields.len());
    }
}
