//! Fuzzes the `/auth` request bodies (login, grant issue): parsing any bytes never panics.
//! Seeds: `fuzz/corpus/auth_body`, which a stable unit test in `mesgd` also replays.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd::accounts::body::fuzz(data));
