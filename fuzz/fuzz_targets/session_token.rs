//! Fuzzes the login-session (HS256 JWT) parser: any text never panics and never verifies.
//! Seeds: `fuzz/corpus/session_token`, which a stable unit test in `mesgd-providers` replays.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_providers::sessions::fuzzing::session_token(data));
