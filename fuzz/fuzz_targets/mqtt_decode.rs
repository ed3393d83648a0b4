//! Fuzzes the MQTT decoder the way a connection feeds it: the first byte picks the starting
//! state (before CONNECT, or a known 3.1 / 3.1.1 / 5.0 connection) and a maximum packet size,
//! the rest is the byte stream; every packet that decodes must round-trip.
//!
//! The body lives in mesgd-core (`mqtt::fuzzing::decode_stream`) so that a unit test replays
//! `fuzz/corpus/mqtt_decode/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::mqtt::fuzzing::decode_stream(data));
