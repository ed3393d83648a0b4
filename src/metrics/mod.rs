//! Prometheus metrics: the registry `/metrics` encodes (Prometheus text format 0.0.4, through
//! `prometheus-client`), and the broker's own collector.
//!
//! # Adding metrics (for front ends)
//!
//! [`Metrics`] lives in the [`ServerContext`](crate::context::ServerContext) (`ctx.metrics`).
//! A front end either registers a metric it updates itself —
//!
//! ```ignore
//! let frames = prometheus_client::metrics::counter::Counter::<u64>::default();
//! ctx.metrics.register("mesgd_relay_frames", "Relay frames received", frames.clone());
//! frames.inc();
//! ```
//!
//! — or a [`Collector`] that reads state it already keeps when `/metrics` is scraped (what
//! [`broker::BrokerCollector`] does for the core): `ctx.metrics.register_collector(Box::new(c))`.
//! Names start with `mesgd_` and the front end's name (`mesgd_relay_...`,
//! `mesgd_content_...`); counters are registered without `_total`, which the encoder adds. Add
//! each new name to docs/api.md.
//!
//! # Layout
//!
//! - this file: [`Metrics`], the registry and its encoding.
//! - [`broker`]: the collector of the broker, the provider chain, sessions and the state store.
//! - [`content`]: the collector of the content-routing front end's counters.
//! - [`limits`]: the collector of the resource limits' refusal counters.
//! - [`relay`]: the collector of the relay's counters and structure sizes.
//! - `route`: the `/metrics` route and its optional bearer token.

pub mod broker;
pub mod cluster;
pub mod content;
pub mod limits;
pub mod relay;
pub(crate) mod route;

use std::sync::{Mutex, OnceLock};

use mesgd_core::histogram::{BUCKETS_S, Snapshot};
use mesgd_core::sync::lock;
pub use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
pub use prometheus_client::registry::Metric;
use prometheus_client::registry::Registry;

/// The `Content-Type` of what [`Metrics::encode`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Every metric `/metrics` exposes, and the token that page asks for.
#[derive(Default)]
pub struct Metrics {
    registry: Mutex<Registry>,
    token: OnceLock<String>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("token", &self.token.get().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Metrics::default()
    }

    /// Makes `/metrics` require `Authorization: Bearer <token>` (set once, at start).
    pub fn require_token(&self, token: String) {
        let _ = self.token.set(token);
    }

    pub(crate) fn token(&self) -> Option<&str> {
        self.token.get().map(String::as_str)
    }

    /// Registers a metric its owner updates (a counter, gauge, histogram or family of them).
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        lock(&self.registry).register(name, help, metric);
    }

    /// Registers a collector, asked for its metrics at every scrape.
    pub fn register_collector(&self, collector: Box<dyn Collector>) {
        lock(&self.registry).register_collector(collector);
    }

    /// Every metric in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = lock(&self.registry);
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
            // Only a collector can fail (a formatting error); say so rather than serve half a page.
            tracing::error!(error = %e, "encoding metrics failed");
            return String::new();
        }
        out
    }
}

/// A counter without labels.
pub(crate) fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

/// A gauge without labels.
pub(crate) fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: i64,
) -> std::fmt::Result {
    encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&value)
}

/// A family of counters, one per label set.
pub(crate) fn counters<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, u64)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in values {
        family.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&value, None)?;
    }
    Ok(())
}

/// A family of gauges, one per label set.
pub(crate) fn gauges<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, i64)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in values {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// A histogram of seconds from a core [`LatencyHistogram`](mesgd_core::histogram::LatencyHistogram).
pub(crate) fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    snapshot: &Snapshot,
) -> std::fmt::Result {
    let bounds = BUCKETS_S.iter().copied().chain(std::iter::once(f64::INFINITY));
    let buckets: Vec<(f64, u64)> = bounds.zip(snapshot.buckets.iter().copied()).collect();
    encoder.encode_descriptor(name, help, None, MetricType::Histogram)?.encode_histogram::<NoLabelSet>(
        snapshot.sum_s,
        snapshot.count,
        &buckets,
        None,
    )
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[derive(Debug)]
    struct Fixed;

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
            counter(&mut encoder, "mesgd_test_events", "Events.", 3)?;
            gauges(
                &mut encoder,
                "mesgd_test_level",
                "Level.",
                [([("side", "left")], 1), ([("side", "right")], -2)],
            )?;
            let h = mesgd_core::histogram::LatencyHistogram::new();
            h.record(std::time::Duration::from_millis(1));
            histogram(&mut encoder, "mesgd_test_seconds", "Time.", &h.snapshot())
        }
    }

    #[test]
    fn registered_metrics_and_collectors_are_encoded() {
        let metrics = Metrics::new();
        let own = Counter::<u64>::default();
        metrics.register("mesgd_test_owned", "Owned.", own.clone());
        own.inc_by(5);
        metrics.register_collector(Box::new(Fixed));
        let text = metrics.encode();
        for line in [
            "mesgd_test_owned_total 5",
            "mesgd_test_events_total 3",
            "mesgd_test_level{side=\"right\"} -2",
            "mesgd_test_seconds_count 1",
            "mesgd_test_seconds_bucket{le=\"0.001\"} 1",
            "mesgd_test_seconds_bucket{le=\"0.0005\"} 0",
            "mesgd_test_seconds_bucket{le=\"+Inf\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
        }
    }
}
