//! OAuth 2.0 login (authorization code with PKCE, OpenID Connect): `GET /auth/oauth/start`
//! and `GET /auth/oauth/complete` against the `[[auth.oauth]]` providers. A completed login
//! answers the same login session as `POST /auth/login`; `docs/tokens.md` describes the flow.
//!
//! # Layout
//!
//! - this file: the `[[auth.oauth]]` configuration and the providers' shared state.
//! - [`pending`]: the started logins (state, PKCE verifier, nonce), bounded and expiring.
//! - `provider`: discovery, the code exchange and the ID token's validation.
//! - `routes`: the two routes.

pub mod pending;
mod provider;
mod routes;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

pub(crate) use self::routes::routes;

/// One `[[auth.oauth]]` table: an OpenID provider people may log in with.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthProviderConfig {
    /// The name clients choose it by (`/auth/oauth/start?provider=NAME`).
    pub name: String,
    /// The issuer URL; its `/.well-known/openid-configuration` is the discovery document.
    pub issuer: String,
    /// The client id registered at the provider (the ID token's audience).
    pub client_id: String,
    /// A file whose content (trimmed) is the client secret. Read on each code exchange.
    pub client_secret_file: PathBuf,
    /// The ID token claim that names the mesgd account (default `sub`).
    #[serde(default = "default_claim")]
    pub claim: String,
    /// The redirect URI registered at the provider, i.e. this server's
    /// `/auth/oauth/complete`. Default: built from the request's `Host` (http, or https on
    /// a TLS listener).
    #[serde(default)]
    pub redirect_uri: Option<String>,
    /// The scopes asked for (default `["openid"]`; `openid` is always sent).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
}

fn default_claim() -> String {
    "sub".into()
}

fn default_scopes() -> Vec<String> {
    vec!["openid".into()]
}

/// Checks the `[[auth.oauth]]` tables: `(key, message)` for the first one that is wrong.
pub(crate) fn validate(providers: &[OAuthProviderConfig]) -> Result<(), (&'static str, String)> {
    for (i, p) in providers.iter().enumerate() {
        if p.name.is_empty() || providers[..i].iter().any(|q| q.name == p.name) {
            return Err(("auth.oauth.name", format!("{:?} is empty or used twice", p.name)));
        }
        let url_ok = |u: &str| u.starts_with("https://") || u.starts_with("http://");
        if !url_ok(&p.issuer) || url::Url::parse(&p.issuer).is_err() {
            return Err(("auth.oauth.issuer", format!("{:?} is not an http(s) URL", p.issuer)));
        }
        if let Some(r) = &p.redirect_uri {
            if !url_ok(r) || url::Url::parse(r).is_err() {
                return Err(("auth.oauth.redirect_uri", format!("{r:?} is not an http(s) URL")));
            }
        }
        if p.client_id.is_empty() {
            return Err(("auth.oauth.client_id", format!("provider {:?}: empty", p.name)));
        }
        if p.claim.is_empty() {
            return Err(("auth.oauth.claim", format!("provider {:?}: empty", p.name)));
        }
    }
    Ok(())
}

/// The configured providers and the logins under way (in the context).
#[derive(Debug)]
pub(crate) struct OAuth {
    providers: Vec<Arc<provider::Provider>>,
    pub(crate) pending: pending::Pending,
}

impl OAuth {
    pub(crate) fn new(configs: &[OAuthProviderConfig]) -> OAuth {
        OAuth {
            providers: configs.iter().map(|c| Arc::new(provider::Provider::new(c.clone()))).collect(),
            pending: pending::Pending::new(pending::MAX_PENDING, pending::PENDING_TTL),
        }
    }

    fn provider(&self, name: &str) -> Option<(usize, &Arc<provider::Provider>)> {
        self.providers.iter().enumerate().find(|(_, p)| p.config.name == name)
    }
}
