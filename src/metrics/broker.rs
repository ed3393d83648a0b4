//! The collector of the core: the broker's counters, the provider chain's answers, what
//! sessions hold, and the state store. It reads state the broker keeps anyway when `/metrics` is
//! scraped: nothing on the message path does more than the relaxed atomic additions it did
//! before (see `mesgd_core::broker::Stats`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mesgd_core::auth::Chain;
use mesgd_core::broker::{Broker, Stats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{counter, counters, gauge, gauges, histogram};
use crate::persist::SqliteJournal;

/// Everything the core can tell at a scrape.
#[derive(Debug)]
pub struct BrokerCollector {
    broker: Arc<Broker>,
    chain: Chain,
    journal: Option<Arc<SqliteJournal>>,
    storage_dir: PathBuf,
}

impl BrokerCollector {
    /// A collector over the broker, the chain (whose clones share its counters), the journal
    /// (when state is persisted) and the storage directory (for file sizes).
    pub fn new(
        broker: Arc<Broker>,
        chain: Chain,
        journal: Option<Arc<SqliteJournal>>,
        storage_dir: PathBuf,
    ) -> Self {
        BrokerCollector { broker, chain, journal, storage_dir }
    }

    fn traffic(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let stats = self.broker.stats();
        type Pick = fn(&mesgd_core::broker::Traffic) -> &std::sync::atomic::AtomicU64;
        let series: [(&str, &str, Pick); 4] = [
            ("mesgd_messages_received", "Application messages received from clients", |t| &t.messages_in),
            ("mesgd_messages_sent", "Application messages sent to clients", |t| &t.messages_out),
            ("mesgd_bytes_received", "Bytes read from clients", |t| &t.bytes_in),
            ("mesgd_bytes_sent", "Bytes written to clients", |t| &t.bytes_out),
        ];
        for (name, help, pick) in series {
            let values =
                stats.traffic_by_protocol().map(|(p, t)| ([("protocol", p.as_str())], Stats::get(pick(t))));
            counters(encoder, name, help, values)?;
        }
        Ok(())
    }

    fn sessions(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let mut connections: BTreeMap<(&'static str, Arc<str>), i64> = BTreeMap::new();
        let (mut online, mut offline, mut queued, mut inflight, mut deepest) = (0i64, 0i64, 0i64, 0i64, 0i64);
        for session in self.broker.sessions() {
            if session.is_online() {
                online += 1;
                if let Some(client) = session.client() {
                    *connections.entry((client.protocol.as_str(), client.listener.clone())).or_default() += 1;
                }
            } else {
                offline += 1;
            }
            let depth = i64::try_from(session.queue_len()).unwrap_or(i64::MAX);
            queued = queued.saturating_add(depth);
            deepest = deepest.max(depth);
            inflight = inflight.saturating_add(i64::try_from(session.inflight_len()).unwrap_or(i64::MAX));
        }
        gauges(
            encoder,
            "mesgd_connections",
            "Connected clients by protocol and listener",
            connections
                .iter()
                .map(|((protocol, listener), n)| ([("protocol", *protocol), ("listener", &**listener)], *n)),
        )?;
        gauges(
            encoder,
            "mesgd_sessions",
            "Sessions by state (online: a connection is attached)",
            [([("state", "online")], online), ([("state", "offline")], offline)],
        )?;
        gauge(encoder, "mesgd_queued_messages", "Messages waiting in session queues", queued)?;
        gauge(encoder, "mesgd_queue_depth_max", "The longest session queue", deepest)?;
        gauge(encoder, "mesgd_inflight_messages", "QoS 1/2 messages sent and not yet acknowledged", inflight)
    }

    fn auth(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let stats = self.chain.stats();
        let mut outcomes = Vec::new();
        for (index, entry) in self.chain.entries().iter().enumerate() {
            let Some(counts) = stats.provider(index).map(|c| c.counts()) else { continue };
            let position = (index + 1).to_string();
            for (result, n) in [
                ("allow", counts.allow),
                ("deny", counts.deny),
                ("next", counts.next),
                ("error", counts.error),
            ] {
                outcomes.push((
                    [
                        ("provider", entry.provider.name().to_owned()),
                        ("position", position.clone()),
                        ("result", result.to_owned()),
                    ],
                    n,
                ));
            }
        }
        counters(
            encoder,
            "mesgd_auth_outcomes",
            "Answers of each provider of the chain (position from 1)",
            outcomes,
        )?;
        counters(
            encoder,
            "mesgd_auth_fallback",
            "Clients no provider resolved: admitted as anonymous, or refused",
            [
                ([("result", "anonymous")], stats.anonymous_admitted()),
                ([("result", "refused")], stats.unresolved_refused()),
            ],
        )?;
        histogram(
            encoder,
            "mesgd_auth_duration_seconds",
            "How long the provider chain took to decide",
            &stats.latency().snapshot(),
        )
    }

    fn broker_counters(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = self.broker.stats();
        counter(
            encoder,
            "mesgd_connections_accepted",
            "Connections accepted on every listener",
            Stats::get(&s.connections_total),
        )?;
        counter(
            encoder,
            "mesgd_auth_failures",
            "Logins the front ends refused",
            Stats::get(&s.auth_failures),
        )?;
        counters(
            encoder,
            "mesgd_deliveries_dropped",
            "Deliveries dropped, by reason",
            [
                ([("reason", "queue_full")], Stats::get(&s.dropped_queue_full)),
                ([("reason", "expired")], Stats::get(&s.dropped_expired)),
                ([("reason", "too_large")], Stats::get(&s.dropped_too_large)),
                ([("reason", "budget")], self.broker.budget().dropped()),
            ],
        )?;
        self.budget(encoder)?;
        counters(
            encoder,
            "mesgd_acl_denials",
            "Accesses the ACL refused, by enforcement point (delivery also counts no-local filtering)",
            [
                ([("point", "publish")], Stats::get(&s.publishes_denied)),
                ([("point", "subscribe")], Stats::get(&s.subscribes_denied)),
                ([("point", "delivery")], Stats::get(&s.deliveries_filtered)),
            ],
        )?;
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        gauge(
            encoder,
            "mesgd_subscriptions",
            "Subscriptions in the router",
            count(self.broker.router().len()),
        )?;
        gauge(
            encoder,
            "mesgd_retained_messages",
            "Topics with a retained message",
            count(self.broker.retained().len()),
        )
    }

    /// The broker-wide queue budget (`limits.max_queued_bytes_total`) and its back-pressure.
    fn budget(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let budget = self.broker.budget();
        let bytes = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        gauge(
            encoder,
            "mesgd_queued_bytes",
            "Bytes (topic + payload) queued or in flight in every session together",
            bytes(budget.used()),
        )?;
        gauge(
            encoder,
            "mesgd_queued_bytes_budget",
            "limits.max_queued_bytes_total: deliveries beyond it are dropped",
            bytes(budget.limits().max_bytes),
        )?;
        gauge(
            encoder,
            "mesgd_publishers_paused",
            "Connections not read from because the queue budget is under pressure",
            bytes(budget.paused_readers()),
        )?;
        counter(
            encoder,
            "mesgd_publisher_pauses",
            "Times a connection was paused by the queue budget",
            budget.pauses(),
        )
    }

    fn store(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let size = |file: &str| i64::try_from(files_size(&self.storage_dir.join(file))).unwrap_or(i64::MAX);
        gauges(
            encoder,
            "mesgd_store_bytes",
            "Bytes on disk of each store (with its WAL and shared-memory files)",
            [
                ([("file", "state.db")], size(crate::persist::STATE_DB_FILE)),
                ([("file", "config.db")], size(mesgd_providers::builtin::CONFIG_DB_FILE)),
            ],
        )?;
        let Some(journal) = &self.journal else { return Ok(()) };
        histogram(
            encoder,
            "mesgd_journal_commit_duration_seconds",
            "How long each state.db commit took, its fsync included",
            &journal.commit_latency().snapshot(),
        )?;
        gauge(
            encoder,
            "mesgd_journal_unwritten_changes",
            "Changes recorded but not yet written",
            i64::try_from(journal.unwritten()).unwrap_or(i64::MAX),
        )?;
        counter(
            encoder,
            "mesgd_journal_backpressure",
            "Times a connection waited for the journal backlog to shrink",
            journal.backpressure_events(),
        )?;
        gauge(
            encoder,
            "mesgd_journal_failing",
            "1 while writing state.db fails",
            i64::from(journal.has_failed()),
        )
    }
}

/// The size of an SQLite file with its `-wal` and `-shm` files (0 for those missing).
fn files_size(path: &Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(PathBuf::from(name)).map_or(0, |m| m.len())
        })
        .sum()
}

impl Collector for BrokerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.traffic(&mut encoder)?;
        self.sessions(&mut encoder)?;
        self.auth(&mut encoder)?;
        self.broker_counters(&mut encoder)?;
        self.store(&mut encoder)
    }
}
