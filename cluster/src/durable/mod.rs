//! QoS 1/2 durability in JetStream: every QoS 1/2 message published on this node is stored in
//! one stream (`[cluster.durable] stream`, subjects `mqs.<topic>` / `mqsd.<topic>` by the
//! topic mapping) before its PUBACK / PUBREC leaves, pipelined (`store`).
//!
//! The stream is one asset whatever the number of clients or subscriptions; its retention is
//! bounded by age and bytes. `docs/cluster.md` ("QoS 1/2 durability") has the design.

mod config;
mod store;

pub use self::config::DurableConfig;
pub(crate) use self::store::{DurableStore, stream};

impl crate::Cluster {
    /// How many messages the durable stream holds and its last sequence number, read from
    /// the server (for operators and tests).
    pub async fn durable_stream_state(&self, stream: &str) -> Result<(u64, u64), String> {
        let js = async_nats::jetstream::new(self.client.clone());
        let mut stream = js.get_stream(stream).await.map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        Ok((info.state.messages, info.state.last_sequence))
    }
}
