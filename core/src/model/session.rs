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
}
