//! QoS 1/2 durability in JetStream: every QoS 1/2 message published on this node is stored in
//! one stream (`[cluster.durable] stream`, subjects `mqs.<topic>` / `mqsd.<topic>` by the
//! topic mapping) before its PUBACK / PUBREC leaves, pipelined (`store`).
//!
//! The stream is one asset whatever the number of clients or subscriptions; its retention is
//! bounded by age and bytes. `docs/cluster.md` ("QoS 1/2 durability") has the design.

mod config;
mod store;

pub use self::config::DurableConfig;
pub(crate) use self::store::{DurableStore, stream, stream_config};

impl crate::Cluster {
    /// The name of the NATS server this node's main connection is on now.
    pub fn nats_server_name(&self) -> String {
        self.client.server_info().server_name
    }

    /// How many messages the durable stream holds and its last sequence number, read from
    /// the server (for operators and tests).
    pub async fn durable_stream_state(&self, stream: &str) -> Result<(u64, u64), String> {
        let js = async_nats::jetstream::new(self.client.clone());
        let mut stream = js.get_stream(stream).await.map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        Ok((info.state.messages, info.state.last_sequence))
    }

    /// How many consumers a stream of the cluster has now (for operators and tests: the
    /// cluster's JetStream assets do not grow with its clients).
    pub async fn stream_consumer_count(&self, stream: &str) -> Result<usize, String> {
        let js = async_nats::jetstream::new(self.client.clone());
        let mut stream = js.get_stream(stream).await.map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        Ok(info.state.consumer_count)
    }

    /// Every message the durable stream holds, as (subject, payload) in stream order: one read
    /// per message, for operators and tests (it costs a pass over the stream).
    pub async fn durable_stream_messages(&self, stream: &str) -> Result<Vec<(String, bytes::Bytes)>, String> {
        let js = async_nats::jetstream::new(self.client.clone());
        let mut stream = js.get_stream(stream).await.map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        let (first, last) = (info.state.first_sequence, info.state.last_sequence);
        let mut out = Vec::new();
        for seq in first..=last {
            match stream.get_raw_message(seq).await {
                Ok(m) => out.push((m.subject.to_string(), m.payload)),
                // Deleted (aged out, pushed out by max_bytes): not there.
                Err(e) if e.kind() == async_nats::jetstream::stream::RawMessageErrorKind::NoMessageFound => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(out)
    }
}
