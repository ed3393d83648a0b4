//! A node cut off from the cluster closes its clients' connections once the loss has lasted
//! `nats_lost_close_ms`, so that they reconnect, through the load balancer, to a node that is
//! still in the cluster.
//!
//! Cut off means either of two things: its NATS connection is down, or it is up but the node
//! cannot renew its lease (JetStream refuses or does not answer: the server it is on is on the
//! minority side of a partition, or JetStream has lost its quorum). In the second case the other
//! nodes see the lease expire after `lease_ms` and send this node's clients' wills; its clients
//! can neither connect (no registry claim) nor have a QoS 1/2 publish acknowledged (no store)
//! here, so they are better served on the majority side.
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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::connection::State;
use mesgd_core::broker::Broker;
use mesgd_core::model::{Kick, SessionKey};

use crate::stats::ClusterStats;

/// How often the connection's state is read: the close comes at most this late.
const TICK: Duration = Duration::from_millis(200);

/// Whether this node's lease renewals succeed, written by the heartbeat that renews it.
#[derive(Default)]
pub(crate) struct Renewals {
    /// When the first renewal of the current run of failures was attempted; `None` while they
    /// succeed.
    failing_since: Mutex<Option<tokio::time::Instant>>,
}

impl Renewals {
    /// A renewal succeeded.
    pub(crate) fn renewed(&self) {
        *self.failing_since.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// A renewal attempted at `attempt` failed; true when it is the first of a run (to log once).
    pub(crate) fn failed(&self, attempt: tokio::time::Instant) -> bool {
        let mut since = self.failing_since.lock().unwrap_or_else(PoisonError::into_inner);
        let first = since.is_none();
        since.get_or_insert(attempt);
        first
    }

    fn failing_since(&self) -> Option<tokio::time::Instant> {
        *self.failing_since.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Watches `client` and the lease `renewals` for as long as the node runs; `close_after` zero
/// never closes.
pub(crate) async fn watch(
    client: async_nats::Client,
    renewals: Arc<Renewals>,
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
        let lease_failing = renewals.failing_since();
        if client.connection_state() == State::Connected {
            lost_since = None;
        } else {
            lost_since.get_or_insert(now);
        }
        let Some(since) = lost_since.into_iter().chain(lease_failing).min() else {
            if closing {
                tracing::info!("cluster: back in the cluster; accepting clients for the cluster again");
            }
            closing = false;
            closed.clear();
            continue;
        };
        if now.duration_since(since) < close_after {
            continue;
        }
        let online = broker.online_sessions();
        if !closing {
            let what = if lost_since.is_some() {
                "NATS lost"
            } else {
                "this node's lease not renewed (JetStream without a quorum from here)"
            };
            tracing::warn!(
                lost_for_ms = now.duration_since(since).as_millis() as u64,
                nats_lost_close_ms = close_after.as_millis() as u64,
                connections = online.len(),
                "cluster: {what} for longer than nats_lost_close_ms; closing client connections so \
                 they reconnect to another node"
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
