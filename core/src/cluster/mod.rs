//! The sans-I/O parts of running mesgd nodes as one broker over NATS: the topic → subject
//! mapping, the duplicate filter for messages that arrive on overlapping subscriptions, the
//! seam through which the router reports which filters this node has subscribers for, and the
//! session registry's seam and formats.
//!
//! The I/O (the NATS connection, JetStream) is the `mesgd-cluster` crate; without `[cluster]`
//! none of it is installed and the broker behaves as a single node.
//!
//! # Layout
//!
//! - [`subject`]: the escaping topic / filter → NATS subject mapping and its inverse.
//! - [`dedupe`]: delivering a message that arrived on several NATS subscriptions once.
//! - [`durable`]: the seam that stores QoS 1/2 messages before their acknowledgement.
//! - [`handover`]: a moving session's queued and in-flight messages, in the takeover reply.
//! - [`client_key`]: the injective client id → NATS KV key escaping.
//! - [`registry`]: the session registry seam ([`registry::SessionRegistry`]) and its records.
//! - [`session_record`]: a persistent session's copy in the cluster, for recovery after its
//!   node died, and which journal changes must be in it before a packet leaves.
//! - [`replay`]: what a recovered session gets from the durable stream (its checkpoint, the
//!   ids it already had).
//! - [`wills`]: the seam that keeps live connections' wills cluster-wide ([`wills::WillKeeper`]).
//! - [`content`]: content routing's seams to the cluster and its reach header.
//! - [`console`]: the console's browser sessions' seams to the cluster and their record.
//! - [`relay`]: the relay's seams to the cluster and how addresses are named in NATS;
//!   [`relay_wire`]: the relay messages between nodes; [`relay_kv`]: the relay bucket's
//!   records of games' waiters and nodes' figures.
//! - this file: the [`Interest`] seam of the router.

pub mod client_key;
pub mod console;
pub mod content;
pub mod dedupe;
pub mod durable;
pub mod handover;
pub mod registry;
pub mod relay;
pub mod relay_kv;
pub mod relay_wire;
pub mod replay;
pub mod session_record;
pub mod subject;
#[cfg(test)]
mod subject_tests;
pub mod wills;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

use std::fmt;

use crate::topic::{TopicFilter, TopicName};

/// Told when the router gains its first subscriber to a filter (plain or shared) and when it
/// loses its last, so that a cluster layer subscribes the node to the matching subjects.
///
/// Called with the router's shard lock held, so the calls for one filter come in order: an
/// implementation must be quick and must not call back into the router.
pub trait Interest: Send + Sync + fmt::Debug {
    /// The router now has a direct (not shared) subscriber to `filter`, and had none. A
    /// filter with only shared members is not reported here: its groups are
    /// ([`Interest::group_added`]).
    fn filter_added(&self, filter: &TopicFilter);
    /// The router no longer has any direct subscriber to `filter`.
    fn filter_removed(&self, filter: &TopicFilter);
    /// The router now has an online member (one with a connection) of shared group `group`
    /// on `filter`, and had none.
    fn group_added(&self, group: &str, filter: &TopicFilter) {
        let _ = (group, filter);
    }
    /// The router's last online member of shared group `group` on `filter` went offline or
    /// left.
    fn group_removed(&self, group: &str, filter: &TopicFilter) {
        let _ = (group, filter);
    }
    /// The generation of the latest change the calls above made (it rises with each); 0 when
    /// there was none. What [`Interest::poll_synced`] is asked about.
    fn generation(&self) -> u64 {
        0
    }
    /// Whether the cluster has confirmed the node's subscriptions as they stood at
    /// `generation` (from then on, messages other nodes publish reach them); while not, `waker`
    /// is woken when that may have changed. True when there is nothing to wait for (the
    /// cluster cannot be reached: the subscription is local until it can).
    fn poll_synced(&self, generation: u64, waker: &std::task::Waker) -> bool {
        let _ = (generation, waker);
        true
    }
    /// Whether the cluster layer delivers `topic`'s messages to shared subscriptions itself
    /// (one member in the whole cluster per message): the router then leaves groups out of a
    /// local publish to it.
    fn routes_groups(&self, topic: &TopicName) -> bool {
        let _ = topic;
        false
    }
}
