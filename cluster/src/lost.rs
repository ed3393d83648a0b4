//! A node cut off from NATS closes its clients' connections once the loss has lasted
//! `nats_lost_close_ms`, so that they reconnect, through the load balancer, to a node that is
//! still in the cluster.
//!
//! Until then the node serves its clients alone (local delivery goes on; messages to and from
//! other nodes are lost, and CONNECT is refused because the session registry cannot be
//! reached). Past the bound, serving alone does more harm than good: other nodes' publishes
//! never reach these clients, and a client that reconnects elsewhere takes its session over
//! there without this node being told. The watch reads the connection's state on a short tick
//! rather than relying on connection events, so that a missed event cannot keep a node
//! serving alone; while the loss lasts it closes every connection that attached meanwhile too
//! (a relay client whose address needs no registry claim).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use mesgd_core::broker::Broker;
use mesgd_core::model::{Kick, SessionKey};

use crate::stats::ClusterStats;

/// How often the connection's state is read: the close comes at most this late.
const TICK: Duration = Duration::from_millis(200);

/// Watches `client` for as long as the node runs; `close_after` zero never closes.
pub(crate) async fn watch(
    client: async_nats::Client,
    broker: Arc<Broker>,
    close_after: Duration,
    stats: Arc<ClusterStats>,
) {
    if close_after.is_zero() {
        return;
    }
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lost_since: Option<tokio::time::Instant> = None;
    let mut closing = false;
    // The sessions told to close during this loss: counted once, told again each tick until
    // their connection is gone.
    let mut closed: HashSet<SessionKey> = HashSet::new();
    loop {
        tick.tick().await;
        let now = tokio::time::Instant::now();
        if client.connection_state() == State::Connected {
            if closing {
                tracing::info!("cluster: NATS is back; accepting clients for the cluster again");
            }
            lost_since = None;
            closing = false;
            closed.clear();
            continue;
        }
        let since = *lost_since.get_or_insert(now);
        if now.duration_since(since) < close_after {
            continue;
        }
        let online = broker.online_sessions();
        if !closing {
            tracing::warn!(
                lost_for_ms = now.duration_since(since).as_millis() as u64,
                nats_lost_close_ms = close_after.as_millis() as u64,
                connections = online.len(),
                "cluster: NATS lost for longer than nats_lost_close_ms; closing client connections \
                 so they reconnect to another node"
            );
            closing = true;
        }
        for session in online {
            if closed.insert(session.key().clone()) {
                ClusterStats::add(&stats.nats_lost_closes, 1);
            }
            session.kick(Kick::ClusterLost);
        }
    }
}
