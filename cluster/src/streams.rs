//! Creating the cluster's JetStream streams at start, where several nodes may start at once,
//! and noticing that a stream a node follows was deleted or replaced under it ([`Watched`]).

use std::time::Duration;

use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
use async_nats::jetstream::{self, ErrorCode, consumer, stream};
use futures_util::StreamExt;

use crate::backoff::Backoff;

/// The stream `config` names, created if it does not exist. Nodes that start at once may each
/// find it missing and each create it: the server answers the later creation that its subjects
/// overlap an existing stream, and the stream the other node created is read instead. The
/// error is the creation's when that stream cannot be read either.
///
/// A NATS cluster that has just started may not answer yet: its servers are still electing the
/// JetStream meta leader, or the new stream's replicas their leader, and the request times out
/// or is refused as temporarily unavailable. Such a refusal is tried again, with a growing
/// pause, for up to `patience` (`jetstream_ready_timeout_ms`) in all, each one logged, so that
/// a node started together with its NATS servers waits for them instead of exiting.
pub(crate) async fn get_or_create(
    js: &jetstream::Context,
    config: stream::Config,
    patience: Duration,
) -> Result<stream::Stream, String> {
    let name = config.name.clone();
    let max_bytes = config.max_bytes;
    let mut backoff = Backoff::new(patience, FIRST_PAUSE, MAX_PAUSE);
    loop {
        let created = match js.get_or_create_stream(config.clone()).await {
            Ok(stream) => return led(stream, &name, backoff).await,
            Err(e) => e,
        };
        let Some(pause) = backoff.next_pause().filter(|_| not_ready(&created)) else {
            let found =
                js.get_stream(&name).await.map_err(|_| explain(&name, max_bytes, &created.to_string()))?;
            return led(found, &name, backoff).await;
        };
        tracing::warn!(
            stream = %name,
            error = %created,
            retry_in_ms = pause.as_millis() as u64,
            "cluster: JetStream is not ready (a NATS cluster still electing its leaders?); \
             trying again until jetstream_ready_timeout_ms"
        );
        tokio::time::sleep(pause).await;
    }
}

/// `stream` once it can take writes: a stream with replicas on a NATS cluster is answered for
/// (created, or found because another node created it) before its replicas have elected a
/// leader, and a write meanwhile fails with "no stream found for given subject" (a node's
/// first write, its lease, failed so when two nodes started with three NATS servers at once).
/// Its information is read again, with the same pauses, until it names a leader.
async fn led(mut stream: stream::Stream, name: &str, mut backoff: Backoff) -> Result<stream::Stream, String> {
    loop {
        let leaderless = stream
            .cached_info()
            .cluster
            .as_ref()
            .is_some_and(|c| c.name.is_some() && c.leader.as_deref().is_none_or(str::is_empty));
        if !leaderless {
            return Ok(stream);
        }
        let Some(pause) = backoff.next_pause() else {
            return Err(format!(
                "stream {name} has no leader after jetstream_ready_timeout_ms: its NATS servers \
                 cannot elect one (fewer of them up than its replicas need?)"
            ));
        };
        tracing::info!(stream = %name, retry_in_ms = pause.as_millis() as u64, "cluster: stream has no leader yet; waiting");
        tokio::time::sleep(pause).await;
        // Not answered (no leader yet): asked again after the next pause.
        let _ = stream.info().await;
    }
}

/// A stream a node follows, and what it needs to notice that the stream was deleted under it
/// or replaced by a new one of the same name (`nats stream rm`, or a NATS server that came back
/// without its JetStream storage): a new stream holds none of the records the old one did, so
/// what the node knew of the old one no longer holds.
pub(crate) struct Watched {
    /// What to create again if the stream was deleted.
    config: stream::Config,
    /// When the stream followed was created: one of the same name created at another time is
    /// a new one.
    created: time::OffsetDateTime,
}

/// What became of a watched stream, as a check found it.
pub(crate) enum Found {
    /// The same stream.
    Same,
    /// A stream of the same name made since: to be joined again, as at start.
    Replaced(Box<stream::Stream>),
    /// Unknown for now (NATS does not answer): checked again later.
    Unknown,
}

impl Watched {
    /// `stream`, made (or found) with `config`.
    pub(crate) fn new(config: stream::Config, stream: &stream::Stream) -> Self {
        Watched { config, created: stream.cached_info().created }
    }

    /// Whether the stream is still the one followed. A deleted stream is created again (by the
    /// first node to notice; the others find it), with `patience` for an answer, so that a
    /// caller's loop is not held up long while NATS is down. With `lost` (the caller's consumer
    /// ended), the same stream is to be joined again too.
    pub(crate) async fn check(&self, js: &jetstream::Context, patience: Duration, lost: bool) -> Found {
        let name = &self.config.name;
        let found = match js.get_stream(name).await {
            Ok(found) => found,
            Err(e) if is_stream_not_found(&e) => match get_or_create(js, self.config.clone(), patience).await
            {
                Ok(created) => {
                    tracing::warn!(stream = %name, "cluster: a stream this node follows was deleted; created it again");
                    created
                }
                Err(e) => {
                    tracing::warn!(stream = %name, error = %e, "cluster: a stream this node follows was deleted and cannot be created again; trying again later");
                    return Found::Unknown;
                }
            },
            Err(_) => return Found::Unknown,
        };
        if found.cached_info().created == self.created && !lost {
            Found::Same
        } else {
            Found::Replaced(Box::new(found))
        }
    }

    /// The stream is now `stream`, joined in place of the old one.
    pub(crate) fn following(&mut self, stream: &stream::Stream) {
        self.created = stream.cached_info().created;
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }
}

/// A follower's ordered consumer on joining a stream: the messages the stream held when it was
/// created, which a join applies before it goes on ([`Loading::next`]), then the consumer
/// itself, whose messages are what follows ([`Loading::into_messages`]).
pub(crate) struct Loading {
    messages: consumer::pull::Ordered,
    /// How many of the messages held at creation are still to come.
    pending: u64,
}

impl Loading {
    pub(crate) async fn start(
        stream: &stream::Stream,
        config: consumer::pull::OrderedConfig,
    ) -> Result<Self, String> {
        let mut consumer = stream.create_consumer(config).await.map_err(|e| e.to_string())?;
        let pending = consumer.info().await.map_err(|e| e.to_string())?.num_pending;
        let messages = consumer.messages().await.map_err(|e| e.to_string())?;
        Ok(Loading { messages, pending })
    }

    /// The next message the stream held at creation; `None` once all came, or when the
    /// consumer fails (what is left then comes with what follows).
    pub(crate) async fn next(&mut self) -> Option<jetstream::Message> {
        if self.pending == 0 {
            return None;
        }
        let Some(Ok(m)) = self.messages.next().await else {
            self.pending = 0;
            return None;
        };
        self.pending = m.info().map(|i| i.pending).unwrap_or(0);
        Some(m)
    }

    pub(crate) fn into_messages(self) -> consumer::pull::Ordered {
        self.messages
    }
}

/// The messages of a follower's ordered consumer, while it has one.
pub(crate) struct Following {
    /// What follows, for the log lines.
    what: &'static str,
    /// `None` while no consumer follows the stream (it ended, or a join failed): the caller's
    /// next check joins again.
    messages: Option<consumer::pull::Ordered>,
    /// The consumer's failures since the last check.
    errors: u64,
}

impl Following {
    pub(crate) fn new(what: &'static str, messages: consumer::pull::Ordered) -> Self {
        Following { what, messages: Some(messages), errors: 0 }
    }

    /// The next message; never returns while there is no consumer. A failure (a deleted stream
    /// makes the consumer fail until the next check replaces it) is logged once per check, not
    /// once per attempt.
    pub(crate) async fn next(&mut self) -> jetstream::Message {
        loop {
            let Some(messages) = self.messages.as_mut() else { return std::future::pending().await };
            match messages.next().await {
                Some(Ok(m)) => return m,
                Some(Err(e)) => {
                    if self.errors == 0 {
                        tracing::warn!(error = %e, "cluster: {} consumer", self.what);
                    }
                    self.errors += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                None => self.messages = None,
            }
        }
    }

    /// A check: sums up the failures since the last one; whether the consumer is gone.
    pub(crate) fn checked(&mut self) -> bool {
        if self.errors > 1 {
            tracing::warn!(more = self.errors - 1, "cluster: {} consumer failed again", self.what);
        }
        self.errors = 0;
        self.messages.is_none()
    }

    /// Follows `messages` from now on (`None`: a join that failed, tried again at the next check).
    pub(crate) fn follow(&mut self, messages: Option<consumer::pull::Ordered>) {
        self.messages = messages;
    }
}

/// Whether `error` says that the stream does not exist (rather than that NATS did not answer).
fn is_stream_not_found(error: &jetstream::context::GetStreamError) -> bool {
    matches!(
        error.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND
    )
}

/// The first pause after a refusal, and the longest.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(100);
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Whether JetStream refused for a reason that passes once a starting cluster has its leaders:
/// no answer in time, "temporarily unavailable" (10008), or no peers known yet for the replicas
/// (10005; on a cluster too small for the replica count this stays, and the creation fails once
/// the patience is spent). No responder at all is not one of them: a server answers JetStream
/// requests from its start whenever JetStream is on, so it is off, and waiting cannot help.
fn not_ready(error: &CreateStreamError) -> bool {
    match error.kind() {
        CreateStreamErrorKind::TimedOut => true,
        CreateStreamErrorKind::JetStream(e) => {
            matches!(e.error_code(), ErrorCode::CLUSTER_NOT_AVAILABLE | ErrorCode::CLUSTER_NO_PEERS)
        }
        _ => false,
    }
}

/// JetStream's error, with what an operator can do when it is the common one: the server
/// reserves each stream's `max_bytes` up front against its `max_file_store`, which defaults to
/// three quarters of the disk space free when it started.
fn explain(name: &str, max_bytes: i64, error: &str) -> String {
    if !error.contains("insufficient storage") {
        return error.to_owned();
    }
    let what = if max_bytes > 0 {
        format!("cannot reserve the {max_bytes} bytes of stream {name}")
    } else {
        // A stream without a budget of its own reserves nothing: the others' budgets have
        // taken the whole store (a byte count of 0 here read as if nothing were asked).
        format!("has no room left for stream {name}: the budgets of the other streams reserve all of it")
    };
    format!(
        "{error}: the NATS server {what}; raise its jetstream max_file_store (by default 75% of \
         the disk free at its start), free disk space, or lower the budget ([cluster.durable] \
         max_bytes, [relay] queue_global_bytes)"
    )
}

#[cfg(test)]
mod tests {
    use super::explain;

    #[test]
    fn a_storage_refusal_says_what_to_change() {
        let e =
            explain("mesgd_durable", 1 << 30, "jetstream error: insufficient storage resources available");
        assert!(
            e.contains("mesgd_durable") && e.contains("1073741824") && e.contains("max_file_store"),
            "{e}"
        );
        assert_eq!(explain("s", 1, "timed out"), "timed out");
        // A stream without a budget: the store is full of the others' reservations.
        let e = explain("KV_mesgd_wills", 0, "jetstream error: insufficient storage resources available");
        assert!(e.contains("no room left for stream KV_mesgd_wills") && !e.contains("0 bytes"), "{e}");
    }
}
