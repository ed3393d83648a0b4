//! Listing the entries of a KV bucket that hold a value, without the KV key listing.
//!
//! async-nats' `Store::keys` reads the bucket through an ordered consumer that, after many
//! deletes, sometimes never ends (about one listing in twenty of tests/cluster_registry.rs's
//! 1,000 rounds). The subjects of the bucket's stream, from its info (paged requests), always
//! end; a subject whose last message is a delete or purge marker is listed there too, so each
//! key is read and kept only when it holds a value. Bounded in time as a whole.

use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Operation, Store};
use futures_util::StreamExt;

/// The longest a listing may take, however large the bucket.
const LISTING: Duration = Duration::from_secs(10);

/// The entries of `kv` that hold a value now (their latest revision), in the stream's subject
/// order.
pub(crate) async fn live_entries(kv: &Store) -> Result<Vec<Entry>, String> {
    live_entries_matching(kv, ">").await
}

/// The entries of `kv` whose keys match `keys` (a subject filter over the keys, e.g.
/// `node.>`) that hold a value now.
pub(crate) async fn live_entries_matching(kv: &Store, keys: &str) -> Result<Vec<Entry>, String> {
    let listing = async {
        let prefix = kv.prefix.as_str();
        let mut subjects =
            kv.stream.info_with_subjects(format!("{prefix}{keys}")).await.map_err(|e| e.to_string())?;
        let mut entries = Vec::new();
        while let Some(subject) = subjects.next().await {
            let (subject, _) = subject.map_err(|e| e.to_string())?;
            let key = subject.strip_prefix(prefix).unwrap_or(&subject);
            let entry = kv.entry(key).await.map_err(|e| e.to_string())?;
            if let Some(entry) = entry.filter(|entry| entry.operation == Operation::Put) {
                entries.push(entry);
            }
        }
        Ok::<_, String>(entries)
    };
    tokio::time::timeout(LISTING, listing).await.map_err(|_| {
        format!("listing the keys of bucket {} took longer than {} s", kv.name, LISTING.as_secs())
    })?
}
