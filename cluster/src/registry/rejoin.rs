//! A registry bucket deleted or replaced under the running node (`nats stream rm`, a NATS
//! server back without its JetStream storage). Its records are gone, and the revisions of a new
//! bucket start again from 1, so what this node knew of the old one no longer holds: every
//! claim of an id it held would compare against a revision from another bucket.
//!
//! [`Registry::rejoin`] forgets every claim and claims each id again in the new bucket, as a
//! first claim (`create`): the node's sessions are then in the registry again, so that a
//! client connecting on another node takes its connection here over rather than living twice.
//! An id another node has claimed in the new bucket meanwhile (a connection made there after
//! the loss, which asked nobody) is that node's: the connection and session here end.

use std::sync::Arc;

use async_nats::jetstream::kv::{CreateErrorKind, Operation};
use mesgd_core::broker::Broker;
use mesgd_core::cluster::client_key;
use mesgd_core::cluster::registry::Record;
use mesgd_core::model::{Kick, SessionKey};

use futures_util::StreamExt;

use super::Registry;
use crate::stats::ClusterStats;

/// How many ids are claimed again at once (each is two JetStream round trips at most).
const AT_ONCE: usize = 64;

/// What claiming an id again found.
enum Reclaim {
    /// This node holds it in the new bucket.
    Held,
    /// A newer claim elsewhere: its takeover request, come meanwhile, ends the session here.
    Superseded,
    /// Another node claimed it in the new bucket without asking this one.
    Elsewhere,
}

impl Registry {
    /// Claims every id this node holds again, in the bucket that replaced the old one; whether
    /// every claim was settled (`false`: NATS failed some, and the caller tries again later;
    /// a claim already made is found again then).
    pub(crate) async fn rejoin(&self) -> bool {
        let me = &self.inner;
        let Some(broker) = me.broker.upgrade() else { return true };
        let ids = me.holdings.take_all();
        let mut results = futures_util::stream::iter(ids)
            .map(|id| {
                let broker = broker.clone();
                async move {
                    let key = SessionKey::mqtt(&*id);
                    let found = {
                        let _held = broker.lock_client(&key).await;
                        // Ended meanwhile: nothing to claim.
                        broker.session(&key)?;
                        self.reclaim(&id).await
                    };
                    if matches!(found, Ok(Reclaim::Elsewhere)) {
                        self.yield_to_newer(&key, &broker).await;
                    }
                    if let Err(e) = &found {
                        tracing::warn!(client_id = &*id, error = %e, "cluster: cannot claim the client id again in the new session registry");
                    }
                    Some(found)
                }
            })
            .buffer_unordered(AT_ONCE);
        let (mut held, mut lost, mut failed) = (0u64, 0u64, 0u64);
        while let Some(found) = results.next().await {
            match found {
                Some(Ok(Reclaim::Held)) => held += 1,
                Some(Ok(Reclaim::Superseded | Reclaim::Elsewhere)) => lost += 1,
                Some(Err(_)) => failed += 1,
                None => {}
            }
        }
        ClusterStats::add(&me.stats.registry_reclaimed, held);
        tracing::info!(
            reclaimed = held,
            claimed_elsewhere = lost,
            failed,
            "cluster: the session registry bucket was replaced; this node's client ids claimed again"
        );
        failed == 0
    }

    /// With the client lock held: this node's record for `id` in the new bucket, unless one is
    /// there (this node's, from an earlier attempt or a reconnection since: kept; another
    /// node's: [`Reclaim::Elsewhere`]).
    async fn reclaim(&self, id: &Arc<str>) -> Result<Reclaim, String> {
        let me = &self.inner;
        let kv_key = client_key::encode(id).map_err(|_| "client id too long for a key".to_owned())?;
        me.holdings.begin(id);
        let created = tokio::time::timeout(me.timeout, me.kv.create(&kv_key, self.record()))
            .await
            .map_err(|_| "timed out".to_owned())?;
        let revision = match created {
            Ok(revision) => revision,
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
                let entry = tokio::time::timeout(me.timeout, me.kv.entry(&kv_key))
                    .await
                    .map_err(|_| "timed out".to_owned())?
                    .map_err(|e| e.to_string())?;
                match entry {
                    Some(e)
                        if e.operation == Operation::Put
                            && Record::decode(&e.value).is_ok_and(|r| self.is_mine(&r)) =>
                    {
                        e.revision
                    }
                    _ => {
                        me.holdings.failed(id);
                        return Ok(Reclaim::Elsewhere);
                    }
                }
            }
            Err(e) => return Err(e.to_string()),
        };
        Ok(if me.holdings.claimed(id, revision) { Reclaim::Held } else { Reclaim::Superseded })
    }

    /// Another node holds `key`'s id in the new bucket: the connection here is closed as taken
    /// over, and the session ends here once it let go (unless the client came back here
    /// meanwhile, and claimed the id again).
    async fn yield_to_newer(&self, key: &SessionKey, broker: &Broker) {
        let me = &self.inner;
        ClusterStats::add(&me.stats.registry_taken_over, 1);
        if let Some(session) = broker.session(key).filter(|s| s.is_online()) {
            session.kick(Kick::TakenOver);
            let _ = tokio::time::timeout(me.timeout, session.wait_detached()).await;
        }
        let _held = broker.lock_client(key).await;
        if let Some(session) = broker.session(key)
            && me.holdings.is_unknown(&key.id)
            && !session.is_online()
        {
            broker.end_session(&session);
        }
    }
}
