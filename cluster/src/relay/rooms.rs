//! Rooms with members on several nodes: one subject per room (`mesgd.room.<room token>`),
//! subscribed by a node while it has a member; a `room_send` is published there once (after
//! local delivery) and each node with members hands it to each of its members once. The
//! publishing connection has `no_echo`, so the sender's node does not get it back.
//!
//! Subscriptions follow membership through a coalescing table (latest wanted state per room)
//! applied by one task, which flushes after each batch so that a test (or an operator) can
//! wait until this node's interest is at the server ([`RelayNode::rooms_synced`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::cluster::relay::address_token;
use mesgd_core::sync::lock;
use tokio::sync::mpsc;

use super::{RelayClusterStats, RelayNode};

/// The subject of `room`.
fn subject(room: &str) -> String {
    format!("mesgd.room.{}", address_token(room))
}

impl RelayNode {
    /// Records that this node now has (`true`) or no longer has a member of `room`.
    pub(super) fn want_room(&self, room: &str, member: bool) {
        lock(&self.inner.rooms.wanted).insert(room.to_owned(), member);
        self.inner.rooms.generation.fetch_add(1, Ordering::Relaxed);
        self.inner.rooms.changed.notify_one();
    }

    /// Waits until every membership change so far has its subscription in place at the
    /// server (or removed).
    pub(crate) async fn rooms_synced(&self) {
        let wanted = self.inner.rooms.generation.load(Ordering::Relaxed);
        let _ = self.inner.rooms.synced.subscribe().wait_for(|&g| g >= wanted).await;
    }

    /// Keeps this node's room subscriptions equal to its rooms with members.
    pub(super) async fn follow_rooms(self) {
        let me = &self.inner;
        let mut subscribed: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
        loop {
            me.rooms.changed.notified().await;
            let generation = me.rooms.generation.load(Ordering::Relaxed);
            let batch: Vec<(String, bool)> = lock(&me.rooms.wanted).drain().collect();
            for (room, member) in batch {
                match (member, subscribed.contains_key(&room)) {
                    (true, false) => match me.client.subscribe(subject(&room)).await {
                        Ok(mut messages) => {
                            let (node, name) = (self.clone(), room.clone());
                            let reader = tokio::spawn(async move {
                                while let Some(message) = messages.next().await {
                                    let reached = node.inner.local.room_deliver(&name, &message.payload);
                                    RelayClusterStats::add(&node.stats().room_received, 1);
                                    if reached == 0 {
                                        RelayClusterStats::add(&node.stats().room_unmatched, 1);
                                    }
                                }
                            });
                            subscribed.insert(room, reader);
                        }
                        Err(e) => {
                            RelayClusterStats::add(&self.stats().room_subscribe_errors, 1);
                            tracing::warn!(error = %e, "cluster: cannot subscribe to a room");
                        }
                    },
                    (false, true) => {
                        if let Some(reader) = subscribed.remove(&room) {
                            // Dropping the subscriber with its task unsubscribes.
                            reader.abort();
                        }
                    }
                    _ => {}
                }
            }
            me.stats.relay.rooms.store(subscribed.len() as u64, Ordering::Relaxed);
            let _ = me.client.flush().await;
            me.rooms.synced.send_modify(|g| *g = (*g).max(generation));
        }
    }

    /// Publishes the room messages of this node's members, in order.
    pub(super) async fn publish_rooms(self, mut out: mpsc::Receiver<(String, Bytes)>) {
        while let Some((room, body)) = out.recv().await {
            match self.inner.client.publish(subject(&room), body).await {
                Ok(()) => RelayClusterStats::add(&self.stats().room_sent, 1),
                Err(_) => RelayClusterStats::add(&self.stats().room_publish_errors, 1),
            }
        }
    }
}
