//! The `x509` provider: a client certificate's Common Name selects a builtin record whose
//! `auth_type` is `x509`. No password is involved: the TLS layer already verified the
//! certificate against the listener's client CA, and parsed its Common Name.
//!
//! | CONNECT | answer |
//! |---|---|
//! | with a username | `Next` (certificate logins send none) |
//! | no TLS, no client certificate, or no Common Name | `Next` |
//! | CN names no record, or a `basic` record | `Next` |
//! | CN names a disabled `x509` record | `Deny` (not authorized) |
//! | CN names an `x509` record | `Allow`: username = CN, the record's ACL, live updates |
//!
//! A Common Name the broker's copy of the store lacks is read from the store first (bounded, as
//! for the builtin provider), so a device added a moment ago can connect. It reads the same
//! [`UserDirectory`] as the builtin provider, so a chain with `x509` but no
//! `builtin` is refused when it is built (the registry checks [`ProviderFactory::requires`]).
//! The provider has no settings of its own.

use std::sync::Arc;

use mesgd_core::auth::{Authenticator, BoxFuture, ConnectInfo, Denial, Outcome, ProviderError};
use serde::Deserialize;

use crate::builtin::{AuthType, UserDirectory};
use crate::registry::{BuildContext, ConfigError, ProviderFactory, ProviderSpec};

/// The `type` of the x509 provider.
pub const TYPE_NAME: &str = "x509";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct X509Settings {}

/// Builds `type = "x509"` providers.
#[derive(Clone, Copy, Debug, Default)]
pub struct X509Factory;

impl ProviderFactory for X509Factory {
    fn build(
        &self,
        spec: &ProviderSpec,
        ctx: &mut BuildContext,
    ) -> Result<Arc<dyn Authenticator>, ConfigError> {
        let X509Settings {} = spec.settings()?;
        let directory =
            ctx.user_directory().map_err(|source| ConfigError::Store { at: spec.at(), source })?;
        Ok(Arc::new(X509Provider::new(directory)))
    }

    fn requires(&self) -> &[&str] {
        &[crate::builtin::TYPE_NAME]
    }
}

/// The x509 provider (see the module doc).
#[derive(Debug)]
pub struct X509Provider {
    directory: Arc<UserDirectory>,
}

impl X509Provider {
    /// A provider over `directory`.
    pub fn new(directory: Arc<UserDirectory>) -> Self {
        X509Provider { directory }
    }

    async fn decide(&self, info: &ConnectInfo) -> Outcome {
        if info.username.is_some() {
            return Outcome::Next;
        }
        let Some(common_name) =
            info.tls.as_ref().filter(|tls| tls.has_client_cert()).and_then(|tls| tls.common_name.as_deref())
        else {
            return Outcome::Next;
        };
        match self.directory.find_user(common_name).await {
            Some(record) if record.auth_type == AuthType::X509 => {}
            _ => return Outcome::Next,
        }
        // A record switched to basic between the lookup and now is no longer ours to admit;
        // the chain then goes on exactly as if it had been basic all along.
        let mut switched = false;
        let outcome = self.directory.admit(TYPE_NAME, &info.client_id, common_name, |current| {
            switched = current.auth_type != AuthType::X509;
            if switched {
                Err(Denial::not_authorized("the record is no longer an x509 record"))
            } else {
                Ok(())
            }
        });
        if switched { Outcome::Next } else { outcome }
    }
}

impl Authenticator for X509Provider {
    fn name(&self) -> &str {
        TYPE_NAME
    }

    fn authenticate<'a>(&'a self, info: &'a ConnectInfo) -> BoxFuture<'a, Result<Outcome, ProviderError>> {
        Box::pin(async move { Ok(self.decide(info).await) })
    }
}
