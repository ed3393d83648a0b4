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
///
/// A span field's value in a directive (`[span{field=value}]`) is matched as the literal text
/// of the value, never compiled as a regular expression: tracing-subscriber's default compiles
/// it, and a `log.level` of 350 bytes found by fuzzing the config loader took over two minutes
/// and 750 MB to load (tracing-subscriber's own advice for filters from untrusted text).
pub fn filter(text: &str) -> Result<EnvFilter, String> {
    if !text.is_ascii() {
        return Err("has a character outside ASCII (levels and module paths are ASCII)".to_owned());
    }
    EnvFilter::builder().with_regex(false).parse(text).map_err(|e| e.to_string())
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

    /// Whether an event at debug level inside span `s` with `f = "abc"` passes `directives`.
    fn debug_passes_in_span(directives: &str) -> bool {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use tracing_subscriber::layer::SubscriberExt;

        struct Seen(Arc<AtomicBool>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Seen {
            fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let seen = Arc::new(AtomicBool::new(false));
        let filter = filter(directives).expect("a valid filter");
        let subscriber = tracing_subscriber::registry().with(filter).with(Seen(seen.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("s", f = "abc");
            span.in_scope(|| tracing::debug!("inside"));
        });
        seen.load(Ordering::Relaxed)
    }

    /// A field value in a directive is the value's literal text, not a regular expression: the
    /// fuzzer found values whose compilation took minutes.
    #[test]
    fn a_span_field_value_is_matched_literally_never_as_a_regular_expression() {
        assert!(debug_passes_in_span("warn,[s{f=\"abc\"}]=debug"), "the literal value matches");
        assert!(!debug_passes_in_span("warn,[s{f=a.*}]=debug"), "`a.*` is not a pattern");
        assert!(!debug_passes_in_span("warn,[s{f=\"xyz\"}]=debug"), "another value does not match");
    }
}
