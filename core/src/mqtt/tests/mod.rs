//! Codec tests: byte vectors from the specifications, the malformed-input table, framing
//! (partial input, size limit, several packets per buffer) and round-trip properties.

mod encode_errors;
mod framing;
mod malformed;
mod roundtrip;
mod vectors;

use bytes::BytesMut;

use super::{DecodeError, Packet, ProtocolVersion, decode, encode, encoded_len};

/// Prepends a fixed header (first byte and remaining length) to `body`.
fn pkt(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    let mut len = body.len();
    loop {
        let mut byte = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            byte |= 0x80;
        }
        out.push(byte);
        if len == 0 {
            break;
        }
    }
    out.extend_from_slice(body);
    out
}

/// A property block: its length then its bytes (lengths below 128 only, enough for tests).
fn props(bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128);
    let mut out = vec![bytes.len() as u8];
    out.extend_from_slice(bytes);
    out
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Decodes `bytes` with no size limit.
fn try_decode(bytes: &[u8], version: Option<ProtocolVersion>) -> Result<Option<Packet>, DecodeError> {
    let mut buf = BytesMut::from(bytes);
    decode(&mut buf, version, u32::MAX)
}

/// Decodes exactly one whole packet from `bytes`.
fn decode_one(bytes: &[u8], version: Option<ProtocolVersion>) -> Packet {
    let mut buf = BytesMut::from(bytes);
    let packet = decode(&mut buf, version, u32::MAX)
        .unwrap_or_else(|e| panic!("decoding {bytes:02X?} failed: {e}"))
        .unwrap_or_else(|| panic!("decoding {bytes:02X?} wanted more bytes"));
    assert!(buf.is_empty(), "{} bytes left after decoding", buf.len());
    packet
}

/// Encodes `packet` for `version`, checking `encoded_len` agrees.
fn encode_vec(packet: &Packet, version: ProtocolVersion) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode(packet, version, &mut buf).unwrap_or_else(|e| panic!("encoding {packet:?} failed: {e}"));
    assert_eq!(encoded_len(packet, version), Ok(buf.len()));
    buf.to_vec()
}

/// The version argument `decode` needs for a packet of `version`: a CONNECT is what arrives
/// before the version is known.
fn decode_version(packet: &Packet, version: ProtocolVersion) -> Option<ProtocolVersion> {
    match packet {
        Packet::Connect(_) => None,
        _ => Some(version),
    }
}

/// Decodes packet after packet from `bytes` the way a connection would (the CONNECT sets the
/// version) and checks that every packet that decodes re-encodes to bytes that decode to the
/// same packet. Stops at the first error or incomplete packet. Returns how many decoded.
fn decode_reencode_all(bytes: &[u8], mut version: Option<ProtocolVersion>, max: u32) -> usize {
    let mut buf = BytesMut::from(bytes);
    let mut count = 0;
    while let Ok(Some(packet)) = decode(&mut buf, version, max) {
        let v = match (&packet, version) {
            (Packet::Connect(c), _) => c.protocol,
            (_, Some(v)) => v,
            (_, None) => unreachable!("only CONNECT decodes without a version"),
        };
        let mut out = BytesMut::new();
        encode(&packet, v, &mut out)
            .unwrap_or_else(|e| panic!("{packet:?} decoded but does not encode: {e}"));
        let again = decode(&mut out, decode_version(&packet, v), u32::MAX);
        assert_eq!(again, Ok(Some(packet)), "re-encoded packet decodes differently");
        assert!(out.is_empty());
        version = Some(v);
        count += 1;
    }
    count
}
