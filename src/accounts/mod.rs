//! Accounts on the `http` listener (issue #16): login sessions (`POST /auth/login`,
//! `POST /auth/logout`, `GET /account`) and grant tokens (`POST /auth/admin/issue`).
//!
//! The credentials themselves live in `mesgd_providers`: the login session's HS256 JWT and
//! revocation list in `sessions`, grant and anonymous tokens in `grants`. This module is their
//! HTTP side, and the `[auth]` keys `session_ttl` and `require_confirm`. What each credential
//! may do at a content-routing upgrade is `crate::content::admission`'s; the live checks of a
//! grant connection are `crate::content::grant`'s. `docs/tokens.md` describes every credential.
//!
//! # Layout
//!
//! - `body`: the request bodies, parsed strictly ([`body::parse_login`], [`body::parse_issue`]).
//! - [`confirm`]: `require_confirm`: pending logins, one-time codes, their delivery.
//! - [`oauth`]: OAuth 2.0 login (authorization code with PKCE) against `[[auth.oauth]]`.
//! - `issue`: issuing a grant token, for both routes that do.
//! - `routes`: the routes and their answers.

pub mod body;
pub mod confirm;
pub(crate) mod issue;
pub mod oauth;
mod routes;

use std::time::Duration;

pub(crate) use self::routes::routes;
use crate::config::AuthConfig;

/// Deserializes a humantime duration (`"24h"`, `"90m"`).
pub(crate) fn humantime_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    humantime::parse_duration(&text).map_err(|e| serde::de::Error::custom(format!("{text:?}: {e}")))
}

/// Checks the `[auth]` keys of this module: `(key, message)` for the first one that is wrong.
pub(crate) fn validate(auth: &AuthConfig) -> Result<(), (&'static str, String)> {
    if auth.session_ttl < Duration::from_secs(1) {
        return Err(("auth.session_ttl", "a login session must last at least one second".into()));
    }
    if auth.require_confirm && !auth.confirm.delivers() {
        return Err((
            "auth.confirm",
            "require_confirm = true needs a way to deliver codes: set [auth.confirm] command, \
             webhook, or (on a developer's machine) development = true"
                .into(),
        ));
    }
    oauth::validate(&auth.oauth)?;
    if auth.confirm.command.first().is_some_and(String::is_empty) {
        return Err(("auth.confirm.command", "the program name is empty".into()));
    }
    if let Some(url) = &auth.confirm.webhook {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(("auth.confirm.webhook", format!("{url:?} is not an http:// or https:// URL")));
        }
    }
    Ok(())
}

/// The `[auth]` settings of login sessions, and the pending confirmations (in the context).
#[derive(Debug)]
pub(crate) struct Accounts {
    pub(crate) session_ttl: Duration,
    pub(crate) require_confirm: bool,
    pub(crate) confirm: confirm::ConfirmConfig,
    pub(crate) pending: confirm::Pending,
    /// The OAuth providers and the OAuth logins under way.
    pub(crate) oauth: oauth::OAuth,
    /// A hash of no one's password, with the store's cost: what a login for a name without a
    /// usable hash is checked against (made on first use).
    stand_in: std::sync::OnceLock<String>,
}

impl Accounts {
    pub(crate) fn new(auth: &AuthConfig) -> Accounts {
        Accounts {
            session_ttl: auth.session_ttl,
            require_confirm: auth.require_confirm,
            confirm: auth.confirm.clone(),
            pending: confirm::Pending::new(&auth.confirm),
            oauth: oauth::OAuth::new(&auth.oauth),
            stand_in: std::sync::OnceLock::new(),
        }
    }

    /// The stand-in hash (blocks: hashing is slow by design).
    pub(crate) fn stand_in_hash(&self, directory: &mesgd_providers::builtin::UserDirectory) -> &str {
        use mesgd_providers::builtin::password;
        self.stand_in.get_or_init(|| {
            let cost = directory.store().pbkdf2_iterations().unwrap_or(password::DEFAULT_PBKDF2_ITERATIONS);
            let secret: [u8; 16] = rand::random();
            password::hash_password(&secret, cost).unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(toml: &str) -> Result<crate::config::Config, String> {
        let text = format!("[[listeners]]\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n{toml}");
        crate::config::Config::from_toml(&text, None).map_err(|e| e.to_string())
    }

    /// An `[[auth.oauth]]` table, `over` replacing (TOML: a later key is an error, so
    /// the defaults here are only those `over` does not name).
    fn oauth(over: &str) -> String {
        let mut table = String::from("[[auth.oauth]]\n");
        for (key, value) in [
            ("name", "\"a\""),
            ("issuer", "\"https://i\""),
            ("client_id", "\"c\""),
            ("client_secret_file", "\"s\""),
        ] {
            if !over.contains(&format!("{key} =")) {
                table.push_str(&format!("{key} = {value}\n"));
            }
        }
        table + over
    }

    #[test]
    fn the_auth_keys_have_their_defaults_and_are_checked() {
        let c = parsed("").unwrap();
        assert_eq!(c.auth.session_ttl, Duration::from_secs(86_400));
        assert!(!c.auth.require_confirm);
        assert_eq!(
            parsed("[auth]\nsession_ttl = \"90m\"\n").unwrap().auth.session_ttl,
            Duration::from_secs(5400)
        );
        let cases = [
            ("[auth]\nsession_ttl = \"soon\"\n", "session_ttl"),
            ("[auth]\nsession_ttl = \"0s\"\n", "at least one second"),
            ("[auth]\nrequire_confirm = true\n", "needs a way to deliver codes"),
            ("[auth]\nrequire_confirm = true\n[auth.confirm]\ncommand = [\"\"]\n", "program name is empty"),
            ("[auth.confirm]\nwebhook = \"ftp://x\"\n", "not an http:// or https:// URL"),
            ("[auth.confirm]\nsms = true\n", "unknown field"),
            (
                "[[auth.oauth]]\nname = \"a\"\nissuer = \"https://i\"\nclient_id = \"c\"\n",
                "client_secret_file",
            ),
            (&oauth("name = \"\"\n"), "auth.oauth.name"),
            (&format!("{}{}", oauth(""), oauth("")), "used twice"),
            (&oauth("issuer = \"ftp://i\"\n"), "auth.oauth.issuer"),
            (&oauth("redirect_uri = \"nowhere\"\n"), "auth.oauth.redirect_uri"),
            (&oauth("client_id = \"\"\n"), "auth.oauth.client_id"),
            (&oauth("claim = \"\"\n"), "auth.oauth.claim"),
            (&oauth("prompt = \"none\"\n"), "unknown field"),
        ];
        let ok = parsed(&oauth("")).unwrap();
        assert_eq!(
            (ok.auth.oauth[0].claim.as_str(), &ok.auth.oauth[0].scopes[..]),
            ("sub", &["openid".to_owned()][..])
        );
        for (toml, words) in cases {
            let e = parsed(toml).expect_err(toml);
            assert!(e.contains(words), "{toml}: {e} should say {words:?}");
        }
        assert!(parsed("[auth]\nrequire_confirm = true\n[auth.confirm]\ndevelopment = true\n").is_ok());
    }
}
