//! What the content-routing front end counts: plain atomics, read by `/metrics` and tests.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the content-routing front end (since start, except the two gauges).
#[derive(Debug, Default)]
pub struct ContentStats {
    /// Open content connections (a gauge).
    pub connections: AtomicU64,
    /// Upgrades admitted.
    pub upgrades: AtomicU64,
    /// Upgrades refused for a missing or refused credential (401 and 403).
    pub upgrades_refused: AtomicU64,
    /// JSON messages received and routed.
    pub messages_in: AtomicU64,
    /// Frames refused: invalid JSON, JSON scalars, binary frames, messages over the size cap.
    pub messages_refused: AtomicU64,
    /// Listener matches: each message counts every listener it was handed to (the sender
    /// itself only with `echo`).
    pub matches: AtomicU64,
    /// Messages written to listeners.
    pub messages_out: AtomicU64,
    /// Messages not delivered because the listener's queue was over its cap (the listener is
    /// then disconnected) or the listener was closing.
    pub dropped: AtomicU64,
    /// Listeners disconnected for reading too slowly.
    pub slow_disconnects: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Subtracts one from a gauge.
pub(crate) fn sub_one(gauge: &AtomicU64) {
    gauge.fetch_sub(1, Ordering::Relaxed);
}

impl ContentStats {
    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
