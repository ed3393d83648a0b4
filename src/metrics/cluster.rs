//! The collector of the cluster layer (`[cluster]`): every counter of
//! [`mesgd_cluster::ClusterStats`] as `mesgd_cluster_<name>`. Registered only on a node that
//! joined a cluster.

use std::sync::Arc;

use mesgd_cluster::{ClusterStats, Kind};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{counter, gauge};

/// Reads the cluster's counters at a scrape.
#[derive(Debug)]
pub struct ClusterCollector {
    stats: Arc<ClusterStats>,
}

impl ClusterCollector {
    /// A collector over `stats`.
    pub fn new(stats: Arc<ClusterStats>) -> Self {
        ClusterCollector { stats }
    }
}

impl Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        for (name, help, kind, value) in self.stats.values() {
            let metric = format!("mesgd_cluster_{name}");
            match kind {
                Kind::Gauge => gauge(&mut encoder, &metric, help, i64::try_from(value).unwrap_or(i64::MAX))?,
                Kind::Counter => counter(&mut encoder, &metric, help, value)?,
            }
        }
        Ok(())
    }
}
