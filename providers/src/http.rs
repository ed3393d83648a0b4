//! The `http` provider: a webhook decides.
//!
//! For every connect the broker POSTs a JSON object to `url`:
//!
//! ```json
//! {"client_id": "c1", "username": "alice", "password": "aHVudGVyMg==",
//!  "peer_addr": "192.0.2.7:51234", "listener": "mqtt", "protocol": "mqtt-3.1.1"}
//! ```
//!
//! `password` is standard base64 (MQTT passwords are binary) and `username`, `password` and
//! `peer_addr` are `null` when absent. The answer decides:
//!
//! | answer | outcome |
//! |---|---|
//! | 401 or 404 | `Next`: the webhook does not know the client |
//! | any other status but 200 (redirects are not followed) | `Deny` (bad credentials) |
//! | 200 `{"allow": false}` | `Deny` (bad credentials) |
//! | 200 `{"allow": true, "acl": [...]?, "username": "..."?}` | `Allow` |
//! | 200 with a body that is not that object, or over 64 KiB | an error: the chain fails closed (or moves on with `on_error = "next"`) |
//! | no answer within `timeout_ms` | an error (timeout) |
//!
//! An absent or `null` `acl` means no ACL — unrestricted — as a nil rule list does everywhere
//! in mesgd; a webhook that wants to restrict a client must send rules (`[]` denies every
//! topic). An invalid rule makes the answer malformed. `username`, when given, replaces the
//! CONNECT username in the identity (a webhook may map tokens to accounts).
//!
//! Settings: `url` (http or https), `headers` (a table of static headers, e.g. an API key; their
//! values are never logged), `cache_ttl_ms` (default 0 = no cache), `deny_cache_ttl_ms` (how
//! long refusals and "unknown" answers are remembered; default 1000 when `cache_ttl_ms` is set,
//! else 0) and `cache_size` (default 10000 entries). `timeout_ms` is the chain-level key; for
//! this provider it defaults to 2000. The cache is keyed by an HMAC of (client id, username,
//! password) under a random per-process key; failures are never cached.
//!
//! One HTTP client serves every request, so connections to the webhook are reused; requests are
//! independent, so a slow or dead webhook holds up only the connects waiting for it, each for
//! at most `timeout_ms`. No proxy from the environment is used (credentials go to `url` and
//! nowhere else), and TLS is rustls. The password is never logged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mesgd_core::acl::Rule;
use mesgd_core::auth::{Authenticator, BoxFuture, ConnectInfo, Denial, Identity, Outcome, ProviderError};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::cache::{BoundedCache, Keyer};
use crate::registry::{BuildContext, ConfigError, ProviderFactory, ProviderSpec};
use crate::rules::rules_from_json;
use mesgd_core::sync::lock;

/// The `type` of the http provider.
pub const TYPE_NAME: &str = "http";

/// The decision time limit when the table sets no `timeout_ms`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(2000);

/// The largest answer body read.
const MAX_ANSWER_LEN: usize = 64 * 1024;
/// The longest a cached answer may be kept.
const MAX_CACHE_TTL_MS: u64 = 86_400_000;
/// How long refusals are remembered when caching is on and nothing else is configured.
const DEFAULT_DENY_CACHE_TTL_MS: u64 = 1000;
/// Headers the provider sets itself.
const RESERVED_HEADERS: [&str; 4] = ["content-type", "content-length", "host", "transfer-encoding"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSettings {
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    cache_ttl_ms: u64,
    #[serde(default)]
    deny_cache_ttl_ms: Option<u64>,
    #[serde(default = "default_cache_size")]
    cache_size: usize,
}

fn default_cache_size() -> usize {
    10_000
}

/// Builds `type = "http"` providers.
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpFactory;

impl ProviderFactory for HttpFactory {
    fn build(
        &self,
        spec: &ProviderSpec,
        _ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError> {
        let settings: HttpSettings = spec.settings()?;
        // The URL may carry credentials, so messages describe it without quoting it.
        let url = reqwest::Url::parse(&settings.url)
            .map_err(|e| spec.invalid(format!("`url` is not a valid URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(spec.invalid("`url` must be an http:// or https:// URL"));
        }
        let headers = static_headers(spec, &settings.headers)?;
        let allow_ttl = settings.cache_ttl_ms;
        let deny_ttl =
            settings.deny_cache_ttl_ms.unwrap_or(if allow_ttl > 0 { DEFAULT_DENY_CACHE_TTL_MS } else { 0 });
        for (key, ttl) in [("cache_ttl_ms", allow_ttl), ("deny_cache_ttl_ms", deny_ttl)] {
            if ttl > MAX_CACHE_TTL_MS {
                return Err(spec.invalid(format!("`{key}` must be at most {MAX_CACHE_TTL_MS}, found {ttl}")));
            }
        }
        let cache = if allow_ttl > 0 || deny_ttl > 0 {
            if !(1..=1_000_000).contains(&settings.cache_size) {
                return Err(
                    spec.invalid(format!("`cache_size` must be 1 to 1000000, found {}", settings.cache_size))
                );
            }
            Some(AnswerCache {
                keyer: Keyer::random(),
                allow_ttl: Duration::from_millis(allow_ttl),
                deny_ttl: Duration::from_millis(deny_ttl),
                entries: Mutex::new(BoundedCache::new(settings.cache_size)),
            })
        } else {
            None
        };
        let client = reqwest::Client::builder()
            .timeout(spec.timeout)
            .connect_timeout(spec.timeout)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| spec.invalid(format!("cannot create the HTTP client: {e}")))?;
        Ok(Arc::new(HttpProvider { client, url, headers, timeout: spec.timeout, cache }))
    }

    fn default_timeout(&self) -> Duration {
        DEFAULT_TIMEOUT
    }
}

fn static_headers(
    spec: &ProviderSpec,
    configured: &BTreeMap<String, String>,
) -> Result<HeaderMap, ConfigError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in configured {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| spec.invalid(format!("`headers`: {name:?} is not a valid header name")))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(spec.invalid(format!("`headers`: {name:?} is set by mesgd itself")));
        }
        let mut value = HeaderValue::from_str(value).map_err(|_| {
            spec.invalid(format!("`headers`: the value of {name:?} is not a valid header value"))
        })?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// What the webhook is sent.
#[derive(Serialize)]
struct Question<'a> {
    client_id: &'a str,
    username: Option<&'a str>,
    password: Option<String>,
    peer_addr: Option<String>,
    listener: &'a str,
    protocol: &'a str,
}

/// A 200 answer. Unknown fields are ignored so a webhook can add its own (a reason, say).
#[derive(Deserialize)]
struct Reply {
    allow: bool,
    #[serde(default)]
    acl: Option<serde_json::Value>,
    #[serde(default)]
    username: Option<String>,
}

/// A decision as the cache keeps it (the client id is filled in per connect).
#[derive(Clone, Debug)]
enum Answer {
    Allow { username: Option<String>, acl: Option<Vec<Rule>> },
    Deny(Denial),
    Next,
}

impl Answer {
    fn into_outcome(self, info: &ConnectInfo) -> Outcome {
        match self {
            Answer::Allow { username, acl } => {
                Outcome::Allow(Identity::new(TYPE_NAME, info.client_id.clone(), username, acl))
            }
            Answer::Deny(denial) => Outcome::Deny(denial),
            Answer::Next => Outcome::Next,
        }
    }
}

struct AnswerCache {
    keyer: Keyer,
    allow_ttl: Duration,
    deny_ttl: Duration,
    entries: Mutex<BoundedCache<[u8; 32], (Instant, Answer)>>,
}

impl AnswerCache {
    fn key(&self, info: &ConnectInfo) -> [u8; 32] {
        // Absent and empty must differ: a leading tag byte says which.
        let optional = |present: bool| if present { &b"1"[..] } else { &b"0"[..] };
        let username = info.username.as_deref().unwrap_or_default().as_bytes();
        let password = info.password.as_ref().map_or(&[][..], |p| p.expose());
        self.keyer.mac(&[
            info.client_id.as_bytes(),
            optional(info.username.is_some()),
            username,
            optional(info.password.is_some()),
            password,
        ])
    }

    fn get(&self, key: &[u8; 32]) -> Option<Answer> {
        let mut entries = lock(&self.entries);
        match entries.get(key) {
            Some((expires, answer)) if Instant::now() < *expires => Some(answer.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&self, key: [u8; 32], answer: &Answer) {
        let ttl = match answer {
            Answer::Allow { .. } => self.allow_ttl,
            Answer::Deny(_) | Answer::Next => self.deny_ttl,
        };
        if ttl.is_zero() {
            return;
        }
        let mut entries = lock(&self.entries);
        entries.insert(key, (Instant::now() + ttl, answer.clone()));
    }
}

struct HttpProvider {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    timeout: Duration,
    cache: Option<AnswerCache>,
}

impl HttpProvider {
    async fn decide(&self, info: &ConnectInfo) -> Result<Outcome, ProviderError> {
        let key = self.cache.as_ref().map(|cache| cache.key(info));
        if let (Some(cache), Some(key)) = (&self.cache, &key) {
            if let Some(answer) = cache.get(key) {
                return Ok(answer.into_outcome(info));
            }
        }
        let answer = self.ask(info).await?;
        if let (Some(cache), Some(key)) = (&self.cache, key) {
            cache.insert(key, &answer);
        }
        Ok(answer.into_outcome(info))
    }

    async fn ask(&self, info: &ConnectInfo) -> Result<Answer, ProviderError> {
        let question = Question {
            client_id: &info.client_id,
            username: info.username.as_deref(),
            password: info.password.as_ref().map(|p| STANDARD.encode(p.expose())),
            peer_addr: info.peer_addr.map(|a| a.to_string()),
            listener: &info.listener,
            protocol: info.protocol.as_str(),
        };
        let body = serde_json::to_vec(&question)
            .map_err(|e| ProviderError::Failed(format!("cannot encode the question: {e}")))?;
        let response = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .body(body)
            .send()
            .await
            .map_err(|e| self.request_error(e))?;
        match response.status().as_u16() {
            200 => {}
            401 | 404 => return Ok(Answer::Next),
            status => {
                return Ok(Answer::Deny(Denial::bad_credentials(format!(
                    "the webhook answered HTTP {status}"
                ))));
            }
        }
        let body = self.read_body(response).await?;
        let reply: Reply = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::Failed(format!("the webhook's 200 answer is not {{\"allow\": bool, ...}}: {e}"))
        })?;
        if !reply.allow {
            return Ok(Answer::Deny(Denial::bad_credentials("the webhook refused the client")));
        }
        let acl = match reply.acl {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => Some(rules_from_json(&value).map_err(|reason| {
                ProviderError::Failed(format!("the webhook's `acl` is invalid: {reason}"))
            })?),
        };
        let username = match reply.username {
            Some(name) if name.is_empty() => {
                return Err(ProviderError::Failed("the webhook's `username` is empty".into()));
            }
            Some(name) => Some(name),
            None => info.username.clone(),
        };
        Ok(Answer::Allow { username, acl })
    }

    async fn read_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, ProviderError> {
        let too_large =
            || ProviderError::Failed(format!("the webhook's answer is larger than {MAX_ANSWER_LEN} bytes"));
        if response.content_length().is_some_and(|len| len > MAX_ANSWER_LEN as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.request_error(e))? {
            if body.len() + chunk.len() > MAX_ANSWER_LEN {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn request_error(&self, error: reqwest::Error) -> ProviderError {
        if error.is_timeout() {
            ProviderError::Timeout(self.timeout)
        } else {
            // `without_url`: the URL may hold credentials.
            ProviderError::Failed(format!("webhook request failed: {}", error.without_url()))
        }
    }
}

impl Authenticator for HttpProvider {
    fn name(&self) -> &str {
        TYPE_NAME
    }

    fn authenticate<'a>(&'a self, info: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
        Box::pin(self.decide(info))
    }
}
