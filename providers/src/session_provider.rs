//! The `session` provider: a login session (or a grant token) in the CONNECT password
//! authenticates an MQTT or relay client as its account, with the account's ACL.
//!
//! | CONNECT password | answer |
//! |---|---|
//! | absent, or neither a JWT (three parts) nor a PKI token (two parts) | `Next` |
//! | a login session that does not verify (bad MAC, expired, logged out) | `Deny` (bad credentials) |
//! | a PKI token that does not verify, or that is not a grant token | `Deny` (bad credentials) |
//! | a username that is not the token's account | `Deny` (bad credentials) |
//! | the account is unknown, disabled, or `x509` | `Deny` (not authorized) |
//! | otherwise | `Allow` as the account (no username: the token's), its ACL live |
//!
//! The identity is admitted through the builtin [`UserDirectory`] exactly as a password login
//! is, so later changes to the account's rules reach the client and disabling or deleting the
//! account disconnects it. A token's expiry does not end an MQTT connection (as for the `jwt`
//! provider, MQTT checks credentials at CONNECT); a logout refuses the session's next CONNECT.
//! No settings.

use std::sync::Arc;
use std::time::SystemTime;

use mesgd_core::auth::{Authenticator, BoxFuture, ConnectInfo, Denial, Outcome, ProviderError};
use serde::Deserialize;

use crate::builtin::{AuthType, UserDirectory};
use crate::registry::{BuildContext, ConfigError, ProviderFactory, ProviderSpec};
use crate::sessions::{Sessions, looks_like_session};
use crate::tokens::{KeyStore, Kind};

/// The `type` of the session provider.
pub const TYPE_NAME: &str = "session";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionSettings {}

/// Builds the `session` provider.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionFactory;

impl ProviderFactory for SessionFactory {
    fn build(
        &self,
        spec: &ProviderSpec,
        ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError> {
        let _: SessionSettings = spec.settings()?;
        let store_error = |source| ConfigError::Store { at: spec.at(), source };
        let sessions = ctx.sessions().map_err(store_error)?;
        let keys_dir = crate::tokens::keys_dir(&ctx.storage_dir);
        Ok(Arc::new(SessionProvider { sessions, keys_dir }))
    }
}

/// Admits clients by login session or grant token.
#[derive(Debug)]
pub struct SessionProvider {
    sessions: Arc<Sessions>,
    keys_dir: std::path::PathBuf,
}

impl SessionProvider {
    fn directory(&self) -> &Arc<UserDirectory> {
        self.sessions.directory()
    }

    /// The account a grant token speaks for; `Err` with the reason it does not verify.
    async fn grant_account(&self, token: String) -> Result<String, String> {
        let dir = self.keys_dir.clone();
        tokio::task::spawn_blocking(move || {
            let now = SystemTime::now();
            let keys = KeyStore::open(&dir, now).map_err(|e| e.to_string())?;
            let claims = crate::tokens::verify(&keys, &token, now).map_err(|e| e.to_string())?;
            claims.expect_kind(Kind::Grant).map_err(|e| e.to_string())?;
            claims.sub.ok_or_else(|| "the grant token names no account".to_owned())
        })
        .await
        .map_err(|_| "the token check did not complete".to_owned())?
    }

    async fn decide(&self, info: &ConnectInfo) -> Result<Outcome, ProviderError> {
        let Some(token) = info.password.as_ref().and_then(|p| p.expose_str()).map(str::to_owned) else {
            return Ok(Outcome::Next);
        };
        let account = if looks_like_session(&token) {
            match self.sessions.verify(&token, SystemTime::now()) {
                Ok(claims) => claims.sub,
                Err(e) => return Ok(Outcome::Deny(Denial::bad_credentials(e.to_string()))),
            }
        } else if token.bytes().filter(|b| *b == b'.').count() == 1 {
            match self.grant_account(token).await {
                Ok(account) => account,
                Err(e) => return Ok(Outcome::Deny(Denial::bad_credentials(e))),
            }
        } else {
            return Ok(Outcome::Next);
        };
        if info.username.as_deref().is_some_and(|u| u != account) {
            return Ok(Outcome::Deny(Denial::bad_credentials("the username is not the token's account")));
        }
        self.directory().catch_up().await;
        if self.directory().find_user(&account).await.is_none() {
            return Ok(Outcome::Deny(Denial::not_authorized(format!("account {account:?} does not exist"))));
        }
        Ok(self.directory().admit(TYPE_NAME, &info.client_id, &account, |record| {
            if record.auth_type == AuthType::X509 {
                return Err(Denial::not_authorized("a certificate-only account cannot log in by session"));
            }
            Ok(())
        }))
    }
}

impl Authenticator for SessionProvider {
    fn name(&self) -> &str {
        TYPE_NAME
    }

    fn authenticate<'a>(&'a self, info: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
        Box::pin(self.decide(info))
    }
}
