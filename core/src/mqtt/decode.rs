//! Bytes to packets.
//!
//! [`decode`] looks at the fixed header first: the type and flags are checked as soon as the
//! first byte is there, the size against the limit as soon as the remaining length is complete.
//! Only then does it wait for the whole packet, so a peer cannot make the broker buffer an
//! oversized packet. The body is parsed from a frozen slice of the buffer: binary fields and the
//! PUBLISH payload share it instead of being copied.

use bytes::BytesMut;

use super::error::DecodeError;
use super::packet::{
    Auth, ConnAck, Connect, Disconnect, Packet, PacketType, ProtocolVersion, PubResponse, Publish, QoS,
    SubAck, Subscribe, SubscriptionOptions, UnsubAck, Unsubscribe, Will,
};
use super::properties::{
    AckProperties, AuthProperties, ConnAckProperties, ConnectProperties, DisconnectProperties,
    PublishProperties, SubscribeProperties, UnsubscribeProperties, WillProperties,
};
use super::reason::ReasonCode;
use super::wire::{Reader, decode_var_int};

/// Decodes one packet from the front of `buf`.
///
/// - `version == None`: the connection has not sent CONNECT yet; only CONNECT is accepted (any
///   other first packet is [`DecodeError::ExpectedConnect`]). The CONNECT's own protocol level
///   decides how it is parsed.
/// - With a version, every packet type of that version is accepted, in both directions.
/// - On `Ok(Some(p))` the packet's bytes are consumed; on `Ok(None)` (need more bytes) `buf` is
///   untouched. After an error the connection must be closed; how much of `buf` was consumed
///   is unspecified.
/// - `max_packet_size` (total bytes including the fixed header) is checked as soon as the fixed
///   header is complete, before the rest of the packet is buffered
///   ([`DecodeError::PacketTooLarge`]).
/// - The PUBLISH payload and binary fields share `buf`'s memory; strings are copied once into
///   their owned form (the PUBLISH topic into an `Arc<str>`).
// `Packet` is a few hundred bytes; inlining `decode`, `body` and `publish` lets the compiler
// build it where the caller keeps it instead of copying it out layer by layer (the copies
// were a fifth of a PUBLISH decode in profiles).
#[inline]
pub fn decode(
    buf: &mut BytesMut,
    version: Option<ProtocolVersion>,
    max_packet_size: u32,
) -> Result<Option<Packet>, DecodeError> {
    let Some((packet_type, flags, mut r)) = frame(buf, version, max_packet_size)? else {
        return Ok(None);
    };
    let packet = match version {
        None => Packet::Connect(connect(&mut r)?),
        Some(v) => body(packet_type, flags, v, &mut r)?,
    };
    finish(&r)?;
    Ok(Some(packet))
}

/// What [`decode_into`] decoded.
// Not boxed: that would allocate for every other packet, and copying a packet once costs less
// than allocating and freeing it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Decoded {
    /// A PUBLISH, now in the caller's `Publish`.
    Publish,
    /// Any other packet.
    Other(Packet),
}

/// [`decode`] for a connection past CONNECT, on its hot path. A PUBLISH is decoded into
/// `publish`, replacing what it held, rather than returned: a `Packet` is some 370 bytes, and
/// returning one PUBLISH after another copied it out of each layer of the decoder (5 % of the
/// broker's time in a 1:1 QoS 0 profile). And a PUBLISH to the topic `publish` already holds
/// (the connection's previous one: devices and publishers mostly send to one topic over and
/// over) keeps that `Arc<str>`: no allocation, copy, UTF-8 check or reference count per
/// message. Every other result is [`decode`]'s.
#[inline(always)]
pub fn decode_into(
    buf: &mut BytesMut,
    version: ProtocolVersion,
    max_packet_size: u32,
    publish: &mut Publish,
) -> Result<Option<Decoded>, DecodeError> {
    let Some((packet_type, flags, mut r)) = frame(buf, Some(version), max_packet_size)? else {
        return Ok(None);
    };
    let decoded = if packet_type == PacketType::Publish {
        publish_into(flags, version, &mut r, publish)?;
        Decoded::Publish
    } else {
        Decoded::Other(body(packet_type, flags, version, &mut r)?)
    };
    finish(&r)?;
    Ok(Some(decoded))
}

/// Checks the fixed header and, once the whole packet is there, takes it off the front of
/// `buf`: its type, its flags and a reader over its body.
#[inline(always)]
fn frame(
    buf: &mut BytesMut,
    version: Option<ProtocolVersion>,
    max_packet_size: u32,
) -> Result<Option<(PacketType, u8, Reader)>, DecodeError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let packet_type = check_first_byte(first, version)?;
    let (remaining, len_bytes) = match decode_var_int(&buf[1..]) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => return Ok(None),
        Err(_) => return Err(DecodeError::MalformedRemainingLength),
    };
    let header_len = 1 + len_bytes;
    // At most 5 + 268,435,455: no overflow.
    let size = header_len as u32 + remaining;
    if size > max_packet_size {
        return Err(DecodeError::PacketTooLarge { size, max: max_packet_size });
    }
    let size = size as usize;
    if buf.len() < size {
        return Ok(None);
    }
    let frame = buf.split_to(size).freeze();
    Ok(Some((packet_type, first & 0x0F, Reader::new(frame, header_len))))
}

/// A packet's body must have been read to its end.
fn finish(r: &Reader) -> Result<(), DecodeError> {
    if r.is_empty() { Ok(()) } else { Err(DecodeError::TrailingBytes(r.remaining())) }
}

/// Validates the packet type and the fixed header flags (MQTT 5.0 §2.1.3, 3.1.1 §2.2.2).
fn check_first_byte(first: u8, version: Option<ProtocolVersion>) -> Result<PacketType, DecodeError> {
    let nibble = first >> 4;
    let flags = first & 0x0F;
    let packet_type = match PacketType::from_nibble(nibble) {
        Some(PacketType::Auth) if version.is_some_and(|v| !v.is_v5()) => None,
        other => other,
    }
    .ok_or(DecodeError::InvalidPacketType(nibble))?;
    if version.is_none() && packet_type != PacketType::Connect {
        return Err(DecodeError::ExpectedConnect(packet_type));
    }
    let valid = match packet_type {
        PacketType::Publish => {
            let qos = (flags >> 1) & 0b11;
            if qos == 3 {
                return Err(DecodeError::InvalidQoS(qos));
            }
            // [MQTT-3.3.1-2] in 3.1.1 and 5.0; 3.1 has no such rule and its clients may set it.
            if qos == 0 && flags & 0b1000 != 0 && version != Some(ProtocolVersion::V31) {
                return Err(DecodeError::DupOnQoS0);
            }
            true
        }
        // 3.1 sends these as QoS 1 messages and sets DUP when it retries them.
        PacketType::PubRel | PacketType::Subscribe | PacketType::Unsubscribe => {
            flags == 0b0010 || (version == Some(ProtocolVersion::V31) && flags == 0b1010)
        }
        _ => flags == 0,
    };
    if !valid {
        return Err(DecodeError::InvalidFixedHeaderFlags { packet_type, flags });
    }
    Ok(packet_type)
}

#[inline(always)]
fn body(
    packet_type: PacketType,
    flags: u8,
    v: ProtocolVersion,
    r: &mut Reader,
) -> Result<Packet, DecodeError> {
    use PacketType as T;
    Ok(match packet_type {
        T::Connect => Packet::Connect(connect(r)?),
        T::ConnAck => Packet::ConnAck(connack(v, r)?),
        T::Publish => {
            let mut publish = Publish::default();
            publish_into(flags, v, r, &mut publish)?;
            Packet::Publish(publish)
        }
        T::PubAck => Packet::PubAck(pub_response(T::PubAck, v, r)?),
        T::PubRec => Packet::PubRec(pub_response(T::PubRec, v, r)?),
        T::PubRel => Packet::PubRel(pub_response(T::PubRel, v, r)?),
        T::PubComp => Packet::PubComp(pub_response(T::PubComp, v, r)?),
        T::Subscribe => Packet::Subscribe(subscribe(v, r)?),
        T::SubAck => Packet::SubAck(suback(v, r)?),
        T::Unsubscribe => Packet::Unsubscribe(unsubscribe(v, r)?),
        T::UnsubAck => Packet::UnsubAck(unsuback(v, r)?),
        T::PingReq => Packet::PingReq,
        T::PingResp => Packet::PingResp,
        T::Disconnect => Packet::Disconnect(disconnect(v, r)?),
        T::Auth => Packet::Auth(auth(r)?),
    })
}

/// A reason code byte that `packet_type` may carry in 5.0.
fn reason_code(packet_type: PacketType, r: &mut Reader) -> Result<ReasonCode, DecodeError> {
    let code = r.u8()?;
    match ReasonCode::try_from(code) {
        Ok(reason) if reason.is_allowed_in(packet_type) => Ok(reason),
        _ => Err(DecodeError::InvalidReasonCode { packet_type, code }),
    }
}

fn connect(r: &mut Reader) -> Result<Connect, DecodeError> {
    let name = r.prefixed()?;
    let is_mqtt = name == b"MQTT";
    let is_mqisdp = name == b"MQIsdp";
    let level = r.u8()?;
    let protocol = match (level, is_mqtt, is_mqisdp) {
        (4, true, _) => ProtocolVersion::V311,
        (5, true, _) => ProtocolVersion::V5,
        (3, _, true) => ProtocolVersion::V31,
        (level, true, _) | (level, _, true) => return Err(DecodeError::UnsupportedProtocolVersion(level)),
        _ => return Err(DecodeError::InvalidProtocolName),
    };
    let v5 = protocol.is_v5();

    let flags = r.u8()?;
    // [MQTT-3.1.2-3]; 3.1 leaves the bit unused and its clients send 0 too.
    if flags & 0x01 != 0 {
        return Err(DecodeError::ConnectReservedFlag);
    }
    let clean_start = flags & 0x02 != 0;
    let will_flag = flags & 0x04 != 0;
    let will_qos = (flags >> 3) & 0b11;
    let will_retain = flags & 0x20 != 0;
    let password_flag = flags & 0x40 != 0;
    let username_flag = flags & 0x80 != 0;
    if !will_flag && (will_qos != 0 || will_retain) {
        return Err(DecodeError::WillFlagsWithoutWill);
    }
    let will_qos = QoS::try_from(will_qos)?;
    // [MQTT-3.1.2-22] in 3.1.1 (and 3.1); 5.0 allows a password alone.
    if password_flag && !username_flag && !v5 {
        return Err(DecodeError::PasswordWithoutUsername);
    }

    let keep_alive = r.u16()?;
    let properties = if v5 { ConnectProperties::decode(r)? } else { ConnectProperties::default() };
    let client_id = r.string()?;
    let will = if will_flag {
        let properties = if v5 { WillProperties::decode(r)? } else { WillProperties::default() };
        let topic = r.string()?;
        let payload = r.binary()?;
        Some(Will { topic, payload, qos: will_qos, retain: will_retain, properties })
    } else {
        None
    };
    // Some 3.1 clients set the user name / password flags without sending the field; like
    // Mosquitto, treat a missing trailing field as absent for 3.1 only.
    let lenient = protocol == ProtocolVersion::V31;
    let username = if username_flag && !(lenient && r.is_empty()) { Some(r.string()?) } else { None };
    let password = if password_flag && !(lenient && r.is_empty()) { Some(r.binary()?) } else { None };

    Ok(Connect { protocol, clean_start, keep_alive, client_id, will, username, password, properties })
}

fn connack(v: ProtocolVersion, r: &mut Reader) -> Result<ConnAck, DecodeError> {
    let flags = r.u8()?;
    // 3.1 calls this byte reserved and gives it no meaning; there is no session present flag.
    let session_present = match v {
        ProtocolVersion::V31 => false,
        _ if flags & 0xFE != 0 => return Err(DecodeError::ConnAckReservedFlags),
        _ => flags & 0x01 != 0,
    };
    let reason_code = if v.is_v5() {
        reason_code(PacketType::ConnAck, r)?
    } else {
        let code = r.u8()?;
        ReasonCode::from_v3_connack_return_code(code)
            .ok_or(DecodeError::InvalidReasonCode { packet_type: PacketType::ConnAck, code })?
    };
    // [MQTT-3.2.2-4] in 3.1.1, [MQTT-3.2.2-6] in 5.0.
    if session_present && reason_code != ReasonCode::Success {
        return Err(DecodeError::SessionPresentOnRefusal);
    }
    let properties = if v.is_v5() { ConnAckProperties::decode(r)? } else { ConnAckProperties::default() };
    Ok(ConnAck { session_present, reason_code, properties })
}

/// Decodes a PUBLISH into `out`, replacing all of it; a topic with the bytes of the one `out`
/// holds keeps it (see [`decode_into`]).
#[inline(always)]
fn publish_into(flags: u8, v: ProtocolVersion, r: &mut Reader, out: &mut Publish) -> Result<(), DecodeError> {
    out.dup = flags & 0b1000 != 0;
    out.qos = QoS::try_from((flags >> 1) & 0b11)?;
    out.retain = flags & 0b0001 != 0;
    r.string_into(&mut out.topic)?;
    out.packet_id = if out.qos > QoS::AtMostOnce { Some(r.packet_id()?) } else { None };
    out.properties = PublishProperties::default();
    if v.is_v5() {
        out.properties.decode_into(r)?;
    }
    out.payload = r.rest();
    Ok(())
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP. In 5.0 the reason code and the properties may be left out
/// (remaining length 2 or 3), meaning success and no properties (§3.4.2.1).
fn pub_response(
    packet_type: PacketType,
    v: ProtocolVersion,
    r: &mut Reader,
) -> Result<PubResponse, DecodeError> {
    let packet_id = r.packet_id()?;
    let mut ack = PubResponse { packet_id, ..PubResponse::default() };
    if v.is_v5() && !r.is_empty() {
        ack.reason_code = reason_code(packet_type, r)?;
        if !r.is_empty() {
            ack.properties = AckProperties::decode(r, packet_type)?;
        }
    }
    Ok(ack)
}

fn subscribe(v: ProtocolVersion, r: &mut Reader) -> Result<Subscribe, DecodeError> {
    let packet_id = r.packet_id()?;
    let properties = if v.is_v5() { SubscribeProperties::decode(r)? } else { SubscribeProperties::default() };
    let mut filters = Vec::new();
    while !r.is_empty() {
        let filter = r.string()?;
        let options = SubscriptionOptions::from_byte(r.u8()?, v)?;
        filters.push((filter, options));
    }
    // [MQTT-3.8.3-3] in 3.1.1, [MQTT-3.8.3-2] in 5.0.
    if filters.is_empty() {
        return Err(DecodeError::NoTopicFilters(PacketType::Subscribe));
    }
    Ok(Subscribe { packet_id, filters, properties })
}

fn suback(v: ProtocolVersion, r: &mut Reader) -> Result<SubAck, DecodeError> {
    let packet_id = r.packet_id()?;
    let properties =
        if v.is_v5() { AckProperties::decode(r, PacketType::SubAck)? } else { AckProperties::default() };
    let mut reason_codes = Vec::with_capacity(r.remaining());
    while !r.is_empty() {
        let code = if v.is_v5() {
            reason_code(PacketType::SubAck, r)?
        } else {
            match r.u8()? {
                0x00 => ReasonCode::GrantedQoS0,
                0x01 => ReasonCode::GrantedQoS1,
                0x02 => ReasonCode::GrantedQoS2,
                0x80 => ReasonCode::UnspecifiedError,
                code => return Err(DecodeError::InvalidReasonCode { packet_type: PacketType::SubAck, code }),
            }
        };
        reason_codes.push(code);
    }
    Ok(SubAck { packet_id, reason_codes, properties })
}

fn unsubscribe(v: ProtocolVersion, r: &mut Reader) -> Result<Unsubscribe, DecodeError> {
    let packet_id = r.packet_id()?;
    let properties =
        if v.is_v5() { UnsubscribeProperties::decode(r)? } else { UnsubscribeProperties::default() };
    let mut filters = Vec::new();
    while !r.is_empty() {
        filters.push(r.string()?);
    }
    // [MQTT-3.10.3-2] in 3.1.1; a protocol error in 5.0 (§3.10.3).
    if filters.is_empty() {
        return Err(DecodeError::NoTopicFilters(PacketType::Unsubscribe));
    }
    Ok(Unsubscribe { packet_id, filters, properties })
}

fn unsuback(v: ProtocolVersion, r: &mut Reader) -> Result<UnsubAck, DecodeError> {
    let packet_id = r.packet_id()?;
    let mut ack = UnsubAck { packet_id, ..UnsubAck::default() };
    if v.is_v5() {
        ack.properties = AckProperties::decode(r, PacketType::UnsubAck)?;
        ack.reason_codes.reserve(r.remaining());
        while !r.is_empty() {
            ack.reason_codes.push(reason_code(PacketType::UnsubAck, r)?);
        }
    }
    Ok(ack)
}

/// DISCONNECT: empty in 3.x; in 5.0 a remaining length of 0 means normal disconnection and one of
/// 1 a reason code without properties (§3.14.2.1).
fn disconnect(v: ProtocolVersion, r: &mut Reader) -> Result<Disconnect, DecodeError> {
    let mut packet = Disconnect::default();
    if v.is_v5() && !r.is_empty() {
        packet.reason_code = reason_code(PacketType::Disconnect, r)?;
        if !r.is_empty() {
            packet.properties = DisconnectProperties::decode(r)?;
        }
    }
    Ok(packet)
}

/// AUTH: a remaining length of 0 means success without properties (§3.15.2.1). A reason code
/// without a property length is accepted as well, the way DISCONNECT allows it.
fn auth(r: &mut Reader) -> Result<Auth, DecodeError> {
    let mut packet = Auth::default();
    if !r.is_empty() {
        packet.reason_code = reason_code(PacketType::Auth, r)?;
        if !r.is_empty() {
            packet.properties = AuthProperties::decode(r)?;
        }
    }
    Ok(packet)
}
