//! `[content]`: who may open a content-routing WebSocket, whether senders hear themselves, and
//! the per-connection limits.

use mesgd_core::content::Path;
use serde::Deserialize;

/// `[content]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContentConfig {
    /// Every upgrade is admitted without a credential (a credential sent anyway is not read).
    pub disable_auth: bool,
    /// Paths that need no credential: an upgrade without one is admitted on any path one of
    /// these covers (`/kind=public` admits `/kind=public/room=1`).
    pub public_paths: Vec<Path>,
    /// Whether a sender also receives its own message when its path matches it.
    pub echo: bool,
    /// The largest message (text frame, fragments reassembled) accepted, in bytes. A larger one
    /// closes the connection with code 1009.
    pub max_message_bytes: usize,
    /// Messages waiting to be written to one listener at most; past it the listener is
    /// disconnected as too slow (counted).
    pub max_queued_messages: usize,
    /// Bytes waiting to be written to one listener at most (same treatment).
    pub max_queued_bytes: usize,
}

impl Default for ContentConfig {
    fn default() -> Self {
        ContentConfig {
            disable_auth: false,
            public_paths: Vec::new(),
            echo: false,
            max_message_bytes: 64 * 1024,
            max_queued_messages: 1000,
            max_queued_bytes: 4 * 1024 * 1024,
        }
    }
}

impl ContentConfig {
    /// The first setting out of range, as `(key, what to do)`.
    pub(crate) fn problem(&self) -> Option<(&'static str, &'static str)> {
        if self.max_message_bytes < 64 {
            return Some(("content.max_message_bytes", "must be at least 64 bytes"));
        }
        if self.max_message_bytes > (1 << 30) {
            return Some(("content.max_message_bytes", "must be at most 1073741824 bytes"));
        }
        if self.max_queued_messages == 0 {
            return Some(("content.max_queued_messages", "must be at least 1"));
        }
        if self.max_queued_bytes < self.max_message_bytes {
            return Some((
                "content.max_queued_bytes",
                "must be at least content.max_message_bytes, or no message of the largest size could be queued",
            ));
        }
        None
    }
}
