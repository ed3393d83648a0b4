//! The TOML configuration: its shape, its defaults, and its validation.
//!
//! Every table refuses unknown keys (`deny_unknown_fields`), so a typo is an error at start
//! instead of a setting silently ignored. The reference file `config/mesgd.toml` documents every
//! key with its default; [`Config::embedded_default`] is what `mesgd serve` runs without
//! `--config`: MQTT on 127.0.0.1:1883 only, anonymous access on, storage in `./data`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

mod http;
pub use http::HttpConfig;

/// The configuration `mesgd serve` runs without `--config`: a local-only broker.
pub const EMBEDDED_DEFAULT: &str = r#"
[[listeners]]
name = "local"
kind = "mqtt"
bind = "127.0.0.1:1883"

[auth]
allow_anonymous = true
"#;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML does not parse or does not fit the schema (unknown key, wrong type ...).
    #[error("invalid config{}: {message}", file.as_ref().map(|p| format!(" file {}", p.display())).unwrap_or_default())]
    Parse {
        /// The file, if the text came from one.
        file: Option<PathBuf>,
        /// The parser's message, which names the key and the line.
        message: String,
    },
    /// A value is out of range or a combination is impossible.
    #[error("invalid config: {key}: {message}")]
    Invalid {
        /// The offending key, as a dotted path.
        key: String,
        /// What is wrong and what to do.
        message: String,
    },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), message: message.into() }
}

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// Where state is kept.
    #[serde(default)]
    pub storage: StorageConfig,
    /// The listeners; at least one.
    #[serde(default)]
    pub listeners: Vec<ListenerConfig>,
    /// The authentication chain.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// MQTT protocol features.
    #[serde(default)]
    pub mqtt: MqttConfig,
    /// The REST API and `/metrics` on `http` listeners.
    #[serde(default)]
    pub http: HttpConfig,
    /// Content routing on the `http` listener.
    #[serde(default)]
    pub content: crate::content::ContentConfig,
    /// The JSON relay (`relay-tcp`, `relay-ws`, `relay-udp` listeners).
    #[serde(default)]
    pub relay: crate::relay::RelayConfig,
    /// `[cluster]`: join other nodes over NATS (docs/cluster.md). Absent: a single node.
    #[serde(default)]
    pub cluster: Option<mesgd_cluster::ClusterConfig>,
    /// The directory relative paths in the file are resolved against: the config file's own
    /// directory, or the working directory for the embedded default.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// `[log]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter such as `info` or `mesgd=debug,info`. `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: "info".into() }
    }
}

/// `[storage]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// The directory for `config.db` (users, ACL) and `state.db` (sessions, queued messages,
    /// retained messages, wills). Relative to the config file's directory.
    pub dir: PathBuf,
    /// When broker state reaches the disk: `always`, `periodic` or `none`.
    pub durability: crate::persist::Durability,
    /// How often `periodic` durability writes, in milliseconds.
    pub flush_interval_ms: u64,
    /// Changes recorded but not yet written that the journal holds at most before clients are
    /// made to wait (a slow or failing disk): past it, mesgd stops reading from clients until
    /// the backlog is half as long. Nothing is dropped.
    pub max_unwritten_changes: usize,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            dir: PathBuf::from("data"),
            durability: crate::persist::Durability::Always,
            flush_interval_ms: 100,
            max_unwritten_changes: 200_000,
        }
    }
}

/// What a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListenerKind {
    /// MQTT over TCP (or TLS, with `tls`).
    Mqtt,
    /// MQTT over WebSocket (or secure WebSocket, with `tls`), subprotocol `mqtt`.
    MqttWs,
    /// HTTP (or HTTPS, with `tls`): the listener every HTTP-based front end shares. Today it
    /// carries MQTT over WebSocket at `/mqtt`.
    Http,
    /// The JSON relay over TCP (or TLS, with `tls`): 4-byte length-prefixed frames.
    RelayTcp,
    /// The JSON relay over WebSocket (or secure WebSocket, with `tls`), on any path.
    RelayWs,
    /// The JSON relay over UDP: one JSON object per datagram.
    RelayUdp,
}

impl ListenerKind {
    /// The name used in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerKind::Mqtt => "mqtt",
            ListenerKind::MqttWs => "mqtt-ws",
            ListenerKind::Http => "http",
            ListenerKind::RelayTcp => "relay-tcp",
            ListenerKind::RelayWs => "relay-ws",
            ListenerKind::RelayUdp => "relay-udp",
        }
    }
}

/// `[[listeners]]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// A name for logs and for `ConnectInfo.listener`; defaults to `{kind}-{index}`.
    #[serde(default)]
    pub name: Option<String>,
    /// The protocol.
    pub kind: ListenerKind,
    /// The address to bind, such as `0.0.0.0:1883` or `127.0.0.1:0` (any free port).
    pub bind: SocketAddr,
    /// TLS for this listener; without it the listener is plain TCP.
    #[serde(default)]
    pub tls: Option<crate::tls::TlsConfig>,
    /// The HTTP path of a WebSocket listener. Default `/mqtt`.
    #[serde(default)]
    pub path: Option<String>,
}

impl ListenerConfig {
    /// The WebSocket path.
    pub fn ws_path(&self) -> &str {
        self.path.as_deref().unwrap_or("/mqtt")
    }
}

/// `[auth]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Whether a client that sent no username and that no provider resolved is admitted as
    /// anonymous (unrestricted). Off unless the config turns it on; the embedded default (no
    /// config file) turns it on for its local-only listener.
    pub allow_anonymous: bool,
    /// The providers, tried in order. Each table has `type`, optional `on_error` and
    /// `timeout_ms`, and the provider's own keys.
    pub providers: Vec<toml::Table>,
    /// Slowing down repeated failures.
    pub failed_login: crate::login_guard::FailedLoginConfig,
    /// How long a login session (`POST /auth/login`) lasts (humantime, e.g. `"24h"`).
    #[serde(deserialize_with = "crate::accounts::humantime_duration")]
    pub session_ttl: std::time::Duration,
    /// Whether a login needs a one-time code first (`POST /auth/confirm`).
    pub require_confirm: bool,
    /// How confirmation codes are delivered (`[auth.confirm]`).
    pub confirm: crate::accounts::confirm::ConfirmConfig,
    /// The OpenID providers people may log in with (`[[auth.oauth]]`).
    pub oauth: Vec<crate::accounts::oauth::OAuthProviderConfig>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            allow_anonymous: false,
            providers: Vec::new(),
            failed_login: crate::login_guard::FailedLoginConfig::default(),
            session_ttl: mesgd_providers::sessions::DEFAULT_TTL,
            require_confirm: false,
            confirm: crate::accounts::confirm::ConfirmConfig::default(),
            oauth: Vec::new(),
        }
    }
}

/// `[limits]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Open client connections at most; further connections are closed at once.
    pub max_connections: usize,
    /// The largest packet accepted from a client, in bytes (fixed header included); advertised
    /// to MQTT 5 clients as Maximum Packet Size.
    pub max_packet_size: u32,
    /// Unacknowledged QoS 1/2 messages in flight to one client, and the Receive Maximum
    /// advertised for QoS 2 messages from one client.
    pub max_inflight: u16,
    /// Messages queued for one session (offline, or beyond its in-flight window).
    pub max_queued_messages: usize,
    /// Bytes (topic + payload) queued for one session.
    pub max_queued_bytes: usize,
    /// Whether QoS 0 messages are queued for offline persistent sessions.
    pub queue_qos0_offline: bool,
    /// Levels a topic name or filter may have.
    pub max_topic_levels: usize,
    /// Topic aliases an MQTT 5 client may use towards the broker (Topic Alias Maximum).
    pub max_topic_alias: u16,
    /// The longest keep-alive accepted, in seconds. MQTT 5 clients asking for more (or for 0)
    /// are told this value as Server Keep Alive; MQTT 3.x clients asking for more are refused.
    pub max_keep_alive: u16,
    /// The longest session expiry granted, in seconds (MQTT 3.x persistent sessions get it too).
    /// 4294967295 means sessions never expire.
    pub max_session_expiry: u32,
    /// How long a new connection may take to send CONNECT (and finish TLS), in milliseconds.
    pub connect_timeout_ms: u64,
    /// Open connections from one source address (one IPv6 /64) at most; further connections
    /// from it are closed at once. `exempt` networks are not counted.
    pub max_connections_per_ip: usize,
    /// Networks exempt from the per-address limits and the per-address login throttle
    /// (trusted proxies, health checks): CIDRs or bare addresses.
    pub exempt: crate::limits::Exempt,
    /// Subscriptions one client (session) may hold at most; a SUBSCRIBE beyond it is refused
    /// for that filter (MQTT 5 reason code 0x97, 3.x failure 0x80).
    pub max_subscriptions_per_client: usize,
    /// The longest topic name or filter accepted, in bytes (a `$share/` filter with its prefix).
    pub max_topic_length: usize,
    /// Bytes (topic + payload) queued and in flight in every session together, at most (see
    /// [`crate::limits::budget`]).
    pub max_queued_bytes_total: u64,
    /// The share of `max_queued_bytes_total`, in percent, from which publishers are paused.
    pub queue_pause_percent: u8,
    /// Bytes (topic + payload) of QoS 1/2 messages in flight to one client, at most.
    pub max_inflight_bytes: usize,
    /// Topics holding a retained message, at most; a retained publish on a new topic beyond
    /// it is routed but not kept.
    pub max_retained_messages: usize,
    /// Bytes (topic + payload) of all retained messages together, at most.
    pub max_retained_bytes: usize,
    /// Sessions held at most (online or not) before a client asking for a new session that
    /// outlives its connection is refused.
    pub max_sessions: usize,
    /// Connections the kernel may hold for each TCP listener before the broker accepts them
    /// (the `listen` backlog; the kernel caps it at `net.core.somaxconn`).
    pub listen_backlog: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 100_000,
            max_packet_size: 1024 * 1024,
            max_inflight: 32,
            max_queued_messages: 1000,
            max_queued_bytes: 16 * 1024 * 1024,
            queue_qos0_offline: false,
            max_topic_levels: 64,
            max_topic_alias: 64,
            max_keep_alive: u16::MAX,
            max_session_expiry: 7 * 24 * 3600,
            connect_timeout_ms: 10_000,
            max_connections_per_ip: 1000,
            exempt: crate::limits::Exempt::default(),
            max_subscriptions_per_client: 1000,
            max_topic_length: 4096,
            max_queued_bytes_total: 1 << 30,
            queue_pause_percent: 90,
            max_inflight_bytes: 4 * 1024 * 1024,
            max_retained_messages: 1_000_000,
            max_retained_bytes: 1 << 30,
            max_sessions: 1_000_000,
            listen_backlog: 1024,
        }
    }
}

/// `[mqtt]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MqttConfig {
    /// Seconds between `$SYS` updates; 0 turns `$SYS` off.
    pub sys_interval: u64,
    /// Whether retained messages are supported.
    pub retain_available: bool,
    /// The highest QoS the broker accepts and grants (0, 1 or 2).
    pub max_qos: u8,
    /// Whether wildcard subscriptions are allowed.
    pub wildcard_subscriptions: bool,
    /// Whether shared subscriptions (`$share/{group}/{filter}`) are allowed.
    pub shared_subscriptions: bool,
    /// Whether MQTT 5 subscription identifiers are supported.
    pub subscription_identifiers: bool,
    /// After how many milliseconds without reading or writing anything a connection leaves its
    /// own task for a shared one (`crate::park`); 0 never.
    pub park_idle_ms: u64,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            sys_interval: 10,
            retain_available: true,
            max_qos: 2,
            wildcard_subscriptions: true,
            shared_subscriptions: true,
            subscription_identifiers: true,
            park_idle_ms: 2000,
        }
    }
}

impl Config {
    /// The configuration used without `--config`.
    pub fn embedded_default() -> Config {
        Config::from_toml(EMBEDDED_DEFAULT, None)
            .unwrap_or_else(|e| unreachable!("embedded default config: {e}"))
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Config::from_toml(&text, Some(path))
    }

    /// Parses and validates config text.
    pub fn from_toml(text: &str, file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { file: file.map(Path::to_owned), message: e.to_string() })?;
        config.base_dir = file.and_then(Path::parent).map(Path::to_owned).unwrap_or_default();
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(Err(e)) = self.cluster.as_ref().map(mesgd_cluster::ClusterConfig::validate) {
            return Err(invalid("cluster", e.to_string()));
        }
        if self.listeners.is_empty() {
            return Err(invalid("listeners", "at least one [[listeners]] table is required"));
        }
        crate::accounts::validate(&self.auth).map_err(|(key, message)| invalid(key, message))?;
        let mut names = std::collections::HashSet::new();
        for (i, l) in self.listeners.iter().enumerate() {
            if !names.insert(self.listener_name(i)) {
                return Err(invalid(
                    format!("listeners[{i}].name"),
                    format!("duplicate listener name {:?}", l.name),
                ));
            }
            if l.path.is_some() && l.kind != ListenerKind::MqttWs {
                return Err(invalid(
                    format!("listeners[{i}].path"),
                    "only WebSocket listeners (kind = \"mqtt-ws\") have a path",
                ));
            }
            if !l.ws_path().starts_with('/') {
                return Err(invalid(format!("listeners[{i}].path"), "must start with /"));
            }
            if let Some(tls) = &l.tls {
                if tls.require_client_cert && tls.client_ca.is_none() {
                    return Err(invalid(
                        format!("listeners[{i}].tls.require_client_cert"),
                        "needs tls.client_ca",
                    ));
                }
                if tls.allow_v1_client_certs && tls.client_ca.is_none() {
                    return Err(invalid(
                        format!("listeners[{i}].tls.allow_v1_client_certs"),
                        "needs tls.client_ca",
                    ));
                }
            }
        }
        let l = &self.limits;
        if l.max_packet_size < 64 {
            return Err(invalid("limits.max_packet_size", "must be at least 64 bytes"));
        }
        if l.max_packet_size > mesgd_core::mqtt::MAX_VAR_INT + 5 {
            return Err(invalid(
                "limits.max_packet_size",
                "must be at most 268435460 bytes (the MQTT maximum)",
            ));
        }
        if l.max_inflight == 0 {
            return Err(invalid("limits.max_inflight", "must be at least 1"));
        }
        if l.max_queued_messages == 0 {
            return Err(invalid("limits.max_queued_messages", "must be at least 1"));
        }
        if l.max_topic_levels == 0 {
            return Err(invalid("limits.max_topic_levels", "must be at least 1"));
        }
        if self.storage.max_unwritten_changes < 1000 {
            return Err(invalid("storage.max_unwritten_changes", "must be at least 1000"));
        }
        if self.storage.flush_interval_ms == 0 {
            return Err(invalid("storage.flush_interval_ms", "must be at least 1"));
        }
        if l.max_connections == 0 {
            return Err(invalid("limits.max_connections", "must be at least 1"));
        }
        if l.max_connections_per_ip == 0 {
            return Err(invalid("limits.max_connections_per_ip", "must be at least 1"));
        }
        if l.max_sessions < l.max_connections {
            return Err(invalid(
                "limits.max_sessions",
                "must be at least limits.max_connections: the sessions of connected clients count",
            ));
        }
        if !(1..=65_535).contains(&l.listen_backlog) {
            return Err(invalid("limits.listen_backlog", "must be between 1 and 65535"));
        }
        if l.max_subscriptions_per_client == 0 {
            return Err(invalid("limits.max_subscriptions_per_client", "must be at least 1"));
        }
        if !(1..=mesgd_core::topic::MAX_TOPIC_LEN).contains(&l.max_topic_length) {
            return Err(invalid("limits.max_topic_length", "must be between 1 and 65535 bytes"));
        }
        crate::limits::budget::validate(l).map_err(|(key, message)| invalid(key, message))?;
        if self.mqtt.max_qos > 2 {
            return Err(invalid("mqtt.max_qos", "must be 0, 1 or 2"));
        }
        self.http.validate().map_err(|(key, message)| invalid(key, message))?;
        if let Some((key, message)) = self.content.problem() {
            return Err(invalid(key, message));
        }
        self.relay.validate(self)?;
        if let Err(why) = crate::logging::filter(&self.log.level) {
            return Err(invalid(
                "log.level",
                format!("{:?} is not a valid log filter: {why}", self.log.level),
            ));
        }
        Ok(())
    }

    /// The name of listener `index`.
    pub fn listener_name(&self, index: usize) -> String {
        let l = &self.listeners[index];
        l.name.clone().unwrap_or_else(|| format!("{}-{index}", l.kind.as_str()))
    }

    /// A path from the config file, resolved against [`Config::base_dir`].
    pub fn resolve(&self, path: &Path) -> PathBuf {
        self.base_dir.join(path)
    }

    /// The storage directory, resolved.
    pub fn storage_dir(&self) -> PathBuf {
        self.resolve(&self.storage.dir)
    }
}

#[cfg(any(test, feature = "fuzzing"))]
#[path = "config_fuzzing.rs"]
pub mod fuzzing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_a_local_anonymous_broker() {
        let c = Config::embedded_default();
        assert_eq!(c.listeners.len(), 1);
        assert_eq!(c.listeners[0].bind, "127.0.0.1:1883".parse().unwrap());
        assert!(c.auth.allow_anonymous);
        assert_eq!(c.storage.dir, PathBuf::from("data"));
    }

    #[test]
    fn a_config_file_without_auth_section_refuses_anonymous() {
        let c = Config::from_toml("[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n", None).unwrap();
        assert!(!c.auth.allow_anonymous);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                "[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[limits]\nmax_inflite = 3\n",
                "max_inflite",
            ),
            ("[[listeners]]\nkind = \"mqtt\"\nbnd = \"127.0.0.1:0\"\n", "bnd"),
            ("[[listeners]]\nkind = \"mqttt\"\nbind = \"127.0.0.1:0\"\n", "mqttt"),
            ("[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[mqtt]\nmax_qos = 3\n", "mqtt.max_qos"),
            (
                "[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[limits]\nmax_inflight = 0\n",
                "limits.max_inflight",
            ),
            ("", "listeners"),
            ("[storage]\ndri = \"x\"\n", "dri"),
            (
                "[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[limits]\nmax_sessions = 99999\n",
                "limits.max_sessions",
            ),
            (
                "[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[limits]\nlisten_backlog = 0\n",
                "limits.listen_backlog",
            ),
            // tracing-subscriber's parser panicked on this one (a config_toml fuzz finding).
            (
                "[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[log]\nlevel = \" xé[{2]*2\"\n",
                "log.level",
            ),
            (
                "[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[log]\nlevel = \"a[{=]\"\n",
                "log.level",
            ),
        ];
        for (text, key) in cases {
            let err = Config::from_toml(text, None).unwrap_err().to_string();
            assert!(err.contains(key), "{err:?} should name {key}");
        }
    }
}
