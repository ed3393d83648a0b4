//! The relay's counters: plain atomics, bumped where things happen, read by whoever reports
//! them (`/metrics`, tests). The sizes of the relay's structures (rooms, pipes, waiters, queues,
//! bindings) are not counted here but read from the structures themselves
//! ([`super::hub::Hub::sizes`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the relay front end, since start.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RelayStats {
    /// Open TCP and WebSocket connections (a gauge).
    pub connections: AtomicU64,
    /// UDP sources tracked now, registered or not (a gauge).
    pub udp_sources: AtomicU64,
    /// UDP sources holding an address now (a gauge).
    pub udp_registered: AtomicU64,
    /// Frames received, every transport.
    pub frames_received: AtomicU64,
    /// Frames sent, every transport.
    pub frames_sent: AtomicU64,
    /// Frame bytes received (bodies, without the TCP length prefix).
    pub bytes_received: AtomicU64,
    /// Bytes written to sockets.
    pub bytes_sent: AtomicU64,
    /// Successful `register`s.
    pub registrations: AtomicU64,
    /// `register`s refused because the load factor was above 0.95.
    pub registers_overloaded: AtomicU64,
    /// `register`s the provider chain or the ACL refused.
    pub registers_denied: AtomicU64,
    /// `send`s delivered to a connected address.
    pub sends_live: AtomicU64,
    /// `send`s queued for an offline address.
    pub sends_queued: AtomicU64,
    /// `send`s the offline queues could not take (`relay overloaded, retry later`).
    pub sends_refused: AtomicU64,
    /// Queued messages flushed at `register`.
    pub queue_flushed: AtomicU64,
    /// Queued messages dropped at flush because the recipient's transport cannot carry them (a
    /// UDP client, whose datagrams are smaller than queued frames may be).
    pub queue_flush_too_large: AtomicU64,
    /// Messages refused with `rate limit exceeded`.
    pub rate_limited: AtomicU64,
    /// Connections closed for sending far over their budget.
    pub abuse_disconnects: AtomicU64,
    /// Connections closed because their output passed `max_output_bytes`.
    pub slow_consumer_disconnects: AtomicU64,
    /// Connections closed by the TCP idle timeout or a WebSocket without pong, and UDP sources
    /// released after `udp_idle_s`.
    pub dead_peer_releases: AtomicU64,
    /// TCP frames over the limit (answered, then the connection is closed).
    pub oversize_tcp: AtomicU64,
    /// WebSocket messages over the limit (closed with 1009).
    pub oversize_ws: AtomicU64,
    /// UDP datagrams over the limit (dropped).
    pub oversize_udp: AtomicU64,
    /// Messages not forwarded because their forwarded form is over the recipient's frame limit.
    pub too_large_to_forward: AtomicU64,
    /// Messages for a connection that was closing or over its output cap, dropped.
    pub dropped_gone: AtomicU64,
    /// Replies to unregistered UDP sources dropped by the anti-amplification rule.
    pub udp_amplification_drops: AtomicU64,
    /// Datagrams from new UDP sources dropped because `udp_max_sources` are tracked.
    pub udp_sources_refused: AtomicU64,
    /// Datagrams that could not be sent (the socket refused them).
    pub udp_send_errors: AtomicU64,
}

impl RelayStats {
    /// Adds `n` to `counter`.
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Subtracts `n` from a gauge.
    pub(crate) fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// The sizes of the relay's structures now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sizes {
    /// Registered addresses.
    pub addresses: usize,
    /// Rooms with members.
    pub rooms: usize,
    /// Memberships over all rooms.
    pub memberships: usize,
    /// Open pipes.
    pub pipes: usize,
    /// Matchmaking waits.
    pub waiters: usize,
    /// Addresses with an offline queue.
    pub queues: usize,
    /// Messages in the offline queues.
    pub queued_messages: usize,
    /// Bytes in the offline queues.
    pub queued_bytes: usize,
    /// Alias bindings.
    pub aliases: usize,
    /// Offline-queue drops so far: pushed out by the count cap, by the byte cap, expired.
    pub queue_drops: (u64, u64, u64),
    /// Refusals by a count cap so far: rooms, pipes, matchmaking, alias bindings.
    pub refused: (u64, u64, u64, u64),
}
