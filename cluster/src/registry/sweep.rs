//! Releasing the registry records of a dead node: the node that takes over a dead node's lease
//! (and sends its clients' wills) deletes the records that still name that node's instance,
//! and a node that starts again under its name those of its previous instances, except those
//! of a session that can still be resumed, so that client ids that never come back leave
//! nothing behind.
//!
//! A record of a persistent session whose copy has not expired stays: the next claim of its
//! client id finds the dead owner through it and resumes the session from the copy. Each record
//! is deleted at the revision read, so a claim that came meanwhile keeps its own. The records
//! are read through one ephemeral consumer (the last message of each key, pushed to an inbox
//! subscribed before it exists): the cost is one pass over the bucket per dead node, bounded in
//! time, run in its own task.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::kv;
use futures_util::StreamExt;
use mesgd_core::cluster::client_key;
use mesgd_core::cluster::registry::Record;

use crate::sessions::store::SessionStore;
use crate::stats::ClusterStats;

/// How long the pass over the bucket may take in all.
const SWEEP_TIME: Duration = Duration::from_secs(60);
/// How long it waits for the next record.
const NEXT_WAIT: Duration = Duration::from_secs(5);

/// Deletes the records for which `dead` holds (a dead node's instance) whose client id has no
/// resumable session in `sessions` and is not one for which `held` holds (a session this node
/// has, restored from its disk); returns how many it deleted.
pub(crate) async fn release_dead(
    registry: &kv::Store,
    client: &async_nats::Client,
    sessions: &SessionStore,
    dead: impl Fn(&Record) -> bool,
    held: impl Fn(&str) -> bool,
    stats: &ClusterStats,
) -> Result<u64, String> {
    let pass = async {
        let candidates = records_of(registry, client, dead).await?;
        let mut released = 0;
        for (key, revision) in candidates {
            if client_key::decode(&key).is_ok_and(|id| held(&id)) || sessions.resumable(&key).await {
                continue;
            }
            if registry.delete_expect_revision(&key, Some(revision)).await.is_ok() {
                released += 1;
                ClusterStats::add(&stats.registry_swept, 1);
            }
        }
        Ok(released)
    };
    tokio::time::timeout(SWEEP_TIME, pass).await.map_err(|_| format!("took longer than {SWEEP_TIME:?}"))?
}

/// The keys and revisions of the records for which `dead` holds.
async fn records_of(
    registry: &kv::Store,
    client: &async_nats::Client,
    dead: impl Fn(&Record) -> bool,
) -> Result<Vec<(String, u64)>, String> {
    let context = async_nats::jetstream::new(client.clone());
    let inbox = client.new_inbox();
    let mut delivered = client.subscribe(inbox.clone()).await.map_err(|e| e.to_string())?;
    let config = push::Config {
        deliver_subject: inbox,
        description: Some("mesgd registry records of a dead node".into()),
        filter_subject: format!("{}>", registry.prefix),
        ack_policy: AckPolicy::None,
        replay_policy: ReplayPolicy::Instant,
        deliver_policy: DeliverPolicy::LastPerSubject,
        // Removed by the server if this node dies before deleting it.
        inactive_threshold: Duration::from_secs(30),
        ..Default::default()
    };
    let consumer = registry.stream.create_consumer(config).await.map_err(|e| e.to_string())?;
    let info = consumer.cached_info().clone();
    let mut found = Vec::new();
    let mut read = async || -> Result<(), String> {
        for _ in 0..info.num_pending {
            let message = tokio::time::timeout(NEXT_WAIT, delivered.next())
                .await
                .map_err(|_| "the consumer stopped delivering".to_owned())?
                .ok_or_else(|| "the consumer ended".to_owned())?;
            let message = async_nats::jetstream::Message { message, context: context.clone() };
            let revision = message.info().map_err(|e| e.to_string())?.stream_sequence;
            // Delete and purge markers carry a KV-Operation header; a value has none.
            let marker = message.headers.as_ref().and_then(|h| h.get("KV-Operation")).is_some();
            let Some(key) = message.subject.strip_prefix(registry.prefix.as_str()) else { continue };
            if marker {
                continue;
            }
            if Record::decode(&message.payload).is_ok_and(|r| dead(&r)) {
                found.push((key.to_owned(), revision));
            }
        }
        Ok(())
    };
    let outcome = read().await;
    let _ = delivered.unsubscribe().await;
    let _ = registry.stream.delete_consumer(&info.name).await;
    outcome.map(|()| found)
}
