//! Retained messages cluster-wide, in one JetStream stream that keeps one message per subject
//! (`max_messages_per_subject = 1`): storing a topic's new retained message replaces the old
//! one, and an empty payload (the MQTT way to delete) replaces it with an empty tombstone.
//!
//! Every node follows the whole stream with an ordered consumer (one per node, not per client
//! or subscription: JetStream's assets do not grow with the clients) that starts with the last
//! message of every subject and then stays live, and applies each change to its local retained
//! store ([`Broker::apply_retained`]), its own changes included: the stream's order is the one
//! order every node converges to when two nodes set one topic at once. A SUBSCRIBE is then
//! answered from the local store, as on a single node.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, Context, consumer, stream};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::subject::RETAINED;
use mesgd_core::model::Message;
use tokio::sync::{mpsc, oneshot, watch};

use crate::features::ServerFeatures;
use crate::live::Identity;
use crate::stats::ClusterStats;
use crate::wire::{self, ExpiryAs};

/// How many stores to the stream may await their acknowledgement at once.
const MAX_IN_FLIGHT: usize = 256;

/// The stream of retained messages, created if it does not exist.
pub(crate) async fn stream(
    js: &Context,
    name: &str,
    replicas: usize,
    patience: Duration,
) -> Result<stream::Stream, crate::StartError> {
    let config = stream::Config {
        name: name.to_owned(),
        subjects: RETAINED.everything().to_vec(),
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        allow_direct: true,
        description: Some("mesgd retained messages: one per topic".to_owned()),
        ..Default::default()
    };
    crate::streams::get_or_create(js, config, patience).await.map_err(crate::StartError::Stream)
}

/// How many tombstones one node keeps track of for purging at most; past it, the oldest is
/// forgotten (it stays in the stream, as with `retained_tombstone_ms = 0`).
const MAX_TOMBSTONES: usize = 100_000;

/// A tombstone this node stored: its subject, its stream sequence, when it was acknowledged.
struct Tombstone {
    subject: String,
    sequence: u64,
    at: tokio::time::Instant,
}

/// Stores this node's retained changes in the stream, pipelining the acknowledgements, and
/// purges the tombstones it stored once they are `tombstone_ttl` old (zero: never). A purge
/// removes the subject's messages before the one after the tombstone, so a newer retained
/// message on the topic, from any node, stays.
pub(crate) async fn store_loop(
    js: Context,
    stream: stream::Stream,
    tombstone_ttl: Duration,
    broker: Arc<Broker>,
    me: Identity,
    mut queue: mpsc::Receiver<Arc<Message>>,
    stats: Arc<ClusterStats>,
) {
    let mut acks = FuturesOrdered::new();
    let mut tombstones: VecDeque<Tombstone> = VecDeque::new();
    let mut open = true;
    while open || !acks.is_empty() {
        let due = tombstones.front().map(|t| t.at + tombstone_ttl);
        tokio::select! {
            () = sleep_until_some(due) => {
                let Some(t) = tombstones.pop_front() else { continue };
                match stream.purge().filter(t.subject).sequence(t.sequence + 1).await {
                    Ok(_) => ClusterStats::add(&stats.retained_tombstones_purged, 1),
                    Err(e) => tracing::debug!(error = %e, "cluster: a retained tombstone was not purged"),
                }
            }
            next = queue.recv(), if open && acks.len() < MAX_IN_FLIGHT => {
                let Some(message) = next else { open = false; continue };
                let Ok(subject) = RETAINED.topic(&message.topic) else {
                    ClusterStats::add(&stats.unmappable_topics, 1);
                    continue;
                };
                let tombstone = (message.payload.is_empty() && !tombstone_ttl.is_zero()).then(|| subject.clone());
                let headers = wire::encode(&message, &me.node, (me.instance, 0), ExpiryAs::Deadline, |i| broker.wall_time(i));
                match js.publish_with_headers(subject, headers, message.payload.clone()).await {
                    Ok(ack) => acks.push_back(async move { (ack.into_future().await, tombstone) }),
                    Err(e) => {
                        ClusterStats::add(&stats.retained_store_errors, 1);
                        tracing::warn!(error = %e, "cluster: retained store failed");
                    }
                }
            }
            Some((ack, tombstone)) = acks.next(), if !acks.is_empty() => match ack {
                Ok(ack) => {
                    ClusterStats::add(&stats.retained_stored, 1);
                    if let Some(subject) = tombstone {
                        if tombstones.len() == MAX_TOMBSTONES {
                            tombstones.pop_front();
                        }
                        tombstones.push_back(Tombstone { subject, sequence: ack.sequence, at: tokio::time::Instant::now() });
                    }
                }
                Err(e) => {
                    ClusterStats::add(&stats.retained_store_errors, 1);
                    tracing::warn!(error = %e, "cluster: retained store not acknowledged");
                }
            },
        }
    }
}

/// Sleeps until `due`, or forever without one.
async fn sleep_until_some(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Follows the stream from the last message of every subject, applying each to the local
/// store; each returned receiver fires once what the stream held at the start is applied. With
/// a server that offers several filter subjects per consumer (2.10), one ordered consumer for
/// both subject families (plain and `$` topics); else, or if the server refuses it, one per
/// family: nats-server 2.9 takes one filter subject per consumer, and "last per subject" needs
/// one.
pub(crate) async fn follow(
    stream: &stream::Stream,
    features: ServerFeatures,
    broker: &Arc<Broker>,
    stats: &Arc<ClusterStats>,
    applied: &Arc<watch::Sender<u64>>,
) -> Result<Vec<oneshot::Receiver<()>>, crate::StartError> {
    let families = RETAINED.everything().to_vec();
    if features.multi_filter_consumers {
        let (tx, rx) = oneshot::channel();
        match follow_filters(stream, families.clone(), broker.clone(), stats.clone(), applied.clone(), tx)
            .await
        {
            Ok(()) => return Ok(vec![rx]),
            Err(e) => tracing::info!(
                error = %e,
                "cluster: the retained stream refused a consumer with several filter subjects; \
                 following it with one consumer per subject family"
            ),
        }
    }
    let mut loaded = Vec::new();
    for filter in families {
        let (tx, rx) = oneshot::channel();
        follow_filters(stream, vec![filter], broker.clone(), stats.clone(), applied.clone(), tx).await?;
        loaded.push(rx);
    }
    Ok(loaded)
}

/// One ordered consumer on `filters` (one, or several where the server takes them).
async fn follow_filters(
    stream: &stream::Stream,
    mut filters: Vec<String>,
    broker: Arc<Broker>,
    stats: Arc<ClusterStats>,
    applied: Arc<watch::Sender<u64>>,
    loaded: oneshot::Sender<()>,
) -> Result<(), crate::StartError> {
    let (filter_subject, filter_subjects) = if filters.len() == 1 {
        (filters.pop().unwrap_or_default(), Vec::new())
    } else {
        (String::new(), filters)
    };
    let config = consumer::pull::OrderedConfig {
        filter_subject,
        filter_subjects,
        deliver_policy: consumer::DeliverPolicy::LastPerSubject,
        description: Some("mesgd node: retained messages".to_owned()),
        ..Default::default()
    };
    let mut consumer =
        stream.create_consumer(config).await.map_err(|e| crate::StartError::Stream(e.to_string()))?;
    let pending = consumer.info().await.map_err(|e| crate::StartError::Stream(e.to_string()))?.num_pending;
    let mut loaded = Some(loaded);
    if pending == 0 {
        loaded.take().map(|l| l.send(()));
    }
    let mut messages = consumer.messages().await.map_err(|e| crate::StartError::Stream(e.to_string()))?;
    tokio::spawn(async move {
        while let Some(next) = messages.next().await {
            let m = match next {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cluster: retained stream consumer");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let left = m.info().map(|i| i.pending).unwrap_or(0);
            apply(&broker, &stats, &m);
            applied.send_modify(|n| *n += 1);
            if left == 0 {
                loaded.take().map(|l| l.send(()));
            }
        }
    });
    Ok(())
}

fn apply(broker: &Broker, stats: &ClusterStats, m: &jetstream::Message) {
    let decoded = RETAINED.parse_topic(m.subject.as_str()).map_err(wire::WireError::from).and_then(|topic| {
        let headers = m.headers.as_ref().ok_or(wire::WireError::Missing("Mesgd-Node"))?;
        let sender = wire::sender(headers)?;
        let now = tokio::time::Instant::now().into_std();
        wire::decode(topic, m.payload.clone(), headers, &sender, now, |at| broker.instant_of(at))
    });
    match decoded {
        Ok(mut message) => {
            message.retain = true;
            broker.apply_retained(message);
            ClusterStats::add(&stats.retained_applied, 1);
        }
        Err(e) => {
            ClusterStats::add(&stats.decode_errors, 1);
            tracing::debug!(error = %e, "cluster: unreadable retained message");
        }
    }
}
