//! Administrators of the broker: the accounts that log in to the console and the REST API, and
//! the API tokens that scripts present instead. Both live in `config.db` beside the broker's
//! users (schema version 2), and both are managed through [`Store`] methods that the command
//! line (`mesgd admin ...`) and the server share.
//!
//! Administrators are not broker users: a separate table, so an MQTT credential never opens the
//! console and no provider of the chain can admit an administrator as a client.
//!
//! - An account has a name, a PBKDF2 password hash (as builtin users have) and a role: `admin`
//!   (may change anything) or `read` (may look only).
//! - A token is `mesgd_<id>_<secret>`: 8 random bytes of public id (hex) that find the row, and
//!   32 random bytes of secret (base64url) of which only the SHA-256 is stored, compared in
//!   constant time. A token is shown once, when it is made; it cannot be read back. Its scope is
//!   `admin` or `read`; it has a unique name by which it is listed and revoked.
//!
//! A login of an unknown name costs one PBKDF2 run too, so its timing does not tell which names
//! exist.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rusqlite::{OptionalExtension as _, params};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::password;
use super::store::{Store, StoreError, validate_username};

/// What an administrator or a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Look only: every `GET` of the REST API (and the ACL tester).
    Read,
    /// Everything.
    Admin,
}

impl Scope {
    /// The stored and displayed name: `read` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    /// Whether this scope covers what `needed` asks for (`admin` covers `read`).
    pub fn covers(self, needed: Scope) -> bool {
        self >= needed
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read" => Ok(Scope::Read),
            "admin" => Ok(Scope::Admin),
            other => Err(format!("unknown scope {other:?} (expected read or admin)")),
        }
    }
}

/// One administrator account (never its hash).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdminRecord {
    /// The login name.
    pub name: String,
    /// What the account may do.
    pub role: Scope,
    /// When it was made.
    pub created_at: SystemTime,
}

/// One API token as listed (never its secret).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenRecord {
    /// The public id, the part of the token between `mesgd_` and the secret.
    pub id: String,
    /// Its unique name.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
    /// When it was made.
    pub created_at: SystemTime,
}

/// A token just made: the record and the token text, which exists nowhere else.
#[non_exhaustive]
pub struct NewToken {
    /// The stored record.
    pub record: TokenRecord,
    /// `mesgd_<id>_<secret>`: show it once.
    pub token: String,
}

impl fmt::Debug for NewToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewToken").field("record", &self.record).field("token", &"<redacted>").finish()
    }
}

const TOKEN_PREFIX: &str = "mesgd_";
const ID_BYTES: usize = 8;
const SECRET_BYTES: usize = 32;

fn unix_seconds(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn from_unix_seconds(seconds: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds.max(0).unsigned_abs())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn secret_digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// Splits `mesgd_<id>_<secret>`; `None` for anything else.
fn split_token(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let id_ok = id.len() == 2 * ID_BYTES && id.bytes().all(|b| b.is_ascii_hexdigit());
    (id_ok && !secret.is_empty()).then_some((id, secret))
}

impl Store {
    fn corrupt(&self, message: String) -> StoreError {
        StoreError::Corrupt { path: self.path().to_path_buf(), message }
    }

    fn scope_of(&self, text: &str) -> Result<Scope, StoreError> {
        text.parse().map_err(|message| self.corrupt(message))
    }

    /// Adds an administrator with `password` (the rules of
    /// [`password::check_new_password`]) and `role`.
    pub fn add_admin(&self, name: &str, password: &[u8], role: Scope) -> Result<AdminRecord, StoreError> {
        validate_username(name)?;
        let hash = password::hash_password(password, self.pbkdf2_iterations()?)?;
        let created_at = SystemTime::now();
        let inserted = self.write(|tx| {
            tx.execute(
                "INSERT INTO admins (name, password_hash, role, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO NOTHING",
                params![name, hash, role.as_str(), unix_seconds(created_at)],
            )
        })?;
        if inserted == 0 {
            return Err(StoreError::AdminExists(name.to_owned()));
        }
        Ok(AdminRecord {
            name: name.to_owned(),
            role,
            created_at: from_unix_seconds(unix_seconds(created_at)),
        })
    }

    /// Removes an administrator.
    pub fn remove_admin(&self, name: &str) -> Result<(), StoreError> {
        let removed = self.write(|tx| tx.execute("DELETE FROM admins WHERE name = ?1", params![name]))?;
        if removed == 0 { Err(StoreError::UnknownAdmin(name.to_owned())) } else { Ok(()) }
    }

    /// Sets an administrator's password.
    pub fn set_admin_password(&self, name: &str, password: &[u8]) -> Result<(), StoreError> {
        let hash = password::hash_password(password, self.pbkdf2_iterations()?)?;
        let changed = self.write(|tx| {
            tx.execute("UPDATE admins SET password_hash = ?1 WHERE name = ?2", params![hash, name])
        })?;
        if changed == 0 { Err(StoreError::UnknownAdmin(name.to_owned())) } else { Ok(()) }
    }

    /// Every administrator, by name.
    pub fn admins(&self) -> Result<Vec<AdminRecord>, StoreError> {
        let conn = self.lock();
        let db = |e| self.db(e);
        let mut query =
            conn.prepare_cached("SELECT name, role, created_at FROM admins ORDER BY name").map_err(db)?;
        let rows = query
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, i64>(2)?))
            })
            .map_err(db)?;
        rows.map(|row| {
            let (name, role, created) = row.map_err(db)?;
            Ok(AdminRecord { name, role: self.scope_of(&role)?, created_at: from_unix_seconds(created) })
        })
        .collect()
    }

    /// The administrator `name`, if it exists.
    pub fn admin(&self, name: &str) -> Result<Option<AdminRecord>, StoreError> {
        let conn = self.lock();
        let row: Option<(String, i64)> = conn
            .query_row("SELECT role, created_at FROM admins WHERE name = ?1", params![name], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
            .map_err(|e| self.db(e))?;
        drop(conn);
        row.map(|(role, created)| {
            Ok(AdminRecord {
                name: name.to_owned(),
                role: self.scope_of(&role)?,
                created_at: from_unix_seconds(created),
            })
        })
        .transpose()
    }

    /// How many administrators exist. With none, the REST API answers every request with how to
    /// make the first one.
    pub fn admin_count(&self) -> Result<u64, StoreError> {
        let conn = self.lock();
        conn.query_row("SELECT count(*) FROM admins", [], |row| row.get::<_, i64>(0))
            .map(i64::unsigned_abs)
            .map_err(|e| self.db(e))
    }

    /// The administrator `name` if `password` is its password, else `None`. CPU-heavy by
    /// design (a PBKDF2 run, also for an unknown name): call it off async workers.
    pub fn verify_admin(&self, name: &str, password: &[u8]) -> Result<Option<AdminRecord>, StoreError> {
        let row: Option<(String, String, i64)> = {
            let conn = self.lock();
            conn.query_row(
                "SELECT password_hash, role, created_at FROM admins WHERE name = ?1",
                params![name],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(|e| self.db(e))?
        };
        let Some((hash, role, created)) = row else {
            // As slow as a wrong password, so the answer's timing does not tell the name exists.
            let _ = password::hash_password(b"not a password", self.pbkdf2_iterations()?);
            return Ok(None);
        };
        if !password::verify_password(password, &hash)? {
            return Ok(None);
        }
        Ok(Some(AdminRecord {
            name: name.to_owned(),
            role: self.scope_of(&role)?,
            created_at: from_unix_seconds(created),
        }))
    }

    /// Makes an API token named `name` with `scope`. The token text is in the answer only.
    pub fn create_token(&self, name: &str, scope: Scope) -> Result<NewToken, StoreError> {
        validate_username(name)?;
        let id = hex(&rand::random::<[u8; ID_BYTES]>());
        let secret = URL_SAFE_NO_PAD.encode(rand::random::<[u8; SECRET_BYTES]>());
        let created_at = from_unix_seconds(unix_seconds(SystemTime::now()));
        let inserted = self.write(|tx| {
            tx.execute(
                "INSERT INTO admin_tokens (id, name, scope, secret_sha256, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO NOTHING",
                params![id, name, scope.as_str(), secret_digest(&secret), unix_seconds(created_at)],
            )
        })?;
        if inserted == 0 {
            return Err(StoreError::TokenExists(name.to_owned()));
        }
        let token = format!("{TOKEN_PREFIX}{id}_{secret}");
        Ok(NewToken { record: TokenRecord { id, name: name.to_owned(), scope, created_at }, token })
    }

    /// Every API token, by name.
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let conn = self.lock();
        let db = |e| self.db(e);
        let mut query = conn
            .prepare_cached("SELECT id, name, scope, created_at FROM admin_tokens ORDER BY name")
            .map_err(db)?;
        let rows = query
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })
            .map_err(db)?;
        rows.map(|row| {
            let (id, name, scope, created) = row.map_err(db)?;
            Ok(TokenRecord {
                id,
                name,
                scope: self.scope_of(&scope)?,
                created_at: from_unix_seconds(created),
            })
        })
        .collect()
    }

    /// Revokes (deletes) the token named `name`: it stops working at its next use.
    pub fn revoke_token(&self, name: &str) -> Result<(), StoreError> {
        let removed =
            self.write(|tx| tx.execute("DELETE FROM admin_tokens WHERE name = ?1", params![name]))?;
        if removed == 0 { Err(StoreError::UnknownToken(name.to_owned())) } else { Ok(()) }
    }

    /// The token `token` is, if it is a valid one (its id exists and its secret matches).
    pub fn verify_token(&self, token: &str) -> Result<Option<TokenRecord>, StoreError> {
        let Some((id, secret)) = split_token(token) else { return Ok(None) };
        let row: Option<(String, String, String, i64)> = {
            let conn = self.lock();
            conn.query_row(
                "SELECT name, scope, secret_sha256, created_at FROM admin_tokens WHERE id = ?1",
                params![id],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()
            .map_err(|e| self.db(e))?
        };
        let Some((name, scope, stored, created)) = row else { return Ok(None) };
        if !bool::from(secret_digest(secret).as_bytes().ct_eq(stored.as_bytes())) {
            return Ok(None);
        }
        Ok(Some(TokenRecord {
            id: id.to_owned(),
            name,
            scope: self.scope_of(&scope)?,
            created_at: from_unix_seconds(created),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&super::super::config_db_path(dir.path())).expect("opens");
        store.set_pbkdf2_iterations(password::MIN_PBKDF2_ITERATIONS).expect("fast hashes");
        (dir, store)
    }

    #[test]
    fn admins_log_in_with_their_password_only() {
        let (_dir, store) = store();
        assert_eq!(store.admin_count().unwrap(), 0);
        store.add_admin("root", b"s3cret", Scope::Admin).unwrap();
        store.add_admin("viewer", b"look", Scope::Read).unwrap();
        assert!(matches!(store.add_admin("root", b"x", Scope::Admin), Err(StoreError::AdminExists(_))));
        assert!(matches!(
            store.add_admin("empty", b"", Scope::Admin),
            Err(StoreError::Password(password::PasswordError::Empty))
        ));
        assert_eq!(store.admin_count().unwrap(), 2);
        assert_eq!(store.verify_admin("root", b"s3cret").unwrap().map(|a| a.role), Some(Scope::Admin));
        assert_eq!(store.verify_admin("root", b"wrong").unwrap(), None);
        assert_eq!(store.verify_admin("nobody", b"s3cret").unwrap(), None);
        store.set_admin_password("root", b"new").unwrap();
        assert_eq!(store.verify_admin("root", b"s3cret").unwrap(), None);
        assert!(store.verify_admin("root", b"new").unwrap().is_some());
        let names: Vec<_> = store.admins().unwrap().into_iter().map(|a| (a.name, a.role)).collect();
        assert_eq!(names, [("root".to_owned(), Scope::Admin), ("viewer".to_owned(), Scope::Read)]);
        assert_eq!(store.admin("viewer").unwrap().map(|a| a.role), Some(Scope::Read));
        store.remove_admin("viewer").unwrap();
        assert_eq!(store.admin("viewer").unwrap(), None);
        assert!(matches!(store.remove_admin("viewer"), Err(StoreError::UnknownAdmin(_))));
        assert!(matches!(store.set_admin_password("viewer", b"x"), Err(StoreError::UnknownAdmin(_))));
    }

    #[test]
    fn tokens_verify_until_revoked_and_are_never_stored_in_clear() {
        let (dir, store) = store();
        let made = store.create_token("ci", Scope::Read).unwrap();
        assert!(matches!(store.create_token("ci", Scope::Admin), Err(StoreError::TokenExists(_))));
        assert!(made.token.starts_with("mesgd_"));
        assert!(!format!("{made:?}").contains(&made.token));
        assert_eq!(store.verify_token(&made.token).unwrap().map(|t| t.scope), Some(Scope::Read));
        // A changed secret, a changed id, or garbage: not a token.
        let mut tampered = made.token.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        assert_eq!(store.verify_token(&tampered).unwrap(), None);
        for bad in ["", "mesgd_", "mesgd_zz_x", "Bearer x", &made.token[1..]] {
            assert_eq!(store.verify_token(bad).unwrap(), None, "{bad:?}");
        }
        let file = std::fs::read(super::super::config_db_path(dir.path())).unwrap();
        let wal = std::fs::read(dir.path().join("config.db-wal")).unwrap_or_default();
        // The id is hex, the secret base64url (which may itself hold `_`): split after the id.
        let secret = split_token(&made.token).expect("a token").1.as_bytes();
        for bytes in [&file, &wal] {
            assert!(!bytes.windows(secret.len()).any(|w| w == secret), "the secret is not stored");
        }
        assert_eq!(store.tokens().unwrap().len(), 1);
        store.revoke_token("ci").unwrap();
        assert_eq!(store.verify_token(&made.token).unwrap(), None);
        assert!(matches!(store.revoke_token("ci"), Err(StoreError::UnknownToken(_))));
    }

    #[test]
    fn scopes_order_and_parse() {
        assert!(Scope::Admin.covers(Scope::Read));
        assert!(!Scope::Read.covers(Scope::Admin));
        assert_eq!("read".parse(), Ok(Scope::Read));
        assert!("root".parse::<Scope>().is_err());
    }
}
