//! Fuzzes the jwt provider: arbitrary text as a token is never admitted unless it is really
//! HS256-signed with the configured secret, and the same text signed as claims is decided by
//! its claims alone (username, `acl` rules).
//!
//! The body lives in mesgd-providers (`jwt::fuzzing::token`) so that a unit test replays
//! `fuzz/corpus/jwt/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_providers::jwt::fuzzing::token(data));
