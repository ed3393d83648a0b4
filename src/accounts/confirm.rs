//! Login confirmation (`[auth] require_confirm = true`): a login whose password is right
//! gets a pending id instead of a session, and a one-time code is delivered to the account's
//! owner through the configured command or webhook; `POST /auth/confirm` with both completes
//! the login.
//!
//! - **Codes**: 8 decimal digits from the system's random source, compared in constant time
//!   (`subtle`). A pending login lasts `code_ttl` and allows `max_attempts` wrong codes, then
//!   it is gone; a wrong code also counts as a failed login for the login guard.
//! - **Bounded**: at most `max_pending` pending logins; expired ones are pruned when a new one
//!   is made, and a login that finds the table still full is refused (503) and counted in
//!   [`Pending::refused`], never an older entry dropped.
//! - **Delivery**: `command` runs with the account in `MESGD_ACCOUNT` and the code as one line
//!   on its standard input (never in its arguments, which `ps` shows); it must exit 0 within
//!   the delivery time limit. `webhook` receives `POST {"account", "code"}` and must answer
//!   2xx. With `development = true` the code is also written to the log, which is for a
//!   developer's own machine only. The login answers only after delivery succeeded.
//!
//! Time is passed in (`now: Instant`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use mesgd_core::sync::lock;
use serde::Deserialize;
use subtle::ConstantTimeEq as _;

/// How long delivering one code may take.
const DELIVERY_LIMIT: Duration = Duration::from_secs(10);

/// `[auth.confirm]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfirmConfig {
    /// A program and its arguments that delivers a code (account in `MESGD_ACCOUNT`, code on
    /// standard input).
    pub command: Vec<String>,
    /// A URL that receives `POST {"account", "code"}`.
    pub webhook: Option<String>,
    /// Also write codes to the log (a developer's machine only).
    pub development: bool,
    /// How long a pending login lasts.
    #[serde(deserialize_with = "super::humantime_duration")]
    pub code_ttl: Duration,
    /// Wrong codes allowed per pending login.
    pub max_attempts: u32,
    /// Pending logins at most.
    pub max_pending: usize,
}

impl Default for ConfirmConfig {
    fn default() -> Self {
        ConfirmConfig {
            command: Vec::new(),
            webhook: None,
            development: false,
            code_ttl: Duration::from_secs(600),
            max_attempts: 5,
            max_pending: 10_000,
        }
    }
}

impl ConfirmConfig {
    /// Whether some way of delivering codes is configured.
    pub(crate) fn delivers(&self) -> bool {
        !self.command.is_empty() || self.webhook.is_some() || self.development
    }
}

struct Entry {
    account: String,
    code: String,
    expires: Instant,
    attempts_left: u32,
}

/// What a confirmation attempt found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// The code is right: the account to log in.
    Confirmed(String),
    /// No such pending login (never made, completed, expired, or out of attempts).
    Unknown,
    /// A wrong code; the pending login stays while attempts are left.
    Wrong,
}

/// The pending logins of one server.
pub(crate) struct Pending {
    entries: Mutex<HashMap<String, Entry>>,
    ttl: Duration,
    max_attempts: u32,
    max: usize,
    /// Logins refused because the table was full.
    pub(crate) refused: AtomicU64,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("entries", &lock(&self.entries).len()).finish_non_exhaustive()
    }
}

impl Pending {
    /// An empty table with `config`'s limits.
    pub(crate) fn new(config: &ConfirmConfig) -> Pending {
        Pending {
            entries: Mutex::new(HashMap::new()),
            ttl: config.code_ttl,
            max_attempts: config.max_attempts.max(1),
            max: config.max_pending.max(1),
            refused: AtomicU64::new(0),
        }
    }

    /// A pending login for `account` at `now`: `(id, code)`; `None` when the table is full.
    pub(crate) fn open(&self, account: &str, now: Instant) -> Option<(String, String)> {
        let mut entries = lock(&self.entries);
        if entries.len() >= self.max {
            entries.retain(|_, e| e.expires > now);
        }
        if entries.len() >= self.max {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let code = format!("{:08}", rand::random::<u32>() % 100_000_000);
        let entry = Entry {
            account: account.to_owned(),
            code: code.clone(),
            expires: now + self.ttl,
            attempts_left: self.max_attempts,
        };
        entries.insert(id.clone(), entry);
        Some((id, code))
    }

    /// Forgets a pending login (its code could not be delivered).
    pub(crate) fn cancel(&self, id: &str) {
        lock(&self.entries).remove(id);
    }

    /// Checks `code` for the pending login `id` at `now`.
    pub(crate) fn check(&self, id: &str, code: &str, now: Instant) -> Checked {
        let mut entries = lock(&self.entries);
        let Some(entry) = entries.get_mut(id) else { return Checked::Unknown };
        if entry.expires <= now {
            entries.remove(id);
            return Checked::Unknown;
        }
        if bool::from(entry.code.as_bytes().ct_eq(code.as_bytes())) {
            let account = entry.account.clone();
            entries.remove(id);
            return Checked::Confirmed(account);
        }
        entry.attempts_left -= 1;
        if entry.attempts_left == 0 {
            entries.remove(id);
        }
        Checked::Wrong
    }
}

/// Why a code was not delivered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeliveryError {
    /// The command could not run, failed, or took too long.
    #[error("the confirmation command failed: {0}")]
    Command(String),
    /// The webhook could not be reached or did not answer 2xx.
    #[error("the confirmation webhook failed: {0}")]
    Webhook(String),
}

/// Delivers `code` for `account` in every configured way.
pub(crate) async fn deliver(config: &ConfirmConfig, account: &str, code: &str) -> Result<(), DeliveryError> {
    if config.development {
        tracing::warn!(%account, %code, "development mode: a login confirmation code");
    }
    if let Some((program, args)) = config.command.split_first() {
        run_command(program, args, account, code).await?;
    }
    if let Some(url) = &config.webhook {
        post_webhook(url, account, code).await?;
    }
    Ok(())
}

async fn run_command(program: &str, args: &[String], account: &str, code: &str) -> Result<(), DeliveryError> {
    use tokio::io::AsyncWriteExt as _;
    let fail = |e: String| DeliveryError::Command(e);
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("MESGD_ACCOUNT", account)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| fail(format!("cannot start {program:?}: {e}")))?;
    let run = async {
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(format!("{code}\n").as_bytes()).await.map_err(|e| fail(e.to_string()))?;
        }
        child.wait().await.map_err(|e| fail(e.to_string()))
    };
    match tokio::time::timeout(DELIVERY_LIMIT, run).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(fail(format!("{program:?} exited with {status}"))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(fail(format!("{program:?} took longer than {DELIVERY_LIMIT:?}"))),
    }
}

async fn post_webhook(url: &str, account: &str, code: &str) -> Result<(), DeliveryError> {
    let fail = |e: String| DeliveryError::Webhook(e);
    let client = reqwest::Client::builder()
        .timeout(DELIVERY_LIMIT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let body = serde_json::json!({ "account": account, "code": code }).to_string();
    let response = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(fail(format!("it answered {}", response.status())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max: usize) -> Pending {
        Pending::new(&ConfirmConfig { max_pending: max, max_attempts: 2, ..ConfirmConfig::default() })
    }

    #[test]
    fn a_code_confirms_once() {
        let p = table(10);
        let now = Instant::now();
        let (id, code) = p.open("alice", now).unwrap();
        assert_eq!(code.len(), 8);
        assert_eq!(p.check(&id, &code, now), Checked::Confirmed("alice".into()));
        assert_eq!(p.check(&id, &code, now), Checked::Unknown, "one-time");
    }

    #[test]
    fn wrong_codes_use_up_the_attempts_and_expiry_ends_it() {
        let p = table(10);
        let now = Instant::now();
        let (id, code) = p.open("alice", now).unwrap();
        assert_eq!(p.check(&id, "nope", now), Checked::Wrong);
        assert_eq!(p.check(&id, "nope", now), Checked::Wrong);
        assert_eq!(p.check(&id, &code, now), Checked::Unknown, "out of attempts");
        let (id, code) = p.open("alice", now).unwrap();
        assert_eq!(p.check(&id, &code, now + Duration::from_secs(600)), Checked::Unknown, "expired");
        assert_eq!(p.check("no-such-id", &code, now), Checked::Unknown);
    }

    #[test]
    fn the_table_is_bounded_and_counts_refusals() {
        let p = table(2);
        let now = Instant::now();
        assert!(p.open("a", now).is_some());
        assert!(p.open("b", now).is_some());
        assert!(p.open("c", now).is_none());
        assert_eq!(p.refused.load(Ordering::Relaxed), 1);
        assert!(p.open("c", now + Duration::from_secs(601)).is_some(), "expired entries make room");
    }
}
