//! Resource limits a client can trip, shared by every front end: the networks exempt from the
//! per-address limits, open connections per source address, what was refused (counted for
//! metrics) and a log line per limit and interval instead of one per event.
//!
//! A limit that trips under attack trips thousands of times a second; logging each event would
//! turn the attack into a disk-filling one. Every front end therefore counts the event in
//! [`LimitCounters`] and asks [`LogOnce`] whether a line is due, which it is at most once per
//! [`LOG_INTERVAL`] per limit, with the number of events since the last line.
//!
//! # Layout
//!
//! - [`budget`]: the `[limits]` keys of the broker-wide budget for queued messages, and what
//!   the MQTT front end does with it (back-pressure on publishers).
//! - [`exempt`]: [`Exempt`], the `limits.exempt` networks (trusted proxies, health checks).
//! - [`per_ip`]: [`PerIpConnections`], open connections per source address.
//! - [`counters`]: [`LimitCounters`], one counter per limit, and its [`LimitCounts`] snapshot.
//! - [`log_once`]: [`LogOnce`], the once-per-interval log gate.

pub mod budget;
pub mod counters;
pub mod exempt;
pub mod log_once;
pub mod per_ip;

use std::time::{Duration, Instant};

pub use counters::{LimitCounters, LimitCounts};
pub use exempt::{Exempt, ExemptError};
pub use log_once::LogOnce;
pub use per_ip::{IpSlot, PerIpConnections};

/// How often at most one limit writes a log line while it keeps tripping.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// One log gate per limit, each [`LOG_INTERVAL`] apart.
#[derive(Debug)]
pub struct LimitLogs {
    /// `limits.max_connections`.
    pub max_connections: LogOnce,
    /// `limits.max_connections_per_ip`.
    pub connections_per_ip: LogOnce,
    /// `limits.max_subscriptions_per_client`.
    pub subscriptions: LogOnce,
    /// `limits.max_topic_length`.
    pub topic_length: LogOnce,
    /// `limits.connect_timeout_ms`.
    pub handshake_timeouts: LogOnce,
    /// `limits.connect_timeout_ms`, for a request body after its headers.
    pub body_timeouts: LogOnce,
    /// `http.max_body_bytes`.
    pub body_size: LogOnce,
    /// The relay's count caps (`[relay] max_rooms_per_connection`, …).
    pub relay_caps: LogOnce,
    /// `limits.max_retained_messages`, `limits.max_retained_bytes`.
    pub retained: LogOnce,
    /// `limits.max_sessions`.
    pub sessions: LogOnce,
    /// `limits.max_queued_bytes_total`: publishers paused.
    pub queue_budget: LogOnce,
    /// `limits.max_queued_bytes_total`: deliveries dropped at the hard cap.
    pub queue_budget_drops: LogOnce,
}

impl Default for LimitLogs {
    fn default() -> Self {
        LimitLogs {
            max_connections: LogOnce::new(LOG_INTERVAL),
            connections_per_ip: LogOnce::new(LOG_INTERVAL),
            subscriptions: LogOnce::new(LOG_INTERVAL),
            topic_length: LogOnce::new(LOG_INTERVAL),
            handshake_timeouts: LogOnce::new(LOG_INTERVAL),
            body_timeouts: LogOnce::new(LOG_INTERVAL),
            body_size: LogOnce::new(LOG_INTERVAL),
            relay_caps: LogOnce::new(LOG_INTERVAL),
            retained: LogOnce::new(LOG_INTERVAL),
            sessions: LogOnce::new(LOG_INTERVAL),
            queue_budget: LogOnce::new(LOG_INTERVAL),
            queue_budget_drops: LogOnce::new(LOG_INTERVAL),
        }
    }
}

/// A limit that refused something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tripped {
    /// `limits.max_connections`.
    MaxConnections,
    /// `limits.max_connections_per_ip`.
    ConnectionsPerIp,
    /// `limits.max_subscriptions_per_client`.
    Subscriptions,
    /// `limits.max_topic_length`.
    TopicLength,
    /// `limits.connect_timeout_ms`.
    HandshakeTimeout,
    /// `limits.connect_timeout_ms`, for an HTTP request body that stopped arriving.
    BodyTimeout,
    /// `http.max_body_bytes`: a request body over it was answered 413.
    BodySize,
    /// A relay count cap (rooms, pipes, games, subscriptions, alias bindings).
    RelayCap,
    /// `limits.max_sessions`: a new session that outlives its connection was refused.
    Sessions,
}

/// The limit state of a running server: what the front ends consult and update.
#[derive(Debug)]
pub struct LimitState {
    /// The networks exempt from per-address limits and per-address login throttling.
    pub exempt: Exempt,
    /// Open connections per source address.
    pub per_ip: PerIpConnections,
    /// What each limit refused.
    pub counters: LimitCounters,
    /// Each limit's log gate.
    pub logs: LimitLogs,
}

impl LimitState {
    /// The state for a configuration's `[limits]`.
    pub fn new(limits: &crate::config::Limits) -> Self {
        LimitState {
            exempt: limits.exempt.clone(),
            per_ip: PerIpConnections::new(limits.max_connections_per_ip),
            counters: LimitCounters::default(),
            logs: LimitLogs::default(),
        }
    }

    /// Counts one refusal by `limit` at `now`. `Some(n)` means the caller should log this one
    /// (`n` more were refused since the last line of this limit); `None`, that a line was
    /// written less than [`LOG_INTERVAL`] ago.
    pub fn trip(&self, limit: Tripped, now: Instant) -> Option<u64> {
        let (counter, log) = match limit {
            Tripped::MaxConnections => (&self.counters.max_connections, &self.logs.max_connections),
            Tripped::ConnectionsPerIp => (&self.counters.connections_per_ip, &self.logs.connections_per_ip),
            Tripped::Subscriptions => (&self.counters.subscriptions, &self.logs.subscriptions),
            Tripped::TopicLength => (&self.counters.topic_length, &self.logs.topic_length),
            Tripped::HandshakeTimeout => (&self.counters.handshake_timeouts, &self.logs.handshake_timeouts),
            Tripped::BodyTimeout => (&self.counters.body_timeouts, &self.logs.body_timeouts),
            Tripped::BodySize => (&self.counters.body_size, &self.logs.body_size),
            Tripped::RelayCap => (&self.counters.relay_caps, &self.logs.relay_caps),
            Tripped::Sessions => (&self.counters.sessions, &self.logs.sessions),
        };
        LimitCounters::add(counter);
        log.tripped(now)
    }

    /// Logs, at most once per interval, that a client's retained message on `topic` was routed
    /// but not kept because the retained store is at a cap (the broker counted it:
    /// `Stats::retained_refused`).
    pub fn log_retained_refused(
        &self,
        topic: &str,
        store: &mesgd_core::retained::RetainedStore,
        now: Instant,
    ) {
        if let Some(more) = self.logs.retained.tripped(now) {
            let caps = store.limits();
            let shown: String = topic.chars().take(64).collect();
            tracing::warn!(
                topic = shown,
                retained_messages = store.len(),
                retained_bytes = store.bytes(),
                max_retained_messages = caps.max_messages,
                max_retained_bytes = caps.max_bytes,
                more_since_last_line = more,
                "retained message delivered but not kept: the retained store is at its cap"
            );
        }
    }
}
