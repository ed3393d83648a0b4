//! Builtin users as a cluster replicates them: the part of a [`UserRecord`] that travels
//! between nodes ([`ReplicatedUser`]), its wire form, and how a node writes one it received
//! into its own store ([`Replica`], [`Store::put_replicated`], [`Store::remove_replicated`]).
//!
//! What travels is what decides a login, an ACL and a grant: the authentication type, the
//! password hash, the disabled and unrestricted flags, the ordered rules, the content-routing
//! patterns assigned directly and the names of the user's roles. A role travels on its own
//! ([`ReplicatedRole`]: its name and patterns), so a change of a role is one message, not one
//! per member. A password is never sent, only its hash (PBKDF2 or bcrypt, as stored); the NATS
//! connection carrying it should be authenticated and encrypted (`[cluster]` credentials and
//! TLS).
//!
//! A user from a node that did not send patterns and roles (an older version) leaves the
//! receiving store's patterns and roles of that user as they are.
//!
//! Writing a received user is idempotent and writes nothing when the store already holds the
//! same values, so that applying a node's own change when it comes back from the cluster does
//! not move the store's `data_version` again (which would make the node publish it anew).

use std::fmt;

use mesgd_core::acl::Rule;
use rusqlite::{OptionalExtension as _, Transaction, params};
use serde::{Deserialize, Serialize};

use super::accounts::{MAX_PATTERNS, canonical_pattern, ensure_permission, validate_role_name};
use super::password;
use super::replica_write::{Expect, Replaced, Replica};
use super::store::{AuthType, Store, StoreError, UserRecord, load_user, validate_username};

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
    /// The content-routing patterns assigned directly, canonical and sorted; `None`: not sent
    /// (left as the receiving store has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patterns: Option<Vec<String>>,
    /// The names of the user's roles, sorted; `None`: not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
}

/// A content-routing role as nodes exchange it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicatedRole {
    /// The role's name.
    pub name: String,
    /// Its patterns, canonical and sorted.
    pub patterns: Vec<String>,
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
            .field("patterns", &self.patterns)
            .field("roles", &self.roles)
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
    /// Patterns or roles out of their canonical order, repeated, or too many.
    #[error("replicated account: {0}")]
    Inconsistent(String),
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
            patterns: Some(record.direct_patterns.clone()),
            roles: Some(record.roles.clone()),
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
        if let Some(patterns) = &self.patterns {
            validate_patterns(patterns)?;
        }
        if let Some(roles) = &self.roles {
            if roles.len() > MAX_PATTERNS {
                return Err(ReplicaError::Inconsistent(format!("more than {MAX_PATTERNS} roles")));
            }
            for role in roles {
                validate_role_name(role)?;
            }
            sorted_and_distinct(roles, "roles")?;
        }
        Ok(auth_type)
    }

    /// Whether `record` holds exactly these values (of those sent).
    pub fn same_as(&self, record: &UserRecord) -> bool {
        self.held_by(&ReplicatedUser::of(record))
    }
}

impl ReplicatedRole {
    /// The wire form: a JSON object.
    pub fn encode(&self) -> Vec<u8> {
        // Strings only: serialisation cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads the wire form and checks the name and every pattern as the store would.
    pub fn decode(bytes: &[u8]) -> Result<ReplicatedRole, ReplicaError> {
        let role: ReplicatedRole = serde_json::from_slice(bytes)?;
        validate_role_name(&role.name)?;
        validate_patterns(&role.patterns)?;
        Ok(role)
    }
}

/// Patterns as a replicated user or role holds them: at most [`MAX_PATTERNS`], each canonical,
/// sorted, each once.
fn validate_patterns(patterns: &[String]) -> Result<(), ReplicaError> {
    if patterns.len() > MAX_PATTERNS {
        return Err(ReplicaError::Inconsistent(format!("more than {MAX_PATTERNS} patterns")));
    }
    for pattern in patterns {
        if canonical_pattern(pattern)? != *pattern {
            return Err(ReplicaError::Inconsistent(format!(
                "pattern {:?} is not in canonical form",
                pattern.chars().take(64).collect::<String>()
            )));
        }
    }
    sorted_and_distinct(patterns, "patterns")
}

fn sorted_and_distinct(values: &[String], what: &str) -> Result<(), ReplicaError> {
    if values.windows(2).any(|w| w[0] >= w[1]) {
        return Err(ReplicaError::Inconsistent(format!("{what} not sorted, or given twice")));
    }
    Ok(())
}

impl Replica for ReplicatedUser {
    fn name(&self) -> &str {
        &self.username
    }

    fn validate(&self) -> Result<(), ReplicaError> {
        ReplicatedUser::validate(self).map(drop)
    }

    fn held_by(&self, held: &ReplicatedUser) -> bool {
        let mut held = held.clone();
        if self.patterns.is_none() {
            held.patterns = None;
        }
        if self.roles.is_none() {
            held.roles = None;
        }
        *self == held
    }

    fn load(store: &Store, tx: &Transaction<'_>, name: &str) -> Result<Option<ReplicatedUser>, StoreError> {
        Ok(load_user(tx, store.path(), name)?.map(|record| ReplicatedUser::of(&record)))
    }

    fn write(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        tx.execute(
            "INSERT INTO users (username, password_hash, auth_type, disabled, unrestricted)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (username) DO UPDATE SET password_hash = excluded.password_hash,
                auth_type = excluded.auth_type, disabled = excluded.disabled,
                unrestricted = excluded.unrestricted",
            params![self.username, self.password_hash, self.auth_type, self.disabled, self.unrestricted],
        )?;
        let id: i64 =
            tx.query_row("SELECT id FROM users WHERE username = ?1", params![self.username], |r| r.get(0))?;
        tx.execute("DELETE FROM rules WHERE user_id = ?1", params![id])?;
        let mut insert =
            tx.prepare("INSERT INTO rules (user_id, position, pattern, permission) VALUES (?1, ?2, ?3, ?4)")?;
        for (position, rule) in self.rules.iter().enumerate() {
            insert.execute(params![id, position as i64, rule.pattern, rule.permission.as_str()])?;
        }
        if let Some(patterns) = &self.patterns {
            tx.execute("DELETE FROM user_permissions WHERE user_id = ?1", params![id])?;
            for pattern in patterns {
                let permission = ensure_permission(tx, pattern)?;
                tx.execute(
                    "INSERT INTO user_permissions (user_id, permission_id) VALUES (?1, ?2)",
                    params![id, permission],
                )?;
            }
        }
        if let Some(roles) = &self.roles {
            tx.execute("DELETE FROM user_roles WHERE user_id = ?1", params![id])?;
            for role in roles {
                // A role the store does not have yet arrives on its own, after or before.
                let role_id = ensure_role(tx, role)?;
                tx.execute(
                    "INSERT INTO user_roles (user_id, role_id) VALUES (?1, ?2)",
                    params![id, role_id],
                )?;
            }
        }
        Ok(())
    }

    fn delete(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
        // Its rules, permissions and role assignments go with it (foreign keys).
        tx.execute("DELETE FROM users WHERE username = ?1", params![name]).map(drop)
    }
}

impl Replica for ReplicatedRole {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self) -> Result<(), ReplicaError> {
        validate_role_name(&self.name)?;
        validate_patterns(&self.patterns)
    }

    /// A user naming a role the store lacks makes it, empty; its own message follows.
    fn is_placeholder(&self) -> bool {
        self.patterns.is_empty()
    }

    fn load(store: &Store, tx: &Transaction<'_>, name: &str) -> Result<Option<ReplicatedRole>, StoreError> {
        let db = |e| store.db(e);
        let id: Option<i64> = tx
            .query_row("SELECT id FROM content_roles WHERE name = ?1", params![name], |r| r.get(0))
            .optional()
            .map_err(db)?;
        let Some(id) = id else { return Ok(None) };
        let mut query = tx
            .prepare_cached(
                "SELECT p.pattern FROM role_permissions rp
                 JOIN content_permissions p ON p.id = rp.permission_id
                 WHERE rp.role_id = ?1 ORDER BY p.pattern",
            )
            .map_err(db)?;
        let patterns = query.query_map(params![id], |r| r.get(0)).map_err(db)?;
        let patterns = patterns.collect::<rusqlite::Result<Vec<String>>>().map_err(db)?;
        Ok(Some(ReplicatedRole { name: name.to_owned(), patterns }))
    }

    /// Its members keep it.
    fn write(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let role_id = ensure_role(tx, &self.name)?;
        tx.execute("DELETE FROM role_permissions WHERE role_id = ?1", params![role_id])?;
        for pattern in &self.patterns {
            let permission = ensure_permission(tx, pattern)?;
            tx.execute(
                "INSERT INTO role_permissions (role_id, permission_id) VALUES (?1, ?2)",
                params![role_id, permission],
            )?;
        }
        Ok(())
    }

    /// Its assignments go with it.
    fn delete(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
        tx.execute("DELETE FROM content_roles WHERE name = ?1", params![name]).map(drop)
    }
}

impl Store {
    /// Makes the store's user `user.username` exactly `user` (adding it if missing), in one
    /// transaction; its content-routing permissions and roles are left as they are when `user`
    /// does not carry them. Returns whether anything changed: nothing is written when the
    /// store holds the same values.
    pub fn put_replicated(&self, user: &ReplicatedUser) -> Result<bool, ReplicaError> {
        Ok(self.replace_replicated(&user.username, Expect::Anything, Some(user))? == Replaced::Written)
    }

    /// The role `name` as it travels, if the store has it.
    pub fn replicated_role(&self, name: &str) -> Result<Option<ReplicatedRole>, StoreError> {
        Ok(self.replicated_roles()?.remove(name))
    }

    /// Every role as it travels, by name.
    pub fn replicated_roles(&self) -> Result<std::collections::HashMap<String, ReplicatedRole>, StoreError> {
        Ok(self
            .roles()?
            .into_iter()
            .map(|r| (r.name.clone(), ReplicatedRole { name: r.name, patterns: r.patterns }))
            .collect())
    }

    /// Makes the store's role `role.name` exactly `role` (adding it if missing), in one
    /// transaction; its members keep it. Whether anything changed.
    pub fn put_replicated_role(&self, role: &ReplicatedRole) -> Result<bool, ReplicaError> {
        Ok(self.replace_replicated(&role.name, Expect::Anything, Some(role))? == Replaced::Written)
    }

    /// Removes the role `name` (and its assignments) if the store has it; whether it was there.
    pub fn remove_replicated_role(&self, name: &str) -> Result<bool, ReplicaError> {
        let removed = self.replace_replicated::<ReplicatedRole>(name, Expect::Anything, None)?;
        Ok(removed == Replaced::Written)
    }

    /// Removes `username` if the store has it (its connections are closed); returns whether
    /// it was there.
    pub fn remove_replicated(&self, username: &str) -> Result<bool, ReplicaError> {
        let removed = self.replace_replicated::<ReplicatedUser>(username, Expect::Anything, None)?;
        Ok(removed == Replaced::Written)
    }
}

fn ensure_role(tx: &rusqlite::Transaction<'_>, name: &str) -> rusqlite::Result<i64> {
    tx.execute("INSERT INTO content_roles (name) VALUES (?1) ON CONFLICT DO NOTHING", params![name])?;
    tx.query_row("SELECT id FROM content_roles WHERE name = ?1", params![name], |r| r.get(0))
}

/// The body of the `cluster_users` fuzz target (`fuzz/fuzz_targets/cluster_users.rs`), here
/// so that a unit test replays its committed seeds on a stable compiler: any bytes from the
/// users stream, read as a user, a role, an administrator or an API token, either are refused
/// or decode to a record that encodes back to itself.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    use super::super::admin_replica::{ReplicatedAdmin, ReplicatedApiToken};
    use super::{ReplicatedRole, ReplicatedUser};

    /// Panics on a bug, returns on any input otherwise.
    pub fn replicated_user(data: &[u8]) {
        if let Ok(user) = ReplicatedUser::decode(data) {
            let again = ReplicatedUser::decode(&user.encode()).expect("an encoded user decodes");
            assert_eq!(again, user, "the wire form round-trips");
        }
        if let Ok(role) = ReplicatedRole::decode(data) {
            assert_eq!(ReplicatedRole::decode(&role.encode()).expect("an encoded role decodes"), role);
        }
        if let Ok(admin) = ReplicatedAdmin::decode(data) {
            assert!(ReplicatedAdmin::decode(&admin.encode()).expect("an encoded admin decodes") == admin);
        }
        if let Ok(token) = ReplicatedApiToken::decode(data) {
            assert!(ReplicatedApiToken::decode(&token.encode()).expect("an encoded token decodes") == token);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use mesgd_core::acl::Permission;

    use super::*;

    /// A store in a fresh directory, with cheap password hashing.
    pub(in crate::builtin) fn store() -> (tempfile::TempDir, Store) {
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
    fn patterns_and_roles_travel_with_the_user_and_a_role_on_its_own() {
        let (_a_dir, a) = store();
        let (_b_dir, b) = store();
        a.add_user("ann", AuthType::Basic, Some(b"secret"), false).unwrap();
        a.add_role("ops").unwrap();
        a.role_add_pattern("ops", "/site=1").unwrap();
        a.assign_role("ann", "ops").unwrap();
        a.assign_pattern("ann", "/b=2/a=1").unwrap();

        // The user first: its role is made empty, and filled when the role arrives.
        let user =
            ReplicatedUser::decode(&ReplicatedUser::of(&a.user("ann").unwrap().unwrap()).encode()).unwrap();
        assert_eq!(user.patterns.as_deref(), Some(&["/a=1/b=2".to_owned()][..]));
        assert!(b.put_replicated(&user).unwrap());
        assert_eq!(b.user("ann").unwrap().unwrap().patterns, vec!["/a=1/b=2".to_owned()]);
        let role = ReplicatedRole::decode(&a.replicated_role("ops").unwrap().unwrap().encode()).unwrap();
        assert!(b.put_replicated_role(&role).unwrap());
        assert!(!b.put_replicated_role(&role).unwrap(), "the same role is not written again");
        let copy = b.user("ann").unwrap().unwrap();
        assert_eq!(copy.patterns, a.user("ann").unwrap().unwrap().patterns);
        assert_eq!(copy.roles, vec!["ops".to_owned()]);
        assert!(user.same_as(&copy));

        // A user without patterns and roles (an older node) leaves them as they are.
        let mut older = user;
        older.patterns = None;
        older.roles = None;
        older.disabled = true;
        assert!(b.put_replicated(&older).unwrap());
        let copy = b.user("ann").unwrap().unwrap();
        assert!(copy.disabled);
        assert_eq!(copy.roles, vec!["ops".to_owned()]);

        // Removing the role takes it from its members.
        assert!(b.remove_replicated_role("ops").unwrap());
        assert!(!b.remove_replicated_role("ops").unwrap());
        assert_eq!(b.user("ann").unwrap().unwrap().patterns, vec!["/a=1/b=2".to_owned()]);
        for bad in
            [r#"{"name":"ops","patterns":["/b=1/a=2"]}"#, r#"{"name":"","patterns":[]}"#, r#"{"name":"ops"}"#]
        {
            assert!(ReplicatedRole::decode(bad.as_bytes()).is_err(), "{bad}");
        }
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
            &good.replace(r#""rules":[]"#, r#""rules":[],"patterns":["/b=2/a=1"]"#),
            &good.replace(r#""rules":[]"#, r#""rules":[],"patterns":["/b=2","/a=1"]"#),
            &good.replace(r#""rules":[]"#, r#""rules":[],"patterns":["/a=1","/a=1"]"#),
            &good.replace(r#""rules":[]"#, r#""rules":[],"patterns":["a=b=c"]"#),
            &good.replace(r#""rules":[]"#, r#""rules":[],"roles":["ops","dev"]"#),
            &good.replace(r#""rules":[]"#, r#""rules":[],"roles":["has space"]"#),
            &good.replace(r#""rules":[]"#, r#""rules":[],"roles":[""]"#),
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
