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
//!
//! A stream deleted under the nodes (`nats stream rm`, a NATS server back without its
//! JetStream storage) is noticed within [`CHECK_STREAM`]: it is created again, every node joins
//! the new one from its start, and fills it from its own store ([`Follower::rejoin`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, Context, consumer, stream};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::subject::RETAINED;
use mesgd_core::model::Message;
use tokio::sync::{mpsc, watch};

use crate::features::ServerFeatures;
use crate::live::Identity;
use crate::stats::ClusterStats;
use crate::streams::{Following, Found, Loading, Watched};
use crate::wire::{self, ExpiryAs};

/// How many stores to the stream may await their acknowledgement at once.
const MAX_IN_FLIGHT: usize = 256;

/// How often a node checks that the retained stream is still the one it follows.
const CHECK_STREAM: Duration = Duration::from_secs(5);

/// How long a check waits for JetStream to answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The stream of retained messages, created if it does not exist.
pub(crate) async fn stream(
    js: &Context,
    config: stream::Config,
    patience: Duration,
) -> Result<stream::Stream, crate::StartError> {
    crate::streams::get_or_create(js, config, patience).await.map_err(crate::StartError::Stream)
}

/// What the retained stream is made with.
pub(crate) fn stream_config(name: &str, replicas: usize) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: RETAINED.everything().to_vec(),
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        allow_direct: true,
        description: Some("mesgd retained messages: one per topic".to_owned()),
        ..Default::default()
    }
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

/// Follows the retained stream: applies each change to the local store, and every
/// [`CHECK_STREAM`] checks that the stream is still the one it joined ([`Watched`]).
pub(crate) struct Follower {
    js: Context,
    watched: Watched,
    features: ServerFeatures,
    broker: Arc<Broker>,
    me: Identity,
    stats: Arc<ClusterStats>,
    applied: Arc<watch::Sender<u64>>,
    /// How long a join waits for what the stream holds.
    load_timeout: Duration,
    /// One consumer, or one per subject family (see [`consumers`]).
    followings: Vec<Following>,
}

impl Follower {
    /// Joins `stream` (made with `config`): applies the last message of every subject it holds
    /// before returning, waiting at most `load_timeout` (the rest arrives later, logged).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        js: Context,
        stream: &stream::Stream,
        config: stream::Config,
        features: ServerFeatures,
        broker: Arc<Broker>,
        me: Identity,
        stats: Arc<ClusterStats>,
        applied: Arc<watch::Sender<u64>>,
        load_timeout: Duration,
    ) -> Result<Self, crate::StartError> {
        let mut follower = Follower {
            js,
            watched: Watched::new(config, stream),
            features,
            broker,
            me,
            stats,
            applied,
            load_timeout,
            followings: Vec::new(),
        };
        follower.followings = follower.join(stream).await.map_err(crate::StartError::Stream)?;
        Ok(follower)
    }

    /// New consumers on `stream`, from the last message of every subject, with what the stream
    /// holds applied (waiting at most the load timeout).
    async fn join(&mut self, stream: &stream::Stream) -> Result<Vec<Following>, String> {
        let mut loadings = consumers(stream, self.features).await?;
        let (broker, stats, applied) = (&self.broker, &self.stats, &self.applied);
        let loaded = tokio::time::timeout(self.load_timeout, async {
            for loading in &mut loadings {
                while let Some(m) = loading.next().await {
                    apply(broker, stats, applied, &m);
                }
            }
        })
        .await;
        if loaded.is_err() {
            tracing::warn!(
                timeout_ms = self.load_timeout.as_millis() as u64,
                "cluster: the retained messages were not all loaded in time; the rest arrive later"
            );
        }
        Ok(loadings.into_iter().map(|l| Following::new("retained stream", l.into_messages())).collect())
    }

    /// Joins `stream`, a new stream in place of the one followed (deleted and created again,
    /// or replaced), which holds none of the old one's messages: applies what it holds, then
    /// puts there every retained message of the local store whose topic it has no message for
    /// (the store has every node's messages as of the deletion; the first node to put a topic
    /// there wins, and a message stored since is never replaced by an older one).
    async fn rejoin(&mut self, stream: stream::Stream) {
        match Box::pin(self.join(&stream)).await {
            Ok(followings) => {
                self.followings = followings;
                self.watched.following(&stream);
                let put = self.republish().await;
                ClusterStats::add(&self.stats.retained_rejoins, 1);
                tracing::info!(
                    stream = %self.watched.name(),
                    republished = put,
                    "cluster: following the new retained stream"
                );
            }
            Err(e) => {
                // The old consumers go on failing, logged once per check, until the next one.
                tracing::warn!(error = %e, "cluster: cannot follow the new retained stream; trying again later");
            }
        }
    }

    /// Stores the local store's retained messages in the stream where their topics have none
    /// (`Nats-Expected-Last-Subject-Sequence: 0`); returns how many were stored.
    async fn republish(&mut self) -> u64 {
        let now = std::time::Instant::now();
        let mut acks = futures_util::stream::FuturesUnordered::new();
        let mut put = 0;
        // `$SYS` statistics are each node's own, never stored in the stream.
        for message in
            self.broker.retained().all(now).into_iter().filter(|m| !crate::live::node_local(&m.topic))
        {
            let Ok(subject) = RETAINED.topic(&message.topic) else { continue };
            let mut headers =
                wire::encode(&message, &self.me.node, (self.me.instance, 0), ExpiryAs::Deadline, |i| {
                    self.broker.wall_time(i)
                });
            headers.insert(async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, "0");
            match self.js.publish_with_headers(subject, headers, message.payload.clone()).await {
                Ok(ack) => acks.push(ack.into_future()),
                Err(e) => {
                    tracing::warn!(error = %e, "cluster: a retained message was not put into the new stream");
                    break;
                }
            }
            if acks.len() >= MAX_IN_FLIGHT {
                put += count_stored(acks.next().await);
            }
        }
        while let Some(ack) = acks.next().await {
            put += count_stored(Some(ack));
        }
        ClusterStats::add(&self.stats.retained_republished, put);
        put
    }

    pub(crate) async fn run(mut self) {
        let mut check = tokio::time::interval(CHECK_STREAM);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        check.tick().await;
        loop {
            tokio::select! {
                m = next_of(&mut self.followings) => apply(&self.broker, &self.stats, &self.applied, &m),
                _ = check.tick() => {
                    let lost = self.followings.iter_mut().fold(false, |lost, f| f.checked() | lost);
                    if let Found::Replaced(stream) = self.watched.check(&self.js, REQUEST_TIMEOUT, lost).await {
                        self.rejoin(*stream).await;
                    }
                }
            }
        }
    }
}

/// Whether a conditional store was stored (1) or refused because the topic has a message (0;
/// another refusal is logged).
fn count_stored(
    ack: Option<Result<jetstream::publish::PublishAck, jetstream::context::PublishError>>,
) -> u64 {
    match ack {
        Some(Ok(_)) => 1,
        Some(Err(e)) if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => 0,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "cluster: a retained message was not put into the new stream");
            0
        }
        None => 0,
    }
}

/// The next message of one of `followings` (one, or one per subject family).
async fn next_of(followings: &mut [Following]) -> jetstream::Message {
    match followings {
        [one] => one.next().await,
        [first, second] => tokio::select! {
            m = first.next() => m,
            m = second.next() => m,
        },
        _ => std::future::pending().await,
    }
}

/// Ordered consumers on `stream` from the last message of every subject. With a server that
/// offers several filter subjects per consumer (2.10), one for both subject families (plain
/// and `$` topics); else, or if the server refuses it, one per family: nats-server 2.9 takes
/// one filter subject per consumer, and "last per subject" needs one.
async fn consumers(stream: &stream::Stream, features: ServerFeatures) -> Result<Vec<Loading>, String> {
    let families = RETAINED.everything().to_vec();
    if features.multi_filter_consumers {
        match Loading::start(stream, consumer_config(families.clone())).await {
            Ok(loading) => return Ok(vec![loading]),
            Err(e) => tracing::info!(
                error = %e,
                "cluster: the retained stream refused a consumer with several filter subjects; \
                 following it with one consumer per subject family"
            ),
        }
    }
    let mut loadings = Vec::new();
    for filter in families {
        loadings.push(Loading::start(stream, consumer_config(vec![filter])).await?);
    }
    Ok(loadings)
}

/// An ordered consumer on `filters` (one, or several where the server takes them), from the
/// last message of every subject.
fn consumer_config(mut filters: Vec<String>) -> consumer::pull::OrderedConfig {
    let (filter_subject, filter_subjects) = if filters.len() == 1 {
        (filters.pop().unwrap_or_default(), Vec::new())
    } else {
        (String::new(), filters)
    };
    consumer::pull::OrderedConfig {
        filter_subject,
        filter_subjects,
        deliver_policy: consumer::DeliverPolicy::LastPerSubject,
        description: Some("mesgd node: retained messages".to_owned()),
        ..Default::default()
    }
}

/// Applies a message of the stream to the local store, and counts it for those who wait for it.
fn apply(broker: &Broker, stats: &ClusterStats, applied: &watch::Sender<u64>, m: &jetstream::Message) {
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
    applied.send_modify(|n| *n += 1);
}
