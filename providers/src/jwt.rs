//! The `jwt` provider: an HS256 JSON Web Token in the password field.
//!
//! | password | answer |
//! |---|---|
//! | absent, not UTF-8, or not a JWT (three base64url segments whose first decodes to a JSON object with an `alg`) | `Next` |
//! | a JWT whose `alg` is anything but `HS256` (`none` and `RS256` included) | `Deny` (bad credentials) |
//! | bad signature, expired (`exp`), not yet valid (`nbf`), wrong `iss` / `aud` | `Deny` (bad credentials) |
//! | no string username claim, or a CONNECT username that differs from it | `Deny` (bad credentials) |
//! | an ACL claim that is not a valid rule array | `Deny` (not authorized) |
//! | otherwise | `Allow` |
//!
//! Decisions worth knowing:
//!
//! - Username: the `username_claim` (default `sub`). A CONNECT without a username takes it from
//!   the token; a CONNECT whose username differs is refused, so one user's token cannot be
//!   presented under another name.
//! - ACL: the `acl_claim` (default `acl`), an array of `{pattern, permission}`. A token without
//!   that claim (or with `null`) gets an empty ACL, which denies every topic: a token minted
//!   without thought for the ACL should not open the whole broker. `missing_acl =
//!   "unrestricted"` makes such tokens unrestricted instead.
//! - Expiry: `exp` is required unless `require_exp = false`; `exp` and `nbf` are checked with
//!   `leeway_s` (default 30 s) of clock skew. The identity expires at `exp` plus that leeway
//!   (the same allowance that admits the token), and the broker disconnects the client then.
//! - `issuer` / `audience`, when set, must match and are then required. A token that names an
//!   audience is refused unless `audience` is configured and matches (RFC 7519 §4.1.3).
//! - The key: `secret` or `secret_file` (exactly one; the file is read once at start, one
//!   trailing line ending is dropped), at least 32 bytes as RFC 7518 §3.2 requires for HS256.
//!   Neither the key nor any token is ever logged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mesgd_core::auth::{Authenticator, BoxFuture, ConnectInfo, Denial, Identity, Outcome, ProviderError};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::registry::{BuildContext, ConfigError, ProviderFactory, ProviderSpec};
use crate::rules::rules_from_json;

/// The `type` of the jwt provider.
pub const TYPE_NAME: &str = "jwt";

/// The shortest HS256 key accepted, in bytes (the size of the hash output).
const MIN_SECRET_LEN: usize = 32;
/// The longest token looked at: far beyond any real token, well below a password's 64 KiB.
const MAX_TOKEN_LEN: usize = 16 * 1024;
/// The largest clock-skew allowance accepted.
const MAX_LEEWAY_S: u64 = 3600;

/// What an absent ACL claim means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum MissingAcl {
    /// An empty ACL: every topic is denied.
    #[default]
    DenyAll,
    /// No ACL: every topic is allowed.
    Unrestricted,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JwtSettings {
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    secret_file: Option<PathBuf>,
    #[serde(default = "default_leeway_s")]
    leeway_s: u64,
    #[serde(default)]
    issuer: Option<String>,
    #[serde(default)]
    audience: Option<String>,
    #[serde(default = "default_username_claim")]
    username_claim: String,
    #[serde(default = "default_acl_claim")]
    acl_claim: String,
    #[serde(default)]
    missing_acl: MissingAcl,
    #[serde(default = "required")]
    require_exp: bool,
}

fn default_leeway_s() -> u64 {
    30
}
fn default_username_claim() -> String {
    "sub".to_owned()
}
fn default_acl_claim() -> String {
    "acl".to_owned()
}
fn required() -> bool {
    true
}

/// Builds `type = "jwt"` providers.
#[derive(Clone, Copy, Debug, Default)]
pub struct JwtFactory;

impl ProviderFactory for JwtFactory {
    fn build(
        &self,
        spec: &ProviderSpec,
        ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError> {
        let settings: JwtSettings = spec.settings()?;
        let secret = match (settings.secret, &settings.secret_file) {
            (Some(secret), None) => secret.into_bytes(),
            (None, Some(file)) => {
                let path = ctx.resolve(file);
                let mut bytes = std::fs::read(&path).map_err(|source| ConfigError::File {
                    at: spec.at(),
                    key: "secret_file".into(),
                    path: path.clone(),
                    source,
                })?;
                strip_line_ending(&mut bytes);
                bytes
            }
            (Some(_), Some(_)) => return Err(spec.invalid("set one of `secret` and `secret_file`, not both")),
            (None, None) => return Err(spec.invalid("missing key: set `secret` or `secret_file`")),
        };
        if secret.len() < MIN_SECRET_LEN {
            return Err(spec.invalid(format!(
                "the HS256 secret must be at least {MIN_SECRET_LEN} bytes (RFC 7518 §3.2), it has {}",
                secret.len()
            )));
        }
        if settings.leeway_s > MAX_LEEWAY_S {
            return Err(spec
                .invalid(format!("`leeway_s` must be at most {MAX_LEEWAY_S}, found {}", settings.leeway_s)));
        }
        for (key, claim) in [("username_claim", &settings.username_claim), ("acl_claim", &settings.acl_claim)]
        {
            if claim.is_empty() {
                return Err(spec.invalid(format!("`{key}` must not be empty")));
            }
        }

        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = settings.leeway_s;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.required_spec_claims.clear();
        if settings.require_exp {
            validation.required_spec_claims.insert("exp".into());
        }
        if let Some(issuer) = &settings.issuer {
            validation.set_issuer(&[issuer]);
            validation.required_spec_claims.insert("iss".into());
        }
        if let Some(audience) = &settings.audience {
            validation.set_audience(&[audience]);
            validation.required_spec_claims.insert("aud".into());
        }
        // jsonwebtoken picks its crypto backend from its cargo features and panics when both
        // are enabled anywhere in the build; installing the pure-Rust one explicitly keeps
        // HS256 working whatever another crate enables. An earlier installation wins, which is
        // just as good.
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();

        Ok(Arc::new(JwtProvider {
            key: DecodingKey::from_secret(&secret),
            validation,
            username_claim: settings.username_claim,
            acl_claim: settings.acl_claim,
            missing_acl: settings.missing_acl,
        }))
    }
}

fn strip_line_ending(bytes: &mut Vec<u8>) {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
}

struct JwtProvider {
    key: DecodingKey,
    validation: Validation,
    username_claim: String,
    acl_claim: String,
    missing_acl: MissingAcl,
}

impl std::fmt::Debug for JwtProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtProvider")
            .field("username_claim", &self.username_claim)
            .field("acl_claim", &self.acl_claim)
            .finish_non_exhaustive()
    }
}

impl JwtProvider {
    fn decide(&self, info: &ConnectInfo) -> Outcome {
        let Some(token) = info.password.as_ref().and_then(|p| p.expose_str()) else { return Outcome::Next };
        let Some(alg) = crate::token_shape::jwt_algorithm(token) else { return Outcome::Next };
        if alg != "HS256" {
            return deny(format!("token algorithm {:?} is not accepted (only HS256)", shorten(&alg)));
        }
        if token.len() > MAX_TOKEN_LEN {
            return deny(format!("token is longer than {MAX_TOKEN_LEN} bytes"));
        }
        let claims = match jsonwebtoken::decode::<Map<String, Value>>(token, &self.key, &self.validation) {
            Ok(data) => data.claims,
            Err(error) => return deny(rejection(error.kind())),
        };
        let Some(username) =
            claims.get(&self.username_claim).and_then(Value::as_str).filter(|u| !u.is_empty())
        else {
            return deny(format!("token has no string `{}` claim", self.username_claim));
        };
        if info.username.as_deref().is_some_and(|given| given != username) {
            return deny(format!(
                "CONNECT username differs from the token's `{}` claim",
                self.username_claim
            ));
        }
        let acl = match claims.get(&self.acl_claim) {
            None | Some(Value::Null) => match self.missing_acl {
                MissingAcl::DenyAll => Some(Vec::new()),
                MissingAcl::Unrestricted => None,
            },
            Some(value) => match rules_from_json(value) {
                Ok(rules) => Some(rules),
                Err(reason) => {
                    return Outcome::Deny(Denial::not_authorized(format!(
                        "token `{}` claim is invalid: {reason}",
                        self.acl_claim
                    )));
                }
            },
        };
        // The same leeway that admitted the token keeps it valid: a token accepted within the
        // clock-skew allowance must not be refused (or cut off) by the broker a moment later.
        let expires_at = claims.get("exp").and_then(Value::as_u64).and_then(|exp| {
            UNIX_EPOCH.checked_add(Duration::from_secs(exp.saturating_add(self.validation.leeway)))
        });
        Outcome::Allow(
            Identity::new(TYPE_NAME, info.client_id.clone(), Some(username.to_owned()), acl)
                .with_expiry(expires_at),
        )
    }
}

fn deny(message: String) -> Outcome {
    Outcome::Deny(Denial::bad_credentials(message))
}

/// Why a well-formed token was refused, without quoting any part of it.
fn rejection(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "token has expired".into(),
        ErrorKind::ImmatureSignature => "token is not valid yet (nbf)".into(),
        ErrorKind::InvalidSignature => "token signature does not verify".into(),
        ErrorKind::InvalidIssuer => "token issuer is not accepted".into(),
        ErrorKind::InvalidAudience => "token audience is not accepted".into(),
        ErrorKind::InvalidAlgorithm => "token algorithm is not accepted (only HS256)".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("token lacks the `{}` claim", shorten(claim)),
        ErrorKind::InvalidClaimFormat(claim) => format!("token claim `{}` is malformed", shorten(claim)),
        _ => "token is malformed".into(),
    }
}

/// Client-chosen text in a log message, cut to a harmless length.
fn shorten(text: &str) -> String {
    text.chars().take(32).collect()
}

impl Authenticator for JwtProvider {
    fn name(&self) -> &str {
        TYPE_NAME
    }

    fn authenticate<'a>(&'a self, info: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
        let outcome = self.decide(info);
        Box::pin(async move { Ok(outcome) })
    }
}

#[cfg(any(test, feature = "fuzzing"))]
#[path = "jwt_fuzzing.rs"]
pub mod fuzzing;

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    use super::*;

    #[test]
    fn token_shapes_table() {
        let header = |json: &str| URL_SAFE_NO_PAD.encode(json);
        let hs = header(r#"{"alg":"HS256","typ":"JWT"}"#);
        let cases: Vec<(String, Option<&str>)> = vec![
            (format!("{hs}.eyJzdWIiOiJ4In0.c2ln"), Some("HS256")),
            (format!("{}.eyJ9.", header(r#"{"alg":"none"}"#)), Some("none")),
            (format!("{}.e30.c2ln", header(r#"{"alg":"RS256"}"#)), Some("RS256")),
            ("hunter2".into(), None),
            ("a.b".into(), None),
            ("a.b.c.d".into(), None),
            (format!(".{hs}.c2ln"), None),
            (format!("{hs}..c2ln"), None),
            (format!("{hs}.e30.c2ln="), None),
            (format!("{hs}.e3+0.c2ln"), None),
            ("not.a.jwt".into(), None),
            (format!("{}.e30.c2ln", header("[1,2]")), None),
            (format!("{}.e30.c2ln", header(r#"{"typ":"JWT"}"#)), None),
            (format!("{}.e30.c2ln", header(r#"{"alg":256}"#)), None),
            (format!("{}.e30.c2ln", header(r#"{"alg":"HS256""#)), None),
            (String::new(), None),
            ("..".into(), None),
        ];
        for (token, expected) in cases {
            assert_eq!(crate::token_shape::jwt_algorithm(&token).as_deref(), expected, "{token:?}");
        }
    }

    #[test]
    fn line_endings_are_stripped_once() {
        for (input, expected) in
            [(&b"k\n"[..], &b"k"[..]), (b"k\r\n", b"k"), (b"k", b"k"), (b"k\n\n", b"k\n"), (b"", b"")]
        {
            let mut bytes = input.to_vec();
            strip_line_ending(&mut bytes);
            assert_eq!(bytes, expected);
        }
    }
}
