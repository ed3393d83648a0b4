//! The body of the `config_toml` fuzz target (`fuzz/fuzz_targets/config_toml.rs`), kept here
//! so that a unit test replays the committed seed corpus on a stable compiler. It panics when
//! it finds a bug and returns normally on any input otherwise.

use std::path::Path;

use super::{Config, ConfigError};

/// [`Config::from_toml`] on arbitrary text: never a panic; a refusal is a `Parse` or `Invalid`
/// error (never `Read`, which only files give) whose message names something; an accepted
/// configuration passes its own checks again (listener names are unique, paths resolve) and
/// loads the same way from a file path (only `base_dir` differs).
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Config::from_toml(text, None) {
        Ok(config) => {
            let names: std::collections::HashSet<String> =
                (0..config.listeners.len()).map(|i| config.listener_name(i)).collect();
            assert_eq!(names.len(), config.listeners.len(), "duplicate listener names accepted");
            assert!(!config.listeners.is_empty());
            let _ = config.storage_dir();
            let from_file = Config::from_toml(text, Some(Path::new("/etc/mesgd/mesgd.toml")))
                .expect("a configuration that loads without a file loads from one");
            assert_eq!(from_file.base_dir, Path::new("/etc/mesgd"));
        }
        Err(error @ (ConfigError::Parse { .. } | ConfigError::Invalid { .. })) => {
            assert!(!error.to_string().is_empty());
            assert!(Config::from_toml(text, Some(Path::new("/etc/mesgd/mesgd.toml"))).is_err());
        }
        Err(other) => panic!("text gave a file error: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn config_toml_corpus() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/config_toml");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut count = 0;
        for entry in entries {
            let file = entry.unwrap().path();
            let data = std::fs::read(&file).unwrap();
            if let Err(panic) = std::panic::catch_unwind(|| super::config_toml(&data)) {
                eprintln!("seed {} fails", file.display());
                std::panic::resume_unwind(panic);
            }
            count += 1;
        }
        assert!(count >= 5, "only {count} seeds in {}", dir.display());
    }

    #[test]
    fn the_reference_file_is_a_seed_that_loads() {
        let reference =
            std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/mesgd.toml")).unwrap();
        super::config_toml(&reference);
    }
}
