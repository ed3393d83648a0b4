//! Admission of content-routing upgrades against a real server: every credential carrier,
//! claim tokens valid, expired, forged and altered, `public_paths`, `disable_auth`, the login
//! guard; a key rotation made while the server runs; and the pattern compiler through the real binary and `POST /api/patterns/compile`.

#[path = "common/content.rs"]
mod content;

use std::process::Command;
use std::time::{Duration, SystemTime};

use content::{Carrier, ContentServer};
use mesgd_providers::tokens::{Claims, KeyStore, Pairs, Payload, issue};

/// Every carrier with `token`.
fn carriers(token: &str) -> [Carrier<'_>; 4] {
    [Carrier::Bearer(token), Carrier::Basic(token), Carrier::Subprotocol(token), Carrier::Query(token)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_credential_is_exactly_401() {
    let s = ContentServer::start("").await;
    let r = s.connect("/room=lobby", Carrier::None).await.err().expect("refused");
    assert_eq!(r.status, 401);
    assert!(r.body.contains("a credential is required"), "{}", r.body);
    assert_eq!(r.www_authenticate.as_deref(), Some("Bearer realm=\"mesgd\""));
    assert_eq!(s.count(|c| &c.upgrades_refused), 1);
    assert_eq!(s.count(|c| &c.upgrades), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_token_in_every_carrier_admits_a_path_its_pairs_match() {
    let s = ContentServer::start("").await;
    let token = s.forge(&["sub", "alice", "room", "lobby"]);
    for (i, carrier) in carriers(&token).into_iter().enumerate() {
        for path in ["/room=lobby", "/room=*", "/sub=alice/room=lobby"] {
            let mut listener = match s.connect(path, carrier).await {
                Ok(c) => c,
                Err(r) => panic!("{carrier:?} at {path} refused: {r:?}"),
            };
            let expected_protocol = matches!(carrier, Carrier::Subprotocol(_)).then(|| "json".to_owned());
            assert_eq!(listener.protocol, expected_protocol, "{carrier:?}");
            // Admitted as a listener on that path: it receives what a sender sends there.
            let mut sender = s.connect("/sub=alice/room=lobby", Carrier::Bearer(&token)).await.unwrap();
            let m = format!(r#"{{"sub":"alice","room":"lobby","n":{i}}}"#);
            sender.send(&m).await;
            assert_eq!(listener.recv().await, m, "{carrier:?} at {path}");
        }
    }
}

/// A rotation with no grace (the answer to a leaked key), made by another process while the
/// server runs as `mesgd keys rotate --grace 0s` makes it: the server stops admitting tokens of
/// the old key without a restart, and admits those of the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_while_the_server_runs_ends_the_old_key_without_a_restart() {
    let s = ContentServer::start("").await;
    let old = s.forge(&["room", "lobby"]);
    assert!(s.connect("/room=lobby", Carrier::Bearer(&old)).await.is_ok(), "the key in use works");
    s.keys().rotate(SystemTime::now(), Duration::ZERO).expect("rotated");
    let new = s.forge(&["room", "lobby"]);
    content::within("the server to drop the rotated-out key", async {
        // The server tells nothing when it reloads its keys: try the old token again.
        while s.connect("/room=lobby", Carrier::Bearer(&old)).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let r = s.connect("/room=lobby", Carrier::Bearer(&old)).await.err().expect("refused");
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(s.connect("/room=lobby", Carrier::Bearer(&new)).await.is_ok(), "the new key's token works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_token_whose_pairs_do_not_match_the_path_is_403() {
    let s = ContentServer::start("").await;
    let token = s.forge(&["sub", "alice", "room", "lobby"]);
    for carrier in carriers(&token) {
        for path in ["/room=lobby/from=ann", "/room=kitchen", "/0=x"] {
            let r = s.connect(path, carrier).await.err().unwrap_or_else(|| panic!("{carrier:?} {path}"));
            assert_eq!(r.status, 403, "{carrier:?} {path}: {}", r.body);
            assert!(r.body.contains("pairs do not match this path"), "{}", r.body);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_forged_and_altered_tokens_are_401_with_the_reason() {
    let s = ContentServer::start("").await;
    let pairs = Pairs::from_words(&["room", "lobby"]).unwrap();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let claims =
        Claims::new(Payload::Claim(pairs.clone()), None, an_hour_ago, Some(Duration::from_secs(60))).unwrap();
    let expired = issue(&s.keys(), &claims).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = KeyStore::open_or_create(other_dir.path(), SystemTime::now()).unwrap();
    let foreign = mesgd_providers::tokens::forge_claim(&other, &pairs, SystemTime::now()).unwrap();
    let good = s.forge(&["room", "lobby"]);
    let (body, signature) = good.split_once('.').unwrap();
    let mut altered_sig = signature.to_owned().into_bytes();
    let last = altered_sig.len() - 2;
    altered_sig[last] = if altered_sig[last] == b'A' { b'B' } else { b'A' };
    let altered = format!("{body}.{}", String::from_utf8(altered_sig).unwrap());
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl";
    let cases = [
        (expired.as_str(), "expired"),
        (foreign.as_str(), "key"),
        (altered.as_str(), "signature does not verify"),
        ("not-a-token", "refused"),
        (jwt, "JWT"),
    ];
    for (token, words) in cases {
        for carrier in carriers(token) {
            let r = s.connect("/room=lobby", carrier).await.err().unwrap_or_else(|| panic!("{carrier:?}"));
            assert_eq!(r.status, 401, "{carrier:?}: {}", r.body);
            assert!(r.body.contains(words), "{carrier:?}: {:?} should say {words:?}", r.body);
            assert!(!r.body.contains(token), "the refusal does not echo the token");
        }
    }
    assert_eq!(s.count(|c| &c.upgrades_refused), 5 * 4);
    assert!(s.connect("/room=lobby", Carrier::Bearer(&good)).await.is_ok(), "the unaltered token works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_paths_need_no_credential_on_every_path_they_cover() {
    let s = ContentServer::start("[content]\npublic_paths = [\"/kind=public\"]\n").await;
    let mut narrow = s.open("/kind=public/room=1").await;
    let mut sender = s.open("/kind=public").await;
    for path in ["/kind=private", "/kind=*", "/room=1", "/"] {
        let r = s.connect(path, Carrier::None).await.err().unwrap_or_else(|| panic!("{path} admitted"));
        assert_eq!(r.status, 401, "{path}");
    }
    sender.send(r#"{"kind":"public","room":1}"#).await;
    assert_eq!(narrow.recv().await, r#"{"kind":"public","room":1}"#);
    // A credential on a public path is still checked.
    let r = s.connect("/kind=public", Carrier::Bearer("not-a-token")).await.err().expect("refused");
    assert_eq!(r.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_auth_admits_every_upgrade_and_reads_no_credential() {
    let s = ContentServer::start("[content]\ndisable_auth = true\n").await;
    let mut a = s.open("/room=lobby").await;
    let mut b = s.connect("/room=*", Carrier::Bearer("not-a-token")).await.expect("admitted");
    a.send(r#"{"room":"lobby"}"#).await;
    assert_eq!(b.recv().await, r#"{"room":"lobby"}"#);
    assert_eq!(s.count(|c| &c.upgrades_refused), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_failed_logins_for_the_login_guard() {
    let s = ContentServer::start("[auth.failed_login]\nmax_failures = 2\nbase_delay_ms = 1\n").await;
    let broker_failures = || {
        s.server.as_ref().unwrap().broker().stats().auth_failures.load(std::sync::atomic::Ordering::Relaxed)
    };
    for _ in 0..3 {
        let r = s.connect("/room=lobby", Carrier::Bearer("not-a-token")).await.err().expect("refused");
        assert_eq!(r.status, 401);
    }
    assert_eq!(broker_failures(), 3);
    let token = s.forge(&["room", "lobby"]);
    assert!(s.connect("/room=lobby", Carrier::Bearer(&token)).await.is_ok(), "still admitted, only slowed");
}

/// `mesgd forge` from the real binary, against the running server's storage directory: the
/// server admits the token it prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_forged_by_the_binary_admits_its_path_on_the_server() {
    let s = ContentServer::start("").await;
    let config = s.dir.path().join("cli.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\ndir = {:?}\n[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n",
            s.storage().display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mesgd"))
        .args(["forge", "--config"])
        .arg(&config)
        .args(["sub", "alice", "room", "lobby"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(s.connect("/room=lobby", Carrier::Bearer(&token)).await.is_ok());
    let r = s.connect("/room=lobby/from=ann", Carrier::Query(&token)).await.err().expect("refused");
    assert_eq!(r.status, 403);
}

/// Runs `mesgd pattern compile ARGS`: status code, stdout, stderr.
fn pattern_compile(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mesgd"))
        .args(["pattern", "compile"])
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run mesgd");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().expect("exited"), text(&out.stdout), text(&out.stderr))
}

const SEED_SAMPLE: &str = r#"{"kind":"chat","room":"lobby","text":"hello"}"#;

#[test]
fn pattern_compile_prints_the_seed_examples() {
    let ok = |args: &[&str]| {
        let (code, out, err) = pattern_compile(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let seed = ["--sample", SEED_SAMPLE];
    assert_eq!(
        ok(&[&seed[..], &["--mode", "kind=exact", "--mode", "room=exact"]].concat()),
        "/kind=chat/room=lobby\n"
    );
    assert_eq!(
        ok(&[&seed[..], &["--mode", "kind=exact", "--mode", "room=any", "--mode", "text=omit"]].concat()),
        "/kind=chat/room=*\n"
    );
    assert_eq!(
        ok(&[&seed[..], &["--mode", "room=wildcard", "--mode", "kind=exact"]].concat()),
        "/kind=chat/room=*\n"
    );
    assert_eq!(ok(&["--sample", r#"["a","b"]"#, "--mode", "1=exact"]), "/1=b\n");
}

#[test]
fn pattern_compile_refuses_bad_input_with_the_reason() {
    for (args, words) in [
        (vec!["--sample", "{nope"], "the sample is not JSON"),
        (vec!["--sample", "{}"], "no field"),
        (vec!["--sample", r#"{"a":"x/y"}"#, "--mode", "a=exact"], "a"),
        (vec!["--sample", SEED_SAMPLE, "--mode", "kind=sometimes"], "sometimes"),
        (vec!["--sample", SEED_SAMPLE, "--mode", "kind"], "kind"),
    ] {
        let (code, out, err) = pattern_compile(&args);
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err:?} should say {words:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compile_endpoint_answers_the_pattern_or_400() {
    let s = ContentServer::start("").await;
    let json = "content-type: application/json\r\n";
    let body = format!(r#"{{"sample":{SEED_SAMPLE},"modes":{{"kind":"exact","room":"any"}}}}"#);
    let (status, answer) = s.http("POST", "/api/patterns/compile", json, &body).await;
    assert_eq!((status, answer.as_str()), (200, r#"{"pattern":"/kind=chat/room=*"}"#));
    let body = format!(r#"{{"sample":{SEED_SAMPLE},"modes":{{"text":"exact"}}}}"#);
    let (status, answer) = s.http("POST", "/api/patterns/compile", json, &body).await;
    assert_eq!(
        (status, answer.as_str()),
        (200, r#"{"pattern":"/text=hello"}"#),
        "fields not named are omitted"
    );
    for bad in ["{", r#"{"sample":{}}"#, r#"{"sample":{"a":"x*"},"modes":{"a":"exact"}}"#] {
        let (status, answer) = s.http("POST", "/api/patterns/compile", json, bad).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        let v: serde_json::Value = serde_json::from_str(&answer).expect("a JSON error");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{answer}");
    }
    // The endpoint is no WebSocket path.
    let (status, _) = s.http("GET", "/api/patterns/compile", "", "").await;
    assert_eq!(status, 405);
}
