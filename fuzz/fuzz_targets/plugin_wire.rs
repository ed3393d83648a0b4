//! Fuzzes the plugin ABI's JSON boundary: the request and answer types round-trip what they
//! accept, and the host's check of a plugin's answer never panics and takes only valid answers.
//!
//! The body lives in mesgd-plugin-host (`provider::fuzzing::answer`) so that a unit test
//! replays `fuzz/corpus/plugin_wire/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_plugin_host::provider::fuzzing::answer(data));
