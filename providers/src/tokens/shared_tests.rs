//! The key store shared between nodes: exported, sent, imported into another node's store;
//! rotations travel; what cannot be used is refused before anything is written.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_760_000_000)
}

fn pairs() -> Pairs {
    Pairs::from_words(&["room", "lobby"]).unwrap()
}

/// Sends the store in `from` to `to` as a cluster would: exported, encoded, decoded, imported.
fn send(from: &Path, to: &Path) -> bool {
    let shared = SharedKeys::export(from).unwrap().expect("a store to send");
    SharedKeys::decode(&shared.encode()).unwrap().import(to, now()).unwrap()
}

fn key_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".p8"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_store_travels_whole_and_its_tokens_verify_on_the_other_side() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let keys_a = KeyStore::open_or_create(a.path(), now()).unwrap();
    let keys_b = KeyStore::open_or_create(b.path(), now()).unwrap();
    assert_ne!(keys_a.current_key_id(), keys_b.current_key_id());
    let token = forge_claim(&keys_a, &pairs(), now()).unwrap();
    assert!(matches!(verify(&keys_b, &token, now()), Err(TokenError::UnknownKey { .. })));

    assert!(send(a.path(), b.path()), "b takes a's store");
    assert!(!send(a.path(), b.path()), "the same store again writes nothing");
    assert!(keys_b.is_stale().unwrap(), "b's loaded copy sees the change");
    let keys_b = KeyStore::open(b.path(), now()).unwrap();
    assert_eq!(keys_b.current_key_id(), keys_a.current_key_id());
    assert_eq!(key_files(b.path()), key_files(a.path()), "b's own set is gone");
    assert!(verify(&keys_b, &token, now()).is_ok());
    assert_eq!(KeysVersion::of(b.path()).unwrap(), KeysVersion::of(a.path()).unwrap());

    // An empty directory, or none at all, is made a store.
    let c = tempfile::tempdir().unwrap();
    assert!(send(a.path(), &c.path().join("keys")));
    assert!(verify(&KeyStore::open(&c.path().join("keys"), now()).unwrap(), &token, now()).is_ok());
}

#[test]
fn a_rotation_travels_with_its_grace_period_and_a_zero_grace_drops_the_old_key_everywhere() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut keys_a = KeyStore::open_or_create(a.path(), now()).unwrap();
    let first = forge_claim(&keys_a, &pairs(), now()).unwrap();
    send(a.path(), b.path());

    keys_a.rotate(now(), Duration::from_secs(3600)).unwrap();
    let second = forge_claim(&keys_a, &pairs(), now()).unwrap();
    assert!(send(a.path(), b.path()));
    let keys_b = KeyStore::open(b.path(), now()).unwrap();
    assert_eq!(keys_b.key_ids(), keys_a.key_ids(), "the same sets, with the same grace");
    assert!(verify(&keys_b, &first, now()).is_ok(), "the retired set verifies within its grace");
    assert!(verify(&keys_b, &second, now()).is_ok());

    keys_a.rotate(now(), Duration::ZERO).unwrap();
    let third = forge_claim(&keys_a, &pairs(), now()).unwrap();
    assert!(send(a.path(), b.path()));
    let keys_b = KeyStore::open(b.path(), now()).unwrap();
    assert!(verify(&keys_b, &third, now()).is_ok());
    assert!(verify(&keys_b, &second, now()).is_err(), "a zero grace ends the old key at once");
    assert!(verify(&keys_b, &first, now()).is_ok(), "the first set's grace is its own");
    assert_eq!(key_files(b.path()), key_files(a.path()));
}

#[test]
fn malformed_shared_stores_are_refused_and_nothing_is_written() {
    let (a, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    KeyStore::open_or_create(a.path(), now()).unwrap();
    KeyStore::open_or_create(other.path(), now()).unwrap();
    let good = String::from_utf8(SharedKeys::export(a.path()).unwrap().unwrap().encode()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let id = v["meta"]["current"]["id"].as_str().unwrap().to_owned();
    let rsa = v["sets"][0]["rsa"].as_str().unwrap().to_owned();
    let ec = v["sets"][0]["ec"].as_str().unwrap().to_owned();
    let other_v: serde_json::Value =
        serde_json::from_slice(&SharedKeys::export(other.path()).unwrap().unwrap().encode()).unwrap();
    let other_ec = other_v["sets"][0]["ec"].as_str().unwrap().to_owned();
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = v.clone();
        f(&mut v);
        v.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "not a shared key store"),
        ("[]".into(), "not a shared key store"),
        (good.replace("\"sets\"", "\"extra\":1,\"sets\""), "unknown field"),
        (with(&|v| v["meta"]["format"] = 2.into()), "format 2"),
        (with(&|v| v["meta"]["current"]["id"] = "ABCDEF0123456789".into()), "hex digits"),
        (with(&|v| v["sets"] = serde_json::json!([])), "current key set's keys are missing"),
        (with(&|v| v["sets"][0]["id"] = "0000000000000000".into()), "not named by the metadata"),
        (
            with(&|v| v["sets"] = serde_json::json!([v["sets"][0].clone(), v["sets"][0].clone()])),
            "given twice",
        ),
        (with(&|v| v["sets"][0]["rsa"] = "!!".into()), "not base64"),
        (with(&|v| v["sets"][0]["rsa"] = ec.clone().into()), "not an RSA private key"),
        (with(&|v| v["sets"][0]["ec"] = rsa.clone().into()), "not an ECDSA P-256 private key"),
        (with(&|v| v["sets"][0]["ec"] = other_ec.clone().into()), "another id"),
        (
            with(&|v| {
                v["meta"]["retired"] =
                    serde_json::json!([{ "id": "0123456789abcdef", "created": 1, "retired": 2 }])
            }),
            "no `until`",
        ),
        (
            with(&|v| {
                let retired: Vec<serde_json::Value> = (0..=MAX_RETIRED)
                    .map(|i| serde_json::json!({ "id": format!("{i:016x}"), "created": 1, "retired": 2, "until": 3 }))
                    .collect();
                v["meta"]["retired"] = retired.into();
            }),
            "retired key sets",
        ),
        (" ".repeat(MAX_SHARED_KEYS_LEN + 1), "bytes (at most"),
    ];
    for (bytes, why) in &cases {
        let err = SharedKeys::decode(bytes.as_bytes()).expect_err(why);
        assert!(err.to_string().contains(why), "{err} should say {why:?}");
        assert!(!err.to_string().contains(&rsa[..40]), "no key material in the error");
    }

    // A store that names a retired set in its grace without sending its keys decodes (the
    // receiver may have them) but is not imported where they are missing.
    let dangling = with(&|v| {
        v["meta"]["retired"] =
            serde_json::json!([{ "id": "0123456789abcdef", "created": 1, "retired": 2, "until": u64::MAX }])
    });
    let shared = SharedKeys::decode(dangling.as_bytes()).unwrap();
    let target = tempfile::tempdir().unwrap();
    KeyStore::open_or_create(target.path(), now()).unwrap();
    let before = key_files(target.path());
    let err = shared.import(target.path(), now()).unwrap_err();
    assert!(err.to_string().contains("without its keys"), "{err}");
    assert_eq!(key_files(target.path()), before, "nothing written");
    assert!(KeyStore::open(target.path(), now()).is_ok(), "the store is as it was");
    assert!(!format!("{shared:?}").contains(&rsa[..40]), "Debug shows ids only");
    assert!(format!("{shared:?}").contains(&id));
}

#[test]
fn cluster_token_keys_corpus() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cluster_token_keys");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let file = entry.unwrap().path();
        let data = std::fs::read(&file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| shared::fuzzing::shared_keys(&data)) {
            eprintln!("seed {} fails", file.display());
            std::panic::resume_unwind(panic);
        }
        count += 1;
    }
    assert!(count >= 3, "only {count} seeds in {}", dir.display());
}
