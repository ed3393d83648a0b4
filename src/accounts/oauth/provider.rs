//! One OpenID provider: its discovery document (fetched on first use and kept), the code
//! exchange at its token endpoint, and the ID token's validation against its JWKS.
//!
//! The JWKS is fetched on each completion: logins are rare, and a key the provider has just
//! rotated in (or out) is then always current. Only asymmetric signatures are accepted (an
//! `HS*` or `none` ID token is refused), with the issuer, the audience (the client id), the
//! expiry and the nonce checked.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::OnceCell;

use super::OAuthProviderConfig;

/// The longest one request to a provider may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a provider.
const MAX_ANSWER: usize = 256 * 1024;

/// What went wrong talking to a provider or with its ID token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ProviderError {
    /// The discovery document could not be fetched or read.
    #[error("the discovery document of {issuer} is not usable: {reason}")]
    Discovery { issuer: String, reason: String },
    /// The client secret file could not be read (its content is never shown).
    #[error("the client secret file {path} is not readable: {reason}")]
    Secret { path: String, reason: String },
    /// The token endpoint refused the code or answered something unreadable.
    #[error("the code exchange failed: {0}")]
    Exchange(String),
    /// The ID token is missing, badly signed, expired or not for this client or login.
    #[error("the ID token is refused: {0}")]
    IdToken(String),
}

/// The parts of the discovery document used here.
#[derive(Debug, Deserialize)]
pub(crate) struct Discovery {
    pub(crate) issuer: String,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    pub(crate) jwks_uri: String,
}

/// A configured provider.
#[derive(Debug)]
pub(crate) struct Provider {
    pub(crate) config: OAuthProviderConfig,
    discovery: OnceCell<Discovery>,
    http: reqwest::Client,
}

/// The S256 PKCE challenge of `verifier`.
pub(crate) fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

async fn read_json<T: for<'de> Deserialize<'de>>(answer: reqwest::Response) -> Result<T, String> {
    let status = answer.status();
    let mut answer = answer;
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("the answer is over {MAX_ANSWER} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        // An OAuth error answer is `{"error", "error_description"}`: short, and no secret.
        let text = String::from_utf8_lossy(&body);
        return Err(format!("HTTP {status}: {}", text.chars().take(300).collect::<String>()));
    }
    serde_json::from_slice(&body).map_err(|e| format!("not the expected JSON: {e}"))
}

/// The ID token claims checked here besides what `jsonwebtoken` checks.
#[derive(Debug, Deserialize)]
struct IdClaims {
    nonce: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

impl Provider {
    pub(crate) fn new(config: OAuthProviderConfig) -> Provider {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .unwrap_or_default();
        Provider { config, discovery: OnceCell::new(), http }
    }

    /// The discovery document, fetched on first use (a failure is not kept: the next login
    /// tries again).
    pub(crate) async fn discovery(&self) -> Result<&Discovery, ProviderError> {
        let issuer = self.config.issuer.trim_end_matches('/');
        self.discovery
            .get_or_try_init(|| async {
                let fail = |reason: String| ProviderError::Discovery { issuer: issuer.to_owned(), reason };
                let url = format!("{issuer}/.well-known/openid-configuration");
                let answer = self.http.get(&url).send().await.map_err(|e| fail(e.to_string()))?;
                let doc: Discovery = read_json(answer).await.map_err(fail)?;
                // OpenID Connect Discovery 1.0 §4.3: the document is for this issuer only.
                if doc.issuer.trim_end_matches('/') != issuer {
                    return Err(fail(format!("it names the issuer {:?}", doc.issuer)));
                }
                Ok(doc)
            })
            .await
    }

    fn secret(&self) -> Result<String, ProviderError> {
        let path = &self.config.client_secret_file;
        let fail = |reason: String| ProviderError::Secret { path: path.display().to_string(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let secret = text.trim();
        if secret.is_empty() {
            return Err(fail("it is empty".into()));
        }
        Ok(secret.to_owned())
    }

    /// Exchanges `code` (with the PKCE verifier) and answers the validated ID token's claim
    /// that names the account.
    pub(crate) async fn complete(
        &self,
        code: &str,
        verifier: &str,
        nonce: &str,
        redirect_uri: &str,
    ) -> Result<String, ProviderError> {
        let discovery = self.discovery().await?;
        let secret = self.secret()?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_verifier", verifier)
            .append_pair("client_id", &self.config.client_id)
            .append_pair("client_secret", &secret)
            .finish();
        let answer = self
            .http
            .post(&discovery.token_endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(form)
            .send()
            .await
            .map_err(|e| ProviderError::Exchange(e.to_string()))?;
        #[derive(Deserialize)]
        struct Tokens {
            id_token: Option<String>,
        }
        let tokens: Tokens = read_json(answer).await.map_err(ProviderError::Exchange)?;
        let id_token =
            tokens.id_token.ok_or_else(|| ProviderError::Exchange("no id_token in the answer".into()))?;
        let claims = self.validate(discovery, &id_token, nonce).await?;
        match claims.rest.get(&self.config.claim) {
            Some(serde_json::Value::String(name)) if !name.is_empty() => Ok(name.clone()),
            _ => Err(ProviderError::IdToken(format!(
                "it has no non-empty string claim {:?}",
                self.config.claim
            ))),
        }
    }

    async fn validate(
        &self,
        discovery: &Discovery,
        id_token: &str,
        nonce: &str,
    ) -> Result<IdClaims, ProviderError> {
        let bad = |m: String| ProviderError::IdToken(m);
        let header = jsonwebtoken::decode_header(id_token).map_err(|e| bad(e.to_string()))?;
        let asymmetric = [
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
            Algorithm::ES256,
            Algorithm::ES384,
            Algorithm::EdDSA,
        ];
        if !asymmetric.contains(&header.alg) {
            return Err(bad(format!("it is signed with {:?}, not an asymmetric algorithm", header.alg)));
        }
        let answer = self
            .http
            .get(&discovery.jwks_uri)
            .send()
            .await
            .map_err(|e| bad(format!("the JWKS is not reachable: {e}")))?;
        let jwks: JwkSet = read_json(answer).await.map_err(|e| bad(format!("the JWKS: {e}")))?;
        let jwk = match &header.kid {
            Some(kid) => jwks.find(kid),
            None if jwks.keys.len() == 1 => jwks.keys.first(),
            None => None,
        }
        .ok_or_else(|| bad(format!("no key {:?} in the provider's JWKS", header.kid)))?;
        let key = DecodingKey::from_jwk(jwk).map_err(|e| bad(format!("its key: {e}")))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[discovery.issuer.as_str()]);
        validation.set_audience(&[self.config.client_id.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = 30;
        let data =
            jsonwebtoken::decode::<IdClaims>(id_token, &key, &validation).map_err(|e| bad(e.to_string()))?;
        let matches =
            data.claims.nonce.as_deref().is_some_and(|n| bool::from(n.as_bytes().ct_eq(nonce.as_bytes())));
        if !matches {
            return Err(bad("its nonce is not this login's".into()));
        }
        Ok(data.claims)
    }
}
