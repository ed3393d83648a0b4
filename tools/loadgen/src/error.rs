//! Errors of the generator: a frame it could not read, a connection it could not set up.
//!
//! Neither stops a run by itself: during the load, every error is counted by its
//! [`SetupError::kind`] or [`FrameError`] text in the row's `errors`; only a failure while
//! building the scenario (the broker refuses the first subscriber, say) ends the run.

use std::time::Duration;

use crate::mqtt::codec::MqttError;
use crate::ws::WsError;

/// A frame that could not be read; the connection's byte stream cannot be trusted after it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum FrameError {
    /// A malformed MQTT packet.
    #[error("mqtt: {0}")]
    Mqtt(#[from] MqttError),
    /// A malformed WebSocket frame.
    #[error("websocket: {0}")]
    Ws(#[from] WsError),
    /// A length-prefixed frame over the limit.
    #[error("frame of {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// A connection that could not be opened, or a handshake that did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SetupError {
    /// A socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (`connect`, `register`, …).
        what: &'static str,
        /// The failure.
        source: std::io::Error,
    },
    /// No answer in time.
    #[error("{what}: no answer within {after:?}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// The peer closed the connection.
    #[error("{what}: the connection was closed")]
    Closed {
        /// What was being done.
        what: &'static str,
    },
    /// The peer sent something unreadable.
    #[error("{what}: {source}")]
    Frame {
        /// What was being done.
        what: &'static str,
        /// The frame error.
        source: FrameError,
    },
    /// The peer answered, and the answer was no (a CONNACK code, a relay error frame, …).
    #[error("{what} refused: {reason}")]
    Refused {
        /// What was refused.
        what: &'static str,
        /// The peer's reason.
        reason: String,
    },
}

impl SetupError {
    /// A short key for counting this error among others of its kind: no addresses, no ids.
    pub(crate) fn kind(&self) -> String {
        match self {
            // The kind's name (`ConnectionRefused`): stable across Rust versions, unlike its text.
            SetupError::Io { what, source } => format!("{what}: {:?}", source.kind()),
            SetupError::Timeout { what, .. } => format!("{what}: timeout"),
            SetupError::Closed { what } => format!("{what}: closed"),
            SetupError::Frame { what, source } => format!("{what}: {source}"),
            SetupError::Refused { what, reason } => format!("{what} refused: {reason}"),
        }
    }

    /// An I/O error while doing `what`.
    pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> SetupError {
        move |source| SetupError::Io { what, source }
    }
}
