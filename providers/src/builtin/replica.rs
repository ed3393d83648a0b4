//! Builtin users as a cluster replicates them: the part of a [`UserRecord`] that travels
//! between nodes ([`ReplicatedUser`]), its wire form, and how a node writes one it received
//! into its own store ([`Store::put_replicated`], [`Store::remove_replicated`]).
//!
//! What travels is what decides a login and an ACL: the authentication type, the password
//! hash, the disabled and unrestricted flags and the ordered rules. A password is never sent,
//! only its hash (PBKDF2 or bcrypt, as stored); the NATS connection carrying it should be
//! authenticated and encrypted (`[cluster]` credentials and TLS). Content-routing permissions
//! and roles are not part of it: they stay with the node's store.
//!
//! Writing a received user is idempotent and writes nothing when the store already holds the
//! same values, so that applying a node's own change when it comes back from the cluster does
//! not move the store's `data_version` again (which would make the node publish it anew).

use std::fmt;

use mesgd_core::acl::Rule;
use rusqlite::{OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::password;
use super::store::{AuthType, Store, StoreError, UserRecord, validate_username};

/// A user as nodes exchange it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicatedUser {
    /// The username.
    pub username: String,
    /// `basic` or `x509`.
    pub auth_type: String,
    /// The stored password hash (never a password).
    pub password_hash: Option<String>,
    /// Refused at login, and its connections closed.
    pub disabled: bool,
    /// No ACL at all (its rules are kept, unused).
    pub unrestricted: bool,
    /// The ordered ACL rules.
    pub rules: Vec<Rule>,
}

impl fmt::Debug for ReplicatedUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedUser")
            .field("username", &self.username)
            .field("auth_type", &self.auth_type)
            .field("password_hash", &self.password_hash.as_ref().map(|_| "<redacted>"))
            .field("disabled", &self.disabled)
            .field("unrestricted", &self.unrestricted)
            .field("rules", &self.rules)
            .finish()
    }
}

/// Why a replicated user cannot be read or stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaError {
    /// The bytes are not a replicated user.
    #[error("not a replicated user: {0}")]
    Decode(#[from] serde_json::Error),
    /// The authentication type is neither `basic` nor `x509`.
    #[error("replicated user {user:?}: unknown auth_type {found:?}")]
    UnknownAuthType {
        /// The user.
        user: String,
        /// The type given.
        found: String,
    },
    /// The user is not one this store accepts (its name, hash or a rule), or the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ReplicatedUser {
    /// What of `record` travels.
    pub fn of(record: &UserRecord) -> ReplicatedUser {
        ReplicatedUser {
            username: record.username.clone(),
            auth_type: record.auth_type.as_str().to_owned(),
            password_hash: record.password_hash.clone(),
            disabled: record.disabled,
            unrestricted: record.unrestricted,
            rules: record.rules.clone(),
        }
    }

    /// The wire form: a JSON object.
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings, booleans and rules always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads the wire form and checks every field as the store would at an edit.
    pub fn decode(bytes: &[u8]) -> Result<ReplicatedUser, ReplicaError> {
        let user: ReplicatedUser = serde_json::from_slice(bytes)?;
        user.validate()?;
        Ok(user)
    }

    fn validate(&self) -> Result<AuthType, ReplicaError> {
        validate_username(&self.username)?;
        let auth_type: AuthType = self.auth_type.parse().map_err(|_| ReplicaError::UnknownAuthType {
            user: self.username.clone(),
            found: self.auth_type.chars().take(32).collect(),
        })?;
        if let Some(hash) = &self.password_hash {
            if auth_type == AuthType::X509 {
                return Err(StoreError::X509HasNoPassword(self.username.clone()).into());
            }
            password::hash_scheme(hash).map_err(StoreError::from)?;
        }
        for rule in &self.rules {
            rule.validate().map_err(StoreError::from)?;
        }
        Ok(auth_type)
    }

    /// Whether `record` holds exactly these values.
    pub fn same_as(&self, record: &UserRecord) -> bool {
        *self == ReplicatedUser::of(record)
    }
}

impl Store {
    /// Makes the store's user `user.username` exactly `user` (adding it if missing), in one
    /// transaction; its content-routing permissions and roles are left as they are. Returns
    /// whether anything changed: nothing is written when the store holds the same values.
    pub fn put_replicated(&self, user: &ReplicatedUser) -> Result<bool, ReplicaError> {
        let auth_type = user.validate()?;
        if self.user(&user.username)?.is_some_and(|current| user.same_as(&current)) {
            return Ok(false);
        }
        self.write(|tx| {
            tx.execute(
                "INSERT INTO users (username, password_hash, auth_type, disabled, unrestricted)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (username) DO UPDATE SET password_hash = excluded.password_hash,
                    auth_type = excluded.auth_type, disabled = excluded.disabled,
                    unrestricted = excluded.unrestricted",
                params![
                    user.username,
                    user.password_hash,
                    auth_type.as_str(),
                    user.disabled,
                    user.unrestricted
                ],
            )?;
            let id: i64 =
                tx.query_row("SELECT id FROM users WHERE username = ?1", params![user.username], |r| {
                    r.get(0)
                })?;
            tx.execute("DELETE FROM rules WHERE user_id = ?1", params![id])?;
            let mut insert = tx.prepare(
                "INSERT INTO rules (user_id, position, pattern, permission) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (position, rule) in user.rules.iter().enumerate() {
                insert.execute(params![id, position as i64, rule.pattern, rule.permission.as_str()])?;
            }
            Ok(())
        })?;
        Ok(true)
    }

    /// Removes `username` if the store has it (its connections are closed); returns whether
    /// it was there.
    pub fn remove_replicated(&self, username: &str) -> Result<bool, StoreError> {
        let present = self.write(|tx| {
            let id: Option<i64> = tx
                .query_row("SELECT id FROM users WHERE username = ?1", params![username], |r| r.get(0))
                .optional()?;
            if let Some(id) = id {
                tx.execute("DELETE FROM users WHERE id = ?1", params![id])?;
            }
            Ok(id.is_some())
        })?;
        Ok(present)
    }
}

/// The body of the `cluster_users` fuzz target (`fuzz/fuzz_targets/cluster_users.rs`), here
/// so that a unit test replays its committed seeds on a stable compiler: any bytes from the
/// users stream either are refused or decode to a user that encodes back to itself.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    use super::ReplicatedUser;

    /// Panics on a bug, returns on any input otherwise.
    pub fn replicated_user(data: &[u8]) {
        if let Ok(user) = ReplicatedUser::decode(data) {
            let again = ReplicatedUser::decode(&user.encode()).expect("an encoded user decodes");
            assert_eq!(again, user, "the wire form round-trips");
        }
    }
}

#[cfg(test)]
mod tests {
    use mesgd_core::acl::Permission;

    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("config.db")).unwrap();
        store.set_pbkdf2_iterations(1000).unwrap();
        (dir, store)
    }

    #[test]
    fn a_user_travels_and_is_written_once() {
        let (_a_dir, a) = store();
        let (_b_dir, b) = store();
        a.add_user("ann", AuthType::Basic, Some(b"secret"), false).unwrap();
        a.add_rule("ann", Rule::new("devices/%u/#", Permission::ReadWrite), None).unwrap();
        let sent = ReplicatedUser::of(&a.user("ann").unwrap().unwrap());
        let received = ReplicatedUser::decode(&sent.encode()).unwrap();
        assert_eq!(received, sent);
        assert!(b.put_replicated(&received).unwrap(), "a new user is written");
        assert!(!b.put_replicated(&received).unwrap(), "the same values are not written again");
        let copy = b.user("ann").unwrap().unwrap();
        assert!(received.same_as(&copy));
        assert_eq!(copy.rules, vec![Rule::new("devices/%u/#", Permission::ReadWrite)]);

        // A change replaces the rules and flags; removal removes.
        let mut changed = received;
        changed.disabled = true;
        changed.rules = vec![Rule::new("a/#", Permission::Read), Rule::new("#", Permission::Deny)];
        assert!(b.put_replicated(&changed).unwrap());
        assert!(changed.same_as(&b.user("ann").unwrap().unwrap()));
        assert!(b.remove_replicated("ann").unwrap());
        assert!(!b.remove_replicated("ann").unwrap());
        assert!(b.user("ann").unwrap().is_none());
    }

    #[test]
    fn malformed_replicated_users_are_refused() {
        let good = r#"{"username":"u","auth_type":"basic","password_hash":null,"disabled":false,"unrestricted":false,"rules":[]}"#;
        assert!(ReplicatedUser::decode(good.as_bytes()).is_ok());
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"username":"u","auth_type":"basic","password_hash":null,"disabled":false,"unrestricted":false}"#,
            &good.replace(r#""rules":[]"#, r#""rules":[],"extra":1"#),
            &good.replace(r#""username":"u""#, r#""username":"""#),
            &good.replace(r#""username":"u""#, r#""username":"a\u0000b""#),
            &good.replace("basic", "kerberos"),
            &good.replace("null", r#""not a hash""#),
            &good.replace(r#""auth_type":"basic","password_hash":null"#, r#""auth_type":"x509","password_hash":"$2b$04$abcdefghijklmnopqrstuu5Vq0iZpdUVbFKRgJTMCEbD0x2k7iDHS""#),
            &good.replace(r#""rules":[]"#, r#""rules":[{"pattern":"a/#/b","permission":"read"}]"#),
            &good.replace(r#""rules":[]"#, r#""rules":[{"pattern":"a","permission":"fly"}]"#),
        ] {
            assert!(ReplicatedUser::decode(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_users_corpus() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cluster_users");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let file = entry.unwrap().path();
            let data = std::fs::read(&file).unwrap();
            if let Err(panic) = std::panic::catch_unwind(|| super::fuzzing::replicated_user(&data)) {
                eprintln!("seed {} fails", file.display());
                std::panic::resume_unwind(panic);
            }
            count += 1;
        }
        assert!(count >= 4, "only {count} seeds in {}", dir.display());
    }

    #[test]
    fn debug_output_hides_the_hash() {
        let (_dir, a) = store();
        a.add_user("ann", AuthType::Basic, Some(b"secret"), false).unwrap();
        let user = ReplicatedUser::of(&a.user("ann").unwrap().unwrap());
        let hash = user.password_hash.clone().unwrap();
        assert!(!format!("{user:?}").contains(&hash));
    }
}
