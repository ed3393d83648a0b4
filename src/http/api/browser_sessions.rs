//! The console's browser sessions: who holds a `mesgd_session` cookie, with the session's CSRF
//! token (a synchroniser token, kept with the session) and its last use.
//!
//! A cookie is `<id>.<secret>`: the id (16 random bytes, 32 hex digits) names the session, the
//! secret (32 random bytes, base64url) proves the cookie came from the login. Only the secret's
//! SHA-256 is kept, and a presented secret's digest is compared with it in constant time.
//! The table is bounded (`[http] max_sessions`, the least recently used ended first) and a
//! session ends `session_idle_timeout_s` after its last use.
//!
//! On a clustered node the table is also the node's copy of the cluster's sessions
//! ([`ConsoleCluster`], `mesgd-cluster`'s `console`): a login is stored in the cluster's bucket
//! before its cookie is given (refused when the cluster cannot be reached), a logout is deleted
//! there before it is answered (refused likewise, and the session stays open), every node's
//! sessions come into the table through [`LocalConsole::apply`], and a session's use is written
//! back at most every [`touch_every`] of the idle timeout, so the idle timeout and the cap count
//! the use made on every node (`docs/api.md` gives the bounds). Without `[cluster]` none of
//! this is installed and the table is the node's alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mesgd_core::cluster::console::{
    Applied, Change, ConsoleCluster, ConsoleRecord, LocalConsole, Unreachable, is_session_id, touch_every,
};
use mesgd_core::sync::lock;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// How long an ended session is remembered, so that its record coming back late (a watch or a
/// comparison that read it before the end) does not open it again: longer than a comparison
/// with the whole bucket takes.
const ENDED_KEEP: Duration = Duration::from_secs(120);
/// Sessions of other nodes a table takes in beyond its own cap (`max_sessions` of the node that
/// made them may be larger), as a multiple of the cap.
const REMOTE_SLACK: usize = 2;

/// The session a valid cookie names.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) admin: String,
    pub(crate) csrf: String,
}

/// The browser sessions of this node (and, clustered, of every node).
pub(crate) struct BrowserSessions {
    table: Mutex<Table>,
    idle: Duration,
    max: usize,
    cluster: OnceLock<Arc<dyn ConsoleCluster>>,
}

impl std::fmt::Debug for BrowserSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserSessions").field("open", &lock(&self.table).open.len()).finish_non_exhaustive()
    }
}

struct BrowserSession {
    digest: [u8; 32],
    admin: String,
    csrf: String,
    last_seen: Instant,
    /// The revision of the session's record in the cluster's bucket (0: not stored yet, or
    /// not clustered).
    revision: u64,
    /// The last use the cluster has been sent (or has).
    shared_seen: Instant,
}

impl BrowserSession {
    /// The session's record, last used at `seen` (wall clock).
    fn record(&self, seen: SystemTime) -> ConsoleRecord {
        ConsoleRecord::new(&self.admin, &self.digest, &self.csrf, unix_ms(seen))
    }
}

#[derive(Default)]
struct Table {
    open: HashMap<String, BrowserSession>,
    /// Sessions this node ended, and the revision up to which their records are stale.
    ended: HashMap<String, (u64, Instant)>,
}

impl Table {
    /// Remembers that `id` ended here: records up to `revision` are stale.
    fn ended(&mut self, id: String, revision: u64, now: Instant, cap: usize) {
        self.ended.retain(|_, (_, at)| now.duration_since(*at) < ENDED_KEEP);
        if self.ended.len() >= cap {
            let oldest = self.ended.iter().min_by_key(|(_, (_, at))| *at).map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                self.ended.remove(&oldest);
            }
        }
        self.ended.insert(id, (revision, now));
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The instant of `seen_ms` (another node's wall clock) on this node's clock, `None` if it is
/// before anything this clock can say (then it is long idle).
fn instant_of(seen_ms: u64, now: Instant, wall: SystemTime) -> Option<Instant> {
    let age = Duration::from_millis(unix_ms(wall).saturating_sub(seen_ms));
    now.checked_sub(age)
}

impl BrowserSessions {
    pub(crate) fn new(idle: Duration, max: usize) -> BrowserSessions {
        BrowserSessions { table: Mutex::default(), idle, max, cluster: OnceLock::new() }
    }

    /// How long a session lives without a request.
    pub(crate) fn idle(&self) -> Duration {
        self.idle
    }

    /// Makes the table the node's copy of the cluster's sessions (once, before the listeners
    /// open).
    pub(crate) fn set_cluster(&self, cluster: Arc<dyn ConsoleCluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// A new session for `admin`: the cookie value and the CSRF token. Clustered, once the
    /// cluster has it; [`Unreachable`] when it cannot be stored (then there is no session).
    pub(crate) async fn open(&self, admin: &str) -> Result<(String, String), Unreachable> {
        let now = crate::clock::now();
        let id = hex(&rand::random::<[u8; 16]>());
        let secret: [u8; 32] = rand::random();
        let csrf = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
        let session = BrowserSession {
            digest: sha256(&secret),
            admin: admin.to_owned(),
            csrf: csrf.clone(),
            last_seen: now,
            revision: 0,
            shared_seen: now,
        };
        let record = self.cluster.get().map(|_| session.record(SystemTime::now()));
        let dropped = {
            let mut table = lock(&self.table);
            let dropped = self.make_room(&mut table, now);
            table.open.insert(id.clone(), session);
            dropped
        };
        if let (Some(cluster), Some(record)) = (self.cluster.get(), record) {
            for (gone, revision) in dropped {
                cluster.forget(&gone, revision);
            }
            match cluster.create(&id, &record).await {
                Ok(revision) => {
                    if let Some(s) = lock(&self.table).open.get_mut(&id) {
                        s.revision = s.revision.max(revision);
                    }
                }
                Err(e) => {
                    lock(&self.table).open.remove(&id);
                    return Err(e);
                }
            }
        }
        Ok((format!("{id}.{}", URL_SAFE_NO_PAD.encode(secret)), csrf))
    }

    /// Ends the idle sessions and, while the table is full, the least recently used: the ids
    /// and revisions of those ended.
    fn make_room(&self, table: &mut Table, now: Instant) -> Vec<(String, u64)> {
        let idle = self.idle;
        let mut dropped: Vec<(String, u64)> = table
            .open
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_seen) >= idle)
            .map(|(id, s)| (id.clone(), s.revision))
            .collect();
        for (id, _) in &dropped {
            table.open.remove(id);
        }
        while table.open.len() >= self.max {
            let Some(stalest) =
                table.open.iter().min_by_key(|(_, s)| s.last_seen).map(|(id, s)| (id.clone(), s.revision))
            else {
                break;
            };
            table.open.remove(&stalest.0);
            dropped.push(stalest);
        }
        if self.cluster.get().is_some() {
            for (id, revision) in &dropped {
                table.ended(id.clone(), *revision, now, self.max);
            }
        }
        dropped
    }

    /// The session a cookie value names, if it is valid and not idle too long (it is touched).
    pub(crate) fn session(&self, cookie: &str, now: Instant) -> Option<Session> {
        let (id, secret) = cookie.split_once('.')?;
        let digest = sha256(&URL_SAFE_NO_PAD.decode(secret).ok()?);
        let mut table = lock(&self.table);
        let session = table.open.get_mut(id)?;
        if !bool::from(session.digest.ct_eq(&digest)) {
            return None;
        }
        if now.duration_since(session.last_seen) >= self.idle {
            let revision = session.revision;
            table.open.remove(id);
            if let Some(cluster) = self.cluster.get() {
                table.ended(id.to_owned(), revision, now, self.max);
                drop(table);
                cluster.forget(id, revision);
            }
            return None;
        }
        session.last_seen = now;
        let found = Session { id: id.to_owned(), admin: session.admin.clone(), csrf: session.csrf.clone() };
        let Some(cluster) = self.cluster.get() else { return Some(found) };
        let due = session.revision != 0 && now.duration_since(session.shared_seen) >= touch_every(self.idle);
        if due {
            session.shared_seen = now;
            let (record, revision) = (session.record(SystemTime::now()), session.revision);
            drop(table);
            cluster.touch(id, &record, revision);
        }
        Some(found)
    }

    /// [`BrowserSessions::session`], looking first in the cluster's bucket for a session this
    /// node does not know (clustered only): a browser's next request after its login on
    /// another node may reach this node before the session does.
    pub(crate) async fn session_anywhere(&self, cookie: &str, now: Instant) -> Option<Session> {
        if let Some(found) = self.session(cookie, now) {
            return Some(found);
        }
        let cluster = self.cluster.get()?;
        let (id, _) = cookie.split_once('.')?;
        // A session this node has, or ended itself, is not looked up: the answer stands.
        let known = |t: &Table| t.open.contains_key(id) || t.ended.contains_key(id);
        if !is_session_id(id) || known(&lock(&self.table)) {
            return None;
        }
        cluster.fetch(id).await;
        self.session(cookie, now)
    }

    /// Whether session `id` is still open and not idle too long, without touching it: a
    /// long-lived answer (the statistics stream) ends with the session it was opened under.
    pub(crate) fn is_open(&self, id: &str, now: Instant) -> bool {
        lock(&self.table).open.get(id).is_some_and(|s| now.duration_since(s.last_seen) < self.idle)
    }

    /// Ends session `id` (a logout). Clustered, on every node: once the cluster has the end,
    /// else [`Unreachable`] and the session stays open.
    pub(crate) async fn close(&self, id: &str) -> Result<(), Unreachable> {
        if let Some(cluster) = self.cluster.get() {
            cluster.end(id).await?;
        }
        let mut table = lock(&self.table);
        table.open.remove(id);
        if self.cluster.get().is_some() {
            table.ended(id.to_owned(), u64::MAX, crate::clock::now(), self.max);
        }
        Ok(())
    }

    /// Drops session `id` here: its administrator is gone. Clustered, the cluster's record
    /// stays: this node may not have the administrator yet, and every node refuses the session
    /// at each request while it lacks one.
    pub(crate) fn drop_here(&self, id: &str) {
        lock(&self.table).open.remove(id);
    }

    #[cfg(test)]
    fn apply_at(&self, id: &str, change: Change, now: Instant, wall: SystemTime) -> Applied {
        self.apply_change(id, change, now, wall)
    }

    fn apply_change(&self, id: &str, change: Change, now: Instant, wall: SystemTime) -> Applied {
        let mut table = lock(&self.table);
        let (record, revision) = match change {
            Change::Gone => {
                let was_open = table.open.remove(id).is_some();
                table.ended(id.to_owned(), u64::MAX, now, self.max);
                return if was_open { Applied::Kept } else { Applied::Stale };
            }
            Change::Put(record, revision) => (record, revision),
        };
        if table.ended.get(id).is_some_and(|(upto, _)| revision <= *upto) {
            return Applied::Stale;
        }
        let Some(seen) = instant_of(record.seen_ms, now, wall) else { return Applied::Stale };
        if let Some(session) = table.open.get_mut(id) {
            if revision <= session.revision {
                return Applied::Stale;
            }
            session.revision = revision;
            session.last_seen = session.last_seen.max(seen);
            session.shared_seen = session.shared_seen.max(seen);
            return Applied::Kept;
        }
        let Some(digest) = record.digest() else { return Applied::Stale };
        if now.duration_since(seen) >= self.idle {
            return Applied::Stale;
        }
        if table.open.len() >= self.max.saturating_mul(REMOTE_SLACK) {
            return Applied::Full;
        }
        let ConsoleRecord { admin, csrf, .. } = record;
        let session = BrowserSession { digest, admin, csrf, last_seen: seen, revision, shared_seen: seen };
        table.open.insert(id.to_owned(), session);
        Applied::Kept
    }
}

impl LocalConsole for BrowserSessions {
    fn apply(&self, id: &str, change: Change) -> Applied {
        self.apply_change(id, change, crate::clock::now(), SystemTime::now())
    }

    fn revisions(&self) -> Vec<(String, u64)> {
        lock(&self.table).open.iter().map(|(id, s)| (id.clone(), s.revision)).collect()
    }
}

#[cfg(test)]
#[path = "browser_sessions_tests.rs"]
mod tests;
