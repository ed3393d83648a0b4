//! The collector of the JSON relay: every counter and structure size the relay publishes under
//! `$SYS/broker/relay/…` (`crate::relay::sys::values`), as `mesgd_relay_…` with `/` turned into
//! `_`; sizes and open connections are gauges, the rest counters.

use std::sync::Weak;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{counter, gauge};
use crate::context::ServerContext;

/// The `$SYS` names that are gauges (a level now), not counts since start.
const GAUGES: [&str; 12] = [
    "connections",
    "udp/sources",
    "udp/registered",
    "addresses",
    "rooms",
    "rooms/memberships",
    "pipes",
    "match/waiters",
    "queue/addresses",
    "queue/messages",
    "queue/bytes",
    "aliases",
];

/// Reads the relay hub at a scrape. It holds the context weakly: the context owns the metrics
/// registry that owns this collector.
#[derive(Debug)]
pub struct RelayCollector {
    ctx: Weak<ServerContext>,
}

impl RelayCollector {
    /// A collector over the relay of `ctx`.
    pub fn new(ctx: Weak<ServerContext>) -> Self {
        RelayCollector { ctx }
    }
}

impl Collector for RelayCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(ctx) = self.ctx.upgrade() else { return Ok(()) };
        for (name, value) in crate::relay::sys::values(ctx.relay()) {
            let metric = format!("mesgd_relay_{}", name.replace('/', "_"));
            let help = format!("The relay's {name} ($SYS/broker/relay/{name})");
            if GAUGES.contains(&name) {
                gauge(&mut encoder, &metric, &help, i64::try_from(value).unwrap_or(i64::MAX))?;
            } else {
                counter(&mut encoder, &metric, &help, value)?;
            }
        }
        Ok(())
    }
}
