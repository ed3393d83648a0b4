//! With `[cluster]`: the relay's side of the cluster seams. The cluster layer writes the
//! frames other nodes send to this node's clients through [`LocalNode`], and the hub sends
//! what is not for this node through the seam [`attach`] installs. `docs/cluster.md` ("The
//! relay across nodes") has the design.

use std::sync::{Arc, Weak};

use mesgd_core::cluster::relay::{
    IncomingPipe, LocalDelivery, LocalRelay, NodeFigures, PipeDelivery, PipePeer,
};
use mesgd_core::relay::{RelayError, ServerMessage};

use super::outbox::PushError;
use crate::context::ServerContext;

/// This node's relay clients, as the cluster layer sees them.
#[derive(Debug)]
pub(crate) struct LocalNode(Weak<ServerContext>);

impl LocalRelay for LocalNode {
    fn deliver(&self, addr: &str, body: &[u8]) -> LocalDelivery {
        let Some(ctx) = self.0.upgrade() else { return LocalDelivery::NotHere };
        let Some(outbox) = ctx.relay.lookup(addr) else { return LocalDelivery::NotHere };
        match outbox.push(body) {
            Ok(()) => LocalDelivery::Written,
            Err(PushError::Gone) => LocalDelivery::NotHere,
            Err(PushError::TooLarge) => LocalDelivery::TooLarge,
        }
    }

    fn holds(&self, addr: &str) -> bool {
        self.0.upgrade().is_some_and(|ctx| ctx.relay.lookup(addr).is_some())
    }

    fn room_deliver(&self, room: &str, body: &[u8]) -> usize {
        self.0.upgrade().map_or(0, |ctx| ctx.relay.room_deliver_remote(room, body))
    }

    fn pipe_opened(&self, pipe_id: &str, peer: PipePeer) -> bool {
        self.0.upgrade().is_some_and(|ctx| ctx.relay.pipe_opened(pipe_id, &peer))
    }

    fn pipe_refused(&self, pipe_id: &str, error: RelayError) {
        if let Some(ctx) = self.0.upgrade() {
            ctx.relay.pipe_refused(pipe_id, error);
        }
    }

    fn pipe_incoming(&self, open: IncomingPipe<'_>) -> Result<u32, RelayError> {
        let ctx = self.0.upgrade().ok_or(RelayError::PeerNotConnected)?;
        ctx.relay.pipe_incoming(open)
    }

    fn pipe_data(&self, pipe_id: &str, to: &str, node: &str, body: &[u8]) -> PipeDelivery {
        self.0
            .upgrade()
            .map_or(PipeDelivery::Unknown, |ctx| ctx.relay.pipe_data_from(pipe_id, to, node, body))
    }

    fn pipe_closed(&self, pipe_id: &str, from: &str, node: &str) -> bool {
        self.0.upgrade().is_some_and(|ctx| ctx.relay.pipe_closed_from(pipe_id, from, node))
    }

    fn pipes_gone(&self, gone: &dyn Fn(&str, Option<u64>) -> bool) -> usize {
        self.0.upgrade().map_or(0, |ctx| ctx.relay.pipes_gone(gone))
    }

    fn wait_here(&self, game: &str, who: &str, ticket: u64) -> Result<(), RelayError> {
        let ctx = self.0.upgrade().ok_or(RelayError::PeerNotConnected)?;
        ctx.relay.wait_here(game, who, ticket)
    }

    fn take_waiter(&self, game: &str, who: &str, ticket: u64) -> bool {
        self.0.upgrade().is_some_and(|ctx| ctx.relay.take_waiter(game, who, ticket))
    }

    fn pair_waiter(&self, game: &str, who: &str, ticket: u64, peer: &str) -> bool {
        self.0.upgrade().is_some_and(|ctx| ctx.relay.pair_waiter(game, who, ticket, peer))
    }

    fn tell_waiting(&self, game: &str, who: &str, ticket: u64) {
        if let Some(ctx) = self.0.upgrade() {
            ctx.relay.tell_waiting(game, who, ticket);
        }
    }

    fn tell(&self, who: &str, ticket: u64, message: &ServerMessage<'_>) -> bool {
        self.0.upgrade().is_some_and(|ctx| ctx.relay.tell(who, ticket, message))
    }

    fn figures(&self) -> NodeFigures {
        self.0.upgrade().map_or(NodeFigures::default(), |ctx| ctx.relay.figures())
    }

    fn room_members(&self, room: &str) -> usize {
        self.0.upgrade().map_or(0, |ctx| ctx.relay.room_members(room))
    }
}

/// Takes the relay across nodes: the cluster's relay state is opened and the hub sends through
/// it from now on.
pub(crate) async fn attach(
    ctx: &Arc<ServerContext>,
    cluster: &mesgd_cluster::Cluster,
) -> Result<(), mesgd_cluster::StartError> {
    let local = Arc::new(LocalNode(Arc::downgrade(ctx)));
    let seam = cluster.attach_relay(local, ctx.relay.settings().queue).await?;
    ctx.relay.set_cluster(seam);
    Ok(())
}
