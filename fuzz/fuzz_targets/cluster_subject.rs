//! Fuzzes the MQTT topic / filter → NATS subject mapping: parsing a subject never panics and
//! accepts only the canonical form, topics round-trip, and NATS matching of mapped filters is
//! MQTT matching.
//!
//! The body lives in mesgd-core (`cluster::fuzzing::subject_mapping`) so that a unit test
//! replays `fuzz/corpus/cluster_subject/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::cluster::fuzzing::subject_mapping(data));
