//! Tests of accounts' message access on a real SQLite file.

use super::*;
use crate::builtin::store::{AuthType, config_db_path};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&config_db_path(dir.path())).expect("opens");
    store.set_pbkdf2_iterations(crate::builtin::password::MIN_PBKDF2_ITERATIONS).expect("fast hashes");
    store.add_user("alice", AuthType::Basic, Some(b"pw"), false).expect("adds");
    store.add_user("bob", AuthType::Basic, Some(b"pw"), false).expect("adds");
    (dir, store)
}

#[test]
fn patterns_are_assigned_canonical_and_listed_once() {
    let (_dir, s) = store();
    assert!(s.assign_pattern("alice", "/room=lobby/kind=chat").expect("assigns"));
    assert!(!s.assign_pattern("alice", "/kind=chat/room=lobby").expect("same pattern"), "canonical");
    assert!(s.assign_pattern("alice", "/room").expect("assigns"));
    assert_eq!(s.direct_patterns("alice").unwrap(), ["/kind=chat/room=lobby", "/room=*"]);
    assert_eq!(s.user("alice").unwrap().unwrap().patterns, ["/kind=chat/room=lobby", "/room=*"]);
    assert_eq!(s.user("bob").unwrap().unwrap().patterns, Vec::<String>::new());
    s.unassign_pattern("alice", "/room=*").expect("unassigns");
    assert_eq!(s.patterns("alice").unwrap(), ["/kind=chat/room=lobby"]);
    assert!(matches!(s.unassign_pattern("alice", "/room=*"), Err(StoreError::NotAssigned { .. })));
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let (_dir, s) = store();
    let cases: Vec<(Result<bool, StoreError>, &str)> = vec![
        (s.assign_pattern("alice", "/k=v*"), "invalid pattern"),
        (s.assign_pattern("alice", "/a=1/a=2"), "invalid pattern"),
        (s.assign_pattern("nobody", "/a=1"), "no user"),
        (s.assign_role("alice", "none"), "no role"),
        (s.role_add_pattern("none", "/a"), "no role"),
    ];
    for (result, words) in cases {
        let e = result.expect_err(words);
        assert!(e.to_string().contains(words), "{e} should say {words:?}");
    }
    for bad in ["", "two words", "tab\there"] {
        assert!(matches!(s.add_role(bad), Err(StoreError::InvalidRoleName { .. })), "{bad:?}");
    }
    assert!(matches!(s.add_role(&"r".repeat(129)), Err(StoreError::InvalidRoleName { .. })));
}

#[test]
fn roles_add_their_patterns_and_removals_cascade() {
    let (_dir, s) = store();
    s.add_role("chat").unwrap();
    assert!(matches!(s.add_role("chat"), Err(StoreError::RoleExists(_))));
    s.role_add_pattern("chat", "/kind=chat").unwrap();
    s.role_add_pattern("chat", "/kind=news").unwrap();
    s.assign_pattern("alice", "/kind=chat").unwrap();
    assert!(s.assign_role("alice", "chat").unwrap());
    assert_eq!(s.patterns("alice").unwrap(), ["/kind=chat", "/kind=news"], "the union, once each");
    assert_eq!(s.user_roles("alice").unwrap(), ["chat"]);
    s.role_remove_pattern("chat", "/kind=news").unwrap();
    assert_eq!(s.patterns("alice").unwrap(), ["/kind=chat"]);
    s.role_add_pattern("chat", "/kind=news").unwrap();
    s.remove_permission("/kind=chat").unwrap();
    assert_eq!(s.patterns("alice").unwrap(), ["/kind=news"], "gone from the user and the role");
    assert!(matches!(s.remove_permission("/kind=chat"), Err(StoreError::UnknownPermission(_))));
    s.unassign_role("alice", "chat").unwrap();
    assert_eq!(s.patterns("alice").unwrap(), Vec::<String>::new());
    s.assign_role("alice", "chat").unwrap();
    s.remove_role("chat").unwrap();
    assert_eq!(s.patterns("alice").unwrap(), Vec::<String>::new());
    assert_eq!(s.roles().unwrap(), vec![]);
}

#[test]
fn removing_a_user_removes_its_assignments() {
    let (_dir, s) = store();
    s.assign_pattern("alice", "/a").unwrap();
    s.remove_user("alice").unwrap();
    s.add_user("alice", AuthType::Basic, Some(b"pw"), false).unwrap();
    assert_eq!(s.patterns("alice").unwrap(), Vec::<String>::new(), "a new account starts empty");
}

#[test]
fn an_account_holds_at_most_max_patterns() {
    let (_dir, s) = store();
    for i in 0..MAX_PATTERNS {
        s.assign_pattern("alice", &format!("/n={i}")).unwrap();
    }
    assert!(matches!(s.assign_pattern("alice", "/n=x"), Err(StoreError::TooManyPatterns { .. })));
    s.add_role("more").unwrap();
    s.role_add_pattern("more", "/n=y").unwrap();
    assert!(matches!(s.assign_role("alice", "more"), Err(StoreError::TooManyPatterns { .. })));
    assert_eq!(s.patterns("alice").unwrap().len(), MAX_PATTERNS, "the refused changes rolled back");
}

#[test]
fn revoked_sessions_are_kept_until_their_expiry() {
    let (_dir, s) = store();
    s.revoke_session("a", 100).unwrap();
    s.revoke_session("b", 200).unwrap();
    assert_eq!(s.revoked_sessions(150).unwrap(), [("b".to_owned(), 200)]);
    assert_eq!(s.prune_revoked_sessions(150).unwrap(), 1);
    assert_eq!(s.revoked_sessions(0).unwrap().len(), 1);
}

#[test]
fn a_setting_is_made_once() {
    let (_dir, s) = store();
    assert_eq!(s.setting("k").unwrap(), None);
    assert_eq!(s.setting_or_insert("k", || "one".into()).unwrap(), "one");
    assert_eq!(s.setting_or_insert("k", || "two".into()).unwrap(), "one");
}
