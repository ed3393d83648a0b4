//! A lock-free latency histogram with fixed buckets, for durations the broker measures on paths
//! that must not take a lock (an authentication, a journal commit).
//!
//! The buckets are fixed at build time (from 100 µs to 10 s, roughly ×2.5 apart) so that every
//! recorder and every exporter agree on them without configuration; the exporter (Prometheus
//! `/metrics`) turns a [`Snapshot`] into cumulative buckets. Recording is two relaxed atomic
//! additions and a short scan; reading is a few loads. A snapshot taken while recordings land may
//! be off by the recordings in flight, as any statistic read without a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The upper bounds of the buckets, in seconds (the last, implicit bucket is +Inf).
pub const BUCKETS_S: [f64; 12] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0];

/// Counts of durations by bucket, their number and their sum.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Per bucket (not cumulative); the last slot is above the largest bound.
    buckets: [AtomicU64; BUCKETS_S.len() + 1],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// What a [`LatencyHistogram`] held at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Observations per bucket, in the order of [`BUCKETS_S`], then one above the largest bound.
    pub buckets: Vec<u64>,
    /// How many durations were recorded.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum_s: f64,
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        LatencyHistogram::default()
    }

    /// Records one duration.
    pub fn record(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let slot = BUCKETS_S.iter().position(|&bound| seconds <= bound).unwrap_or(BUCKETS_S.len());
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            buckets: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            count: self.count.load(Ordering::Relaxed),
            sum_s: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_land_in_the_first_bucket_that_holds_them() {
        let h = LatencyHistogram::new();
        h.record(Duration::from_micros(50));
        h.record(Duration::from_micros(100));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], 2, "50 µs and exactly 100 µs");
        assert_eq!(s.buckets[5], 1, "3 ms is at most 5 ms");
        assert_eq!(s.buckets[BUCKETS_S.len()], 1, "a minute is above every bound");
        assert_eq!(s.buckets.iter().sum::<u64>(), 4);
        assert!((s.sum_s - 60.00315).abs() < 1e-9);
    }
}
