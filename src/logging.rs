//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG` if set, else by `log.level`.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Safe to call more than once (later calls do nothing).
pub fn init(level: &str) {
    // A RUST_LOG that is not a valid filter is ignored, as tracing-subscriber's own
    // `try_from_default_env` does; `level` was checked when the config was loaded.
    let filter = std::env::var(EnvFilter::DEFAULT_ENV)
        .ok()
        .and_then(|text| filter(&text).ok())
        .or_else(|| filter(level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    // Colour only for a person at a terminal; log files and pipes get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// `text` as a log filter (`info`, `mesgd=debug,warn`, ...), or why it is not one.
///
/// Text with a character outside ASCII is refused before tracing-subscriber reads it: its
/// directive parser (0.3.23) panics on some such text (`" xé[{2]*2"` slices inside the `é`),
/// found by fuzzing the config loader. Levels, module paths and span names are ASCII.
pub fn filter(text: &str) -> Result<EnvFilter, String> {
    if !text.is_ascii() {
        return Err("has a character outside ASCII (levels and module paths are ASCII)".to_owned());
    }
    text.parse::<EnvFilter>().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::filter;

    #[test]
    fn filters_are_parsed_and_non_ascii_is_refused_without_a_panic() {
        for good in ["info", "warn,mesgd=debug", "mesgd_cluster=trace", ""] {
            assert!(filter(good).is_ok(), "{good:?}");
        }
        for bad in [" xé[{2]*2", "é", "mesgd=débug", "a[{=]"] {
            assert!(filter(bad).is_err(), "{bad:?}");
        }
    }
}
