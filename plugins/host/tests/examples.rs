//! The example plugins — Rust built with cargo, C built with `cc` — loaded through a `[[p]]`
//! table exactly as the broker loads them, and asked about real connect attempts.

mod common;

use std::path::Path;

use common::{c_example, chain, chain_error, connect, entry, rust_example};
use mesgd_core::acl::{Permission, Rule};
use mesgd_core::auth::{Chain, DenyReason, Outcome, Verdict};

/// alice / hunter2 with an ACL, bob / builder unrestricted, a username that needs JSON escapes
/// with a binary password, and mallory blocked.
const CONFIG: &str = r#"
[p.config]
blocked = ["mallory"]
[[p.config.users]]
username = "alice"
password_sha256 = "f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7"
acl = [{ pattern = "sensors/%u/#", permission = "readwrite" }, { pattern = "public/#", permission = "read" }]
[[p.config.users]]
username = "bob"
password_sha256 = "df6b07176a9b17cc4c9afc257bd404732e7d09b76436c7890f7b7be14e579794"
[[p.config.users]]
username = "zoë \"z\" \\ \u00e9\U0001F600"
password_sha256 = "e73146f6fe8e77bc9f6132491e6a37933045d9a97b9209c74e916200fda39140"
"#;

async fn outcome(chain: &Chain, client_id: &str, username: Option<&str>, password: Option<&[u8]>) -> Outcome {
    let provider = &chain.entries()[0].provider;
    provider.authenticate(&connect(client_id, username, password)).await.expect("the plugin answers")
}

async fn decides_as_documented(path: &Path, provider: &str) {
    let chain = chain(&entry(path, CONFIG)).expect("the example loads");
    assert_eq!(chain.entries()[0].provider.name(), provider);

    match outcome(&chain, "c1", Some("alice"), Some(b"hunter2")).await {
        Outcome::Allow(identity) => {
            assert_eq!(identity.provider, provider);
            assert_eq!(identity.username.as_deref(), Some("alice"));
            assert_eq!(identity.client_id, "c1");
            assert_eq!(
                identity.acl,
                Some(vec![
                    Rule::new("sensors/%u/#", Permission::ReadWrite),
                    Rule::new("public/#", Permission::Read)
                ])
            );
        }
        other => panic!("alice: {other:?}"),
    }
    match outcome(&chain, "c2", Some("bob"), Some(b"builder")).await {
        Outcome::Allow(identity) => assert_eq!(identity.acl, None, "no acl = unrestricted"),
        other => panic!("bob: {other:?}"),
    }
    match outcome(&chain, "c3", Some("zoë \"z\" \\ é😀"), Some(b"\x00\xffpw")).await {
        Outcome::Allow(identity) => assert_eq!(identity.username.as_deref(), Some("zoë \"z\" \\ é😀")),
        other => panic!("escaped username: {other:?}"),
    }
    match outcome(&chain, "c4", Some("alice"), Some(b"hunter3")).await {
        Outcome::Deny(denial) => {
            assert_eq!(denial.reason, DenyReason::BadCredentials);
            assert_eq!(denial.message, format!("{provider} denied the client: wrong password"));
        }
        other => panic!("wrong password: {other:?}"),
    }
    assert!(matches!(
        outcome(&chain, "c5", Some("alice"), None).await,
        Outcome::Deny(d) if d.reason == DenyReason::BadCredentials
    ));
    assert!(matches!(
        outcome(&chain, "c6", Some("mallory"), Some(b"hunter2")).await,
        Outcome::Deny(d) if d.reason == DenyReason::NotAuthorized
    ));
    assert!(matches!(outcome(&chain, "c7", Some("carol"), Some(b"x")).await, Outcome::Next));
    assert!(matches!(outcome(&chain, "c8", None, None).await, Outcome::Next));
    // The whole chain: Next from its only provider refuses a client with a username.
    assert!(matches!(
        chain.authenticate(&connect("c9", Some("carol"), Some(b"x"))).await,
        Verdict::Denied(d) if d.message == "no provider admitted the username"
    ));
}

#[tokio::test]
async fn the_rust_example_decides_as_documented() {
    decides_as_documented(&rust_example(), "plugin:allowlist").await;
}

#[tokio::test]
async fn the_c_example_decides_as_documented() {
    let dir = tempfile::tempdir().expect("temp dir");
    decides_as_documented(&c_example(dir.path()), "plugin:c-allowlist").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_instance_get_their_own_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    for path in [rust_example(), c_example(dir.path())] {
        let chain = chain(&entry(&path, &format!("max_concurrent_calls = 8\n{CONFIG}"))).expect("loads");
        let chain = std::sync::Arc::new(chain);
        let calls: Vec<_> = (0..64)
            .map(|i| {
                let chain = std::sync::Arc::clone(&chain);
                tokio::spawn(async move {
                    let (user, password): (&str, &[u8]) =
                        if i % 2 == 0 { ("alice", b"hunter2") } else { ("bob", b"wrong") };
                    let outcome = outcome(&chain, &format!("c{i}"), Some(user), Some(password)).await;
                    (i, outcome)
                })
            })
            .collect();
        for call in calls {
            let (i, outcome) = call.await.expect("task");
            match (i % 2, outcome) {
                (0, Outcome::Allow(identity)) => assert_eq!(identity.client_id, format!("c{i}")),
                (1, Outcome::Deny(_)) => {}
                (_, other) => panic!("call {i} of {}: {other:?}", path.display()),
            }
        }
    }
}

#[test]
fn the_examples_refuse_bad_configs_at_start_with_their_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let duplicate = r#"
config = { users = [{ username = "a", password_sha256 = "f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7" },
                    { username = "a", password_sha256 = "f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7" }] }
"#;
    let short_hash = r#"config = { users = [{ username = "a", password_sha256 = "abc" }] }"#;
    let unknown_key = r#"config = { admins = [] }"#;
    for (path, name) in [(rust_example(), "allowlist"), (c_example(dir.path()), "c-allowlist")] {
        let prefix = format!(
            "auth.providers[1] (type = \"plugin\"): plugin {name} ({}) refused its `config`: ",
            path.display()
        );
        for (config, reason) in [
            (duplicate, "listed twice"),
            (short_hash, "`password_sha256` must be 64 hex digits"),
            (unknown_key, "unknown"),
        ] {
            let message = chain_error(&entry(&path, config));
            assert!(message.starts_with(&prefix), "{message}");
            assert!(message.contains(reason), "{message}");
        }
    }
}

#[test]
fn check_reports_name_version_and_abi() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, name) in [(rust_example(), "allowlist"), (c_example(dir.path()), "c-allowlist")] {
        let report = mesgd_plugin_host::check(&path, None);
        assert!(report.is_usable(), "{report}");
        let info = report.library.as_ref().expect("usable");
        assert_eq!((info.name.as_str(), info.version.as_str()), (name, "0.1.0"));
        assert_eq!(info.abi_version, mesgd_plugin_host::AbiVersion::HOST);
        assert_eq!(
            report.to_string(),
            format!(
                "library:  {}\nname:     {name}\nversion:  0.1.0\nABI:      1.0 (this mesgd: 1.0)\nusable:   yes\n",
                path.display()
            )
        );

        let created = mesgd_plugin_host::check(&path, Some(r#"{"users": [], "blocked": ["x"]}"#));
        assert!(created.is_usable(), "{created}");
        assert!(created.to_string().contains("create:   accepted the config\n"), "{created}");
        let refused = mesgd_plugin_host::check(&path, Some(r#"{"users": 5}"#));
        assert!(!refused.is_usable());
        let text = refused.to_string();
        assert!(
            text.contains("create:   refused the config: ") && text.ends_with("usable:   no\n"),
            "{text}"
        );
    }
}

#[test]
fn the_examples_read_their_config_json_strictly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hash = "f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7";
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let malformed = [
        String::new(),
        "[]".to_owned(),
        "{".to_owned(),
        "{\"users\": [}".to_owned(),
        "{\"users\": [], }".to_owned(),
        "{\"users\": []} trailing".to_owned(),
        "{\"users\": [1]}".to_owned(),
        "{\"blocked\": [\"unterminated]}".to_owned(),
        "{\"blocked\": [\"bad escape \\q\"]}".to_owned(),
        "{\"blocked\": [\"lone surrogate \\ud800\"]}".to_owned(),
        "{\"blocked\": [\"raw\ncontrol\"]}".to_owned(),
        "{\"blocked\": [null]}".to_owned(),
        format!("{{\"users\": [{{\"username\": \"a\", \"password_sha256\": \"{hash}\", \"acl\": {deep}}}]}}"),
        format!("{{\"users\": [{{\"username\": \"a\", \"password_sha256\": \"{hash}\", \"acl\": \"#\"}}]}}"),
        format!("{{\"users\": [{{\"username\": \"a\", \"password_sha256\": \"{hash}\", \"admin\": true}}]}}"),
        "{\"users\": [{\"password_sha256\": \"00\"}]}".to_owned(),
    ];
    let valid = [
        "{}".to_owned(),
        " { \"users\" : [ ] , \"blocked\" : [ \"\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t\" ] } "
            .to_owned(),
        format!(
            "{{\"users\": [{{\"username\": \"a\", \"password_sha256\": \"{}\", \"acl\": null}}]}}",
            hash.to_uppercase()
        ),
        format!(
            "{{\"users\": [{{\"acl\": [{{\"pattern\": \"a\", \"permission\": \"read\"}}], \"username\": \"a\", \"password_sha256\": \"{hash}\"}}]}}"
        ),
    ];
    for path in [rust_example(), c_example(dir.path())] {
        for config in &malformed {
            let report = mesgd_plugin_host::check(&path, Some(config));
            assert!(!report.is_usable(), "{} accepted {config:?}", path.display());
        }
        for config in &valid {
            let report = mesgd_plugin_host::check(&path, Some(config));
            assert!(report.is_usable(), "{} refused {config:?}: {report}", path.display());
        }
    }
}
