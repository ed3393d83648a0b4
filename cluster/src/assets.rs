//! The node's buckets and streams that no follower of its own watches: the session registry,
//! the persistent sessions' copies, the wills, the node leases and the QoS 1/2 stream. Every
//! [`CHECK`] the node checks that each is still the one it started with ([`Watched`]): one
//! deleted under it (`nats stream rm`, a NATS server back without its JetStream storage) is
//! created again, so that claims, lease renewals, wills and QoS 1/2 stores work again instead
//! of failing until every node restarts. A new session registry also gets this node's claims
//! back ([`crate::registry::Registry::rejoin`]); what the other buckets held is lost (see
//! docs/cluster.md).
//!
//! The users, login-session and retained streams have followers that do the same, and more.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::registry::Registry;
use crate::stats::ClusterStats;
use crate::streams::{Found, Watched};

/// How often each asset is checked.
const CHECK: Duration = Duration::from_secs(5);
/// How long a check waits for JetStream to answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// One bucket or stream, watched.
pub(crate) struct Asset {
    watched: Watched,
    /// For the session registry's bucket: claims this node's ids again in a new one.
    registry: Option<Registry>,
}

impl Asset {
    /// `stream`, made with `config`.
    pub(crate) fn new(config: stream::Config, stream: &stream::Stream) -> Self {
        Asset { watched: Watched::new(config, stream), registry: None }
    }

    /// The session registry's bucket (`stream`, made with `config`).
    pub(crate) fn registry(config: stream::Config, stream: &stream::Stream, registry: Registry) -> Self {
        Asset { watched: Watched::new(config, stream), registry: Some(registry) }
    }
}

/// Checks every asset every [`CHECK`], for as long as the node runs.
pub(crate) async fn watch(js: jetstream::Context, mut assets: Vec<Asset>, stats: Arc<ClusterStats>) {
    let mut check = tokio::time::interval(CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    check.tick().await;
    loop {
        check.tick().await;
        for asset in &mut assets {
            let Found::Replaced(stream) = asset.watched.check(&js, REQUEST_TIMEOUT, false).await else {
                continue;
            };
            // A registry claim that NATS failed is tried again at the next check (the new
            // bucket is still "replaced" until all are settled).
            let settled = match &asset.registry {
                Some(registry) => registry.rejoin().await,
                None => true,
            };
            if settled {
                asset.watched.following(&stream);
                ClusterStats::add(&stats.assets_replaced, 1);
                tracing::info!(stream = %asset.watched.name(), "cluster: following the new stream");
            }
        }
    }
}
