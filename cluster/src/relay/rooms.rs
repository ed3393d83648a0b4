//! Rooms with members on several nodes: one subject per room (`mesgd.room.<room token>`),
//! subscribed by a node while it has a member; a `room_send` is published there once (after
//! local delivery) and each node with members hands it to each of its members once. The
//! publishing connection has `no_echo`, so the sender's node does not get it back.
//!
//! Subscriptions follow membership through a coalescing table (latest wanted state per room)
//! applied by one task. After each batch the task has the server confirm it (a round trip on
//! the same connection, [`server_caught_up`]: a flush only writes the socket), and only then
//! marks the batch's generation synced. A `joined_room` waits for that
//! ([`RelayNode::rooms_confirmed`], bounded), so that a member of another node who sends right
//! after it reaches the new member; a test waits with [`RelayNode::rooms_synced`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use async_nats::connection::State;
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::cluster::relay::{ConfirmFuture, address_token};
use mesgd_core::sync::lock;
use tokio::sync::mpsc;

use super::{RelayClusterStats, RelayNode};
use crate::live::{RESUBSCRIBE_AFTER, server_caught_up};

/// The subject of `room`.
fn subject(room: &str) -> String {
    format!("mesgd.room.{}", address_token(room))
}

impl RelayNode {
    /// Records that this node now has (`true`) or no longer has a member of `room`.
    pub(super) fn want_room(&self, room: &str, member: bool) {
        lock(&self.inner.rooms.wanted).insert(room.to_owned(), member);
        // Release: whoever reads this generation then finds the change in `wanted`.
        self.inner.rooms.generation.fetch_add(1, Ordering::AcqRel);
        self.inner.rooms.changed.notify_one();
    }

    /// Waits until every membership change so far has its subscription in place at the
    /// server (or removed).
    pub(crate) async fn rooms_synced(&self) {
        let wanted = self.inner.rooms.generation.load(Ordering::Acquire);
        let _ = self.inner.rooms.synced.subscribe().wait_for(|&g| g >= wanted).await;
    }

    /// What a `joined_room` waits for: every membership change so far confirmed at the
    /// server, at most `registry_timeout_ms` (then counted, and the answer goes all the same:
    /// the client is a member here, and the subscription follows). Nothing to wait for while
    /// the NATS connection is down, as for a SUBACK: the room is local until NATS is back.
    /// The whole generation is waited for, not the one room: a second member joining here
    /// before the first one's subscription is confirmed waits for it too.
    pub(super) fn rooms_confirmed(&self) -> Option<ConfirmFuture> {
        let wanted = self.inner.rooms.generation.load(Ordering::Acquire);
        let mut synced = self.inner.rooms.synced.subscribe();
        if *synced.borrow() >= wanted || self.inner.client.connection_state() != State::Connected {
            return None;
        }
        let node = self.clone();
        Some(Box::pin(async move {
            let confirmed = synced.wait_for(|&g| g >= wanted);
            if tokio::time::timeout(node.inner.timeout, confirmed).await.is_err() {
                RelayClusterStats::add(&node.stats().room_sync_timeouts, 1);
            }
        }))
    }

    /// Keeps this node's room subscriptions equal to its rooms with members.
    pub(super) async fn follow_rooms(self) {
        let me = &self.inner;
        let mut subscribed: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
        loop {
            me.rooms.changed.notified().await;
            let generation = me.rooms.generation.load(Ordering::Acquire);
            let batch: Vec<(String, bool)> = lock(&me.rooms.wanted).drain().collect();
            let mut failed = false;
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
                            tracing::warn!(error = %e, "cluster: cannot subscribe to a room; trying again");
                            // Wanted again, unless a later change (the last member left) came
                            // in meanwhile: that one is the state to reach.
                            lock(&me.rooms.wanted).entry(room).or_insert(true);
                            failed = true;
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
            if !failed && self.server_has_rooms().await {
                me.rooms.synced.send_modify(|g| *g = (*g).max(generation));
            } else {
                // Not confirmed, or a subscription failed: tried again shortly, with whatever
                // changed meanwhile. While NATS is down nothing is asked: the NATS client
                // subscribes again when it reconnects, before the next round trip.
                tokio::time::sleep(RESUBSCRIBE_AFTER).await;
                me.rooms.changed.notify_one();
            }
        }
    }

    /// Whether the server confirmed the SUBs and UNSUBs sent so far, within the bound.
    async fn server_has_rooms(&self) -> bool {
        let client = &self.inner.client;
        client.connection_state() == State::Connected
            && tokio::time::timeout(self.inner.timeout, server_caught_up(client)).await == Ok(true)
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
