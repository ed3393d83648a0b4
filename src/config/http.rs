//! `[http]`: the settings of what the `http` listeners serve besides WebSockets — the REST API
//! under `/api/v1` (administrator sessions, lockout, body size) and Prometheus `/metrics`.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

/// `[http]`
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// A bearer token `/metrics` requires (`Authorization: Bearer ...`). Without it (and without
    /// `metrics_token_file`) `/metrics` is open to whoever reaches the listener.
    pub metrics_token: Option<String>,
    /// A file holding that token (surrounding whitespace ignored), relative to the config file.
    pub metrics_token_file: Option<PathBuf>,
    /// How long an administrator's browser session lives without a request, in seconds.
    pub session_idle_timeout_s: u64,
    /// Administrator browser sessions kept at most; a new login past it ends the least recently
    /// used one.
    pub max_sessions: usize,
    /// Failed administrator logins (per address and per name) within `login_window_s` that lock
    /// further logins out for `login_lockout_s`. 0 turns the lockout off.
    pub login_max_failures: u32,
    /// How long a failed login is remembered, in seconds.
    pub login_window_s: u64,
    /// How long logins stay locked, in seconds.
    pub login_lockout_s: u64,
    /// The delay before answering a login attempt after a failure, in milliseconds, doubling with
    /// each further failure (up to 8 times as long).
    pub login_delay_ms: u64,
    /// The largest request body the REST API reads, in bytes.
    pub max_body_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            metrics_token: None,
            metrics_token_file: None,
            session_idle_timeout_s: 3600,
            max_sessions: 1024,
            login_max_failures: 5,
            login_window_s: 300,
            login_lockout_s: 600,
            login_delay_ms: 250,
            max_body_bytes: 1024 * 1024,
        }
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("metrics_token", &self.metrics_token.as_ref().map(|_| "<redacted>"))
            .field("metrics_token_file", &self.metrics_token_file)
            .field("session_idle_timeout_s", &self.session_idle_timeout_s)
            .field("max_sessions", &self.max_sessions)
            .field("login_max_failures", &self.login_max_failures)
            .field("login_window_s", &self.login_window_s)
            .field("login_lockout_s", &self.login_lockout_s)
            .field("login_delay_ms", &self.login_delay_ms)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl HttpConfig {
    /// Checks the values; the message names the key.
    pub(crate) fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.metrics_token.is_some() && self.metrics_token_file.is_some() {
            return Err((
                "http.metrics_token_file",
                "give metrics_token or metrics_token_file, not both".into(),
            ));
        }
        if self.metrics_token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(("http.metrics_token", "is empty".into()));
        }
        if self.session_idle_timeout_s == 0 {
            return Err(("http.session_idle_timeout_s", "must be at least 1".into()));
        }
        if self.max_sessions == 0 {
            return Err(("http.max_sessions", "must be at least 1".into()));
        }
        if self.login_max_failures > 0 && (self.login_window_s == 0 || self.login_lockout_s == 0) {
            return Err((
                "http.login_lockout_s",
                "login_window_s and login_lockout_s must be at least 1".into(),
            ));
        }
        if self.max_body_bytes < 1024 {
            return Err(("http.max_body_bytes", "must be at least 1024".into()));
        }
        Ok(())
    }
}
