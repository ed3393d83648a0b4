//! Code shared by the integration tests: connect builders, outcome checks, the local webhook.

pub(crate) mod webhook;

use std::future::Future;
use std::time::Duration;

use mesgd_core::acl::{Permission, Rule};
use mesgd_core::auth::{Authenticator, ConnectInfo, Denial, Identity, Outcome, Protocol, Secret};

/// An MQTT 3.1.1 connect from client `c1` on listener `mqtt`.
pub(crate) fn info(username: Option<&str>, password: Option<&[u8]>) -> ConnectInfo {
    ConnectInfo::new(Protocol::Mqtt311, "c1", "mqtt")
        .with_username(username.map(str::to_owned))
        .with_password(password.map(Secret::new))
}

pub(crate) fn rule(pattern: &str, permission: Permission) -> Rule {
    Rule { pattern: pattern.to_owned(), permission }
}

/// The `[[auth.providers]]` tables of a TOML document.
pub(crate) fn providers(text: &str) -> Vec<toml::Table> {
    #[derive(serde::Deserialize)]
    struct Auth {
        providers: Vec<toml::Table>,
    }
    #[derive(serde::Deserialize)]
    struct Doc {
        auth: Auth,
    }
    toml::from_str::<Doc>(text).expect("test TOML parses").auth.providers
}

/// Awaits `future`, failing the test if it takes more than five seconds.
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

pub(crate) async fn decide(provider: &dyn Authenticator, info: &ConnectInfo) -> Outcome {
    provider.authenticate(info).await.expect("the provider decides")
}

#[track_caller]
pub(crate) fn allowed(outcome: Outcome) -> Identity {
    match outcome {
        Outcome::Allow(identity) => identity,
        other => panic!("expected Allow, got {other:?}"),
    }
}

#[track_caller]
pub(crate) fn denied(outcome: Outcome) -> Denial {
    match outcome {
        Outcome::Deny(denial) => denial,
        other => panic!("expected Deny, got {other:?}"),
    }
}

#[track_caller]
pub(crate) fn next(outcome: Outcome) {
    match outcome {
        Outcome::Next => {}
        other => panic!("expected Next, got {other:?}"),
    }
}
