//! Fuzzes the server side of the WebSocket framing the way a connection feeds it: a client's
//! byte stream in pieces, frame after frame, under a message limit.
//!
//! The body lives in mesgd-core (`websocket::fuzzing::decode_stream`) so that a unit test
//! replays `fuzz/corpus/websocket_frames/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::websocket::fuzzing::decode_stream(data));
