//! The `plugin` provider: an `[[auth.providers]]` entry whose decisions a loaded library makes.
//!
//! ```toml
//! [[auth.providers]]
//! type = "plugin"
//! path = "plugins/libmy_auth.so"      # relative to the configuration file's directory
//! config = { users_file = "users.json" } # handed to the plugin's `create` as a JSON object
//! max_concurrent_calls = 16           # optional, 1 to 1024
//! timeout_ms = 2000                   # chain-level keys work as for every provider
//! on_error = "deny"
//! ```
//!
//! At start the library is loaded and checked, and one instance is created from `config`; any
//! failure refuses the start with the plugin's message. Each connect becomes one call on
//! Tokio's blocking pool, so a slow or hanging plugin never stalls the async workers. At most
//! `max_concurrent_calls` calls of one entry run at once; further connects wait for a free
//! slot (within their `timeout_ms`), so a plugin whose calls hang ties up that many blocking
//! threads and no more. A call that outlives its timeout is abandoned — the client was already
//! decided without it — and logged when it finally returns.
//!
//! The plugin's answer is checked as strictly as a webhook's: unknown fields, a `username` or
//! `acl` with anything but `allow`, an ACL rule that is not a valid topic filter, more than
//! [`MAX_RULES`] rules — each makes the answer invalid, which is a failure of the provider:
//! the chain denies the client (fail closed) unless the entry says `on_error = "next"`. The
//! provider's name in logs and identities is `plugin:<name>`; passwords are never logged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesgd_core::acl::{Permission, Rule};
use mesgd_core::auth::{Authenticator, BoxFuture, ConnectInfo, Denial, Identity, Outcome, ProviderError};
use mesgd_plugin_api::{Decision, DenyCode, Password, Request, Response};
use mesgd_providers::{BuildContext, ConfigError, ProviderFactory, ProviderSpec};
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::library::{Instance, PluginLibrary, sanitize};

/// The `type` of plugin providers.
pub const TYPE_NAME: &str = "plugin";

/// The most ACL rules one answer may carry: enough for any real policy, small enough that a
/// hostile answer cannot make every ACL check slow.
pub const MAX_RULES: usize = 1_000;

/// The default bound on one entry's concurrent calls.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 16;

/// The largest `max_concurrent_calls` accepted.
const MAX_CONCURRENT_CALLS_LIMIT: usize = 1024;

/// How long `create` may take at start before the start is refused.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginSettings {
    path: PathBuf,
    #[serde(default)]
    config: toml::Table,
    #[serde(default = "default_max_concurrent_calls")]
    max_concurrent_calls: usize,
}

fn default_max_concurrent_calls() -> usize {
    DEFAULT_MAX_CONCURRENT_CALLS
}

/// Builds `type = "plugin"` providers.
#[derive(Clone, Copy, Debug, Default)]
pub struct PluginFactory;

impl ProviderFactory for PluginFactory {
    fn build(
        &self,
        spec: &ProviderSpec,
        ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError> {
        let settings: PluginSettings = spec.settings()?;
        if !(1..=MAX_CONCURRENT_CALLS_LIMIT).contains(&settings.max_concurrent_calls) {
            return Err(spec.invalid(format!(
                "`max_concurrent_calls` must be 1 to {MAX_CONCURRENT_CALLS_LIMIT}, found {}",
                settings.max_concurrent_calls
            )));
        }
        let config = table_to_json(&settings.config, "config").map_err(|message| spec.invalid(message))?;
        let config = serde_json::to_vec(&config).map_err(|e| spec.invalid(format!("`config`: {e}")))?;
        let resolved = ctx.resolve(&settings.path);
        // An absolute path: a bare file name must not send the dynamic loader searching the
        // system's library directories.
        let path = std::fs::canonicalize(&resolved).map_err(|source| ConfigError::File {
            at: spec.at(),
            key: "path".to_owned(),
            path: resolved.clone(),
            source,
        })?;
        let library = Arc::new(PluginLibrary::open(&path).map_err(|e| spec.invalid(e.to_string()))?);
        let instance = create_instance(&library, config, CREATE_TIMEOUT).map_err(|message| {
            spec.invalid(format!(
                "plugin {} ({}) refused its `config`: {message}",
                library.name(),
                path.display()
            ))
        })?;
        tracing::info!(
            plugin = library.name(),
            version = library.version(),
            abi = %library.abi_version(),
            path = %path.display(),
            "auth plugin loaded"
        );
        Ok(Arc::new(PluginProvider {
            name: format!("plugin:{}", library.name()),
            instance: Arc::new(instance),
            slots: Arc::new(Semaphore::new(settings.max_concurrent_calls)),
            max_calls: settings.max_concurrent_calls,
            timeout: spec.timeout,
        }))
    }
}

/// Runs the plugin's `create` on a thread of its own, so that a `create` that never returns
/// refuses the start after `limit` instead of hanging it.
pub(crate) fn create_instance(
    library: &Arc<PluginLibrary>,
    config_json: Vec<u8>,
    limit: Duration,
) -> Result<Instance, String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let worker = Arc::clone(library);
    std::thread::Builder::new()
        .name(format!("mesgd-plugin-create-{}", library.name()))
        .spawn(move || {
            // If nobody waits any more, the instance is dropped (destroyed) right here.
            let _ = tx.send(worker.create(&config_json));
        })
        .map_err(|e| format!("cannot start a thread for create: {e}"))?;
    match rx.recv_timeout(limit) {
        Ok(created) => created,
        Err(_) => Err(format!("create did not return within {limit:?}")),
    }
}

/// Converts the `config` table into the JSON object the plugin receives. TOML dates become
/// RFC 3339 strings; a float JSON cannot hold (NaN, infinity) is refused, naming the key.
fn table_to_json(table: &toml::Table, at: &str) -> Result<serde_json::Value, String> {
    table
        .iter()
        .map(|(key, value)| Ok((key.clone(), value_to_json(value, &format!("{at}.{key}"))?)))
        .collect::<Result<serde_json::Map<_, _>, String>>()
        .map(serde_json::Value::Object)
}

fn value_to_json(value: &toml::Value, at: &str) -> Result<serde_json::Value, String> {
    use serde_json::Value as Json;
    Ok(match value {
        toml::Value::String(s) => Json::String(s.clone()),
        toml::Value::Integer(i) => Json::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .ok_or_else(|| format!("`{at}` is {f}, which JSON cannot represent"))?,
        toml::Value::Boolean(b) => Json::Bool(*b),
        toml::Value::Datetime(d) => Json::String(d.to_string()),
        toml::Value::Array(items) => Json::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| value_to_json(item, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => table_to_json(table, at)?,
    })
}

struct PluginProvider {
    /// `plugin:<name>`.
    name: String,
    instance: Arc<Instance>,
    /// One permit per call that may run at once.
    slots: Arc<Semaphore>,
    max_calls: usize,
    timeout: Duration,
}

impl PluginProvider {
    async fn decide(&self, info: &ConnectInfo) -> Result<Outcome, ProviderError> {
        let request = serde_json::to_vec(&request_for(info))
            .map_err(|e| ProviderError::Failed(format!("cannot encode the request: {e}")))?;
        let permit = match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                tracing::warn!(
                    provider = %self.name,
                    max_concurrent_calls = self.max_calls,
                    "every call slot of the plugin is busy (calls are slow or hang); the connect waits"
                );
                Arc::clone(&self.slots)
                    .acquire_owned()
                    .await
                    .map_err(|_| ProviderError::Failed("the plugin's call slots are closed".to_owned()))?
            }
        };
        let instance = Arc::clone(&self.instance);
        let (name, timeout) = (self.name.clone(), self.timeout);
        let answer = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let answer = instance.authenticate(&request);
            let took = started.elapsed();
            if took > timeout {
                tracing::warn!(provider = %name, ?took, ?timeout, "a plugin call returned after its timeout; the connect had been decided without it");
            }
            drop(permit);
            answer
        })
        .await
        .map_err(|e| ProviderError::Failed(format!("the plugin call did not complete: {e}")))?
        .map_err(|e| ProviderError::Failed(e.to_string()))?;
        decode_answer(&answer, info, &self.name).map_err(ProviderError::Failed)
    }
}

impl Authenticator for PluginProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn authenticate<'a>(&'a self, info: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
        Box::pin(self.decide(info))
    }
}

/// The request JSON for one connect.
fn request_for(info: &ConnectInfo) -> Request {
    Request::new(info.client_id.clone(), info.protocol.as_str(), &*info.listener)
        .with_username(info.username.clone())
        .with_password(info.password.as_ref().map(|p| Password::new(p.expose())))
        .with_peer_addr(info.peer_addr.map(|a| a.to_string()))
        .with_cert_common_name(info.tls.as_ref().and_then(|t| t.common_name.clone()))
}

/// Turns the plugin's answer into an outcome; `Err` says what is wrong with the answer.
fn decode_answer(bytes: &[u8], info: &ConnectInfo, provider: &str) -> Result<Outcome, String> {
    let answer: Response = serde_json::from_slice(bytes)
        .map_err(|e| format!("the plugin's answer is invalid: {}", sanitize(&e.to_string())))?;
    let reason = answer.reason.as_deref().map(sanitize);
    let misplaced = |field: &str| {
        Err(format!(
            "the plugin's answer is invalid: `{field}` is not allowed with result {:?}",
            answer.result
        ))
    };
    match answer.result {
        Decision::Allow => {
            if answer.code.is_some() {
                return misplaced("code");
            }
            let username = match answer.username {
                Some(name) if name.is_empty() => {
                    return Err("the plugin's answer is invalid: `username` is empty".to_owned());
                }
                Some(name) => Some(name),
                None => info.username.clone(),
            };
            let acl = answer.acl.map(|rules| rules_from_answer(&rules)).transpose()?;
            if let Some(reason) = reason {
                tracing::debug!(provider, client_id = %info.client_id, %reason, "plugin allowed the client");
            }
            Ok(Outcome::Allow(Identity::new(provider, info.client_id.clone(), username, acl)))
        }
        Decision::Deny => {
            if answer.username.is_some() {
                return misplaced("username");
            }
            if answer.acl.is_some() {
                return misplaced("acl");
            }
            let message = match reason {
                Some(reason) => format!("{provider} denied the client: {reason}"),
                None => format!("{provider} denied the client"),
            };
            Ok(Outcome::Deny(match answer.code.unwrap_or_default() {
                DenyCode::BadCredentials => Denial::bad_credentials(message),
                DenyCode::NotAuthorized => Denial::not_authorized(message),
            }))
        }
        Decision::Next => {
            for (field, present) in [
                ("username", answer.username.is_some()),
                ("acl", answer.acl.is_some()),
                ("code", answer.code.is_some()),
            ] {
                if present {
                    return misplaced(field);
                }
            }
            if let Some(reason) = reason {
                tracing::debug!(provider, client_id = %info.client_id, %reason, "plugin passed the client on");
            }
            Ok(Outcome::Next)
        }
    }
}

/// The answer's ACL as validated rules.
fn rules_from_answer(rules: &[mesgd_plugin_api::AclRule]) -> Result<Vec<Rule>, String> {
    if rules.len() > MAX_RULES {
        return Err(format!("the plugin's ACL has {} rules, more than the {MAX_RULES} allowed", rules.len()));
    }
    rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let permission = match rule.permission {
                mesgd_plugin_api::Permission::Read => Permission::Read,
                mesgd_plugin_api::Permission::Write => Permission::Write,
                mesgd_plugin_api::Permission::ReadWrite => Permission::ReadWrite,
                mesgd_plugin_api::Permission::Deny => Permission::Deny,
            };
            let rule = Rule::new(rule.pattern.clone(), permission);
            rule.validate().map_err(|e| format!("the plugin's ACL rule {} is invalid: {e}", i + 1))?;
            Ok(rule)
        })
        .collect()
}

#[cfg(any(test, feature = "fuzzing"))]
#[path = "provider_fuzzing.rs"]
pub mod fuzzing;

#[cfg(test)]
mod tests {
    use super::*;
    use mesgd_core::auth::{DenyReason, Protocol, Secret, TlsInfo};
    use serde_json::json;

    fn info() -> ConnectInfo {
        ConnectInfo::new(Protocol::Mqtt311, "c1", "mqtt").with_username(Some("alice".into()))
    }

    fn decode(answer: &serde_json::Value) -> Result<Outcome, String> {
        decode_answer(answer.to_string().as_bytes(), &info(), "plugin:t")
    }

    #[test]
    fn valid_answers_become_outcomes() {
        match decode(&json!({"result": "allow"})) {
            Ok(Outcome::Allow(id)) => {
                assert_eq!(
                    (id.provider.as_str(), id.username.as_deref(), id.acl),
                    ("plugin:t", Some("alice"), None)
                );
            }
            other => panic!("{other:?}"),
        }
        match decode(&json!({"result": "allow", "username": "bob", "acl": [
            {"pattern": "a/%u/#", "permission": "rw"}, {"pattern": "#", "permission": "deny"}], "reason": "ok"}))
        {
            Ok(Outcome::Allow(id)) => {
                assert_eq!(id.username.as_deref(), Some("bob"));
                assert_eq!(
                    id.acl,
                    Some(vec![Rule::new("a/%u/#", Permission::ReadWrite), Rule::new("#", Permission::Deny)])
                );
            }
            other => panic!("{other:?}"),
        }
        match decode(&json!({"result": "allow", "acl": []})) {
            Ok(Outcome::Allow(id)) => assert_eq!(id.acl, Some(vec![]), "[] is deny-all, not unrestricted"),
            other => panic!("{other:?}"),
        }
        match decode(&json!({"result": "deny", "reason": "line1\nline2"})) {
            Ok(Outcome::Deny(d)) => {
                assert_eq!(d.reason, DenyReason::BadCredentials);
                assert_eq!(d.message, "plugin:t denied the client: line1 line2");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode(&json!({"result": "deny", "code": "not_authorized"})),
            Ok(Outcome::Deny(d)) if d.reason == DenyReason::NotAuthorized
        ));
        assert!(matches!(decode(&json!({"result": "next", "reason": "unknown user"})), Ok(Outcome::Next)));
    }

    #[test]
    fn malformed_answers_are_refused() {
        let too_many: Vec<_> =
            (0..=MAX_RULES).map(|_| json!({"pattern": "a", "permission": "read"})).collect();
        let cases: &[(&[u8], &str)] = &[
            (b"", "answer is invalid"),
            (b"not json", "answer is invalid"),
            (b"{\"result\": \"allow\"", "answer is invalid"),
            (b"\xff\xfe", "answer is invalid"),
            (b"[]", "answer is invalid"),
            (b"null", "answer is invalid"),
            (br#"{"result": "yes"}"#, "answer is invalid"),
            (br#"{"allow": true}"#, "answer is invalid"),
            (br#"{"result": "allow", "acls": []}"#, "unknown field `acls`"),
            (br##"{"result": "allow", "acl": "#"}"##, "answer is invalid"),
            (
                br#"{"result": "allow", "acl": [{"pattern": "a/#/b", "permission": "read"}]}"#,
                "ACL rule 1 is invalid",
            ),
            (
                br#"{"result": "allow", "acl": [{"pattern": "", "permission": "read"}]}"#,
                "ACL rule 1 is invalid",
            ),
            (br#"{"result": "allow", "acl": [{"pattern": "a", "permission": "READ"}]}"#, "answer is invalid"),
            (br#"{"result": "allow", "username": ""}"#, "`username` is empty"),
            (br#"{"result": "allow", "code": "not_authorized"}"#, "`code` is not allowed"),
            (br#"{"result": "deny", "acl": []}"#, "`acl` is not allowed"),
            (br#"{"result": "deny", "username": "x"}"#, "`username` is not allowed"),
            (br#"{"result": "next", "acl": null, "username": "x"}"#, "`username` is not allowed"),
            (br#"{"result": "next", "code": "bad_credentials"}"#, "`code` is not allowed"),
            (br#"{"result": "deny", "code": "teapot"}"#, "answer is invalid"),
        ];
        for (bytes, expected) in cases {
            match decode_answer(bytes, &info(), "plugin:t") {
                Ok(outcome) => panic!("{:?} accepted as {outcome:?}", String::from_utf8_lossy(bytes)),
                Err(message) => assert!(
                    message.contains(expected),
                    "{message:?} for {:?}",
                    String::from_utf8_lossy(bytes)
                ),
            }
        }
        let message = decode(&json!({"result": "allow", "acl": too_many})).expect_err("too many rules");
        assert!(message.contains("more than the 1000 allowed"), "{message}");
    }

    #[test]
    fn the_request_carries_every_field_with_a_base64_password() {
        let info = info()
            .with_password(Some(Secret::new(b"pw\x00".to_vec())))
            .with_peer_addr(Some("127.0.0.1:4000".parse().expect("address")))
            .with_tls(Some(TlsInfo::new(vec![vec![1]], Some("device-7".into()), vec![])));
        let json = serde_json::to_value(request_for(&info)).expect("serializes");
        assert_eq!(
            json,
            json!({"client_id": "c1", "username": "alice", "password": "cHcA", "peer_addr": "127.0.0.1:4000",
                   "protocol": "mqtt-3.1.1", "listener": "mqtt", "cert_common_name": "device-7"})
        );
        let bare =
            serde_json::to_value(request_for(&ConnectInfo::new(Protocol::Mqtt5, "c2", "ws"))).expect("json");
        assert_eq!(bare["username"], serde_json::Value::Null);
        assert_eq!(bare["password"], serde_json::Value::Null);
    }

    #[test]
    fn the_config_table_becomes_json() {
        let table: toml::Table =
            toml::from_str("a = 1\nb = \"x\"\nc = [true, 2.5]\nd = { e = 1979-05-27T07:32:00Z }\nf = []\n")
                .expect("toml");
        assert_eq!(
            table_to_json(&table, "config").expect("converts"),
            json!({"a": 1, "b": "x", "c": [true, 2.5], "d": {"e": "1979-05-27T07:32:00Z"}, "f": []})
        );
        let table: toml::Table = toml::from_str("x = { y = [1, nan] }").expect("toml");
        assert_eq!(
            table_to_json(&table, "config").expect_err("NaN"),
            "`config.x.y[1]` is NaN, which JSON cannot represent"
        );
    }
}
