//! Fuzzes the relay's TCP frame decoder the way a connection feeds it.
//!
//! The first input byte picks the frame limit (255: the TCP limit, otherwise 64 bytes per unit);
//! the rest is the byte stream. Frames are decoded one after the other until the stream ends or
//! an error. The target asserts that the decoder never panics, never returns a body over the
//! limit, consumes nothing while a frame is incomplete or refused, and consumes exactly the bytes
//! that re-encoding the body produces; each body also goes through the message parser. The
//! committed corpus (`fuzz/corpus/relay_frame`) is replayed with the same checks by the unit test
//! `relay::tests::corpus::relay_frame_corpus`; keep the two in step.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mesgd_core::relay::frame::{self, FrameError};
use mesgd_core::relay::parse;

fuzz_target!(|data: &[u8]| {
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
                let _ = parse(&body);
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
            Err(_) => break,
        }
    }
});
