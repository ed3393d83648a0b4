//! Round-trip properties: every packet a version can carry survives encode → decode, and
//! whatever decodes from damaged bytes re-encodes to the same packet.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;

use super::{decode_reencode_all, decode_version, encode_vec};
use crate::mqtt::{
    AckProperties, Auth, AuthProperties, ConnAck, ConnAckProperties, Connect, ConnectProperties, Decoded,
    Disconnect, DisconnectProperties, MAX_VAR_INT, Packet, ProtocolVersion, PubResponse, Publish,
    PublishProperties, QoS, ReasonCode, RetainHandling, SubAck, Subscribe, SubscribeProperties,
    SubscriptionOptions, UnsubAck, Unsubscribe, UnsubscribeProperties, Will, WillProperties, decode,
    decode_into,
};

use ProtocolVersion::{V5, V31, V311};
use ReasonCode as R;

// Reason codes per packet, transcribed from MQTT 5.0 §3.2.2.2, §3.4.2.1, §3.6.2.1, §3.9.3,
// §3.11.3, §3.14.2.1 and §3.15.2.1.
const CONNACK_CODES: &[ReasonCode] = &[
    R::Success,
    R::UnspecifiedError,
    R::MalformedPacket,
    R::ProtocolError,
    R::ImplementationSpecificError,
    R::UnsupportedProtocolVersion,
    R::ClientIdentifierNotValid,
    R::BadUserNameOrPassword,
    R::NotAuthorized,
    R::ServerUnavailable,
    R::ServerBusy,
    R::Banned,
    R::BadAuthenticationMethod,
    R::TopicNameInvalid,
    R::PacketTooLarge,
    R::QuotaExceeded,
    R::PayloadFormatInvalid,
    R::RetainNotSupported,
    R::QoSNotSupported,
    R::UseAnotherServer,
    R::ServerMoved,
    R::ConnectionRateExceeded,
];
const PUBACK_CODES: &[ReasonCode] = &[
    R::Success,
    R::NoMatchingSubscribers,
    R::UnspecifiedError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::TopicNameInvalid,
    R::PacketIdentifierInUse,
    R::QuotaExceeded,
    R::PayloadFormatInvalid,
];
const PUBREL_CODES: &[ReasonCode] = &[R::Success, R::PacketIdentifierNotFound];
const SUBACK_CODES: &[ReasonCode] = &[
    R::GrantedQoS0,
    R::GrantedQoS1,
    R::GrantedQoS2,
    R::UnspecifiedError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::TopicFilterInvalid,
    R::PacketIdentifierInUse,
    R::QuotaExceeded,
    R::SharedSubscriptionsNotSupported,
    R::SubscriptionIdentifiersNotSupported,
    R::WildcardSubscriptionsNotSupported,
];
const UNSUBACK_CODES: &[ReasonCode] = &[
    R::Success,
    R::NoSubscriptionExisted,
    R::UnspecifiedError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::TopicFilterInvalid,
    R::PacketIdentifierInUse,
];
const DISCONNECT_CODES: &[ReasonCode] = &[
    R::NormalDisconnection,
    R::DisconnectWithWill,
    R::UnspecifiedError,
    R::MalformedPacket,
    R::ProtocolError,
    R::ImplementationSpecificError,
    R::NotAuthorized,
    R::ServerBusy,
    R::ServerShuttingDown,
    R::KeepAliveTimeout,
    R::SessionTakenOver,
    R::TopicFilterInvalid,
    R::TopicNameInvalid,
    R::ReceiveMaximumExceeded,
    R::TopicAliasInvalid,
    R::PacketTooLarge,
    R::MessageRateTooHigh,
    R::QuotaExceeded,
    R::AdministrativeAction,
    R::PayloadFormatInvalid,
    R::RetainNotSupported,
    R::QoSNotSupported,
    R::UseAnotherServer,
    R::ServerMoved,
    R::SharedSubscriptionsNotSupported,
    R::ConnectionRateExceeded,
    R::MaximumConnectTime,
    R::SubscriptionIdentifiersNotSupported,
    R::WildcardSubscriptionsNotSupported,
];
const AUTH_CODES: &[ReasonCode] = &[R::Success, R::ContinueAuthentication, R::ReAuthenticate];
const V3_CONNACK_CODES: &[ReasonCode] = &[
    R::Success,
    R::UnsupportedProtocolVersion,
    R::ClientIdentifierNotValid,
    R::ServerUnavailable,
    R::BadUserNameOrPassword,
    R::NotAuthorized,
];
const V3_SUBACK_CODES: &[ReasonCode] = &[R::GrantedQoS0, R::GrantedQoS1, R::GrantedQoS2, R::UnspecifiedError];

/// Any string MQTT allows: any Unicode scalar but U+0000.
fn text() -> impl Strategy<Value = String> {
    "[^\\x00]{0,8}"
}

fn arc_text() -> impl Strategy<Value = Arc<str>> {
    text().prop_map(Arc::from)
}

fn binary() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..12).prop_map(Bytes::from)
}

fn user_properties() -> impl Strategy<Value = Vec<(String, String)>> {
    vec((text(), text()), 0..3)
}

fn arc_user_properties() -> impl Strategy<Value = Vec<(Arc<str>, Arc<str>)>> {
    vec((arc_text(), arc_text()), 0..3)
}

fn qos() -> impl Strategy<Value = QoS> {
    select(vec![QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce])
}

fn packet_id() -> impl Strategy<Value = u16> {
    1..=u16::MAX
}

fn codes(list: &'static [ReasonCode]) -> impl Strategy<Value = ReasonCode> {
    select(list)
}

fn publish_properties() -> impl Strategy<Value = PublishProperties> {
    (
        option::of(0u8..=1),
        option::of(any::<u32>()),
        option::of(1u16..),
        option::of(arc_text()),
        option::of(binary()),
        arc_user_properties(),
        vec(1..=MAX_VAR_INT, 0..3),
        option::of(arc_text()),
    )
        .prop_map(|(pfi, expiry, alias, response, correlation, user, sub_ids, content)| {
            PublishProperties {
                payload_format_indicator: pfi,
                message_expiry_interval: expiry,
                topic_alias: alias,
                response_topic: response,
                correlation_data: correlation,
                user_properties: user,
                subscription_identifiers: sub_ids,
                content_type: content,
            }
        })
}

fn will_properties() -> impl Strategy<Value = WillProperties> {
    (
        option::of(any::<u32>()),
        option::of(0u8..=1),
        option::of(any::<u32>()),
        option::of(arc_text()),
        option::of(arc_text()),
        option::of(binary()),
        arc_user_properties(),
    )
        .prop_map(|(delay, pfi, expiry, content, response, correlation, user)| WillProperties {
            delay_interval: delay,
            payload_format_indicator: pfi,
            message_expiry_interval: expiry,
            content_type: content,
            response_topic: response,
            correlation_data: correlation,
            user_properties: user,
        })
}

fn connect_properties() -> impl Strategy<Value = ConnectProperties> {
    (
        option::of(any::<u32>()),
        option::of(1u16..),
        option::of(1u32..),
        option::of(any::<u16>()),
        option::of(any::<bool>()),
        option::of(any::<bool>()),
        user_properties(),
        option::of((text(), option::of(binary()))),
    )
        .prop_map(|(session, receive, max_size, alias_max, response, problem, user, auth)| {
            let (authentication_method, authentication_data) = match auth {
                Some((method, data)) => (Some(method), data),
                None => (None, None),
            };
            ConnectProperties {
                session_expiry_interval: session,
                receive_maximum: receive,
                maximum_packet_size: max_size,
                topic_alias_maximum: alias_max,
                request_response_information: response,
                request_problem_information: problem,
                user_properties: user,
                authentication_method,
                authentication_data,
            }
        })
}

fn connack_properties() -> impl Strategy<Value = ConnAckProperties> {
    let first = (
        option::of(any::<u32>()),
        option::of(1u16..),
        option::of(select(vec![QoS::AtMostOnce, QoS::AtLeastOnce])),
        option::of(any::<bool>()),
        option::of(1u32..),
        option::of(text()),
        option::of(any::<u16>()),
        option::of(text()),
        user_properties(),
    );
    let second = (
        option::of(any::<bool>()),
        option::of(any::<bool>()),
        option::of(any::<bool>()),
        option::of(any::<u16>()),
        option::of(text()),
        option::of(text()),
        option::of(text()),
        option::of(binary()),
    );
    (first, second).prop_map(
        |(
            (session, receive, max_qos, retain, max_size, assigned, alias_max, reason, user),
            (wildcard, sub_ids, shared, keep_alive, response, reference, method, data),
        )| ConnAckProperties {
            session_expiry_interval: session,
            receive_maximum: receive,
            maximum_qos: max_qos,
            retain_available: retain,
            maximum_packet_size: max_size,
            assigned_client_identifier: assigned,
            topic_alias_maximum: alias_max,
            reason_string: reason,
            user_properties: user,
            wildcard_subscription_available: wildcard,
            subscription_identifiers_available: sub_ids,
            shared_subscription_available: shared,
            server_keep_alive: keep_alive,
            response_information: response,
            server_reference: reference,
            authentication_method: method,
            authentication_data: data,
        },
    )
}

fn ack_properties() -> impl Strategy<Value = AckProperties> {
    (option::of(text()), user_properties())
        .prop_map(|(reason_string, user_properties)| AckProperties { reason_string, user_properties })
}

/// `strategy` in 5.0, the default (what 3.x carries) otherwise.
fn v5_only<T: Default + Clone + std::fmt::Debug + 'static>(
    v: ProtocolVersion,
    strategy: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    if v == V5 { strategy.boxed() } else { Just(T::default()).boxed() }
}

fn will(v: ProtocolVersion) -> impl Strategy<Value = Will> {
    (arc_text(), binary(), qos(), any::<bool>(), v5_only(v, will_properties())).prop_map(
        |(topic, payload, qos, retain, properties)| Will { topic, payload, qos, retain, properties },
    )
}

fn connect(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    (
        any::<bool>(),
        any::<u16>(),
        text(),
        option::of(will(v)),
        option::of(text()),
        option::of(binary()),
        v5_only(v, connect_properties()),
    )
        .prop_map(move |(clean_start, keep_alive, client_id, will, username, password, properties)| {
            // Before 5.0 a password needs a user name.
            let password = if v == V5 || username.is_some() { password } else { None };
            Packet::Connect(Connect {
                protocol: v,
                clean_start,
                keep_alive,
                client_id,
                will,
                username,
                password,
                properties,
            })
        })
        .boxed()
}

fn connack(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    let reason = if v == V5 { codes(CONNACK_CODES) } else { codes(V3_CONNACK_CODES) };
    (any::<bool>(), reason, v5_only(v, connack_properties()))
        .prop_map(move |(session_present, reason_code, properties)| {
            let session_present = session_present && v != V31 && reason_code == ReasonCode::Success;
            Packet::ConnAck(ConnAck { session_present, reason_code, properties })
        })
        .boxed()
}

fn publish(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    (any::<bool>(), qos(), any::<bool>(), arc_text(), packet_id(), v5_only(v, publish_properties()), binary())
        .prop_map(move |(dup, qos, retain, topic, id, properties, payload)| {
            let qos0 = qos == QoS::AtMostOnce;
            Packet::Publish(Publish {
                dup: dup && (!qos0 || v == V31),
                qos,
                retain,
                topic,
                packet_id: if qos0 { None } else { Some(id) },
                properties,
                payload,
            })
        })
        .boxed()
}

fn pub_response(
    v: ProtocolVersion,
    list: &'static [ReasonCode],
    wrap: fn(PubResponse) -> Packet,
) -> BoxedStrategy<Packet> {
    (packet_id(), v5_only(v, codes(list)), v5_only(v, ack_properties()))
        .prop_map(move |(packet_id, reason_code, properties)| {
            wrap(PubResponse { packet_id, reason_code, properties })
        })
        .boxed()
}

fn subscription_options(v: ProtocolVersion) -> BoxedStrategy<SubscriptionOptions> {
    if v != V5 {
        return qos().prop_map(SubscriptionOptions::with_qos).boxed();
    }
    let handling =
        select(vec![RetainHandling::SendAtSubscribe, RetainHandling::SendIfNew, RetainHandling::DoNotSend]);
    (qos(), any::<bool>(), any::<bool>(), handling)
        .prop_map(|(qos, no_local, retain_as_published, retain_handling)| SubscriptionOptions {
            qos,
            no_local,
            retain_as_published,
            retain_handling,
        })
        .boxed()
}

fn subscribe(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    let properties = (option::of(1..=MAX_VAR_INT), user_properties()).prop_map(
        |(subscription_identifier, user_properties)| SubscribeProperties {
            subscription_identifier,
            user_properties,
        },
    );
    (packet_id(), vec((text(), subscription_options(v)), 1..4), v5_only(v, properties))
        .prop_map(|(packet_id, filters, properties)| {
            Packet::Subscribe(Subscribe { packet_id, filters, properties })
        })
        .boxed()
}

fn suback(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    let list = if v == V5 { SUBACK_CODES } else { V3_SUBACK_CODES };
    (packet_id(), vec(codes(list), 0..4), v5_only(v, ack_properties()))
        .prop_map(|(packet_id, reason_codes, properties)| {
            Packet::SubAck(SubAck { packet_id, reason_codes, properties })
        })
        .boxed()
}

fn unsubscribe(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    let properties = user_properties().prop_map(|user_properties| UnsubscribeProperties { user_properties });
    (packet_id(), vec(text(), 1..4), v5_only(v, properties))
        .prop_map(|(packet_id, filters, properties)| {
            Packet::Unsubscribe(Unsubscribe { packet_id, filters, properties })
        })
        .boxed()
}

fn unsuback(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    (packet_id(), v5_only(v, vec(codes(UNSUBACK_CODES), 0..4)), v5_only(v, ack_properties()))
        .prop_map(|(packet_id, reason_codes, properties)| {
            Packet::UnsubAck(UnsubAck { packet_id, reason_codes, properties })
        })
        .boxed()
}

fn disconnect(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    let properties = (option::of(any::<u32>()), option::of(text()), user_properties(), option::of(text()))
        .prop_map(|(session, reason, user, reference)| DisconnectProperties {
            session_expiry_interval: session,
            reason_string: reason,
            user_properties: user,
            server_reference: reference,
        });
    (v5_only(v, codes(DISCONNECT_CODES)), v5_only(v, properties))
        .prop_map(|(reason_code, properties)| Packet::Disconnect(Disconnect { reason_code, properties }))
        .boxed()
}

fn auth() -> BoxedStrategy<Packet> {
    let properties = (option::of(text()), option::of(binary()), option::of(text()), user_properties())
        .prop_map(|(method, data, reason, user)| AuthProperties {
            authentication_method: method,
            authentication_data: data,
            reason_string: reason,
            user_properties: user,
        });
    (codes(AUTH_CODES), properties)
        .prop_map(|(reason_code, properties)| Packet::Auth(Auth { reason_code, properties }))
        .boxed()
}

/// Every packet `v` can carry, with only what `v` can carry.
fn packet(v: ProtocolVersion) -> BoxedStrategy<Packet> {
    let mut arms = vec![
        connect(v),
        connack(v),
        publish(v),
        pub_response(v, PUBACK_CODES, Packet::PubAck),
        pub_response(v, PUBACK_CODES, Packet::PubRec),
        pub_response(v, PUBREL_CODES, Packet::PubRel),
        pub_response(v, PUBREL_CODES, Packet::PubComp),
        subscribe(v),
        suback(v),
        unsubscribe(v),
        unsuback(v),
        Just(Packet::PingReq).boxed(),
        Just(Packet::PingResp).boxed(),
        disconnect(v),
    ];
    if v == V5 {
        arms.push(auth());
    }
    Union::new(arms).boxed()
}

/// A connection's worth of packets: a CONNECT, then anything of the same version.
fn stream() -> impl Strategy<Value = (ProtocolVersion, Packet, Vec<Packet>)> {
    select(vec![V31, V311, V5]).prop_flat_map(|v| (Just(v), connect(v), vec(packet(v), 0..4)))
}

fn round_trip(packet: &Packet, v: ProtocolVersion) -> Result<(), TestCaseError> {
    let bytes = encode_vec(packet, v);
    let mut buf = BytesMut::from(&bytes[..]);
    let decoded = decode(&mut buf, decode_version(packet, v), u32::MAX);
    prop_assert_eq!(decoded, Ok(Some(packet.clone())));
    prop_assert!(buf.is_empty());
    Ok(())
}

/// Applies `(position, value)` overwrites and a truncation to `bytes`.
fn damage(mut bytes: Vec<u8>, edits: &[(usize, u8)], keep: usize) -> Vec<u8> {
    if !bytes.is_empty() {
        for &(at, value) in edits {
            let at = at % bytes.len();
            bytes[at] = value;
        }
    }
    let keep = keep % (bytes.len() + 1);
    bytes.truncate(keep.max(bytes.len() / 2));
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn round_trip_v31(p in packet(V31)) {
        round_trip(&p, V31)?;
    }

    #[test]
    fn round_trip_v311(p in packet(V311)) {
        round_trip(&p, V311)?;
    }

    #[test]
    fn round_trip_v5(p in packet(V5)) {
        round_trip(&p, V5)?;
    }

    /// A CONNECT followed by packets, then damaged: decoding never panics, and every packet that
    /// still decodes re-encodes and decodes to itself.
    #[test]
    fn damaged_streams_decode_consistently(
        (v, first, rest) in stream(),
        edits in vec((any::<usize>(), any::<u8>()), 0..4),
        keep in any::<usize>(),
        max in prop_oneof![Just(u32::MAX), 0u32..200],
    ) {
        let mut bytes = encode_vec(&first, v);
        for p in &rest {
            bytes.extend_from_slice(&encode_vec(p, v));
        }
        // Undamaged, every packet decodes.
        prop_assert_eq!(decode_reencode_all(&bytes, None, u32::MAX), 1 + rest.len());
        let damaged = damage(bytes, &edits, keep);
        decode_reencode_all(&damaged, None, max);
    }

    /// Decoding as a connection does (`decode_into`, into a PUBLISH slot that still holds an
    /// earlier PUBLISH) gives what `decode` gives, damaged input included; a PUBLISH to the
    /// topic the slot held keeps that very string.
    #[test]
    fn decoding_into_a_used_slot_gives_the_same_packets(
        (v, p, earlier) in select(vec![V31, V311, V5])
            .prop_flat_map(|v| (Just(v), packet(v), publish(v))),
        other in arc_text(),
        same in any::<bool>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..3),
        keep in any::<usize>(),
    ) {
        prop_assume!(!matches!(p, Packet::Connect(_)));
        let last: Arc<str> = match &p {
            Packet::Publish(publish) if same => Arc::from(&*publish.topic),
            _ => other,
        };
        let Packet::Publish(earlier) = earlier else { unreachable!("publish() makes PUBLISH packets") };
        let bytes = encode_vec(&p, v);
        for input in [bytes.clone(), damage(bytes, &edits, keep)] {
            let plain = decode(&mut BytesMut::from(&input[..]), Some(v), u32::MAX);
            let mut slot = Publish { topic: last.clone(), ..earlier.clone() };
            let into = decode_into(&mut BytesMut::from(&input[..]), v, u32::MAX, &mut slot);
            let into = into.map(|d| d.map(|d| match d {
                Decoded::Publish => Packet::Publish(slot.clone()),
                Decoded::Other(packet) => packet,
            }));
            if let Ok(Some(Packet::Publish(publish))) = &into {
                prop_assert_eq!(Arc::ptr_eq(&publish.topic, &last), *publish.topic == *last);
            }
            prop_assert_eq!(into, plain);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in vec(any::<u8>(), 0..48),
        v in prop_oneof![Just(None), Just(Some(V31)), Just(Some(V311)), Just(Some(V5))],
    ) {
        decode_reencode_all(&bytes, v, u32::MAX);
    }
}
