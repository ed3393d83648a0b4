//! Tests of login sessions over a real store.

use super::*;

fn sessions() -> (tempfile::TempDir, Sessions) {
    let dir = tempfile::tempdir().expect("temp dir");
    let directory =
        Arc::new(UserDirectory::open(&crate::builtin::config_db_path(dir.path())).expect("opens"));
    let sessions = Sessions::open(directory, SystemTime::now()).expect("sessions");
    (dir, sessions)
}

fn b64(s: &str) -> String {
    URL_SAFE_NO_PAD.encode(s)
}

#[test]
fn a_session_verifies_until_its_expiry_and_lasts_the_ttl() {
    let (_dir, s) = sessions();
    let now = SystemTime::now();
    let (token, claims) = s.issue("alice", now, DEFAULT_TTL).unwrap();
    assert_eq!(claims.exp - claims.iat, 86_400);
    assert_eq!(token.split('.').count(), 3);
    assert_eq!(s.verify(&token, now).unwrap(), claims);
    let at_exp = UNIX_EPOCH + Duration::from_secs(claims.exp);
    assert!(matches!(s.verify(&token, at_exp), Err(SessionError::Expired { .. })));
    assert!(s.verify(&token, at_exp - Duration::from_secs(1)).is_ok());
}

#[test]
fn logout_revokes_until_expiry_and_survives_a_reopen() {
    let (dir, s) = sessions();
    let now = SystemTime::now();
    let (token, claims) = s.issue("alice", now, DEFAULT_TTL).unwrap();
    let (other, _) = s.issue("alice", now, DEFAULT_TTL).unwrap();
    s.revoke(&claims, now).unwrap();
    assert!(matches!(s.verify(&token, now), Err(SessionError::Revoked)));
    assert!(s.verify(&other, now).is_ok(), "only that session ends");
    drop(s);
    let directory = Arc::new(UserDirectory::open(&crate::builtin::config_db_path(dir.path())).unwrap());
    let again = Sessions::open(directory, now).unwrap();
    assert!(matches!(again.verify(&token, now), Err(SessionError::Revoked)), "same key, still revoked");
    assert!(again.verify(&other, now).is_ok(), "the key is kept in the store");
    // Once the session has expired, its entry is pruned at the next logout.
    let later = UNIX_EPOCH + Duration::from_secs(claims.exp);
    let (_, fresh) = again.issue("bob", later, DEFAULT_TTL).unwrap();
    again.revoke(&fresh, later).unwrap();
    assert_eq!(again.revoked_count(), 1);
}

#[test]
fn malformed_tokens_are_refused_with_the_reason() {
    let (_dir, s) = sessions();
    let now = SystemTime::now();
    let (good, _) = s.issue("alice", now, DEFAULT_TTL).unwrap();
    let parts: Vec<&str> = good.split('.').collect();
    let claims = r#"{"sub":"alice","iat":1,"exp":99999999999,"jti":"x"}"#;
    let none_alg = format!("{}.{}.", b64(r#"{"alg":"none","typ":"JWT"}"#), b64(claims));
    let hs384 = format!("{}.{}.{}", b64(r#"{"alg":"HS384","typ":"JWT"}"#), parts[1], parts[2]);
    let tampered = format!("{}.{}.{}", parts[0], b64(claims), parts[2]);
    let extra = r#"{"sub":"alice","iat":1,"exp":99999999999,"jti":"x","admin":true}"#;
    let extra = format!("{}.{}.{}", parts[0], b64(extra), parts[2]);
    let long = "a".repeat(MAX_SESSION_LEN + 1);
    let cases: Vec<(&str, &str)> = vec![
        ("", "three dot-separated parts"),
        ("a.b", "three dot-separated parts"),
        ("a.b.c.d", "three dot-separated parts"),
        ("!.!.!", "not a valid login session"),
        (&none_alg, "not a valid login session"),
        (&hs384, "not a valid login session"),
        (&tampered, "not a valid login session"),
        (&extra, "not a valid login session"),
        (&long, "over the 4096-byte limit"),
    ];
    for (token, words) in cases {
        let e = s.verify(token, now).expect_err(token);
        assert!(e.to_string().contains(words), "{:.40}: {e} should say {words:?}", token);
    }
}

#[test]
fn the_key_is_never_in_debug_output() {
    let (_dir, s) = sessions();
    let hex = s.directory().store().setting(KEY_SETTING).unwrap().unwrap();
    assert!(!format!("{s:?}").contains(&hex));
}

#[test]
fn the_fuzz_body_takes_any_bytes_and_the_seed_corpus() {
    for data in [&b""[..], b"..", b"\xff.\xfe.", b"eyJ.eyJ.x"] {
        fuzzing::session_token(data);
    }
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/session_token");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        fuzzing::session_token(&std::fs::read(entry.unwrap().path()).unwrap());
        count += 1;
    }
    assert!(count >= 5, "only {count} seeds in {}", dir.display());
}

#[test]
fn an_adopted_key_verifies_the_other_brokers_sessions_and_is_kept() {
    let (_dir_a, a) = sessions();
    let (dir_b, b) = sessions();
    let now = SystemTime::now();
    let (from_a, claims) = a.issue("alice", now, DEFAULT_TTL).unwrap();
    let (from_b_before, _) = b.issue("alice", now, DEFAULT_TTL).unwrap();
    assert!(matches!(b.verify(&from_a, now), Err(SessionError::Invalid(_))), "another key");
    b.adopt_key(a.shared_key()).unwrap();
    assert_eq!(b.verify(&from_a, now).unwrap(), claims);
    assert!(
        matches!(b.verify(&from_b_before, now), Err(SessionError::Invalid(_))),
        "signed with the old key"
    );
    let (from_b, _) = b.issue("bob", now, DEFAULT_TTL).unwrap();
    assert!(a.verify(&from_b, now).is_ok(), "b now signs with a's key");
    drop(b);
    let directory = Arc::new(UserDirectory::open(&crate::builtin::config_db_path(dir_b.path())).unwrap());
    let reopened = Sessions::open(directory, now).unwrap();
    assert!(reopened.verify(&from_a, now).is_ok(), "the adopted key is stored");
}

#[test]
fn revocations_from_elsewhere_are_applied_kept_and_not_reported_back() {
    let (dir, s) = sessions();
    let reported = Arc::new(Mutex::new(Vec::new()));
    let seen = reported.clone();
    s.on_revoke(Box::new(move |jti, exp| lock(&seen).push((jti.to_owned(), exp))));
    let now = SystemTime::now();
    let (token, claims) = s.issue("alice", now, DEFAULT_TTL).unwrap();
    assert!(s.apply_revocation(&claims.jti, claims.exp, now).unwrap(), "new here");
    assert!(!s.apply_revocation(&claims.jti, claims.exp, now).unwrap(), "applied once");
    assert!(!s.apply_revocation("gone", unix_seconds(now), now).unwrap(), "an expired one is not kept");
    assert!(matches!(s.verify(&token, now), Err(SessionError::Revoked)));
    assert!(lock(&reported).is_empty(), "what came from elsewhere is not sent out again");
    assert_eq!(s.revocations(now), vec![(claims.jti.clone(), claims.exp)]);

    let (other, other_claims) = s.issue("alice", now, DEFAULT_TTL).unwrap();
    s.revoke(&other_claims, now).unwrap();
    assert!(matches!(s.verify(&other, now), Err(SessionError::Revoked)));
    assert_eq!(
        *lock(&reported),
        vec![(other_claims.jti.clone(), other_claims.exp)],
        "a logout here is reported"
    );
    drop(s);
    let directory = Arc::new(UserDirectory::open(&crate::builtin::config_db_path(dir.path())).unwrap());
    let again = Sessions::open(directory, now).unwrap();
    assert!(matches!(again.verify(&token, now), Err(SessionError::Revoked)), "kept in the store");
}
