//! The client side of WebSocket (RFC 6455), as far as a load generator needs it: the upgrade
//! handshake, masked frames out, unmasked frames in.
//!
//! Written here rather than taken from a library so that a message costs the generator one
//! buffer append and a mask, and so that frames can be queued in the same output buffer as any
//! other protocol's bytes (the tests check it against tokio-tungstenite's server).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha1::{Digest, Sha1};

/// Opcodes used here.
pub(crate) mod opcode {
    /// A continuation of a fragmented message.
    pub(crate) const CONTINUATION: u8 = 0x0;
    /// A text message.
    pub(crate) const TEXT: u8 = 0x1;
    /// A binary message.
    pub(crate) const BINARY: u8 = 0x2;
    /// Close.
    pub(crate) const CLOSE: u8 = 0x8;
    /// Ping.
    pub(crate) const PING: u8 = 0x9;
    /// Pong.
    pub(crate) const PONG: u8 = 0xA;
}

/// The longest handshake response accepted.
const MAX_RESPONSE_HEAD: usize = 16 * 1024;
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// What was wrong with the server's side of the conversation.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum WsError {
    /// The handshake response headers did not end within the size limit.
    #[error("the WebSocket handshake response has no end of headers within {MAX_RESPONSE_HEAD} bytes")]
    ResponseTooLong,
    /// The server answered the upgrade with another status.
    #[error("the server refused the WebSocket upgrade: {0}")]
    Refused(String),
    /// The response lacked a header the upgrade needs, or had a wrong value.
    #[error("the WebSocket handshake response has a missing or wrong `{0}` header")]
    BadHeader(&'static str),
    /// A frame from the server was masked (servers must not mask).
    #[error("the server sent a masked frame")]
    MaskedFrame,
    /// Reserved bits set, or an opcode RFC 6455 does not define.
    #[error("the server sent a frame with reserved bits or opcode {0:#x}")]
    BadFrame(u8),
    /// A control frame over 125 bytes or fragmented.
    #[error("the server sent an invalid control frame")]
    BadControl,
    /// A frame (or reassembled message) longer than the limit.
    #[error("the server sent a WebSocket message of {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// The announced length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// A continuation without a message to continue, or a new message in the middle of one.
    #[error("the server sent a fragment out of order")]
    Fragmentation,
}

/// A fresh `Sec-WebSocket-Key` (16 random bytes in base64; randomness, not secrecy, is needed).
pub(crate) fn new_key() -> String {
    let mut bytes = [0u8; 16];
    fastrand::fill(&mut bytes);
    STANDARD.encode(bytes)
}

/// The `Sec-WebSocket-Accept` a server must answer `key` with.
pub(crate) fn accept_for(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(GUID.as_bytes());
    STANDARD.encode(sha.finalize())
}

/// The upgrade request for `path` on `host`, with extra headers (e.g. `Authorization`).
pub(crate) fn upgrade_request(host: &str, path: &str, key: &str, extra: &[(String, String)]) -> Vec<u8> {
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
    );
    for (name, value) in extra {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    req.into_bytes()
}

/// Checks the handshake response at the start of `buf`: `Ok(None)` until its headers are
/// complete, then `Ok(Some(n))` with `n` the length of the response head (bytes after it are
/// already WebSocket frames).
pub(crate) fn check_response(buf: &[u8], key: &str) -> Result<Option<usize>, WsError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_RESPONSE_HEAD { Err(WsError::ResponseTooLong) } else { Ok(None) };
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.split_ascii_whitespace().nth(1) != Some("101") {
        return Err(WsError::Refused(status.chars().take(200).collect()));
    }
    let (mut upgrade, mut connection, mut accept) = (false, false, false);
    let want = accept_for(key);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "upgrade" => upgrade = value.eq_ignore_ascii_case("websocket"),
            "connection" => connection = value.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")),
            "sec-websocket-accept" => accept = value == want,
            _ => {}
        }
    }
    if !upgrade {
        return Err(WsError::BadHeader("Upgrade"));
    }
    if !connection {
        return Err(WsError::BadHeader("Connection"));
    }
    if !accept {
        return Err(WsError::BadHeader("Sec-WebSocket-Accept"));
    }
    Ok(Some(end + 4))
}

/// Appends one final, masked client frame.
pub(crate) fn put_frame(out: &mut Vec<u8>, op: u8, payload: &[u8], mask: [u8; 4]) {
    out.push(0x80 | op);
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len <= usize::from(u16::MAX) {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(&mask);
    let start = out.len();
    out.extend_from_slice(payload);
    for (i, b) in out[start..].iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

/// One frame from the server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    /// Whether this frame ends its message.
    pub(crate) fin: bool,
    /// Its opcode.
    pub(crate) op: u8,
    /// Its payload.
    pub(crate) payload: &'a [u8],
    /// Its length on the wire, header included.
    pub(crate) wire_len: usize,
}

/// Reads the server frame at the start of `buf`: `Ok(None)` while incomplete.
pub(crate) fn read_frame(buf: &[u8], max: usize) -> Result<Option<Frame<'_>>, WsError> {
    let [b0, b1, ..] = *buf else { return Ok(None) };
    let op = b0 & 0x0f;
    if b0 & 0x70 != 0 || !matches!(op, 0x0..=0x2 | 0x8..=0xA) {
        return Err(WsError::BadFrame(op));
    }
    if b1 & 0x80 != 0 {
        return Err(WsError::MaskedFrame);
    }
    let (len, head) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => (u64::from_be_bytes(b.try_into().expect("8 bytes")), 10),
            None => return Ok(None),
        },
        n => (u64::from(n), 2),
    };
    let fin = b0 & 0x80 != 0;
    if op >= 0x8 && (len > 125 || !fin) {
        return Err(WsError::BadControl);
    }
    if len > max as u64 {
        return Err(WsError::TooLarge { len, max });
    }
    let total = head + len as usize;
    match buf.get(head..total) {
        Some(payload) => Ok(Some(Frame { fin, op, payload, wire_len: total })),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accept_of_the_rfc_example() {
        assert_eq!(accept_for("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn handshake_responses() {
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let good: &[u8] =
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n\
                    Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi";
        assert_eq!(check_response(good, key), Ok(Some(good.len() - 4)));
        assert_eq!(check_response(&good[..40], key), Ok(None));
        let cases = [
            (
                "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n",
                WsError::Refused("HTTP/1.1 401 Unauthorized".into()),
            ),
            (
                "HTTP/1.1 101 OK\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                WsError::BadHeader("Upgrade"),
            ),
            (
                "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                WsError::BadHeader("Connection"),
            ),
            (
                "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: nope\r\n\r\n",
                WsError::BadHeader("Sec-WebSocket-Accept"),
            ),
        ];
        for (resp, want) in cases {
            assert_eq!(check_response(resp.as_bytes(), key), Err(want), "{resp}");
        }
        assert_eq!(check_response(&vec![b'a'; MAX_RESPONSE_HEAD + 1], key), Err(WsError::ResponseTooLong));
    }

    #[test]
    fn client_frames_are_masked_with_the_right_length_form() {
        for (len, head) in [(5usize, 2 + 4), (125, 2 + 4), (126, 4 + 4), (65535, 4 + 4), (65536, 10 + 4)] {
            let payload = vec![b'a'; len];
            let mut out = Vec::new();
            put_frame(&mut out, opcode::TEXT, &payload, [1, 2, 3, 4]);
            assert_eq!(out.len(), head + len, "{len}");
            assert_eq!(out[0], 0x81);
            assert_eq!(out[1] & 0x80, 0x80);
            let unmasked: Vec<u8> =
                out[head..].iter().enumerate().map(|(i, b)| b ^ [1, 2, 3, 4][i % 4]).collect();
            assert_eq!(unmasked, payload);
        }
    }

    #[test]
    fn server_frames() {
        assert_eq!(
            read_frame(b"\x81\x02hiXX", 100),
            Ok(Some(Frame { fin: true, op: opcode::TEXT, payload: b"hi", wire_len: 4 }))
        );
        assert_eq!(read_frame(b"\x81\x05hi", 100), Ok(None));
        assert_eq!(read_frame(b"\x81", 100), Ok(None));
        assert_eq!(read_frame(b"\x81\x7e\x00", 100), Ok(None));
        let mut long = vec![0x82, 126, 0x01, 0x00];
        long.extend(std::iter::repeat_n(7u8, 256));
        assert_eq!(read_frame(&long, 1000).unwrap().unwrap().payload.len(), 256);
        let malformed: [(&[u8], WsError); 6] = [
            (b"\x81\x82abcdhi", WsError::MaskedFrame),
            (b"\xc1\x00", WsError::BadFrame(1)),
            (b"\x83\x00", WsError::BadFrame(3)),
            (b"\x09\x00", WsError::BadControl),
            (b"\x89\x7e\x00\x80", WsError::BadControl),
            (b"\x82\x7f\x00\x00\x00\x01\x00\x00\x00\x00", WsError::TooLarge { len: 1 << 32, max: 100 }),
        ];
        for (bytes, want) in malformed {
            assert_eq!(read_frame(bytes, 100), Err(want), "{bytes:?}");
        }
    }

    proptest! {
        #[test]
        fn read_frame_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Some(f)) = read_frame(&bytes, 1 << 20) {
                prop_assert!(f.wire_len <= bytes.len());
            }
        }

        #[test]
        fn check_response_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = check_response(&bytes, "k");
        }
    }
}
