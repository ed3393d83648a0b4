//! Fuzzes the TOML configuration loader: `Config::from_toml` on arbitrary text never panics and
//! refuses with a `ConfigError`.
//!
//! The body lives in the mesgd package (`config::fuzzing::config_toml`) so that a unit test
//! replays `fuzz/corpus/config_toml/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd::config::fuzzing::config_toml(data));
