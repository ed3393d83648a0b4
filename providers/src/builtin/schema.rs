//! The schema of `config.db` and the opening of a connection to it: mesgd's SQLite settings
//! (WAL, `synchronous = FULL`, foreign keys, a busy timeout), a file readable by its owner only,
//! and the migrations.
//!
//! The version lives in `PRAGMA user_version`. An older file is migrated when it is opened, in
//! one immediate transaction (another process may be migrating at the same moment); a newer one
//! is refused.
//!
//! | version | adds |
//! |---|---|
//! | 1 | `users`, `rules`, `settings` |
//! | 2 | `admins` (console and REST API accounts, each with a role) and `admin_tokens` (API tokens: a public id, a name, a scope, the SHA-256 of the secret part) |
//! | 3 | accounts' message access: `content_permissions` (canonical content-routing patterns), `content_roles`, `role_permissions`, `user_permissions`, `user_roles`; and `revoked_sessions` (logged-out login sessions until their expiry) |

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::store::StoreError;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 3;

/// How long a writer waits for another process's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA_V1: &str = "
    CREATE TABLE IF NOT EXISTS users (
        id INTEGER PRIMARY KEY,
        username TEXT NOT NULL UNIQUE,
        password_hash TEXT,
        auth_type TEXT NOT NULL CHECK (auth_type IN ('basic', 'x509')),
        disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
        unrestricted INTEGER NOT NULL DEFAULT 0 CHECK (unrestricted IN (0, 1))
    );
    CREATE TABLE IF NOT EXISTS rules (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        pattern TEXT NOT NULL,
        permission TEXT NOT NULL CHECK (permission IN ('read', 'write', 'readwrite', 'deny')),
        PRIMARY KEY (user_id, position)
    );
    CREATE TABLE IF NOT EXISTS settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
";

/// Administrators are not broker users: an MQTT credential never opens the console, and no
/// provider can admit an administrator account as a client.
const SCHEMA_V2: &str = "
    CREATE TABLE IF NOT EXISTS admins (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        password_hash TEXT NOT NULL,
        role TEXT NOT NULL DEFAULT 'admin' CHECK (role IN ('admin', 'read')),
        created_at INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS admin_tokens (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL CHECK (scope IN ('admin', 'read')),
        secret_sha256 TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
";

/// Message access (issue #16): a permission is one canonical content-routing pattern; a role
/// is a named set of them; a user holds permissions directly and through roles. Removing a
/// permission or a role removes every assignment of it (the cascades).
const SCHEMA_V3: &str = "
    CREATE TABLE IF NOT EXISTS content_permissions (
        id INTEGER PRIMARY KEY,
        pattern TEXT NOT NULL UNIQUE
    );
    CREATE TABLE IF NOT EXISTS content_roles (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE
    );
    CREATE TABLE IF NOT EXISTS role_permissions (
        role_id INTEGER NOT NULL REFERENCES content_roles(id) ON DELETE CASCADE,
        permission_id INTEGER NOT NULL REFERENCES content_permissions(id) ON DELETE CASCADE,
        PRIMARY KEY (role_id, permission_id)
    );
    CREATE TABLE IF NOT EXISTS user_permissions (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        permission_id INTEGER NOT NULL REFERENCES content_permissions(id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, permission_id)
    );
    CREATE TABLE IF NOT EXISTS user_roles (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        role_id INTEGER NOT NULL REFERENCES content_roles(id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, role_id)
    );
    CREATE TABLE IF NOT EXISTS revoked_sessions (
        jti TEXT PRIMARY KEY,
        exp INTEGER NOT NULL
    );
";

/// Opens a connection with mesgd's settings and brings the schema up to date.
pub(crate) fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let io_error = |source| StoreError::Open { path: path.to_path_buf(), source };
    let db_error = |source| StoreError::Database { path: path.to_path_buf(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error)?;
    }
    create_private_file(path).map_err(io_error)?;
    let flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(db_error)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(db_error)?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)).map_err(db_error)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            message: format!("cannot switch to WAL journal mode (got {mode})"),
        });
    }
    conn.pragma_update(None, "synchronous", "FULL").map_err(db_error)?;
    conn.pragma_update(None, "foreign_keys", true).map_err(db_error)?;
    migrate(conn, path)
}

/// Creates an empty file readable by its owner only, unless it exists. SQLite takes an empty
/// file as a new database; its WAL and shared-memory files inherit the permissions.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn migrate(mut conn: Connection, path: &Path) -> Result<Connection, StoreError> {
    let db_error = |source| StoreError::Database { path: path.to_path_buf(), source };
    let version =
        |conn: &Connection| conn.pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0));
    if version(&conn).map_err(db_error)? == SCHEMA_VERSION {
        return Ok(conn);
    }
    // Re-read inside the write transaction: another process may be migrating right now.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_error)?;
    let found = version(&tx).map_err(db_error)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew { path: path.to_path_buf(), found, supported: SCHEMA_VERSION });
    }
    if found < 1 {
        tx.execute_batch(SCHEMA_V1).map_err(db_error)?;
    }
    if found < 2 {
        tx.execute_batch(SCHEMA_V2).map_err(db_error)?;
    }
    if found < 3 {
        tx.execute_batch(SCHEMA_V3).map_err(db_error)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(db_error)?;
    tx.commit().map_err(db_error)?;
    Ok(conn)
}
