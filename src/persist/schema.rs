//! `state.db`: opening, checking and migrating the broker's state store.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

/// The schema version this mesgd writes (`PRAGMA user_version`).
pub(crate) const SCHEMA_VERSION: i64 = 3;

/// The state file's name under `storage.dir`.
pub const STATE_DB_FILE: &str = "state.db";

/// Why the state store cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file cannot be opened or created.
    #[error("state store {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// SQLite refused an operation.
    #[error("state store {path}: {source}")]
    Database {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: rusqlite::Error,
    },
    /// The file is not a usable mesgd state store. It is never reset silently: move it away to
    /// start empty, or restore a backup.
    #[error("state store {path} is unusable: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A newer mesgd wrote it.
    #[error(
        "state store {path} has schema version {found}, newer than this mesgd understands ({SCHEMA_VERSION}); \
         run the newer mesgd, or move the file away to start empty"
    )]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: i64,
    },
}

const CREATE: &str = r"
CREATE TABLE sessions (
    client_id TEXT PRIMARY KEY,
    expiry_s INTEGER NOT NULL,            -- -1: never; 0 is never stored
    disconnected_at_ms INTEGER            -- wall clock; NULL while connected
);
CREATE TABLE subscriptions (
    client_id TEXT NOT NULL,
    filter TEXT NOT NULL,
    qos INTEGER NOT NULL,
    no_local INTEGER NOT NULL,
    retain_as_published INTEGER NOT NULL,
    retain_handling INTEGER NOT NULL,
    subscription_id INTEGER,
    PRIMARY KEY (client_id, filter)
) WITHOUT ROWID;
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL,
    properties TEXT,                      -- JSON, NULL when empty
    expires_at_ms INTEGER,
    origin TEXT
);
CREATE TABLE queue (
    client_id TEXT NOT NULL,
    entry INTEGER NOT NULL,
    message_id INTEGER NOT NULL REFERENCES messages(id),
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL,
    subscription_ids TEXT,                -- JSON array, NULL when none
    shared_group TEXT,
    shared_subscription TEXT,
    packet_id INTEGER,
    state INTEGER NOT NULL DEFAULT 0,     -- 0 queued, 1 in flight, 2 released (PUBREL sent)
    PRIMARY KEY (client_id, entry)
) WITHOUT ROWID;
CREATE INDEX queue_by_message ON queue(message_id);
CREATE TABLE incoming_qos2 (
    client_id TEXT NOT NULL,
    packet_id INTEGER NOT NULL,
    digest INTEGER,                       -- the message's digest (as signed); NULL from version 1
    PRIMARY KEY (client_id, packet_id)
) WITHOUT ROWID;
CREATE TABLE retained (
    topic TEXT PRIMARY KEY,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL,
    properties TEXT,
    expires_at_ms INTEGER,
    origin TEXT
);
CREATE TABLE wills (
    client_id TEXT PRIMARY KEY,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL,
    properties TEXT,
    expiry_interval INTEGER,
    fire_at_ms INTEGER NOT NULL,
    acl TEXT                              -- JSON {rules, username, client_id}; rules null = unrestricted
);
";

/// The relay's store-and-forward queues and alias bindings (added in version 3).
const RELAY_TABLES: &str = r"
CREATE TABLE relay_queue (
    entry INTEGER PRIMARY KEY,            -- unique and increasing across all addresses
    addr TEXT NOT NULL,
    payload BLOB NOT NULL,                -- the encoded deliver frame body
    expires_at_ms INTEGER NOT NULL        -- wall clock
);
CREATE INDEX relay_queue_by_addr ON relay_queue(addr, entry);
CREATE TABLE relay_aliases (
    alias TEXT PRIMARY KEY,
    key_digest BLOB NOT NULL              -- SHA-256 of the key's raw bytes
);
";

/// The steps from each schema version to the next: `MIGRATIONS[v - 1]` takes version `v` to
/// `v + 1`. A fresh store is created by `CREATE` at the newest version directly.
const MIGRATIONS: [&str; (SCHEMA_VERSION - 1) as usize] = [
    // 1 → 2: incoming QoS 2 ids keep their message's digest (a reused id is a new message).
    "ALTER TABLE incoming_qos2 ADD COLUMN digest INTEGER;",
    // 2 → 3: the relay's offline queues and alias bindings.
    RELAY_TABLES,
];

/// Opens (creating if needed) and checks the state store. `synchronous_full` makes every commit
/// reach the disk before it returns (durability `always`).
pub(crate) fn open(path: &Path, synchronous_full: bool) -> Result<Connection, StoreError> {
    let db = |source| StoreError::Database { path: path.to_owned(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|source| StoreError::Open { path: path.to_owned(), source })?;
    }
    let flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(db)?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(db)?;
    check(&conn, path)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| corrupt_or_db(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            message: format!("cannot use WAL mode (got {mode})"),
        });
    }
    conn.pragma_update(None, "synchronous", if synchronous_full { "FULL" } else { "NORMAL" }).map_err(db)?;
    migrate(&conn, path)?;
    Ok(conn)
}

/// Opens an existing store read-only, for `mesgd store stats`.
pub(crate) fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    let db = |source| StoreError::Database { path: path.to_owned(), source };
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(db)?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(db)?;
    check(&conn, path)?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(db)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.to_owned(), found: version });
    }
    Ok(conn)
}

fn corrupt_or_db(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt { path: path.to_owned(), message: e.to_string() }
        }
        _ => StoreError::Database { path: path.to_owned(), source: e },
    }
}

/// A quick structural check: a damaged file is refused, never silently reset.
fn check(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let result: String =
        conn.pragma_query_value(None, "quick_check", |r| r.get(0)).map_err(|e| corrupt_or_db(path, e))?;
    if result != "ok" {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            message: format!("integrity check: {result}"),
        });
    }
    Ok(())
}

fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let db = |source| StoreError::Database { path: path.to_owned(), source };
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(db)?;
    match version {
        0 => {
            let tables: i64 = conn
                .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
                .map_err(db)?;
            if tables > 0 {
                return Err(StoreError::Corrupt {
                    path: path.to_owned(),
                    message:
                        "the file holds tables but no mesgd schema version; it is not a mesgd state store"
                            .into(),
                });
            }
            conn.execute_batch(&format!(
                "BEGIN; {CREATE} {RELAY_TABLES} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))
            .map_err(db)?;
            Ok(())
        }
        SCHEMA_VERSION => Ok(()),
        found if found > SCHEMA_VERSION => Err(StoreError::TooNew { path: path.to_owned(), found }),
        found if found >= 1 => {
            let steps: String = MIGRATIONS[(found - 1) as usize..].concat();
            conn.execute_batch(&format!("BEGIN; {steps} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"))
                .map_err(db)?;
            tracing::info!(path = %path.display(), from = found, to = SCHEMA_VERSION, "state store migrated");
            Ok(())
        }
        found if found > SCHEMA_VERSION => Err(StoreError::TooNew { path: path.to_owned(), found }),
        found => Err(StoreError::Corrupt {
            path: path.to_owned(),
            message: format!("unknown schema version {found}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_store_is_migrated_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_DB_FILE);
        {
            // A store as version 1 wrote it: no digest column, no relay tables.
            let conn = open(&path, false).unwrap();
            conn.execute_batch(
                "ALTER TABLE incoming_qos2 DROP COLUMN digest; DROP TABLE relay_queue;
                 DROP TABLE relay_aliases; PRAGMA user_version = 1;
                 INSERT INTO incoming_qos2 (client_id, packet_id) VALUES ('c', 7);",
            )
            .unwrap();
        }
        let conn = open(&path, false).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let row: (String, u16, Option<i64>) = conn
            .query_row("SELECT client_id, packet_id, digest FROM incoming_qos2", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!(row, ("c".to_owned(), 7, None));
    }

    #[test]
    fn a_version_2_store_gets_the_relay_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_DB_FILE);
        {
            let conn = open(&path, false).unwrap();
            conn.execute_batch(
                "DROP TABLE relay_queue; DROP TABLE relay_aliases; PRAGMA user_version = 2;
                 INSERT INTO sessions (client_id, expiry_s) VALUES ('kept', 60);",
            )
            .unwrap();
        }
        let conn = open(&path, false).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.execute(
            "INSERT INTO relay_queue (entry, addr, payload, expires_at_ms) VALUES (1, 'bob', x'7b7d', 0)",
            [],
        )
        .unwrap();
        conn.execute("INSERT INTO relay_aliases (alias, key_digest) VALUES ('alice', zeroblob(32))", [])
            .unwrap();
        let kept: String = conn.query_row("SELECT client_id FROM sessions", [], |r| r.get(0)).unwrap();
        assert_eq!(kept, "kept");
    }

    #[test]
    fn a_store_from_a_newer_mesgd_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_DB_FILE);
        open(&path, false).unwrap().pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        assert!(matches!(open(&path, false), Err(StoreError::TooNew { .. })));
    }
}
