//! The body of the `websocket_frames` fuzz target, here so that a unit test replays its seed
//! corpus (`fuzz/corpus/websocket_frames/`) on a stable compiler.

use bytes::BytesMut;

use super::{Decoder, Event};

/// The first byte picks the message limit (64 bytes per unit; 0: 64 KiB), the rest is a client's
/// byte stream, fed to a [`Decoder`] in pieces whose sizes the stream's own bytes choose. The
/// decoder must never panic, never return a message over the limit or a text that is not
/// UTF-8, never consume part of an incomplete frame, and hold no more than the limit.
pub fn decode_stream(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else { return };
    let max = if control == 0 { 64 * 1024 } else { usize::from(control) * 64 };
    let mut decoder = Decoder::new(max);
    let mut buf = BytesMut::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let step = (usize::from(rest[0]) % 17 + 1).min(rest.len());
        buf.extend_from_slice(&rest[..step]);
        rest = &rest[step..];
        loop {
            let before = buf.len();
            match decoder.decode(&mut buf) {
                Ok(Some(event)) => {
                    assert!(buf.len() < before, "an event consumed nothing");
                    match event {
                        Event::Text(t) => {
                            assert!(t.len() <= max);
                            assert!(std::str::from_utf8(&t).is_ok());
                        }
                        Event::Binary(b) => assert!(b.len() <= max),
                        Event::Ping(p) | Event::Pong(p) => assert!(p.len() <= 125),
                        Event::Close(Some(c)) => assert!(c.reason.len() <= 123),
                        Event::Close(None) => {}
                    }
                }
                Ok(None) => {
                    assert!(decoder.buffered() <= max, "a partial message over the limit");
                    break;
                }
                Err(_) => return,
            }
        }
    }
}
