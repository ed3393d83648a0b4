//! Plugins that misbehave — panic, hang, fail, answer garbage, break the ABI — are contained:
//! the client they were asked about is denied (or passed on with `on_error = "next"`), the
//! log names the plugin, everyone else is still served, and a library that cannot be used
//! refuses the start with a message that says why.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    bad_c_plugin, capture_logs, chain, chain_error, connect, entry, logs, misbehaving, rust_example,
};
use mesgd_core::auth::{Chain, DenyReason, Verdict};

const ALICE: &str = r#"config = { users = [{ username = "alice", password_sha256 = "f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7" }] }"#;

fn denial(verdict: Verdict) -> mesgd_core::auth::Denial {
    match verdict {
        Verdict::Denied(denial) => denial,
        Verdict::Allowed(identity) => panic!("allowed: {identity:?}"),
    }
}

async fn ask(chain: &Chain, client_id: &str, username: &str) -> Verdict {
    chain.authenticate(&connect(client_id, Some(username), Some(b"hunter2"))).await
}

#[tokio::test]
async fn a_panicking_plugin_denies_that_client_logs_its_name_and_keeps_serving() {
    capture_logs();
    let chain = chain(&entry(&misbehaving(), "config = { mode = \"panic-unless-good\" }")).expect("loads");
    let denied = denial(ask(&chain, "panic-victim-1", "bad").await);
    assert_eq!(denied.reason, DenyReason::NotAuthorized);
    assert_eq!(denied.message, "provider plugin:misbehaving failed: the plugin panicked: not good");
    let line = logs().lines().find(|l| l.contains("panic-victim-1")).map(str::to_owned).expect("a log line");
    assert!(
        line.contains("WARN") && line.contains("plugin:misbehaving") && line.contains("panicked"),
        "{line}"
    );
    // The same instance keeps answering.
    for i in 0..3 {
        assert!(matches!(ask(&chain, &format!("after-{i}"), "good").await, Verdict::Allowed(_)));
        denial(ask(&chain, &format!("again-{i}"), "bad").await);
    }
}

#[tokio::test]
async fn failures_and_invalid_answers_fail_closed_or_move_on_with_on_error_next() {
    let cases = [
        ("panic", "the plugin panicked: authenticate was told to panic"),
        ("fail", "the backend is unreachable"),
        ("bad-acl", "the plugin's ACL rule 1 is invalid"),
    ];
    for (mode, expected) in cases {
        let closed =
            chain(&entry(&misbehaving(), &format!("config = {{ mode = {mode:?} }}"))).expect("loads");
        let message = denial(ask(&closed, "c", "alice").await).message;
        assert!(message.starts_with("provider plugin:misbehaving failed: "), "{message}");
        assert!(message.contains(expected), "{mode}: {message}");

        // on_error = "next": the following provider decides.
        let open = chain(&format!(
            "{}{}",
            entry(&misbehaving(), &format!("on_error = \"next\"\nconfig = {{ mode = {mode:?} }}")),
            entry(&rust_example(), ALICE)
        ))
        .expect("loads");
        match ask(&open, "c", "alice").await {
            Verdict::Allowed(identity) => assert_eq!(identity.provider, "plugin:allowlist", "{mode}"),
            Verdict::Denied(d) => panic!("{mode}: {d:?}"),
        }
    }
}

#[test]
fn a_hanging_plugin_times_out_and_ties_up_only_its_own_call_slots() {
    capture_logs();
    // Three blocking threads in all: if the hanging plugin could take more than its two slots,
    // the healthy plugin below would find no thread left.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(3)
        .enable_all()
        .build()
        .expect("runtime");
    let hanging = Arc::new(
        chain(&entry(
            &misbehaving(),
            "timeout_ms = 300\nmax_concurrent_calls = 2\nconfig = { mode = \"hang\" }",
        ))
        .expect("loads"),
    );
    let healthy = chain(&entry(&rust_example(), ALICE)).expect("loads");
    // Nothing may panic while the runtime is up: unwinding would drop it, and dropping a
    // runtime waits for its blocking threads — which hang for good.
    let (refusals, healthy_answers) = runtime.block_on(async {
        let attempts: Vec<_> = (0..6)
            .map(|i| {
                let hanging = Arc::clone(&hanging);
                tokio::spawn(async move { ask(&hanging, &format!("hang-victim-{i}"), "alice").await })
            })
            .collect();
        let mut refusals = Vec::new();
        for attempt in attempts {
            refusals.push(match attempt.await {
                Ok(Verdict::Denied(denial)) => denial.message,
                other => format!("{other:?}"),
            });
        }
        let mut healthy_answers = Vec::new();
        for i in 0..3 {
            let client_id = format!("ok-{i}");
            let answer =
                tokio::time::timeout(Duration::from_secs(10), ask(&healthy, &client_id, "alice")).await;
            healthy_answers.push(matches!(answer, Ok(Verdict::Allowed(_))));
        }
        (refusals, healthy_answers)
    });
    // The hung calls never return; the test must not wait for them.
    runtime.shutdown_background();

    for message in refusals {
        assert_eq!(message, "provider plugin:misbehaving failed: timed out after 300ms");
    }
    assert_eq!(healthy_answers, [true; 3], "the healthy plugin found a blocking thread");
    let logs = logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("plugin:misbehaving") && l.contains("every call slot of the plugin is busy")),
        "{logs}"
    );
}

#[test]
fn libraries_that_break_the_abi_are_refused_at_start_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [
        (
            "WRONG_MAJOR",
            "was built for plugin ABI 2.0, but this mesgd speaks ABI 1.0; rebuild it against mesgd-plugin-api / mesgd_plugin.h of ABI 1.x",
        ),
        (
            "DECLINE",
            "the plugin declined to work with a host of ABI 1.0 (its `mesgd_plugin_entry` returned NULL)",
        ),
        ("SHORT_TABLE", "the plugin's function table is 16 bytes, but ABI 1.0 needs at least"),
        ("NO_AUTHENTICATE", "the plugin's function table has no `authenticate` function"),
        ("BAD_NAME", "the plugin's name \"bad name\" is not 1 to 64 characters of A-Z a-z 0-9 _ . -"),
        ("NO_ENTRY", "is not a mesgd plugin: it does not export `mesgd_plugin_entry`"),
        ("FAIL_CREATE", "plugin bad-plugin"),
    ];
    for (define, expected) in cases {
        let path = bad_c_plugin(dir.path(), Some(define));
        let message = chain_error(&entry(&path, ""));
        assert!(message.starts_with("auth.providers[1] (type = \"plugin\"): "), "{message}");
        assert!(message.contains(&path.display().to_string()), "{define}: {message}");
        assert!(message.contains(expected), "{define}: {message}");
    }
    let message = chain_error(&entry(&bad_c_plugin(dir.path(), Some("FAIL_CREATE")), ""));
    assert!(message.ends_with("refused its `config`: no database configured"), "{message}");

    let report = mesgd_plugin_host::check(&bad_c_plugin(dir.path(), Some("WRONG_MAJOR")), None);
    assert!(!report.is_usable());
    assert!(report.to_string().contains("usable:   no: "), "{report}");
}

#[test]
fn a_plugin_of_a_newer_minor_version_with_a_longer_table_is_accepted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = bad_c_plugin(dir.path(), Some("NEWER_MINOR"));
    let report = mesgd_plugin_host::check(&path, None);
    assert!(report.is_usable(), "{report}");
    assert!(report.to_string().contains("ABI:      1.5 (this mesgd: 1.0)"), "{report}");
    chain(&entry(&path, "")).expect("a 1.5 plugin loads into a 1.0 host");
}

#[test]
fn files_that_are_not_usable_libraries_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text_file = dir.path().join("libnot_a_plugin.so");
    std::fs::write(&text_file, "just text").expect("write");
    let message = chain_error(&entry(&text_file, ""));
    assert!(message.contains(&format!("cannot load {}", text_file.display())), "{message}");

    let missing = dir.path().join("libmissing.so");
    let message = chain_error(&entry(&missing, ""));
    assert!(message.contains(&format!("cannot read `path` file {}", missing.display())), "{message}");

    let message = chain_error(&entry(dir.path(), ""));
    assert!(message.contains("is not a regular file"), "{message}");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("dir");
        let path = bad_c_plugin(&open, None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let message = chain_error(&entry(&path, ""));
        assert!(message.contains("is writable by every user of this machine"), "{message}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        chain(&entry(&path, "")).expect("loads once only its owner may write it");
    }
}

#[tokio::test]
async fn answers_that_break_the_abi_deny_the_client() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [
        ("GARBAGE_ANSWER", "the plugin's answer is invalid: "),
        ("HUGE_ANSWER", "the plugin's answer is 1048576 bytes, more than the 65536 accepted"),
        ("ODD_STATUS", "unknown status 7 (odd)"),
    ];
    for (define, expected) in cases {
        let chain = chain(&entry(&bad_c_plugin(dir.path(), Some(define)), "")).expect("loads");
        let message = denial(ask(&chain, "c", "alice").await).message;
        assert!(message.starts_with("provider plugin:bad-plugin failed: "), "{message}");
        assert!(message.contains(expected), "{define}: {message}");
    }
    let well_behaved = chain(&entry(&bad_c_plugin(dir.path(), None), "")).expect("loads");
    assert!(matches!(ask(&well_behaved, "c", "alice").await, Verdict::Allowed(_)));
}

#[test]
fn a_failing_create_refuses_the_start_with_the_plugins_message() {
    let cases = [
        ("panic-in-create", "refused its `config`: the plugin panicked: create was told to panic"),
        ("fail-in-create", "refused its `config`: create was told to fail"),
        ("no-such-mode", "refused its `config`: unknown mode Some(\"no-such-mode\")"),
    ];
    for (mode, expected) in cases {
        let message = chain_error(&entry(&misbehaving(), &format!("config = {{ mode = {mode:?} }}")));
        assert!(
            message.starts_with("auth.providers[1] (type = \"plugin\"): plugin misbehaving ("),
            "{message}"
        );
        assert!(message.ends_with(expected), "{mode}: {message}");
    }
}

#[test]
fn malformed_plugin_entries_are_refused_naming_the_key() {
    let path = rust_example();
    let cases = [
        ("[[p]]\ntype = \"plugin\"\n", "missing field `path`"),
        ("[[p]]\ntype = \"plugin\"\npath = 5\n", "invalid type: integer `5`"),
        (&entry(&path, "config = \"users.json\"") as &str, "expected a map in `config`"),
        (
            &entry(&path, "configs = {}"),
            "unknown field `configs`, expected one of `path`, `config`, `max_concurrent_calls`",
        ),
        (&entry(&path, "max_concurrent_calls = 0"), "`max_concurrent_calls` must be 1 to 1024, found 0"),
        (
            &entry(&path, "max_concurrent_calls = 5000"),
            "`max_concurrent_calls` must be 1 to 1024, found 5000",
        ),
        (&entry(&path, "config = { ratio = nan }"), "`config.ratio` is NaN, which JSON cannot represent"),
        (
            &entry(&path, "config = { a = [1, { b = inf }] }"),
            "`config.a[1].b` is inf, which JSON cannot represent",
        ),
    ];
    for (text, expected) in cases {
        let message = chain_error(text);
        assert!(message.starts_with("auth.providers[1] (type = \"plugin\"): "), "{message}");
        assert!(message.contains(expected), "{message}\nexpected: {expected}");
    }
}

#[test]
fn relative_paths_resolve_against_the_configuration_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let library = bad_c_plugin(dir.path(), None);
    let tables: Vec<toml::Table> = vec![
        toml::from_str(&format!(
            "type = \"plugin\"\npath = {:?}",
            library.file_name().expect("file name").to_string_lossy()
        ))
        .expect("toml"),
    ];
    let mut registry = mesgd_providers::Registry::new();
    mesgd_plugin_host::register(&mut registry);
    let mut ctx = mesgd_providers::BuildContext::new("/nonexistent").with_base_dir(dir.path());
    let chain = registry.build_chain(&tables, false, &mut ctx).expect("found next to the config");
    assert_eq!(chain.entries()[0].provider.name(), "plugin:bad-plugin");
    // Without the base directory the bare name is not looked up in the system's library path.
    let mut elsewhere = mesgd_providers::BuildContext::new("/nonexistent");
    let error = registry.build_chain(&tables, false, &mut elsewhere).expect_err("not found");
    assert!(error.to_string().contains("cannot read `path` file"), "{error}");
}
