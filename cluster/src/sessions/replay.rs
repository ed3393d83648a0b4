//! Replaying the durable stream for a session resumed on this node, recovered from its record
//! (its node died) or handed over by its live previous owner: the stored QoS 1/2 messages from
//! the checkpoint that match its subscriptions and that it did not have go into its queue,
//! after what the record or the handover held. After a live handover that is what reached the
//! old owner's copy after its snapshot, or no node while the session moved.
//!
//! Order of events, so that nothing falls between the replay and the live path: the session is
//! recovered and its client attached (its subscriptions are in the router), the node's NATS
//! subscriptions are confirmed at the server (from then on other nodes' messages arrive live),
//! and only then is the stream's last sequence read: the replay covers the checkpoint up to it,
//! and skips what the live path brought meanwhile ([`SessionCopies::has`]). The consumer is
//! ephemeral (one per recovery, deleted after it; the server removes it if this node dies
//! first), pushes to an inbox subscribed before it exists, and is bounded in messages, bytes
//! and time.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, push};
use futures_util::StreamExt;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::replay::{Replay, Replayed};
use mesgd_core::cluster::subject::DURABLE;
use mesgd_core::model::{Delivery, MessageId, SessionKey, SubscribeOptions};
use mesgd_core::session::Enqueued;
use mesgd_core::topic::SubscriptionFilter;
use tokio::sync::watch;

use super::SessionCopies;
use crate::interest::InterestTable;
use crate::stats::ClusterStats;
use crate::wire;

/// How many stored messages one replay reads at most.
const MAX_READ: usize = 100_000;
/// How many messages one replay gives the session at most.
const MAX_GIVEN: usize = 10_000;
/// How many payload bytes one replay gives the session at most.
const MAX_BYTES: usize = 64 << 20;
/// How long one replay may take to find its messages, from the recovery on.
const MAX_TIME: Duration = Duration::from_secs(20);
/// How long the replay waits, in all, for the client to make room in its queue. The replay
/// gives its messages as the client takes them, not all at once: a few thousand found messages
/// would otherwise meet the session's `max_queued_messages` before the client has read any,
/// and be dropped although the client is online and reading. It fills half the queue at most
/// (`Session::has_room_to_spare_for`): live messages arriving meanwhile cannot wait, and a
/// queue the replay kept full would drop them at the limits. Past this wait (a client that
/// stopped reading, or went offline) the rest is given as a single node would give it: the
/// queue limits apply, and what they drop is counted (`replay_dropped`).
const ROOM_WAIT: Duration = Duration::from_secs(10);
/// How often the replay looks whether a full queue has room again.
const ROOM_POLL: Duration = Duration::from_millis(5);
/// How long the replay waits for the next stored message.
const NEXT_WAIT: Duration = Duration::from_secs(5);
/// How often the replay looks whether the resumed session's client is attached.
const ATTACH_POLL: Duration = Duration::from_millis(10);
/// How far the live copy of a message and its store may lag behind each other (the publishing
/// node sends them from two queues): the stream's end is read this long after the node's
/// subscriptions are in place, so that a message whose live copy came before them is in the
/// replay even if its store lagged; and what the replay found is given this long after it was
/// read, so that a message whose live copy came after them is seen as received, not given
/// twice.
const LAG: Duration = Duration::from_secs(1);

/// What a replay needs of the node; one per node.
#[derive(Debug)]
pub(crate) struct Replayer {
    pub(crate) js: jetstream::Context,
    pub(crate) stream: String,
    pub(crate) broker: Weak<Broker>,
    pub(crate) interest: Arc<InterestTable>,
    pub(crate) synced: watch::Receiver<u64>,
    pub(crate) copies: Arc<SessionCopies>,
    pub(crate) stats: Arc<ClusterStats>,
}

/// Why a replay ended before the end of the stream.
enum Ended {
    /// A bound (messages, bytes, time).
    Bound,
    /// The stream could not be read, or the session is gone.
    Failed(String),
}

impl Replayer {
    /// Starts the replay of `id`'s session, just handed over with `subscriptions` (as parsed
    /// for the new session) and the messages `held`, which finished `finished` since
    /// `checkpoint_ms`: from its record (its node died) or from its live previous owner.
    pub(crate) fn start(
        self: &Arc<Self>,
        id: &Arc<str>,
        checkpoint_ms: u64,
        finished: Vec<MessageId>,
        held: impl Iterator<Item = MessageId>,
        subscriptions: &[(SubscriptionFilter, SubscribeOptions)],
    ) {
        let replay = Replay::new(id.clone(), subscriptions, finished.iter().copied().chain(held));
        if replay.is_empty() {
            return;
        }
        let (me, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let ran =
                match tokio::time::timeout(MAX_TIME, me.find(&id, checkpoint_ms, &finished, replay)).await {
                    Ok(Ok((found, ended))) => match me.give(&id, found).await {
                        Ok(()) => Ok(ended),
                        Err(e) => Ok(Err(e)),
                    },
                    Ok(Err(e)) => Ok(Err(e)),
                    Err(elapsed) => Err(elapsed),
                };
            ClusterStats::add(&me.stats.replays, 1);
            match ran {
                Ok(Ok(())) => {}
                Ok(Err(Ended::Failed(why))) => {
                    ClusterStats::add(&me.stats.replay_errors, 1);
                    tracing::warn!(
                        client_id = &*id,
                        reason = why,
                        "cluster: the replay of a resumed session failed"
                    );
                }
                Ok(Err(Ended::Bound)) | Err(_) => {
                    ClusterStats::add(&me.stats.replay_truncated, 1);
                    tracing::warn!(
                        client_id = &*id,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "cluster: the replay of a resumed session reached its bound"
                    );
                }
            }
        });
    }

    /// Reads the stream from the checkpoint for what the session did not have: the deliveries
    /// found, and whether the read reached the stream's end.
    async fn find(
        &self,
        id: &Arc<str>,
        checkpoint_ms: u64,
        finished: &[MessageId],
        mut replay: Replay,
    ) -> Result<(Vec<Delivery>, Result<(), Ended>), Ended> {
        let key = SessionKey::mqtt(&**id);
        // The client attached: the session is open here (its journal changes are this node's)
        // and its subscriptions are in the router.
        loop {
            let broker = self.broker.upgrade().ok_or_else(|| Ended::Failed("shutting down".into()))?;
            if broker.session(&key).is_some_and(|s| s.is_online()) {
                break;
            }
            tokio::time::sleep(ATTACH_POLL).await;
        }
        self.copies.adopt_finished(id, finished);
        // From here on, other nodes' messages reach the session live.
        let wanted = self.interest.generation();
        let _ = self.synced.clone().wait_for(|&g| g >= wanted).await;
        tokio::time::sleep(LAG).await;
        let failed = |e: &dyn std::fmt::Display| Ended::Failed(e.to_string());
        let mut stream = self.js.get_stream(&self.stream).await.map_err(|e| failed(&e))?;
        let end = stream.info().await.map_err(|e| failed(&e))?.state.last_sequence;
        let start = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(checkpoint_ms) * 1_000_000)
            .map_err(|e| failed(&e))?;
        let inbox = self.js.client().new_inbox();
        let mut delivered = self.js.client().subscribe(inbox.clone()).await.map_err(|e| failed(&e))?;
        let config = push::Config {
            deliver_subject: inbox,
            description: Some("mesgd replay of a resumed session".into()),
            // Both families when a subscription asks for `$` topics; else the plain one only.
            filter_subject: if replay.wants_dollar_topics() {
                String::new()
            } else {
                format!("{}.>", DURABLE.plain)
            },
            ack_policy: AckPolicy::None,
            replay_policy: ReplayPolicy::Instant,
            deliver_policy: DeliverPolicy::ByStartTime { start_time: start },
            // Removed by the server if this node dies before deleting it.
            inactive_threshold: Duration::from_secs(30),
            ..Default::default()
        };
        let consumer = stream.create_consumer(config).await.map_err(|e| failed(&e))?;
        let name = consumer.cached_info().name.clone();
        let pending = consumer.cached_info().num_pending;
        let read = self.read(&mut delivered, &mut replay, end, pending).await;
        let _ = delivered.unsubscribe().await;
        let _ = stream.delete_consumer(&name).await;
        tokio::time::sleep(LAG).await;
        // Received live meanwhile (its copy came through the node's subscriptions). Checked
        // now, once: what a session finished is remembered for a bounded window, so a check
        // made later, after a long give, could miss a message the live path brought.
        let (found, ended) = read;
        let found = found
            .into_iter()
            .filter(|delivery| {
                let had = delivery.message.id.is_some_and(|mid| self.copies.has(id, mid));
                if had {
                    ClusterStats::add(&self.stats.replay_skipped, 1);
                }
                !had
            })
            .collect();
        Ok((found, ended))
    }

    /// Gives the session what [`Replayer::find`] found, in stream order, as its client makes
    /// room (see [`ROOM_WAIT`]).
    async fn give(&self, id: &Arc<str>, found: Vec<Delivery>) -> Result<(), Ended> {
        let key = SessionKey::mqtt(&**id);
        let broker = self.broker.upgrade().ok_or_else(|| Ended::Failed("shutting down".into()))?;
        let session = broker.session(&key).ok_or_else(|| Ended::Failed("the session is gone".into()))?;
        drop(broker);
        let mut waited = Duration::ZERO;
        for delivery in found {
            while waited < ROOM_WAIT && session.is_online() && !session.has_room_to_spare_for(&delivery) {
                let before = tokio::time::Instant::now();
                tokio::time::sleep(ROOM_POLL).await;
                waited += before.elapsed();
            }
            match session.enqueue_journaled(delivery, false, 0).0 {
                Enqueued::Queued | Enqueued::QueuedDroppingOldest => {
                    ClusterStats::add(&self.stats.replayed, 1)
                }
                Enqueued::Dropped | Enqueued::OverBudget => ClusterStats::add(&self.stats.replay_dropped, 1),
                // No longer readable (its ACL changed meanwhile), or the session ended.
                Enqueued::Filtered => {}
            }
        }
        Ok(())
    }

    /// Reads what the consumer pushes up to stream sequence `end`: the deliveries of what the
    /// session did not have, and whether the read reached the end.
    async fn read(
        &self,
        delivered: &mut async_nats::Subscriber,
        replay: &mut Replay,
        end: u64,
        pending: u64,
    ) -> (Vec<Delivery>, Result<(), Ended>) {
        let mut found = Vec::new();
        if pending == 0 {
            return (found, Ok(()));
        }
        let (mut read, mut bytes) = (0usize, 0usize);
        let Some(broker) = self.broker.upgrade() else {
            return (found, Err(Ended::Failed("shutting down".into())));
        };
        loop {
            let next = tokio::time::timeout(NEXT_WAIT, delivered.next()).await;
            let Ok(Some(raw)) = next else {
                return (found, Err(Ended::Failed("the replay consumer stopped delivering".into())));
            };
            let message = jetstream::Message { message: raw, context: self.js.clone() };
            let (sequence, left) = match message.info() {
                Ok(info) => (info.stream_sequence, info.pending),
                Err(e) => return (found, Err(Ended::Failed(e.to_string()))),
            };
            if sequence > end {
                return (found, Ok(()));
            }
            read += 1;
            if let Some(m) = decode(&message.message, &broker, &self.stats) {
                match replay.delivery(m, tokio::time::Instant::now().into_std()) {
                    Replayed::Deliver(delivery) => {
                        bytes += delivery.message.payload.len();
                        found.push(delivery);
                    }
                    Replayed::Had => ClusterStats::add(&self.stats.replay_skipped, 1),
                    Replayed::Expired => ClusterStats::add(&self.stats.replay_expired, 1),
                    Replayed::Unmatched => {}
                }
            }
            if sequence >= end || left == 0 {
                return (found, Ok(()));
            }
            if read >= MAX_READ || found.len() >= MAX_GIVEN || bytes >= MAX_BYTES {
                return (found, Err(Ended::Bound));
            }
        }
    }
}

/// The stored message a consumer pushed; one that does not parse is counted and skipped.
fn decode(
    m: &async_nats::Message,
    broker: &Broker,
    stats: &ClusterStats,
) -> Option<mesgd_core::model::Message> {
    let decoded = DURABLE.parse_topic(m.subject.as_str()).map_err(wire::WireError::from).and_then(|topic| {
        let headers = m.headers.as_ref().ok_or(wire::WireError::Missing("Mesgd-Node"))?;
        let sender = wire::sender(headers)?;
        let now = tokio::time::Instant::now().into_std();
        wire::decode(topic, m.payload.clone(), headers, &sender, now, |at| broker.instant_of(at))
    });
    match decoded {
        Ok(message) => Some(message),
        Err(e) => {
            ClusterStats::add(&stats.decode_errors, 1);
            tracing::debug!(error = %e, "cluster: unreadable stored message in a replay");
            None
        }
    }
}
