//! `[cluster]`: which NATS servers to use, this node's name, how to authenticate to NATS, TLS,
//! and the bounds of the queues between the broker and NATS.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[cluster]`. Present: this node joins the cluster. Absent: mesgd is a single node.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name, unique in the cluster: 1 to 64 ASCII letters, digits, `-` or `_`.
    pub node: String,
    /// NATS server URLs (`nats://host:port`, `tls://host:port`); the client picks one and
    /// fails over to the others.
    #[serde(default = "default_nats")]
    pub nats: Vec<String>,
    /// A NATS `.creds` file (a user JWT and its NKey seed). Relative to the config file.
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    /// A NATS user name, with `password`.
    #[serde(default)]
    pub user: Option<String>,
    /// The NATS user's password.
    #[serde(default)]
    pub password: Option<String>,
    /// A NATS authentication token.
    #[serde(default)]
    pub token: Option<String>,
    /// TLS towards NATS. Absent: TLS only if the URL says `tls://` or the server requires it.
    #[serde(default)]
    pub tls: Option<ClusterTls>,
    /// How many messages may wait between the broker and the NATS connection, per direction
    /// (messages to other nodes; retained changes to the retained stream; messages from other
    /// nodes). Past it, a message to other nodes is dropped and counted.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
    /// The JetStream stream that holds the cluster's retained messages.
    #[serde(default = "default_retained_stream")]
    pub retained_stream: String,
    /// Its replica count when this node creates it (1, or 3 on a three-server NATS cluster).
    #[serde(default = "default_replicas")]
    pub retained_replicas: usize,
    /// How long start-up goes on trying to connect to NATS while the servers refuse, do not
    /// answer or do not resolve (started at the same time as the node), in milliseconds; also
    /// the bound of each server's connection attempt.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How long start-up goes on asking JetStream to create (or find) each stream and bucket
    /// while it answers that it is not ready (a NATS cluster still electing its leaders), in
    /// milliseconds. 0: the first refusal ends the start.
    #[serde(default = "default_jetstream_ready_timeout_ms")]
    pub jetstream_ready_timeout_ms: u64,
    /// How long this node goes on serving its clients alone after losing NATS, in
    /// milliseconds: past it, it closes their connections (MQTT 5: DISCONNECT 0x9C Use another
    /// server) so that they reconnect, through the load balancer, to a node that is still in
    /// the cluster. Lease renewals failing with NATS up (the minority side of a partition)
    /// count as a loss too. 0: never.
    #[serde(default = "default_nats_lost_close_ms")]
    pub nats_lost_close_ms: u64,
    /// How long start-up waits for the retained messages already in the stream to be loaded
    /// before the listeners open, in milliseconds.
    #[serde(default = "default_retained_load_timeout_ms")]
    pub retained_load_timeout_ms: u64,
    /// How long the empty message a retained delete leaves in the stream (its tombstone) stays
    /// before the node that stored it purges it, in milliseconds: long enough for every node
    /// following the stream to have applied the delete. 0: never purged.
    #[serde(default = "default_retained_tombstone_ms")]
    pub retained_tombstone_ms: u64,
    /// How often a node releases the registry records of sessions that dead nodes (or its own
    /// previous instances) left and that can no longer be resumed (their copies expired), in
    /// milliseconds. 0: never (they stay until their client id is claimed again).
    #[serde(default = "default_registry_sweep_ms")]
    pub registry_sweep_ms: u64,
    /// How long a node's lease lasts without being renewed, in milliseconds: a node that dies
    /// has its lease taken over, and its clients' wills sent, this long after its last renewal.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// The KV bucket of the wills of live connections (`<node>.<client key>`).
    #[serde(default = "default_wills_bucket")]
    pub wills_bucket: String,
    /// The KV bucket of the nodes' leases.
    #[serde(default = "default_nodes_bucket")]
    pub nodes_bucket: String,
    /// The JetStream stream that holds the builtin users and their ACLs, one message per user.
    #[serde(default = "default_users_stream")]
    pub users_stream: String,
    /// Its replica count when this node creates it (1, or 3 on a three-server NATS cluster).
    #[serde(default = "default_replicas")]
    pub users_replicas: usize,
    /// The JetStream stream that holds the login sessions' signing key and the ended
    /// sessions (replicas: `users_replicas`).
    #[serde(default = "default_logins_stream")]
    pub logins_stream: String,
    /// Whether the token key store (`<storage.dir>/keys`: the private keys that sign and
    /// decrypt claim, grant and anonymous tokens) is the same on every node, kept in the logins
    /// stream. Off, each node has its own and the operator copies the directory to every node.
    #[serde(default = "default_true")]
    pub share_token_keys: bool,
    /// The JetStream KV bucket of the session registry (which node owns each client id).
    #[serde(default = "default_registry_bucket")]
    pub registry_bucket: String,
    /// Its replica count when this node creates it (1, or 3 on a three-server NATS cluster).
    #[serde(default = "default_replicas")]
    pub registry_replicas: usize,
    /// How long a CONNECT may wait for the registry, in milliseconds: claiming the client id,
    /// and separately the previous owner's answer. Past the first, the client is refused with
    /// Server unavailable; past the second, the claim stands and the connect proceeds.
    #[serde(default = "default_registry_timeout_ms")]
    pub registry_timeout_ms: u64,
    /// The JetStream KV bucket of the persistent sessions' copies (one record per client id),
    /// from which a session whose node died resumes elsewhere (replicas: `registry_replicas`).
    #[serde(default = "default_session_state_bucket")]
    pub session_state_bucket: String,
    /// How long after a session's first change its record is written, in milliseconds (the
    /// changes meanwhile go in the same write); what a packet waits for is written at once.
    #[serde(default = "default_session_write_delay_ms")]
    pub session_write_delay_ms: u64,
    /// The relay across nodes: the JetStream KV bucket naming the node that holds each relay
    /// address, and the stream of the store-and-forward queues of offline addresses (their
    /// replica counts are `registry_replicas`).
    #[serde(default = "default_relay_bucket")]
    pub relay_bucket: String,
    /// See `relay_bucket`.
    #[serde(default = "default_relay_queue_stream")]
    pub relay_queue_stream: String,
    /// Content routing across nodes: the JetStream KV bucket with each node's listener paths
    /// (its replica count is `registry_replicas`).
    #[serde(default = "default_content_bucket")]
    pub content_bucket: String,
    /// The console's browser sessions on every node: the JetStream KV bucket with one record
    /// per open session (its replica count is `users_replicas`).
    #[serde(default = "default_console_bucket")]
    pub console_bucket: String,
    /// `[cluster.durable]`: the stream of QoS 1/2 messages.
    #[serde(default)]
    pub durable: crate::durable::DurableConfig,
}

/// `[cluster.tls]`: TLS towards the NATS servers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterTls {
    /// PEM CA certificates that sign the NATS servers' certificates (else the system roots).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate, for NATS servers that verify clients (with `key_file`).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's PEM private key.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Refuse a NATS server that does not speak TLS (default true once the table is present).
    #[serde(default = "default_true")]
    pub required: bool,
}

fn default_nats() -> Vec<String> {
    vec!["nats://127.0.0.1:4222".to_owned()]
}
fn default_queue_capacity() -> usize {
    8192
}
fn default_retained_stream() -> String {
    "MESGD_RETAINED".to_owned()
}
fn default_replicas() -> usize {
    1
}
fn default_connect_timeout_ms() -> u64 {
    5000
}
fn default_jetstream_ready_timeout_ms() -> u64 {
    30_000
}
fn default_nats_lost_close_ms() -> u64 {
    15_000
}
fn default_retained_tombstone_ms() -> u64 {
    600_000
}
fn default_registry_sweep_ms() -> u64 {
    300_000
}
fn default_retained_load_timeout_ms() -> u64 {
    10_000
}
fn default_lease_ms() -> u64 {
    10_000
}
fn default_wills_bucket() -> String {
    "mesgd_wills".to_owned()
}
fn default_nodes_bucket() -> String {
    "mesgd_nodes".to_owned()
}
fn default_users_stream() -> String {
    "MESGD_USERS".to_owned()
}
fn default_logins_stream() -> String {
    "MESGD_LOGINS".to_owned()
}
fn default_registry_bucket() -> String {
    "mesgd_sessions".to_owned()
}
fn default_registry_timeout_ms() -> u64 {
    2000
}
fn default_session_state_bucket() -> String {
    "mesgd_session_state".to_owned()
}
fn default_session_write_delay_ms() -> u64 {
    20
}
fn default_relay_bucket() -> String {
    "mesgd_relay".to_owned()
}
fn default_relay_queue_stream() -> String {
    "MESGD_RELAY_QUEUE".to_owned()
}
fn default_content_bucket() -> String {
    "mesgd_content".to_owned()
}
fn default_console_bucket() -> String {
    "mesgd_console".to_owned()
}
fn default_true() -> bool {
    true
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("node", &self.node)
            .field("nats", &self.nats)
            .field("credentials_file", &self.credentials_file)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("queue_capacity", &self.queue_capacity)
            .field("retained_stream", &self.retained_stream)
            .field("retained_replicas", &self.retained_replicas)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("jetstream_ready_timeout_ms", &self.jetstream_ready_timeout_ms)
            .field("nats_lost_close_ms", &self.nats_lost_close_ms)
            .field("retained_load_timeout_ms", &self.retained_load_timeout_ms)
            .field("retained_tombstone_ms", &self.retained_tombstone_ms)
            .field("registry_sweep_ms", &self.registry_sweep_ms)
            .field("lease_ms", &self.lease_ms)
            .field("wills_bucket", &self.wills_bucket)
            .field("nodes_bucket", &self.nodes_bucket)
            .field("users_stream", &self.users_stream)
            .field("users_replicas", &self.users_replicas)
            .field("logins_stream", &self.logins_stream)
            .field("share_token_keys", &self.share_token_keys)
            .field("registry_bucket", &self.registry_bucket)
            .field("registry_replicas", &self.registry_replicas)
            .field("registry_timeout_ms", &self.registry_timeout_ms)
            .field("session_state_bucket", &self.session_state_bucket)
            .field("session_write_delay_ms", &self.session_write_delay_ms)
            .field("relay_bucket", &self.relay_bucket)
            .field("relay_queue_stream", &self.relay_queue_stream)
            .field("content_bucket", &self.content_bucket)
            .field("console_bucket", &self.console_bucket)
            .field("durable", &self.durable)
            .finish()
    }
}

/// Why `[cluster]` is unusable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterConfigError {
    /// `node` is empty, too long, or holds a character other than ASCII letters, digits, `-`
    /// and `_`.
    #[error("[cluster] node {0:?}: a node name is 1 to 64 ASCII letters, digits, '-' or '_'")]
    NodeName(String),
    /// `nats` lists no server.
    #[error("[cluster] nats lists no server")]
    NoServers,
    /// More than one of `credentials_file`, `user`/`password` and `token` is set.
    #[error("[cluster] set one of credentials_file, user and password, or token; not {0}")]
    TwoCredentials(&'static str),
    /// `user` without `password` or the other way round.
    #[error("[cluster] user and password go together")]
    UserWithoutPassword,
    /// `[cluster.tls]` has `cert_file` without `key_file` or the other way round.
    #[error("[cluster.tls] cert_file and key_file go together")]
    CertWithoutKey,
    /// `queue_capacity`, `registry_timeout_ms` or a replica count out of range, or a stream or
    /// bucket name NATS refuses.
    #[error("[cluster] {key} = {value:?} is out of range: {why}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        why: &'static str,
    },
}

impl ClusterConfig {
    /// Checks what serde cannot: names, exclusive credentials, paired files, ranges.
    pub fn validate(&self) -> Result<(), ClusterConfigError> {
        let n = &self.node;
        if n.is_empty()
            || n.len() > 64
            || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ClusterConfigError::NodeName(n.clone()));
        }
        if self.nats.is_empty() {
            return Err(ClusterConfigError::NoServers);
        }
        let userpass = self.user.is_some() || self.password.is_some();
        match (self.credentials_file.is_some(), userpass, self.token.is_some()) {
            (true, true, _) => return Err(ClusterConfigError::TwoCredentials("credentials_file and user")),
            (true, _, true) => return Err(ClusterConfigError::TwoCredentials("credentials_file and token")),
            (_, true, true) => return Err(ClusterConfigError::TwoCredentials("user and token")),
            _ => {}
        }
        if self.user.is_some() != self.password.is_some() {
            return Err(ClusterConfigError::UserWithoutPassword);
        }
        if let Some(tls) = &self.tls {
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return Err(ClusterConfigError::CertWithoutKey);
            }
        }
        if self.queue_capacity == 0 {
            return Err(ClusterConfigError::OutOfRange {
                key: "queue_capacity",
                value: "0".into(),
                why: "at least 1",
            });
        }
        if !(1..=5).contains(&self.retained_replicas) {
            return Err(ClusterConfigError::OutOfRange {
                key: "retained_replicas",
                value: self.retained_replicas.to_string(),
                why: "1 to 5",
            });
        }
        if !(1..=5).contains(&self.users_replicas) {
            return Err(ClusterConfigError::OutOfRange {
                key: "users_replicas",
                value: self.users_replicas.to_string(),
                why: "1 to 5",
            });
        }
        if !(1..=5).contains(&self.registry_replicas) {
            return Err(ClusterConfigError::OutOfRange {
                key: "registry_replicas",
                value: self.registry_replicas.to_string(),
                why: "1 to 5",
            });
        }
        if self.registry_timeout_ms == 0 {
            return Err(ClusterConfigError::OutOfRange {
                key: "registry_timeout_ms",
                value: "0".into(),
                why: "at least 1",
            });
        }
        for (key, b) in [
            ("registry_bucket", &self.registry_bucket),
            ("session_state_bucket", &self.session_state_bucket),
            ("wills_bucket", &self.wills_bucket),
            ("nodes_bucket", &self.nodes_bucket),
            ("relay_bucket", &self.relay_bucket),
            ("content_bucket", &self.content_bucket),
            ("console_bucket", &self.console_bucket),
        ] {
            if b.is_empty()
                || b.len() > 64
                || !b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            {
                return Err(ClusterConfigError::OutOfRange {
                    key,
                    value: b.clone(),
                    why: "1 to 64 ASCII letters, digits, '-' or '_'",
                });
            }
        }
        let buckets = [
            &self.registry_bucket,
            &self.session_state_bucket,
            &self.wills_bucket,
            &self.nodes_bucket,
            &self.relay_bucket,
            &self.content_bucket,
            &self.console_bucket,
        ];
        if buckets.iter().enumerate().any(|(i, a)| buckets[..i].contains(a)) {
            return Err(ClusterConfigError::OutOfRange {
                key: "wills_bucket",
                value: self.wills_bucket.clone(),
                why: "registry_bucket, session_state_bucket, wills_bucket, nodes_bucket, relay_bucket, content_bucket and console_bucket must differ",
            });
        }
        if self.session_write_delay_ms == 0 || self.session_write_delay_ms > 10_000 {
            return Err(ClusterConfigError::OutOfRange {
                key: "session_write_delay_ms",
                value: self.session_write_delay_ms.to_string(),
                why: "1 to 10000",
            });
        }
        if self.lease_ms < 300 {
            return Err(ClusterConfigError::OutOfRange {
                key: "lease_ms",
                value: self.lease_ms.to_string(),
                why: "at least 300",
            });
        }
        for (key, s) in [
            ("retained_stream", &self.retained_stream),
            ("users_stream", &self.users_stream),
            ("logins_stream", &self.logins_stream),
            ("relay_queue_stream", &self.relay_queue_stream),
        ] {
            if s.is_empty() || s.bytes().any(|b| b.is_ascii_whitespace() || b"./*>".contains(&b)) {
                return Err(ClusterConfigError::OutOfRange {
                    key,
                    value: s.clone(),
                    why: "a non-empty name without whitespace, '.', '/', '*' or '>'",
                });
            }
        }
        let streams =
            [&self.retained_stream, &self.users_stream, &self.logins_stream, &self.relay_queue_stream];
        if streams.iter().enumerate().any(|(i, a)| streams[..i].contains(a)) {
            return Err(ClusterConfigError::OutOfRange {
                key: "users_stream",
                value: self.users_stream.clone(),
                why: "retained_stream, users_stream, logins_stream and relay_queue_stream must differ",
            });
        }
        self.durable.validate()
    }

    /// Resolves the configured file paths against `base` (the config file's directory).
    pub fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut Option<PathBuf>| {
            if let Some(path) = p.as_mut() {
                if path.is_relative() {
                    *path = base.join(&*path);
                }
            }
        };
        resolve(&mut self.credentials_file);
        if let Some(tls) = self.tls.as_mut() {
            resolve(&mut tls.ca_file);
            resolve(&mut tls.cert_file);
            resolve(&mut tls.key_file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClusterConfig, String> {
        let c: ClusterConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn defaults_and_a_full_table() {
        let c = parse("node = \"a\"").unwrap();
        assert_eq!(c.nats, ["nats://127.0.0.1:4222"]);
        assert_eq!(c.queue_capacity, 8192);
        assert_eq!(
            (c.registry_bucket.as_str(), c.registry_replicas, c.registry_timeout_ms),
            ("mesgd_sessions", 1, 2000)
        );
        let c = parse(
            "node = \"n-1\"\nnats = [\"tls://x:4222\"]\nuser = \"u\"\npassword = \"hunter2\"\n\
             [tls]\nca_file = \"ca.pem\"\n",
        )
        .unwrap();
        assert!(c.tls.as_ref().unwrap().required);
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn bad_tables_are_refused_naming_the_key() {
        let cases = [
            ("nats = []", "node"),
            ("node = \"a.b\"", "node"),
            ("node = \"a\"\nnats = []", "no server"),
            ("node = \"a\"\nuser = \"u\"", "go together"),
            ("node = \"a\"\ntoken = \"t\"\nuser = \"u\"\npassword = \"p\"", "user and token"),
            ("node = \"a\"\ncredentials_file = \"c\"\ntoken = \"t\"", "credentials_file and token"),
            ("node = \"a\"\n[tls]\ncert_file = \"c\"", "cert_file and key_file"),
            ("node = \"a\"\nqueue_capacity = 0", "queue_capacity"),
            ("node = \"a\"\nretained_replicas = 7", "retained_replicas"),
            ("node = \"a\"\nretained_stream = \"a.b\"", "retained_stream"),
            ("node = \"a\"\nusers_stream = \"a b\"", "users_stream"),
            ("node = \"a\"\nusers_stream = \"MESGD_RETAINED\"", "users_stream"),
            ("node = \"a\"\nusers_replicas = 0", "users_replicas"),
            ("node = \"a\"\nlease_ms = 10", "lease_ms"),
            ("node = \"a\"\nwills_bucket = \"a.b\"", "wills_bucket"),
            ("node = \"a\"\nnodes_bucket = \"mesgd_wills\"", "wills_bucket"),
            ("node = \"a\"\nregistry_bucket = \"a.b\"", "registry_bucket"),
            ("node = \"a\"\nregistry_bucket = \"\"", "registry_bucket"),
            ("node = \"a\"\nregistry_replicas = 0", "registry_replicas"),
            ("node = \"a\"\nregistry_timeout_ms = 0", "registry_timeout_ms"),
            ("node = \"a\"\nnat = []", "unknown field `nat`"),
        ];
        for (text, expected) in cases {
            let err = parse(text).expect_err(text);
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }
}
