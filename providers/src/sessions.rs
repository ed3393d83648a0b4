//! Login sessions (issue #16): compact HS256 JWTs for builtin accounts, and the list of
//! sessions ended by logout.
//!
//! A session is `base64url(header).base64url(claims).base64url(HMAC-SHA256)` with the header
//! `{"alg":"HS256","typ":"JWT"}` and exactly the claims `sub` (the account), `iat`, `exp`
//! (unix seconds) and `jti` (16 random bytes, base64url, the handle logout revokes). It
//! carries no path list and no administrator role: what it may do is read from the account at
//! every use. The key is 32 random bytes made on first use and kept in the builtin store's
//! `settings` table (hex), so sessions survive a restart and the key is never in the config
//! or a log.
//!
//! [`Sessions::verify`] checks, in order: the size, the JWT layout and signature
//! (jsonwebtoken, HS256 only), the claims' shape, `exp` against the `now` passed in (refused
//! at and after `exp`, no leeway), and the revocation list. The list holds each ended session
//! until its `exp` (then it can never verify again anyway), in memory and in the store's
//! `revoked_sessions` table, so a restart does not bring a logged-out session back. It is
//! bounded: [`MAX_REVOKED`] entries, expired ones pruned at each logout; a logout that finds
//! it full of live entries is refused rather than an entry dropped.
//!
//! On a node of a cluster, the key and the list are the cluster's (`mesgd-cluster`'s `logins`):
//! the node adopts the key the cluster holds ([`Sessions::adopt_key`]), applies the sessions
//! ended on other nodes ([`Sessions::apply_revocation`]), and is told of its own logouts
//! ([`Sessions::on_revoke`]) to send them out.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use mesgd_core::sync::lock;
use serde::{Deserialize, Serialize};

use crate::builtin::{StoreError, UserDirectory};

/// The default lifetime of a login session.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// The longest session token accepted, in bytes, before any decoding.
pub const MAX_SESSION_LEN: usize = 4096;
/// The most ended, unexpired sessions remembered.
pub const MAX_REVOKED: usize = 100_000;
/// The `settings` key of the HS256 key.
const KEY_SETTING: &str = "session_hs256_key";

/// The claims of a login session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionClaims {
    /// The account.
    pub sub: String,
    /// Issued at, unix seconds.
    pub iat: u64,
    /// Expires at, unix seconds.
    pub exp: u64,
    /// The session's id.
    pub jti: String,
}

/// Why a session was not issued, verified or ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Longer than [`MAX_SESSION_LEN`].
    #[error("the session token is {0} bytes, over the {MAX_SESSION_LEN}-byte limit")]
    TooLong(usize),
    /// Not three base64url parts, a header that is not HS256, a bad signature, or claims that
    /// are not exactly `sub`, `iat`, `exp`, `jti`.
    #[error("not a valid login session (an HS256 JWT): {0}")]
    Invalid(String),
    /// `exp` is at or before now.
    #[error("the login session expired at {exp} (now {now})")]
    Expired {
        /// Its `exp`.
        exp: u64,
        /// The time it was checked at.
        now: u64,
    },
    /// Ended by logout.
    #[error("the login session was ended by logout")]
    Revoked,
    /// The revocation list is full of unexpired entries.
    #[error("too many ended sessions are remembered ({MAX_REVOKED}); try again later")]
    RevocationListFull,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Signing failed.
    #[error("cannot sign the session: {0}")]
    Sign(String),
}

/// The length of the HS256 key, in bytes.
pub const KEY_LEN: usize = 32;

/// What is called with `(jti, exp)` after each logout on this node.
pub type RevocationHook = Box<dyn Fn(&str, u64) + Send + Sync>;

/// The login-session key and revocation list of one broker (a provider service).
pub struct Sessions {
    directory: Arc<UserDirectory>,
    key: RwLock<Arc<SessionKey>>,
    validation: Validation,
    revoked: Mutex<HashMap<String, u64>>,
    on_revoke: OnceLock<RevocationHook>,
}

/// The HS256 key, and the forms jsonwebtoken uses.
struct SessionKey {
    secret: [u8; KEY_LEN],
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl SessionKey {
    fn new(secret: [u8; KEY_LEN]) -> SessionKey {
        SessionKey {
            encoding: EncodingKey::from_secret(&secret),
            decoding: DecodingKey::from_secret(&secret),
            secret,
        }
    }
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions").field("revoked", &lock(&self.revoked).len()).finish_non_exhaustive()
    }
}

/// Unix seconds of `t`.
pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Sessions {
    /// The sessions of the store behind `directory`: its key (made on first use), and the
    /// ended sessions not yet expired at `now`.
    pub fn open(directory: Arc<UserDirectory>, now: SystemTime) -> Result<Sessions, StoreError> {
        let store = directory.store();
        let hex = store.setting_or_insert(KEY_SETTING, || {
            let key: [u8; KEY_LEN] = rand::random();
            encode_hex(&key)
        })?;
        let key = decode_hex(&hex).ok_or_else(|| StoreError::Corrupt {
            path: store.path().to_path_buf(),
            message: format!("setting {KEY_SETTING} is not 64 hexadecimal digits"),
        })?;
        let revoked = store.revoked_sessions(unix_seconds(now))?.into_iter().collect();
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        let mut validation = Validation::new(Algorithm::HS256);
        // `exp` is checked against the `now` passed in, refused at `exp` itself.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.leeway = 0;
        validation.required_spec_claims.clear();
        Ok(Sessions {
            key: RwLock::new(Arc::new(SessionKey::new(key))),
            directory,
            validation,
            revoked: Mutex::new(revoked),
            on_revoke: OnceLock::new(),
        })
    }

    fn key(&self) -> Arc<SessionKey> {
        self.key.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The HS256 key, to share it with the other nodes of a cluster. A secret: never log it.
    pub fn shared_key(&self) -> [u8; KEY_LEN] {
        self.key().secret
    }

    /// Makes `secret` this broker's key (the cluster's, on a node that joins one): stored, so
    /// that a restart keeps it, then used for every session issued and verified from now on.
    /// Sessions signed with the key before no longer verify. Blocks on the store.
    pub fn adopt_key(&self, secret: [u8; KEY_LEN]) -> Result<(), StoreError> {
        if self.key().secret == secret {
            return Ok(());
        }
        self.directory.store().set_setting(KEY_SETTING, &encode_hex(&secret))?;
        *self.key.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(SessionKey::new(secret));
        Ok(())
    }

    /// Calls `hook` with `(jti, exp)` after each logout on this broker (once; later hooks are
    /// ignored). The cluster sends them to the other nodes.
    pub fn on_revoke(&self, hook: RevocationHook) {
        let _ = self.on_revoke.set(hook);
    }

    /// Records a session ended elsewhere (another node of the cluster): refused by
    /// [`Sessions::verify`] from now until `exp`, and kept in the store. Whether it was new
    /// here; an expired one is not kept. Bounded as [`Sessions::revoke`] is. Blocks on the store.
    pub fn apply_revocation(&self, jti: &str, exp: u64, now: SystemTime) -> Result<bool, SessionError> {
        let now = unix_seconds(now);
        if exp <= now {
            return Ok(false);
        }
        if !remember(&mut lock(&self.revoked), jti, exp, now)? {
            return Ok(false);
        }
        self.directory.store().revoke_session(jti, exp)?;
        Ok(true)
    }

    /// The ended sessions not yet expired at `now`: `(jti, exp)`.
    pub fn revocations(&self, now: SystemTime) -> Vec<(String, u64)> {
        let now = unix_seconds(now);
        lock(&self.revoked).iter().filter(|(_, exp)| **exp > now).map(|(j, e)| (j.clone(), *e)).collect()
    }

    /// The user directory the sessions' accounts are read from.
    pub fn directory(&self) -> &Arc<UserDirectory> {
        &self.directory
    }

    /// A new session for `account` at `now`, lasting `ttl` (at least a second).
    pub fn issue(
        &self,
        account: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<(String, SessionClaims), SessionError> {
        let iat = unix_seconds(now);
        let id: [u8; 16] = rand::random();
        let claims = SessionClaims {
            sub: account.to_owned(),
            iat,
            exp: iat.saturating_add(ttl.as_secs().max(1)),
            jti: URL_SAFE_NO_PAD.encode(id),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.key().encoding)
            .map_err(|e| SessionError::Sign(e.to_string()))?;
        Ok((token, claims))
    }

    /// Verifies `token` at `now` (see the module doc). The account's standing is the
    /// caller's to check: it changes, the token does not.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<SessionClaims, SessionError> {
        let claims = parse(token, &self.key().decoding, &self.validation)?;
        let now = unix_seconds(now);
        if claims.exp <= now {
            return Err(SessionError::Expired { exp: claims.exp, now });
        }
        if lock(&self.revoked).contains_key(&claims.jti) {
            return Err(SessionError::Revoked);
        }
        Ok(claims)
    }

    /// Ends the session `claims` (logout): refused by [`Sessions::verify`] from now until its
    /// `exp`. Blocks on the store.
    pub fn revoke(&self, claims: &SessionClaims, now: SystemTime) -> Result<(), SessionError> {
        let now = unix_seconds(now);
        remember(&mut lock(&self.revoked), &claims.jti, claims.exp, now)?;
        let store = self.directory.store();
        store.revoke_session(&claims.jti, claims.exp)?;
        store.prune_revoked_sessions(now)?;
        if let Some(hook) = self.on_revoke.get() {
            hook(&claims.jti, claims.exp);
        }
        Ok(())
    }

    /// How many ended sessions are remembered.
    pub fn revoked_count(&self) -> usize {
        lock(&self.revoked).len()
    }
}

/// Adds `jti` (until `exp`) to `revoked`, first forgetting what expired by `now`; whether it
/// was not there yet. Refused when the list is full of unexpired entries.
fn remember(revoked: &mut HashMap<String, u64>, jti: &str, exp: u64, now: u64) -> Result<bool, SessionError> {
    revoked.retain(|_, exp| *exp > now);
    if revoked.contains_key(jti) {
        return Ok(false);
    }
    if revoked.len() >= MAX_REVOKED {
        return Err(SessionError::RevocationListFull);
    }
    revoked.insert(jti.to_owned(), exp);
    Ok(true)
}

/// Whether `token` has the shape of a JWT (three dot-separated parts), the only format a
/// login session comes in; PKI tokens have two.
pub fn looks_like_session(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}

/// Parses and checks the signature and claims of `token` (not its expiry).
fn parse(token: &str, key: &DecodingKey, validation: &Validation) -> Result<SessionClaims, SessionError> {
    if token.len() > MAX_SESSION_LEN {
        return Err(SessionError::TooLong(token.len()));
    }
    if !looks_like_session(token) {
        return Err(SessionError::Invalid("a login session has three dot-separated parts".into()));
    }
    let data = jsonwebtoken::decode::<SessionClaims>(token, key, validation)
        .map_err(|e| SessionError::Invalid(e.to_string()))?;
    let claims = data.claims;
    if claims.sub.is_empty() || claims.jti.is_empty() || claims.jti.len() > 64 || claims.exp < claims.iat {
        return Err(SessionError::Invalid("the claims are out of range".into()));
    }
    Ok(claims)
}

/// `key` as 64 lowercase hexadecimal digits (the form the store and the cluster keep).
pub fn encode_hex(key: &[u8; KEY_LEN]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key written as [`encode_hex`] writes it.
pub fn decode_hex(text: &str) -> Option<[u8; KEY_LEN]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut key = [0u8; KEY_LEN];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        key[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(key)
}

/// The body of the `session_token` fuzz target: parsing any text never panics.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    /// Parses `data` as a session token with a fixed key.
    pub fn session_token(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else { return };
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        let key = jsonwebtoken::DecodingKey::from_secret(b"fuzz");
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        let _ = super::parse(text, &key, &validation);
    }
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
