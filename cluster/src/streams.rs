//! Creating the cluster's JetStream streams at start, where several nodes may start at once.

use async_nats::jetstream::{self, stream};

/// The stream `config` names, created if it does not exist. Nodes that start at once may each
/// find it missing and each create it: the server answers the later creation that its subjects
/// overlap an existing stream, and the stream the other node created is read instead. The
/// error is the creation's when that stream cannot be read either.
pub(crate) async fn get_or_create(
    js: &jetstream::Context,
    config: stream::Config,
) -> Result<stream::Stream, String> {
    let name = config.name.clone();
    let max_bytes = config.max_bytes;
    match js.get_or_create_stream(config).await {
        Ok(stream) => Ok(stream),
        Err(created) => {
            js.get_stream(&name).await.map_err(|_| explain(&name, max_bytes, &created.to_string()))
        }
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
