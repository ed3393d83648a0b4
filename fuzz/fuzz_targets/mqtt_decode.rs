//! Fuzzes the MQTT decoder the way a connection feeds it.
//!
//! The first input byte picks the starting state (before CONNECT, or a known 3.1 / 3.1.1 / 5.0
//! connection) and a maximum packet size; the rest is the byte stream. Packets are decoded one
//! after the other, a CONNECT setting the version for the ones after it, until the stream ends or
//! an error. The target asserts that the decoder never panics and that every packet it accepts
//! re-encodes to bytes that decode to the same packet.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mesgd_core::mqtt::{Packet, ProtocolVersion, decode, encode, encoded_len};

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let mut version = match control & 0b11 {
        0 => None,
        1 => Some(ProtocolVersion::V31),
        2 => Some(ProtocolVersion::V311),
        _ => Some(ProtocolVersion::V5),
    };
    // Mostly unlimited; sometimes a small limit, to exercise the early size check.
    let max = if control & 0b100 == 0 { u32::MAX } else { u32::from(control >> 3) * 8 };

    let mut buf = BytesMut::from(stream);
    while let Ok(Some(packet)) = decode(&mut buf, version, max) {
        let packet_version = match (&packet, version) {
            (Packet::Connect(connect), _) => connect.protocol,
            (_, Some(v)) => v,
            (_, None) => panic!("a packet other than CONNECT decoded before the version was known"),
        };
        let mut out = BytesMut::new();
        encode(&packet, packet_version, &mut out).expect("a decoded packet must encode");
        assert_eq!(encoded_len(&packet, packet_version), Ok(out.len()));
        let again_version = if matches!(packet, Packet::Connect(_)) { None } else { Some(packet_version) };
        let again = decode(&mut out, again_version, u32::MAX).expect("a re-encoded packet must decode");
        assert_eq!(again.as_ref(), Some(&packet), "re-encoded packet decodes differently");
        assert!(out.is_empty(), "re-encoded packet has trailing bytes");
        version = Some(packet_version);
    }
});
