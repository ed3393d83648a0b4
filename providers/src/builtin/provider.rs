//! The `builtin` provider: username and password checked against the builtin store.
//!
//! | CONNECT | record | answer |
//! |---|---|---|
//! | no username | — | `Next` |
//! | username | none | `Next` |
//! | username | `x509` | `Deny` (not authorized): the account logs in with its certificate only |
//! | username, no password | `basic` | `Deny` (bad credentials) |
//! | username, wrong password | `basic` | `Deny` (bad credentials) |
//! | username, right password | `basic`, disabled | `Deny` (not authorized) |
//! | username, right password | `basic` | `Allow`, ACL `None` if unrestricted, else the rules |
//!
//! A username the broker's copy of the store lacks is read from the store before it is called
//! unknown (bounded: see [`super::lookup`]), so a user added a moment ago can log in.
//!
//! An x509 record answers `Deny` rather than `Next` to a password login: the name is known to
//! be a certificate-only account, and letting a later provider admit it by password would undo
//! that. A disabled record is only reported as such to a client that gave the right password,
//! so the answer does not tell a guesser which accounts exist but are disabled.
//!
//! Password checks (PBKDF2 or bcrypt, deliberately slow) run on Tokio's blocking pool, at most
//! one per CPU at a time, and their answers are cached (setting `verify_cache`, default on). A
//! check that waited for a slot looks at the cache again, so a storm of identical logins costs
//! a handful of hash runs, not one per client.
//!
//! Settings: `pbkdf2_iterations` (count for new hashes, stored in the database so the command
//! line uses it too; default 600 000), `verify_cache` (default `true`), `poll_interval_ms`
//! (how often the store is checked for changes, 10 to 60000, default 250).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mesgd_core::auth::{Authenticator, BoxFuture, ConnectInfo, Denial, Outcome, ProviderError, Secret};
use serde::Deserialize;
use tokio::sync::Semaphore;

use super::live::{DEFAULT_POLL_INTERVAL, UserDirectory};
use super::password::{self, MAX_PBKDF2_ITERATIONS, MIN_PBKDF2_ITERATIONS};
use super::store::AuthType;
use crate::registry::{BuildContext, ConfigError, ProviderFactory, ProviderSpec};

/// The `type` of the builtin provider.
pub const TYPE_NAME: &str = "builtin";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BuiltinSettings {
    #[serde(default)]
    pbkdf2_iterations: Option<u32>,
    #[serde(default = "enabled")]
    verify_cache: bool,
    #[serde(default = "default_poll_interval_ms")]
    poll_interval_ms: u64,
}

fn enabled() -> bool {
    true
}

fn default_poll_interval_ms() -> u64 {
    DEFAULT_POLL_INTERVAL.as_millis() as u64
}

/// Builds `type = "builtin"` providers.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuiltinFactory;

impl ProviderFactory for BuiltinFactory {
    fn build(
        &self,
        spec: &ProviderSpec,
        ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError> {
        let settings: BuiltinSettings = spec.settings()?;
        if !(10..=60_000).contains(&settings.poll_interval_ms) {
            return Err(spec.invalid(format!(
                "`poll_interval_ms` must be 10 to 60000, found {}",
                settings.poll_interval_ms
            )));
        }
        if let Some(iterations) = settings.pbkdf2_iterations {
            if !(MIN_PBKDF2_ITERATIONS..=MAX_PBKDF2_ITERATIONS).contains(&iterations) {
                return Err(spec.invalid(format!(
                    "`pbkdf2_iterations` must be {MIN_PBKDF2_ITERATIONS} to {MAX_PBKDF2_ITERATIONS}, found {iterations}"
                )));
            }
        }
        let store_error = |source| ConfigError::Store { at: spec.at(), source };
        let directory = ctx.user_directory().map_err(store_error)?;
        if let Some(iterations) = settings.pbkdf2_iterations {
            directory.store().set_pbkdf2_iterations(iterations).map_err(store_error)?;
        }
        directory.set_poll_interval(Duration::from_millis(settings.poll_interval_ms));
        Ok(Arc::new(BuiltinProvider::new(directory, settings.verify_cache)))
    }
}

/// The builtin provider (see the module doc).
pub struct BuiltinProvider {
    directory: Arc<UserDirectory>,
    use_cache: bool,
    /// Bounds concurrent hash runs to the CPUs, so a storm of logins cannot take every blocking
    /// thread.
    hash_slots: Semaphore,
    hash_runs: AtomicU64,
}

impl std::fmt::Debug for BuiltinProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinProvider")
            .field("directory", &self.directory)
            .field("use_cache", &self.use_cache)
            .finish_non_exhaustive()
    }
}

impl BuiltinProvider {
    /// A provider over `directory`, caching password checks when `verify_cache` is on.
    pub fn new(directory: Arc<UserDirectory>, verify_cache: bool) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        BuiltinProvider {
            directory,
            use_cache: verify_cache,
            hash_slots: Semaphore::new(cpus),
            hash_runs: AtomicU64::new(0),
        }
    }

    /// How many password hashes this provider has computed (cache hits do not count).
    pub fn hash_runs(&self) -> u64 {
        self.hash_runs.load(Ordering::Relaxed)
    }

    /// The directory the provider reads.
    pub fn directory(&self) -> &Arc<UserDirectory> {
        &self.directory
    }

    async fn decide(&self, info: &ConnectInfo) -> Result<Outcome, ProviderError> {
        let Some(username) = info.username.as_deref() else { return Ok(Outcome::Next) };
        let Some(record) = self.directory.find_user(username).await else { return Ok(Outcome::Next) };
        if record.auth_type == AuthType::X509 {
            return Ok(Outcome::Deny(certificate_only(username)));
        }
        let Some(password) = &info.password else {
            return Ok(Outcome::Deny(Denial::bad_credentials(format!("user {username:?} gave no password"))));
        };
        let Some(stored) = record.password_hash.as_deref() else {
            return Ok(Outcome::Deny(Denial::bad_credentials(format!(
                "user {username:?} has no password set"
            ))));
        };
        let stored: Arc<str> = Arc::from(stored);
        if !self.password_matches(username, password, &stored).await? {
            return Ok(Outcome::Deny(Denial::bad_credentials(format!(
                "wrong password for user {username:?}"
            ))));
        }
        Ok(self.directory.admit(TYPE_NAME, &info.client_id, username, |current| {
            if current.auth_type == AuthType::X509 {
                return Err(certificate_only(username));
            }
            if current.password_hash.as_deref() != Some(&*stored) {
                return Err(Denial::bad_credentials(format!(
                    "the password of user {username:?} changed during login"
                )));
            }
            Ok(())
        }))
    }

    async fn password_matches(
        &self,
        username: &str,
        password: &Secret,
        stored: &Arc<str>,
    ) -> Result<bool, ProviderError> {
        let cache = self.directory.verify_cache();
        let key = self.use_cache.then(|| cache.key(username, password));
        if let Some(hit) = key.as_ref().and_then(|key| cache.get(key, stored)) {
            return Ok(hit);
        }
        let _slot = self
            .hash_slots
            .acquire()
            .await
            .map_err(|_| ProviderError::Failed("password checks are shut down".into()))?;
        // Another login with the same password may have filled the cache while this one waited.
        if let Some(hit) = key.as_ref().and_then(|key| cache.get(key, stored)) {
            return Ok(hit);
        }
        let (candidate, hash) = (password.clone(), Arc::clone(stored));
        self.hash_runs.fetch_add(1, Ordering::Relaxed);
        let verdict =
            tokio::task::spawn_blocking(move || password::verify_password(candidate.expose(), &hash))
                .await
                .map_err(|_| ProviderError::Failed("the password check task failed".into()))?
                .map_err(|e| {
                    ProviderError::Failed(format!(
                        "stored password hash of user {username:?} is unusable: {e}"
                    ))
                })?;
        if let Some(key) = key {
            cache.insert(key, Arc::clone(stored), verdict);
        }
        Ok(verdict)
    }
}

fn certificate_only(username: &str) -> Denial {
    Denial::not_authorized(format!(
        "user {username:?} logs in with a client certificate only (auth_type = x509)"
    ))
}

impl Authenticator for BuiltinProvider {
    fn name(&self) -> &str {
        TYPE_NAME
    }

    fn authenticate<'a>(&'a self, info: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
        Box::pin(self.decide(info))
    }
}
