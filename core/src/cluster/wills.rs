//! The seam through which a clustered broker keeps the wills of its live MQTT connections
//! where other nodes can find them, so that a node that dies without closing its connections
//! still has their wills sent (by the node that takes over its lease; the `mesgd-cluster`
//! crate's `wills` module). Without `[cluster]` nothing is installed: a will lives in the
//! connection, as on any single broker.

use std::fmt;
use std::sync::Arc;

use crate::acl::Acl;
use crate::model::Will;

/// Told when a connection with a will is admitted and when it ends.
///
/// Both calls come from the connection's own task and must return at once (an implementation
/// queues the work); the calls for one connection come in order.
pub trait WillKeeper: Send + Sync + fmt::Debug {
    /// Connection `generation` of `client_id` is live and has `will`, to be checked against
    /// `acl` (the connection's at admission) when it is sent.
    fn keep(&self, client_id: &Arc<str>, generation: u64, will: &Will, acl: &Acl);
    /// Connection `generation` of `client_id` ended here: its will was sent, scheduled or
    /// dropped by this node, so no other node may send it.
    fn release(&self, client_id: &Arc<str>, generation: u64);
}
