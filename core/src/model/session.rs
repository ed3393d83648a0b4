//! What identifies a session, how long it lives, and why a connection is closed from outside.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::Revocation;

/// How long a session lives after its connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionExpiry {
    /// Ends with the connection (clean session / expiry interval 0).
    OnDisconnect,
    /// Kept for this long after the connection ends.
    After(Duration),
    /// Kept until the client cleans it (MQTT 3.x persistent session, v5 0xFFFFFFFF).
    Never,
}

impl SessionExpiry {
    /// The expiry an MQTT session expiry interval (seconds) stands for: 0 ends the session with
    /// its connection, 0xFFFFFFFF keeps it for ever.
    pub fn from_interval(seconds: u32) -> Self {
        match seconds {
            0 => SessionExpiry::OnDisconnect,
            u32::MAX => SessionExpiry::Never,
            s => SessionExpiry::After(Duration::from_secs(u64::from(s))),
        }
    }
}

/// Which protocol's identifiers a session key belongs to. Sessions of different namespaces
/// never collide: an MQTT client `foo` does not take over the relay address `foo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Namespace {
    /// MQTT client identifiers.
    Mqtt,
    /// JSON relay addresses.
    Relay,
}

impl Namespace {
    /// A short stable name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Namespace::Mqtt => "mqtt",
            Namespace::Relay => "relay",
        }
    }
}

/// The key of a session in the broker's registry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    /// Whose identifiers.
    pub namespace: Namespace,
    /// The client id (MQTT) or address (relay).
    pub id: Arc<str>,
}

impl SessionKey {
    /// The key of MQTT client `id`.
    pub fn mqtt(id: impl Into<Arc<str>>) -> Self {
        SessionKey { namespace: Namespace::Mqtt, id: id.into() }
    }

    /// The key of relay address `id`.
    pub fn relay(id: impl Into<Arc<str>>) -> Self {
        SessionKey { namespace: Namespace::Relay, id: id.into() }
    }
}

/// Who is connected to a session, for operators (the REST API, the console, logs): what the
/// front end knew at admission. Never holds a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The wire protocol.
    pub protocol: crate::auth::Protocol,
    /// The listener's name.
    pub listener: Arc<str>,
    /// The peer's address, when the transport has one.
    pub peer: Option<std::net::SocketAddr>,
    /// The authenticated username, if any.
    pub username: Option<Arc<str>>,
    /// The provider that admitted the client.
    pub provider: Arc<str>,
    /// The Common Name of the verified TLS client certificate, if any.
    pub tls_common_name: Option<Arc<str>>,
    /// When the connection was admitted, on the wall clock.
    pub connected_at: std::time::SystemTime,
}

impl ClientInfo {
    /// What is known of a client admitted by `provider` over `protocol` on `listener`.
    pub fn new(
        protocol: crate::auth::Protocol,
        listener: Arc<str>,
        provider: Arc<str>,
        connected_at: std::time::SystemTime,
    ) -> Self {
        ClientInfo {
            protocol,
            listener,
            peer: None,
            username: None,
            provider,
            tls_common_name: None,
            connected_at,
        }
    }

    /// With the peer's address.
    pub fn with_peer(mut self, peer: Option<std::net::SocketAddr>) -> Self {
        self.peer = peer;
        self
    }

    /// With the authenticated username.
    pub fn with_username(mut self, username: Option<Arc<str>>) -> Self {
        self.username = username;
        self
    }

    /// With the TLS client certificate's Common Name.
    pub fn with_tls_common_name(mut self, cn: Option<Arc<str>>) -> Self {
        self.tls_common_name = cn;
        self
    }
}

/// Why a connection is being closed from outside its own task. Front ends map it onto their
/// wire (MQTT 5: 0x8E, 0x8B, 0x87 / 0x98).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kick {
    /// Another connection took the session over.
    TakenOver,
    /// The broker is shutting down.
    ShuttingDown,
    /// The identity's provider revoked it (account disabled or deleted).
    Revoked(Revocation),
    /// An operator closed the connection (REST API, console).
    Administrative,
    /// This node has been cut off from its cluster for longer than it may serve alone: the
    /// client should reconnect, to another node.
    ClusterLost,
}
