//! The requests other nodes send to this node's relay subject `mesgd.relay.<node>`: deliver a
//! frame to a client here (`D`), whether a client here holds an address (`H`), flush an
//! address's cluster queue (`F`), open a pipe to a client here (`P`), data on a pipe (`W`) and
//! its close (`C`), a waiter here paired by another node (`M`), a room's members here (`R`). One task reads them in order, so each node's pipe frames reach the client
//! in the order sent.

use async_nats::Subscriber;
use futures_util::StreamExt;
use mesgd_core::cluster::relay::{IncomingPipe, LocalDelivery, PipePeer, node_subject};
use mesgd_core::cluster::relay_wire::{RelayReply, RelayRequest};
use tokio::task::JoinHandle;

use super::{RelayClusterStats, RelayNode};

impl RelayNode {
    /// Subscribes to this node's relay subject and answers there.
    pub(super) async fn serve(&self) -> Result<JoinHandle<()>, crate::StartError> {
        let me = &self.inner;
        let requests = me
            .client
            .subscribe(node_subject(&me.node))
            .await
            .map_err(|e| crate::StartError::Relay(e.to_string()))?;
        me.client.flush().await.map_err(|e| crate::StartError::Relay(e.to_string()))?;
        Ok(tokio::spawn(self.clone().answer(requests)))
    }

    async fn answer(self, mut requests: Subscriber) {
        while let Some(message) = requests.next().await {
            let reply = match RelayRequest::decode(&message.payload) {
                Ok(RelayRequest::Deliver { to, body }) => Some(match self.inner.local.deliver(&to, &body) {
                    LocalDelivery::Written => {
                        RelayClusterStats::add(&self.stats().received, 1);
                        RelayReply::Written
                    }
                    LocalDelivery::TooLarge => RelayReply::TooLarge,
                    _ => {
                        RelayClusterStats::add(&self.stats().not_here, 1);
                        RelayReply::NotHere
                    }
                }),
                Ok(RelayRequest::Held { addr }) => {
                    Some(if self.holds(&addr) { RelayReply::Held } else { RelayReply::NotHere })
                }
                Ok(RelayRequest::Flush { addr }) => {
                    let node = self.clone();
                    tokio::spawn(async move { node.flush_late(&addr).await });
                    None
                }
                Ok(RelayRequest::PipeOpen { to, pipe_id, node, instance, max_frame, from }) => {
                    let opener = PipePeer { node: node.into(), instance, max_frame };
                    Some(self.pipe_open_here(IncomingPipe {
                        pipe_id: &pipe_id,
                        to: &to,
                        from: &from,
                        opener: &opener,
                    }))
                }
                Ok(RelayRequest::PipeData { to, pipe_id, node, body }) => {
                    self.pipe_data_here(&to, &pipe_id, &node, &body);
                    None
                }
                Ok(RelayRequest::PipeClose { from, pipe_id, node }) => {
                    self.pipe_close_here(&from, &pipe_id, &node);
                    None
                }
                Ok(RelayRequest::Matched { waiter, instance, ticket, game, peer }) => {
                    Some(self.matched_here(&waiter, instance, ticket, &game, &peer))
                }
                Ok(RelayRequest::RoomMembers { room }) => {
                    let members = self.inner.local.room_members(&room);
                    Some(RelayReply::Members(u32::try_from(members).unwrap_or(u32::MAX)))
                }
                Err(e) => {
                    RelayClusterStats::add(&self.stats().decode_errors, 1);
                    tracing::debug!(error = %e, "cluster: unreadable relay request");
                    None
                }
            };
            if let (Some(reply), Some(to)) = (reply, message.reply) {
                let _ = self.inner.client.publish(to, reply.encode()).await;
            }
        }
    }
}
