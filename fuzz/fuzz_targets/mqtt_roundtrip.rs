//! Structure-aware MQTT round trip: the input picks a version and a packet type and is the
//! body; the target frames it (and puts the protocol name and level in front of a CONNECT), so
//! most inputs reach the body parsers. What decodes must encode, decode back to an equal packet
//! and encode to the same bytes again; where the input's bytes differ from the encoding it must
//! be for one of the documented second spellings.
//!
//! The body lives in mesgd-core (`mqtt::fuzzing::round_trip`) so that a unit test replays
//! `fuzz/corpus/mqtt_roundtrip/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::mqtt::fuzzing::round_trip(data));
