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
use crate::relay;

/// The shared state of a running server.
#[derive(Debug)]
pub struct ServerContext {
    pub(crate) broker: Arc<Broker>,
    pub(crate) chain: Chain,
    pub(crate) login_guard: LoginGuard,
    pub(crate) limits: Arc<LimitState>,
    pub(crate) services: Services,
    pub(crate) mqtt: mqtt::Settings,
    /// Idle connections without a task of their own.
    pub(crate) parking: crate::park::ParkingLot,
    /// Provider names, one `Arc` each for all the clients they admit.
    pub(crate) provider_names: crate::interned::Names,
    /// What `/metrics` exposes; front ends register their own metrics here.
    pub metrics: crate::metrics::Metrics,
    /// The REST API's sessions and login guard.
    pub(crate) api: crate::http::api::ApiState,
    /// Content routing: the listeners, their matcher, the token keys.
    pub(crate) content: crate::content::Content,
    /// The relay's shared state (addresses, queues, rooms, pipes, matchmaking).
    pub(crate) relay: relay::Hub,
    /// How long a new connection may take to finish its handshakes (TLS, HTTP headers, the
    /// protocol's own first message).
    pub(crate) connect_timeout: Duration,
    /// Login sessions and their confirmation (`[auth]`).
    pub(crate) accounts: crate::accounts::Accounts,
}

impl ServerContext {
    /// A context on the embedded default configuration, an empty chain that admits anonymous
    /// clients, and a broker with small queues: for tests that drive a front end in memory.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Arc<ServerContext> {
        use mesgd_core::broker::BrokerLimits;
        use mesgd_core::session::QueueLimits;
        let config = Config::embedded_default();
        let limits = BrokerLimits {
            queue: QueueLimits {
                max_messages: 100,
                max_bytes: 1 << 20,
                queue_qos0_offline: false,
                max_inflight_bytes: usize::MAX,
            },
            budget: mesgd_core::session::BudgetLimits::UNLIMITED,
            retained: mesgd_core::retained::RetainedLimits::UNLIMITED,
            max_sessions: usize::MAX,
        };
        let now = (std::time::Instant::now(), std::time::SystemTime::now());
        let broker = Arc::new(Broker::new(limits, now.0, now.1));
        let content = crate::content::Content::open(&config).expect("no http listener: no key store");
        Arc::new(ServerContext::new(
            &config,
            broker,
            Chain::new(Vec::new(), true),
            Default::default(),
            content,
        ))
    }

    pub(crate) fn new(
        config: &Config,
        broker: Arc<Broker>,
        chain: Chain,
        services: Services,
        content: crate::content::Content,
    ) -> Self {
        let limits = Arc::new(LimitState::new(&config.limits));
        let relay =
            relay::Hub::new(relay::config::Settings::from_config(config), broker.clone(), limits.clone());
        ServerContext {
            relay,
            broker,
            chain,
            login_guard: LoginGuard::new(config.auth.failed_login.clone(), config.limits.exempt.clone()),
            limits,
            services,
            mqtt: mqtt::Settings::from_config(config),
            parking: crate::park::ParkingLot::default(),
            provider_names: Default::default(),
            metrics: crate::metrics::Metrics::new(),
            api: crate::http::api::ApiState::new(&config.http),
            content,
            connect_timeout: Duration::from_millis(config.limits.connect_timeout_ms),
            accounts: crate::accounts::Accounts::new(&config.auth),
        }
    }

    /// The broker core.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The relay's shared state and counters.
    pub fn relay(&self) -> &relay::Hub {
        &self.relay
    }

    /// The limit state: per-address counts and what each limit refused (for metrics).
    pub fn limits(&self) -> &LimitState {
        &self.limits
    }

    /// What each limit refused, those the broker counts included.
    pub fn limit_counts(&self) -> crate::limits::LimitCounts {
        let mut counts = self.limits.counters.snapshot();
        counts.retained = mesgd_core::broker::Stats::get(&self.broker.stats().retained_refused);
        counts
    }

    /// How many idle connections are parked (without a task of their own) now.
    pub fn parked_connections(&self) -> usize {
        self.parking.parked()
    }

    /// How many parked connections' plain TCP sockets wait outside tokio's reactor now.
    pub fn parked_sockets_watched(&self) -> usize {
        self.parking.sockets_watched()
    }

    /// The provider chain.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The content-routing counters.
    pub fn content_stats(&self) -> &crate::content::ContentStats {
        self.content.stats()
    }

    /// How many content-routing listeners are registered.
    pub fn content_listeners(&self) -> usize {
        self.content.listeners()
    }

    /// The services the providers opened, e.g. the builtin
    /// [`UserDirectory`](mesgd_providers::builtin::UserDirectory).
    pub fn services(&self) -> &Services {
        &self.services
    }
}
