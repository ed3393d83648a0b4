//! Accounts' message access in the builtin store: content permissions, roles, and their
//! assignments to users (issue #16; `docs/tokens.md`, "Grants").
//!
//! - A **permission** is one content-routing pattern, stored in canonical form (the pattern
//!   compiler's output or a path, parsed by `mesgd_core::content::Path`), so `/b=1/a=2` and
//!   `/a=2/b=1` are one permission.
//! - A **role** is a named set of permissions.
//! - A user holds permissions **directly** and **through roles**; the union, canonical and
//!   sorted, is [`UserRecord::patterns`](super::UserRecord::patterns): what a grant token
//!   issued now carries, and what a grant connection's token patterns are checked against at
//!   every message.
//!
//! Every change is one immediate transaction, like every other change to the store, so the
//! running broker sees it at its next `data_version` check (the REST API waits for that before
//! it answers). Removing a permission or a role removes every assignment of it. A user holds at
//! most [`MAX_PATTERNS`] patterns, the most a grant token can carry; an assignment that would
//! pass it is refused rather than a token silently cut short later.

use std::collections::HashMap;
use std::path::Path as FsPath;

use mesgd_core::content::Path;
use rusqlite::{Connection, OptionalExtension as _, Transaction, params};

use super::store::{Store, StoreError};

/// The most patterns one account may hold (directly and through roles together).
pub const MAX_PATTERNS: usize = 256;
/// The longest role name, in bytes.
pub const MAX_ROLE_NAME_LEN: usize = 128;

/// One role: its name and its permissions' patterns, canonical and sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoleRecord {
    /// The role's name.
    pub name: String,
    /// Its patterns.
    pub patterns: Vec<String>,
}

/// `text` as a canonical content-routing pattern, or why it is not one.
pub fn canonical_pattern(text: &str) -> Result<String, StoreError> {
    Path::parse(text).map(|p| p.to_string()).map_err(|e| StoreError::InvalidPattern {
        pattern: text.chars().take(64).collect(),
        reason: e.to_string(),
    })
}

pub(super) fn validate_role_name(name: &str) -> Result<(), StoreError> {
    let invalid = |reason| StoreError::InvalidRoleName { name: name.chars().take(64).collect(), reason };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > MAX_ROLE_NAME_LEN {
        return Err(invalid("it is longer than 128 bytes"));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(invalid("it contains a space or a control character"));
    }
    Ok(())
}

impl Store {
    /// Assigns `pattern` to `user` directly; `false` if it already was. The pattern is
    /// canonicalised first and made a permission if it is not one yet.
    pub fn assign_pattern(&self, user: &str, pattern: &str) -> Result<bool, StoreError> {
        let pattern = canonical_pattern(pattern)?;
        self.update_user(user, |tx, user_id, _| {
            let db = |e| self.db(e);
            let permission = ensure_permission(tx, &pattern).map_err(db)?;
            let added = tx
                .execute(
                    "INSERT INTO user_permissions (user_id, permission_id) VALUES (?1, ?2)
                     ON CONFLICT DO NOTHING",
                    params![user_id, permission],
                )
                .map_err(db)?;
            self.check_pattern_count(tx, user, user_id)?;
            Ok(added == 1)
        })
    }

    /// Removes the direct assignment of `pattern` to `user` (its roles are left alone). Grant
    /// connections of the user stop reaching listeners only this pattern covered at their next
    /// message.
    pub fn unassign_pattern(&self, user: &str, pattern: &str) -> Result<(), StoreError> {
        let pattern = canonical_pattern(pattern)?;
        self.update_user(user, |tx, user_id, _| {
            let removed = tx
                .execute(
                    "DELETE FROM user_permissions WHERE user_id = ?1 AND permission_id =
                     (SELECT id FROM content_permissions WHERE pattern = ?2)",
                    params![user_id, pattern],
                )
                .map_err(|e| self.db(e))?;
            if removed == 0 {
                return Err(StoreError::NotAssigned { user: user.to_owned(), pattern: pattern.clone() });
            }
            Ok(())
        })
    }

    /// The patterns assigned to `user` directly, sorted.
    pub fn direct_patterns(&self, user: &str) -> Result<Vec<String>, StoreError> {
        self.update_user(user, |tx, user_id, _| {
            let mut query = tx
                .prepare_cached(
                    "SELECT p.pattern FROM user_permissions up
                     JOIN content_permissions p ON p.id = up.permission_id
                     WHERE up.user_id = ?1 ORDER BY p.pattern",
                )
                .map_err(|e| self.db(e))?;
            let rows = query.query_map(params![user_id], |r| r.get(0)).map_err(|e| self.db(e))?;
            rows.collect::<rusqlite::Result<Vec<String>>>().map_err(|e| self.db(e))
        })
    }

    /// The patterns `user` holds, directly and through roles: [`super::UserRecord::patterns`].
    pub fn patterns(&self, user: &str) -> Result<Vec<String>, StoreError> {
        self.user(user)?.map(|u| u.patterns).ok_or_else(|| StoreError::UnknownUser(user.to_owned()))
    }

    /// Removes the permission `pattern` everywhere: from every user and every role.
    pub fn remove_permission(&self, pattern: &str) -> Result<(), StoreError> {
        let pattern = canonical_pattern(pattern)?;
        let removed = self
            .write(|tx| tx.execute("DELETE FROM content_permissions WHERE pattern = ?1", params![pattern]))?;
        if removed == 0 { Err(StoreError::UnknownPermission(pattern)) } else { Ok(()) }
    }

    /// Adds an empty role.
    pub fn add_role(&self, name: &str) -> Result<(), StoreError> {
        validate_role_name(name)?;
        let added = self.write(|tx| {
            tx.execute("INSERT INTO content_roles (name) VALUES (?1) ON CONFLICT DO NOTHING", params![name])
        })?;
        if added == 1 { Ok(()) } else { Err(StoreError::RoleExists(name.to_owned())) }
    }

    /// Removes a role and every assignment of it.
    pub fn remove_role(&self, name: &str) -> Result<(), StoreError> {
        let removed =
            self.write(|tx| tx.execute("DELETE FROM content_roles WHERE name = ?1", params![name]))?;
        if removed == 0 { Err(StoreError::UnknownRole(name.to_owned())) } else { Ok(()) }
    }

    /// Adds `pattern` to the role `name`; `false` if it had it. Refused when a user of the role
    /// would then hold more than [`MAX_PATTERNS`].
    pub fn role_add_pattern(&self, name: &str, pattern: &str) -> Result<bool, StoreError> {
        let pattern = canonical_pattern(pattern)?;
        self.in_role(name, |tx, role_id| {
            let db = |e| self.db(e);
            let permission = ensure_permission(tx, &pattern).map_err(db)?;
            let added = tx
                .execute(
                    "INSERT INTO role_permissions (role_id, permission_id) VALUES (?1, ?2)
                     ON CONFLICT DO NOTHING",
                    params![role_id, permission],
                )
                .map_err(db)?;
            let members: Vec<(i64, String)> = {
                let mut q = tx
                    .prepare_cached(
                        "SELECT u.id, u.username FROM user_roles ur JOIN users u ON u.id = ur.user_id
                         WHERE ur.role_id = ?1",
                    )
                    .map_err(db)?;
                let rows = q.query_map(params![role_id], |r| Ok((r.get(0)?, r.get(1)?))).map_err(db)?;
                rows.collect::<rusqlite::Result<_>>().map_err(db)?
            };
            for (id, user) in members {
                self.check_pattern_count(tx, &user, id)?;
            }
            Ok(added == 1)
        })
    }

    /// Removes `pattern` from the role `name`.
    pub fn role_remove_pattern(&self, name: &str, pattern: &str) -> Result<(), StoreError> {
        let pattern = canonical_pattern(pattern)?;
        self.in_role(name, |tx, role_id| {
            let removed = tx
                .execute(
                    "DELETE FROM role_permissions WHERE role_id = ?1 AND permission_id =
                     (SELECT id FROM content_permissions WHERE pattern = ?2)",
                    params![role_id, pattern],
                )
                .map_err(|e| self.db(e))?;
            if removed == 0 { Err(StoreError::UnknownPermission(pattern.clone())) } else { Ok(()) }
        })
    }

    /// Gives `user` the role `name`; `false` if it had it.
    pub fn assign_role(&self, user: &str, name: &str) -> Result<bool, StoreError> {
        self.update_user(user, |tx, user_id, _| {
            let role_id = role_id(tx, name).map_err(|e| self.db(e))?;
            let Some(role_id) = role_id else { return Err(StoreError::UnknownRole(name.to_owned())) };
            let added = tx
                .execute(
                    "INSERT INTO user_roles (user_id, role_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                    params![user_id, role_id],
                )
                .map_err(|e| self.db(e))?;
            self.check_pattern_count(tx, user, user_id)?;
            Ok(added == 1)
        })
    }

    /// Takes the role `name` from `user`.
    pub fn unassign_role(&self, user: &str, name: &str) -> Result<(), StoreError> {
        self.update_user(user, |tx, user_id, _| {
            let removed = tx
                .execute(
                    "DELETE FROM user_roles WHERE user_id = ?1 AND role_id =
                     (SELECT id FROM content_roles WHERE name = ?2)",
                    params![user_id, name],
                )
                .map_err(|e| self.db(e))?;
            if removed == 0 { Err(StoreError::UnknownRole(name.to_owned())) } else { Ok(()) }
        })
    }

    /// The roles of `user`, sorted by name.
    pub fn user_roles(&self, user: &str) -> Result<Vec<String>, StoreError> {
        self.update_user(user, |tx, user_id, _| {
            let mut q = tx
                .prepare_cached(
                    "SELECT r.name FROM user_roles ur JOIN content_roles r ON r.id = ur.role_id
                     WHERE ur.user_id = ?1 ORDER BY r.name",
                )
                .map_err(|e| self.db(e))?;
            let rows = q.query_map(params![user_id], |r| r.get(0)).map_err(|e| self.db(e))?;
            rows.collect::<rusqlite::Result<Vec<String>>>().map_err(|e| self.db(e))
        })
    }

    /// Every role with its patterns, sorted by name.
    pub fn roles(&self) -> Result<Vec<RoleRecord>, StoreError> {
        let conn = self.lock();
        let db = |e| self.db(e);
        let mut q = conn
            .prepare_cached(
                "SELECT r.name, p.pattern FROM content_roles r
                 LEFT JOIN role_permissions rp ON rp.role_id = r.id
                 LEFT JOIN content_permissions p ON p.id = rp.permission_id
                 ORDER BY r.name, p.pattern",
            )
            .map_err(db)?;
        let rows =
            q.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))).map_err(db)?;
        let mut roles: Vec<RoleRecord> = Vec::new();
        for row in rows {
            let (name, pattern) = row.map_err(db)?;
            if roles.last().is_none_or(|r| r.name != name) {
                roles.push(RoleRecord { name, patterns: Vec::new() });
            }
            if let (Some(p), Some(role)) = (pattern, roles.last_mut()) {
                role.patterns.push(p);
            }
        }
        Ok(roles)
    }

    /// One role.
    pub fn role(&self, name: &str) -> Result<RoleRecord, StoreError> {
        self.roles()?
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| StoreError::UnknownRole(name.to_owned()))
    }

    /// Runs `change` on an existing role in one immediate transaction.
    fn in_role<T>(
        &self,
        name: &str,
        change: impl FnOnce(&Transaction<'_>, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.db(e))?;
        let Some(id) = role_id(&tx, name).map_err(|e| self.db(e))? else {
            return Err(StoreError::UnknownRole(name.to_owned()));
        };
        let value = change(&tx, id)?;
        tx.commit().map_err(|e| self.db(e))?;
        Ok(value)
    }

    fn check_pattern_count(&self, tx: &Transaction<'_>, user: &str, user_id: i64) -> Result<(), StoreError> {
        let count = load_patterns(tx, self.path(), Some(user_id))?.remove(&user_id).map_or(0, |p| p.len());
        if count > MAX_PATTERNS {
            return Err(StoreError::TooManyPatterns { user: user.to_owned(), max: MAX_PATTERNS });
        }
        Ok(())
    }

    /// Records that the login session `jti` was ended; it stays refused until `exp` (unix
    /// seconds), after which [`Store::prune_revoked_sessions`] forgets it.
    pub fn revoke_session(&self, jti: &str, exp: u64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO revoked_sessions (jti, exp) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                params![jti, exp as i64],
            )
        })
        .map(drop)
    }

    /// The ended login sessions not yet expired at `now` (unix seconds): `(jti, exp)`.
    pub fn revoked_sessions(&self, now: u64) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.lock();
        let db = |e| self.db(e);
        let mut q =
            conn.prepare_cached("SELECT jti, exp FROM revoked_sessions WHERE exp > ?1").map_err(db)?;
        let rows = q
            .query_map(params![now as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })
            .map_err(db)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db)
    }

    /// Forgets the ended login sessions that expired at or before `now`; how many.
    pub fn prune_revoked_sessions(&self, now: u64) -> Result<usize, StoreError> {
        self.write(|tx| tx.execute("DELETE FROM revoked_sessions WHERE exp <= ?1", params![now as i64]))
    }

    /// The value of setting `key`, if set.
    pub fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        let conn = self.lock();
        conn.query_row("SELECT value FROM settings WHERE key = ?1", params![key], |r| r.get(0))
            .optional()
            .map_err(|e| self.db(e))
    }

    /// Sets setting `key` to `value`, replacing what it held.
    pub fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
                params![key, value],
            )
        })
        .map(drop)
    }

    /// The value of setting `key`; if it is not set, `make()` is stored and returned. Two
    /// processes racing get the same value (the first insert wins).
    pub fn setting_or_insert(&self, key: &str, make: impl FnOnce() -> String) -> Result<String, StoreError> {
        let value = make();
        self.write(|tx| {
            tx.execute(
                "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
                params![key, value],
            )?;
            tx.query_row("SELECT value FROM settings WHERE key = ?1", params![key], |r| r.get(0))
        })
    }
}

pub(super) fn ensure_permission(tx: &Transaction<'_>, pattern: &str) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO content_permissions (pattern) VALUES (?1) ON CONFLICT DO NOTHING",
        params![pattern],
    )?;
    tx.query_row("SELECT id FROM content_permissions WHERE pattern = ?1", params![pattern], |r| r.get(0))
}

fn role_id(conn: &Connection, name: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT id FROM content_roles WHERE name = ?1", params![name], |r| r.get(0)).optional()
}

/// The patterns each user holds (directly and through roles), canonical, sorted and distinct;
/// of one user when `only` names one.
pub(super) fn load_patterns(
    conn: &Connection,
    path: &FsPath,
    only: Option<i64>,
) -> Result<HashMap<i64, Vec<String>>, StoreError> {
    let db_error = |source| StoreError::Database { path: path.to_path_buf(), source };
    let mut query = conn
        .prepare_cached(
            "SELECT up.user_id, p.pattern FROM user_permissions up
             JOIN content_permissions p ON p.id = up.permission_id
             WHERE ?1 IS NULL OR up.user_id = ?1
             UNION
             SELECT ur.user_id, p.pattern FROM user_roles ur
             JOIN role_permissions rp ON rp.role_id = ur.role_id
             JOIN content_permissions p ON p.id = rp.permission_id
             WHERE ?1 IS NULL OR ur.user_id = ?1
             ORDER BY 1, 2",
        )
        .map_err(db_error)?;
    let rows = query
        .query_map(params![only], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .map_err(db_error)?;
    let mut by_user: HashMap<i64, Vec<String>> = HashMap::new();
    for row in rows {
        let (user, pattern) = row.map_err(db_error)?;
        by_user.entry(user).or_default().push(pattern);
    }
    Ok(by_user)
}

/// What an account reaches by content routing: its patterns (the union), those assigned
/// directly, and its roles, each sorted.
#[derive(Debug, Default)]
pub(super) struct Access {
    pub(super) patterns: Vec<String>,
    pub(super) direct: Vec<String>,
    pub(super) roles: Vec<String>,
}

/// The [`Access`] of each user that has any; of one user when `only` names one.
pub(super) fn load_access(
    conn: &Connection,
    path: &FsPath,
    only: Option<i64>,
) -> Result<HashMap<i64, Access>, StoreError> {
    let db_error = |source| StoreError::Database { path: path.to_path_buf(), source };
    let mut by_user: HashMap<i64, Access> = load_patterns(conn, path, only)?
        .into_iter()
        .map(|(user, patterns)| (user, Access { patterns, ..Access::default() }))
        .collect();
    let queries = [
        "SELECT up.user_id, p.pattern FROM user_permissions up
         JOIN content_permissions p ON p.id = up.permission_id
         WHERE ?1 IS NULL OR up.user_id = ?1 ORDER BY 1, 2",
        "SELECT ur.user_id, r.name FROM user_roles ur JOIN content_roles r ON r.id = ur.role_id
         WHERE ?1 IS NULL OR ur.user_id = ?1 ORDER BY 1, 2",
    ];
    for (i, sql) in queries.into_iter().enumerate() {
        let mut query = conn.prepare_cached(sql).map_err(db_error)?;
        let rows = query
            .query_map(params![only], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(db_error)?;
        for row in rows {
            let (user, value) = row.map_err(db_error)?;
            let access = by_user.entry(user).or_default();
            if i == 0 { access.direct.push(value) } else { access.roles.push(value) }
        }
    }
    Ok(by_user)
}

#[cfg(test)]
#[path = "accounts_tests.rs"]
mod tests;
