//! Test support for mesgd's plugin tests: builds the plugin libraries that a test loads, so that
//! `cargo test` needs nothing prepared beforehand and no test depends on another having run.
//!
//! - [`cargo_cdylib`] builds a workspace package of `crate-type = ["cdylib"]` with the same
//!   cargo that runs the tests (and its target directory) and finds the library through
//!   `--message-format=json`, never by guessing the path.
//! - [`cc_shared`] compiles C sources into a shared library with the system C compiler (`$CC`,
//!   else `cc`), against `plugins/api/include`.
//!
//! Both panic with the tool's output when the build fails: they only run inside tests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The workspace root (the directory of the root `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").canonicalize().expect("workspace root exists")
}

/// The directory that holds `mesgd_plugin.h`.
pub fn include_dir() -> PathBuf {
    workspace_root().join("plugins/api/include")
}

/// The file name of a shared library called `stem` on this platform (`libstem.so` on Linux).
pub fn library_file_name(stem: &str) -> String {
    format!("{}{stem}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX)
}

/// Builds the cdylib of workspace package `package` (once per test process) and returns the
/// library's path.
pub fn cargo_cdylib(package: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    // Held across the build: two tests of one process asking for the same package build once.
    let mut built = built.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = built.get(package) {
        return path.clone();
    }
    let path = build_with_cargo(package);
    built.insert(package.to_owned(), path.clone());
    path
}

fn build_with_cargo(package: &str) -> PathBuf {
    // The cargo that runs the tests, so the nested build shares its toolchain and target dir.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let output = Command::new(cargo)
        .args(["build", "--quiet", "--message-format=json", "-p", package])
        .current_dir(workspace_root())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo build -p {package} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lib_name = package.replace('-', "_");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in stdout.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if message["reason"] != "compiler-artifact" || message["target"]["name"] != lib_name.as_str() {
            continue;
        }
        let is_cdylib =
            message["target"]["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"));
        if !is_cdylib {
            continue;
        }
        let suffix = std::env::consts::DLL_SUFFIX;
        if let Some(file) = message["filenames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(suffix))
        {
            return PathBuf::from(file);
        }
    }
    panic!("cargo build -p {package} reported no cdylib artifact:\n{stdout}");
}

/// Compiles `sources` with the system C compiler into `out_dir/lib{stem}.so` (per platform),
/// with `-D` for each of `defines`, and returns the library's path.
pub fn cc_shared(sources: &[&Path], defines: &[&str], out_dir: &Path, stem: &str) -> PathBuf {
    let output_path = out_dir.join(library_file_name(stem));
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let mut command = Command::new(compiler);
    command
        .args(["-shared", "-fPIC", "-O1", "-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(include_dir())
        .arg("-o")
        .arg(&output_path);
    for define in defines {
        command.arg(format!("-D{define}"));
    }
    command.args(sources);
    let output = command.output().expect("the C compiler runs (is `cc` installed?)");
    assert!(
        output.status.success(),
        "cc failed for {sources:?} {defines:?}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output_path
}
