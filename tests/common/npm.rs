//! The npm packages a test drives (a browser automation library, an OpenID provider), installed
//! from the committed lock file on first use, so that `cargo test --workspace` needs no step of
//! its own beyond Debian's `nodejs` and `npm` (`.ci/run` runs the same `npm ci` up front).

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// One install at a time within a test binary.
static INSTALL: Mutex<()> = Mutex::new(());

/// Makes sure `dir/node_modules/<probe>` exists, running `npm ci` in `dir` if it does not; panics
/// with what to do when npm is missing or the install fails.
pub fn ensure(dir: &Path, probe: &str) {
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if dir.join("node_modules").join(probe).is_dir() {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
        .arg(dir)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "`npm ci --prefix {}` could not start ({e}): install Debian's nodejs and npm",
                dir.display()
            )
        });
    assert!(status.success(), "`npm ci --prefix {}` failed ({status}): see its output above", dir.display());
    assert!(
        dir.join("node_modules").join(probe).is_dir(),
        "npm ci did not install {probe} in {}",
        dir.display()
    );
}
