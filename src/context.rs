//! What every front end shares, whatever protocol it speaks: the broker, the provider chain, the
//! login guard, the services the providers opened (the builtin user directory), and the
//! settings each protocol derives from the configuration.
//!
//! One context per server, behind an `Arc`: connection tasks of every listener hold it, and the
//! REST API reaches the same user directory that pushes rule changes to connected clients.

use std::sync::Arc;
use std::time::Duration;

use mesgd_core::auth::Chain;
use mesgd_core::broker::Broker;
use mesgd_providers::Services;

use crate::config::Config;
use crate::limits::LimitState;
use crate::login_guard::LoginGuard;
use crate::mqtt;

/// The shared state of a running server.
#[derive(Debug)]
pub struct ServerContext {
    pub(crate) broker: Arc<Broker>,
    pub(crate) chain: Chain,
    pub(crate) login_guard: LoginGuard,
    pub(crate) limits: LimitState,
    pub(crate) services: Services,
    pub(crate) mqtt: mqtt::Settings,
    /// How long a new connection may take to finish its handshakes (TLS, HTTP headers, the
    /// protocol's own first message).
    pub(crate) connect_timeout: Duration,
}

impl ServerContext {
    pub(crate) fn new(config: &Config, broker: Arc<Broker>, chain: Chain, services: Services) -> Self {
        ServerContext {
            broker,
            chain,
            login_guard: LoginGuard::new(config.auth.failed_login.clone(), config.limits.exempt.clone()),
            limits: LimitState::new(&config.limits),
            services,
            mqtt: mqtt::Settings::from_config(config),
            connect_timeout: Duration::from_millis(config.limits.connect_timeout_ms),
        }
    }

    /// The broker core.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The limit state: per-address counts and what each limit refused (for metrics).
    pub fn limits(&self) -> &LimitState {
        &self.limits
    }

    /// The provider chain.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The services the providers opened, e.g. the builtin
    /// [`UserDirectory`](mesgd_providers::builtin::UserDirectory).
    pub fn services(&self) -> &Services {
        &self.services
    }
}
