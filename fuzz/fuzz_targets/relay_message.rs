//! Fuzzes the relay message parser with one frame per input.
//!
//! Asserts that parsing never panics and agrees with serde_json about what is valid JSON, that a
//! `send` forwards as a `deliver` carrying the same values serde_json reads from the frame, and
//! that a `pipe_data` forwards as a frame that parses back to the same members. The committed
//! corpus (`fuzz/corpus/relay_message`) is replayed with the same checks by the unit test
//! `relay::tests::corpus::relay_message_corpus`; keep the two in step.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mesgd_core::relay::{ClientMessage, DeliverKind, ParseError, ServerMessage, parse};
use serde::de::IgnoredAny;
use serde_json::Value;

/// The scanner's nesting limit (`relay::scan::MAX_DEPTH`).
const MAX_DEPTH: usize = 64;

#[path = "../../core/src/relay/tests/text_depth.rs"]
mod text_depth;
use text_depth::depth;

fuzz_target!(|data: &[u8]| {
    let oracle = serde_json::from_slice::<Value>(data);
    match parse(data) {
        Ok(message) => {
            assert!(serde_json::from_slice::<IgnoredAny>(data).is_ok(), "accepted invalid JSON");
            match message {
                ClientMessage::Send(send) => {
                    let mut out = BytesMut::new();
                    ServerMessage::Deliver(send.deliver("from", DeliverKind::Queued)).encode(&mut out);
                    let deliver: Value = serde_json::from_slice(&out).expect("deliver is JSON");
                    if let Ok(input) = &oracle {
                        assert_eq!(deliver["ct"], input["ct"]);
                        assert_eq!(deliver["pub"], input.get("pub").cloned().unwrap_or(Value::Null));
                        assert_eq!(
                            deliver.get("id").filter(|v| !v.is_null()),
                            input.get("id").filter(|v| !v.is_null())
                        );
                    }
                }
                ClientMessage::PipeData(data) => {
                    let mut out = BytesMut::new();
                    data.forward().encode(&mut out);
                    let Ok(ClientMessage::PipeData(again)) = parse(&out) else {
                        panic!("forwarded pipe_data does not parse")
                    };
                    assert_eq!(again.pipe_id, data.pipe_id);
                    assert_eq!(again.fields.to_vec(), data.fields.to_vec());
                }
                _ => {}
            }
        }
        Err(ParseError::InvalidJson { .. }) => {
            if let Ok(Value::Object(_)) = &oracle {
                assert!(depth(data) >= MAX_DEPTH, "refused a valid object");
            }
        }
        Err(_) => {
            let valid = serde_json::from_slice::<IgnoredAny>(data).is_ok();
            assert!(
                valid && data.trim_ascii_start().starts_with(b"{"),
                "a field error on something not an object"
            );
        }
    }
});
