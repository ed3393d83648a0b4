//! The broker's counters, for `$SYS`, the logs and metrics.

use std::sync::atomic::{AtomicU64, Ordering};

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
}

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
}
