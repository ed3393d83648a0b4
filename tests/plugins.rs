//! Dynamic auth plugins end to end, in MQTT 3.1.1 and 5.0: the example plugins — Rust built
//! with cargo, C built with the system `cc` — named in the TOML configuration, admitting,
//! refusing and passing clients on to a following builtin provider; the plugin's ACL gating
//! subscribe, publish and delivery; a panicking plugin contained; a library of the wrong ABI
//! refused at start; and `mesgd plugin check` run as a plugin author runs it.

mod common;

use std::path::{Path, PathBuf};

use common::TestServer;
use common::auth::{BOTH, Login, Proto, Storage};
use mesgd::Server;
use mesgd::config::Config;

const NO_THROTTLE: &str = "[auth.failed_login]\nmax_failures = 0\n";
const NO_SYS: &str = "[mqtt]\nsys_interval = 0\n";

/// The allow-list both examples read: alice / hunter2 restricted to her sensors (read-write)
/// and `public/#` (read only), bob / builder unrestricted, mallory blocked.
const ALLOWLIST: &str = r#"
[auth.providers.config]
blocked = ["mallory"]
[[auth.providers.config.users]]
username = "alice"
password_sha256 = "f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7"
acl = [{ pattern = "sensors/%u/#", permission = "readwrite" }, { pattern = "public/#", permission = "read" }]
[[auth.providers.config.users]]
username = "bob"
password_sha256 = "df6b07176a9b17cc4c9afc257bd404732e7d09b76436c7890f7b7be14e579794"
"#;

fn rust_example() -> PathBuf {
    mesgd_plugin_testkit::cargo_cdylib("mesgd-example-allowlist")
}

fn c_example(dir: &Path) -> PathBuf {
    let source = mesgd_plugin_testkit::workspace_root().join("plugins/examples/c-allowlist/allowlist.c");
    mesgd_plugin_testkit::cc_shared(&[&source], &[], dir, "c_allowlist")
}

fn plugin(path: &Path, rest: &str) -> String {
    format!("[[auth.providers]]\ntype = \"plugin\"\npath = {:?}\n{rest}\n", path.display().to_string())
}

fn auth(providers: &[String]) -> String {
    format!("[auth]\nallow_anonymous = false\n{}{NO_THROTTLE}{NO_SYS}", providers.concat())
}

fn id(name: &str, proto: Proto) -> String {
    format!("{name}-{proto:?}")
}

/// Both example plugins in front of a builtin provider that knows dave.
async fn admits_refuses_and_passes_on(library: &Path) {
    let storage = Storage::new();
    storage.add_user("dave", "builtin-pw").await;
    let builtin = "[[auth.providers]]\ntype = \"builtin\"\n".to_owned();
    let server = TestServer::start_on(&storage, &auth(&[plugin(library, ALLOWLIST), builtin])).await;
    for proto in BOTH {
        let login = |user: &str, password: &str| {
            Login::new(proto, server.port(), &id(user, proto)).user(user, password)
        };
        login("alice", "hunter2").connect().await;
        login("bob", "builder").connect().await;
        assert_eq!(login("alice", "hunter3").refused().await, proto.bad_credentials(), "wrong password");
        assert_eq!(login("mallory", "hunter2").refused().await, proto.not_authorized(), "blocked");
        // Not on the allow-list: the plugin answers next, and builtin decides.
        login("dave", "builtin-pw").connect().await;
        assert_eq!(login("dave", "hunter2").refused().await, proto.bad_credentials());
        assert_eq!(login("carol", "x").refused().await, proto.bad_credentials(), "nobody knows carol");
        let anonymous = Login::new(proto, server.port(), &id("anon", proto));
        assert_eq!(anonymous.refused().await, proto.not_authorized(), "anonymous access is off");
    }
}

#[tokio::test]
async fn the_rust_plugin_admits_refuses_and_passes_clients_on_to_builtin() {
    admits_refuses_and_passes_on(&rust_example()).await;
}

#[tokio::test]
async fn the_c_plugin_admits_refuses_and_passes_clients_on_to_builtin() {
    let dir = tempfile::tempdir().expect("temp dir");
    admits_refuses_and_passes_on(&c_example(dir.path())).await;
}

/// The ACL the plugin returned gates subscribe, publish and delivery. "Not delivered" is shown
/// with a marker: the publisher sends the forbidden message, then an allowed one over the same
/// connection; the receiver's next message must be the marker.
async fn enforces_the_plugins_acl(library: &Path) {
    let server = TestServer::start_with(&auth(&[plugin(library, ALLOWLIST)])).await;
    for proto in BOTH {
        let login = |user: &str, password: &str| {
            Login::new(proto, server.port(), &id(user, proto)).user(user, password)
        };
        let mut alice = login("alice", "hunter2").connect().await;
        let mut bob = login("bob", "builder").connect().await;

        // Subscribe: only filters that intersect a readable rule.
        assert_eq!(alice.subscribe("secret/#").await, proto.sub_refused());
        assert_eq!(alice.subscribe("sensors/bob/#").await, proto.sub_refused(), "%u is alice");
        alice.subscribe_ok("sensors/alice/#").await;
        alice.subscribe_ok("public/#").await;
        bob.subscribe_ok("#").await;

        // Publish: public/# is read-only for alice; her sensors are hers to write.
        assert_eq!(alice.publish("public/news", 1, false, b"forged").await, Some(proto.pub_refused()));
        alice.publish("sensors/alice/temp", 1, false, b"21.5").await;
        let got = bob.next_publish().await;
        assert_eq!((got.topic.as_str(), got.payload.as_slice()), ("sensors/alice/temp", &b"21.5"[..]));
        let own = alice.next_publish().await;
        assert_eq!(own.topic, "sensors/alice/temp");

        // Delivery: `+/news` is granted (it meets public/#), but a message on a topic alice
        // may not read does not reach her through it.
        alice.subscribe_ok("+/news").await;
        bob.publish("secret/news", 1, false, b"hidden").await;
        bob.publish("public/news", 1, false, b"marker").await;
        let next = alice.next_publish().await;
        assert_eq!((next.topic.as_str(), next.payload.as_slice()), ("public/news", &b"marker"[..]));
    }
}

#[tokio::test]
async fn the_rust_plugins_acl_is_enforced() {
    enforces_the_plugins_acl(&rust_example()).await;
}

#[tokio::test]
async fn the_c_plugins_acl_is_enforced() {
    let dir = tempfile::tempdir().expect("temp dir");
    enforces_the_plugins_acl(&c_example(dir.path())).await;
}

#[tokio::test]
async fn a_panicking_plugin_refuses_its_client_and_the_broker_keeps_serving() {
    let misbehaving = mesgd_plugin_testkit::cargo_cdylib("mesgd-test-plugin-misbehaving");
    let server =
        TestServer::start_with(&auth(&[plugin(&misbehaving, "config = { mode = \"panic-unless-good\" }")]))
            .await;
    for proto in BOTH {
        let login = |user: &str, n: u32| {
            Login::new(proto, server.port(), &format!("{user}-{n}-{proto:?}")).user(user, "pw")
        };
        for n in 0..3 {
            // A failing provider fails closed: not authorized.
            assert_eq!(login("bad", n).refused().await, proto.not_authorized());
            let mut good = login("good", n).connect().await;
            good.subscribe_ok("t").await;
        }
    }
}

#[tokio::test]
async fn a_library_of_another_abi_version_refuses_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = mesgd_plugin_testkit::workspace_root().join("plugins/host/tests/support/bad_plugin.c");
    let library = mesgd_plugin_testkit::cc_shared(&[&source], &["WRONG_MAJOR"], dir.path(), "abi2");
    let text = format!(
        "[storage]\ndir = {:?}\n[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n{}",
        dir.path().display().to_string(),
        auth(&[plugin(&library, "")])
    );
    let error = Server::start(Config::from_toml(&text, None).expect("config")).await.expect_err("refused");
    assert_eq!(
        error.to_string(),
        format!(
            "auth.providers[1] (type = \"plugin\"): {}: the plugin was built for plugin ABI 2.0, but this \
             mesgd speaks ABI 1.0; rebuild it against mesgd-plugin-api / mesgd_plugin.h of ABI 1.x",
            library.display()
        )
    );
}

#[tokio::test]
async fn mesgd_plugin_check_reports_what_a_plugin_author_needs() {
    let storage = Storage::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let rust = rust_example();
    let rust_path = rust.display().to_string();
    let (ok, out, err) = storage.run(&["plugin", "check", &rust_path], "").await;
    assert!(ok, "{err}");
    assert_eq!(
        out,
        format!(
            "library:  {rust_path}\nname:     allowlist\nversion:  0.1.0\nABI:      1.0 (this mesgd: 1.0)\nusable:   yes\n"
        )
    );

    let c = c_example(dir.path()).display().to_string();
    let (ok, out, _) = storage.run(&["plugin", "check", &c, "--plugin-config", r#"{"users": []}"#], "").await;
    assert!(ok);
    assert!(
        out.contains("name:     c-allowlist\n") && out.contains("create:   accepted the config\n"),
        "{out}"
    );
    let (ok, out, err) =
        storage.run(&["plugin", "check", &c, "--plugin-config", r#"{"users": 1}"#], "").await;
    assert!(!ok);
    assert!(out.contains("create:   refused the config: `users` and `blocked` must be arrays\n"), "{out}");
    assert!(err.contains("cannot be used as a plugin"), "{err}");

    let source = mesgd_plugin_testkit::workspace_root().join("plugins/host/tests/support/bad_plugin.c");
    let abi2 = mesgd_plugin_testkit::cc_shared(&[&source], &["WRONG_MAJOR"], dir.path(), "abi2");
    let (ok, out, err) = storage.run(&["plugin", "check", &abi2.display().to_string()], "").await;
    assert!(!ok);
    assert!(out.contains("usable:   no: ") && out.contains("built for plugin ABI 2.0"), "{out}");
    assert!(err.starts_with("mesgd: "), "{err}");
}
