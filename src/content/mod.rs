//! The content-routing front end: WebSocket listeners on URL paths of the `http` listener, and
//! the pattern compiler's command and HTTP interface.
//!
//! An upgrade at any path but the reserved ones is admitted by its credential, then registered
//! as a listener on its percent-decoded URL path. Every JSON text frame from any content
//! connection is scanned once and handed, as the same text, to every listener whose path it
//! matches (`mesgd_core::content`'s indexed [`Matcher`](mesgd_core::content::Matcher), shared
//! by the whole server). The rules are in `docs/content.md`.
//!
//! # Layout
//!
//! - [`config`]: the `[content]` table.
//! - `route`: the HTTP side: reserved paths, the path, admission, the upgrade.
//! - `admission`: where the credential comes from and what admits which path.
//! - `grant`: the live checks of connections that speak for an account (grant connections'
//!   reach before each message; closing on a disabled or deleted account or an expiry).
//! - `connection`: one connection's task: reading, routing, writing, closing.
//! - `registry`: the shared matcher, each connection's outbox, delivery.
//! - `cluster`: with `[cluster]`, this node's listener paths published and messages to and
//!   from the nodes with a matching listener.
//! - `outbox`: a listener's bounded queue.
//! - [`compile`]: `mesgd pattern compile` and `POST /api/patterns/compile`.
//! - [`stats`]: the counters.

mod admission;
pub(crate) mod cluster;
pub mod compile;
pub mod config;
mod connection;
pub(crate) mod grant;
mod outbox;
mod registry;
mod route;
pub mod stats;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use mesgd_core::sync::{lock, read, write};
use mesgd_providers::tokens::{Claims, KeyError, KeyStore, TokenError};
use tokio::sync::{Semaphore, watch};

pub use self::compile::{PatternCommand, compile, run_pattern_command};
pub use self::config::ContentConfig;
pub(crate) use self::route::routes;
pub use self::stats::ContentStats;
use crate::config::{Config, ListenerKind};

/// The key store is re-read at most this often for tokens that name an unknown key.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The server's token keys, for verifying the tokens upgrades present.
#[derive(Debug)]
pub(crate) struct Keys {
    store: RwLock<KeyStore>,
    last_refresh: Mutex<Option<Instant>>,
}

impl Keys {
    fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        mesgd_providers::tokens::verify(&read(&self.store), token, now)
    }

    /// Re-reads the store if it was not re-read within [`REFRESH_EVERY`]; whether it changed.
    fn refresh(&self, now: SystemTime) -> bool {
        let at = crate::clock::now();
        {
            let mut last = lock(&self.last_refresh);
            if last.is_some_and(|l| at.duration_since(l) < REFRESH_EVERY) {
                return false;
            }
            *last = Some(at);
        }
        self.reload_at(now)
    }

    /// Reloads the store if its `keys.json` changed on disk (`mesgd keys rotate` in another
    /// process, or the cluster's store imported); whether it did. Blocking: file reads.
    pub(crate) fn reload_if_changed(&self) -> bool {
        self.reload_at(SystemTime::now())
    }

    fn reload_at(&self, now: SystemTime) -> bool {
        match read(&self.store).is_stale() {
            Ok(false) => return false,
            Ok(true) => {}
            Err(e) => {
                tracing::error!(error = %e, "cannot read the token key store; keeping the keys loaded");
                return false;
            }
        }
        // One guard for the refresh and the log line: taking the read lock while this write
        // guard lives would deadlock.
        let mut store = write(&self.store);
        match store.refresh(now) {
            Ok(changed) => {
                if changed {
                    tracing::info!(current = %store.current_key_id(), "token keys reloaded");
                }
                changed
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot re-read the token key store; keeping the keys loaded");
                false
            }
        }
    }
}

/// How often the key store's `keys.json` is compared with the one loaded.
const WATCH_KEYS_EVERY: Duration = Duration::from_secs(1);

/// Reloads the token keys within a second of a change on disk, so that a rotation made while
/// the server runs (`mesgd keys rotate`, above all `--grace 0s` for a leaked key) holds for
/// the tokens it verifies and signs, not only once a token names a key it does not know.
pub(crate) async fn watch_keys_loop(
    ctx: Arc<crate::context::ServerContext>,
    mut stop: watch::Receiver<bool>,
) {
    let Some((_, keys)) = ctx.content.token_keys() else {
        return;
    };
    let mut ticker = tokio::time::interval(WATCH_KEYS_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticker.tick() => {
                let keys = keys.clone();
                let _ = tokio::task::spawn_blocking(move || keys.reload_if_changed()).await;
            }
        }
    }
}

/// Why a token could not be verified.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unverified {
    /// The token is refused.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// This server has no key store (it has no `http` listener).
    #[error("this server verifies no tokens")]
    NoKeys,
    /// The verification task failed.
    #[error("the verification did not complete")]
    Aborted,
}

/// What the content front end shares across connections (one per server, in the context).
#[derive(Debug)]
pub(crate) struct Content {
    pub(crate) config: ContentConfig,
    pub(crate) registry: registry::Registry,
    keys: Option<Arc<Keys>>,
    /// Token verifications running at once at most (each is an RSA decryption).
    verifying: Semaphore,
    stopping: watch::Sender<bool>,
}

impl Content {
    /// The front end's state for `config`. The key store (`<storage.dir>/keys`) is opened, or
    /// made on first start, only when an `http` listener is configured; a corrupt store stops
    /// the start.
    pub(crate) fn open(config: &Config) -> Result<Content, KeyError> {
        let keys = if config.listeners.iter().any(|l| l.kind == ListenerKind::Http) {
            let dir = mesgd_providers::tokens::keys_dir(&config.storage_dir());
            let store = KeyStore::open_or_create(&dir, SystemTime::now())?;
            Some(Arc::new(Keys { store: RwLock::new(store), last_refresh: Mutex::new(None) }))
        } else {
            None
        };
        let c = &config.content;
        let limits = outbox::QueueLimits { messages: c.max_queued_messages, bytes: c.max_queued_bytes };
        let parallel = std::thread::available_parallelism().map_or(2, |n| n.get());
        Ok(Content {
            config: c.clone(),
            registry: registry::Registry::new(config.limits.max_connections, limits, c.echo),
            keys,
            verifying: Semaphore::new(2 * parallel),
            stopping: watch::channel(false).0,
        })
    }

    /// Verifies `token` on a blocking thread.
    async fn verify(&self, token: admission::Presented) -> Result<Claims, Unverified> {
        let keys = self.keys.clone().ok_or(Unverified::NoKeys)?;
        let _permit = self.verifying.acquire().await.map_err(|_| Unverified::Aborted)?;
        tokio::task::spawn_blocking(move || admission::verify_now(&keys, &token))
            .await
            .map_err(|_| Unverified::Aborted)?
            .map_err(Unverified::from)
    }

    /// Runs `f` with the server's token keys (on a blocking thread: RSA work); `None` without
    /// a key store.
    pub(crate) async fn with_keys<T: Send + 'static>(
        &self,
        f: impl FnOnce(&KeyStore) -> T + Send + 'static,
    ) -> Option<T> {
        let keys = self.keys.clone()?;
        tokio::task::spawn_blocking(move || f(&read(&keys.store))).await.ok()
    }

    /// The token key store's directory and its keys, if this server has them (an `http`
    /// listener).
    pub(crate) fn token_keys(&self) -> Option<(std::path::PathBuf, Arc<Keys>)> {
        let keys = self.keys.clone()?;
        let dir = read(&keys.store).dir().to_owned();
        Some((dir, keys))
    }

    /// The counters.
    pub(crate) fn stats(&self) -> &ContentStats {
        &self.registry.stats
    }

    /// How many listeners are registered.
    pub(crate) fn listeners(&self) -> usize {
        self.registry.listeners()
    }

    /// Closes every content connection (code 1001) and refuses new ones: server shutdown.
    pub(crate) fn shut_down(&self) {
        self.stopping.send_replace(true);
    }

    /// Turns `true` when the server shuts down (long-lived HTTP answers end then too).
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }
}
