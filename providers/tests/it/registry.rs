//! The registry with the providers this crate ships.

use std::sync::Arc;
use std::time::Duration;

use mesgd_core::auth::{Authenticator, BoxFuture, ConnectInfo, OnError, Outcome, ProviderError};
use mesgd_providers::{BuildContext, ConfigError, ProviderFactory, ProviderSpec, Registry};

use crate::support::providers;

const SECRET: &str = "an HS256 secret of at least thirty-two bytes";

fn build(text: &str) -> Result<mesgd_core::auth::Chain, ConfigError> {
    let dir = tempfile::tempdir().expect("temp dir");
    Registry::with_builtin_providers().build_chain(&providers(text), true, &mut BuildContext::new(dir.path()))
}

#[test]
fn the_shipped_providers_are_registered() {
    let registry = Registry::with_builtin_providers();
    assert_eq!(registry.type_names().collect::<Vec<_>>(), ["builtin", "http", "jwt", "session", "x509"]);
    let error = build("[[auth.providers]]\ntype = \"ldap\"").expect_err("unknown type");
    assert_eq!(
        error.to_string(),
        "auth.providers[1] (type = \"ldap\"): unknown provider type; registered types: builtin, http, jwt, session, x509"
    );
}

#[test]
fn order_and_chain_level_keys_are_kept() {
    let chain = build(&format!(
        "[[auth.providers]]\ntype = \"x509\"\non_error = \"next\"\n\
         [[auth.providers]]\ntype = \"builtin\"\ntimeout_ms = 750\n\
         [[auth.providers]]\ntype = \"jwt\"\nsecret = \"{SECRET}\"\n\
         [[auth.providers]]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/auth\""
    ))
    .expect("builds");
    let summary: Vec<_> =
        chain.entries().iter().map(|e| (e.provider.name(), e.on_error, e.timeout)).collect();
    assert_eq!(
        summary,
        [
            ("x509", OnError::Next, Duration::from_secs(5)),
            ("builtin", OnError::Deny, Duration::from_millis(750)),
            ("jwt", OnError::Deny, Duration::from_secs(5)),
            ("http", OnError::Deny, Duration::from_millis(2000)),
        ]
    );
    assert!(chain.allows_anonymous());
}

#[test]
fn x509_needs_builtin_in_the_chain() {
    let error = build(&format!(
        "[[auth.providers]]\ntype = \"jwt\"\nsecret = \"{SECRET}\"\n[[auth.providers]]\ntype = \"x509\""
    ))
    .expect_err("refused");
    assert_eq!(
        error.to_string(),
        "auth.providers[2] (type = \"x509\"): requires a provider of type \"builtin\" in the same chain"
    );
    let error =
        build("[[auth.providers]]\ntype = \"builtin\"\n[[auth.providers]]\ntype = \"x509\"\ncn = \"x\"")
            .expect_err("x509 has no settings");
    assert_eq!(
        error.to_string(),
        "auth.providers[2] (type = \"x509\"): unknown field `cn`, there are no fields"
    );
}

#[test]
fn the_documented_error_for_a_misspelt_key() {
    let error = build(&format!(
        "[[auth.providers]]\ntype = \"builtin\"\n[[auth.providers]]\ntype = \"jwt\"\nsecrt = \"{SECRET}\""
    ))
    .expect_err("refused");
    let message = error.to_string();
    assert!(
        message.starts_with("auth.providers[2] (type = \"jwt\"): unknown field `secrt`, expected one of `secret`, `secret_file`, "),
        "{message}"
    );
    assert!(!message.contains(SECRET));
}

/// A third-party provider goes through exactly the same path as the shipped ones.
struct Plugin;
struct PluginProvider(String);

impl Authenticator for PluginProvider {
    fn name(&self) -> &str {
        &self.0
    }
    fn authenticate<'a>(&'a self, _: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
        Box::pin(async { Ok(Outcome::Next) })
    }
}

impl ProviderFactory for Plugin {
    fn build(
        &self,
        spec: &ProviderSpec,
        ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError> {
        let path = spec
            .settings
            .get("path")
            .and_then(|v| v.as_str())
            .ok_or_else(|| spec.invalid("missing key `path`"))?;
        Ok(Arc::new(PluginProvider(ctx.resolve(path.as_ref()).display().to_string())))
    }
}

#[test]
fn third_party_factories_are_registered_the_same_way() {
    let mut registry = Registry::with_builtin_providers();
    registry.register("plugin", Arc::new(Plugin));
    let mut ctx = BuildContext::new("/var/lib/mesgd").with_base_dir("/etc/mesgd");
    let chain = registry
        .build_chain(
            &providers("[[auth.providers]]\ntype = \"plugin\"\npath = \"libauth.so\"\ntimeout_ms = 100"),
            false,
            &mut ctx,
        )
        .expect("builds");
    assert_eq!(chain.entries()[0].provider.name(), "/etc/mesgd/libauth.so");
    assert_eq!(chain.entries()[0].timeout, Duration::from_millis(100));
    let error = registry
        .build_chain(&providers("[[auth.providers]]\ntype = \"plugin\""), false, &mut ctx)
        .expect_err("refused");
    assert_eq!(error.to_string(), "auth.providers[1] (type = \"plugin\"): missing key `path`");
}
