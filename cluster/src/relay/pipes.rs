//! Pipes whose two ends are on two nodes.
//!
//! - **Open** (`P`, request/reply): the opener's node reserves the pipe (and its id) in its
//!   own table, reads the peer's record in the relay bucket and asks the node it names to open
//!   the pipe there; that node checks its caps, takes the pipe into its table under the same
//!   id, tells the peer `pipe_incoming` and answers `O` with the peer's frame limit. The opener
//!   is then told `pipe_open`. No record, a record naming this node, a node gone ("no
//!   responders") or an `N` answer: `peer not connected`, as on one node.
//! - **Data** (`W`) and **close** (`C`) are published without a reply, through one bounded
//!   queue to one task, on the node's one NATS connection: each node's frames reach the other
//!   in the order sent, and data never waits for a round trip. Data for a pipe the receiving
//!   node does not have (closed there meanwhile, or a `C` lost) is answered with a `C`, so an
//!   end left open by a lost close learns it at its next frame.
//! - **Early data**: the peer may send before the open's answer is read here (the answer and
//!   the data come on different subscriptions); data or a close for a pipe still opening tells
//!   the opener `pipe_open` first.
//! - **A node that dies**: every pipe end remembers the other end's node instance; when the
//!   lease watcher sees that instance gone (its lease taken over, or its node restarted), the
//!   ends here are closed (`pipe_closed`). That is at most `lease_ms` plus the watchers' tick
//!   (`lease_ms / 3`) after the node stopped renewing its lease.
//!
//! Opens in flight are bounded by the pipe caps (each holds its reserved pipe); each runs in a
//! task of its own, its two steps (the record, the request) each bounded by
//! `registry_timeout_ms`. An open not answered in time is refused here (`relay overloaded,
//! retry later`) and closed there, in case it was opened.

use std::sync::Arc;

use async_nats::RequestErrorKind;
use bytes::Bytes;
use mesgd_core::cluster::relay::{IncomingPipe, PipeDelivery, PipeOpen, PipePeer, PipeRoute, node_subject};
use mesgd_core::cluster::relay_wire::{RelayReply, RelayRequest};
use mesgd_core::relay::{Limit, RelayError};
use tokio::sync::mpsc;

use super::{RelayClusterStats, RelayNode};

/// A pipe frame on its way to another node.
#[derive(Debug)]
pub(super) struct PipeFrame {
    node: Arc<str>,
    wire: Bytes,
    data: bool,
}

impl RelayNode {
    /// Starts the open of a pipe reserved here (see the module documentation).
    pub(super) fn open_remote(&self, open: PipeOpen) -> Result<(), RelayError> {
        if self.inner.client.connection_state() != async_nats::connection::State::Connected {
            RelayClusterStats::add(&self.stats().pipe_open_failures, 1);
            return Err(RelayError::Overloaded);
        }
        let node = self.clone();
        tokio::spawn(async move {
            if let Err(Unanswered) = node.open_on_holder(&open).await {
                RelayClusterStats::add(&node.stats().pipe_open_failures, 1);
                node.inner.local.pipe_refused(&open.pipe_id, RelayError::Overloaded);
            }
        });
        Ok(())
    }

    /// Opens `open` on the node holding its peer and tells this node's end the outcome; an
    /// `Err` when nobody answered (the caller tells it).
    async fn open_on_holder(&self, open: &PipeOpen) -> Result<(), Unanswered> {
        let me = &self.inner;
        let Ok(record) = self.record_of(&open.to).await else { return Err(Unanswered) };
        let Some(record) = record.filter(|r| *r.node != *me.node) else {
            me.local.pipe_refused(&open.pipe_id, RelayError::PeerNotConnected);
            RelayClusterStats::add(&self.stats().pipe_opens_refused, 1);
            return Ok(());
        };
        let Ok(instance) = u64::from_str_radix(&record.instance, 16) else {
            RelayClusterStats::add(&self.stats().decode_errors, 1);
            return Err(Unanswered);
        };
        let node: Arc<str> = Arc::from(record.node.as_str());
        let request = RelayRequest::PipeOpen {
            to: open.to.to_string(),
            pipe_id: open.pipe_id.to_string(),
            node: me.node.to_string(),
            instance: me.instance_id,
            max_frame: open.max_frame,
            from: open.from.to_string(),
        };
        let asked = me.client.request(node_subject(&node), request.encode());
        let refusal = match tokio::time::timeout(me.timeout, asked).await {
            Ok(Ok(reply)) => match RelayReply::decode(&reply.payload) {
                Ok(RelayReply::PipeOpened { max_frame }) => {
                    RelayClusterStats::add(&self.stats().pipes_opened, 1);
                    let peer = PipePeer { node: node.clone(), instance, max_frame };
                    if !me.local.pipe_opened(&open.pipe_id, peer) {
                        // The opener left while the open was on its way.
                        self.close_remote(&open.pipe_id, &node, &open.from);
                    }
                    return Ok(());
                }
                Ok(RelayReply::PipesPerConnection) => RelayError::LimitReached(Limit::PipesPerConnection),
                Ok(RelayReply::Pipes) => RelayError::LimitReached(Limit::Pipes),
                Ok(RelayReply::NotHere) => RelayError::PeerNotConnected,
                Ok(_) | Err(_) => {
                    RelayClusterStats::add(&self.stats().decode_errors, 1);
                    self.close_remote(&open.pipe_id, &node, &open.from);
                    return Err(Unanswered);
                }
            },
            Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => {
                RelayClusterStats::add(&self.stats().owner_gone, 1);
                RelayError::PeerNotConnected
            }
            _ => {
                // Perhaps opened there: closed, so that nothing is left of it.
                self.close_remote(&open.pipe_id, &node, &open.from);
                return Err(Unanswered);
            }
        };
        RelayClusterStats::add(&self.stats().pipe_opens_refused, 1);
        me.local.pipe_refused(&open.pipe_id, refusal);
        Ok(())
    }

    /// Queues a `pipe_data` body for the other end of `route`.
    pub(super) fn send_pipe_data(&self, route: &PipeRoute, body: Bytes) -> Result<(), RelayError> {
        let request = RelayRequest::PipeData {
            to: route.peer.to_string(),
            pipe_id: route.pipe_id.to_string(),
            node: self.inner.node.to_string(),
            body,
        };
        self.queue_pipe_frame(&route.node, request.encode(), true)
    }

    /// Tells the other end of `pipe_id`, on `node`, that this end (`me`) closed or is not
    /// here.
    pub(super) fn close_remote(&self, pipe_id: &str, node: &Arc<str>, me: &str) {
        let request = RelayRequest::PipeClose {
            from: me.to_owned(),
            pipe_id: pipe_id.to_owned(),
            node: self.inner.node.to_string(),
        };
        let _ = self.queue_pipe_frame(node, request.encode(), false);
    }

    fn queue_pipe_frame(&self, node: &Arc<str>, wire: Bytes, data: bool) -> Result<(), RelayError> {
        let frame = PipeFrame { node: node.clone(), wire, data };
        self.inner.pipe_frames.try_send(frame).map_err(|_| {
            RelayClusterStats::add(&self.stats().pipe_queue_full, 1);
            RelayError::Overloaded
        })
    }

    /// Publishes the queued pipe frames, in order, on the node's connection.
    pub(super) async fn publish_pipe_frames(self, mut frames: mpsc::Receiver<PipeFrame>) {
        while let Some(frame) = frames.recv().await {
            let stats = self.stats();
            match self.inner.client.publish(node_subject(&frame.node), frame.wire).await {
                Ok(()) if frame.data => RelayClusterStats::add(&stats.pipe_data_sent, 1),
                Ok(()) => RelayClusterStats::add(&stats.pipe_closes_sent, 1),
                Err(_) => RelayClusterStats::add(&stats.pipe_publish_errors, 1),
            }
        }
    }

    /// `P` from another node: the answer.
    pub(super) fn pipe_open_here(&self, open: IncomingPipe<'_>) -> RelayReply {
        // An opener whose node died since it asked: its end would never close here otherwise
        // (the lease changes that close pipes have passed).
        if self.inner.liveness.is_gone(&open.opener.node, Some(open.opener.instance)) {
            return RelayReply::NotHere;
        }
        match self.inner.local.pipe_incoming(open) {
            Ok(max_frame) => {
                RelayClusterStats::add(&self.stats().pipes_accepted, 1);
                RelayReply::PipeOpened { max_frame }
            }
            Err(RelayError::LimitReached(Limit::PipesPerConnection)) => RelayReply::PipesPerConnection,
            Err(RelayError::LimitReached(_)) => RelayReply::Pipes,
            Err(_) => RelayReply::NotHere,
        }
    }

    /// `W` from another node.
    pub(super) fn pipe_data_here(&self, to: &str, pipe_id: &str, node: &str, body: &[u8]) {
        let stats = self.stats();
        match self.inner.local.pipe_data(pipe_id, to, node, body) {
            PipeDelivery::Written => RelayClusterStats::add(&stats.pipe_data_received, 1),
            PipeDelivery::Unknown => {
                RelayClusterStats::add(&stats.pipe_data_unknown, 1);
                // The sender's end learns that this one is not here.
                self.close_remote(pipe_id, &Arc::from(node), to);
            }
            _ => RelayClusterStats::add(&stats.pipe_data_dropped, 1),
        }
    }

    /// `C` from another node.
    pub(super) fn pipe_close_here(&self, from: &str, pipe_id: &str, node: &str) {
        if self.inner.local.pipe_closed(pipe_id, from, node) {
            RelayClusterStats::add(&self.stats().pipe_closes_received, 1);
        }
    }

    /// Closes the ends here of pipes whose other node instance is gone, and forgets the
    /// figures of such instances, each time the leases change.
    pub(super) async fn follow_liveness(self) {
        let mut changes = self.inner.liveness.subscribe();
        while changes.changed().await.is_ok() {
            let live = &self.inner.liveness;
            let closed = self.inner.local.pipes_gone(&|node, instance| live.is_gone(node, instance));
            RelayClusterStats::add(&self.stats().pipes_node_gone, closed as u64);
            self.forget_dead_figures().await;
        }
    }
}

/// The open was not answered in time, NATS was unreachable, or the answer could not be read.
struct Unanswered;
