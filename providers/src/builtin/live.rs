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
//!
//! A name the copy does not have is looked up in the store itself before it is called unknown
//! ([`UserDirectory::find_user`], bounded as [`super::lookup`] describes), so a user added by
//! the command line can log in before the next poll.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use mesgd_core::auth::{Denial, Identity, IdentityState, IdentityUpdater, LiveIdentity, Outcome, Revocation};
use rusqlite::Connection;
use tokio::sync::{Semaphore, oneshot, watch};

use super::cache::VerifyCache;
use super::lookup::{LookupCounts, LookupStats, MissState, bump};
use super::store::{self, Store, StoreError, UserRecord};
use mesgd_core::sync::lock;

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
    /// Wakes the poll thread early, with a reply for [`UserDirectory::sync`] or without one;
    /// dropping it (with `Inner`) stops the thread.
    wake: mpsc::Sender<Option<oneshot::Sender<()>>>,
    /// Counts applied changes, for whoever wants to react to them (an admin view, a test).
    applied: watch::Sender<u64>,
    /// Told the usernames whose published state changed, after each change is published.
    identity_hook: std::sync::OnceLock<IdentityHook>,
    /// What store reads on a miss learnt in this generation of the copy.
    misses: Mutex<MissState>,
    /// One store read on a miss at a time.
    read_slot: Arc<Semaphore>,
    lookup_counts: LookupCounts,
    /// Whether the last read on a miss failed, so a failure streak is logged once.
    lookup_failing: AtomicBool,
    /// A connection of its own for [`UserDirectory::catch_up`]'s `data_version` checks, and
    /// the version it last saw applied.
    check: Mutex<Connection>,
    checked_version: AtomicI64,
}

/// Told the usernames whose identity state a change published (see
/// [`UserDirectory::on_identity_change`]).
pub type IdentityHook = Box<dyn Fn(&[&str]) + Send + Sync>;

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
        let mut poll_conn = super::schema::open_connection(db_path)?;
        let version = data_version(&poll_conn, db_path)?;
        let check = super::schema::open_connection(db_path)?;
        let checked_version = data_version(&check, db_path)?;
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
            identity_hook: std::sync::OnceLock::new(),
            misses: Mutex::new(MissState::new(Instant::now())),
            read_slot: Arc::new(Semaphore::new(1)),
            lookup_counts: LookupCounts::default(),
            lookup_failing: AtomicBool::new(false),
            check: Mutex::new(check),
            checked_version: AtomicI64::new(checked_version),
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

    /// Every user as the broker sees it now (the copy the last poll installed), by username.
    pub fn records(&self) -> Arc<HashMap<String, Arc<UserRecord>>> {
        self.inner.snapshot.load_full()
    }

    /// Sets the pause between two checks for changes (clamped to 10 ms .. 60 s).
    pub fn set_poll_interval(&self, interval: Duration) {
        let ms = interval.as_millis().clamp(10, 60_000) as u64;
        self.inner.poll_interval_ms.store(ms, Ordering::Relaxed);
    }

    /// Asks the poll thread to check for changes now instead of at its next tick.
    pub fn check_now(&self) {
        // The thread only stops when `Inner` (and with it this sender) is gone.
        let _ = self.inner.wake.send(None);
    }

    /// Checks for changes now and returns once they are applied: connected clients of every
    /// user changed before the call have been told (new rules installed, or revoked). What the
    /// REST API awaits after each change, so its answer means the change is live.
    pub async fn sync(&self) {
        let (reply, applied) = oneshot::channel();
        if self.inner.wake.send(Some(reply)).is_ok() {
            // An error means the thread is gone (the directory is being dropped): nothing to wait for.
            let _ = applied.await;
        }
    }

    /// Makes sure every change committed to the store before the call is applied: if the
    /// store's `data_version` moved since the last call saw it applied (a commit by any
    /// process, the command line included), waits for [`UserDirectory::sync`]. Otherwise it
    /// costs one `PRAGMA data_version` (a read of SQLite's shared memory). What a grant
    /// connection calls before each message, so that a change made a moment ago, by whatever
    /// process, is the state that message is checked against.
    pub async fn catch_up(&self) {
        let path = self.inner.store.path();
        let version = match data_version(&lock(&self.inner.check), path) {
            Ok(v) => v,
            Err(error) => {
                tracing::warn!(%error, "cannot check the user database for changes");
                return;
            }
        };
        if version != self.inner.checked_version.load(Ordering::Acquire) {
            self.sync().await;
            self.inner.checked_version.store(version, Ordering::Release);
        }
    }

    /// How many records the in-memory copy holds.
    pub fn user_count(&self) -> usize {
        self.inner.snapshot.load().len()
    }

    /// The record for `username` as the broker currently sees it: in the copy, or found by a
    /// store read since the copy was installed. Never reads the store (see
    /// [`UserDirectory::find_user`]).
    pub fn user(&self, username: &str) -> Option<Arc<UserRecord>> {
        self.inner.current(username)
    }

    /// The record for `username`; if the broker does not have it, read from the store, within
    /// the bounds described in [`super::lookup`]. The read runs on Tokio's blocking pool.
    /// `None` means unknown: not in the store, or not looked up (budget spent, read failed).
    pub async fn find_user(&self, username: &str) -> Option<Arc<UserRecord>> {
        if let Some(record) = self.user(username) {
            return Some(record);
        }
        // No such name can be stored; it is not worth a read, nor room in the negative cache
        // (which this keeps to about 10 MB).
        if username.len() > store::MAX_USERNAME_LEN {
            return None;
        }
        let counts = &self.inner.lookup_counts;
        if self.inner.lock_misses().is_missing(username) {
            bump(&counts.known_missing);
            return None;
        }
        // The semaphore is never closed; a failure would only mean no read.
        let slot = Arc::clone(&self.inner.read_slot).acquire_owned().await.ok()?;
        // A read that ran while this one waited may have answered it.
        if let Some(record) = self.user(username) {
            return Some(record);
        }
        let generation = {
            let mut misses = self.inner.lock_misses();
            if misses.is_missing(username) {
                bump(&counts.known_missing);
                return None;
            }
            if !misses.take_read(Instant::now()) {
                bump(&counts.over_budget);
                return None;
            }
            misses.generation()
        };
        bump(&counts.store_reads);
        let (inner, name) = (Arc::clone(&self.inner), username.to_owned());
        // The task records what it read before it gives the slot up, so a login waiting for
        // the slot finds the answer; and it does both even if this login is abandoned (its
        // time limit passed).
        let read = tokio::task::spawn_blocking(move || {
            let read = inner.store.user(&name).map(|record| record.map(Arc::new));
            let recorded = match &read {
                Ok(record) => inner.lock_misses().record(generation, &name, record.clone()),
                Err(_) => false,
            };
            drop(slot);
            (read, recorded)
        });
        match read.await {
            Ok((Ok(record), recorded)) => {
                self.inner.lookup_failing.store(false, Ordering::Relaxed);
                if record.is_some() {
                    bump(&counts.found);
                }
                // A read that straddled a new copy is dropped: the copy is at least as fresh.
                if recorded { record } else { self.user(username) }
            }
            Ok((Err(error), _)) => {
                self.lookup_failed(&error.to_string());
                None
            }
            Err(_) => {
                self.lookup_failed("the read task failed");
                None
            }
        }
    }

    fn lookup_failed(&self, error: &str) {
        bump(&self.inner.lookup_counts.failed);
        if !self.inner.lookup_failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(%error, "cannot read a user missing from the broker's copy; it counts as unknown");
        }
    }

    /// How misses of the in-memory copy were answered.
    pub fn lookup_stats(&self) -> LookupStats {
        self.inner.lookup_counts.stats()
    }

    /// Installs `hook`, called (on the poll thread, once per applied change) with the usernames
    /// whose connected clients were just published a new identity state: the broker wakes
    /// those clients' connections with it, so that none holds a wait of its own for a change
    /// (about 160 bytes per idle connection). Only the first hook is kept.
    pub fn on_identity_change(&self, hook: IdentityHook) {
        let _ = self.inner.identity_hook.set(hook);
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
        let Some(record) = self.inner.current(username) else {
            return Outcome::Deny(Denial::not_authorized(format!(
                "user {username:?} was removed during login"
            )));
        };
        if let Err(denial) = check(&record) {
            return Outcome::Deny(denial);
        }
        if record.disabled {
            return Outcome::Deny(Denial::not_authorized(format!("user {username:?} is disabled")));
        }
        let handle = match live.get(username) {
            Some(tracked) => tracked.updater.subscribe(),
            None => {
                let state = state_of(Some(&record));
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
        lock(&self.live)
    }

    fn lock_misses(&self) -> MutexGuard<'_, MissState> {
        lock(&self.misses)
    }

    /// The record in the copy, else one a store read found in this generation.
    fn current(&self, username: &str) -> Option<Arc<UserRecord>> {
        if let Some(record) = self.snapshot.load().get(username) {
            return Some(Arc::clone(record));
        }
        self.lock_misses().found(username)
    }

    /// Installs a freshly read copy of the store and publishes what changed; then tells the
    /// identity hook whose state it published (outside the lock).
    fn apply(&self, fresh: Snapshot) {
        let published = self.publish(fresh);
        if let (Some(hook), false) = (self.identity_hook.get(), published.is_empty()) {
            let names: Vec<&str> = published.iter().map(String::as_str).collect();
            hook(&names);
        }
        self.applied.send_modify(|count| *count += 1);
    }

    /// Installs `fresh` and publishes the changed states; returns the usernames published to.
    fn publish(&self, fresh: Snapshot) -> Vec<String> {
        let mut live = self.lock_live();
        let old = self.snapshot.swap(Arc::new(fresh));
        // After the swap: a store read begun in the old generation has its answer dropped (the
        // new copy may be fresher), and one begun in the new generation read the store after
        // this copy was taken.
        self.lock_misses().new_generation();
        let fresh = self.snapshot.load();
        let changed: Vec<&str> = old
            .iter()
            .filter(|(name, record)| fresh.get(*name) != Some(*record))
            .map(|(name, _)| name.as_str())
            .collect();
        if !changed.is_empty() {
            self.verify_cache.invalidate_users(&changed);
        }
        let mut published = Vec::new();
        live.retain(|name, tracked| {
            let state = state_of(fresh.get(name));
            if state != tracked.state {
                tracked.updater.set(state.clone());
                tracked.state = state;
                published.push(name.clone());
            }
            // A revoked identity is final; only clients still connected need the entry.
            !matches!(tracked.state, IdentityState::Revoked(_)) && tracked.updater.is_in_use()
        });
        published
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
fn poll_loop(
    inner: &Weak<Inner>,
    mut conn: Connection,
    woken: &mpsc::Receiver<Option<oneshot::Sender<()>>>,
    mut seen: i64,
) {
    let mut failing = false;
    let mut replies = Vec::new();
    loop {
        let Some(interval) = inner.upgrade().map(|i| i.poll_interval_ms.load(Ordering::Relaxed)) else {
            return;
        };
        match woken.recv_timeout(Duration::from_millis(interval)) {
            Ok(reply) => replies.extend(reply),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        // Every request already sent is answered by this one check: its change was committed
        // before it was sent.
        replies.extend(woken.try_iter().flatten());
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
        for reply in replies.drain(..) {
            let _ = reply.send(());
        }
    }
}
