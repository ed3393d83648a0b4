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
    match js.get_or_create_stream(config).await {
        Ok(stream) => Ok(stream),
        Err(created) => js.get_stream(&name).await.map_err(|_| created.to_string()),
    }
}
