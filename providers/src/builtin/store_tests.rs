//! Tests of the builtin store on a real SQLite file: users, rules, hashes, change counters.

use super::*;

fn rule(pattern: &str, permission: Permission) -> Rule {
    Rule { pattern: pattern.to_owned(), permission }
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&config_db_path(dir.path())).expect("opens");
    store.set_pbkdf2_iterations(password::MIN_PBKDF2_ITERATIONS).expect("fast hashes for tests");
    (dir, store)
}

#[test]
fn users_and_flags_round_trip() {
    let (_dir, store) = store();
    store.add_user("alice", AuthType::Basic, Some(b"pw"), false).expect("adds");
    store.add_user("device-1", AuthType::X509, None, true).expect("adds");
    assert!(matches!(
        store.add_user("alice", AuthType::Basic, Some(b"x"), false),
        Err(StoreError::UserExists(_))
    ));
    assert!(matches!(
        store.add_user("bob", AuthType::Basic, None, false),
        Err(StoreError::PasswordRequired(_))
    ));
    assert!(matches!(
        store.add_user("bob", AuthType::X509, Some(b"x"), false),
        Err(StoreError::X509HasNoPassword(_))
    ));

    let alice = store.user("alice").expect("reads").expect("exists");
    assert_eq!(alice.auth_type, AuthType::Basic);
    assert_eq!(alice.password_scheme(), Some(HashScheme::Pbkdf2Sha256));
    assert!(
        password::verify_password(b"pw", alice.password_hash.as_deref().expect("hash")).expect("verifies")
    );
    assert_eq!(alice.acl(), Some(vec![]), "restricted with no rules denies everything");
    assert!(!format!("{alice:?}").contains("pbkdf2"), "Debug redacts the hash");

    store.set_disabled("alice", true).expect("disables");
    store.set_unrestricted("alice", true).expect("unrestricts");
    let alice = store.user("alice").expect("reads").expect("exists");
    assert!(alice.disabled);
    assert_eq!(alice.acl(), None);

    let names: Vec<_> = store.list_users().expect("lists").into_iter().map(|u| u.username).collect();
    assert_eq!(names, ["alice", "device-1"]);

    assert!(matches!(store.set_password("device-1", b"x"), Err(StoreError::X509HasNoPassword(_))));
    store.set_auth_type("alice", AuthType::X509).expect("switches");
    assert_eq!(store.user("alice").expect("reads").expect("exists").password_hash, None);
    store.remove_user("alice").expect("removes");
    assert!(store.user("alice").expect("reads").is_none());
    assert!(matches!(store.remove_user("alice"), Err(StoreError::UnknownUser(_))));
    assert!(matches!(store.set_disabled("nobody", true), Err(StoreError::UnknownUser(_))));
}

#[test]
fn rules_keep_their_order_through_inserts_and_removals() {
    let (_dir, store) = store();
    store.add_user("u", AuthType::Basic, Some(b"pw"), false).expect("adds");
    assert_eq!(store.add_rule("u", rule("a", Permission::Read), None).expect("adds"), 0);
    assert_eq!(store.add_rule("u", rule("c", Permission::Write), None).expect("adds"), 1);
    assert_eq!(store.add_rule("u", rule("b", Permission::Deny), Some(1)).expect("inserts"), 1);
    assert_eq!(store.add_rule("u", rule("z", Permission::ReadWrite), Some(99)).expect("appends"), 3);
    store.add_rule("u", rule("a", Permission::Write), None).expect("adds");
    let patterns =
        |store: &Store| store.rules("u").expect("rules").into_iter().map(|r| r.pattern).collect::<Vec<_>>();
    assert_eq!(patterns(&store), ["a", "b", "c", "z", "a"]);
    assert_eq!(store.remove_rule_at("u", 1).expect("removes"), rule("b", Permission::Deny));
    assert_eq!(store.remove_rules_with_pattern("u", "a").expect("removes"), 2);
    assert_eq!(patterns(&store), ["c", "z"]);
    assert!(matches!(store.remove_rule_at("u", 2), Err(StoreError::NoSuchRule { count: 2, .. })));
    assert!(matches!(store.remove_rules_with_pattern("u", "a"), Err(StoreError::NoRuleWithPattern { .. })));
    assert!(matches!(
        store.add_rule("u", rule("a/#/b", Permission::Read), None),
        Err(StoreError::InvalidRule(_))
    ));
    assert!(matches!(
        store.add_rule("nobody", rule("a", Permission::Read), None),
        Err(StoreError::UnknownUser(_))
    ));
    store.remove_user("u").expect("removes");
    let conn = Connection::open(store.path()).expect("opens");
    let left: i64 = conn.query_row("SELECT count(*) FROM rules", [], |r| r.get(0)).expect("counts");
    assert_eq!(left, 0, "rules go with their user");
}

#[test]
fn usernames_table() {
    let (_dir, store) = store();
    let long = "x".repeat(MAX_USERNAME_LEN + 1);
    for bad in ["", "a\nb", "tab\there", "nul\0", long.as_str()] {
        assert!(
            matches!(
                store.add_user(bad, AuthType::X509, None, false),
                Err(StoreError::InvalidUsername { .. })
            ),
            "{bad:?}"
        );
    }
    for good in ["a", "with space", "ünï", "a/b", "+#"] {
        store.add_user(good, AuthType::X509, None, false).expect(good);
    }
}

#[test]
fn imported_hashes_are_checked() {
    let (_dir, store) = store();
    store.add_user("u", AuthType::Basic, Some(b"old"), false).expect("adds");
    let bcrypt = "$2y$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW";
    store.set_password_hash("u", bcrypt).expect("imports bcrypt");
    assert_eq!(store.user("u").expect("reads").expect("exists").password_scheme(), Some(HashScheme::Bcrypt));
    assert!(matches!(store.set_password_hash("u", "plain"), Err(StoreError::Password(_))));
}

#[test]
fn schema_versions_are_checked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config_db_path(dir.path());
    drop(Store::open(&path).expect("creates"));
    let conn = Connection::open(&path).expect("opens");
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).expect("reads");
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).expect("reads");
    assert_eq!(mode, "wal");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("bumps");
    drop(conn);
    let error = Store::open(&path).expect_err("refuses a newer schema");
    assert!(matches!(error, StoreError::SchemaTooNew { found: 4, supported: 3, .. }), "{error:?}");
    assert!(error.to_string().contains("newer than this mesgd understands"), "{error}");
}

#[test]
fn a_version_1_file_is_migrated_and_keeps_its_users() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config_db_path(dir.path());
    let conn = Connection::open(&path).expect("creates");
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT NOT NULL UNIQUE, password_hash TEXT,
            auth_type TEXT NOT NULL, disabled INTEGER NOT NULL DEFAULT 0, unrestricted INTEGER NOT NULL DEFAULT 0);
         CREATE TABLE rules (user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            position INTEGER NOT NULL, pattern TEXT NOT NULL, permission TEXT NOT NULL,
            PRIMARY KEY (user_id, position));
         CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO users (username, auth_type) VALUES ('device', 'x509');
         PRAGMA user_version = 1;",
    )
    .expect("writes a version 1 file");
    drop(conn);
    let store = Store::open(&path).expect("migrates");
    assert_eq!(store.user("device").expect("reads").map(|u| u.auth_type), Some(AuthType::X509));
    assert_eq!(store.admin_count().expect("the admins table exists"), 0);
    assert_eq!(store.roles().expect("the roles table exists"), vec![]);
    let version: i64 =
        Connection::open(&path).unwrap().pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[cfg(unix)]
#[test]
fn a_new_database_is_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("sub").join(CONFIG_DB_FILE);
    drop(Store::open(&path).expect("creates parent and file"));
    let mode = std::fs::metadata(&path).expect("exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_file_that_is_not_sqlite_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CONFIG_DB_FILE);
    std::fs::write(&path, b"this is not a database, just some text that is long enough").expect("writes");
    let error = Store::open(&path).expect_err("refused");
    assert!(error.to_string().contains(&path.display().to_string()), "{error}");
}

#[test]
fn modify_user_applies_every_change_or_none() {
    let (_dir, store) = store();
    store.add_user("alice", AuthType::Basic, Some(b"pw"), false).expect("adds");
    let changes = UserChanges { disabled: Some(true), unrestricted: Some(true), ..UserChanges::default() };
    let alice = store.modify_user("alice", &changes).expect("modifies");
    assert!(alice.disabled && alice.unrestricted);
    // A password for a user that becomes x509 contradicts itself: nothing changes.
    let contradiction = UserChanges {
        password: Some(b"new".to_vec()),
        auth_type: Some(AuthType::X509),
        disabled: Some(false),
        ..UserChanges::default()
    };
    assert!(matches!(store.modify_user("alice", &contradiction), Err(StoreError::X509HasNoPassword(_))));
    let unchanged = store.user("alice").expect("reads").expect("exists");
    assert_eq!(unchanged, alice);
    let empty = UserChanges { password: Some(Vec::new()), ..UserChanges::default() };
    assert!(matches!(
        store.modify_user("alice", &empty),
        Err(StoreError::Password(password::PasswordError::Empty))
    ));
    let x509 = store
        .modify_user("alice", &UserChanges { auth_type: Some(AuthType::X509), ..UserChanges::default() })
        .expect("switches");
    assert_eq!((x509.auth_type, x509.password_hash), (AuthType::X509, None));
    assert!(matches!(store.modify_user("nobody", &changes), Err(StoreError::UnknownUser(_))));
    assert!(!format!("{contradiction:?}").contains("new"), "Debug hides the password");
}

#[test]
fn rules_move_and_replace_in_place() {
    let (_dir, store) = store();
    store.add_user("u", AuthType::Basic, Some(b"pw"), false).expect("adds");
    for p in ["a", "b", "c"] {
        store.add_rule("u", rule(p, Permission::Read), None).expect("adds");
    }
    let patterns =
        |store: &Store| store.rules("u").unwrap().into_iter().map(|r| r.pattern).collect::<Vec<_>>();
    assert_eq!(store.move_rule("u", 2, 0).expect("moves").pattern, "c");
    assert_eq!(patterns(&store), ["c", "a", "b"]);
    assert_eq!(store.move_rule("u", 0, 2).expect("moves").pattern, "c");
    assert_eq!(patterns(&store), ["a", "b", "c"]);
    assert!(matches!(store.move_rule("u", 3, 0), Err(StoreError::NoSuchRule { position: 3, count: 3, .. })));
    assert!(matches!(store.move_rule("u", 0, 3), Err(StoreError::NoSuchRule { position: 3, .. })));
    let old = store.replace_rule("u", 1, rule("x/#", Permission::Deny)).expect("replaces");
    assert_eq!(old.pattern, "b");
    assert_eq!(patterns(&store), ["a", "x/#", "c"]);
    assert!(matches!(
        store.replace_rule("u", 1, rule("a/#/b", Permission::Read)),
        Err(StoreError::InvalidRule(_))
    ));
    assert!(matches!(
        store.replace_rule("u", 9, rule("a", Permission::Read)),
        Err(StoreError::NoSuchRule { .. })
    ));
}

#[test]
fn users_come_in_pages_with_filters() {
    let (_dir, store) = store();
    for name in ["dev-2", "alice", "dev-1", "bob", "dev-3"] {
        store.add_user(name, AuthType::Basic, Some(b"pw"), false).expect("adds");
    }
    store.set_disabled("dev-3", true).expect("disables");
    let names =
        |q: UserQuery<'_>| store.users_page(&q).unwrap().into_iter().map(|u| u.username).collect::<Vec<_>>();
    assert_eq!(names(UserQuery { limit: 2, ..UserQuery::default() }), ["alice", "bob"]);
    assert_eq!(names(UserQuery { limit: 2, after: Some("bob"), ..UserQuery::default() }), ["dev-1", "dev-2"]);
    assert_eq!(
        names(UserQuery { limit: 9, prefix: Some("dev-"), ..UserQuery::default() }),
        ["dev-1", "dev-2", "dev-3"]
    );
    assert_eq!(names(UserQuery { limit: 9, disabled: Some(true), ..UserQuery::default() }), ["dev-3"]);
    assert_eq!(
        names(UserQuery { limit: 9, auth_type: Some(AuthType::X509), ..UserQuery::default() }),
        Vec::<String>::new()
    );
    // LIKE wildcards mean nothing in a prefix.
    assert_eq!(
        names(UserQuery { limit: 9, prefix: Some("%"), ..UserQuery::default() }),
        Vec::<String>::new()
    );
}
