//! Shared helpers of the host's integration tests: building the plugin libraries, building a
//! chain from `[[p]]` tables as the broker would, connect attempts, and the captured log.

#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use mesgd_core::auth::{Chain, ConnectInfo, Protocol, Secret};
use mesgd_providers::{BuildContext, ConfigError, Registry};

/// The Rust example, built with cargo.
pub fn rust_example() -> PathBuf {
    mesgd_plugin_testkit::cargo_cdylib("mesgd-example-allowlist")
}

/// The misbehaving test plugin, built with cargo.
pub fn misbehaving() -> PathBuf {
    mesgd_plugin_testkit::cargo_cdylib("mesgd-test-plugin-misbehaving")
}

/// The C example, compiled into `dir`.
pub fn c_example(dir: &Path) -> PathBuf {
    let source = mesgd_plugin_testkit::workspace_root().join("plugins/examples/c-allowlist/allowlist.c");
    mesgd_plugin_testkit::cc_shared(&[&source], &[], dir, "c_allowlist")
}

/// `tests/support/bad_plugin.c` compiled into `dir` with `-D{define}` (or none).
pub fn bad_c_plugin(dir: &Path, define: Option<&str>) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/bad_plugin.c");
    let stem = format!("bad_{}", define.unwrap_or("none").to_lowercase());
    mesgd_plugin_testkit::cc_shared(&[&source], define.as_slice(), dir, &stem)
}

/// A `[[p]]` table loading the plugin at `path`, followed by `extra` lines.
pub fn entry(path: &Path, extra: &str) -> String {
    format!("[[p]]\ntype = \"plugin\"\npath = {:?}\n{extra}\n", path.display().to_string())
}

/// Builds a chain from `[[p]]` tables with a registry that knows only `plugin`.
pub fn chain(text: &str) -> Result<Chain, ConfigError> {
    #[derive(serde::Deserialize)]
    struct Doc {
        p: Vec<toml::Table>,
    }
    let tables = toml::from_str::<Doc>(text).expect("test TOML parses").p;
    let mut registry = Registry::new();
    mesgd_plugin_host::register(&mut registry);
    registry.build_chain(&tables, false, &mut BuildContext::new("/nonexistent-storage"))
}

/// The error text of a chain that must not build.
pub fn chain_error(text: &str) -> String {
    match chain(text) {
        Ok(_) => panic!("the chain was built:\n{text}"),
        Err(error) => error.to_string(),
    }
}

/// An MQTT 3.1.1 connect attempt.
pub fn connect(client_id: &str, username: Option<&str>, password: Option<&[u8]>) -> ConnectInfo {
    ConnectInfo::new(Protocol::Mqtt311, client_id, "mqtt")
        .with_username(username.map(str::to_owned))
        .with_password(password.map(Secret::new))
}

/// Everything logged in this test process so far (every level, no colours).
pub fn logs() -> String {
    let buffer = log_buffer();
    let bytes = buffer.lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Installs the capturing subscriber (once per process); call before the code that logs.
pub fn capture_logs() {
    log_buffer();
}

fn log_buffer() -> &'static Arc<Mutex<Vec<u8>>> {
    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUFFER.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
        buffer
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
