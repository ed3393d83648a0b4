"""Malformed and out-of-order MQTT: every case must end in the answer the specification gives
(a CONNACK or DISCONNECT with the named reason code, or just a close), and must never deliver
what it sent to anyone."""

from __future__ import annotations

import socket

from . import wire
from .checks import Watcher, closes, fresh, stays_open
from .harness import Failure, NotApplicable, Target, case

W = wire
MALFORMED, PROTOCOL_ERROR, TOPIC_NAME_INVALID = 0x81, 0x82, 0x90
TOPIC_ALIAS_INVALID, PACKET_TOO_LARGE, UNSUPPORTED_VERSION = 0x94, 0x95, 0x84
family = case("malformed")


def raw(t: Target, data: bytes, version: int = 5, **kw) -> wire.Conn:
    conn = fresh(t, version, connected=False, **kw)
    conn.send(data)
    return conn


# --- the fixed header -------------------------------------------------------------------


@family
def remaining_length_five_bytes_before_connect(t: Target) -> str:
    """First packet: CONNECT type byte, then a 5-byte remaining length (ff ff ff ff 7f).
    A variable byte integer has at most 4 bytes (spec 1.5.5): malformed, close (a CONNACK, if
    any, only 0x81)."""
    return closes(raw(t, b"\x10\xff\xff\xff\xff\x7f"), t, connack=(MALFORMED,))


@family
def remaining_length_five_bytes_after_connect(t: Target) -> str:
    """MQTT 5, after CONNACK: PUBLISH with a 5-byte remaining length. Malformed: DISCONNECT 0x81
    or a plain close."""
    conn = fresh(t, 5)
    conn.send(b"\x30\xff\xff\xff\xff\x01")
    return closes(conn, t, disconnect=(MALFORMED,))


@family
def remaining_length_not_minimal(t: Target) -> str:
    """MQTT 5, after CONNACK: PINGREQ with remaining length 0 encoded in two bytes (80 00).
    [MQTT-1.5.5-1] the minimum number of bytes MUST be used: malformed, DISCONNECT 0x81 or a
    close."""
    conn = fresh(t, 5)
    conn.send(b"\xc0\x80\x00")
    return closes(conn, t, disconnect=(MALFORMED,))


@family
def remaining_length_truncated(t: Target) -> str:
    """First bytes 10 80 (a length whose continuation never comes), then FIN. The broker must
    close without answering."""
    conn = raw(t, b"\x10\x80")
    conn.sock.shutdown(socket.SHUT_WR)
    return closes(conn, t)


@family
def connect_body_truncated(t: Target) -> str:
    """A CONNECT announcing 60 bytes, 12 of them sent, then FIN: close, no CONNACK."""
    conn = raw(t, b"\x10\x3c" + wire.text("MQTT") + b"\x05\x02\x00\x1e\x00\x00")
    conn.sock.shutdown(socket.SHUT_WR)
    return closes(conn, t)


@family
def connect_string_past_packet_end(t: Target) -> str:
    """MQTT 5 CONNECT whose client id claims 200 bytes where 3 remain in the packet: malformed,
    close (CONNACK only 0x81)."""
    body = wire.text("MQTT") + b"\x05\x02\x00\x1e\x00" + b"\x00\xc8abc"
    return closes(raw(t, wire.packet(W.CONNECT, 0, body)), t, connack=(MALFORMED,))


@family
def reserved_flags_on_connect(t: Target) -> str:
    """CONNECT with fixed-header flags 0001 (reserved, must be 0000; spec 2.1.3): malformed,
    close (CONNACK only 0x81)."""
    return closes(raw(t, wire.connect(5, t.unique("flags"), header_flags=1)), t, connack=(MALFORMED,))


@family
def reserved_flags_on_subscribe(t: Target) -> str:
    """MQTT 5 SUBSCRIBE with flags 0000 instead of 0010. [MQTT-3.8.1-1] the server MUST treat it
    as malformed and close: DISCONNECT 0x81 or a close."""
    conn = fresh(t, 5)
    conn.send(wire.subscribe(1, [("hostile/flags", 1)], flags=0))
    return closes(conn, t, disconnect=(MALFORMED,))


@family
def reserved_connect_flag(t: Target) -> str:
    """MQTT 5 CONNECT with the reserved bit 0 of the Connect Flags set. [MQTT-3.1.2-3]
    malformed: close (CONNACK only 0x81)."""
    return closes(raw(t, wire.connect(5, t.unique("reserved"), flags=0x03)), t, connack=(MALFORMED,))


@family
def reserved_packet_type_zero(t: Target) -> str:
    """MQTT 3.1.1, after CONNACK: a packet of type 0 (reserved). Close."""
    conn = fresh(t, 4)
    conn.send(b"\x00\x00")
    return closes(conn, t)


@family
def auth_packet_in_v311(t: Target) -> str:
    """MQTT 3.1.1, after CONNACK: an AUTH packet (type 15, only in 5.0). Close."""
    conn = fresh(t, 4)
    conn.send(b"\xf0\x00")
    return closes(conn, t)


# --- order ------------------------------------------------------------------------------


@family
def publish_before_connect(t: Target) -> str:
    """A QoS 0 PUBLISH as the first packet. [MQTT-3.1.0-1] the first packet MUST be CONNECT:
    close, no answer, and the message reaches no subscriber."""
    watcher = Watcher(t, "hostile/early/#")
    said = closes(raw(t, wire.publish("hostile/early/x", b"x", version=4)), t)
    if watcher.received():
        raise Failure("the PUBLISH sent before CONNECT was delivered")
    return said


@family
def subscribe_before_connect(t: Target) -> str:
    """SUBSCRIBE as the first packet: close, no SUBACK."""
    return closes(raw(t, wire.subscribe(1, [("#", 0)], version=4)), t)


@family
def pingreq_before_connect(t: Target) -> str:
    """PINGREQ as the first packet: close, no PINGRESP."""
    return closes(raw(t, wire.PING), t)


@family
def second_connect_v5(t: Target) -> str:
    """MQTT 5: a second CONNECT on a connected session. [MQTT-3.1.0-2] protocol error:
    DISCONNECT 0x82 or a close."""
    conn = fresh(t, 5)
    conn.send(wire.connect(5, t.unique("again")))
    return closes(conn, t, disconnect=(PROTOCOL_ERROR,))


@family
def second_connect_v311(t: Target) -> str:
    """MQTT 3.1.1: a second CONNECT. [MQTT-3.1.0-2] the server MUST disconnect."""
    conn = fresh(t, 4)
    conn.send(wire.connect(4, t.unique("again")))
    return closes(conn, t)


# --- CONNECT contents -------------------------------------------------------------------


@family
def bad_protocol_name(t: Target) -> str:
    """CONNECT with protocol name "MQTX" and level 4. [MQTT-3.1.2-1] the server MAY disconnect
    and MUST NOT go on with it as MQTT: close, with at most a refusing CONNACK (0x01 / 0x84)."""
    return closes(raw(t, wire.connect(4, t.unique("name"), name=b"MQTX")), t, connack=(0x01, UNSUPPORTED_VERSION))


@family
def bad_protocol_level(t: Target) -> str:
    """CONNECT "MQTT" with level 6. 3.1.1 [MQTT-3.1.2-2]: MUST answer CONNACK 0x01 and close
    (5.0: MAY answer 0x84). A CONNACK with 0x01 or 0x84 must come, then the close."""
    conn = raw(t, wire.connect(6, t.unique("level")))
    said = closes(conn, t, connack=(0x01, UNSUPPORTED_VERSION))
    if "CONNACK" not in said:
        raise Failure(f"{said}: 3.1.1 requires CONNACK 0x01 before the close")
    return said


@family
def invalid_utf8_client_id(t: Target) -> str:
    """MQTT 5 CONNECT whose client id is c3 28 (ill-formed UTF-8). [MQTT-1.5.4-1] malformed:
    close, CONNACK only 0x81."""
    return closes(raw(t, wire.connect(5, b"\xc3\x28")), t, connack=(MALFORMED,))


@family
def nul_in_client_id(t: Target) -> str:
    """MQTT 5 CONNECT whose client id contains U+0000. [MQTT-1.5.4-2] malformed: close, CONNACK
    only 0x81."""
    return closes(raw(t, wire.connect(5, b"ab\x00cd")), t, connack=(MALFORMED,))


@family
def surrogate_in_client_id(t: Target) -> str:
    """MQTT 5 client id with the UTF-8-style encoding of U+D800 (ed a0 80), which [MQTT-1.5.4-1]
    forbids: malformed, close, CONNACK only 0x81."""
    return closes(raw(t, wire.connect(5, b"ab\xed\xa0\x80")), t, connack=(MALFORMED,))


@family
def will_topic_with_wildcard(t: Target) -> str:
    """MQTT 5 CONNECT with a will on topic "hostile/will/#". A will topic is a topic name
    (3.1.3.3) and may hold no wildcard: refused with CONNACK 0x90 (or 0x81/0x82), then close."""
    data = wire.connect(5, t.unique("will"), will=("hostile/will/#", b"bye"))
    return closes(raw(t, data), t, connack=(TOPIC_NAME_INVALID, MALFORMED, PROTOCOL_ERROR))


@family
def password_without_username_v311(t: Target) -> str:
    """MQTT 3.1.1 CONNECT with the Password flag set and the User Name flag clear.
    [MQTT-3.1.2-22] malformed: close (a CONNACK, if any, refusing)."""
    data = wire.connect(4, t.unique("pw"), flags=0x42, tail=wire.text("secret"))
    return closes(raw(t, data, 4), t, connack=(0x04, 0x05))


@family
def will_qos_three(t: Target) -> str:
    """MQTT 5 CONNECT with a will whose Will QoS bits are 11. [MQTT-3.1.2-12] malformed: close,
    CONNACK only 0x81."""
    data = wire.connect(5, t.unique("wq"), will=("hostile/will", b"bye"), flags=0x02 | 0x04 | 0x18)
    return closes(raw(t, data), t, connack=(MALFORMED,))


@family
def will_qos_without_will(t: Target) -> str:
    """MQTT 5 CONNECT with Will QoS 1 but the Will Flag clear. [MQTT-3.1.2-11] malformed:
    close, CONNACK only 0x81."""
    return closes(raw(t, wire.connect(5, t.unique("wf"), flags=0x02 | 0x08)), t, connack=(MALFORMED,))


@family
def duplicate_property_connect(t: Target) -> str:
    """MQTT 5 CONNECT with Session Expiry Interval twice. "It is a Protocol Error to include the
    Session Expiry Interval more than once" (3.1.2.11.2): close, CONNACK only 0x82."""
    dup = wire.props(wire.prop(W.SESSION_EXPIRY, 10), wire.prop(W.SESSION_EXPIRY, 20))
    return closes(raw(t, wire.connect(5, t.unique("dup"), properties=dup)), t, connack=(PROTOCOL_ERROR,))


@family
def unknown_property_connect(t: Target) -> str:
    """MQTT 5 CONNECT with property 0x50 (not defined). An identifier not valid for the packet
    makes it malformed (2.2.2.2): close, CONNACK only 0x81."""
    bad = wire.props(b"\x50\x01")
    return closes(raw(t, wire.connect(5, t.unique("unknown"), properties=bad)), t, connack=(MALFORMED,))


@family
def property_not_for_connect(t: Target) -> str:
    """MQTT 5 CONNECT carrying a Topic Alias property (a PUBLISH property). Malformed (2.2.2.2):
    close, CONNACK only 0x81."""
    bad = wire.props(wire.prop(W.TOPIC_ALIAS, 1))
    return closes(raw(t, wire.connect(5, t.unique("alias"), properties=bad)), t, connack=(MALFORMED,))


@family
def receive_maximum_zero(t: Target) -> str:
    """MQTT 5 CONNECT with Receive Maximum 0. "It is a Protocol Error to include the Receive
    Maximum value more than once or for it to have the value 0" (3.1.2.11.3): CONNACK only 0x82."""
    bad = wire.props(wire.prop(W.RECEIVE_MAXIMUM, 0))
    return closes(raw(t, wire.connect(5, t.unique("rm0"), properties=bad)), t, connack=(PROTOCOL_ERROR,))


# --- PUBLISH and SUBSCRIBE contents ------------------------------------------------------


def bad_publish(t: Target, data: bytes, codes: tuple[int, ...], watch: str = "hostile/bad/#",
                version: int = 5, puback: bool = False) -> str:
    """Sends `data` on a connected client while a watcher listens on `watch`; the broker must
    close (or, with `puback`, may refuse with a PUBACK carrying one of `codes` and go on), and
    nothing may reach the watcher."""
    watcher = Watcher(t, watch)
    conn = fresh(t, version)
    conn.send(data)
    if puback:
        try:
            p = conn.read(t.connect_timeout)
        except (wire.Closed, wire.Timeout) as e:
            said = f"closed ({type(e).__name__})"
        else:
            if p.kind == W.PUBACK and p.reason() in codes:
                stays_open(conn)
                said = f"PUBACK 0x{p.reason():02x}, connection kept"
                conn.close()
            elif p.kind == W.DISCONNECT and p.reason() in codes:
                said = f"DISCONNECT 0x{p.reason():02x}, " + closes(conn, t, disconnect=codes).replace("no answer, ", "")
            else:
                conn.close()
                raise Failure(f"got {p.describe()}; allowed: PUBACK/DISCONNECT with {[hex(c) for c in codes]}")
    else:
        said = closes(conn, t, disconnect=codes)
    got = watcher.received()
    if got:
        raise Failure(f"{said}; and the refused PUBLISH was delivered as {got!r}")
    return said


@family
def invalid_utf8_topic(t: Target) -> str:
    """MQTT 5 PUBLISH to "hostile/bad/" + ff. Ill-formed UTF-8 is malformed [MQTT-1.5.4-1]:
    DISCONNECT 0x81 or a close; not delivered."""
    return bad_publish(t, wire.publish(b"hostile/bad/\xff", b"x"), (MALFORMED,))


@family
def nul_in_topic(t: Target) -> str:
    """MQTT 5 PUBLISH to "hostile/bad/a" U+0000 "b". [MQTT-1.5.4-2] malformed: DISCONNECT 0x81 or
    a close; not delivered."""
    return bad_publish(t, wire.publish(b"hostile/bad/a\x00b", b"x"), (MALFORMED,))


@family
def nul_in_topic_v311(t: Target) -> str:
    """MQTT 3.1.1 PUBLISH with U+0000 in the topic [MQTT-1.5.3-2]: close; not delivered."""
    return bad_publish(t, wire.publish(b"hostile/bad/a\x00b", b"x", version=4), (), version=4)


@family
def wildcard_in_publish_topic(t: Target) -> str:
    """MQTT 5 QoS 1 PUBLISH to "hostile/bad/+/x". [MQTT-3.3.2-2] a topic name has no wildcards:
    refused (DISCONNECT or PUBACK 0x90 Topic Name invalid, or 0x81/0x82, or a close); never
    delivered to the subscriber of "hostile/bad/#"."""
    return bad_publish(t, wire.publish("hostile/bad/+/x", b"x", qos=1), (TOPIC_NAME_INVALID, MALFORMED, PROTOCOL_ERROR),
                       puback=True)


@family
def hash_in_publish_topic_v311(t: Target) -> str:
    """MQTT 3.1.1 QoS 0 PUBLISH to "hostile/bad/#": close; not delivered."""
    return bad_publish(t, wire.publish("hostile/bad/#", b"x", version=4), (), version=4)


@family
def duplicate_property_publish(t: Target) -> str:
    """MQTT 5 PUBLISH with Message Expiry Interval twice: "It is a Protocol Error to include the
    Message Expiry Interval more than once" (3.3.2.3.3): DISCONNECT 0x82; not delivered."""
    dup = wire.props(wire.prop(W.MESSAGE_EXPIRY, 10), wire.prop(W.MESSAGE_EXPIRY, 20))
    return bad_publish(t, wire.publish("hostile/bad/dup", b"x", properties=dup), (PROTOCOL_ERROR,))


@family
def topic_alias_zero(t: Target) -> str:
    """MQTT 5 PUBLISH with Topic Alias 0. [MQTT-3.3.2-8] 0 is not permitted: DISCONNECT 0x94."""
    alias = wire.props(wire.prop(W.TOPIC_ALIAS, 0))
    return bad_publish(t, wire.publish("hostile/bad/alias", b"x", properties=alias), (TOPIC_ALIAS_INVALID,))


@family
def topic_alias_over_maximum(t: Target) -> str:
    """MQTT 5 PUBLISH with Topic Alias one above the Topic Alias Maximum of the CONNACK (absent
    = 0). [MQTT-3.3.2-9]: DISCONNECT 0x94."""
    watcher = Watcher(t, "hostile/bad/#")
    conn = fresh(t, 5, connected=False)
    conn.send(wire.connect(5, t.unique("alias")))
    maximum = conn.expect(W.CONNACK).connack_properties().get(W.TOPIC_ALIAS_MAXIMUM, 0)
    alias = wire.props(wire.prop(W.TOPIC_ALIAS, maximum + 1))
    conn.send(wire.publish("hostile/bad/alias", b"x", properties=alias))
    said = closes(conn, t, disconnect=(TOPIC_ALIAS_INVALID,))
    if watcher.received():
        raise Failure("the PUBLISH was delivered")
    return f"alias {maximum + 1} (maximum {maximum}): {said}"


@family
def topic_alias_never_set(t: Target) -> str:
    """MQTT 5 PUBLISH with an empty topic and Topic Alias 1 never mapped: protocol error
    (3.3.4), DISCONNECT 0x82 (0x94 accepted)."""
    alias = wire.props(wire.prop(W.TOPIC_ALIAS, 1))
    return bad_publish(t, wire.publish("", b"x", properties=alias), (PROTOCOL_ERROR, TOPIC_ALIAS_INVALID))


@family
def qos_three(t: Target) -> str:
    """MQTT 5 PUBLISH with both QoS bits set. [MQTT-3.3.1-4] malformed: DISCONNECT 0x81."""
    return bad_publish(t, wire.publish("hostile/bad/q3", b"x", qos=3), (MALFORMED,))


@family
def qos_three_v311(t: Target) -> str:
    """MQTT 3.1.1 PUBLISH with QoS 3 [MQTT-3.3.1-4]: close; not delivered."""
    return bad_publish(t, wire.publish("hostile/bad/q3", b"x", qos=3, version=4), (), version=4)


@family
def packet_id_zero_publish(t: Target) -> str:
    """MQTT 5 QoS 1 PUBLISH with packet identifier 0. [MQTT-2.2.1-3] it MUST be non-zero:
    DISCONNECT 0x81 or 0x82, or a close; not delivered."""
    return bad_publish(t, wire.publish("hostile/bad/pid", b"x", qos=1, packet_id=0), (MALFORMED, PROTOCOL_ERROR))


@family
def packet_id_zero_subscribe(t: Target) -> str:
    """MQTT 5 SUBSCRIBE with packet identifier 0 [MQTT-2.2.1-3]: DISCONNECT 0x81/0x82 or a close."""
    conn = fresh(t, 5)
    conn.send(wire.subscribe(0, [("hostile/pid", 1)]))
    return closes(conn, t, disconnect=(MALFORMED, PROTOCOL_ERROR))


@family
def subscribe_without_filters(t: Target) -> str:
    """MQTT 5 SUBSCRIBE with no topic filter. [MQTT-3.8.3-2] protocol error: DISCONNECT 0x82."""
    conn = fresh(t, 5)
    conn.send(wire.subscribe(1, []))
    return closes(conn, t, disconnect=(PROTOCOL_ERROR,))


@family
def subscribe_reserved_option_bits(t: Target) -> str:
    """MQTT 5 SUBSCRIBE with options c1 (reserved bits 6-7 set). [MQTT-3.8.3-5] malformed:
    DISCONNECT 0x81."""
    conn = fresh(t, 5)
    conn.send(wire.subscribe(1, [("hostile/opts", 0xC1)]))
    return closes(conn, t, disconnect=(MALFORMED,))


@family
def subscribe_invalid_utf8_filter(t: Target) -> str:
    """MQTT 5 SUBSCRIBE to "hostile/" + ff fe. Malformed [MQTT-1.5.4-1]: DISCONNECT 0x81 or a
    close."""
    conn = fresh(t, 5)
    conn.send(wire.subscribe(1, [(b"hostile/\xff\xfe", 1)]))
    return closes(conn, t, disconnect=(MALFORMED,))


@family
def auth_without_method(t: Target) -> str:
    """MQTT 5: an AUTH packet on a connection whose CONNECT had no Authentication Method.
    Section 4.12: a client without one MUST NOT send AUTH; a protocol error, DISCONNECT 0x82."""
    conn = fresh(t, 5)
    conn.send(b"\xf0\x00")
    return closes(conn, t, disconnect=(PROTOCOL_ERROR,))


@family
def unknown_authentication_method(t: Target) -> str:
    """MQTT 5 CONNECT with Authentication Method "X-HOSTILE-UNKNOWN". [MQTT-4.12.0-1] the server
    MAY answer CONNACK 0x8C (or 0x87) and MUST close."""
    method = wire.props(wire.prop(0x15, "X-HOSTILE-UNKNOWN"))
    return closes(raw(t, wire.connect(5, t.unique("auth"), properties=method)), t, connack=(0x8C, 0x87))


@family
def pubrel_for_unknown_packet_id(t: Target) -> str:
    """MQTT 5 PUBREL for a packet id the broker never received: it answers PUBCOMP with that id
    (reason 0x92 Packet Identifier not found, or 0x00) and keeps the connection."""
    conn = fresh(t, 5)
    conn.send(wire.ack(W.PUBREL, 4242))
    p = conn.expect(W.PUBCOMP)
    code = p.reason()
    if p.packet_id() != 4242 or code not in (0x00, 0x92):
        raise Failure(f"PUBCOMP id {p.packet_id()} reason 0x{code:02x}")
    stays_open(conn)
    conn.close()
    return f"PUBCOMP 0x{code:02x}, connection kept"


@family
def invalid_topic_filters(t: Target) -> str:
    """MQTT 5 SUBSCRIBEs to filters that break 4.7.1: "hostile/#/x", "hostile/a+/x",
    "hostile/#x", "$share/g", "$share//hostile", "$share/g+/hostile". Each is refused: SUBACK
    0x8F/0x9E (or 0x80) on a kept connection, or DISCONNECT 0x81/0x82 and a close."""
    said = []
    for bad in ["hostile/#/x", "hostile/a+/x", "hostile/#x", "$share/g", "$share//hostile", "$share/g+/hostile"]:
        conn = fresh(t, 5)
        conn.send(wire.subscribe(1, [(bad, 0)]))
        try:
            p = conn.read(t.connect_timeout)
        except (wire.Closed, wire.Timeout) as e:
            conn.close()
            if isinstance(e, wire.Timeout):
                raise Failure(f"{bad}: no answer") from None
            said.append(f"{bad}: closed")
            continue
        if p.kind == W.SUBACK:
            code = p.suback_codes(5)[0]
            if code not in (0x8F, 0x9E, 0x80):
                raise Failure(f"{bad}: SUBACK 0x{code:02x}")
            stays_open(conn)
            conn.close()
            said.append(f"{bad}: 0x{code:02x}")
        elif p.kind == W.DISCONNECT and p.reason() in (MALFORMED, PROTOCOL_ERROR):
            closes(conn, t)
            said.append(f"{bad}: DISCONNECT 0x{p.reason():02x}")
        else:
            conn.close()
            raise Failure(f"{bad}: {p.describe()}")
    return "; ".join(said)


# --- size ---------------------------------------------------------------------------------


@family
def packet_over_maximum_packet_size(t: Target) -> str:
    """MQTT 5: after a CONNACK with Maximum Packet Size P, a PUBLISH with remaining length P
    (so the whole packet is over P; only its first kilobyte sent). Over the limit is a protocol
    error (3.2.2.3.6): DISCONNECT 0x95, decided before the body arrives."""
    conn = fresh(t, 5, connected=False)
    conn.send(wire.connect(5, t.unique("big")))
    maximum = conn.expect(W.CONNACK).connack_properties().get(W.MAXIMUM_PACKET_SIZE)
    if maximum is None:
        conn.close()
        raise NotApplicable("the broker announces no Maximum Packet Size")
    conn.send(b"\x30" + wire.varint(maximum) + wire.text("hostile/big") + b"\x00" + b"x" * 1000)
    return f"maximum {maximum}: " + closes(conn, t, disconnect=(PACKET_TOO_LARGE,))


@family
def connect_announcing_256_mib(t: Target) -> str:
    """A first packet announcing 268,435,455 bytes (the largest MQTT length), 16 bytes sent:
    the broker must close (a CONNACK only 0x95 or 0x81) rather than wait to buffer it."""
    data = b"\x10\xff\xff\xff\x7f" + wire.text("MQTT") + b"\x05\x02\x00\x1e\x00\x00\x00"
    return closes(raw(t, data), t, connack=(PACKET_TOO_LARGE, MALFORMED))


@family
def packet_over_maximum_v311(t: Target) -> str:
    """MQTT 3.1.1 (which cannot announce a limit): a PUBLISH whose remaining length is the
    Maximum Packet Size the broker gives MQTT 5 clients (so the packet is over it), 1 KB of it
    sent. Close, before the body arrives."""
    probe = fresh(t, 5, connected=False)
    probe.send(wire.connect(5, t.unique("probe")))
    maximum = probe.expect(W.CONNACK).connack_properties().get(W.MAXIMUM_PACKET_SIZE)
    probe.close()
    if maximum is None:
        raise NotApplicable("the broker announces no Maximum Packet Size")
    conn = fresh(t, 4)
    conn.send(b"\x30" + wire.varint(maximum) + wire.text("hostile/big") + b"x" * 1000)
    return f"maximum {maximum}: " + closes(conn, t)


@family
def client_maximum_packet_size_respected(t: Target) -> str:
    """MQTT 5 subscriber that announces Maximum Packet Size 128; a 1 KiB and then a 10-byte
    message are published to its topic. [MQTT-3.1.2-24] the server MUST NOT send it a packet
    over 128 bytes: the 1 KiB message is dropped for it, the small one arrives."""
    topic = f"hostile/mps/{t.unique('m')}"
    sub = fresh(t, 5, connected=False)
    sub.send(wire.connect(5, t.unique("mps"), properties=wire.props(wire.prop(W.MAXIMUM_PACKET_SIZE, 128))))
    sub.expect(W.CONNACK)
    sub.send(wire.subscribe(1, [(topic, 0)]))
    sub.expect(W.SUBACK)
    pub = fresh(t, 4)
    pub.send(wire.publish(topic, b"L" * 1024, version=4) + wire.publish(topic, b"small", version=4))
    stays_open(pub)
    pub.close()
    p = sub.read(5)
    size = len(p.body) + 2
    sub.close()
    if p.kind != W.PUBLISH:
        raise Failure(f"got {p.describe()}")
    if p.body.endswith(b"L" * 100) or size > 128:
        raise Failure(f"sent a {size}-byte PUBLISH to a client whose maximum is 128")
    return "the 1 KiB message was withheld, the small one delivered"


# --- over TLS -------------------------------------------------------------------------------


@family
def tls_remaining_length_five_bytes(t: Target) -> str:
    """Over TLS: a first packet with a 5-byte remaining length. Close."""
    t.need("mqtts")
    conn = fresh(t, 5, connected=False, tls=True)
    conn.send(b"\x10\xff\xff\xff\xff\x7f")
    return closes(conn, t, connack=(MALFORMED,))


@family
def tls_plaintext_connect(t: Target) -> str:
    """A plain-text MQTT CONNECT sent to the TLS port (not a TLS record): close, nothing back
    but at most a TLS alert."""
    port = t.need("mqtts")
    sock = socket.create_connection((t.host, port), timeout=t.connect_timeout + t.slack)
    sock.sendall(wire.connect(4, t.unique("plain")))
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except (ConnectionResetError, TimeoutError, socket.timeout) as e:
        if isinstance(e, (TimeoutError, socket.timeout)):
            raise Failure("the TLS port kept a non-TLS client open") from None
    finally:
        sock.close()
    if got and got[0] != 0x15:
        raise Failure(f"answered {got[:16].hex()} (not a TLS alert)")
    return f"{'a TLS alert' if got else 'no answer'}, closed"


@family
def tls_publish_wildcard(t: Target) -> str:
    """Over TLS, MQTT 5 QoS 0 PUBLISH to "hostile/bad/#": refused (DISCONNECT 0x90/0x81/0x82
    or a close); not delivered."""
    t.need("mqtts")
    watcher = Watcher(t, "hostile/bad/#")
    conn = fresh(t, 5, tls=True)
    conn.send(wire.publish("hostile/bad/#", b"x"))
    said = closes(conn, t, disconnect=(TOPIC_NAME_INVALID, MALFORMED, PROTOCOL_ERROR))
    if watcher.received():
        raise Failure("delivered")
    return said


# --- over WebSocket ----------------------------------------------------------------------


def mqtt_ws(t: Target):
    from .ws import WebSocket

    return WebSocket.connect(t.host, t.need("ws"), t.mqtt_ws_path, protocol="mqtt")


def ws_closes(ws, t: Target) -> str:
    """The broker must close the WebSocket (with or without a close frame) and send no data."""
    from .ws import CLOSE

    try:
        opcode, payload = ws.recv(t.connect_timeout + t.slack)
    except ConnectionError:
        return "closed without a close frame"
    except TimeoutError:
        raise Failure(f"still open after {t.connect_timeout + t.slack:.1f} s") from None
    finally:
        ws.close()
    if opcode != CLOSE:
        raise Failure(f"answered a data frame ({opcode}): {payload[:16].hex()}")
    code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
    return f"close frame {code} {payload[2:50].decode(errors='replace')!r}"


@family
def websocket_text_frame(t: Target) -> str:
    """MQTT over WebSocket: a CONNECT in a text frame. [MQTT-6.0.0-1] MQTT packets MUST be in
    binary frames; any other data frame MUST make the receiver close the connection."""
    ws = mqtt_ws(t)
    ws.send(wire.connect(4, t.unique("wstext")), 0x1)
    return ws_closes(ws, t)


@family
def websocket_remaining_length_five_bytes(t: Target) -> str:
    """MQTT over WebSocket: a binary frame holding a first packet with a 5-byte remaining
    length: closed (a WebSocket close frame may come first), no CONNACK."""
    ws = mqtt_ws(t)
    ws.send(b"\x10\xff\xff\xff\xff\x7f")
    return ws_closes(ws, t)
