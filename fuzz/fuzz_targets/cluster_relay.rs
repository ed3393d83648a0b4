//! Fuzzes the relay messages nodes exchange (`mesgd.relay.<node>`): requests and replies
//! (never a panic, and what is read encodes back to the same bytes).
//!
//! The body lives in mesgd-core (`cluster::fuzzing::relay_messages`) so that a unit test
//! replays `fuzz/corpus/cluster_relay/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::cluster::fuzzing::relay_messages(data));
