//! The collector of the content-routing front end: its connection gauge and message counters
//! (`crate::content::ContentStats`), read when `/metrics` is scraped.

use std::sync::Weak;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{counter, gauge};
use crate::content::ContentStats;
use crate::context::ServerContext;

/// Reads the content front end's counters at a scrape. It holds the context weakly: the context
/// owns the metrics registry that owns this collector.
#[derive(Debug)]
pub struct ContentCollector {
    ctx: Weak<ServerContext>,
}

impl ContentCollector {
    /// A collector over the content counters of `ctx`.
    pub fn new(ctx: Weak<ServerContext>) -> Self {
        ContentCollector { ctx }
    }
}

impl Collector for ContentCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(ctx) = self.ctx.upgrade() else { return Ok(()) };
        let s = ctx.content_stats();
        let open = i64::try_from(ContentStats::get(&s.connections)).unwrap_or(i64::MAX);
        gauge(&mut encoder, "mesgd_content_connections", "Open content-routing WebSocket connections", open)?;
        let series: [(&str, &str, &std::sync::atomic::AtomicU64); 8] = [
            ("mesgd_content_upgrades", "Content WebSocket upgrades admitted", &s.upgrades),
            (
                "mesgd_content_upgrades_refused",
                "Content upgrades refused for a missing or refused credential",
                &s.upgrades_refused,
            ),
            ("mesgd_content_messages_received", "JSON messages received and routed", &s.messages_in),
            (
                "mesgd_content_messages_refused",
                "Frames refused: invalid JSON, scalars, binary, over the size cap",
                &s.messages_refused,
            ),
            ("mesgd_content_matches", "Listeners a message was handed to, summed", &s.matches),
            ("mesgd_content_messages_sent", "Messages written to content listeners", &s.messages_out),
            (
                "mesgd_content_messages_dropped",
                "Messages not delivered: the listener's queue was full or it was closing",
                &s.dropped,
            ),
            (
                "mesgd_content_slow_disconnects",
                "Content listeners disconnected for reading too slowly",
                &s.slow_disconnects,
            ),
        ];
        for (name, help, value) in series {
            counter(&mut encoder, name, help, ContentStats::get(value))?;
        }
        Ok(())
    }
}
