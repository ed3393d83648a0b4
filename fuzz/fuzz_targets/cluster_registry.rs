//! Fuzzes the cluster session registry's formats: the client id → KV key escaping (injective,
//! canonical keys only), the record and takeover messages nodes exchange, and a persistent
//! session's record for recovery (never a panic, and what is read reads back the same).
//!
//! The body lives in mesgd-core (`cluster::fuzzing::registry_messages`) so that a unit test
//! replays `fuzz/corpus/cluster_registry/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::cluster::fuzzing::registry_messages(data));
