//! Replays the committed fuzz corpora (`fuzz/corpus/relay_frame`, `fuzz/corpus/relay_message`)
//! through the assertions of the fuzz targets, so that every stable test run checks them (the
//! frame replay also puts each body through the full message checks, not only the parser).
//! Keep [`check_frame_stream`] and [`check_message`] in step with
//! `fuzz/fuzz_targets/relay_frame.rs` and `relay_message.rs`.

use std::path::PathBuf;

use bytes::BytesMut;
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::relay::client::{ClientMessage, ParseError, parse};
use crate::relay::frame::{self, FrameError};
use crate::relay::scan::MAX_DEPTH;
use crate::relay::server::{DeliverKind, ServerMessage};
use crate::relay::tests::text_depth::depth;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            (path.display().to_string(), std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the {target} corpus is missing");
    files
}

/// The first byte picks the frame limit (255: the TCP limit; otherwise 64 bytes per unit), the
/// rest is the byte stream.
pub(super) fn check_frame_stream(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else { return };
    let max = if control == 255 { frame::MAX_TCP_FRAME } else { usize::from(control) * 64 };
    let mut buf = BytesMut::from(stream);
    loop {
        let before = buf.clone();
        match frame::decode(&mut buf, max) {
            Ok(Some(body)) => {
                assert!(body.len() <= max);
                let mut again = BytesMut::new();
                frame::encode(&body, &mut again);
                assert_eq!(&before[..before.len() - buf.len()], &again[..], "re-encoding differs");
                check_message(&body);
            }
            Ok(None) => {
                assert_eq!(buf, before, "an incomplete frame must not be consumed");
                break;
            }
            Err(FrameError::TooLarge { len, max: limit }) => {
                assert!(len as usize > limit);
                assert_eq!(buf, before);
                break;
            }
        }
    }
}

/// Parsing never panics and agrees with serde_json about validity; a `send` forwards as a
/// `deliver` with the same values and a `pipe_data` forwards as valid JSON with the same
/// members.
pub(super) fn check_message(data: &[u8]) {
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
                        panic!("forwarded pipe_data does not parse: {}", String::from_utf8_lossy(&out))
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
}

#[test]
fn relay_frame_corpus() {
    for (name, data) in corpus("relay_frame") {
        println!("{name}");
        check_frame_stream(&data);
    }
}

#[test]
fn relay_message_corpus() {
    for (name, data) in corpus("relay_message") {
        println!("{name}");
        check_message(&data);
    }
}
