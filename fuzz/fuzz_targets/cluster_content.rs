//! Fuzzes the reach header that carries a grant sender's patterns with a content message to
//! other nodes (never a panic, and what is read reads back the same).
//!
//! The body lives in mesgd-core (`cluster::fuzzing::content_reach`) so that a unit test
//! replays `fuzz/corpus/cluster_content/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::cluster::fuzzing::content_reach(data));
