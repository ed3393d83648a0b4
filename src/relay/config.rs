//! The `[relay]` and `[relay.turn]` configuration tables, and the settings the relay derives
//! from them. Every default is the core type's own (`RateLimits::default()` and friends), so the
//! reference file, the core and the running relay cannot drift apart.

use std::path::PathBuf;
use std::time::Duration;

use mesgd_core::relay::{KeyProof, MatchLimits, PipeLimits, QueueLimits, RateLimits, RoomLimits, TurnConfig};
use serde::Deserialize;

use crate::config::{Config, ConfigError, ListenerKind};

/// `[relay]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelayConfig {
    /// Whether a `register` with a `pubkey` must prove possession of the key (signed nonce).
    pub require_key_proof: bool,
    /// Relay connections (TCP, WebSocket and registered UDP sources) the load factor counts
    /// against; above 95 % of it a new `register` is refused.
    pub max_connections: u64,
    /// Output waiting to be sent to one client, in bytes; past it the client is disconnected.
    pub max_output_bytes: usize,
    /// Topic subscriptions one connection may have.
    pub max_subscriptions: usize,
    /// A TCP client that sends nothing for this long is disconnected (its address released).
    pub tcp_idle_s: u64,
    /// A WebSocket that sends nothing for this long is pinged.
    pub ws_ping_interval_s: u64,
    /// How long a pinged WebSocket has to answer (with anything) before it is closed.
    pub ws_pong_timeout_s: u64,
    /// A UDP source that sends nothing for this long is forgotten (its address released).
    pub udp_idle_s: u64,
    /// UDP sources tracked at most (registered or not); datagrams from new sources beyond it are
    /// dropped and counted.
    pub udp_max_sources: usize,
    /// Messages per second one connection may send, sustained.
    pub rate_messages_per_s: u64,
    /// Messages one connection may send at once.
    pub rate_message_burst: u64,
    /// Frame bytes per second one connection may send, sustained.
    pub rate_bytes_per_s: u64,
    /// Frame bytes one connection may send at once.
    pub rate_byte_burst: u64,
    /// Messages queued for one offline address.
    pub max_queued_messages: usize,
    /// Bytes queued for one offline address.
    pub max_queued_bytes: usize,
    /// How long a queued message waits at most, in seconds.
    pub queue_ttl_s: u64,
    /// Offline addresses with a queue, at most.
    pub max_queue_addresses: usize,
    /// Bytes in all offline queues together (also the load factor's queue budget).
    pub queue_global_bytes: usize,
    /// Alias → key bindings, at most.
    pub max_alias_bindings: usize,
    /// Rooms one connection may be in.
    pub max_rooms_per_connection: usize,
    /// Members one room may have.
    pub max_room_members: usize,
    /// Rooms relay-wide.
    pub max_rooms: usize,
    /// Pipes one connection may be an end of.
    pub max_pipes_per_connection: usize,
    /// Pipes relay-wide.
    pub max_pipes: usize,
    /// Games one connection may wait in at once.
    pub max_games_per_connection: usize,
    /// Matchmaking waits relay-wide.
    pub max_match_waiters: usize,
    /// TURN credentials (`turn_credentials`); without this table the reply carries nulls.
    pub turn: Option<TurnFileConfig>,
}

/// `[relay.turn]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnFileConfig {
    /// A file holding the secret shared with the TURN server (coturn's `static-auth-secret`).
    /// Read once at start; trailing whitespace is ignored. Never logged.
    pub secret_file: PathBuf,
    /// The TURN URLs handed to clients.
    pub urls: Vec<String>,
    /// How long minted credentials are valid, in seconds.
    #[serde(default = "default_turn_ttl")]
    pub ttl_s: u64,
}

fn default_turn_ttl() -> u64 {
    mesgd_core::relay::turn::DEFAULT_TTL.as_secs()
}

impl Default for RelayConfig {
    fn default() -> Self {
        let rate = RateLimits::default();
        let queue = QueueLimits::default();
        let rooms = RoomLimits::default();
        let pipes = PipeLimits::default();
        let matches = MatchLimits::default();
        RelayConfig {
            require_key_proof: false,
            max_connections: 100_000,
            max_output_bytes: 1 << 20,
            max_subscriptions: 128,
            tcp_idle_s: 120,
            ws_ping_interval_s: 30,
            ws_pong_timeout_s: 30,
            udp_idle_s: 60,
            udp_max_sources: 100_000,
            rate_messages_per_s: rate.messages_per_s,
            rate_message_burst: rate.message_burst,
            rate_bytes_per_s: rate.bytes_per_s,
            rate_byte_burst: rate.byte_burst,
            max_queued_messages: queue.max_messages,
            max_queued_bytes: queue.max_bytes,
            queue_ttl_s: queue.ttl.as_secs(),
            max_queue_addresses: queue.max_addresses,
            queue_global_bytes: queue.global_bytes,
            max_alias_bindings: mesgd_core::relay::aliases::DEFAULT_MAX_BINDINGS,
            max_rooms_per_connection: rooms.rooms_per_connection,
            max_room_members: rooms.members_per_room,
            max_rooms: rooms.rooms,
            max_pipes_per_connection: pipes.per_connection,
            max_pipes: pipes.total,
            max_games_per_connection: matches.games_per_connection,
            max_match_waiters: matches.waiters,
            turn: None,
        }
    }
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: format!("relay.{key}"), message: message.into() }
}

impl RelayConfig {
    /// Checks the values that cannot work, and the relay listeners' settings.
    pub(crate) fn validate(&self, config: &Config) -> Result<(), ConfigError> {
        let at_least_one = [
            ("max_connections", self.max_connections as usize),
            ("max_output_bytes", self.max_output_bytes),
            ("tcp_idle_s", self.tcp_idle_s as usize),
            ("ws_ping_interval_s", self.ws_ping_interval_s as usize),
            ("ws_pong_timeout_s", self.ws_pong_timeout_s as usize),
            ("udp_idle_s", self.udp_idle_s as usize),
            ("udp_max_sources", self.udp_max_sources),
            ("rate_messages_per_s", self.rate_messages_per_s as usize),
            ("rate_message_burst", self.rate_message_burst as usize),
            ("rate_bytes_per_s", self.rate_bytes_per_s as usize),
            ("max_queued_messages", self.max_queued_messages),
            ("max_queued_bytes", self.max_queued_bytes),
            ("queue_ttl_s", self.queue_ttl_s as usize),
        ];
        for (key, value) in at_least_one {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if self.max_output_bytes < mesgd_core::relay::frame::MAX_TCP_FRAME * 2 {
            return Err(invalid("max_output_bytes", "must be at least 131072 (two of the largest frames)"));
        }
        if self.rate_byte_burst < mesgd_core::relay::frame::MAX_TCP_FRAME as u64 {
            return Err(invalid(
                "rate_byte_burst",
                "must be at least 65536, or the largest frame could never be accepted",
            ));
        }
        if let Some(turn) = &self.turn
            && turn.ttl_s == 0
        {
            return Err(invalid("turn.ttl_s", "must be at least 1"));
        }
        for (i, l) in config.listeners.iter().enumerate() {
            if l.kind == ListenerKind::RelayUdp && l.tls.is_some() {
                return Err(ConfigError::Invalid {
                    key: format!("listeners[{i}].tls"),
                    message: "a relay-udp listener has no TLS (UDP carries no TLS session)".into(),
                });
            }
        }
        Ok(())
    }

    /// Reads the TURN secret file, if `[relay.turn]` is set.
    pub(crate) fn load_turn(&self, config: &Config) -> Result<Option<TurnConfig>, ConfigError> {
        let Some(turn) = &self.turn else { return Ok(None) };
        let path = config.resolve(&turn.secret_file);
        let bytes = std::fs::read(&path).map_err(|source| {
            invalid("turn.secret_file", format!("cannot read {}: {source}", path.display()))
        })?;
        let secret = bytes.trim_ascii_end();
        if secret.is_empty() {
            return Err(invalid("turn.secret_file", format!("{} is empty", path.display())));
        }
        Ok(Some(TurnConfig::new(secret, Duration::from_secs(turn.ttl_s), turn.urls.clone())))
    }
}

/// The relay's settings, derived once from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) key_proof: KeyProof,
    pub(crate) rate: RateLimits,
    pub(crate) queue: QueueLimits,
    pub(crate) rooms: RoomLimits,
    pub(crate) pipes: PipeLimits,
    pub(crate) matches: MatchLimits,
    pub(crate) max_alias_bindings: usize,
    pub(crate) max_connections: u64,
    pub(crate) max_output_bytes: usize,
    pub(crate) max_subscriptions: usize,
    pub(crate) tcp_idle: Duration,
    pub(crate) ws_ping_interval: Duration,
    pub(crate) ws_pong_timeout: Duration,
    pub(crate) udp_idle: Duration,
    pub(crate) udp_max_sources: usize,
    /// From `[limits]`: levels a topic may have.
    pub(crate) max_topic_levels: usize,
    /// From `[mqtt]`: whether retained messages are supported.
    pub(crate) retain_available: bool,
}

impl Settings {
    pub(crate) fn from_config(config: &Config) -> Self {
        let r = &config.relay;
        Settings {
            key_proof: KeyProof { required: r.require_key_proof },
            rate: RateLimits {
                messages_per_s: r.rate_messages_per_s,
                message_burst: r.rate_message_burst,
                bytes_per_s: r.rate_bytes_per_s,
                byte_burst: r.rate_byte_burst,
            },
            queue: QueueLimits {
                max_messages: r.max_queued_messages,
                max_bytes: r.max_queued_bytes,
                ttl: Duration::from_secs(r.queue_ttl_s),
                max_addresses: r.max_queue_addresses,
                global_bytes: r.queue_global_bytes,
            },
            rooms: RoomLimits {
                rooms_per_connection: r.max_rooms_per_connection,
                members_per_room: r.max_room_members,
                rooms: r.max_rooms,
            },
            pipes: PipeLimits { per_connection: r.max_pipes_per_connection, total: r.max_pipes },
            matches: MatchLimits {
                games_per_connection: r.max_games_per_connection,
                waiters: r.max_match_waiters,
            },
            max_alias_bindings: r.max_alias_bindings,
            max_connections: r.max_connections,
            max_output_bytes: r.max_output_bytes,
            max_subscriptions: r.max_subscriptions,
            tcp_idle: Duration::from_secs(r.tcp_idle_s),
            ws_ping_interval: Duration::from_secs(r.ws_ping_interval_s),
            ws_pong_timeout: Duration::from_secs(r.ws_pong_timeout_s),
            udp_idle: Duration::from_secs(r.udp_idle_s),
            udp_max_sources: r.udp_max_sources,
            max_topic_levels: config.limits.max_topic_levels,
            retain_available: config.mqtt.retain_available,
        }
    }
}
