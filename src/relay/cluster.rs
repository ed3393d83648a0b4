//! With `[cluster]`: the relay's side of the cluster seams. The cluster layer writes the
//! frames other nodes send to this node's clients through [`LocalNode`], and the hub sends
//! what is not for this node through the seam [`attach`] installs. `docs/cluster.md` ("The
//! relay across nodes") has the design.

use std::sync::{Arc, Weak};

use mesgd_core::cluster::relay::{LocalDelivery, LocalRelay};

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
