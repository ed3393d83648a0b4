//! Login sessions on every node: the HS256 key that signs them and the list of sessions ended
//! by logout, in one JetStream stream (`mesgd.logins.>`, one message per subject).
//!
//! A login session (`mesgd_providers::sessions`) is signed with a key each broker makes on
//! first use and keeps in its builtin store, and a logout is remembered in that store. Behind a
//! load balancer a session issued by one node must verify on every other, and a logout on one
//! must end the session on all of them, so:
//!
//! - **the key**: the subject `mesgd.logins.key` holds the cluster's key (hex). A node that
//!   joins reads it and adopts it (stored in its own store, so a restart without NATS keeps
//!   it); if there is none, it stores its own with `Nats-Expected-Last-Subject-Sequence: 0`, a
//!   compare-and-swap, so two nodes starting at once agree on one key. Sessions a node signed
//!   with its own key before it adopted the cluster's no longer verify.
//! - **logouts**: `mesgd.logins.revoked.<jti>` holds the expiry (unix seconds) of each ended
//!   session. One ordered consumer per node (not per session or client) follows them and
//!   applies each to the node's list; the node's own logouts are published from its list
//!   (told at once by [`Sessions::on_revoke`], and compared again every few seconds, which
//!   retries what failed). Once expired, an entry can never matter again: each node purges the
//!   expired ones it knows of, a bounded number per pass. The stream holds at most
//!   [`MAX_REVOKED`] of them (plus the key) and refuses more (`discard new`), never dropping
//!   the key or an unexpired logout.
//! - **the stream deleted or lost**: checked at every comparison ([`crate::streams::Watched`]);
//!   a missing stream is created again and a new one joined as at start (the key agreed on
//!   again, every unexpired logout this node knows published again).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::HeaderMap;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, Context, consumer, stream};
use mesgd_providers::sessions::{self, MAX_REVOKED, Sessions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::StartError;
use crate::backoff::Backoff;
use crate::stats::ClusterStats;
use crate::streams::{FIRST_PAUSE, Following, Found, Loading, MAX_PAUSE, Watched};

/// The subjects' prefix.
const PREFIX: &str = "mesgd.logins";
/// The subject of the cluster's key.
const KEY_SUBJECT: &str = "mesgd.logins.key";
/// The prefix of an ended session's subject: `mesgd.logins.revoked.<jti>`.
const REVOKED_PREFIX: &str = "mesgd.logins.revoked.";

/// How often this node's list is compared with the stream regardless of logouts.
const RECONCILE: Duration = Duration::from_secs(5);
/// How often expired entries are purged, and how many at most each time.
const PRUNE: Duration = Duration::from_secs(60);
const PRUNE_BATCH: usize = 1_000;
/// How long one publish or purge may wait for the stream's answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The configuration of the stream of logins named `name`.
pub(crate) fn stream_config(name: &str, replicas: usize) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: vec![format!("{PREFIX}.>")],
        max_messages_per_subject: 1,
        // Every unexpired logout, the key, and the token key store (`token_keys`).
        max_messages: MAX_REVOKED as i64 + 2,
        discard: stream::DiscardPolicy::New,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        description: Some(
            "mesgd login sessions: the signing key and the ended sessions; the token keys".to_owned(),
        ),
        ..Default::default()
    }
}

/// The stream of logins, created if it does not exist.
pub(crate) async fn stream(
    js: &Context,
    config: stream::Config,
    patience: Duration,
) -> Result<stream::Stream, StartError> {
    crate::streams::get_or_create(js, config, patience).await.map_err(StartError::Logins)
}

/// Makes this node use the cluster's key (asking JetStream again for up to `patience` while it
/// does not answer), applies the ended sessions the stream holds (waiting at most
/// `load_timeout` for them), publishes those only this node knows, and then keeps both
/// in step until the node stops.
pub(crate) async fn start(
    js: Context,
    stream: stream::Stream,
    config: stream::Config,
    sessions: Arc<Sessions>,
    stats: Arc<ClusterStats>,
    load_timeout: Duration,
    patience: Duration,
) -> Result<JoinHandle<()>, StartError> {
    let changed = Arc::new(Notify::new());
    let told = changed.clone();
    sessions.on_revoke(Box::new(move |_, _| told.notify_one()));
    let watched = Watched::new(config, &stream);
    let mut logins = Logins { js, stream, sessions, stats, known: HashMap::new(), watched, load_timeout };
    let messages = Box::pin(logins.join(patience)).await?;
    Ok(tokio::spawn(logins.run(messages, changed)))
}

/// Reads the cluster's key and adopts it, or stores this node's own when there is none.
///
/// JetStream may not answer in time while the NATS cluster is starting or loaded (the stream
/// was just created, or just found without a leader's answer yet): such a read or store is tried
/// again, with growing pauses, for up to `patience` (`jetstream_ready_timeout_ms`), as the
/// creation of the stream is, so that a node started with its NATS servers waits for them
/// instead of exiting.
async fn agree_on_key(
    js: &Context,
    stream: &stream::Stream,
    sessions: &Arc<Sessions>,
    stats: &ClusterStats,
    patience: Duration,
) -> Result<(), StartError> {
    let error = |why: String| StartError::Logins(why);
    let mut backoff = Backoff::new(patience, FIRST_PAUSE, MAX_PAUSE);
    // A node that loses the race to store its key reads the winner's; once, as the key is
    // never replaced.
    let mut lost_race = false;
    loop {
        let unanswered = match stream.get_last_raw_message_by_subject(KEY_SUBJECT).await {
            Ok(message) => {
                let key = std::str::from_utf8(&message.payload)
                    .ok()
                    .and_then(sessions::decode_hex)
                    .ok_or_else(|| {
                        error(format!(
                            "the login key on {KEY_SUBJECT} is not 64 hexadecimal digits; purge that subject \
                         so that a node stores its key again (every login session then ends)"
                        ))
                    })?;
                if key != sessions.shared_key() {
                    let sessions = sessions.clone();
                    tokio::task::spawn_blocking(move || sessions.adopt_key(key))
                        .await
                        .map_err(|e| error(e.to_string()))?
                        .map_err(|e| error(format!("cannot store the cluster's login key: {e}")))?;
                    ClusterStats::add(&stats.logins_key_adopted, 1);
                    tracing::info!("cluster: login sessions are signed with the cluster's key from now on");
                }
                return Ok(());
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Expected-Last-Subject-Sequence", "0");
                let hex = sessions::encode_hex(&sessions.shared_key());
                let stored = async {
                    let ack = js
                        .publish_with_headers(KEY_SUBJECT, headers, hex.into_bytes().into())
                        .await
                        .map_err(|e| e.to_string())?;
                    ack.await.map_err(|e| e.to_string())
                };
                match tokio::time::timeout(REQUEST_TIMEOUT, stored).await {
                    Ok(Ok(_)) => return Ok(()),
                    // Another node stored its key first (or this node did, in an attempt whose
                    // answer timed out): read it.
                    Ok(Err(e)) if e.contains("wrong last sequence") => {
                        if std::mem::replace(&mut lost_race, true) {
                            return Err(error(
                                "the login key changed while this node was reading it".to_owned(),
                            ));
                        }
                        continue;
                    }
                    Ok(Err(e)) if e.contains("timed out") => format!("storing the login key timed out: {e}"),
                    Ok(Err(e)) => return Err(error(format!("cannot store the login key: {e}"))),
                    Err(_) => "storing the login key timed out".to_owned(),
                }
            }
            Err(e) if not_answered(&e) => format!("cannot read the login key: {e}"),
            Err(e) => return Err(error(format!("cannot read the login key: {e}"))),
        };
        let Some(pause) = backoff.next_pause() else {
            return Err(error(format!("{unanswered} (for jetstream_ready_timeout_ms)")));
        };
        tracing::warn!(
            error = %unanswered,
            retry_in_ms = pause.as_millis() as u64,
            "cluster: JetStream did not answer for the login key; trying again until jetstream_ready_timeout_ms"
        );
        tokio::time::sleep(pause).await;
    }
}

/// Whether a read of the key failed for want of an answer in time (JetStream starting or
/// loaded), which passes, rather than for an answer that will not change.
fn not_answered(e: &stream::LastRawMessageError) -> bool {
    use async_nats::jetstream::context::{RequestError, RequestErrorKind};
    match e.kind() {
        LastRawMessageErrorKind::Other => std::error::Error::source(e)
            .and_then(|source| source.downcast_ref::<RequestError>())
            .is_some_and(|request| request.kind() == RequestErrorKind::TimedOut),
        LastRawMessageErrorKind::JetStream(e) => {
            e.error_code() == jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE
        }
        _ => false,
    }
}

/// The jti of an ended session's subject, if it is one a session could carry.
fn jti_of(subject: &str) -> Option<&str> {
    subject.strip_prefix(REVOKED_PREFIX).filter(|jti| is_jti(jti))
}

/// Whether `jti` is one a session could carry (base64url, at most 64 characters): a single
/// subject token.
fn is_jti(jti: &str) -> bool {
    !jti.is_empty() && jti.len() <= 64 && jti.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
}

struct Logins {
    js: Context,
    stream: stream::Stream,
    sessions: Arc<Sessions>,
    stats: Arc<ClusterStats>,
    /// The ended sessions the stream holds, as far as this node knows: jti → exp.
    known: HashMap<String, u64>,
    /// The stream followed, checked at every comparison: a deleted one is created again and a
    /// new one joined, as at start.
    watched: Watched,
    /// How long a join waits for the ended sessions the stream holds.
    load_timeout: Duration,
}

impl Logins {
    /// Makes this node use the key of `self.stream` (waiting up to `patience` for JetStream to
    /// answer), applies the ended sessions it holds (waiting at most the load timeout), then
    /// publishes those only this node knows. The consumer's messages are what follows.
    async fn join(&mut self, patience: Duration) -> Result<consumer::pull::Ordered, StartError> {
        agree_on_key(&self.js, &self.stream, &self.sessions, &self.stats, patience).await?;
        let config = consumer::pull::OrderedConfig {
            filter_subject: format!("{REVOKED_PREFIX}>"),
            deliver_policy: consumer::DeliverPolicy::All,
            description: Some("mesgd node: ended login sessions".to_owned()),
            ..Default::default()
        };
        let mut loading = Loading::start(&self.stream, config).await.map_err(StartError::Logins)?;
        let loaded = tokio::time::timeout(self.load_timeout, async {
            while let Some(m) = loading.next().await {
                self.received(&m).await;
            }
        })
        .await;
        if loaded.is_err() {
            tracing::warn!(
                "cluster: the ended login sessions in the stream were not all loaded in time; the rest arrive later"
            );
        }
        self.publish_local().await;
        Ok(loading.into_messages())
    }

    /// Joins `stream`, a new stream in place of the one followed, which holds none of the
    /// old one's records: this node takes its key (or stores its own there, which is the key
    /// the cluster had, unless a node started meanwhile stored another: then every node takes
    /// that one, and sessions signed before no longer verify), and publishes every ended session
    /// it knows again.
    async fn rejoin(&mut self, stream: stream::Stream) -> Option<consumer::pull::Ordered> {
        self.known.clear();
        self.stream = stream;
        match Box::pin(self.join(REQUEST_TIMEOUT)).await {
            Ok(messages) => {
                self.watched.following(&self.stream);
                ClusterStats::add(&self.stats.logins_rejoins, 1);
                tracing::info!(stream = %self.watched.name(), "cluster: following the new stream of login sessions");
                Some(messages)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cluster: cannot follow the new stream of login sessions; trying again later");
                None
            }
        }
    }

    async fn run(mut self, messages: consumer::pull::Ordered, changed: Arc<Notify>) {
        let mut reconcile = tokio::time::interval(RECONCILE);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut prune = tokio::time::interval(PRUNE);
        prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut following = Following::new("login sessions stream", messages);
        loop {
            tokio::select! {
                m = following.next() => self.received(&m).await,
                () = changed.notified() => self.publish_local().await,
                _ = reconcile.tick() => {
                    let lost = following.checked();
                    if let Found::Replaced(stream) = self.watched.check(&self.js, REQUEST_TIMEOUT, lost).await {
                        following.follow(self.rejoin(*stream).await);
                    }
                    self.publish_local().await;
                }
                _ = prune.tick() => self.prune().await,
            }
        }
    }

    /// An ended session from the stream: remembered, and applied to this node's list.
    async fn received(&mut self, m: &jetstream::Message) {
        let exp = std::str::from_utf8(&m.payload).ok().and_then(|text| text.parse::<u64>().ok());
        let (Some(jti), Some(exp)) = (jti_of(m.subject.as_str()), exp) else {
            ClusterStats::add(&self.stats.logins_invalid, 1);
            return;
        };
        self.known.insert(jti.to_owned(), exp);
        let sessions = self.sessions.clone();
        let id = jti.to_owned();
        match tokio::task::spawn_blocking(move || sessions.apply_revocation(&id, exp, SystemTime::now()))
            .await
        {
            Ok(Ok(true)) => ClusterStats::add(&self.stats.logins_revocations_applied, 1),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                ClusterStats::add(&self.stats.logins_apply_errors, 1);
                tracing::warn!(error = %e, "cluster: cannot apply a logout from another node");
            }
            Err(e) => tracing::warn!(error = %e, "cluster: applying a logout from another node failed"),
        }
    }

    /// Publishes the ended sessions of this node's list that the stream does not hold.
    async fn publish_local(&mut self) {
        let mine = self.sessions.revocations(SystemTime::now());
        for (jti, exp) in mine {
            if self.known.contains_key(&jti) || !is_jti(&jti) {
                continue;
            }
            let stored = async {
                let subject = format!("{REVOKED_PREFIX}{jti}");
                let ack =
                    self.js.publish(subject, exp.to_string().into()).await.map_err(|e| e.to_string())?;
                ack.await.map_err(|e| e.to_string())
            };
            match tokio::time::timeout(REQUEST_TIMEOUT, stored).await {
                Ok(Ok(_)) => {
                    ClusterStats::add(&self.stats.logins_revocations_published, 1);
                    self.known.insert(jti, exp);
                }
                failed => {
                    ClusterStats::add(&self.stats.logins_publish_errors, 1);
                    let why = match failed {
                        Ok(Err(e)) => e,
                        _ => "timed out".to_owned(),
                    };
                    tracing::warn!(error = %why, "cluster: a logout was not stored in the cluster; retried in {} s", RECONCILE.as_secs());
                    return;
                }
            }
        }
    }

    /// Purges a bounded number of the expired entries this node knows of.
    async fn prune(&mut self) {
        let now = sessions::unix_seconds(SystemTime::now());
        let expired: Vec<String> = self
            .known
            .iter()
            .filter(|(_, exp)| **exp <= now)
            .map(|(jti, _)| jti.clone())
            .take(PRUNE_BATCH)
            .collect();
        for jti in expired {
            let purge = self.stream.purge().filter(format!("{REVOKED_PREFIX}{jti}"));
            match tokio::time::timeout(REQUEST_TIMEOUT, purge).await {
                Ok(Ok(_)) => {
                    ClusterStats::add(&self.stats.logins_revocations_pruned, 1);
                    self.known.remove(&jti);
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_subject_a_session_id_could_have_is_an_ended_session() {
        assert_eq!(jti_of("mesgd.logins.revoked.AbC-_09"), Some("AbC-_09"));
        for bad in [
            "mesgd.logins.revoked.",
            "mesgd.logins.revoked.a.b",
            "mesgd.logins.revoked.a*",
            "mesgd.logins.key",
            "mesgd.logins.revokedx",
        ] {
            assert_eq!(jti_of(bad), None, "{bad}");
        }
        assert_eq!(jti_of(&format!("{REVOKED_PREFIX}{}", "a".repeat(65))), None);
    }

    /// A read of the key is asked again only when JetStream gave no answer in time, the way
    /// async-nats reports it (a request error of kind `TimedOut` under `Other`), or answered that
    /// it is not available yet; an answer that will not change ends the start.
    #[test]
    fn only_an_unanswered_read_of_the_key_is_asked_again() {
        use async_nats::jetstream::context::{RequestError, RequestErrorKind};
        use stream::LastRawMessageError;
        let unanswered = LastRawMessageError::with_source(
            LastRawMessageErrorKind::Other,
            RequestError::new(RequestErrorKind::TimedOut),
        );
        assert!(not_answered(&unanswered), "{unanswered}");
        for refused in [
            LastRawMessageError::with_source(
                LastRawMessageErrorKind::Other,
                RequestError::new(RequestErrorKind::NoResponders),
            ),
            LastRawMessageError::new(LastRawMessageErrorKind::Other),
            LastRawMessageError::new(LastRawMessageErrorKind::InvalidSubject),
        ] {
            assert!(!not_answered(&refused), "{refused}");
        }
    }
}
