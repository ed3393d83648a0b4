//! Fuzzes listener path parsing: any text parses or is refused without a panic, and a parsed
//! path's canonical text parses back to the same path.
//!
//! The body lives in mesgd-core so that a unit test replays `fuzz/corpus/content_path/` on a
//! stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::content::fuzzing::path_round_trip(data));
