//! Durable broker state in `<storage.dir>/state.db` (SQLite, WAL).
//!
//! # Layout
//!
//! - `schema`: opening, checking and migrating the file.
//! - `record`: how messages, properties and times are stored.
//! - `writer`: the journal the broker records changes into, and the thread that writes them
//!   (group commit).
//! - `recover`: reading everything back at start.
//!
//! The engine is SQLite through rusqlite, already used for `config.db`: one dependency for both
//! stores, a file operators can inspect with the `sqlite3` tool, transactions, and WAL group
//! commit. docs/persistence.md has the reasons and the measured cost.

mod record;
mod recover;
mod schema;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mesgd_core::broker::Broker;

use crate::config::StorageConfig;
use serde::Deserialize;

pub use schema::{STATE_DB_FILE, StoreError};
pub use writer::{SqliteJournal, WriterHandle};

/// When changes reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// A QoS 1/2 PUBLISH is acknowledged only after it is on disk for every persistent session
    /// that must receive it; many messages share one fsync.
    #[default]
    Always,
    /// Written in the background every `flush_interval_ms`; a crash may lose that window.
    Periodic,
    /// Memory only; nothing survives a restart.
    None,
}

/// The open state store: the journal for the broker, and the handle that stops its writer.
#[derive(Debug)]
pub struct Persistence {
    /// The journal to give the broker.
    pub journal: Arc<SqliteJournal>,
    /// Stops the writer after writing everything recorded.
    pub writer: WriterHandle,
    /// The relay's offline queues and alias bindings, for the relay's hub.
    pub relay: crate::relay::Restored,
}

/// The state file under `dir`.
pub fn state_db_path(dir: &Path) -> PathBuf {
    dir.join(STATE_DB_FILE)
}

/// Opens `dir/state.db`, restores its contents into `broker`, and starts the writer.
pub fn open(dir: &Path, storage: &StorageConfig, broker: &Broker) -> Result<Option<Persistence>, StoreError> {
    let durability = storage.durability;
    if durability == Durability::None {
        return Ok(None);
    }
    let path = state_db_path(dir);
    let conn = schema::open(&path, durability == Durability::Always)?;
    let started = std::time::Instant::now();
    let recovered = recover::recover(&conn, &path, broker)?;
    tracing::info!(
        path = %path.display(),
        sessions = recovered.sessions,
        messages = recovered.messages,
        retained = recovered.retained,
        wills = recovered.wills,
        relay_queued = recovered.relay.queues.iter().map(|(_, e)| e.len()).sum::<usize>(),
        relay_aliases = recovered.relay.aliases.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "state restored"
    );
    let interval =
        (durability == Durability::Periodic).then(|| Duration::from_millis(storage.flush_interval_ms));
    let (journal, writer) = writer::start(conn, interval, storage.max_unwritten_changes, recovered.entries);
    Ok(Some(Persistence { journal, writer, relay: recovered.relay }))
}

/// What `mesgd store stats` prints.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Stored sessions.
    pub sessions: u64,
    /// Stored subscriptions.
    pub subscriptions: u64,
    /// Queued or in-flight messages (entries, one per session and message).
    pub queued: u64,
    /// Distinct stored messages.
    pub messages: u64,
    /// Retained messages.
    pub retained: u64,
    /// Pending wills.
    pub wills: u64,
    /// Relay messages queued for offline addresses.
    pub relay_queued: u64,
    /// Relay alias bindings.
    pub relay_aliases: u64,
    /// Bytes on disk (the database, its WAL and shared-memory files).
    pub bytes_on_disk: u64,
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Counts what `dir/state.db` holds, read-only (safe while the broker runs).
pub fn stats(dir: &Path) -> Result<Stats, StoreError> {
    let path = state_db_path(dir);
    if !path.exists() {
        return Ok(Stats::default());
    }
    let conn = schema::open_read_only(&path)?;
    let count = |table: &str| -> Result<u64, StoreError> {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get::<_, i64>(0))
            .map(|n| n.unsigned_abs())
            .map_err(|source| StoreError::Database { path: path.clone(), source })
    };
    Ok(Stats {
        sessions: count("sessions")?,
        subscriptions: count("subscriptions")?,
        queued: count("queue")?,
        messages: count("messages")?,
        retained: count("retained")?,
        wills: count("wills")?,
        // A store from before version 3 (not yet migrated) has no relay tables.
        relay_queued: if has_table(&conn, "relay_queue") { count("relay_queue")? } else { 0 },
        relay_aliases: if has_table(&conn, "relay_aliases") { count("relay_aliases")? } else { 0 },
        bytes_on_disk: file_size(&path)
            + file_size(&with_suffix(&path, "-wal"))
            + file_size(&with_suffix(&path, "-shm")),
    })
}

fn has_table(conn: &rusqlite::Connection, name: &str) -> bool {
    conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| {
        r.get::<_, i64>(0)
    })
    .is_ok_and(|n| n > 0)
}

/// Removes unreferenced messages and rebuilds the file to its smallest size. Run it while the
/// broker is stopped: it takes the database for itself while it works.
pub fn compact(dir: &Path) -> Result<(u64, u64), StoreError> {
    let path = state_db_path(dir);
    let before = stats(dir)?.bytes_on_disk;
    let conn = schema::open(&path, true)?;
    let db = |source| StoreError::Database { path: path.clone(), source };
    conn.execute("DELETE FROM messages WHERE id NOT IN (SELECT message_id FROM queue)", []).map_err(db)?;
    conn.execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);").map_err(db)?;
    drop(conn);
    let after = stats(dir)?.bytes_on_disk;
    Ok((before, after))
}
