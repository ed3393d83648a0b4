//! Admission: a client with a verified identity gets its session — taking over a connection of
//! the same key, or refused because the key is in use, then resuming or opening the session and
//! attaching to it.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedMutexGuard;

use super::{Broker, TAKEOVER_WAIT};
use crate::acl::Acl;
use crate::cluster::registry::{self, ClaimError, Handover};
use crate::log_text::Clipped;
use crate::model::{ClientInfo, Kick, SessionExpiry, SessionKey};
use crate::session::Session;
use crate::sync::lock;

/// What to do when the key is held by a live connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnConflict {
    /// Close the older connection and take the session over (MQTT).
    TakeOver,
    /// Refuse the newcomer: the key is the holder's for as long as it is connected (a relay
    /// address is first come, first served).
    Refuse,
}

/// A client asking for its session.
#[derive(Debug)]
pub struct Admission {
    /// Its session key.
    pub key: SessionKey,
    /// Whether to discard an existing session instead of resuming it.
    pub clean_start: bool,
    /// How long the session outlives the connection.
    pub expiry: SessionExpiry,
    /// The receiver ACL of the client's identity.
    pub acl: Acl,
    /// What a live holder of the key means.
    pub on_conflict: OnConflict,
    /// Who the client is, for operators.
    pub client: Option<ClientInfo>,
}

/// An admitted client.
#[derive(Debug)]
pub struct Admitted {
    /// Its session, attached to the new connection.
    pub session: Arc<Session>,
    /// Whether an existing session was resumed.
    pub present: bool,
    /// The connection's generation: every later call about the connection names it, so that a
    /// connection that was taken over can no longer act on the session.
    pub generation: u64,
}

/// Why a client was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdmitError {
    /// The key is held by a live connection and the request said [`OnConflict::Refuse`].
    #[error("the session key is in use by a live connection")]
    InUse,
    /// The cluster-wide session registry could not make this node the key's owner.
    #[error(transparent)]
    Registry(#[from] ClaimError),
    /// A new session that outlives its connection would take the broker past
    /// [`BrokerLimits::max_sessions`](super::BrokerLimits::max_sessions).
    #[error("the broker holds its maximum of sessions (limits.max_sessions)")]
    SessionsFull,
}

/// Serialises connects of one key (takeover, session open) across connections.
#[derive(Debug)]
pub struct ClientLock<'a> {
    broker: &'a Broker,
    key: SessionKey,
    mutex: Arc<tokio::sync::Mutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for ClientLock<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut locks = lock(&self.broker.connect_locks);
        // Two owners left (the map and us) means nobody else waits: forget the lock.
        if Arc::strong_count(&self.mutex) == 2 {
            locks.remove(&self.key);
        }
    }
}

impl Broker {
    /// Waits until no other connect of `key` is in progress, and holds that until dropped.
    pub async fn lock_client(&self, key: &SessionKey) -> ClientLock<'_> {
        let mutex = lock(&self.connect_locks).entry(key.clone()).or_default().clone();
        let guard = mutex.clone().lock_owned().await;
        ClientLock { broker: self, key: key.clone(), mutex, guard: Some(guard) }
    }

    /// Admits a client: with the key's connect lock held, closes (or refuses, as the request
    /// says) a live connection of the same key and waits, at most [`TAKEOVER_WAIT`], for it to
    /// let go; then resumes or opens the session and attaches the new connection with its ACL.
    ///
    /// In a cluster, an MQTT client id is first claimed cluster-wide (the previous owner node
    /// closes its connection); a failed claim refuses the client
    /// ([`AdmitError::Registry`]), and a newer claim elsewhere that came while the connection
    /// attached closes it again as taken over.
    pub async fn admit(&self, request: Admission, now: Instant) -> Result<Admitted, AdmitError> {
        let _held = self.lock_client(&request.key).await;
        // Only a session that outlives its connection can pile up (a clean one lives as long
        // as its connection, which `max_connections` bounds), so only such a new one is
        // refused: clients with clean sessions, and clients resuming theirs, still connect
        // when the cap is full of abandoned sessions. Checked before the cluster claim, which
        // must not be made for a client refused here.
        if request.expiry != SessionExpiry::OnDisconnect
            && self.session(&request.key).is_none()
            && self.session_count() >= self.limits.max_sessions
        {
            return Err(AdmitError::SessionsFull);
        }
        let cluster = self.registry.get().filter(|_| registry::tracked(&request.key));
        let mut now = now;
        let mut handover = Handover::default();
        if let Some(r) = cluster {
            handover = r.claim(&request.key, !request.clean_start).await?;
            // The claim took a round trip or more; the session opens at the end of it.
            now = tokio::time::Instant::now().into_std().max(now);
        }
        if let Some(old) = self.session(&request.key).filter(|s| s.is_online()) {
            if request.on_conflict == OnConflict::Refuse {
                return Err(AdmitError::InUse);
            }
            tracing::info!(key = %Clipped(&request.key.id), namespace = request.key.namespace.as_str(), "in use: taking the session over");
            old.kick(Kick::TakenOver);
            if tokio::time::timeout(TAKEOVER_WAIT, old.wait_detached()).await.is_err() {
                tracing::warn!(key = %Clipped(&request.key.id), "the previous connection did not close in time; proceeding");
            }
            // The wait moved time on; the session opens at the end of it.
            now = tokio::time::Instant::now().into_std().max(now);
        }
        let opened = self.open_session(&request.key, request.clean_start, request.expiry, now);
        // The session moved here from another node: it continues with its subscriptions.
        let present = opened.present || (handover.resumed && !request.clean_start);
        if !opened.present && handover.resumed && !request.clean_start {
            self.adopt_subscriptions(&opened.session, &request.acl, handover.subscriptions);
            opened.session.adopt_entries(handover.entries, handover.incoming_qos2);
        }
        let generation = self.next_generation();
        opened.session.attach_client(generation, request.acl, request.expiry, request.client.map(Arc::new));
        self.router.presence_changed(&opened.session);
        if cluster.is_some_and(|r| !r.still_owner(&request.key)) {
            opened.session.kick(Kick::TakenOver);
        }
        Ok(Admitted { session: opened.session, present, generation })
    }
}
