//! The provider registry: from `[[auth.providers]]` tables to an ordered [`Chain`].
//!
//! Each table names its provider with `type`. The registry takes out the keys every provider
//! accepts — `type`, `on_error` (`"deny"`, the default, or `"next"`) and `timeout_ms` — and
//! hands the rest to the [`ProviderFactory`] registered under that type, which deserializes its
//! own settings (unknown keys are an error). The built-in providers are registered exactly like
//! a third-party one ([`Registry::with_builtin_providers`]), so a dynamic-plugin factory
//! registered later through [`Registry::register`] gets the same treatment.
//!
//! Errors name the table by its 1-based position in the chain and its type, e.g.
//! `auth.providers[2] (type = "jwt"): unknown field `secrt`, expected one of ...`.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mesgd_core::auth::{Authenticator, Chain, ChainEntry, DEFAULT_PROVIDER_TIMEOUT, OnError};
use serde::de::DeserializeOwned;

#[cfg(feature = "builtin")]
use crate::builtin::{StoreError, UserDirectory};

/// The longest `timeout_ms` accepted: a provider that needs more than ten minutes to decide
/// about one connect is misconfigured.
const MAX_TIMEOUT_MS: i64 = 600_000;

/// One `[[auth.providers]]` table after the chain-level keys were taken out.
#[derive(Clone)]
#[non_exhaustive]
pub struct ProviderSpec {
    /// The table's 1-based position in the chain, for messages.
    pub index: usize,
    /// The value of `type`.
    pub type_name: String,
    /// What the chain does when this provider fails (`on_error`).
    pub on_error: OnError,
    /// The limit on one decision (`timeout_ms`, or the factory's default).
    pub timeout: Duration,
    /// The provider's own keys: everything but `type`, `on_error` and `timeout_ms`.
    pub settings: toml::Table,
}

impl fmt::Debug for ProviderSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Settings may hold secrets (a JWT key, a webhook API key): show their names only.
        f.debug_struct("ProviderSpec")
            .field("index", &self.index)
            .field("type_name", &self.type_name)
            .field("on_error", &self.on_error)
            .field("timeout", &self.timeout)
            .field("settings", &self.settings.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ProviderSpec {
    /// A spec for the provider at 1-based `index`, with the chain defaults.
    pub fn new(index: usize, type_name: impl Into<String>, settings: toml::Table) -> Self {
        ProviderSpec {
            index,
            type_name: type_name.into(),
            on_error: OnError::Deny,
            timeout: DEFAULT_PROVIDER_TIMEOUT,
            settings,
        }
    }

    /// Deserializes the provider's own settings. Give `T` `#[serde(deny_unknown_fields)]` so a
    /// misspelt key is refused with the list of the expected ones.
    pub fn settings<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        T::deserialize(toml::Value::Table(self.settings.clone())).map_err(|error| {
            // toml's message may span lines; one line reads better after the position prefix.
            let message = error.to_string().trim().replace('\n', " ");
            self.invalid(message)
        })
    }

    /// An error about this provider's configuration.
    pub fn invalid(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { at: self.at(), message: message.into() }
    }

    /// Where this provider sits in the configuration, for error messages.
    pub fn at(&self) -> ProviderAt {
        ProviderAt { index: self.index, type_name: Some(self.type_name.clone()) }
    }
}

/// A provider's place in the configuration: displays as `auth.providers[2] (type = "jwt")`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderAt {
    /// The 1-based position of the table.
    pub index: usize,
    /// The table's `type`, when it has one.
    pub type_name: Option<String>,
}

impl fmt::Display for ProviderAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "auth.providers[{}]", self.index)?;
        if let Some(type_name) = &self.type_name {
            write!(f, " (type = {type_name:?})")?;
        }
        Ok(())
    }
}

/// A configuration the chain cannot be built from. Every message says which table is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The table has no `type` key.
    #[error("{at}: missing key `type`; registered types: {known}")]
    MissingType {
        /// The table.
        at: ProviderAt,
        /// The registered type names, comma separated.
        known: String,
    },
    /// No factory is registered under the table's `type`.
    #[error("{at}: unknown provider type; registered types: {known}")]
    UnknownType {
        /// The table.
        at: ProviderAt,
        /// The registered type names, comma separated.
        known: String,
    },
    /// A key has a wrong value, a key is unknown, or keys contradict each other.
    #[error("{at}: {message}")]
    Invalid {
        /// The table.
        at: ProviderAt,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The provider only works together with another provider that the chain lacks.
    #[error("{at}: requires a provider of type {required:?} in the same chain")]
    MissingRequirement {
        /// The table.
        at: ProviderAt,
        /// The type that must also be configured.
        required: String,
    },
    /// A file named by a key could not be read.
    #[error("{at}: cannot read `{key}` file {}: {source}", path.display())]
    File {
        /// The table.
        at: ProviderAt,
        /// The key that names the file.
        key: String,
        /// The file, as resolved against the configuration's directory.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The builtin user database could not be opened.
    #[cfg(feature = "builtin")]
    #[error("{at}: {source}")]
    Store {
        /// The table.
        at: ProviderAt,
        /// What failed.
        source: StoreError,
    },
    /// Any other failure of a provider's factory (for third-party providers).
    #[error("{at}: {source}")]
    Other {
        /// The table.
        at: ProviderAt,
        /// What failed.
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
}

/// Builds one kind of provider from its settings.
pub trait ProviderFactory: Send + Sync {
    /// Builds a provider from its table. Deserialize the settings with
    /// [`ProviderSpec::settings`] and report problems with [`ProviderSpec::invalid`].
    fn build(
        &self,
        spec: &ProviderSpec,
        ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError>;

    /// Provider types that must also be in the chain for this one to work.
    fn requires(&self) -> &[&str] {
        &[]
    }

    /// The decision time limit when the table sets no `timeout_ms`.
    fn default_timeout(&self) -> Duration {
        DEFAULT_PROVIDER_TIMEOUT
    }
}

/// What the providers of one chain share while they are built.
pub struct BuildContext {
    /// `storage.dir`: where the builtin store (`config.db`) and other state live.
    pub storage_dir: PathBuf,
    /// The directory relative file names in provider settings are resolved against (the
    /// configuration file's directory).
    pub base_dir: PathBuf,
    services: Services,
}

/// Services that providers share and that outlive the building of the chain — the builtin user
/// directory today, a token key store or a session registry tomorrow — at most one per type.
///
/// A typed slot rather than a field per service, so that the chain builder stays ignorant of
/// what providers share, and the broker can keep the very instances the providers use (the
/// REST API changes users through the same directory that pushes changes to connections).
#[derive(Clone, Default)]
pub struct Services(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Services {
    /// The service of type `T`, if one was opened.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0.get(&TypeId::of::<T>()).and_then(|s| Arc::clone(s).downcast::<T>().ok())
    }

    /// The service of type `T`, opened with `open` if there is none yet.
    pub fn get_or_try_insert_with<T: Any + Send + Sync, E>(
        &mut self,
        open: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        if let Some(existing) = self.get::<T>() {
            return Ok(existing);
        }
        let service = Arc::new(open()?);
        self.0.insert(TypeId::of::<T>(), Arc::clone(&service) as Arc<dyn Any + Send + Sync>);
        Ok(service)
    }

    /// Installs `service`, replacing one of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, service: Arc<T>) {
        self.0.insert(TypeId::of::<T>(), service);
    }
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Services({} open)", self.0.len())
    }
}

impl fmt::Debug for BuildContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuildContext")
            .field("storage_dir", &self.storage_dir)
            .field("base_dir", &self.base_dir)
            .finish_non_exhaustive()
    }
}

impl BuildContext {
    /// A context for a broker whose `storage.dir` is `storage_dir`; relative file names resolve
    /// against the working directory until [`BuildContext::with_base_dir`] says otherwise.
    pub fn new(storage_dir: impl Into<PathBuf>) -> Self {
        BuildContext {
            storage_dir: storage_dir.into(),
            base_dir: PathBuf::from("."),
            services: Services::default(),
        }
    }

    /// Sets the directory relative file names resolve against.
    pub fn with_base_dir(mut self, base_dir: impl Into<PathBuf>) -> Self {
        self.base_dir = base_dir.into();
        self
    }

    /// `path` if absolute, else `path` under [`BuildContext::base_dir`].
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.base_dir.join(path) }
    }

    /// The builtin user directory over `<storage_dir>/config.db`, opened on first use and then
    /// shared by every provider of the chain (builtin and x509 see the same records and push
    /// live changes through the same updaters).
    #[cfg(feature = "builtin")]
    pub fn user_directory(&mut self) -> Result<Arc<UserDirectory>, StoreError> {
        let db = crate::builtin::config_db_path(&self.storage_dir);
        self.services.get_or_try_insert_with(|| UserDirectory::open(&db))
    }

    /// The login sessions over the builtin user directory, opened on first use (the REST
    /// routes of `/auth` and the content-routing upgrade share them).
    #[cfg(all(feature = "builtin", feature = "jwt"))]
    pub fn sessions(&mut self) -> Result<Arc<crate::sessions::Sessions>, StoreError> {
        let directory = self.user_directory()?;
        self.services.get_or_try_insert_with(|| {
            crate::sessions::Sessions::open(directory, std::time::SystemTime::now())
        })
    }

    /// The services opened so far (by providers while the chain was built).
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// The services, for whoever outlives the building: the server keeps them.
    pub fn services_mut(&mut self) -> &mut Services {
        &mut self.services
    }
}

/// The provider types the chain can be built from.
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, Arc<dyn ProviderFactory>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("types", &self.factories.keys().collect::<Vec<_>>()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// A registry with the providers compiled into this crate: `builtin`, `x509`, `jwt`, `http`
    /// (each behind its cargo feature).
    pub fn with_builtin_providers() -> Self {
        #[allow(unused_mut)] // with every feature off, nothing is registered
        let mut registry = Registry::new();
        #[cfg(feature = "builtin")]
        registry.register(crate::builtin::TYPE_NAME, Arc::new(crate::builtin::BuiltinFactory));
        #[cfg(feature = "x509")]
        registry.register(crate::x509::TYPE_NAME, Arc::new(crate::x509::X509Factory));
        #[cfg(feature = "jwt")]
        registry.register(crate::jwt::TYPE_NAME, Arc::new(crate::jwt::JwtFactory));
        #[cfg(feature = "http")]
        registry.register(crate::http::TYPE_NAME, Arc::new(crate::http::HttpFactory));
        #[cfg(all(feature = "builtin", feature = "jwt", feature = "tokens"))]
        registry
            .register(crate::session_provider::TYPE_NAME, Arc::new(crate::session_provider::SessionFactory));
        registry
    }

    /// Registers `factory` for tables with `type = type_name`, replacing an earlier one.
    pub fn register(&mut self, type_name: &str, factory: Arc<dyn ProviderFactory>) {
        self.factories.insert(type_name.to_owned(), factory);
    }

    /// The registered type names, sorted.
    pub fn type_names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// Builds the chain from the `[[auth.providers]]` tables, in order.
    ///
    /// Keys every table accepts: `type` (required), `on_error` (`"deny"`, the default, or
    /// `"next"`) and `timeout_ms` (1 to 600000; the factory's default otherwise). Every other
    /// key goes to the factory. Requirements between providers (x509 needs builtin) are checked
    /// before anything is built.
    pub fn build_chain(
        &self,
        tables: &[toml::Table],
        allow_anonymous: bool,
        ctx: &mut BuildContext,
    ) -> Result<Chain, ConfigError> {
        let planned = tables
            .iter()
            .enumerate()
            .map(|(position, table)| self.plan(position + 1, table))
            .collect::<Result<Vec<_>, _>>()?;
        for (spec, factory) in &planned {
            for required in factory.requires() {
                if !planned.iter().any(|(other, _)| other.type_name == *required) {
                    return Err(ConfigError::MissingRequirement {
                        at: spec.at(),
                        required: (*required).to_owned(),
                    });
                }
            }
        }
        let mut entries = Vec::with_capacity(planned.len());
        for (spec, factory) in &planned {
            let provider = factory.build(spec, ctx)?;
            entries.push(ChainEntry { provider, on_error: spec.on_error, timeout: spec.timeout });
        }
        Ok(Chain::new(entries, allow_anonymous))
    }

    /// Takes the chain-level keys out of one table and finds its factory.
    fn plan(
        &self,
        index: usize,
        table: &toml::Table,
    ) -> Result<(ProviderSpec, Arc<dyn ProviderFactory>), ConfigError> {
        let mut settings = table.clone();
        let unnamed = ProviderAt { index, type_name: None };
        let type_name = match settings.remove("type") {
            None => return Err(ConfigError::MissingType { at: unnamed, known: self.known_types() }),
            Some(toml::Value::String(name)) => name,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    at: unnamed,
                    message: format!("`type` must be a string, found {}", other.type_str()),
                });
            }
        };
        let Some(factory) = self.factories.get(&type_name) else {
            return Err(ConfigError::UnknownType {
                at: ProviderAt { index, type_name: Some(type_name) },
                known: self.known_types(),
            });
        };
        let mut spec = ProviderSpec::new(index, type_name, toml::Table::new());
        spec.on_error = match settings.remove("on_error") {
            None => OnError::Deny,
            Some(toml::Value::String(value)) if value == "deny" => OnError::Deny,
            Some(toml::Value::String(value)) if value == "next" => OnError::Next,
            Some(other) => {
                return Err(spec.invalid(format!("`on_error` must be \"deny\" or \"next\", found {other}")));
            }
        };
        spec.timeout = match settings.remove("timeout_ms") {
            None => factory.default_timeout(),
            Some(toml::Value::Integer(ms)) if (1..=MAX_TIMEOUT_MS).contains(&ms) => {
                Duration::from_millis(ms.unsigned_abs())
            }
            Some(other) => {
                return Err(spec.invalid(format!(
                    "`timeout_ms` must be an integer from 1 to {MAX_TIMEOUT_MS}, found {other}"
                )));
            }
        };
        spec.settings = settings;
        Ok((spec, Arc::clone(factory)))
    }

    fn known_types(&self) -> String {
        if self.factories.is_empty() {
            return "(none)".to_owned();
        }
        self.factories.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesgd_core::auth::{BoxFuture, ConnectInfo, Outcome, ProviderError};

    struct Named(String);
    impl Authenticator for Named {
        fn name(&self) -> &str {
            &self.0
        }
        fn authenticate<'a>(&'a self, _: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
            Box::pin(async { Ok(Outcome::Next) })
        }
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // only the keys' presence matters here
    struct DemoSettings {
        label: String,
        #[serde(default)]
        level: u32,
    }

    struct Demo;
    impl ProviderFactory for Demo {
        fn build(
            &self,
            spec: &ProviderSpec,
            _: &mut BuildContext,
        ) -> Result<Arc<dyn Authenticator>, ConfigError> {
            let settings: DemoSettings = spec.settings()?;
            Ok(Arc::new(Named(settings.label)))
        }
        fn default_timeout(&self) -> Duration {
            Duration::from_millis(1234)
        }
    }

    struct NeedsDemo;
    impl ProviderFactory for NeedsDemo {
        fn build(
            &self,
            _: &ProviderSpec,
            _: &mut BuildContext,
        ) -> Result<Arc<dyn Authenticator>, ConfigError> {
            Ok(Arc::new(Named("needs".into())))
        }
        fn requires(&self) -> &[&str] {
            &["demo"]
        }
    }

    fn registry() -> Registry {
        let mut registry = Registry::new();
        registry.register("demo", Arc::new(Demo));
        registry.register("needs", Arc::new(NeedsDemo));
        registry
    }

    fn tables(text: &str) -> Vec<toml::Table> {
        #[derive(serde::Deserialize)]
        struct Doc {
            p: Vec<toml::Table>,
        }
        toml::from_str::<Doc>(text).expect("test TOML parses").p
    }

    fn build(text: &str) -> Result<Chain, ConfigError> {
        registry().build_chain(&tables(text), false, &mut BuildContext::new("/nonexistent"))
    }

    #[test]
    fn chain_level_keys_are_taken_out_and_applied_in_order() {
        let chain = build(
            r#"
            [[p]]
            type = "demo"
            label = "first"
            on_error = "next"
            timeout_ms = 250
            [[p]]
            type = "demo"
            label = "second"
            "#,
        )
        .expect("valid chain");
        let entries = chain.entries();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].provider.name(), "first");
        assert_eq!(entries[0].on_error, OnError::Next);
        assert_eq!(entries[0].timeout, Duration::from_millis(250));
        assert_eq!(entries[1].provider.name(), "second");
        assert_eq!(entries[1].on_error, OnError::Deny);
        assert_eq!(entries[1].timeout, Duration::from_millis(1234), "factory default applies");
    }

    #[test]
    fn malformed_tables_are_refused_with_the_position_and_key() {
        let cases: &[(&str, &str)] = &[
            ("[[p]]\nlabel = \"x\"", "auth.providers[1]: missing key `type`; registered types: demo, needs"),
            ("[[p]]\ntype = 3", "auth.providers[1]: `type` must be a string, found integer"),
            (
                "[[p]]\ntype = \"demo\"\nlabel = \"a\"\n[[p]]\ntype = \"ldap\"",
                "auth.providers[2] (type = \"ldap\"): unknown provider type; registered types: demo, needs",
            ),
            (
                "[[p]]\ntype = \"demo\"\nlabel = \"a\"\nlabl = \"b\"",
                "auth.providers[1] (type = \"demo\"): unknown field `labl`, expected `label` or `level`",
            ),
            ("[[p]]\ntype = \"demo\"", "auth.providers[1] (type = \"demo\"): missing field `label`"),
            (
                "[[p]]\ntype = \"demo\"\nlabel = \"a\"\non_error = \"allow\"",
                "auth.providers[1] (type = \"demo\"): `on_error` must be \"deny\" or \"next\", found \"allow\"",
            ),
            (
                "[[p]]\ntype = \"demo\"\nlabel = \"a\"\ntimeout_ms = 0",
                "auth.providers[1] (type = \"demo\"): `timeout_ms` must be an integer from 1 to 600000, found 0",
            ),
            (
                "[[p]]\ntype = \"demo\"\nlabel = \"a\"\ntimeout_ms = \"5s\"",
                "auth.providers[1] (type = \"demo\"): `timeout_ms` must be an integer from 1 to 600000, found \"5s\"",
            ),
            (
                "[[p]]\ntype = \"demo\"\nlabel = 5",
                "auth.providers[1] (type = \"demo\"): invalid type: integer `5`, expected a string in `label`",
            ),
            (
                "[[p]]\ntype = \"needs\"",
                "auth.providers[1] (type = \"needs\"): requires a provider of type \"demo\" in the same chain",
            ),
        ];
        for (text, expected) in cases {
            match build(text) {
                Ok(_) => panic!("accepted: {text}"),
                Err(error) => assert_eq!(error.to_string(), *expected, "for {text:?}"),
            }
        }
    }

    #[test]
    fn debug_output_shows_setting_names_but_not_values() {
        let spec = ProviderSpec::new(1, "jwt", tables("[[p]]\nsecret = \"k3y-material\"").remove(0));
        let shown = format!("{spec:?}");
        assert!(shown.contains("\"secret\""), "{shown}");
        assert!(!shown.contains("k3y-material"), "{shown}");
    }

    #[test]
    fn a_requirement_later_in_the_chain_is_satisfied() {
        let chain = build("[[p]]\ntype = \"needs\"\n[[p]]\ntype = \"demo\"\nlabel = \"d\"").expect("valid");
        assert_eq!(chain.entries().len(), 2);
    }

    #[test]
    fn an_empty_registry_says_so() {
        let error = Registry::new()
            .build_chain(&tables("[[p]]\ntype = \"demo\""), false, &mut BuildContext::new("/x"))
            .expect_err("nothing registered");
        assert_eq!(
            error.to_string(),
            "auth.providers[1] (type = \"demo\"): unknown provider type; registered types: (none)"
        );
    }
}
