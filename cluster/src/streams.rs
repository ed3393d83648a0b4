//! Creating the cluster's JetStream streams at start, where several nodes may start at once.

use std::time::Duration;

use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
use async_nats::jetstream::{self, ErrorCode, stream};

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
    format!(
        "{error}: the NATS server cannot reserve the {max_bytes} bytes of stream {name}; raise \
         its jetstream max_file_store (by default 75% of the disk free at its start), free disk \
         space, or lower the budget ([cluster.durable] max_bytes, [relay] queue_global_bytes)"
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
    }
}
