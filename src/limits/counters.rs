//! One counter per limit, for metrics: how often each limit refused something since start.

use std::sync::atomic::{AtomicU64, Ordering};

/// What each limit refused since the server started. Front ends add to it; the metrics
/// endpoint reads a [`LimitCounters::snapshot`].
#[derive(Debug, Default)]
pub struct LimitCounters {
    /// Connections closed at accept because `limits.max_connections` were open.
    pub max_connections: AtomicU64,
    /// Connections closed at accept because their address had `limits.max_connections_per_ip`
    /// open.
    pub connections_per_ip: AtomicU64,
    /// Subscriptions refused by `limits.max_subscriptions_per_client`.
    pub subscriptions: AtomicU64,
    /// Topic names and filters refused by `limits.max_topic_length`.
    pub topic_length: AtomicU64,
    /// Connections closed because their handshake took longer than `limits.connect_timeout_ms`.
    pub handshake_timeouts: AtomicU64,
    /// HTTP requests answered 408 because their body did not arrive within
    /// `limits.connect_timeout_ms` after the headers.
    pub body_timeouts: AtomicU64,
    /// Logins delayed by the failed-login throttle.
    pub logins_throttled: AtomicU64,
    /// HTTP requests answered 413 because their body was over `http.max_body_bytes`.
    pub body_size: AtomicU64,
    /// Relay requests refused by a count cap (rooms, pipes, games, subscriptions, alias
    /// bindings: per connection or relay-wide; the relay's own counters say which).
    pub relay_caps: AtomicU64,
    /// Connects refused a new session that outlives its connection at `limits.max_sessions`.
    pub sessions: AtomicU64,
}

/// A plain copy of [`LimitCounters`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitCounts {
    /// See [`LimitCounters::max_connections`].
    pub max_connections: u64,
    /// See [`LimitCounters::connections_per_ip`].
    pub connections_per_ip: u64,
    /// See [`LimitCounters::subscriptions`].
    pub subscriptions: u64,
    /// See [`LimitCounters::topic_length`].
    pub topic_length: u64,
    /// See [`LimitCounters::handshake_timeouts`].
    pub handshake_timeouts: u64,
    /// See [`LimitCounters::body_timeouts`].
    pub body_timeouts: u64,
    /// See [`LimitCounters::logins_throttled`].
    pub logins_throttled: u64,
    /// See [`LimitCounters::body_size`].
    pub body_size: u64,
    /// See [`LimitCounters::relay_caps`].
    pub relay_caps: u64,
    /// See [`LimitCounters::sessions`].
    pub sessions: u64,
    /// Retained messages routed but not kept at `limits.max_retained_messages` or
    /// `max_retained_bytes`: counted by the broker (`Stats::retained_refused`), so 0 in
    /// [`LimitCounters::snapshot`]; [`crate::context::ServerContext::limit_counts`] fills it in.
    pub retained: u64,
}

impl LimitCounters {
    /// Adds one to `counter`.
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> LimitCounts {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LimitCounts {
            max_connections: read(&self.max_connections),
            connections_per_ip: read(&self.connections_per_ip),
            subscriptions: read(&self.subscriptions),
            topic_length: read(&self.topic_length),
            handshake_timeouts: read(&self.handshake_timeouts),
            body_timeouts: read(&self.body_timeouts),
            logins_throttled: read(&self.logins_throttled),
            body_size: read(&self.body_size),
            relay_caps: read(&self.relay_caps),
            sessions: read(&self.sessions),
            retained: 0,
        }
    }
}

impl LimitCounts {
    /// The counts as `$SYS/broker/limits/<name>` topics (below `$SYS/broker/`) and values.
    pub fn sys_values(&self) -> Vec<(&'static str, String)> {
        self.by_name().into_iter().map(|(name, n)| (name, n.to_string())).collect()
    }

    /// Every count with its `$SYS` topic below `$SYS/broker/` (`limits/<name>`); the
    /// Prometheus family `mesgd_limit_refusals_total` labels them with `<name>`.
    pub fn by_name(&self) -> [(&'static str, u64); 11] {
        [
            ("limits/max_connections", self.max_connections),
            ("limits/connections_per_ip", self.connections_per_ip),
            ("limits/subscriptions", self.subscriptions),
            ("limits/topic_length", self.topic_length),
            ("limits/handshake_timeouts", self.handshake_timeouts),
            ("limits/body_timeouts", self.body_timeouts),
            ("limits/logins_throttled", self.logins_throttled),
            ("limits/body_size", self.body_size),
            ("limits/relay_caps", self.relay_caps),
            ("limits/retained", self.retained),
            ("limits/sessions", self.sessions),
        ]
    }
}
