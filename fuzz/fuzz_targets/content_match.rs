//! Fuzzes the indexed content matcher against each path's own `matches`. Input: listener
//! paths, one per line, a NUL byte, then the message.
//!
//! The body lives in mesgd-core so that a unit test replays `fuzz/corpus/content_match/` on a
//! stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::content::fuzzing::matcher_agrees_with_paths(data));
