//! A persistent session's queued and in-flight messages in the takeover reply: copied out on
//! the node the client leaves, fitted into the reply's size limit, and read back on the node
//! it reaches.

use std::sync::Arc;

use mesgd_core::cluster::handover::{HandedMessage, HandedQos2};
use mesgd_core::cluster::registry::{HandedSubscription, MAX_REPLY_LEN, TakeoverReply};
use mesgd_core::session::{RestoredEntry, Session};

use crate::stats::ClusterStats;

/// The session's in-flight messages (in send order), its queued ones, and its incoming QoS 2
/// ids awaiting PUBREL, in the reply's form.
pub(crate) fn handed_messages(session: &Session) -> (Vec<HandedMessage>, Vec<HandedQos2>) {
    let now = tokio::time::Instant::now().into_std();
    let (entries, incoming) = session.handover_entries();
    let messages = entries.iter().map(|e| HandedMessage::of(e, now)).collect();
    let incoming = incoming.into_iter().map(|(packet_id, digest)| HandedQos2 { packet_id, digest }).collect();
    (messages, incoming)
}

/// The session's subscriptions, in the reply's form.
pub(crate) fn handed_subscriptions(session: &Session) -> Vec<HandedSubscription> {
    session.subscriptions().iter().map(|(_, r)| HandedSubscription::of(&r.filter, &r.options)).collect()
}

/// The reply's bytes, within [`MAX_REPLY_LEN`]: queued messages that do not fit are left out
/// (from the end of the queue, counted); if the in-flight state and subscriptions alone do not
/// fit, nothing is handed over and the client starts afresh.
pub(super) fn fit(reply: &mut TakeoverReply, stats: &ClusterStats) -> Vec<u8> {
    let mut bytes = reply.encode();
    if bytes.len() <= MAX_REPLY_LEN {
        return bytes;
    }
    let inflight = reply.messages.iter().take_while(|m| m.packet_id.is_some()).count();
    let queued = reply.messages.len() - inflight;
    let mut keep = queued;
    while keep > 0 && bytes.len() > MAX_REPLY_LEN {
        keep /= 2;
        let mut shorter = reply.clone();
        shorter.messages.truncate(inflight + keep);
        bytes = shorter.encode();
    }
    if bytes.len() <= MAX_REPLY_LEN {
        ClusterStats::add(&stats.registry_messages_not_handed, (queued - keep) as u64);
        reply.messages.truncate(inflight + keep);
        return bytes;
    }
    ClusterStats::add(&stats.registry_handover_too_large, 1);
    *reply = TakeoverReply::without_session(reply.outcome);
    reply.encode()
}

/// The handed-over messages as queue entries; one that does not parse is dropped and counted.
pub(crate) fn entries(messages: &[HandedMessage], node: &str, stats: &ClusterStats) -> Vec<RestoredEntry> {
    let now = tokio::time::Instant::now().into_std();
    let node: Arc<str> = Arc::from(node);
    let mut entries = Vec::with_capacity(messages.len());
    for m in messages {
        match m.parse(&node, now) {
            Ok(e) => entries.push(e),
            Err(e) => {
                ClusterStats::add(&stats.decode_errors, 1);
                tracing::debug!(error = %e, "cluster: unreadable handed-over message");
            }
        }
    }
    ClusterStats::add(&stats.registry_messages_received, entries.len() as u64);
    entries
}
