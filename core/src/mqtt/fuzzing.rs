//! The bodies of the MQTT codec fuzz targets (`fuzz/fuzz_targets/mqtt_decode.rs` and
//! `mqtt_roundtrip.rs`), kept here so that a unit test replays the committed seed corpora on a
//! stable compiler. Each function panics when it finds a bug and returns normally otherwise.
//!
//! # What "round trip" means
//!
//! Whatever decodes must encode, `encoded_len` must agree with the bytes written, and those
//! bytes must decode to an equal packet. The encoder is canonical and the decoder is not, so
//! byte equality is asserted on the encoder's side only: encoding the re-decoded packet gives
//! the same bytes again (one encode is a fixed point). The input bytes themselves may differ
//! from the re-encoding wherever MQTT gives one packet several spellings, all of which the
//! decoder accepts:
//!
//! - MQTT 5.0 properties in another order than the encoder's (the specification fixes none);
//! - MQTT 5.0 acknowledgements, DISCONNECT and AUTH that spell out a Success reason code or an
//!   empty property block the encoder leaves off, or that leave off after a reason code the
//!   empty property block the encoder writes;
//! - the 3.1 leniencies of the module documentation (DUP on QoS 0 PUBLISH and on PUBREL,
//!   SUBSCRIBE, UNSUBSCRIBE retries; announced but missing credentials; the reserved CONNACK
//!   byte);
//! - a CONNECT's unused fields after flags that make them meaningless (a will QoS of 0 and no
//!   will retain are the only spelling without a will, so there are none there).

use bytes::BytesMut;

use super::{Decoded, Packet, ProtocolVersion, Publish, decode, decode_into, encode, encoded_len};

/// Decodes `packet`'s encoding for `version` back and checks the round trip; returns the bytes.
fn check_round_trip(packet: &Packet, version: ProtocolVersion) -> BytesMut {
    let mut out = BytesMut::new();
    if let Err(e) = encode(packet, version, &mut out) {
        panic!("{packet:?} decoded but does not encode for {version:?}: {e}");
    }
    assert_eq!(encoded_len(packet, version), Ok(out.len()), "encoded_len disagrees for {packet:?}");
    let first = out.clone();
    let again_version = if matches!(packet, Packet::Connect(_)) { None } else { Some(version) };
    let again = decode(&mut out, again_version, u32::MAX);
    assert_eq!(again.as_ref(), Ok(&Some(packet.clone())), "re-encoded {packet:?} decodes differently");
    assert!(out.is_empty(), "re-encoded packet has {} trailing bytes", out.len());
    let mut twice = BytesMut::new();
    encode(packet, version, &mut twice).expect("encoded once");
    assert_eq!(first, twice, "the encoding of {packet:?} is not a fixed point");
    first
}

/// The decoder fed the way a connection feeds it. The first byte picks the starting state
/// (bits 0–1: before CONNECT, or a known 3.1 / 3.1.1 / 5.0 connection) and, with bit 2 set, a
/// small maximum packet size (bits 3–7 times 8); the rest is the byte stream. Packets are
/// decoded one after the other, a CONNECT setting the version for those after it, until the
/// stream ends or an error; each must round-trip.
pub fn decode_stream(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else { return };
    let mut version = match control & 0b11 {
        0 => None,
        1 => Some(ProtocolVersion::V31),
        2 => Some(ProtocolVersion::V311),
        _ => Some(ProtocolVersion::V5),
    };
    let max = if control & 0b100 == 0 { u32::MAX } else { u32::from(control >> 3) * 8 };
    let mut buf = BytesMut::from(stream);
    // Past CONNECT, packets are decoded as a connection does (`decode_into`, one PUBLISH slot
    // for the whole stream, holding the previous PUBLISH); a plain decode must agree.
    let mut slot = Publish::default();
    loop {
        let before = buf.len();
        let decoded = match version {
            None => decode(&mut buf, version, max),
            Some(v) => {
                let plain = decode(&mut buf.clone(), version, max);
                let into = decode_into(&mut buf, v, max, &mut slot).map(|d| {
                    d.map(|d| match d {
                        Decoded::Publish => Packet::Publish(slot.clone()),
                        Decoded::Other(packet) => packet,
                    })
                });
                assert_eq!(into, plain, "decode_into differs with a slot that held an earlier PUBLISH");
                into
            }
        };
        let packet = match decoded {
            Ok(Some(packet)) => packet,
            Ok(None) => {
                assert_eq!(buf.len(), before, "an incomplete packet was consumed");
                return;
            }
            Err(_) => return,
        };
        let packet_version = match (&packet, version) {
            (Packet::Connect(connect), _) => connect.protocol,
            (_, Some(v)) => v,
            (_, None) => panic!("{packet:?} decoded before the version was known"),
        };
        let consumed = before - buf.len();
        assert!(u32::try_from(consumed).is_ok_and(|n| n <= max), "a packet over the limit decoded");
        check_round_trip(&packet, packet_version);
        version = Some(packet_version);
    }
}

/// Structure-aware: the input describes one packet so that most inputs get past the framing
/// and exercise the body parsers. Byte 0: bits 0–1 the version (0 and 3: 5.0, 1: 3.1, 2:
/// 3.1.1), bits 4–7 the packet type; byte 1: the fixed header flags (low nibble). The rest is
/// the body; for a CONNECT the protocol name and level of the chosen version are put in front
/// of it. The fuzzer builds the fixed header with the right remaining length, decodes, and
/// checks the round trip. A packet that decodes to exactly its input bytes is canonical; the
/// others must be one of the spellings listed in the module documentation, which is checked
/// for the cases that can be told from the packet (see [`check_canonical`]).
pub fn round_trip(data: &[u8]) {
    let [control, flags, body @ ..] = data else { return };
    let version = match control & 0b11 {
        1 => ProtocolVersion::V31,
        2 => ProtocolVersion::V311,
        _ => ProtocolVersion::V5,
    };
    let packet_type = control >> 4;
    let mut payload = Vec::with_capacity(body.len() + 8);
    if packet_type == 1 {
        let name = version.protocol_name().as_bytes();
        payload.extend_from_slice(&(name.len() as u16).to_be_bytes());
        payload.extend_from_slice(name);
        payload.push(version.level());
    }
    payload.extend_from_slice(body);
    let Ok(len) = u32::try_from(payload.len()) else { return };
    let mut frame = BytesMut::with_capacity(payload.len() + 5);
    frame.extend_from_slice(&[packet_type << 4 | (flags & 0x0F)]);
    if super::encode_var_int(len, &mut frame).is_err() {
        return;
    }
    frame.extend_from_slice(&payload);
    let input = frame.clone();
    let decode_version = if packet_type == 1 { None } else { Some(version) };
    let Ok(Some(packet)) = decode(&mut frame, decode_version, u32::MAX) else { return };
    assert!(frame.is_empty(), "a whole frame decoded with {} bytes left", frame.len());
    let encoded = check_round_trip(&packet, version);
    check_canonical(&packet, version, &input, &encoded);
}

/// Where the input differs from the canonical encoding, it must be for one of the documented
/// reasons. The cases that need a look inside the bytes (property order, spelt-out defaults)
/// are recognised by length or by content: the same bytes in another order, or a longer input.
fn check_canonical(packet: &Packet, version: ProtocolVersion, input: &[u8], encoded: &[u8]) {
    if input == encoded {
        return;
    }
    if version == ProtocolVersion::V31 {
        return; // the 3.1 leniencies
    }
    if version.is_v5() {
        let mut a = input.to_vec();
        let mut b = encoded.to_vec();
        a.sort_unstable();
        b.sort_unstable();
        // Properties in another order: the same bytes, permuted.
        if a == b {
            return;
        }
        // Spelt-out defaults: the input is longer than the canonical form.
        if input.len() > encoded.len() {
            return;
        }
        // A reason code without the property length after it, which then is 0 (MQTT 5.0
        // 3.4.2.2.1, 3.14.2.2.1, 3.15.2.2.1): the encoder always writes the length after a
        // reason code.
        if omits_empty_properties_after_reason(input, encoded) {
            return;
        }
    }
    panic!(
        "{:?} for {version:?} decodes from {input:02X?} but encodes as {encoded:02X?}: an undocumented second spelling",
        packet.packet_type()
    );
}

/// Whether `encoded` is `input` with a zero property length appended after its reason code
/// (both with a one-byte remaining length, as these short packets have).
fn omits_empty_properties_after_reason(input: &[u8], encoded: &[u8]) -> bool {
    let with_reason = matches!(input.first().map(|b| b >> 4), Some(4..=7 | 14 | 15));
    with_reason
        && input.len() >= 3
        && encoded.len() == input.len() + 1
        && encoded[0] == input[0]
        && encoded[1] == input[1] + 1
        && encoded[2..input.len()] == input[2..]
        && encoded[input.len()] == 0
}
