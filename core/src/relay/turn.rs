//! TURN credentials by the TURN REST API convention (coturn's `use-auth-secret`).
//!
//! The relay and the TURN server share a secret. For a client with address `addr`, the username
//! is `<expiry>:<addr>` (expiry in Unix seconds: now + ttl) and the credential is the standard
//! base64 of HMAC-SHA1(secret, username). The TURN server recomputes the HMAC and checks the
//! expiry when an allocation is made, so nothing is stored on either side. coturn checks only at
//! allocation: an allocation made before the expiry outlives it, which is why the TTL is short
//! and clients ask again for each call.
//!
//! With no TURN server configured, `username` and `credential` are `null`, `urls` is empty and
//! `ttl` is 0.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use base64::Engine as _;

use super::address::BASE64;

/// The default lifetime of minted credentials.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// The `[relay.turn]` settings.
#[derive(Clone)]
pub struct TurnConfig {
    key: hmac::Key,
    /// How long credentials are valid.
    pub ttl: Duration,
    /// The TURN server URLs handed to clients (`turn:host:3478`, `turns:host:5349?transport=tcp`).
    pub urls: Vec<String>,
}

impl TurnConfig {
    /// Settings with the shared `secret` (as configured in coturn's `static-auth-secret`).
    pub fn new(secret: &[u8], ttl: Duration, urls: Vec<String>) -> Self {
        TurnConfig { key: hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret), ttl, urls }
    }
}

impl fmt::Debug for TurnConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnConfig")
            .field("secret", &"<redacted>")
            .field("ttl", &self.ttl)
            .field("urls", &self.urls)
            .finish()
    }
}

/// A `turn_credentials` reply.
#[derive(Clone, PartialEq, Eq)]
pub struct TurnCredentials<'a> {
    /// The TURN server URLs.
    pub urls: &'a [String],
    /// `<expiry>:<addr>`, or `None` without a TURN server.
    pub username: Option<String>,
    /// base64(HMAC-SHA1(secret, username)), or `None` without a TURN server.
    pub credential: Option<String>,
    /// Seconds until expiry.
    pub ttl: u64,
}

impl fmt::Debug for TurnCredentials<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnCredentials")
            .field("urls", &self.urls)
            .field("username", &self.username)
            .field("credential", &self.credential.as_ref().map(|_| "<redacted>"))
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// Mints credentials for `addr` at wall-clock time `now`.
pub fn credentials<'a>(config: Option<&'a TurnConfig>, addr: &str, now: SystemTime) -> TurnCredentials<'a> {
    let Some(config) = config else {
        return TurnCredentials { urls: &[], username: None, credential: None, ttl: 0 };
    };
    let ttl = config.ttl.as_secs();
    // A clock before 1970 counts as 1970: the credentials then expire early, never late.
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let username = format!("{}:{addr}", now.saturating_add(ttl));
    let tag = hmac::sign(&config.key, username.as_bytes());
    TurnCredentials {
        urls: &config.urls,
        credential: Some(BASE64.encode(tag.as_ref())),
        username: Some(username),
        ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(unix)
    }

    /// Vectors computed with OpenSSL, an independent HMAC implementation:
    /// `printf '%s' '1700086400:alice' | openssl dgst -sha1 -hmac 'north-secret' -binary | base64`
    /// `printf '%s' '1700000600:bob:x' | openssl dgst -sha1 -hmac 'k' -binary | base64`
    #[test]
    fn matches_openssl() {
        let config =
            TurnConfig::new(b"north-secret", Duration::from_secs(86_400), vec!["turn:t.example:3478".into()]);
        let creds = credentials(Some(&config), "alice", at(1_700_000_000));
        assert_eq!(creds.username.as_deref(), Some("1700086400:alice"));
        assert_eq!(creds.credential.as_deref(), Some("Nni2GlD6PVaoCP0Cx2DhLKDWjyY="));
        assert_eq!(creds.ttl, 86_400);
        assert_eq!(creds.urls, ["turn:t.example:3478"]);

        let config = TurnConfig::new(b"k", Duration::from_secs(600), vec![]);
        let creds = credentials(Some(&config), "bob:x", at(1_700_000_000));
        assert_eq!(creds.username.as_deref(), Some("1700000600:bob:x"));
        assert_eq!(creds.credential.as_deref(), Some("RkXfT86IEDJLYPfKWj9aO735hzc="));
    }

    #[test]
    fn unconfigured_gives_nulls() {
        let creds = credentials(None, "alice", at(1_700_000_000));
        assert_eq!(creds, TurnCredentials { urls: &[], username: None, credential: None, ttl: 0 });
    }

    #[test]
    fn clock_before_the_epoch() {
        let config = TurnConfig::new(b"k", Duration::from_secs(60), vec![]);
        let creds = credentials(Some(&config), "a", UNIX_EPOCH - Duration::from_secs(5));
        assert_eq!(creds.username.as_deref(), Some("60:a"));
    }

    #[test]
    fn debug_hides_secrets() {
        let config = TurnConfig::new(b"north-secret", DEFAULT_TTL, vec![]);
        let shown = format!("{config:?} {:?}", credentials(Some(&config), "a", at(0)));
        assert!(!shown.contains("north-secret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        let credential = credentials(Some(&config), "a", at(0)).credential.unwrap();
        assert!(!shown.contains(&credential), "{shown}");
    }
}
