//! Fuzzes the pattern compiler: it never panics, and a pattern it compiles matches its own
//! sample. Input: the sample as JSON, a NUL byte, then `FIELD=MODE` lines.
//!
//! The body lives in mesgd-core so that a unit test replays `fuzz/corpus/content_compile/` on a
//! stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::content::fuzzing::compiled_pattern_matches_sample(data));
