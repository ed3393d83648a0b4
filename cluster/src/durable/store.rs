//! The durable stream and the pipelined store into it.
//!
//! [`DurableStore::store`] numbers each message and queues it (under one lock, so numbers and
//! queue order agree); one task publishes the queue to the stream in order and awaits the
//! acknowledgements in order, up to [`MAX_IN_FLIGHT`] at once. `done` is the highest number
//! answered (stored or failed); failed numbers are kept (the last [`MAX_FAILED`]) so that a
//! connection waiting for a range learns that one of its messages was not stored.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

use async_nats::HeaderValue;
use async_nats::jetstream::{self, stream};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesOrdered;
use mesgd_core::broker::Broker;
use mesgd_core::cluster::durable::{MessageStore, Stored};
use mesgd_core::cluster::subject::DURABLE;
use mesgd_core::model::{Message, MessageId};
use mesgd_core::sync::lock;
use tokio::sync::mpsc;

use super::DurableConfig;
use crate::live::Identity;
use crate::stats::ClusterStats;
use crate::wire::{self, ExpiryAs};

/// How many stores may await their acknowledgement at once.
const MAX_IN_FLIGHT: usize = 4096;
/// How many failed store numbers are remembered.
const MAX_FAILED: usize = 4096;

/// The stream of QoS 1/2 messages, created if it does not exist.
pub(crate) async fn stream(
    js: &jetstream::Context,
    config: &DurableConfig,
    patience: Duration,
) -> Result<stream::Stream, String> {
    crate::streams::get_or_create(js, stream_config(config), patience).await
}

/// What the stream is made with.
pub(crate) fn stream_config(config: &DurableConfig) -> stream::Config {
    stream::Config {
        name: config.stream.clone(),
        subjects: DURABLE.everything().to_vec(),
        storage: stream::StorageType::File,
        num_replicas: config.replicas,
        max_age: Duration::from_secs(config.max_age_s),
        max_bytes: config.max_bytes,
        discard: stream::DiscardPolicy::Old,
        allow_direct: true,
        description: Some("mesgd QoS 1/2 messages, stored before their acknowledgement".to_owned()),
        ..Default::default()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Every number up to this one is answered.
    done: u64,
    /// Numbers that were not stored, oldest first.
    failed: VecDeque<u64>,
    /// Connections waiting, with the highest number each waits for.
    waiters: Vec<(u64, Waker)>,
}

impl State {
    fn fail(&mut self, seq: u64) {
        if self.failed.len() == MAX_FAILED {
            self.failed.pop_front();
        }
        self.failed.push_back(seq);
        // Everyone looks again: the failure may be in their range.
        for (_, w) in self.waiters.drain(..) {
            w.wake();
        }
    }

    fn answered(&mut self, seq: u64) {
        self.done = self.done.max(seq);
        let done = self.done;
        self.waiters.retain(|(until, w)| {
            if *until <= done {
                w.wake_by_ref();
                false
            } else {
                true
            }
        });
    }
}

/// A numbered message on its way to the store task.
type Queued = (u64, Arc<Message>);

/// The broker's [`MessageStore`] on a clustered node.
#[derive(Debug)]
pub(crate) struct DurableStore {
    /// The next number, and the queue to the store task (one lock: numbers enter the queue in
    /// order).
    queue: Mutex<(u64, mpsc::Sender<Queued>)>,
    state: Arc<Mutex<State>>,
    stats: Arc<ClusterStats>,
    /// This node's instance, the first half of every stored message's id.
    instance: u64,
}

impl DurableStore {
    /// The store, and the task that publishes its queue to the stream.
    pub(crate) fn start(
        js: jetstream::Context,
        broker: Arc<Broker>,
        me: Identity,
        capacity: usize,
        stats: Arc<ClusterStats>,
    ) -> (DurableStore, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(capacity);
        let state = Arc::new(Mutex::new(State::default()));
        let instance = me.instance;
        let task = tokio::spawn(store_loop(js, broker, me, rx, state.clone(), stats.clone()));
        (DurableStore { queue: Mutex::new((1, tx)), state, stats, instance }, task)
    }
}

impl MessageStore for DurableStore {
    fn store(&self, mut message: Message) -> (Arc<Message>, u64) {
        let mut queue = lock(&self.queue);
        let seq = queue.0;
        queue.0 += 1;
        message.id = Some(MessageId { instance: self.instance, seq });
        let message = Arc::new(message);
        if queue.1.try_send((seq, message.clone())).is_err() {
            drop(queue);
            ClusterStats::add(&self.stats.durable_queue_full, 1);
            lock(&self.state).fail(seq);
        }
        (message, seq)
    }

    fn poll_stored(&self, from: u64, until: u64, waker: &Waker) -> Stored {
        let mut state = lock(&self.state);
        if state.failed.iter().any(|f| (from..=until).contains(f)) {
            return Stored::Failed;
        }
        if state.done >= until {
            return Stored::Yes;
        }
        match state.waiters.iter_mut().find(|(_, w)| w.will_wake(waker)) {
            Some(entry) => entry.0 = entry.0.max(until),
            None => state.waiters.push((until, waker.clone())),
        }
        Stored::Pending
    }
}

type Ack = BoxFuture<'static, (u64, bool)>;

async fn store_loop(
    js: jetstream::Context,
    broker: Arc<Broker>,
    me: Identity,
    mut queue: mpsc::Receiver<Queued>,
    state: Arc<Mutex<State>>,
    stats: Arc<ClusterStats>,
) {
    let mut acks: FuturesOrdered<Ack> = FuturesOrdered::new();
    let mut open = true;
    while open || !acks.is_empty() {
        tokio::select! {
            next = queue.recv(), if open && acks.len() < MAX_IN_FLIGHT => {
                let Some((seq, message)) = next else { open = false; continue };
                acks.push_back(send(&js, &broker, &me, seq, &message, &stats).await);
                stats.durable_in_flight_peak.fetch_max(acks.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            Some((seq, stored)) = acks.next(), if !acks.is_empty() => {
                let mut state = lock(&state);
                if stored {
                    ClusterStats::add(&stats.durable_stored, 1);
                } else {
                    ClusterStats::add(&stats.durable_store_errors, 1);
                    state.fail(seq);
                }
                state.answered(seq);
            }
        }
    }
}

/// Publishes one message; the future answers whether the stream acknowledged it.
async fn send(
    js: &jetstream::Context,
    broker: &Broker,
    me: &Identity,
    seq: u64,
    message: &Message,
    stats: &ClusterStats,
) -> Ack {
    let Ok(subject) = DURABLE.topic(&message.topic) else {
        // Too long for a subject: it cannot be stored, so it is not acknowledged.
        ClusterStats::add(&stats.unmappable_topics, 1);
        return Box::pin(async move { (seq, false) });
    };
    let mut headers =
        wire::encode(message, &me.node, (me.instance, seq), ExpiryAs::Deadline, |i| broker.wall_time(i));
    // The store's own dedupe: a publish of this message again (same node run, same number)
    // within the stream's duplicate window is stored once. The same id is the message's
    // `Mesgd-Msg-Id` (`wire`), which every copy between nodes carries.
    headers.insert(
        "Nats-Msg-Id",
        HeaderValue::from(MessageId { instance: me.instance, seq }.to_string().as_str()),
    );
    match js.publish_with_headers(subject, headers, message.payload.clone()).await {
        Ok(ack) => Box::pin(async move {
            match ack.await {
                Ok(_) => (seq, true),
                Err(e) => {
                    tracing::warn!(error = %e, "cluster: a QoS 1/2 message was not stored");
                    (seq, false)
                }
            }
        }),
        Err(e) => {
            tracing::warn!(error = %e, "cluster: a QoS 1/2 message could not be sent to the stream");
            Box::pin(async move { (seq, false) })
        }
    }
}
