//! Administrators and API tokens as a cluster replicates them between nodes' stores
//! ([`ReplicatedAdmin`], [`ReplicatedApiToken`]): an administrator made on one node logs in to
//! the console and the REST API of every node, a token made on one works on all, and a token
//! revoked or an administrator removed on one stops working on all.
//!
//! What travels is what the stores hold: an administrator's PBKDF2 password hash (never the
//! password), a token's id and the SHA-256 of its secret (never the secret, which exists only
//! in the answer that made it). Like the users' hashes, they should travel over authenticated
//! and encrypted NATS connections. Writing a received record is idempotent: nothing is written
//! when the store holds the same values.

use std::collections::HashMap;
use std::fmt;

use rusqlite::{OptionalExtension as _, Transaction, params};
use serde::{Deserialize, Serialize};

use super::admin::Scope;
use super::password;
use super::replica::ReplicaError;
use super::replica_write::{Expect, Replaced, Replica};
use super::store::{Store, StoreError, validate_username};

/// An administrator as nodes exchange it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicatedAdmin {
    /// The login name.
    pub name: String,
    /// The stored PBKDF2 hash.
    pub password_hash: String,
    /// `admin` or `read`.
    pub role: String,
    /// When it was made, unix seconds.
    pub created_at: i64,
}

/// An API token as nodes exchange it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicatedApiToken {
    /// Its unique name.
    pub name: String,
    /// The public id (16 lower-case hex digits).
    pub id: String,
    /// `admin` or `read`.
    pub scope: String,
    /// The SHA-256 of its secret, 64 lower-case hex digits.
    pub secret_sha256: String,
    /// When it was made, unix seconds.
    pub created_at: i64,
}

impl fmt::Debug for ReplicatedAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedAdmin")
            .field("name", &self.name)
            .field("password_hash", &"<redacted>")
            .field("role", &self.role)
            .field("created_at", &self.created_at)
            .finish()
    }
}

impl fmt::Debug for ReplicatedApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedApiToken")
            .field("name", &self.name)
            .field("id", &self.id)
            .field("scope", &self.scope)
            .field("secret_sha256", &"<redacted>")
            .field("created_at", &self.created_at)
            .finish()
    }
}

fn lower_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn scope(text: &str, what: &str) -> Result<Scope, ReplicaError> {
    text.parse().map_err(|e: String| ReplicaError::Inconsistent(format!("{what}: {e}")))
}

impl ReplicatedAdmin {
    /// The wire form: a JSON object.
    pub fn encode(&self) -> Vec<u8> {
        // Strings and an integer: serialisation cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads the wire form and checks every field as the store would.
    pub fn decode(bytes: &[u8]) -> Result<ReplicatedAdmin, ReplicaError> {
        let admin: ReplicatedAdmin = serde_json::from_slice(bytes)?;
        admin.validate()?;
        Ok(admin)
    }

    /// Every field as the store would take it.
    fn validate(&self) -> Result<(), ReplicaError> {
        validate_username(&self.name)?;
        password::hash_scheme(&self.password_hash).map_err(StoreError::from)?;
        scope(&self.role, "administrator role").map(drop)
    }
}

impl ReplicatedApiToken {
    /// The wire form: a JSON object.
    pub fn encode(&self) -> Vec<u8> {
        // Strings and an integer: serialisation cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads the wire form and checks every field as the store would.
    pub fn decode(bytes: &[u8]) -> Result<ReplicatedApiToken, ReplicaError> {
        let token: ReplicatedApiToken = serde_json::from_slice(bytes)?;
        token.validate()?;
        Ok(token)
    }

    /// Every field as the store would take it.
    fn validate(&self) -> Result<(), ReplicaError> {
        validate_username(&self.name)?;
        scope(&self.scope, "API token scope")?;
        if !lower_hex(&self.id, 16) || !lower_hex(&self.secret_sha256, 64) {
            return Err(ReplicaError::Inconsistent(
                "an API token's id is not 16, or its digest not 64, lower-case hex digits".into(),
            ));
        }
        Ok(())
    }
}

const SELECT_ADMINS: &str = "SELECT name, password_hash, role, created_at FROM admins";
const SELECT_TOKENS: &str = "SELECT name, id, scope, secret_sha256, created_at FROM admin_tokens";

/// A row of [`SELECT_ADMINS`].
fn admin_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ReplicatedAdmin> {
    Ok(ReplicatedAdmin { name: r.get(0)?, password_hash: r.get(1)?, role: r.get(2)?, created_at: r.get(3)? })
}

/// A row of [`SELECT_TOKENS`].
fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ReplicatedApiToken> {
    Ok(ReplicatedApiToken {
        name: r.get(0)?,
        id: r.get(1)?,
        scope: r.get(2)?,
        secret_sha256: r.get(3)?,
        created_at: r.get(4)?,
    })
}

impl Store {
    /// Every administrator as it travels, by name.
    pub fn replicated_admins(&self) -> Result<HashMap<String, ReplicatedAdmin>, StoreError> {
        let conn = self.lock();
        let db = |e| self.db(e);
        let mut q = conn.prepare_cached(SELECT_ADMINS).map_err(db)?;
        let rows = q.query_map([], admin_row).map_err(db)?;
        rows.map(|row| row.map(|a| (a.name.clone(), a)).map_err(db)).collect()
    }

    /// Makes the store's administrator `admin.name` exactly `admin`; whether anything changed.
    pub fn put_replicated_admin(&self, admin: &ReplicatedAdmin) -> Result<bool, ReplicaError> {
        Ok(self.replace_replicated(&admin.name, Expect::Anything, Some(admin))? == Replaced::Written)
    }

    /// Removes the administrator `name` if the store has it; whether it was there.
    pub fn remove_replicated_admin(&self, name: &str) -> Result<bool, ReplicaError> {
        let removed = self.replace_replicated::<ReplicatedAdmin>(name, Expect::Anything, None)?;
        Ok(removed == Replaced::Written)
    }

    /// Every API token as it travels, by name.
    pub fn replicated_api_tokens(&self) -> Result<HashMap<String, ReplicatedApiToken>, StoreError> {
        let conn = self.lock();
        let db = |e| self.db(e);
        let mut q = conn.prepare_cached(SELECT_TOKENS).map_err(db)?;
        let rows = q.query_map([], token_row).map_err(db)?;
        rows.map(|row| row.map(|t| (t.name.clone(), t)).map_err(db)).collect()
    }

    /// Makes the store's API token `token.name` exactly `token` (a token of another name with
    /// the same id is replaced); whether anything changed.
    pub fn put_replicated_api_token(&self, token: &ReplicatedApiToken) -> Result<bool, ReplicaError> {
        Ok(self.replace_replicated(&token.name, Expect::Anything, Some(token))? == Replaced::Written)
    }

    /// Removes the API token `name` if the store has it; whether it was there.
    pub fn remove_replicated_api_token(&self, name: &str) -> Result<bool, ReplicaError> {
        let removed = self.replace_replicated::<ReplicatedApiToken>(name, Expect::Anything, None)?;
        Ok(removed == Replaced::Written)
    }
}

impl Replica for ReplicatedAdmin {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self) -> Result<(), ReplicaError> {
        ReplicatedAdmin::validate(self)
    }

    fn load(store: &Store, tx: &Transaction<'_>, name: &str) -> Result<Option<ReplicatedAdmin>, StoreError> {
        tx.query_row(&format!("{SELECT_ADMINS} WHERE name = ?1"), params![name], admin_row)
            .optional()
            .map_err(|e| store.db(e))
    }

    fn write(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        tx.execute(
            "INSERT INTO admins (name, password_hash, role, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (name) DO UPDATE SET password_hash = excluded.password_hash,
                role = excluded.role, created_at = excluded.created_at",
            params![self.name, self.password_hash, self.role, self.created_at],
        )
        .map(drop)
    }

    fn delete(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
        tx.execute("DELETE FROM admins WHERE name = ?1", params![name]).map(drop)
    }
}

impl Replica for ReplicatedApiToken {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self) -> Result<(), ReplicaError> {
        ReplicatedApiToken::validate(self)
    }

    fn load(
        store: &Store,
        tx: &Transaction<'_>,
        name: &str,
    ) -> Result<Option<ReplicatedApiToken>, StoreError> {
        tx.query_row(&format!("{SELECT_TOKENS} WHERE name = ?1"), params![name], token_row)
            .optional()
            .map_err(|e| store.db(e))
    }

    /// A token of another name with the same id is replaced.
    fn write(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        tx.execute("DELETE FROM admin_tokens WHERE name = ?1 OR id = ?2", params![self.name, self.id])?;
        tx.execute(
            "INSERT INTO admin_tokens (id, name, scope, secret_sha256, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![self.id, self.name, self.scope, self.secret_sha256, self.created_at],
        )
        .map(drop)
    }

    fn delete(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
        tx.execute("DELETE FROM admin_tokens WHERE name = ?1", params![name]).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::super::replica::tests::store;
    use super::*;

    #[test]
    fn administrators_and_tokens_travel_and_work_on_the_other_store() {
        let (_a_dir, a) = store();
        let (_b_dir, b) = store();
        a.add_admin("root", b"a long admin password", Scope::Admin).unwrap();
        let made = a.create_token("ci", Scope::Read).unwrap();
        let admin = ReplicatedAdmin::decode(&a.replicated_admins().unwrap()["root"].encode()).unwrap();
        let token = ReplicatedApiToken::decode(&a.replicated_api_tokens().unwrap()["ci"].encode()).unwrap();
        assert!(b.put_replicated_admin(&admin).unwrap());
        assert!(!b.put_replicated_admin(&admin).unwrap(), "the same values are not written again");
        assert!(b.put_replicated_api_token(&token).unwrap());
        assert!(!b.put_replicated_api_token(&token).unwrap());
        assert!(b.verify_admin("root", b"a long admin password").unwrap().is_some());
        assert_eq!(b.verify_token(&made.token).unwrap().unwrap().scope, Scope::Read);
        assert!(!format!("{admin:?}{token:?}").contains(&admin.password_hash));
        assert!(!format!("{token:?}").contains(&token.secret_sha256));

        assert!(b.remove_replicated_api_token("ci").unwrap());
        assert!(b.verify_token(&made.token).unwrap().is_none(), "revoked");
        assert!(b.remove_replicated_admin("root").unwrap());
        assert!(!b.remove_replicated_admin("root").unwrap());
        assert!(b.verify_admin("root", b"a long admin password").unwrap().is_none());
    }

    #[test]
    fn malformed_administrators_and_tokens_are_refused() {
        let (_dir, a) = store();
        a.add_admin("root", b"a long admin password", Scope::Admin).unwrap();
        a.create_token("ci", Scope::Read).unwrap();
        let admin = String::from_utf8(a.replicated_admins().unwrap()["root"].encode()).unwrap();
        let token = String::from_utf8(a.replicated_api_tokens().unwrap()["ci"].encode()).unwrap();
        let id =
            serde_json::from_str::<serde_json::Value>(&token).unwrap()["id"].as_str().unwrap().to_owned();
        for bad in [
            String::new(),
            "{}".into(),
            admin.replace("\"root\"", "\"\""),
            admin.replace("\"admin\"", "\"god\""),
            admin.replace("$pbkdf2", "$nope"),
            admin.replace("\"name\"", "\"extra\":1,\"name\""),
        ] {
            assert!(ReplicatedAdmin::decode(bad.as_bytes()).is_err(), "{bad}");
        }
        for bad in [
            String::new(),
            token.replace("\"read\"", "\"write\""),
            token.replace(&id, "0123"),
            token.replace(&id, &id.to_uppercase()),
            token.replace("\"ci\"", "\"a\\u0000b\""),
        ] {
            assert!(ReplicatedApiToken::decode(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
