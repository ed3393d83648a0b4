//! The collector of the resource limits' refusal counters (`crate::limits::LimitCounters`),
//! read when `/metrics` is scraped: one counter family, labelled by limit, with the same names
//! as the `$SYS/broker/limits/<name>` topics.

use std::sync::Weak;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::counters;
use crate::context::ServerContext;

/// Reads the limit counters at a scrape. It holds the context weakly: the context owns the
/// metrics registry that owns this collector.
#[derive(Debug)]
pub struct LimitsCollector {
    ctx: Weak<ServerContext>,
}

impl LimitsCollector {
    /// A collector over the limit counters of `ctx`.
    pub fn new(ctx: Weak<ServerContext>) -> Self {
        LimitsCollector { ctx }
    }
}

impl Collector for LimitsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(ctx) = self.ctx.upgrade() else { return Ok(()) };
        let counts = ctx.limit_counts();
        let series = counts.by_name().map(|(name, n)| ([("limit", name.trim_start_matches("limits/"))], n));
        counters(
            &mut encoder,
            "mesgd_limit_refusals",
            "What each resource limit refused or cut off (docs/hardening.md, every limit)",
            series,
        )
    }
}
