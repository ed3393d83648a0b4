//! The broker's counters, for `$SYS`, the logs and metrics: totals, drops by reason, and the
//! traffic of each protocol's connections (front ends count theirs).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::auth::Protocol;

/// Counters. All relaxed atomics: they are statistics, not state.
#[derive(Debug, Default)]
pub struct Stats {
    /// Application messages received from clients.
    pub messages_received: AtomicU64,
    /// Application messages sent to clients.
    pub messages_sent: AtomicU64,
    /// Messages dropped by queue limits, expiry or oversize.
    pub messages_dropped: AtomicU64,
    /// Bytes read from clients.
    pub bytes_received: AtomicU64,
    /// Bytes written to clients.
    pub bytes_sent: AtomicU64,
    /// Connections currently past CONNECT (or relay `register`).
    pub clients_connected: AtomicU64,
    /// Connections accepted since start.
    pub connections_total: AtomicU64,
    /// Failed authentication attempts since start.
    pub auth_failures: AtomicU64,
    /// Publishes refused by an ACL (or the `$SYS` reservation) since start.
    pub publishes_denied: AtomicU64,
    /// Subscriptions refused by an ACL since start.
    pub subscribes_denied: AtomicU64,
    /// Deliveries the receiver's ACL (or its no-local option) filtered out while routing.
    pub deliveries_filtered: AtomicU64,
    /// Of [`Stats::messages_dropped`]: dropped by a session's queue limits.
    pub dropped_queue_full: AtomicU64,
    /// Of [`Stats::messages_dropped`]: expired before they could be sent.
    pub dropped_expired: AtomicU64,
    /// Of [`Stats::messages_dropped`]: larger than the receiver accepts.
    pub dropped_too_large: AtomicU64,
    /// Retained publishes routed but not kept: the retained store was at one of its caps.
    pub retained_refused: AtomicU64,
    /// Traffic per protocol, in the order of [`TRAFFIC_PROTOCOLS`].
    traffic: [Traffic; TRAFFIC_PROTOCOLS.len()],
}

/// Why a delivery was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// The session's queue was full (or an older QoS 0 message made room for it).
    QueueFull,
    /// The message expired before it could be sent.
    Expired,
    /// The message is larger than the receiver accepts.
    TooLarge,
}

/// Messages and bytes in and out of one protocol's connections.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Application messages received from clients.
    pub messages_in: AtomicU64,
    /// Application messages sent to clients.
    pub messages_out: AtomicU64,
    /// Bytes read from clients.
    pub bytes_in: AtomicU64,
    /// Bytes written to clients.
    pub bytes_out: AtomicU64,
}

/// The protocols whose traffic is counted apart, in the order [`Stats::traffic_by_protocol`]
/// lists them.
pub const TRAFFIC_PROTOCOLS: [Protocol; 5] =
    [Protocol::Mqtt31, Protocol::Mqtt311, Protocol::Mqtt5, Protocol::Relay, Protocol::ContentRouting];

impl Stats {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Takes `n` from a counter (for the gauges among them, such as connected clients).
    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Counts `n` dropped deliveries, in the total and under their reason.
    pub fn dropped(&self, reason: DropReason, n: u64) {
        Stats::add(&self.messages_dropped, n);
        let by_reason = match reason {
            DropReason::QueueFull => &self.dropped_queue_full,
            DropReason::Expired => &self.dropped_expired,
            DropReason::TooLarge => &self.dropped_too_large,
        };
        Stats::add(by_reason, n);
    }

    /// The traffic counters of `protocol`'s connections.
    pub fn traffic(&self, protocol: Protocol) -> &Traffic {
        let index = match protocol {
            Protocol::Mqtt31 => 0,
            Protocol::Mqtt311 => 1,
            Protocol::Mqtt5 => 2,
            Protocol::Relay => 3,
            Protocol::ContentRouting => 4,
        };
        &self.traffic[index]
    }

    /// Every protocol with its traffic counters.
    pub fn traffic_by_protocol(&self) -> impl Iterator<Item = (Protocol, &Traffic)> {
        TRAFFIC_PROTOCOLS.iter().map(|&p| (p, self.traffic(p)))
    }
}
