//! The sending task: messages for addresses this node does not hold, one at a time in the
//! order the relay handed them over, so a sender's messages to one address keep their order.
//!
//! For each: read the address's record; if it names another node, send the frame there (`D`)
//! and wait (bounded) for its answer; if nobody holds the address (no record, the holder's
//! client left, or the holder's node is gone), store it in the cluster queue and answer
//! `queued`. After storing, the record is read again: an address registered meanwhile (whose
//! flush may have run before the store) gets a flush request (`F`), so nothing waits in the
//! queue while its address is online.

use bytes::Bytes;
use mesgd_core::cluster::relay::{RemoteOutcome, RemoteSend, node_subject};
use mesgd_core::cluster::relay_wire::{RelayReply, RelayRequest};
use mesgd_core::relay::RelayError;
use tokio::sync::mpsc;

use super::{RelayClusterStats, RelayNode};

impl RelayNode {
    pub(super) async fn send_loop(self, mut sends: mpsc::Receiver<RemoteSend>) {
        while let Some(send) = sends.recv().await {
            let outcome = self.send_one(&send.to, send.live, send.queued).await;
            if let RemoteOutcome::Failed(_) = outcome {
                RelayClusterStats::add(&self.stats().send_failures, 1);
            }
            (send.done)(outcome);
        }
    }

    async fn send_one(&self, to: &str, live: Bytes, queued: Bytes) -> RemoteOutcome {
        let me = &self.inner;
        if me.client.connection_state() != async_nats::connection::State::Connected {
            return RemoteOutcome::Failed(RelayError::Overloaded);
        }
        let Ok(holder) = self.holder_of(to).await else {
            return RemoteOutcome::Failed(RelayError::Overloaded);
        };
        if let Some(holder) = holder.filter(|h| **h != *me.node) {
            let request = RelayRequest::Deliver { to: to.to_owned(), body: live }.encode();
            match tokio::time::timeout(me.timeout, me.client.request(node_subject(&holder), request)).await {
                Ok(Ok(reply)) => match RelayReply::decode(&reply.payload) {
                    Ok(RelayReply::Written) => {
                        RelayClusterStats::add(&self.stats().sent_remote, 1);
                        return RemoteOutcome::Live;
                    }
                    Ok(RelayReply::TooLarge) => return RemoteOutcome::Failed(RelayError::FrameTooLarge),
                    // Its client left: the message waits for the address's next registration.
                    Ok(_) => {}
                    Err(_) => {
                        RelayClusterStats::add(&self.stats().decode_errors, 1);
                        return RemoteOutcome::Failed(RelayError::Overloaded);
                    }
                },
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    RelayClusterStats::add(&self.stats().owner_gone, 1);
                }
                _ => return RemoteOutcome::Failed(RelayError::Overloaded),
            }
        }
        if !self.store(to, queued).await {
            RelayClusterStats::add(&self.stats().queue_refused, 1);
            return RemoteOutcome::Failed(RelayError::Overloaded);
        }
        RelayClusterStats::add(&self.stats().queued, 1);
        match self.holder_of(to).await {
            Ok(Some(holder)) if *holder == *me.node => {
                let (node, to) = (self.clone(), to.to_owned());
                tokio::spawn(async move { node.flush_late(&to).await });
            }
            Ok(Some(holder)) => {
                let flush = RelayRequest::Flush { addr: to.to_owned() }.encode();
                let _ = me.client.publish(node_subject(&holder), flush).await;
            }
            _ => {}
        }
        RemoteOutcome::Queued
    }
}
