use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::frame::{Opcode, decode_header, unmask};
use super::*;

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// A client frame: `first` is the FIN/RSV/opcode byte, the payload is masked with [`MASK`].
fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&MASK);
    let mut masked = payload.to_vec();
    unmask(&mut masked, MASK);
    out.extend_from_slice(&masked);
    out
}

fn decode_all(bytes: &[u8], max: usize) -> Result<Vec<Event>, WsError> {
    let mut decoder = Decoder::new(max);
    let mut buf = BytesMut::from(bytes);
    let mut events = Vec::new();
    while let Some(event) = decoder.decode(&mut buf)? {
        events.push(event);
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    Ok(events)
}

#[test]
fn the_rfc_examples_decode() {
    // RFC 6455 section 5.7: a masked "Hello" from a client, and the same fragmented.
    let hello = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
    assert_eq!(decode_all(&hello, 1024).unwrap(), vec![Event::Text(Bytes::from_static(b"Hello"))]);
    let mut fragmented = client_frame(0x01, b"Hel");
    fragmented.extend(client_frame(0x89, b"ping between fragments"));
    fragmented.extend(client_frame(0x80, b"lo"));
    assert_eq!(
        decode_all(&fragmented, 1024).unwrap(),
        vec![
            Event::Ping(Bytes::from_static(b"ping between fragments")),
            Event::Text(Bytes::from_static(b"Hello")),
        ]
    );
}

#[test]
fn every_payload_length_encoding_decodes() {
    for len in [0usize, 1, 125, 126, 127, 65_535, 65_536, 70_000] {
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let events = decode_all(&client_frame(0x82, &payload), 100_000).unwrap();
        assert_eq!(events, vec![Event::Binary(Bytes::from(payload))], "length {len}");
    }
}

#[test]
fn malformed_frames_are_refused_with_the_right_status() {
    let long_len = {
        let mut f = vec![0x82, 0x80 | 127];
        f.extend_from_slice(&(1u64 << 63).to_be_bytes());
        f.extend_from_slice(&MASK);
        f
    };
    let mut two_starts = client_frame(0x01, b"a");
    two_starts.extend(client_frame(0x81, b"b"));
    let mut close_1005 = vec![];
    close_1005.extend(client_frame(0x88, &1005u16.to_be_bytes()));
    let mut bad_reason = 1000u16.to_be_bytes().to_vec();
    bad_reason.extend_from_slice(&[0xff, 0xfe]);
    let cases: Vec<(&str, Vec<u8>, WsError, u16)> = vec![
        ("RSV1 set", client_frame(0xC1, b"x"), WsError::ReservedBits(0b100), 1002),
        ("RSV3 set", client_frame(0x91, b"x"), WsError::ReservedBits(0b001), 1002),
        ("opcode 3", client_frame(0x83, b"x"), WsError::ReservedOpcode(3), 1002),
        ("opcode 0xB", client_frame(0x8B, b""), WsError::ReservedOpcode(0xB), 1002),
        ("unmasked", vec![0x81, 0x01, b'x'], WsError::Unmasked, 1002),
        ("64-bit length top bit", long_len, WsError::LengthOverflow, 1002),
        ("ping of 126 bytes", client_frame(0x89, &[0; 126]), WsError::ControlTooLong(126), 1002),
        ("fragmented ping", client_frame(0x09, b""), WsError::FragmentedControl, 1002),
        ("continuation first", client_frame(0x80, b"x"), WsError::UnexpectedContinuation, 1002),
        ("new message mid-fragment", two_starts, WsError::ExpectedContinuation, 1002),
        ("text not UTF-8", client_frame(0x81, &[0xc3, 0x28]), WsError::TextNotUtf8, 1007),
        ("close of one byte", client_frame(0x88, &[3]), WsError::CloseTooShort, 1002),
        ("close status 1005", close_1005, WsError::InvalidCloseCode(1005), 1002),
        ("close status 999", client_frame(0x88, &999u16.to_be_bytes()), WsError::InvalidCloseCode(999), 1002),
        (
            "close status 5000",
            client_frame(0x88, &5000u16.to_be_bytes()),
            WsError::InvalidCloseCode(5000),
            1002,
        ),
        ("close reason not UTF-8", client_frame(0x88, &bad_reason), WsError::CloseReasonNotUtf8, 1007),
        (
            "message over the limit",
            client_frame(0x82, &[0; 65]),
            WsError::MessageTooLarge { len: 65, max: 64 },
            1009,
        ),
    ];
    for (name, bytes, want, code) in cases {
        let got = decode_all(&bytes, 64).expect_err(name);
        assert_eq!(got, want, "{name}");
        assert_eq!(got.close_code(), code, "{name}");
        assert!(!got.to_string().is_empty());
    }
}

#[test]
fn an_oversized_message_is_refused_from_its_header_alone() {
    // Only the header of a 1 GiB frame has arrived: refused now, not after buffering it.
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(1u64 << 30).to_be_bytes());
    header.extend_from_slice(&MASK);
    let mut decoder = Decoder::new(65_536);
    let err = decoder.decode(&mut BytesMut::from(&header[..])).unwrap_err();
    assert_eq!(err, WsError::MessageTooLarge { len: 1 << 30, max: 65_536 });
    // And fragments count together: two of 40 bytes are over a limit of 64.
    let mut two = client_frame(0x02, &[1; 40]);
    two.extend(client_frame(0x80, &[2; 40]));
    assert_eq!(decode_all(&two, 64).unwrap_err(), WsError::MessageTooLarge { len: 80, max: 64 });
}

#[test]
fn an_incomplete_frame_consumes_nothing() {
    let frame = client_frame(0x81, "héllo wörld".as_bytes());
    for cut in 0..frame.len() {
        let mut decoder = Decoder::new(1024);
        let mut buf = BytesMut::from(&frame[..cut]);
        assert_eq!(decoder.decode(&mut buf), Ok(None), "cut at {cut}");
        assert_eq!(buf.len(), cut, "cut at {cut}");
    }
}

#[test]
fn close_frames_carry_status_and_reason() {
    let mut payload = 1001u16.to_be_bytes().to_vec();
    payload.extend_from_slice("going away".as_bytes());
    assert_eq!(
        decode_all(&client_frame(0x88, &payload), 64).unwrap(),
        vec![Event::Close(Some(CloseFrame { code: 1001, reason: "going away".into() }))]
    );
    assert_eq!(decode_all(&client_frame(0x88, b""), 64).unwrap(), vec![Event::Close(None)]);
    for code in [1000, 1003, 1007, 1011, 1014, 3000, 4999] {
        assert!(decoder::is_valid_close_code(code), "{code}");
    }
    for code in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000] {
        assert!(!decoder::is_valid_close_code(code), "{code}");
    }
}

#[test]
fn server_frames_are_unmasked_with_the_shortest_length() {
    let mut out = BytesMut::new();
    encode_frame(Opcode::Text, b"Hello", &mut out);
    assert_eq!(&out[..], b"\x81\x05Hello", "RFC 6455 section 5.7");
    for (len, header) in [(125usize, 2usize), (126, 4), (65_535, 4), (65_536, 10)] {
        let mut out = BytesMut::new();
        encode_frame(Opcode::Binary, &vec![0; len], &mut out);
        assert_eq!(out.len(), header + len, "length {len}");
    }
    let mut close = BytesMut::new();
    encode_close(1009, &"é".repeat(100), &mut close);
    assert_eq!(&close[..4], &[0x88, 124, 0x03, 0xF1], "122 bytes of reason: 123 would split a character");
    assert!(std::str::from_utf8(&close[4..]).is_ok());
}

/// Turns a server frame into the client frame a browser would send with the same content.
fn as_client(server: &[u8]) -> Vec<u8> {
    let header = match server[1] {
        126 => 4,
        127 => 10,
        _ => 2,
    };
    let mut out = BytesMut::new();
    out.put_u8(server[0]);
    out.put_u8(server[1] | 0x80);
    out.put_slice(&server[2..header]);
    out.put_slice(&MASK);
    let mut payload = server[header..].to_vec();
    unmask(&mut payload, MASK);
    out.put_slice(&payload);
    out.to_vec()
}

proptest! {
    /// What the server encodes, masked as a client would, decodes to the same message, however
    /// the stream is cut.
    #[test]
    fn encoded_messages_decode_back(
        messages in proptest::collection::vec(("[a-zé€😀 ]{0,300}", any::<bool>()), 1..6),
        cut in 1usize..64,
    ) {
        let mut stream = Vec::new();
        for (text, binary) in &messages {
            let mut frame = BytesMut::new();
            let opcode = if *binary { Opcode::Binary } else { Opcode::Text };
            encode_frame(opcode, text.as_bytes(), &mut frame);
            stream.extend(as_client(&frame));
        }
        let mut decoder = Decoder::new(4096);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in stream.chunks(cut) {
            buf.extend_from_slice(piece);
            while let Some(event) = decoder.decode(&mut buf).unwrap() {
                got.push(event);
            }
        }
        let want: Vec<Event> = messages
            .iter()
            .map(|(t, binary)| {
                let b = Bytes::copy_from_slice(t.as_bytes());
                if *binary { Event::Binary(b) } else { Event::Text(b) }
            })
            .collect();
        prop_assert_eq!(got, want);
    }

    /// Unmasking is its own inverse and agrees with the byte-at-a-time definition.
    #[test]
    fn unmask_matches_the_definition(data in proptest::collection::vec(any::<u8>(), 0..100), mask: [u8; 4]) {
        let mut fast = data.clone();
        unmask(&mut fast, mask);
        let slow: Vec<u8> = data.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        prop_assert_eq!(&fast, &slow);
        unmask(&mut fast, mask);
        prop_assert_eq!(fast, data);
    }

    /// No input panics the header decoder; what it accepts re-reads the same length.
    #[test]
    fn headers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
        if let Ok(Some(h)) = decode_header(&bytes) {
            prop_assert!(h.header_len <= bytes.len());
            prop_assert!(h.header_len >= 6);
        }
    }
}
