//! The live view of the builtin store: an in-memory copy of every record, kept current by a
//! background poll, and the [`IdentityUpdater`]s through which changes reach connected clients.
//!
//! Why a copy and a poll: connects must not wait for SQLite, messages must never query it, and
//! the store is also changed by other processes (`mesgd user ...`), which no in-process
//! notification would see. A dedicated thread asks SQLite for `PRAGMA data_version` (a counter
//! that moves when another connection commits) every `poll_interval_ms` (default 250 ms); only
//! when it moved is the store read again, in one transaction. The new copy replaces the old one
//! atomically, and for every username that connected clients hold, the new state is published:
//! `Active(rules)` when the rules or the unrestricted flag changed, `Revoked(Disabled)` or
//! `Revoked(Deleted)` when the record was disabled or removed. A revoked entry is dropped, so a
//! record that is enabled or re-created later starts afresh. Cached password checks of every
//! changed user are dropped at the same moment (a password change leaves existing connections
//! alone: the broker does not re-ask for passwords).
//!
//! Admitting a client and publishing a change take the same lock, so a client admitted while a
//! change lands either gets the new state or sees the change published to it.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use mesgd_core::auth::{Denial, Identity, IdentityState, IdentityUpdater, LiveIdentity, Outcome, Revocation};
use rusqlite::Connection;
use tokio::sync::watch;

use super::cache::VerifyCache;
use super::store::{self, Store, StoreError, UserRecord};

/// The default pause between two `data_version` checks.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Every record, by username.
type Snapshot = HashMap<String, Arc<UserRecord>>;

/// The builtin store as the running broker sees it (see the module doc). Shared by every
/// builtin and x509 provider of a chain; dropping the last handle stops the poll thread.
pub struct UserDirectory {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    snapshot: ArcSwap<Snapshot>,
    live: Mutex<HashMap<String, Tracked>>,
    verify_cache: VerifyCache,
    poll_interval_ms: AtomicU64,
    /// Wakes the poll thread early; dropping it (with `Inner`) stops the thread.
    wake: mpsc::Sender<()>,
    /// Counts applied changes, for whoever wants to react to them (an admin view, a test).
    applied: watch::Sender<u64>,
}

/// A username that connected clients hold, with the state last published to them.
struct Tracked {
    updater: IdentityUpdater,
    state: IdentityState,
}

impl fmt::Debug for UserDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserDirectory")
            .field("path", &self.inner.store.path())
            .field("users", &self.inner.snapshot.load().len())
            .finish_non_exhaustive()
    }
}

impl UserDirectory {
    /// Opens the store at `db_path`, reads every record and starts the poll thread.
    pub fn open(db_path: &Path) -> Result<UserDirectory, StoreError> {
        let store = Store::open(db_path)?;
        // The poll thread has its own connection: `data_version` only moves for commits made
        // by *other* connections, and this one never writes.
        let mut poll_conn = store::open_connection(db_path)?;
        let version = data_version(&poll_conn, db_path)?;
        let snapshot = into_snapshot(store::load_all(&mut poll_conn, db_path)?);
        let (wake, woken) = mpsc::channel();
        let inner = Arc::new(Inner {
            store,
            snapshot: ArcSwap::from_pointee(snapshot),
            live: Mutex::new(HashMap::new()),
            verify_cache: VerifyCache::new(super::cache::DEFAULT_CAPACITY),
            poll_interval_ms: AtomicU64::new(DEFAULT_POLL_INTERVAL.as_millis() as u64),
            wake,
            applied: watch::Sender::new(0),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("mesgd-userdb-poll".into())
            .spawn(move || poll_loop(&weak, poll_conn, &woken, version))
            .map_err(|source| StoreError::Open { path: db_path.to_path_buf(), source })?;
        Ok(UserDirectory { inner })
    }

    /// The management API over the same database (changes made through it are picked up by
    /// the next poll, or at once after [`UserDirectory::check_now`]).
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Sets the pause between two checks for changes (clamped to 10 ms .. 60 s).
    pub fn set_poll_interval(&self, interval: Duration) {
        let ms = interval.as_millis().clamp(10, 60_000) as u64;
        self.inner.poll_interval_ms.store(ms, Ordering::Relaxed);
    }

    /// Asks the poll thread to check for changes now instead of at its next tick.
    pub fn check_now(&self) {
        // The thread only stops when `Inner` (and with it this sender) is gone.
        let _ = self.inner.wake.send(());
    }

    /// How many records the in-memory copy holds.
    pub fn user_count(&self) -> usize {
        self.inner.snapshot.load().len()
    }

    /// The record for `username` as the broker currently sees it.
    pub fn user(&self, username: &str) -> Option<Arc<UserRecord>> {
        self.inner.snapshot.load().get(username).cloned()
    }

    /// A counter that moves each time a change to the store has been applied (after connected
    /// clients were told): await [`watch::Receiver::changed`] to learn of the next one.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.applied.subscribe()
    }

    pub(crate) fn verify_cache(&self) -> &VerifyCache {
        &self.inner.verify_cache
    }

    /// Admits `username` with its current record, after `check` found nothing against that
    /// record (it sees the record as it is now, which may differ from what the caller verified).
    /// The identity carries a [`LiveIdentity`] that later changes are published to.
    pub(crate) fn admit(
        &self,
        provider: &str,
        client_id: &str,
        username: &str,
        check: impl FnOnce(&UserRecord) -> Result<(), Denial>,
    ) -> Outcome {
        let mut live = self.inner.lock_live();
        let snapshot = self.inner.snapshot.load();
        let Some(record) = snapshot.get(username) else {
            return Outcome::Deny(Denial::not_authorized(format!(
                "user {username:?} was removed during login"
            )));
        };
        if let Err(denial) = check(record) {
            return Outcome::Deny(denial);
        }
        if record.disabled {
            return Outcome::Deny(Denial::not_authorized(format!("user {username:?} is disabled")));
        }
        let handle = match live.get(username) {
            Some(tracked) => tracked.updater.subscribe(),
            None => {
                let state = state_of(Some(record));
                let (updater, handle) = LiveIdentity::channel(state.clone());
                live.insert(username.to_owned(), Tracked { updater, state });
                handle
            }
        };
        let identity = Identity::new(provider, client_id, Some(username.to_owned()), record.acl());
        Outcome::Allow(identity.with_live(Some(handle)))
    }
}

impl Inner {
    fn lock_live(&self) -> MutexGuard<'_, HashMap<String, Tracked>> {
        // Every critical section leaves the map consistent, so a poisoned lock is still usable.
        self.live.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Installs a freshly read copy of the store and publishes what changed.
    fn apply(&self, fresh: Snapshot) {
        let mut live = self.lock_live();
        let old = self.snapshot.swap(Arc::new(fresh));
        let fresh = self.snapshot.load();
        let changed: Vec<&str> = old
            .iter()
            .filter(|(name, record)| fresh.get(*name) != Some(*record))
            .map(|(name, _)| name.as_str())
            .collect();
        if !changed.is_empty() {
            self.verify_cache.invalidate_users(&changed);
        }
        live.retain(|name, tracked| {
            let state = state_of(fresh.get(name));
            if state != tracked.state {
                tracked.updater.set(state.clone());
                tracked.state = state;
            }
            // A revoked identity is final; only clients still connected need the entry.
            !matches!(tracked.state, IdentityState::Revoked(_)) && tracked.updater.is_in_use()
        });
        self.applied.send_modify(|count| *count += 1);
    }

    /// Drops the entries of usernames no client holds any more.
    fn prune(&self) {
        self.lock_live().retain(|_, tracked| tracked.updater.is_in_use());
    }
}

/// The state connected clients of `record` should have.
fn state_of(record: Option<&Arc<UserRecord>>) -> IdentityState {
    match record {
        None => IdentityState::Revoked(Revocation::Deleted),
        Some(record) if record.disabled => IdentityState::Revoked(Revocation::Disabled),
        Some(record) => IdentityState::Active(record.acl().map(Arc::from)),
    }
}

fn into_snapshot(records: HashMap<String, UserRecord>) -> Snapshot {
    records.into_iter().map(|(name, record)| (name, Arc::new(record))).collect()
}

fn data_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    conn.pragma_query_value(None, "data_version", |row| row.get(0))
        .map_err(|source| StoreError::Database { path: path.to_path_buf(), source })
}

/// The poll thread: runs until the directory is dropped.
fn poll_loop(inner: &Weak<Inner>, mut conn: Connection, woken: &mpsc::Receiver<()>, mut seen: i64) {
    let mut failing = false;
    loop {
        let Some(interval) = inner.upgrade().map(|i| i.poll_interval_ms.load(Ordering::Relaxed)) else {
            return;
        };
        match woken.recv_timeout(Duration::from_millis(interval)) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(inner) = inner.upgrade() else { return };
        let path = inner.store.path().to_path_buf();
        let result = data_version(&conn, &path).and_then(|version| {
            if version == seen {
                return Ok(());
            }
            let fresh = into_snapshot(store::load_all(&mut conn, &path)?);
            inner.apply(fresh);
            seen = version;
            Ok(())
        });
        match result {
            Ok(()) if failing => {
                tracing::info!(path = %path.display(), "user database readable again; changes applied");
                failing = false;
            }
            Ok(()) => {}
            // Keep the last good copy (and keep trying) rather than admit on partial data; log
            // once per failure streak, not every tick.
            Err(error) if !failing => {
                tracing::error!(%error, "cannot read user database changes; keeping the last good copy");
                failing = true;
            }
            Err(_) => {}
        }
        inner.prune();
    }
}
