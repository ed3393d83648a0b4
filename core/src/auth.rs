//! Who a client is: the authenticator trait, its three-way outcome, and the ordered chain.
//!
//! Every front end builds a [`ConnectInfo`] from what the client sent (an MQTT CONNECT, a relay
//! `register`, a WebSocket upgrade) and hands it to the [`Chain`]. Providers are tried in the
//! configured order; the first that answers [`Outcome::Allow`] or [`Outcome::Deny`] decides. If
//! every provider answers [`Outcome::Next`], a client that sent no username is admitted as
//! anonymous (with no ACL, i.e. unrestricted) when `allow_anonymous` is on; anyone else is
//! refused. A provider that fails (I/O, database, timeout) denies unless its entry says
//! `on_error = "next"`: the chain fails closed.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::acl::Rule;

mod stats;

use self::stats::Answer;
pub use self::stats::{ChainStats, ProviderCounters, ProviderCounts};

/// A boxed, sendable future: what a dyn-compatible async trait method returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The wire protocol a client speaks, so a provider can tell an MQTT client from a relay client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Protocol {
    /// MQTT 3.1 (protocol level 3, "MQIsdp").
    Mqtt31,
    /// MQTT 3.1.1 (protocol level 4).
    Mqtt311,
    /// MQTT 5.0 (protocol level 5).
    Mqtt5,
    /// The JSON relay protocol.
    Relay,
    /// A WebSocket connection on a content-routing path.
    ContentRouting,
}

impl Protocol {
    /// A short stable name, used in logs and in the plugin ABI's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Mqtt31 => "mqtt-3.1",
            Protocol::Mqtt311 => "mqtt-3.1.1",
            Protocol::Mqtt5 => "mqtt-5",
            Protocol::Relay => "relay",
            Protocol::ContentRouting => "content-routing",
        }
    }
}

/// A secret (password or token) as the client sent it. Its `Debug` never shows the bytes, so a
/// stray `{:?}` cannot log it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps the bytes a client sent.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Secret(bytes.into())
    }

    /// The raw bytes. Callers must not log them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// The bytes as UTF-8, if they are.
    pub fn expose_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<{} bytes redacted>)", self.0.len())
    }
}

/// What the TLS layer verified about the client's certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsInfo {
    /// The verified peer chain, leaf first, DER encoded. Empty when the client sent none.
    pub peer_cert_chain: Vec<Vec<u8>>,
    /// The subject Common Name of the leaf certificate, if it has one.
    pub common_name: Option<String>,
    /// The leaf's subject alternative names (DNS names, IP addresses, e-mail, URIs) as text.
    pub sans: Vec<String>,
}

impl TlsInfo {
    /// Describes a verified client certificate chain.
    pub fn new(peer_cert_chain: Vec<Vec<u8>>, common_name: Option<String>, sans: Vec<String>) -> Self {
        TlsInfo { peer_cert_chain, common_name, sans }
    }

    /// Whether the client presented (and the listener verified) a certificate.
    pub fn has_client_cert(&self) -> bool {
        !self.peer_cert_chain.is_empty()
    }
}

/// Everything a provider may use to decide who a client is. One input struct, so that adding a
/// field never breaks a provider: build it with [`ConnectInfo::new`] and the `with_*` methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConnectInfo {
    /// The wire protocol.
    pub protocol: Protocol,
    /// The client identifier (after the broker assigned one, if the client sent none).
    pub client_id: String,
    /// The username, if the client sent one.
    pub username: Option<String>,
    /// The password or token, if the client sent one.
    pub password: Option<Secret>,
    /// The peer's address, when the transport has one.
    pub peer_addr: Option<SocketAddr>,
    /// The name of the listener the client connected to.
    pub listener: Arc<str>,
    /// The TLS state, on a TLS listener.
    pub tls: Option<TlsInfo>,
}

impl ConnectInfo {
    /// A connect attempt with no credentials, no peer address and no TLS.
    pub fn new(protocol: Protocol, client_id: impl Into<String>, listener: impl Into<Arc<str>>) -> Self {
        ConnectInfo {
            protocol,
            client_id: client_id.into(),
            username: None,
            password: None,
            peer_addr: None,
            listener: listener.into(),
            tls: None,
        }
    }

    /// Sets the username.
    pub fn with_username(mut self, username: Option<String>) -> Self {
        self.username = username;
        self
    }

    /// Sets the password.
    pub fn with_password(mut self, password: Option<Secret>) -> Self {
        self.password = password;
        self
    }

    /// Sets the peer address.
    pub fn with_peer_addr(mut self, peer_addr: Option<SocketAddr>) -> Self {
        self.peer_addr = peer_addr;
        self
    }

    /// Sets the TLS state.
    pub fn with_tls(mut self, tls: Option<TlsInfo>) -> Self {
        self.tls = tls;
        self
    }
}

/// The live state of an identity that its provider can still change after the client connected
/// (a builtin user whose rules are edited, disabled or deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityState {
    /// The identity is valid with these rules (`None` = unrestricted).
    Active(Option<Arc<[Rule]>>),
    /// The identity was withdrawn; its connections must be closed.
    Revoked(Revocation),
}

/// Why a live identity was withdrawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// The account was disabled.
    Disabled,
    /// The account was deleted.
    Deleted,
}

/// The provider's side of a live identity: publish changes with [`IdentityUpdater::set`].
#[derive(Debug)]
pub struct IdentityUpdater(watch::Sender<IdentityState>);

impl IdentityUpdater {
    /// Publishes a new state to every connection holding the matching [`LiveIdentity`].
    pub fn set(&self, state: IdentityState) {
        self.0.send_replace(state);
    }

    /// Whether any connection still holds this identity.
    pub fn is_in_use(&self) -> bool {
        self.0.receiver_count() > 0
    }

    /// Another handle for a new connection of the same account.
    pub fn subscribe(&self) -> LiveIdentity {
        LiveIdentity::from(self.0.subscribe())
    }
}

impl From<watch::Receiver<IdentityState>> for LiveIdentity {
    fn from(receiver: watch::Receiver<IdentityState>) -> Self {
        LiveIdentity { receiver, closed_seen: false }
    }
}

/// The connection's side of a live identity: a cheap check ([`LiveIdentity::has_changed`])
/// whenever the connection is polled, which the provider makes happen by waking the
/// connection's session (or which [`LiveIdentity::changed`] awaits).
#[derive(Clone, Debug)]
pub struct LiveIdentity {
    receiver: watch::Receiver<IdentityState>,
    /// The provider dropped its side (a revocation is published last, then the entry goes),
    /// and [`LiveIdentity::current`] has read what it left.
    closed_seen: bool,
}

impl LiveIdentity {
    /// A new live identity with its updater.
    pub fn channel(initial: IdentityState) -> (IdentityUpdater, LiveIdentity) {
        let (tx, rx) = watch::channel(initial);
        (IdentityUpdater(tx), LiveIdentity::from(rx))
    }

    /// Whether the provider published a change that this handle has not yet seen. A provider
    /// that dropped its side counts as one change, once: its last state (a revocation, say)
    /// may not have been read yet, and a closed channel no longer says which it was.
    pub fn has_changed(&self) -> bool {
        self.receiver.has_changed().unwrap_or(!self.closed_seen)
    }

    /// The current state, marking it seen.
    pub fn current(&mut self) -> IdentityState {
        if self.receiver.has_changed().is_err() {
            self.closed_seen = true;
        }
        self.receiver.borrow_and_update().clone()
    }

    /// Waits until the provider publishes a change. Never completes once the provider is gone:
    /// an identity whose provider was dropped stays as it was.
    pub async fn changed(&mut self) {
        if self.receiver.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Who a client is, as a provider decided: the identity and ACL that gate every subscribe,
/// publish and delivery of its connection.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Identity {
    /// The authenticated username (`%u` in ACL patterns), if any.
    pub username: Option<String>,
    /// The client identifier (`%c` in ACL patterns).
    pub client_id: String,
    /// The name of the provider that admitted the client (`anonymous` for the fallback).
    pub provider: String,
    /// The ACL: `None` = unrestricted, `Some([])` = deny everything.
    pub acl: Option<Vec<Rule>>,
    /// When the identity stops being valid (a JWT's `exp`); the connection is closed then.
    pub expires_at: Option<SystemTime>,
    /// Changes the provider can still make after the connect, if it supports them.
    pub live: Option<LiveIdentity>,
}

impl Identity {
    /// An identity admitted by `provider` with the given ACL.
    pub fn new(
        provider: impl Into<String>,
        client_id: impl Into<String>,
        username: Option<String>,
        acl: Option<Vec<Rule>>,
    ) -> Self {
        Identity {
            username,
            client_id: client_id.into(),
            provider: provider.into(),
            acl,
            expires_at: None,
            live: None,
        }
    }

    /// The anonymous identity: no username, unrestricted.
    pub fn anonymous(client_id: impl Into<String>) -> Self {
        Identity::new(ANONYMOUS_PROVIDER, client_id, None, None)
    }

    /// Sets the expiry.
    pub fn with_expiry(mut self, expires_at: Option<SystemTime>) -> Self {
        self.expires_at = expires_at;
        self
    }

    /// Attaches a live handle through which the provider can change or revoke the identity.
    pub fn with_live(mut self, live: Option<LiveIdentity>) -> Self {
        self.live = live;
        self
    }
}

/// The provider name recorded on identities admitted by the anonymous fallback.
pub const ANONYMOUS_PROVIDER: &str = "anonymous";

/// Why a client was refused. Maps to MQTT CONNACK codes: [`DenyReason::BadCredentials`] is
/// 3.1.1 return code 4 / v5 0x86, [`DenyReason::NotAuthorized`] is 5 / 0x87.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenyReason {
    /// The credentials were wrong (bad password, bad signature, expired token).
    BadCredentials,
    /// The client is known but may not connect (disabled account, nobody resolved it, a
    /// provider failed and the chain fails closed).
    NotAuthorized,
}

/// A refusal: the reason code and a message for the log (never containing a secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The reason, which the front end maps to its refusal code.
    pub reason: DenyReason,
    /// What went wrong, for the log. Never contains a secret.
    pub message: String,
}

impl Denial {
    /// Wrong credentials.
    pub fn bad_credentials(message: impl Into<String>) -> Self {
        Denial { reason: DenyReason::BadCredentials, message: message.into() }
    }

    /// Not authorized.
    pub fn not_authorized(message: impl Into<String>) -> Self {
        Denial { reason: DenyReason::NotAuthorized, message: message.into() }
    }
}

/// A provider's answer.
#[derive(Debug)]
pub enum Outcome {
    /// The provider knows the client and admits it with this identity.
    Allow(Identity),
    /// The provider knows the client and refuses it.
    Deny(Denial),
    /// The provider does not know the client: ask the next one.
    Next,
}

/// A provider failed to reach a decision (I/O, database, malformed answer, timeout).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider did not answer within its time limit.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// Anything else, with a message that says what failed (never a secret).
    #[error("{0}")]
    Failed(String),
    /// An error from the provider's own machinery.
    #[error(transparent)]
    Other(Arc<dyn std::error::Error + Send + Sync>),
}

/// One authentication provider (builtin, x509, jwt, http, a plugin ...).
///
/// The method returns a boxed future so the trait stays dyn-compatible: the chain holds
/// `Arc<dyn Authenticator>`.
pub trait Authenticator: Send + Sync + 'static {
    /// The provider's name, as it appears in logs and in [`Identity::provider`].
    fn name(&self) -> &str;

    /// Decides about one connect attempt.
    fn authenticate<'a>(&'a self, info: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>>;
}

/// What the chain does when a provider fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Refuse the client (fail closed). The default.
    #[default]
    Deny,
    /// Ask the next provider, as if this one had answered [`Outcome::Next`].
    Next,
}

/// One provider in the chain with its failure policy.
#[derive(Clone)]
pub struct ChainEntry {
    /// The provider.
    pub provider: Arc<dyn Authenticator>,
    /// What a failure means.
    pub on_error: OnError,
    /// An overall time limit for one decision of this provider.
    pub timeout: Duration,
}

impl fmt::Debug for ChainEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainEntry")
            .field("provider", &self.provider.name())
            .field("on_error", &self.on_error)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The default limit on one provider's decision, when its config sets none.
pub const DEFAULT_PROVIDER_TIMEOUT: Duration = Duration::from_secs(5);

/// The ordered chain of providers plus the anonymous fallback. Clones share their counters.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    entries: Vec<ChainEntry>,
    allow_anonymous: bool,
    stats: Arc<ChainStats>,
}

/// The chain's verdict.
#[derive(Debug)]
pub enum Verdict {
    /// Admitted with this identity.
    Allowed(Identity),
    /// Refused.
    Denied(Denial),
}

impl Chain {
    /// A chain of `entries` tried in order, with the anonymous fallback on or off.
    pub fn new(entries: Vec<ChainEntry>, allow_anonymous: bool) -> Self {
        let stats = Arc::new(ChainStats::new(entries.len()));
        Chain { entries, allow_anonymous, stats }
    }

    /// What the providers and the fallback decided so far, and how long decisions took.
    pub fn stats(&self) -> &ChainStats {
        &self.stats
    }

    /// Whether clients without a username fall through to anonymous.
    pub fn allows_anonymous(&self) -> bool {
        self.allow_anonymous
    }

    /// The providers, in order.
    pub fn entries(&self) -> &[ChainEntry] {
        &self.entries
    }

    /// Runs the chain for one connect attempt.
    pub async fn authenticate(&self, info: &ConnectInfo) -> Verdict {
        let started = tokio::time::Instant::now();
        let verdict = self.decide(info).await;
        self.stats.latency().record(started.elapsed());
        verdict
    }

    async fn decide(&self, info: &ConnectInfo) -> Verdict {
        for (index, entry) in self.entries.iter().enumerate() {
            let name = entry.provider.name();
            let answer = match tokio::time::timeout(entry.timeout, entry.provider.authenticate(info)).await {
                Ok(answer) => answer,
                Err(_) => Err(ProviderError::Timeout(entry.timeout)),
            };
            self.stats.count(
                index,
                match &answer {
                    Ok(Outcome::Allow(_)) => Answer::Allow,
                    Ok(Outcome::Deny(_)) => Answer::Deny,
                    Ok(Outcome::Next) => Answer::Next,
                    Err(_) => Answer::Error,
                },
            );
            match answer {
                Ok(Outcome::Allow(identity)) => return Verdict::Allowed(identity),
                Ok(Outcome::Deny(denial)) => return Verdict::Denied(denial),
                Ok(Outcome::Next) => continue,
                Err(error) => match entry.on_error {
                    OnError::Deny => {
                        tracing::warn!(provider = name, client_id = %info.client_id, %error, "auth provider failed; denying (on_error = \"deny\")");
                        return Verdict::Denied(Denial::not_authorized(format!(
                            "provider {name} failed: {error}"
                        )));
                    }
                    OnError::Next => {
                        tracing::warn!(provider = name, client_id = %info.client_id, %error, "auth provider failed; trying the next one (on_error = \"next\")");
                    }
                },
            }
        }
        let anonymous = info.username.is_none() && self.allow_anonymous;
        self.stats.count_fallback(anonymous);
        if anonymous {
            Verdict::Allowed(Identity::anonymous(info.client_id.clone()))
        } else if info.username.is_none() {
            Verdict::Denied(Denial::not_authorized(
                "no provider admitted the client and anonymous access is off",
            ))
        } else {
            Verdict::Denied(Denial::bad_credentials("no provider admitted the username"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_identity_sees_each_change_once_and_a_revocation_left_by_a_dropped_provider() {
        let (updater, mut live) = LiveIdentity::channel(IdentityState::Active(None));
        assert!(!live.has_changed());
        updater.set(IdentityState::Active(Some(Arc::from(Vec::new()))));
        assert!(live.has_changed());
        assert_eq!(live.current(), IdentityState::Active(Some(Arc::from(Vec::new()))));
        assert!(!live.has_changed(), "seen");
        // The provider publishes a revocation and forgets the entry, as the builtin one does.
        let mut other = updater.subscribe();
        updater.set(IdentityState::Revoked(Revocation::Disabled));
        drop(updater);
        for handle in [&mut live, &mut other] {
            assert!(handle.has_changed(), "the last state is still to be read");
            assert_eq!(handle.current(), IdentityState::Revoked(Revocation::Disabled));
            assert!(!handle.has_changed(), "and then nothing more");
        }
        // A provider that goes without a last word reads as one change of nothing.
        let (updater, mut quiet) = LiveIdentity::channel(IdentityState::Active(None));
        drop(updater);
        assert!(quiet.has_changed());
        assert_eq!(quiet.current(), IdentityState::Active(None));
        assert!(!quiet.has_changed());
    }

    /// A provider with a fixed answer, for exercising the chain's ordering rules.
    struct Fixed {
        name: &'static str,
        answer: fn(&ConnectInfo) -> Result<Outcome, ProviderError>,
    }

    impl Authenticator for Fixed {
        fn name(&self) -> &str {
            self.name
        }
        fn authenticate<'a>(
            &'a self,
            info: &'a ConnectInfo,
        ) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
            let answer = (self.answer)(info);
            Box::pin(async move { answer })
        }
    }

    struct Hangs;
    impl Authenticator for Hangs {
        fn name(&self) -> &str {
            "hangs"
        }
        fn authenticate<'a>(&'a self, _: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
            Box::pin(std::future::pending())
        }
    }

    fn entry(p: impl Authenticator, on_error: OnError) -> ChainEntry {
        ChainEntry { provider: Arc::new(p), on_error, timeout: Duration::from_secs(1) }
    }
    fn next(_: &ConnectInfo) -> Result<Outcome, ProviderError> {
        Ok(Outcome::Next)
    }
    fn allow(i: &ConnectInfo) -> Result<Outcome, ProviderError> {
        Ok(Outcome::Allow(Identity::new("allow", &i.client_id, i.username.clone(), Some(vec![]))))
    }
    fn deny(_: &ConnectInfo) -> Result<Outcome, ProviderError> {
        Ok(Outcome::Deny(Denial::bad_credentials("wrong password")))
    }
    fn fail(_: &ConnectInfo) -> Result<Outcome, ProviderError> {
        Err(ProviderError::Failed("database is locked".into()))
    }
    fn info(username: Option<&str>) -> ConnectInfo {
        ConnectInfo::new(Protocol::Mqtt311, "c1", "test").with_username(username.map(str::to_owned))
    }

    #[tokio::test]
    async fn first_decisive_provider_wins_in_order() {
        let chain = Chain::new(
            vec![
                entry(Fixed { name: "a", answer: next }, OnError::Deny),
                entry(Fixed { name: "b", answer: allow }, OnError::Deny),
                entry(Fixed { name: "c", answer: deny }, OnError::Deny),
            ],
            false,
        );
        match chain.authenticate(&info(Some("u"))).await {
            Verdict::Allowed(id) => assert_eq!(id.provider, "allow"),
            Verdict::Denied(d) => panic!("denied: {d:?}"),
        }
        let chain = Chain::new(
            vec![
                entry(Fixed { name: "c", answer: deny }, OnError::Deny),
                entry(Fixed { name: "b", answer: allow }, OnError::Deny),
            ],
            true,
        );
        assert!(
            matches!(chain.authenticate(&info(None)).await, Verdict::Denied(d) if d.reason == DenyReason::BadCredentials)
        );
    }

    #[tokio::test]
    async fn every_answer_is_counted_per_provider() {
        let chain = Chain::new(
            vec![
                entry(Fixed { name: "f", answer: fail }, OnError::Next),
                entry(Fixed { name: "a", answer: next }, OnError::Deny),
                entry(Fixed { name: "b", answer: allow }, OnError::Deny),
            ],
            true,
        );
        chain.authenticate(&info(Some("u"))).await;
        chain.clone().authenticate(&info(None)).await;
        let counts = |i| chain.stats().provider(i).unwrap().counts();
        assert_eq!(counts(0), ProviderCounts { error: 2, ..Default::default() });
        assert_eq!(counts(1), ProviderCounts { next: 2, ..Default::default() });
        assert_eq!(counts(2), ProviderCounts { allow: 2, ..Default::default() });
        assert_eq!(chain.stats().latency().snapshot().count, 2, "clones share the counters");
        let empty = Chain::new(vec![], true);
        empty.authenticate(&info(None)).await;
        empty.authenticate(&info(Some("u"))).await;
        assert_eq!((empty.stats().anonymous_admitted(), empty.stats().unresolved_refused()), (1, 1));
    }

    #[tokio::test]
    async fn all_next_falls_back_to_anonymous_only_without_username() {
        let on = Chain::new(vec![entry(Fixed { name: "a", answer: next }, OnError::Deny)], true);
        match on.authenticate(&info(None)).await {
            Verdict::Allowed(id) => {
                assert_eq!(id.provider, ANONYMOUS_PROVIDER);
                assert!(id.acl.is_none(), "anonymous is unrestricted");
            }
            Verdict::Denied(d) => panic!("denied: {d:?}"),
        }
        assert!(
            matches!(on.authenticate(&info(Some("u"))).await, Verdict::Denied(d) if d.reason == DenyReason::BadCredentials)
        );
        let off = Chain::new(vec![], false);
        assert!(
            matches!(off.authenticate(&info(None)).await, Verdict::Denied(d) if d.reason == DenyReason::NotAuthorized)
        );
    }

    #[tokio::test]
    async fn failure_denies_unless_on_error_next() {
        let closed = Chain::new(
            vec![
                entry(Fixed { name: "f", answer: fail }, OnError::Deny),
                entry(Fixed { name: "b", answer: allow }, OnError::Deny),
            ],
            true,
        );
        assert!(
            matches!(closed.authenticate(&info(None)).await, Verdict::Denied(d) if d.reason == DenyReason::NotAuthorized)
        );
        let open = Chain::new(
            vec![
                entry(Fixed { name: "f", answer: fail }, OnError::Next),
                entry(Fixed { name: "b", answer: allow }, OnError::Deny),
            ],
            false,
        );
        assert!(matches!(open.authenticate(&info(Some("u"))).await, Verdict::Allowed(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_provider_times_out_and_fails_closed() {
        let chain = Chain::new(vec![entry(Hangs, OnError::Deny)], true);
        assert!(
            matches!(chain.authenticate(&info(None)).await, Verdict::Denied(d) if d.message.contains("timed out"))
        );
        let chain = Chain::new(vec![entry(Hangs, OnError::Next)], true);
        assert!(matches!(chain.authenticate(&info(None)).await, Verdict::Allowed(_)));
    }

    #[test]
    fn secret_debug_is_redacted() {
        let s = Secret::new(b"hunter2".to_vec());
        assert_eq!(format!("{s:?}"), "Secret(<7 bytes redacted>)");
        let i = info(Some("u")).with_password(Some(s));
        assert!(!format!("{i:?}").contains("hunter2"));
    }
}
