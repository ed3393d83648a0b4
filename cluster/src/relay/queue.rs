//! The cluster's store-and-forward queues: one stream, one subject per address
//! (`mrq.<address token>`), bounded by the relay's queue limits:
//!
//! - per address, `max_messages_per_subject` = `max_queued_messages` (the server drops the
//!   oldest), and `max_queued_bytes` applied when the queue is taken (the oldest past it are
//!   dropped and counted);
//! - in total, `max_bytes` = the global queue budget with `discard = new`: a full stream
//!   refuses the message and the sender gets `relay overloaded, retry later`;
//! - the TTL as `max_age`, and checked again when the queue is taken.
//!
//! Taking a queue reads its messages in order (direct gets by subject, no consumer) and
//! deletes each before keeping it: of two nodes taking at once, only the one whose delete
//! succeeds delivers a message, so each is delivered once.

use std::time::SystemTime;

use async_nats::jetstream::stream::{self, DirectGetErrorKind, DiscardPolicy, StorageType};
use async_nats::jetstream::{self};
use bytes::Bytes;
use mesgd_core::cluster::relay::address_token;
use mesgd_core::relay::QueueLimits;
use mesgd_core::relay::frame::MAX_TCP_FRAME;

use super::{RelayClusterStats, RelayNode};

/// The subjects of the queue stream.
const PREFIX: &str = "mrq";

/// The queue subject of `addr`.
pub(super) fn subject(addr: &str) -> String {
    format!("{PREFIX}.{}", address_token(addr))
}

/// The stream, created with `limits` if it does not exist (the first node's limits apply).
pub(super) async fn stream(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    limits: &QueueLimits,
    patience: std::time::Duration,
) -> Result<stream::Stream, crate::StartError> {
    let config = stream::Config {
        name: name.to_owned(),
        description: Some("mesgd relay: store-and-forward queues of offline addresses".to_owned()),
        subjects: vec![format!("{PREFIX}.>")],
        max_messages_per_subject: i64::try_from(limits.max_messages).unwrap_or(i64::MAX),
        max_bytes: i64::try_from(limits.global_bytes).unwrap_or(i64::MAX),
        max_age: limits.ttl,
        max_message_size: i32::try_from(MAX_TCP_FRAME).unwrap_or(i32::MAX),
        storage: StorageType::File,
        num_replicas: replicas,
        allow_direct: true,
        discard: DiscardPolicy::New,
        ..Default::default()
    };
    crate::streams::get_or_create(js, config, patience).await.map_err(crate::StartError::Relay)
}

impl RelayNode {
    /// Stores `body` in `addr`'s queue; `false` if the stream refused it or did not
    /// acknowledge it in time.
    pub(super) async fn store(&self, addr: &str, body: Bytes) -> bool {
        let me = &self.inner;
        let stored = async {
            let ack = me.js.publish(subject(addr), body).await.map_err(|e| e.to_string())?;
            ack.await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(me.timeout, stored).await {
            Ok(Ok(_)) => true,
            Ok(Err(why)) => {
                tracing::debug!(reason = why, "cluster: the relay queue refused a message");
                false
            }
            Err(_) => false,
        }
    }

    /// Takes `addr`'s queue out of the stream, oldest first, within the per-address byte cap
    /// and the TTL (what is dropped is counted). Call with `addr`'s flush lock held.
    pub(super) async fn take_backlog(&self, addr: &str) -> Vec<Bytes> {
        let me = &self.inner;
        let subject = subject(addr);
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let ttl = me.limits.ttl.as_secs();
        let mut taken = Vec::new();
        let mut next = 1;
        // The server keeps at most `max_messages` per subject; the margin covers messages
        // stored while this runs.
        for _ in 0..me.limits.max_messages.saturating_mul(2).saturating_add(16) {
            let message = match me.queue.direct_get_next_for_subject(&*subject, Some(next)).await {
                Ok(m) => m,
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => break,
                Err(e) => {
                    tracing::warn!(addr, error = %e, "cluster: cannot read the relay queue");
                    break;
                }
            };
            next = message.sequence + 1;
            // Only the node whose delete succeeds has the message.
            if !matches!(me.queue.delete_message(message.sequence).await, Ok(true)) {
                continue;
            }
            let stored = u64::try_from(message.time.unix_timestamp()).unwrap_or(0);
            if now.saturating_sub(stored) > ttl {
                RelayClusterStats::add(&self.stats().flush_expired, 1);
                continue;
            }
            taken.push(message.payload);
        }
        // The newest that fit in the per-address byte cap, as the local queue keeps them.
        let mut bytes = 0;
        let mut keep_from = taken.len();
        while keep_from > 0 && bytes + taken[keep_from - 1].len() <= me.limits.max_bytes {
            keep_from -= 1;
            bytes += taken[keep_from].len();
        }
        if keep_from > 0 {
            RelayClusterStats::add(&self.stats().flush_over_bytes, keep_from as u64);
            taken.drain(..keep_from);
        }
        taken
    }

    /// Puts messages taken for a client that then left back into `addr`'s queue (after any
    /// stored meanwhile: order is kept only within each part).
    pub(super) async fn requeue(&self, addr: &str, bodies: Vec<Bytes>) {
        for body in bodies {
            if self.store(addr, body).await {
                RelayClusterStats::add(&self.stats().requeued, 1);
            } else {
                RelayClusterStats::add(&self.stats().queue_refused, 1);
            }
        }
    }
}
