//! The builtin user store: users and their ACL rules in SQLite at `<storage.dir>/config.db`.
//!
//! [`Store`] is the management API: the `mesgd user` / `mesgd acl` commands and the REST API
//! call the same methods, so every operation exists once. Every change is one short `BEGIN IMMEDIATE` transaction, so the
//! broker's [`UserDirectory`](super::UserDirectory) and any number of command-line processes can
//! use the file at the same time; a change becomes visible to the running broker through
//! `PRAGMA data_version` (see [`super::live`]).
//!
//! The database runs in WAL mode with `synchronous = FULL` (changes are rare and must survive
//! a crash) and a busy timeout. Its schema is versioned with `PRAGMA user_version`: an older
//! file is migrated when it is opened, a newer one is refused. A new file is created readable by
//! its owner only, since it holds password hashes.
//!
//! Schema (version 3; `super::schema` has the history and the migrations):
//!
//! ```sql
//! users(id, username UNIQUE, password_hash NULL, auth_type 'basic'|'x509', disabled, unrestricted)
//! rules(user_id -> users.id ON DELETE CASCADE, position, pattern, permission)
//! settings(key PRIMARY KEY, value)   -- e.g. pbkdf2_iterations for new hashes
//! admins(id, name UNIQUE, password_hash, role 'admin'|'read', created_at)
//! admin_tokens(id PRIMARY KEY, name UNIQUE, scope 'admin'|'read', secret_sha256, created_at)
//! content_permissions(id, pattern UNIQUE)          -- canonical content-routing patterns
//! content_roles(id, name UNIQUE)
//! role_permissions(role_id, permission_id)          -- both ON DELETE CASCADE
//! user_permissions(user_id, permission_id)          -- both ON DELETE CASCADE
//! user_roles(user_id, role_id)                      -- both ON DELETE CASCADE
//! revoked_sessions(jti PRIMARY KEY, exp)            -- logged-out login sessions
//! ```
//!
//! Accounts' message access (permissions, roles, assignments) is managed by the methods in
//! [`super::accounts`].
//!
//! Administrators (the console and the REST API) are managed by the methods in
//! [`super::admin`]; they are not broker users.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Mutex, MutexGuard};

use mesgd_core::acl::{AclError, Permission, Rule};
use rusqlite::{Connection, OptionalExtension as _, Transaction, TransactionBehavior, params};

use super::password::{self, DEFAULT_PBKDF2_ITERATIONS, HashScheme, PasswordError};
use super::schema;
pub use super::schema::SCHEMA_VERSION;
use mesgd_core::sync::lock;

/// The longest username accepted, in bytes.
pub(crate) const MAX_USERNAME_LEN: usize = 1024;

/// The file name of the builtin store inside `storage.dir`.
pub const CONFIG_DB_FILE: &str = "config.db";

/// `<storage_dir>/config.db`: where the builtin store lives.
pub fn config_db_path(storage_dir: &Path) -> PathBuf {
    storage_dir.join(CONFIG_DB_FILE)
}

/// How a record authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthType {
    /// Username and password.
    Basic,
    /// A client certificate whose Common Name is the username; no password.
    X509,
}

impl AuthType {
    /// The stored and displayed name: `basic` or `x509`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthType::Basic => "basic",
            AuthType::X509 => "x509",
        }
    }
}

impl fmt::Display for AuthType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuthType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "basic" => Ok(AuthType::Basic),
            "x509" => Ok(AuthType::X509),
            other => Err(format!("unknown auth type {other:?} (expected basic or x509)")),
        }
    }
}

/// One user as stored.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UserRecord {
    /// The username (for x509 records, the certificate Common Name).
    pub username: String,
    /// How the record authenticates.
    pub auth_type: AuthType,
    /// The password hash; `None` for x509 records (and basic ones whose password was never set).
    pub password_hash: Option<String>,
    /// A disabled record is refused (and its connections are closed).
    pub disabled: bool,
    /// An unrestricted record has no ACL at all; its rules are kept but not used.
    pub unrestricted: bool,
    /// The ordered ACL rules.
    pub rules: Vec<Rule>,
    /// The content-routing patterns assigned to the account, directly or through its roles:
    /// canonical, sorted, each once. What a grant token issued now would carry.
    pub patterns: Vec<String>,
    /// The patterns assigned to it directly, sorted.
    pub direct_patterns: Vec<String>,
    /// The names of its roles, sorted.
    pub roles: Vec<String>,
}

impl UserRecord {
    /// The identity ACL: `None` (unrestricted) or the rules (`Some([])` denies everything).
    pub fn acl(&self) -> Option<Vec<Rule>> {
        if self.unrestricted { None } else { Some(self.rules.clone()) }
    }

    /// The kind of the stored password hash, if there is a usable one.
    pub fn password_scheme(&self) -> Option<HashScheme> {
        self.password_hash.as_deref().and_then(|hash| password::hash_scheme(hash).ok())
    }
}

impl fmt::Debug for UserRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserRecord")
            .field("username", &self.username)
            .field("auth_type", &self.auth_type)
            .field("password_hash", &self.password_hash.as_ref().map(|_| "<redacted>"))
            .field("disabled", &self.disabled)
            .field("unrestricted", &self.unrestricted)
            .field("rules", &self.rules)
            .field("patterns", &self.patterns)
            .field("direct_patterns", &self.direct_patterns)
            .field("roles", &self.roles)
            .finish()
    }
}

/// Settings of one user to change together ([`Store::modify_user`]); `None` leaves one as it is.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct UserChanges {
    /// A new password (basic users only), checked by [`password::check_new_password`].
    pub password: Option<Vec<u8>>,
    /// A new way to authenticate.
    pub auth_type: Option<AuthType>,
    /// Disable (`true`) or enable.
    pub disabled: Option<bool>,
    /// Unrestricted (`true`, no ACL) or restricted to the rules.
    pub unrestricted: Option<bool>,
}

impl fmt::Debug for UserChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserChanges")
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("auth_type", &self.auth_type)
            .field("disabled", &self.disabled)
            .field("unrestricted", &self.unrestricted)
            .finish()
    }
}

/// Which users [`Store::users_page`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserQuery<'a> {
    /// Only names after this one (the last name of the previous page).
    pub after: Option<&'a str>,
    /// Only names that start with this.
    pub prefix: Option<&'a str>,
    /// Only users of this auth type.
    pub auth_type: Option<AuthType>,
    /// Only disabled (`true`) or only enabled users.
    pub disabled: Option<bool>,
    /// How many at most.
    pub limit: usize,
}

/// A failure of the user store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database file could not be created or opened.
    #[error("cannot open user database {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is from a newer mesgd.
    #[error(
        "user database {} has schema version {found}, newer than this mesgd understands \
         ({supported}); run a newer mesgd or restore a backup made by this version",
        path.display()
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// [`SCHEMA_VERSION`].
        supported: i64,
    },
    /// SQLite failed.
    #[error("user database {}: {source}", path.display())]
    Database {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A stored value this build cannot read (the file was edited by hand?).
    #[error("user database {}: {message}", path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `add` of a name that exists.
    #[error("user {0:?} already exists")]
    UserExists(String),
    /// No user by that name.
    #[error("no user {0:?}")]
    UnknownUser(String),
    /// The name cannot be a username.
    #[error("invalid username {name:?}: {reason}")]
    InvalidUsername {
        /// The name as given.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The rule's pattern is not a valid topic filter pattern.
    #[error(transparent)]
    InvalidRule(#[from] AclError),
    /// No rule at that position.
    #[error("user {user:?} has no rule at position {position} (it has {count})")]
    NoSuchRule {
        /// The user.
        user: String,
        /// The 0-based position asked for.
        position: usize,
        /// How many rules the user has.
        count: usize,
    },
    /// No rule with that pattern.
    #[error("user {user:?} has no rule with pattern {pattern:?}")]
    NoRuleWithPattern {
        /// The user.
        user: String,
        /// The pattern asked for.
        pattern: String,
    },
    /// A password was given for, or asked of, an x509 record.
    #[error("user {0:?} authenticates with a client certificate (auth_type = x509) and has no password")]
    X509HasNoPassword(String),
    /// A basic record needs a password.
    #[error("user {0:?} authenticates with a password (auth_type = basic); give one")]
    PasswordRequired(String),
    /// The password hash or its parameters are unusable, or a new password breaks the rules.
    #[error(transparent)]
    Password(#[from] PasswordError),
    /// `admin add` of a name that exists.
    #[error("administrator {0:?} already exists")]
    AdminExists(String),
    /// No administrator by that name.
    #[error("no administrator {0:?}")]
    UnknownAdmin(String),
    /// `admin token create` of a name that exists.
    #[error("API token {0:?} already exists")]
    TokenExists(String),
    /// No API token by that name.
    #[error("no API token {0:?}")]
    UnknownToken(String),
    /// A content permission's pattern is not a valid content-routing path.
    #[error("invalid pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern as given (cut to 64 characters).
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `grant unassign` of a pattern the user does not hold directly.
    #[error("user {user:?} has no pattern {pattern} assigned directly")]
    NotAssigned {
        /// The user.
        user: String,
        /// The pattern, canonical.
        pattern: String,
    },
    /// No content permission with that pattern.
    #[error("no permission {0}")]
    UnknownPermission(String),
    /// The assignment would give the account more patterns than a grant token can carry.
    #[error("user {user:?} would hold more than {max} patterns, the most a grant token carries")]
    TooManyPatterns {
        /// The user.
        user: String,
        /// The limit.
        max: usize,
    },
    /// `role add` of a name that exists.
    #[error("role {0:?} already exists")]
    RoleExists(String),
    /// No role by that name.
    #[error("no role {0:?}")]
    UnknownRole(String),
    /// The name cannot be a role name.
    #[error("invalid role name {name:?}: {reason}")]
    InvalidRoleName {
        /// The name as given.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// The management API over one connection to the store.
pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating it and its directory if needed) and migrates the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = schema::open_connection(path)?;
        Ok(Store { conn: Mutex::new(conn), path: path.to_path_buf() })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The PBKDF2 iteration count used for new password hashes.
    pub fn pbkdf2_iterations(&self) -> Result<u32, StoreError> {
        let conn = self.lock();
        read_iterations(&conn, &self.path)
    }

    /// Sets the PBKDF2 iteration count for new password hashes (existing hashes keep theirs).
    /// It is stored in the database, so the command line hashes with the count the broker was
    /// configured with.
    pub fn set_pbkdf2_iterations(&self, iterations: u32) -> Result<(), StoreError> {
        if !(password::MIN_PBKDF2_ITERATIONS..=password::MAX_PBKDF2_ITERATIONS).contains(&iterations) {
            return Err(PasswordError::IterationsOutOfRange(iterations.into()).into());
        }
        self.write(|tx| {
            tx.execute(
                "INSERT INTO settings (key, value) VALUES ('pbkdf2_iterations', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE value <> excluded.value",
                params![iterations.to_string()],
            )?;
            Ok(())
        })
    }

    /// Adds a user. A `basic` user needs a password; an `x509` user must not have one.
    pub fn add_user(
        &self,
        username: &str,
        auth_type: AuthType,
        password: Option<&[u8]>,
        unrestricted: bool,
    ) -> Result<(), StoreError> {
        validate_username(username)?;
        let hash = match (auth_type, password) {
            (AuthType::Basic, None) => return Err(StoreError::PasswordRequired(username.to_owned())),
            (AuthType::X509, Some(_)) => return Err(StoreError::X509HasNoPassword(username.to_owned())),
            (AuthType::Basic, Some(password)) => {
                Some(password::hash_password(password, self.pbkdf2_iterations()?)?)
            }
            (AuthType::X509, None) => None,
        };
        self.write(|tx| {
            let inserted = tx.execute(
                "INSERT INTO users (username, password_hash, auth_type, unrestricted) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (username) DO NOTHING",
                params![username, hash, auth_type.as_str(), unrestricted],
            )?;
            Ok(inserted)
        })
        .and_then(|inserted| {
            if inserted == 1 { Ok(()) } else { Err(StoreError::UserExists(username.to_owned())) }
        })
    }

    /// Sets a basic user's password (hashed with the configured PBKDF2 count).
    pub fn set_password(&self, username: &str, password: &[u8]) -> Result<(), StoreError> {
        let changes = UserChanges { password: Some(password.to_vec()), ..UserChanges::default() };
        self.modify_user(username, &changes).map(drop)
    }

    /// Stores a hash made elsewhere (PBKDF2 in mesgd's form, or bcrypt), e.g. when users are
    /// migrated from another broker. The hash is checked before it is stored.
    pub fn set_password_hash(&self, username: &str, hash: &str) -> Result<(), StoreError> {
        password::hash_scheme(hash)?;
        self.apply_changes(username, &UserChanges::default(), Some(hash)).map(drop)
    }

    /// Changes how a user authenticates. Switching to `x509` drops the password hash; a user
    /// switched to `basic` needs [`Store::set_password`] before it can log in.
    pub fn set_auth_type(&self, username: &str, auth_type: AuthType) -> Result<(), StoreError> {
        self.modify_user(username, &UserChanges { auth_type: Some(auth_type), ..UserChanges::default() })
            .map(drop)
    }

    /// Disables (`true`) or enables a user. Disabling closes its connections.
    pub fn set_disabled(&self, username: &str, disabled: bool) -> Result<(), StoreError> {
        self.modify_user(username, &UserChanges { disabled: Some(disabled), ..UserChanges::default() })
            .map(drop)
    }

    /// Makes a user unrestricted (no ACL) or restricted to its rules.
    pub fn set_unrestricted(&self, username: &str, unrestricted: bool) -> Result<(), StoreError> {
        let changes = UserChanges { unrestricted: Some(unrestricted), ..UserChanges::default() };
        self.modify_user(username, &changes).map(drop)
    }

    /// Applies `changes` to one user in one transaction and returns the record as it is now:
    /// the one implementation behind every user setting (the command line sets one at a time,
    /// the REST API several). Refused as a whole when they contradict each other or the record:
    /// a password for a user that is (or becomes) `x509`. Switching to `x509` drops the hash.
    pub fn modify_user(&self, username: &str, changes: &UserChanges) -> Result<UserRecord, StoreError> {
        // Hashing is slow by design: before the transaction, so no other writer waits for it.
        let hash = match &changes.password {
            Some(password) => Some(password::hash_password(password, self.pbkdf2_iterations()?)?),
            None => None,
        };
        self.apply_changes(username, changes, hash.as_deref())
    }

    fn apply_changes(
        &self,
        username: &str,
        changes: &UserChanges,
        hash: Option<&str>,
    ) -> Result<UserRecord, StoreError> {
        self.update_user(username, |tx, user_id, current| {
            let db = |e| self.db(e);
            if hash.is_some() && changes.auth_type.unwrap_or(current) == AuthType::X509 {
                return Err(StoreError::X509HasNoPassword(username.to_owned()));
            }
            if let Some(auth_type) = changes.auth_type {
                tx.execute(
                    "UPDATE users SET auth_type = ?1,
                            password_hash = CASE WHEN ?1 = 'x509' THEN NULL ELSE password_hash END
                     WHERE id = ?2",
                    params![auth_type.as_str(), user_id],
                )
                .map_err(db)?;
            }
            if let Some(hash) = hash {
                tx.execute("UPDATE users SET password_hash = ?1 WHERE id = ?2", params![hash, user_id])
                    .map_err(db)?;
            }
            if let Some(disabled) = changes.disabled {
                tx.execute("UPDATE users SET disabled = ?1 WHERE id = ?2", params![disabled, user_id])
                    .map_err(db)?;
            }
            if let Some(unrestricted) = changes.unrestricted {
                tx.execute(
                    "UPDATE users SET unrestricted = ?1 WHERE id = ?2",
                    params![unrestricted, user_id],
                )
                .map_err(db)?;
            }
            load_user(tx, &self.path, username)?.ok_or_else(|| StoreError::UnknownUser(username.to_owned()))
        })
    }

    /// Removes a user and its rules. Its connections are closed.
    pub fn remove_user(&self, username: &str) -> Result<(), StoreError> {
        let removed =
            self.write(|tx| tx.execute("DELETE FROM users WHERE username = ?1", params![username]))?;
        if removed == 0 { Err(StoreError::UnknownUser(username.to_owned())) } else { Ok(()) }
    }

    /// One user, if it exists.
    pub fn user(&self, username: &str) -> Result<Option<UserRecord>, StoreError> {
        let conn = self.lock();
        load_user(&conn, &self.path, username)
    }

    /// Every user, ordered by name.
    pub fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        let mut conn = self.lock();
        let mut users: Vec<UserRecord> = load_all(&mut conn, &self.path)?.into_values().collect();
        users.sort_by(|a, b| a.username.cmp(&b.username));
        Ok(users)
    }

    /// A user's rules, in order.
    pub fn rules(&self, username: &str) -> Result<Vec<Rule>, StoreError> {
        self.user(username)?
            .map(|user| user.rules)
            .ok_or_else(|| StoreError::UnknownUser(username.to_owned()))
    }

    /// Inserts a rule at the 0-based `position` (appends when `None` or past the end) and
    /// returns the position it got. The rule is validated first.
    pub fn add_rule(&self, username: &str, rule: Rule, position: Option<usize>) -> Result<usize, StoreError> {
        rule.validate()?;
        self.edit_rules(username, |rules| {
            let at = position.unwrap_or(rules.len()).min(rules.len());
            rules.insert(at, rule);
            Ok(at)
        })
    }

    /// Removes the rule at the 0-based `position` and returns it.
    pub fn remove_rule_at(&self, username: &str, position: usize) -> Result<Rule, StoreError> {
        self.edit_rules(username, |rules| {
            if position >= rules.len() {
                return Err(StoreError::NoSuchRule {
                    user: username.to_owned(),
                    position,
                    count: rules.len(),
                });
            }
            Ok(rules.remove(position))
        })
    }

    /// Moves the rule at the 0-based `from` to the 0-based `to` (both must be positions of the
    /// list; the rules in between shift by one) and returns it.
    pub fn move_rule(&self, username: &str, from: usize, to: usize) -> Result<Rule, StoreError> {
        self.edit_rules(username, |rules| {
            let count = rules.len();
            let missing = |position| StoreError::NoSuchRule { user: username.to_owned(), position, count };
            if from >= count {
                return Err(missing(from));
            }
            if to >= count {
                return Err(missing(to));
            }
            let rule = rules.remove(from);
            rules.insert(to, rule.clone());
            Ok(rule)
        })
    }

    /// Replaces the rule at the 0-based `position` (validated first) and returns the old one.
    pub fn replace_rule(&self, username: &str, position: usize, rule: Rule) -> Result<Rule, StoreError> {
        rule.validate()?;
        self.edit_rules(username, |rules| match rules.get_mut(position) {
            Some(slot) => Ok(std::mem::replace(slot, rule)),
            None => Err(StoreError::NoSuchRule { user: username.to_owned(), position, count: rules.len() }),
        })
    }

    /// One page of users, ordered by name: at most `query.limit` of those after `query.after`
    /// that pass its filters.
    pub fn users_page(&self, query: &UserQuery<'_>) -> Result<Vec<UserRecord>, StoreError> {
        let conn = self.lock();
        let db = |e| self.db(e);
        let mut select = conn
            .prepare_cached(&format!(
                "{SELECT_USERS} WHERE username > ?1
                   AND substr(username, 1, length(?2)) = ?2
                   AND (?3 IS NULL OR auth_type = ?3)
                   AND (?4 IS NULL OR disabled = ?4)
                 ORDER BY username LIMIT ?5"
            ))
            .map_err(db)?;
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let rows = select
            .query_map(
                params![
                    query.after.unwrap_or(""),
                    query.prefix.unwrap_or(""),
                    query.auth_type.map(AuthType::as_str),
                    query.disabled,
                    limit
                ],
                read_user_row,
            )
            .map_err(db)?
            .collect::<Result<Vec<UserRow>, _>>()
            .map_err(db)?;
        rows.into_iter()
            .map(|row| {
                let rules = load_rules(&conn, &self.path, row.0)?;
                let access = super::accounts::load_access(&conn, &self.path, Some(row.0))?
                    .remove(&row.0)
                    .unwrap_or_default();
                user_from_row(&self.path, row, rules, access)
            })
            .collect()
    }

    /// Removes every rule whose pattern is exactly `pattern`; returns how many there were.
    pub fn remove_rules_with_pattern(&self, username: &str, pattern: &str) -> Result<usize, StoreError> {
        self.edit_rules(username, |rules| {
            let before = rules.len();
            rules.retain(|rule| rule.pattern != pattern);
            match before - rules.len() {
                0 => Err(StoreError::NoRuleWithPattern {
                    user: username.to_owned(),
                    pattern: pattern.to_owned(),
                }),
                removed => Ok(removed),
            }
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave the connection inconsistent: every change
        // is a transaction that SQLite rolls back when it is dropped unfinished.
        lock(&self.conn)
    }

    pub(super) fn db(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Database { path: self.path.clone(), source }
    }

    /// Runs `change` in one immediate transaction.
    pub(super) fn write<T>(
        &self,
        change: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| self.db(e))?;
        let value = change(&tx).map_err(|e| self.db(e))?;
        tx.commit().map_err(|e| self.db(e))?;
        Ok(value)
    }

    /// Runs `change` on an existing user inside one immediate transaction.
    pub(super) fn update_user<T>(
        &self,
        username: &str,
        change: impl FnOnce(&Transaction<'_>, i64, AuthType) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| self.db(e))?;
        let row: Option<(i64, String)> = tx
            .query_row("SELECT id, auth_type FROM users WHERE username = ?1", params![username], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
            .map_err(|e| self.db(e))?;
        let Some((user_id, auth_type)) = row else {
            return Err(StoreError::UnknownUser(username.to_owned()));
        };
        let auth_type =
            auth_type.parse().map_err(|message| StoreError::Corrupt { path: self.path.clone(), message })?;
        let value = change(&tx, user_id, auth_type)?;
        tx.commit().map_err(|e| self.db(e))?;
        Ok(value)
    }

    /// Loads a user's rules, lets `edit` change them, and writes them back, all in one
    /// transaction so positions stay dense and concurrent edits cannot interleave.
    fn edit_rules<T>(
        &self,
        username: &str,
        edit: impl FnOnce(&mut Vec<Rule>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.update_user(username, |tx, user_id, _| {
            let mut rules = load_rules(tx, &self.path, user_id)?;
            let value = edit(&mut rules)?;
            tx.execute("DELETE FROM rules WHERE user_id = ?1", params![user_id]).map_err(|e| self.db(e))?;
            let mut insert = tx
                .prepare("INSERT INTO rules (user_id, position, pattern, permission) VALUES (?1, ?2, ?3, ?4)")
                .map_err(|e| self.db(e))?;
            for (position, rule) in rules.iter().enumerate() {
                insert
                    .execute(params![user_id, position as i64, rule.pattern, rule.permission.as_str()])
                    .map_err(|e| self.db(e))?;
            }
            Ok(value)
        })
    }
}

pub(super) fn validate_username(username: &str) -> Result<(), StoreError> {
    let invalid = |reason| StoreError::InvalidUsername { name: username.to_owned(), reason };
    if username.is_empty() {
        return Err(invalid("it is empty"));
    }
    if username.len() > MAX_USERNAME_LEN {
        return Err(invalid("it is longer than 1024 bytes"));
    }
    // Control characters would break the one-record-per-line output of the command line.
    if username.chars().any(char::is_control) {
        return Err(invalid("it contains a control character"));
    }
    Ok(())
}

fn read_iterations(conn: &Connection, path: &Path) -> Result<u32, StoreError> {
    let stored: Option<String> = conn
        .query_row("SELECT value FROM settings WHERE key = 'pbkdf2_iterations'", [], |row| row.get(0))
        .optional()
        .map_err(|source| StoreError::Database { path: path.to_path_buf(), source })?;
    match stored {
        None => Ok(DEFAULT_PBKDF2_ITERATIONS),
        Some(text) => text.parse().map_err(|_| StoreError::Corrupt {
            path: path.to_path_buf(),
            message: format!("setting pbkdf2_iterations is not a number: {text:?}"),
        }),
    }
}

/// A raw `users` row before its rules are attached.
type UserRow = (i64, String, Option<String>, String, bool, bool);

fn user_from_row(
    path: &Path,
    row: UserRow,
    rules: Vec<Rule>,
    access: super::accounts::Access,
) -> Result<UserRecord, StoreError> {
    let (_, username, password_hash, auth_type, disabled, unrestricted) = row;
    let auth_type =
        auth_type.parse().map_err(|message| StoreError::Corrupt { path: path.to_path_buf(), message })?;
    let super::accounts::Access { patterns, direct: direct_patterns, roles } = access;
    Ok(UserRecord {
        username,
        auth_type,
        password_hash,
        disabled,
        unrestricted,
        rules,
        patterns,
        direct_patterns,
        roles,
    })
}

fn read_user_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<UserRow> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
}

const SELECT_USERS: &str = "SELECT id, username, password_hash, auth_type, disabled, unrestricted FROM users";

fn rule_from_columns(path: &Path, pattern: String, permission: &str) -> Result<Rule, StoreError> {
    let permission = Permission::parse(permission)
        .map_err(|e| StoreError::Corrupt { path: path.to_path_buf(), message: e.to_string() })?;
    Ok(Rule { pattern, permission })
}

fn load_rules(conn: &Connection, path: &Path, user_id: i64) -> Result<Vec<Rule>, StoreError> {
    let db_error = |source| StoreError::Database { path: path.to_path_buf(), source };
    let mut query = conn
        .prepare_cached("SELECT pattern, permission FROM rules WHERE user_id = ?1 ORDER BY position")
        .map_err(db_error)?;
    let rows = query
        .query_map(params![user_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))
        .map_err(db_error)?;
    rows.map(|row| {
        let (pattern, permission) = row.map_err(db_error)?;
        rule_from_columns(path, pattern, &permission)
    })
    .collect()
}

pub(super) fn load_user(
    conn: &Connection,
    path: &Path,
    username: &str,
) -> Result<Option<UserRecord>, StoreError> {
    let db_error = |source| StoreError::Database { path: path.to_path_buf(), source };
    let row = conn
        .query_row(&format!("{SELECT_USERS} WHERE username = ?1"), params![username], read_user_row)
        .optional()
        .map_err(db_error)?;
    let Some(row) = row else { return Ok(None) };
    let rules = load_rules(conn, path, row.0)?;
    let access = super::accounts::load_access(conn, path, Some(row.0))?.remove(&row.0).unwrap_or_default();
    user_from_row(path, row, rules, access).map(Some)
}

/// Every user with its rules, read in one transaction so users and rules agree.
pub(crate) fn load_all(
    conn: &mut Connection,
    path: &Path,
) -> Result<std::collections::HashMap<String, UserRecord>, StoreError> {
    let db_error = |source| StoreError::Database { path: path.to_path_buf(), source };
    let tx = conn.transaction().map_err(db_error)?;
    let mut rules_by_user: std::collections::HashMap<i64, Vec<Rule>> = std::collections::HashMap::new();
    {
        let mut query = tx
            .prepare_cached("SELECT user_id, pattern, permission FROM rules ORDER BY user_id, position")
            .map_err(db_error)?;
        let rows = query
            .query_map([], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
            })
            .map_err(db_error)?;
        for row in rows {
            let (user_id, pattern, permission) = row.map_err(db_error)?;
            rules_by_user.entry(user_id).or_default().push(rule_from_columns(path, pattern, &permission)?);
        }
    }
    let mut access_by_user = super::accounts::load_access(&tx, path, None)?;
    let mut users = std::collections::HashMap::new();
    {
        let mut query = tx.prepare_cached(SELECT_USERS).map_err(db_error)?;
        let rows = query.query_map([], read_user_row).map_err(db_error)?;
        for row in rows {
            let row = row.map_err(db_error)?;
            let rules = rules_by_user.remove(&row.0).unwrap_or_default();
            let access = access_by_user.remove(&row.0).unwrap_or_default();
            let user = user_from_row(path, row, rules, access)?;
            users.insert(user.username.clone(), user);
        }
    }
    tx.commit().map_err(db_error)?;
    Ok(users)
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
