//! Token tests through the public operations: round trips, tampering, keys, rotation, expiry,
//! malformed input and the explanation of foreign formats.
//!
//! Generating an RSA-3072 key takes a second or more in a debug build, so most tests start from
//! a copy of one key store made once per test run; only the tests about creation and rotation
//! make keys of their own.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::ops::seal;
use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_760_000_000)
}

/// A fresh directory holding a copy of the shared key store.
fn store() -> (tempfile::TempDir, KeyStore) {
    static FILES: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    let files = FILES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        KeyStore::open_or_create(dir.path(), now()).unwrap();
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name() != "lock")
            .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
            .collect()
    });
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let keys = KeyStore::open(dir.path(), now()).unwrap();
    (dir, keys)
}

fn pairs(words: &[&str]) -> Pairs {
    Pairs::from_words(words).unwrap()
}

fn forge(keys: &KeyStore, words: &[&str]) -> String {
    forge_claim(keys, &pairs(words), now()).unwrap()
}

fn decode(token: &str) -> (Vec<u8>, Vec<u8>) {
    let (body, sig) = token.split_once('.').unwrap();
    (URL_SAFE_NO_PAD.decode(body).unwrap(), URL_SAFE_NO_PAD.decode(sig).unwrap())
}

fn encode(body: &[u8], sig: &[u8]) -> String {
    format!("{}.{}", URL_SAFE_NO_PAD.encode(body), URL_SAFE_NO_PAD.encode(sig))
}

/// `body` signed with `keys`' current key, as a token.
fn signed(keys: &KeyStore, body: &[u8]) -> String {
    let sig = keys.current().signing.sign(&SystemRandom::new(), body).unwrap();
    encode(body, sig.as_ref())
}

#[test]
fn a_forged_token_verifies_to_its_pairs() {
    let (_dir, keys) = store();
    let token = forge(&keys, &["sub", "alice", "room", "lobby"]);
    assert!(token.len() < 1024, "{}", token.len());
    let claims = verify(&keys, &token, now()).unwrap();
    assert_eq!(claims.kind(), Kind::Claim);
    assert_eq!(claims.iat, 1_760_000_000);
    assert_eq!(claims.exp, None);
    assert_eq!(claims.sub, None);
    assert_eq!(claims.pairs_object(), Some(serde_json::json!({"sub": "alice", "room": "lobby"})));
    let (body, sig) = decode(&token);
    assert_eq!(body[0], VERSION);
    assert_eq!(body[1..9], keys.current_key_id().0);
    assert_eq!(u16::from_be_bytes([body[9], body[10]]), 384);
    assert_eq!(sig[0], 0x30, "DER SEQUENCE");
    assert_ne!(forge(&keys, &["sub", "alice", "room", "lobby"]), token, "fresh key, nonce and jti each time");
}

#[test]
fn the_claims_are_not_readable_in_the_token() {
    let (_dir, keys) = store();
    let token = forge(&keys, &["secret-room", "hidden-value"]);
    let (body, _) = decode(&token);
    let text = String::from_utf8_lossy(&body);
    assert!(!text.contains("secret-room") && !text.contains("hidden-value") && !text.contains("claim"));
}

#[test]
fn grant_and_anonymous_tokens_share_the_format() {
    let (_dir, keys) = store();
    let grant =
        Claims::new(Payload::Grant(vec!["/room=lobby".into()]), Some("alice".into()), now(), Some(HOUR))
            .unwrap();
    let token = issue(&keys, &grant).unwrap();
    let back = verify(&keys, &token, now()).unwrap();
    assert_eq!(back, grant);
    assert!(matches!(back.expect_kind(Kind::Claim), Err(TokenError::WrongKind { .. })));
    assert_eq!(back.pairs_object(), None);
    let anonymous =
        Claims::new(Payload::Anonymous(vec!["/kind=public".into()]), None, now(), Some(HOUR)).unwrap();
    assert_eq!(verify(&keys, &issue(&keys, &anonymous).unwrap(), now()).unwrap(), anonymous);
}

#[test]
fn tampering_with_any_byte_of_the_body_is_refused() {
    let (_dir, keys) = store();
    let token = forge(&keys, &["room", "lobby"]);
    let (body, sig) = decode(&token);
    for i in 0..body.len() {
        let mut bad = body.clone();
        bad[i] ^= 0x02;
        let err = verify(&keys, &encode(&bad, &sig), now()).unwrap_err();
        let right = match i {
            0 => matches!(err, TokenError::UnsupportedVersion { version: 3, .. }),
            1..=8 => matches!(err, TokenError::UnknownKey { .. }),
            9 | 10 => matches!(err, TokenError::Malformed { .. }),
            _ => matches!(err, TokenError::BadSignature { .. }),
        };
        assert!(right, "byte {i}: {err:?}");
    }
}

#[test]
fn tampering_with_any_byte_of_the_signature_is_refused() {
    let (_dir, keys) = store();
    let token = forge(&keys, &["room", "lobby"]);
    let (body, sig) = decode(&token);
    for i in 0..sig.len() {
        let mut bad = sig.clone();
        bad[i] ^= 0x02;
        let err = verify(&keys, &encode(&body, &bad), now()).unwrap_err();
        let right = if i == 0 {
            matches!(err, TokenError::Malformed { .. })
        } else {
            matches!(err, TokenError::BadSignature { .. })
        };
        assert!(right, "signature byte {i}: {err:?}");
    }
    let err = verify(&keys, &encode(&body, &sig[..sig.len() - 1]), now()).unwrap_err();
    assert!(matches!(err, TokenError::BadSignature { .. }), "{err:?}");
}

#[test]
fn changing_any_character_of_the_text_is_refused() {
    let (_dir, keys) = store();
    let token = forge(&keys, &["room", "lobby"]);
    for (i, c) in token.char_indices() {
        let other = if c == 'A' { 'B' } else { 'A' };
        let bad = format!("{}{other}{}", &token[..i], &token[i + 1..]);
        assert!(verify(&keys, &bad, now()).is_err(), "character {i}");
    }
}

#[test]
fn another_servers_token_names_an_unknown_key() {
    let (_a, a) = store();
    let dir = tempfile::tempdir().unwrap();
    let b = KeyStore::open_or_create(dir.path(), now()).unwrap();
    assert_ne!(a.current_key_id(), b.current_key_id());
    let err = verify(&b, &forge(&a, &["room", "lobby"]), now()).unwrap_err();
    assert!(matches!(err, TokenError::UnknownKey { key_id } if key_id == a.current_key_id()), "{err:?}");
    assert!(err.to_string().contains(&a.current_key_id().to_string()));

    // B's key id on a token signed with A's key: the signature gives it away.
    let (mut body, _) = decode(&forge(&a, &["room", "lobby"]));
    body[1..9].copy_from_slice(&b.current_key_id().0);
    let err = verify(&b, &signed(&a, &body), now()).unwrap_err();
    assert!(matches!(err, TokenError::BadSignature { .. }), "{err:?}");
}

#[test]
fn a_signed_token_whose_crypto_or_claims_are_bad_is_refused_after_the_signature() {
    let (_dir, keys) = store();
    let (body, _) = decode(&forge(&keys, &["room", "lobby"]));
    let last = body.len() - 1;
    let mut bad_tag = body.clone();
    bad_tag[last] ^= 1;
    assert!(matches!(verify(&keys, &signed(&keys, &bad_tag), now()), Err(TokenError::Decrypt { .. })));
    let mut bad_wrap = body;
    bad_wrap[20] ^= 1;
    assert!(matches!(verify(&keys, &signed(&keys, &bad_wrap), now()), Err(TokenError::Decrypt { .. })));
    let not_claims =
        seal(&keys, br#"{"kind":"root","jti":"x","iat":1,"pairs":[["a","b"]]}"#.to_vec()).unwrap();
    let err = verify(&keys, &not_claims, now()).unwrap_err();
    assert!(
        matches!(err, TokenError::Claims { .. }) && err.to_string().contains("unknown `kind`"),
        "{err:?}"
    );
}

#[test]
fn expired_tokens_are_refused_at_exp() {
    let (_dir, keys) = store();
    let claims = Claims::new(Payload::Claim(pairs(&["room", "lobby"])), None, now(), Some(HOUR)).unwrap();
    let token = issue(&keys, &claims).unwrap();
    assert!(verify(&keys, &token, now() + HOUR - Duration::from_secs(1)).is_ok());
    let err = verify(&keys, &token, now() + HOUR).unwrap_err();
    assert!(matches!(err, TokenError::Expired { exp, .. } if exp == 1_760_003_600), "{err:?}");
}

#[test]
fn claims_too_large_for_a_token_are_refused_when_forging() {
    let (_dir, keys) = store();
    let value = "v".repeat(MAX_FIELD_LEN);
    let words: Vec<String> = (0..20).flat_map(|i| [format!("k{i}"), value.clone()]).collect();
    let err = forge_claim(&keys, &Pairs::from_words(&words).unwrap(), now()).unwrap_err();
    assert!(matches!(err, TokenError::TooLarge { max: MAX_TOKEN_LEN, .. }), "{err:?}");
}

#[test]
fn rotated_keys_verify_through_their_grace_period_and_then_not() {
    let (dir, mut keys) = store();
    let old_id = keys.current_key_id();
    let old = forge(&keys, &["room", "lobby"]);
    keys.rotate(now(), HOUR).unwrap();
    assert_ne!(keys.current_key_id(), old_id);
    let new = forge(&keys, &["room", "lobby"]);
    assert_eq!(decode(&new).0[1..9], keys.current_key_id().0);

    // Within the grace period, the old token verifies, in this process and in another.
    let other = KeyStore::open(dir.path(), now()).unwrap();
    for store in [&keys, &other] {
        assert!(verify(store, &old, now() + HOUR - Duration::from_secs(1)).is_ok());
        let err = verify(store, &old, now() + HOUR).unwrap_err();
        assert!(matches!(err, TokenError::KeyRetired { key_id, .. } if key_id == old_id), "{err:?}");
        assert!(verify(store, &new, now() + HOUR).is_ok());
    }
    let listed = keys.key_ids();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1], KeyInfo { id: old_id, retired: Some((1_760_000_000, 1_760_003_600)) });

    // A rotation after the grace period prunes the old set, files included.
    let later = now() + 2 * HOUR;
    keys.rotate(later, HOUR).unwrap();
    assert!(matches!(verify(&keys, &old, later), Err(TokenError::UnknownKey { .. })));
    assert!(verify(&keys, &new, later).is_ok(), "the previous key is in its own grace period");
    assert!(!dir.path().join(format!("{old_id}.rsa.p8")).exists());
    assert!(!dir.path().join(format!("{old_id}.ec.p8")).exists());
    assert_eq!(KeyStore::open(dir.path(), later).unwrap().key_ids().len(), 2);
}

#[test]
fn rotating_with_no_grace_revokes_the_old_key_at_once() {
    let (dir, mut keys) = store();
    let old = forge(&keys, &["room", "lobby"]);
    let mut stale = KeyStore::open(dir.path(), now()).unwrap();
    keys.rotate(now(), Duration::ZERO).unwrap();
    assert!(matches!(verify(&keys, &old, now()), Err(TokenError::UnknownKey { .. })));
    assert_eq!(keys.key_ids().len(), 1);
    // A process that loaded the store earlier still has the old key until it refreshes.
    assert!(verify(&stale, &old, now()).is_ok());
    assert!(stale.refresh(now()).unwrap());
    assert!(!stale.refresh(now()).unwrap(), "nothing changed since");
    assert!(matches!(verify(&stale, &old, now()), Err(TokenError::UnknownKey { .. })));
    assert_eq!(stale.current_key_id(), keys.current_key_id());
}

#[test]
fn malformed_tokens_table() {
    let (_dir, keys) = store();
    let (body, sig) = decode(&forge(&keys, &["room", "lobby"]));
    let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
    let jwt = format!("{}.{}.c2ln", b64(br#"{"alg":"HS256","typ":"JWT"}"#), b64(br#"{"sub":"alice"}"#));
    let rs = r#"{"r":"AAAA","s":"BBBB"}"#;
    let mut v2 = body.clone();
    v2[0] = 2;
    type Expected = fn(&TokenError) -> bool;
    let table: Vec<(String, Expected)> = vec![
        (String::new(), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        (".".into(), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        ("garbage".into(), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        ("a.b".into(), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        ("a.b.c".into(), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        ("a.b.c.d".into(), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        (format!("{}=.{}", b64(&body), b64(&sig)), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        (format!("{}.{}", b64(&body), "%%"), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        (format!("{}.{}", b64(&body[..100]), b64(&sig)), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        (format!("{}.{}", b64(&body[..400]), b64(&sig)), |e| matches!(e, TokenError::Malformed { .. })),
        (encode(&[0xff; 400], &sig), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        (encode(&v2, &sig), |e| matches!(e, TokenError::UnsupportedVersion { version: 2, supported: 1 })),
        (encode(&body, &[]), |e| matches!(e, TokenError::Malformed { .. })),
        (encode(&body, &[0x30; 73]), |e| matches!(e, TokenError::Malformed { .. })),
        (encode(&body, &[7; 64]), |e| matches!(e, TokenError::RawSignature)),
        (encode(&body, rs.as_bytes()), |e| matches!(e, TokenError::SdkSignature)),
        (rs.into(), |e| matches!(e, TokenError::SdkSignature)),
        (format!("  {rs}"), |e| matches!(e, TokenError::SdkSignature)),
        (r#"{"token":"x"}"#.into(), |e| matches!(e, TokenError::NotMesgdToken { .. })),
        (jwt, |e| matches!(e, TokenError::Jwt { alg } if alg == "HS256")),
        ("x".repeat(MAX_TOKEN_LEN + 1), |e| matches!(e, TokenError::TooLong { len: 16385, max: 16384 })),
        (format!("{}.{}", "A".repeat(MAX_TOKEN_LEN), "A"), |e| matches!(e, TokenError::TooLong { .. })),
    ];
    for (token, expected) in &table {
        let err = verify(&keys, token, now()).unwrap_err();
        assert!(expected(&err), "{:?}: {err:?}", token.get(..40.min(token.len())));
        assert!(expected(&parse(token).unwrap_err()), "parse: {:?}", token.get(..40.min(token.len())));
    }
}

#[test]
fn foreign_formats_are_explained() {
    let (_dir, keys) = store();
    let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
    let jwt = format!("{}.{}.c2ln", b64(br#"{"alg":"HS256","typ":"JWT"}"#), b64(br#"{"sub":"alice"}"#));
    let text = verify(&keys, &jwt, now()).unwrap_err().to_string();
    assert!(text.contains("this is a JWT (a login session, alg HS256), not a claim token"), "{text}");
    let text = verify(&keys, r#"{"r":"AAAA","s":"BBBB"}"#, now()).unwrap_err().to_string();
    assert!(text.contains(r#"SDK message signature (JSON {"r","s"})"#), "{text}");
    let text = verify(&keys, "hello", now()).unwrap_err().to_string();
    assert!(text.starts_with("not a mesgd token"), "{text}");
}

#[test]
fn a_token_is_not_an_sdk_signature_nor_the_reverse() {
    let (_dir, keys) = store();
    let token = forge(&keys, &["room", "lobby"]);
    let (body, sig) = decode(&token);
    // An SDK verify refuses a token's DER signature as not its encoding.
    let public = aws_lc_rs::signature::KeyPair::public_key(&keys.current().signing).as_ref().to_vec();
    let err = sdk::verify_message(&public, &body, &URL_SAFE_NO_PAD.encode(&sig)).unwrap_err();
    assert!(matches!(err, sdk::SdkError::NotSdkSignature { .. }), "{err:?}");
    // And an SDK signature of the body does not make a token.
    let signer = sdk::SigningKey::generate().unwrap();
    let rs = sdk::sign_message(&signer, &body).unwrap();
    assert!(matches!(verify(&keys, &encode(&body, rs.as_bytes()), now()), Err(TokenError::SdkSignature)));
}

#[test]
fn key_files_are_owner_only_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let keys_dir = dir.path().join("storage").join("keys");
    let first = KeyStore::open_or_create(&keys_dir, now()).unwrap();
    let id = first.current_key_id();
    let mut names: Vec<String> = std::fs::read_dir(&keys_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [format!("{id}.ec.p8"), format!("{id}.rsa.p8"), "keys.json".into(), "lock".into()]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        for name in &names {
            let mode = std::fs::metadata(keys_dir.join(name)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        let mode = std::fs::metadata(&keys_dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    let before = std::fs::read(keys_dir.join(format!("{id}.rsa.p8"))).unwrap();
    let second = KeyStore::open_or_create(&keys_dir, now() + HOUR).unwrap();
    assert_eq!(second.current_key_id(), id);
    assert_eq!(std::fs::read(keys_dir.join(format!("{id}.rsa.p8"))).unwrap(), before);
    assert!(verify(&second, &forge(&first, &["a", "b"]), now()).is_ok());
}

#[test]
fn concurrent_creation_makes_one_key_set() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<KeyId> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| s.spawn(|| KeyStore::open_or_create(dir.path(), now()).unwrap().current_key_id()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(keyfiles::key_files(dir.path()).unwrap().len(), 2);
}

#[test]
fn open_never_creates() {
    let dir = tempfile::tempdir().unwrap();
    let keys_dir = dir.path().join("keys");
    assert!(matches!(KeyStore::open(&keys_dir, now()), Err(KeyError::Missing { .. })));
    assert!(!keys_dir.exists());
}

/// Every way a store on disk can be broken is refused, and nothing is overwritten.
#[test]
fn broken_stores_are_refused_untouched() {
    let (_dir, keys) = store();
    let id = keys.current_key_id().to_string();
    type Breakage = fn(&Path, &str);
    let table: &[(&str, Breakage, &str)] = &[
        (
            "truncated ECDSA key",
            |d, id| std::fs::write(d.join(format!("{id}.ec.p8")), b"\x30\x03").unwrap(),
            "not an ECDSA P-256",
        ),
        (
            "garbage RSA key",
            |d, id| std::fs::write(d.join(format!("{id}.rsa.p8")), b"junk").unwrap(),
            "not an RSA private key",
        ),
        (
            "missing key file",
            |d, id| std::fs::remove_file(d.join(format!("{id}.rsa.p8"))).unwrap(),
            "files are missing",
        ),
        (
            "garbage metadata",
            |d, _| std::fs::write(d.join("keys.json"), b"{").unwrap(),
            "not valid key metadata",
        ),
        (
            "key files under another id",
            |d, id| {
                let other = "0123456789abcdef";
                for ext in ["rsa.p8", "ec.p8"] {
                    std::fs::rename(d.join(format!("{id}.{ext}")), d.join(format!("{other}.{ext}"))).unwrap();
                }
                let meta = std::fs::read_to_string(d.join("keys.json")).unwrap().replace(id, other);
                std::fs::write(d.join("keys.json"), meta).unwrap();
            },
            "not the 0123456789abcdef their names say",
        ),
        ("orphan key files", |d, _| std::fs::remove_file(d.join("keys.json")).unwrap(), "no keys.json"),
    ];
    for (what, breakage, expected) in table {
        let (dir, _) = store();
        breakage(dir.path(), &id);
        let before = snapshot(dir.path());
        let err = KeyStore::open_or_create(dir.path(), now()).unwrap_err();
        assert!(err.to_string().contains(expected), "{what}: {err}");
        assert_eq!(snapshot(dir.path()), before, "{what}: the store was changed");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // Root reads a 0000 file anyway; the check only means something for other users.
        let (dir, _) = store();
        let path = dir.path().join(format!("{id}.ec.p8"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&path).is_err() {
            let err = KeyStore::open_or_create(dir.path(), now()).unwrap_err();
            assert!(matches!(err, KeyError::Io { action: "read", .. }), "{err:?}");
        }
    }
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        // The lock file is made by whoever takes the lock; it holds nothing.
        .filter(|e| e.file_name() != "lock")
        .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap_or_default()))
        .collect();
    files.sort();
    files
}

#[test]
fn too_many_retired_keys_refuse_rotation() {
    let (dir, mut keys) = store();
    // A metadata file with MAX_RETIRED retired sets still in their grace period; copies of
    // the current set serve as their files.
    let current = keys.current_key_id().to_string();
    let mut meta = keyfiles::Meta::read(dir.path()).unwrap().unwrap();
    for _ in 0..MAX_RETIRED {
        meta.retired.push(keyfiles::MetaKey {
            id: current.clone(),
            created: 0,
            retired: Some(0),
            until: Some(u64::MAX),
        });
    }
    meta.write(dir.path()).unwrap();
    let err = keys.rotate(now(), HOUR).unwrap_err();
    assert!(matches!(err, KeyError::TooManyRetired { count: 9, max: 8 }), "{err:?}");
}

/// The fuzz target's committed seed corpus (`fuzz/corpus/token_parse`), replayed on stable: parsing and verifying never panic, and no
/// entry verifies with a key it was not made for.
#[test]
fn fuzz_corpus_replays_without_panic() {
    let (_dir, keys) = store();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/token_parse");
    let mut count = 0;
    for entry in std::fs::read_dir(&corpus).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse(&text);
        assert!(verify(&keys, &text, now()).is_err());
        count += 1;
    }
    assert!(count >= 8, "corpus has {count} entries");
}

/// The rule `check` applies: the matcher sees the pairs as a JSON object, and its answer is
/// the verdict.
#[test]
fn check_hands_the_pairs_to_the_matcher_as_a_json_message() {
    struct Recorder(std::cell::RefCell<Vec<(String, String)>>, bool);
    impl PathMatcher for Recorder {
        fn matches(&self, path: &str, message: &[u8]) -> Result<bool, String> {
            self.0.borrow_mut().push((path.into(), String::from_utf8(message.to_vec()).unwrap()));
            Ok(self.1)
        }
    }
    let (_dir, keys) = store();
    let token = forge(&keys, &["sub", "alice", "room", "lobby", "vip"]);
    for answer in [true, false] {
        let recorder = Recorder(Default::default(), answer);
        assert_eq!(check::check(&keys, "/room=lobby", &token, now(), &recorder).unwrap(), answer);
        let seen = recorder.0.into_inner();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, "/room=lobby");
        let message: serde_json::Value = serde_json::from_str(&seen[0].1).unwrap();
        assert_eq!(message, serde_json::json!({"sub": "alice", "room": "lobby", "vip": true}));
    }
    let never = Recorder(Default::default(), true);
    let grant = Claims::new(Payload::Grant(vec!["/room=lobby".into()]), None, now(), Some(HOUR)).unwrap();
    let err = check::check(&keys, "/room=lobby", &issue(&keys, &grant).unwrap(), now(), &never).unwrap_err();
    assert!(matches!(err, CheckError::Token(TokenError::WrongKind { .. })), "{err:?}");
    assert!(never.0.borrow().is_empty(), "a token that is not a claim token never reaches the matcher");
}

/// The seed's examples through the real path matcher.
#[test]
fn check_with_content_paths_follows_the_seed() {
    let (_dir, keys) = store();
    let token = forge(&keys, &["sub", "alice", "room", "lobby"]);
    let at = |path: &str| check::check(&keys, path, &token, now(), &ContentPaths);
    assert!(at("/room=lobby").unwrap());
    assert!(at("/room=*").unwrap());
    assert!(at("/").unwrap());
    assert!(!at("/room=lobby/from=ann").unwrap());
    assert!(!at("/room=kitchen").unwrap());
    let odd = forge(&keys, &["room", "lobby", "vip"]);
    assert!(check::check(&keys, "/vip=true", &odd, now(), &ContentPaths).unwrap());
    let err = at("/a=b=c").unwrap_err();
    assert!(matches!(&err, CheckError::Path(m) if m.contains("a=b=c")), "{err:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any valid set of pairs comes back from a token exactly, in order, and as the object
    /// whose entries are those pairs.
    #[test]
    fn any_pairs_round_trip(words in proptest::collection::vec("[a-z]{1,6}|[^\\x00]{0,12}", 1..12)) {
        proptest::prop_assume!(!words.iter().step_by(2).any(String::is_empty));
        let keys_in_order: Vec<&String> = words.iter().step_by(2).collect();
        let distinct = keys_in_order.iter().enumerate().all(|(i, k)| !keys_in_order[..i].contains(k));
        proptest::prop_assume!(distinct);
        let (_dir, keys) = store();
        let pairs = Pairs::from_words(&words).unwrap();
        let claims = verify(&keys, &forge_claim(&keys, &pairs, now()).unwrap(), now()).unwrap();
        proptest::prop_assert_eq!(claims.pairs(), Some(&pairs));
        let object = claims.pairs_object().unwrap();
        let object = object.as_object().unwrap();
        proptest::prop_assert_eq!(object.len(), pairs.len());
        for chunk in words.chunks(2) {
            let expected = chunk.get(1).map_or(serde_json::Value::Bool(true), |v| serde_json::Value::String(v.clone()));
            proptest::prop_assert_eq!(&object[&chunk[0]], &expected);
        }
    }
}
