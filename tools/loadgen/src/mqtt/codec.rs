//! The MQTT 3.1.1 packets the generator sends and reads, encoded and decoded by hand.
//!
//! A client library would put its own event loop, in-flight bookkeeping and allocations per
//! packet between the load and the socket, and decide by itself when to write: the generator's
//! cost per message would be larger and unknown, and the window would no longer be the only
//! limit on what is in flight. The subset is small — CONNECT, SUBSCRIBE, PUBLISH, PUBACK out;
//! CONNACK, SUBACK, PUBLISH, PUBACK, PINGRESP in — and every packet is checked as it is read.

/// The largest packet accepted from a broker.
pub(crate) const MAX_PACKET: usize = 1 << 20;

/// What was wrong with a packet from the broker.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum MqttError {
    /// The remaining length took more than four bytes.
    #[error("malformed remaining length (more than 4 bytes)")]
    RemainingLength,
    /// The packet is longer than [`MAX_PACKET`].
    #[error("packet of {0} bytes, over the {MAX_PACKET}-byte limit")]
    TooLarge(usize),
    /// The packet ended before a field it must have.
    #[error("{0} packet too short")]
    Truncated(&'static str),
    /// A PUBLISH with QoS 3.
    #[error("PUBLISH with QoS 3")]
    BadQos,
    /// Fixed-header flags other than the ones the packet type requires.
    #[error("packet type {kind} with flags {flags:#x}")]
    BadFlags {
        /// The packet type.
        kind: u8,
        /// The flags found.
        flags: u8,
    },
}

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n % 128) as u8;
        n /= 128;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s);
}

/// Appends a CONNECT (3.1.1, clean session) with optional credentials.
pub(crate) fn put_connect(
    out: &mut Vec<u8>,
    client_id: &str,
    keep_alive: u16,
    username: Option<&str>,
    password: Option<&str>,
) {
    let mut flags = 0x02;
    if username.is_some() {
        flags |= 0x80;
        // 3.1.1 allows a password only with a username
        if password.is_some() {
            flags |= 0x40;
        }
    }
    let len = 10
        + 2
        + client_id.len()
        + username.map_or(0, |u| 2 + u.len())
        + username.and(password).map_or(0, |p| 2 + p.len());
    out.push(0x10);
    put_len(out, len);
    put_str(out, b"MQTT");
    out.push(4);
    out.push(flags);
    out.extend_from_slice(&keep_alive.to_be_bytes());
    put_str(out, client_id.as_bytes());
    if let Some(u) = username {
        put_str(out, u.as_bytes());
        if let Some(p) = password {
            put_str(out, p.as_bytes());
        }
    }
}

/// Appends a SUBSCRIBE for one filter.
pub(crate) fn put_subscribe(out: &mut Vec<u8>, packet_id: u16, filter: &str, qos: u8) {
    out.push(0x82);
    put_len(out, 2 + 2 + filter.len() + 1);
    out.extend_from_slice(&packet_id.to_be_bytes());
    put_str(out, filter.as_bytes());
    out.push(qos);
}

/// Appends a PUBLISH with a zeroed payload of `payload_len` bytes and returns the payload's
/// offset in `out`, for the caller to stamp. `packet_id` is used for QoS 1 only.
pub(crate) fn put_publish(
    out: &mut Vec<u8>,
    topic: &[u8],
    qos: u8,
    packet_id: u16,
    payload_len: usize,
) -> usize {
    out.push(0x30 | (qos << 1));
    put_len(out, 2 + topic.len() + if qos > 0 { 2 } else { 0 } + payload_len);
    put_str(out, topic);
    if qos > 0 {
        out.extend_from_slice(&packet_id.to_be_bytes());
    }
    let at = out.len();
    out.resize(at + payload_len, 0);
    at
}

/// Appends a PUBACK.
pub(crate) fn put_puback(out: &mut Vec<u8>, packet_id: u16) {
    out.extend_from_slice(&[0x40, 0x02]);
    out.extend_from_slice(&packet_id.to_be_bytes());
}

/// The length of the complete packet at the start of `buf`, or `None` if more bytes are needed.
pub(crate) fn packet_len(buf: &[u8]) -> Result<Option<usize>, MqttError> {
    let mut len = 0usize;
    for i in 1..=4 {
        let Some(&byte) = buf.get(i) else { return Ok(None) };
        len |= usize::from(byte & 0x7f) << (7 * (i - 1));
        if byte & 0x80 == 0 {
            let total = 1 + i + len;
            if total > MAX_PACKET {
                return Err(MqttError::TooLarge(total));
            }
            return Ok((buf.len() >= total).then_some(total));
        }
    }
    Err(MqttError::RemainingLength)
}

/// A packet from the broker.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Packet<'a> {
    /// CONNACK with its return code (0 = accepted).
    ConnAck {
        /// The return code.
        code: u8,
    },
    /// SUBACK with its return codes (0x80 = refused).
    SubAck {
        /// The packet id it answers.
        packet_id: u16,
        /// One code per filter.
        codes: &'a [u8],
    },
    /// PUBLISH.
    Publish {
        /// Its QoS.
        qos: u8,
        /// Its packet id (QoS > 0).
        packet_id: Option<u16>,
        /// Its topic.
        topic: &'a [u8],
        /// Its payload.
        payload: &'a [u8],
    },
    /// PUBACK.
    PubAck {
        /// The packet id it acknowledges.
        packet_id: u16,
    },
    /// PINGRESP.
    PingResp,
    /// Any other type, which a broker should not send this client.
    Other {
        /// The packet type (upper four bits of the first byte).
        kind: u8,
    },
}

/// Parses one complete packet (as delimited by [`packet_len`]).
pub(crate) fn parse(packet: &[u8]) -> Result<Packet<'_>, MqttError> {
    let first = packet.first().copied().ok_or(MqttError::Truncated("empty"))?;
    let head = 1 + packet[1..].iter().position(|b| b & 0x80 == 0).ok_or(MqttError::RemainingLength)? + 1;
    let body = packet.get(head..).ok_or(MqttError::Truncated("any"))?;
    let (kind, flags) = (first >> 4, first & 0x0f);
    let need_flags = |want: u8| if flags == want { Ok(()) } else { Err(MqttError::BadFlags { kind, flags }) };
    let u16_at = |i: usize, what| {
        body.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or(MqttError::Truncated(what))
    };
    match kind {
        2 => {
            need_flags(0)?;
            let code = *body.get(1).ok_or(MqttError::Truncated("CONNACK"))?;
            Ok(Packet::ConnAck { code })
        }
        3 => {
            let qos = (flags >> 1) & 3;
            if qos == 3 {
                return Err(MqttError::BadQos);
            }
            let topic_len = usize::from(u16_at(0, "PUBLISH")?);
            let topic = body.get(2..2 + topic_len).ok_or(MqttError::Truncated("PUBLISH"))?;
            let mut at = 2 + topic_len;
            let packet_id = if qos > 0 {
                at += 2;
                Some(u16_at(at - 2, "PUBLISH")?)
            } else {
                None
            };
            Ok(Packet::Publish { qos, packet_id, topic, payload: &body[at..] })
        }
        4 => {
            need_flags(0)?;
            Ok(Packet::PubAck { packet_id: u16_at(0, "PUBACK")? })
        }
        9 => {
            need_flags(0)?;
            let packet_id = u16_at(0, "SUBACK")?;
            Ok(Packet::SubAck { packet_id, codes: &body[2..] })
        }
        13 => Ok(Packet::PingResp),
        _ => Ok(Packet::Other { kind }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connect_bytes_as_the_specification_lays_them_out() {
        let mut out = Vec::new();
        put_connect(&mut out, "c1", 60, Some("u"), Some("pw"));
        let want: &[u8] = &[
            0x10, 21, 0, 4, b'M', b'Q', b'T', b'T', 4, 0xc2, 0, 60, 0, 2, b'c', b'1', 0, 1, b'u', 0, 2, b'p',
            b'w',
        ];
        assert_eq!(out, want);
        out.clear();
        put_connect(&mut out, "c1", 60, None, Some("ignored"));
        assert_eq!(out, [0x10, 14, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60, 0, 2, b'c', b'1']);
    }

    #[test]
    fn subscribe_publish_puback_bytes() {
        let mut out = Vec::new();
        put_subscribe(&mut out, 1, "a/#", 1);
        assert_eq!(out, [0x82, 8, 0, 1, 0, 3, b'a', b'/', b'#', 1]);
        out.clear();
        let at = put_publish(&mut out, b"t", 1, 0x0102, 3);
        out[at] = 9;
        assert_eq!(out, [0x32, 8, 0, 1, b't', 1, 2, 9, 0, 0]);
        out.clear();
        put_puback(&mut out, 7);
        assert_eq!(out, [0x40, 2, 0, 7]);
    }

    #[test]
    fn remaining_length_forms() {
        let mut out = Vec::new();
        put_publish(&mut out, b"t", 0, 0, 200);
        assert_eq!(&out[..3], &[0x30, 0xcb, 0x01]); // 203 = 0x4b | 0x80, 1
        assert_eq!(packet_len(&out), Ok(Some(out.len())));
        assert_eq!(packet_len(&out[..out.len() - 1]), Ok(None));
        assert_eq!(packet_len(&out[..2]), Ok(None));
    }

    #[test]
    fn malformed_packets() {
        type Case = (&'static [u8], Result<Option<usize>, MqttError>);
        let table: [Case; 5] = [
            (&[0x30, 0xff, 0xff, 0xff, 0xff, 0x01], Err(MqttError::RemainingLength)),
            (&[0x30, 0x80, 0x80, 0x80, 0x01], Err(MqttError::TooLarge(1 + 4 + (1 << 21)))),
            (&[0x30], Ok(None)),
            (&[], Ok(None)),
            (&[0xd0, 0x00], Ok(Some(2))),
        ];
        for (bytes, want) in table {
            assert_eq!(packet_len(bytes), want, "{bytes:?}");
        }
        let parse_table: [(&[u8], MqttError); 7] = [
            (&[0x20, 0x01, 0x00], MqttError::Truncated("CONNACK")),
            (&[0x21, 0x02, 0x00, 0x00], MqttError::BadFlags { kind: 2, flags: 1 }),
            (&[0x36, 0x03, 0x00, 0x01, b't'], MqttError::BadQos),
            (&[0x30, 0x02, 0x00, 0x05], MqttError::Truncated("PUBLISH")),
            (&[0x32, 0x03, 0x00, 0x01, b't'], MqttError::Truncated("PUBLISH")),
            (&[0x40, 0x01, 0x00], MqttError::Truncated("PUBACK")),
            (&[0x90, 0x01, 0x00], MqttError::Truncated("SUBACK")),
        ];
        for (bytes, want) in parse_table {
            assert_eq!(parse(bytes), Err(want), "{bytes:?}");
        }
    }

    #[test]
    fn parses_what_brokers_send() {
        assert_eq!(parse(&[0x20, 2, 0, 5]), Ok(Packet::ConnAck { code: 5 }));
        assert_eq!(parse(&[0x90, 3, 0, 1, 0x80]), Ok(Packet::SubAck { packet_id: 1, codes: &[0x80] }));
        assert_eq!(parse(&[0x40, 2, 1, 2]), Ok(Packet::PubAck { packet_id: 0x0102 }));
        assert_eq!(parse(&[0xd0, 0]), Ok(Packet::PingResp));
        assert_eq!(parse(&[0xe0, 0]), Ok(Packet::Other { kind: 14 }));
        // a retained, duplicate QoS 0 publish is still a publish
        assert_eq!(
            parse(&[0x39, 4, 0, 1, b't', b'p']),
            Ok(Packet::Publish { qos: 0, packet_id: None, topic: b"t", payload: b"p" })
        );
    }

    proptest! {
        #[test]
        fn publish_round_trips(topic in "[a-z/]{0,40}", qos in 0u8..2, pid: u16, len in 0usize..300) {
            let mut out = Vec::new();
            let at = put_publish(&mut out, topic.as_bytes(), qos, pid, len);
            out[at..].iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
            prop_assert_eq!(packet_len(&out), Ok(Some(out.len())));
            let Packet::Publish { qos: q, packet_id, topic: t, payload } = parse(&out).unwrap() else {
                return Err(TestCaseError::fail("not a publish"));
            };
            prop_assert_eq!(q, qos);
            prop_assert_eq!(packet_id, (qos > 0).then_some(pid));
            prop_assert_eq!(t, topic.as_bytes());
            prop_assert_eq!(payload.len(), len);
            prop_assert!(payload.iter().enumerate().all(|(i, &b)| b == i as u8));
        }

        #[test]
        fn any_bytes_are_refused_or_parsed_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Some(n)) = packet_len(&bytes) {
                let _ = parse(&bytes[..n]);
            }
        }
    }
}
