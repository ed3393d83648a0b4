//! The seam through which a cluster layer stores QoS 1/2 messages durably (in JetStream)
//! before the publisher is acknowledged.
//!
//! [`Broker::publish`](crate::broker::Broker::publish) hands every QoS 1/2 message published on
//! this node to the installed [`MessageStore`] and reports the store sequence number it got in
//! [`RouteStats::stored_seq`](crate::router::RouteStats::stored_seq). A front end holds the
//! PUBACK / PUBREC (and everything it writes after it, so that the order of packets is kept)
//! until [`MessageStore::poll_stored`] says every number it waits for is stored. Stores are
//! pipelined: a connection goes on reading and publishing while its acknowledgements wait, so
//! many stores are outstanding at once and each acknowledgement leaves when its own store (and
//! the earlier ones of the connection) is acknowledged.
//!
//! Without `[cluster]` nothing is installed and no QoS 1/2 publish waits for anything here.

use std::fmt;
use std::sync::Arc;
use std::task::Waker;

use crate::model::Message;

/// What [`MessageStore::poll_stored`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stored {
    /// Every store of the range is acknowledged by the store.
    Yes,
    /// Some are not answered yet: the waker is woken when they are.
    Pending,
    /// One of them failed (the store refused it, or no answer came in time): what waits for it
    /// must not be acknowledged.
    Failed,
}

/// Where QoS 1/2 messages published on this node are stored before their acknowledgement.
pub trait MessageStore: Send + Sync + fmt::Debug {
    /// Hands `message` to the store, which gives it its [`Message::id`]; returns the message
    /// as every subscriber shares it and its store sequence number (increasing). Must not
    /// block: it is called while the publisher's packet is handled.
    fn store(&self, message: Message) -> (Arc<Message>, u64);

    /// Whether every store numbered `from..=until` is acknowledged; while some are not, `waker`
    /// is woken when they are.
    fn poll_stored(&self, from: u64, until: u64, waker: &Waker) -> Stored;
}

/// Whether the cluster's durable store takes `message`: QoS 1 or 2, published on this node
/// (a message from another node was stored there), and not a `$SYS` statistic (each node's
/// own, never shared).
pub fn stores(message: &Message) -> bool {
    let topic = message.topic.as_str();
    message.qos != crate::model::QoS::AtMostOnce
        && message.origin.node.is_none()
        && topic != "$SYS"
        && !topic.starts_with("$SYS/")
}
