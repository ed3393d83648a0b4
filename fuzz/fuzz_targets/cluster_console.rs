//! Fuzzes the record of a console browser session in the cluster's bucket (never a panic, and
//! what is read reads back the same).
//!
//! The body lives in mesgd-core (`cluster::fuzzing::console_record`) so that a unit test
//! replays `fuzz/corpus/cluster_console/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::cluster::fuzzing::console_record(data));
