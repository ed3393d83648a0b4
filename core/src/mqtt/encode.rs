//! Packets to bytes.
//!
//! Each packet body is described once, generically over a [`Sink`]: a counting pass computes
//! the remaining length (and refuses what the decoder would refuse), then the same description
//! writes straight into the caller's buffer after a single `reserve`.

use bytes::{BufMut, BytesMut};

use super::error::EncodeError;
use super::packet::{
    Auth, ConnAck, Connect, Disconnect, Packet, PacketType, ProtocolVersion, PubResponse, Publish, QoS,
    SubAck, Subscribe, UnsubAck, Unsubscribe,
};
use super::properties::put_block;
use super::reason::ReasonCode;
use super::wire::{Counter, MAX_VAR_INT, Sink, encode_var_int, var_int_len};

/// Appends the encoding of `packet` for `version` to `buf`.
///
/// Fields the version cannot carry (properties, reason codes in 3.x) are left out; a 3.x CONNACK
/// carries [`ReasonCode::v3_connack_return_code`], a 3.x SUBACK turns every error code into 0x80.
/// 5.0 acknowledgements with success and no properties use the short form. A CONNECT is encoded
/// for its own `protocol`, which must equal `version`.
///
/// On error nothing is appended.
pub fn encode(packet: &Packet, version: ProtocolVersion, buf: &mut BytesMut) -> Result<(), EncodeError> {
    let remaining = body_len(packet, version)?;
    let remaining_u32 = remaining as u32; // body_len refused anything above MAX_VAR_INT
    buf.reserve(1 + var_int_len(remaining_u32) + remaining);
    buf.put_u8(first_byte(packet));
    encode_var_int(remaining_u32, buf)?;
    let start = buf.len();
    body(packet, version, buf);
    debug_assert_eq!(buf.len() - start, remaining, "counting and writing passes disagree");
    Ok(())
}

/// Appends a PUBLISH without properties (a 5.0 one carries an empty property block), as
/// [`encode`] would write the equivalent [`Publish`], but without building one: the broker sends
/// most messages this way, once per subscriber, so skipping the intermediate packet matters.
/// `topic` must be a valid topic name (the broker's `TopicName` guarantees it).
#[allow(clippy::too_many_arguments)]
pub fn encode_plain_publish(
    version: ProtocolVersion,
    dup: bool,
    qos: QoS,
    retain: bool,
    topic: &str,
    packet_id: Option<u16>,
    payload: &[u8],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    if packet_id.is_some() != (qos != QoS::AtMostOnce) {
        return Err(EncodeError::PacketIdDoesNotMatchQoS(qos));
    }
    if packet_id == Some(0) {
        return Err(EncodeError::ZeroPacketId);
    }
    if dup && qos == QoS::AtMostOnce {
        return Err(EncodeError::DupOnQoS0);
    }
    if topic.len() > usize::from(u16::MAX) {
        return Err(EncodeError::StringTooLong(topic.len()));
    }
    let remaining =
        2 + topic.len() + packet_id.map_or(0, |_| 2) + usize::from(version.is_v5()) + payload.len();
    let remaining_u32 = u32::try_from(remaining)
        .ok()
        .filter(|&r| r <= MAX_VAR_INT)
        .ok_or(EncodeError::PacketTooLarge(remaining))?;
    buf.reserve(1 + var_int_len(remaining_u32) + remaining);
    buf.put_u8(0x30 | (u8::from(dup) << 3) | ((qos as u8) << 1) | u8::from(retain));
    encode_var_int(remaining_u32, buf)?;
    buf.put_u16(topic.len() as u16);
    buf.put_slice(topic.as_bytes());
    if let Some(id) = packet_id {
        buf.put_u16(id);
    }
    if version.is_v5() {
        buf.put_u8(0);
    }
    buf.put_slice(payload);
    Ok(())
}

/// The number of bytes [`encode`] would append, fixed header included: what a server compares
/// with the client's Maximum Packet Size before sending.
pub fn encoded_len(packet: &Packet, version: ProtocolVersion) -> Result<usize, EncodeError> {
    let remaining = body_len(packet, version)?;
    Ok(1 + var_int_len(remaining as u32) + remaining)
}

fn body_len(packet: &Packet, version: ProtocolVersion) -> Result<usize, EncodeError> {
    let mut counter = Counter::default();
    body(packet, version, &mut counter);
    let len = counter.finish()?;
    if len > MAX_VAR_INT as usize {
        return Err(EncodeError::PacketTooLarge(len));
    }
    Ok(len)
}

fn first_byte(packet: &Packet) -> u8 {
    let flags = match packet {
        Packet::Publish(p) => u8::from(p.dup) << 3 | (p.qos as u8) << 1 | u8::from(p.retain),
        Packet::PubRel(_) | Packet::Subscribe(_) | Packet::Unsubscribe(_) => 0b0010,
        _ => 0,
    };
    (packet.packet_type() as u8) << 4 | flags
}

fn body<S: Sink>(packet: &Packet, v: ProtocolVersion, s: &mut S) {
    match packet {
        Packet::Connect(c) => connect(c, v, s),
        Packet::ConnAck(c) => connack(c, v, s),
        Packet::Publish(p) => publish(p, v, s),
        Packet::PubAck(a) => pub_response(a, PacketType::PubAck, v, s),
        Packet::PubRec(a) => pub_response(a, PacketType::PubRec, v, s),
        Packet::PubRel(a) => pub_response(a, PacketType::PubRel, v, s),
        Packet::PubComp(a) => pub_response(a, PacketType::PubComp, v, s),
        Packet::Subscribe(p) => subscribe(p, v, s),
        Packet::SubAck(a) => suback(a, v, s),
        Packet::Unsubscribe(p) => unsubscribe(p, v, s),
        Packet::UnsubAck(a) => unsuback(a, v, s),
        Packet::PingReq | Packet::PingResp => {}
        Packet::Disconnect(d) => disconnect(d, v, s),
        Packet::Auth(a) => auth(a, v, s),
    }
}

fn packet_id<S: Sink>(id: u16, s: &mut S) {
    if id == 0 {
        s.fail(EncodeError::ZeroPacketId);
    }
    s.u16(id);
}

fn check_reason<S: Sink>(code: ReasonCode, packet_type: PacketType, s: &mut S) {
    if !code.is_allowed_in(packet_type) {
        s.fail(EncodeError::InvalidReasonCode { packet_type, code });
    }
}

fn connect<S: Sink>(c: &Connect, v: ProtocolVersion, s: &mut S) {
    if c.protocol != v {
        s.fail(EncodeError::VersionMismatch { connect: c.protocol, requested: v });
    }
    if c.password.is_some() && c.username.is_none() && !v.is_v5() {
        s.fail(EncodeError::PasswordWithoutUsername);
    }
    let mut flags = 0u8;
    if c.clean_start {
        flags |= 0x02;
    }
    if let Some(will) = &c.will {
        flags |= 0x04 | (will.qos as u8) << 3;
        if will.retain {
            flags |= 0x20;
        }
    }
    if c.password.is_some() {
        flags |= 0x40;
    }
    if c.username.is_some() {
        flags |= 0x80;
    }
    s.str(v.protocol_name());
    s.u8(v.level());
    s.u8(flags);
    s.u16(c.keep_alive);
    if v.is_v5() {
        put_block(s, &c.properties);
    }
    s.str(&c.client_id);
    if let Some(will) = &c.will {
        if v.is_v5() {
            put_block(s, &will.properties);
        }
        s.str(&will.topic);
        s.binary(&will.payload);
    }
    if let Some(username) = &c.username {
        s.str(username);
    }
    if let Some(password) = &c.password {
        s.binary(password);
    }
}

fn connack<S: Sink>(c: &ConnAck, v: ProtocolVersion, s: &mut S) {
    check_reason(c.reason_code, PacketType::ConnAck, s);
    if c.session_present && c.reason_code != ReasonCode::Success {
        s.fail(EncodeError::SessionPresentOnRefusal);
    }
    // 3.1 has no session present flag: the byte is reserved.
    let session_present = c.session_present && v != ProtocolVersion::V31;
    s.u8(u8::from(session_present));
    if v.is_v5() {
        s.u8(c.reason_code.code());
        put_block(s, &c.properties);
    } else {
        s.u8(c.reason_code.v3_connack_return_code());
    }
}

fn publish<S: Sink>(p: &Publish, v: ProtocolVersion, s: &mut S) {
    if p.dup && p.qos == QoS::AtMostOnce && v != ProtocolVersion::V31 {
        s.fail(EncodeError::DupOnQoS0);
    }
    s.str(&p.topic);
    match (p.qos, p.packet_id) {
        (QoS::AtMostOnce, None) => {}
        (QoS::AtLeastOnce | QoS::ExactlyOnce, Some(id)) => packet_id(id, s),
        (qos, _) => s.fail(EncodeError::PacketIdDoesNotMatchQoS(qos)),
    }
    if v.is_v5() {
        put_block(s, &p.properties);
    }
    s.raw(&p.payload);
}

fn pub_response<S: Sink>(a: &PubResponse, packet_type: PacketType, v: ProtocolVersion, s: &mut S) {
    check_reason(a.reason_code, packet_type, s);
    packet_id(a.packet_id, s);
    if v.is_v5() {
        let has_properties = !a.properties.is_empty();
        if a.reason_code != ReasonCode::Success || has_properties {
            s.u8(a.reason_code.code());
        }
        if has_properties {
            put_block(s, &a.properties);
        }
    }
}

fn subscribe<S: Sink>(p: &Subscribe, v: ProtocolVersion, s: &mut S) {
    if p.filters.is_empty() {
        s.fail(EncodeError::NoTopicFilters(PacketType::Subscribe));
    }
    packet_id(p.packet_id, s);
    if v.is_v5() {
        put_block(s, &p.properties);
    }
    for (filter, options) in &p.filters {
        s.str(filter);
        s.u8(options.to_byte(v));
    }
}

fn suback<S: Sink>(a: &SubAck, v: ProtocolVersion, s: &mut S) {
    packet_id(a.packet_id, s);
    if v.is_v5() {
        put_block(s, &a.properties);
    }
    for &code in &a.reason_codes {
        check_reason(code, PacketType::SubAck, s);
        // 3.x knows only the granted QoS and 0x80 "failure".
        s.u8(if code.is_error() && !v.is_v5() { 0x80 } else { code.code() });
    }
}

fn unsubscribe<S: Sink>(p: &Unsubscribe, v: ProtocolVersion, s: &mut S) {
    if p.filters.is_empty() {
        s.fail(EncodeError::NoTopicFilters(PacketType::Unsubscribe));
    }
    packet_id(p.packet_id, s);
    if v.is_v5() {
        put_block(s, &p.properties);
    }
    for filter in &p.filters {
        s.str(filter);
    }
}

fn unsuback<S: Sink>(a: &UnsubAck, v: ProtocolVersion, s: &mut S) {
    packet_id(a.packet_id, s);
    for &code in &a.reason_codes {
        check_reason(code, PacketType::UnsubAck, s);
    }
    if v.is_v5() {
        put_block(s, &a.properties);
        for &code in &a.reason_codes {
            s.u8(code.code());
        }
    }
}

fn disconnect<S: Sink>(d: &Disconnect, v: ProtocolVersion, s: &mut S) {
    check_reason(d.reason_code, PacketType::Disconnect, s);
    if v.is_v5() {
        // With a reason code, the property length goes out too (0 when empty). §3.14.2.2.1 lets
        // it be left out, but clients in the wild (rumqttc among them) then drop the packet and
        // never learn why they were disconnected.
        if d.reason_code != ReasonCode::NormalDisconnection || !d.properties.is_empty() {
            s.u8(d.reason_code.code());
            put_block(s, &d.properties);
        }
    }
}

fn auth<S: Sink>(a: &Auth, v: ProtocolVersion, s: &mut S) {
    if !v.is_v5() {
        s.fail(EncodeError::NotInVersion { packet_type: PacketType::Auth, version: v });
    }
    check_reason(a.reason_code, PacketType::Auth, s);
    // §3.15.2.1 allows leaving out both the reason code and the properties, not one of them.
    if a.reason_code != ReasonCode::Success || !a.properties.is_empty() {
        s.u8(a.reason_code.code());
        put_block(s, &a.properties);
    }
}

#[cfg(test)]
mod plain_publish_tests {
    use bytes::{Bytes, BytesMut};

    use super::*;
    use crate::mqtt::{PublishProperties, decode};

    #[test]
    fn writes_exactly_what_encode_writes_for_the_same_publish() {
        let sizes = [0usize, 1, 100, 116, 117, 118, 16_370, 16_400, 70_000];
        for version in [ProtocolVersion::V31, ProtocolVersion::V311, ProtocolVersion::V5] {
            for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
                for (dup, retain) in [(false, false), (true, true), (false, true)] {
                    if dup && qos == QoS::AtMostOnce {
                        continue;
                    }
                    for &size in &sizes {
                        let packet_id = (qos != QoS::AtMostOnce).then_some(4711);
                        let payload = Bytes::from(vec![0xA5; size]);
                        let publish = Packet::Publish(Publish {
                            dup,
                            qos,
                            retain,
                            topic: "a/b/c".into(),
                            packet_id,
                            properties: PublishProperties::default(),
                            payload: payload.clone(),
                        });
                        let mut expected = BytesMut::new();
                        encode(&publish, version, &mut expected).unwrap();
                        let mut fast = BytesMut::new();
                        encode_plain_publish(
                            version, dup, qos, retain, "a/b/c", packet_id, &payload, &mut fast,
                        )
                        .unwrap();
                        assert_eq!(
                            fast, expected,
                            "{version:?} {qos:?} dup={dup} retain={retain} size={size}"
                        );
                        assert_eq!(decode(&mut fast, Some(version), u32::MAX).unwrap(), Some(publish));
                    }
                }
            }
        }
    }

    #[test]
    fn refuses_what_encode_refuses() {
        let mut buf = BytesMut::new();
        let v = ProtocolVersion::V311;
        assert!(encode_plain_publish(v, false, QoS::AtLeastOnce, false, "t", None, b"", &mut buf).is_err());
        assert!(encode_plain_publish(v, false, QoS::AtMostOnce, false, "t", Some(1), b"", &mut buf).is_err());
        assert!(
            encode_plain_publish(v, false, QoS::AtLeastOnce, false, "t", Some(0), b"", &mut buf).is_err()
        );
        assert!(encode_plain_publish(v, true, QoS::AtMostOnce, false, "t", None, b"", &mut buf).is_err());
        assert!(buf.is_empty(), "nothing appended on error");
    }
}
