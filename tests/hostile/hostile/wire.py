"""MQTT on the wire, written from the specification (3.1.1 and 5.0) for this suite alone.

The builders here can produce packets a correct client never sends (reserved flags, QoS 3,
5-byte lengths, duplicated properties) because that is what the suite sends. The reader
parses only what the suite must check: packet type, flags, CONNACK and DISCONNECT reason
codes and the CONNACK properties that announce the broker's limits.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = 8, 9, 10, 11, 12, 13, 14, 15
NAMES = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP",
         8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
         14: "DISCONNECT", 15: "AUTH", 0: "RESERVED(0)"}

# MQTT 5 property identifiers and their value types (spec 2.2.2.2).
BYTE, TWO, FOUR, VARINT, STRING, BINARY, PAIR = "byte", "two", "four", "varint", "string", "binary", "pair"
PROPERTY_TYPES = {
    0x01: BYTE, 0x02: FOUR, 0x03: STRING, 0x08: STRING, 0x09: BINARY, 0x0B: VARINT, 0x11: FOUR,
    0x12: STRING, 0x13: TWO, 0x15: STRING, 0x16: BINARY, 0x17: BYTE, 0x18: FOUR, 0x19: BYTE,
    0x1A: STRING, 0x1C: STRING, 0x1F: STRING, 0x21: TWO, 0x22: TWO, 0x23: TWO, 0x24: BYTE,
    0x25: BYTE, 0x26: PAIR, 0x27: FOUR, 0x28: BYTE, 0x29: BYTE, 0x2A: BYTE,
}
MESSAGE_EXPIRY, SESSION_EXPIRY, RECEIVE_MAXIMUM, TOPIC_ALIAS_MAXIMUM = 0x02, 0x11, 0x21, 0x22
TOPIC_ALIAS, MAXIMUM_PACKET_SIZE, REASON_STRING = 0x23, 0x27, 0x1F


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def text(s: str | bytes) -> bytes:
    """A length-prefixed string; bytes are sent as they are (for invalid UTF-8)."""
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(raw)) + raw


def prop(ident: int, value: int | str | bytes) -> bytes:
    kind = PROPERTY_TYPES.get(ident, BYTE)
    if isinstance(value, (bytes, str)) and kind in (STRING, BINARY, BYTE):
        return varint(ident) + text(value)
    return varint(ident) + {BYTE: struct.pack(">B", value), TWO: struct.pack(">H", value),
                            FOUR: struct.pack(">I", value), VARINT: varint(value)}[kind]


def props(*encoded: bytes) -> bytes:
    body = b"".join(encoded)
    return varint(len(body)) + body


def packet(kind: int, flags: int, body: bytes) -> bytes:
    return bytes([(kind << 4) | flags]) + varint(len(body)) + body


def connect(version: int = 5, client_id: str | bytes = "", *, clean: bool = True, keep_alive: int = 30,
            properties: bytes | None = None, name: bytes = b"MQTT", flags: int | None = None,
            will: tuple[str | bytes, bytes] | None = None, header_flags: int = 0, tail: bytes = b"") -> bytes:
    """CONNECT; `version` is the protocol level (3 = 3.1 "MQIsdp", 4 = 3.1.1, 5 = 5.0); `tail`
    is appended to the payload as it is (user name, password)."""
    if version == 3 and name == b"MQTT":
        name = b"MQIsdp"
    connect_flags = (0x02 if clean else 0) | (0x04 if will else 0)
    if flags is not None:
        connect_flags = flags
    body = text(name) + bytes([version, connect_flags]) + struct.pack(">H", keep_alive)
    if version == 5:
        body += properties if properties is not None else props()
    body += text(client_id)
    if will:
        if version == 5:
            body += props()
        body += text(will[0]) + text(will[1])
    return packet(CONNECT, header_flags, body + tail)


def publish(topic: str | bytes, payload: bytes = b"", *, qos: int = 0, packet_id: int = 1, retain: bool = False,
            version: int = 5, properties: bytes | None = None, dup: bool = False) -> bytes:
    body = text(topic)
    if qos:
        body += struct.pack(">H", packet_id)
    if version == 5:
        body += properties if properties is not None else props()
    flags = (0x08 if dup else 0) | ((qos & 3) << 1) | (1 if retain else 0)
    return packet(PUBLISH, flags, body + payload)


def subscribe(packet_id: int, filters: list[tuple[str | bytes, int]], *, version: int = 5, flags: int = 0x02,
              properties: bytes | None = None) -> bytes:
    body = struct.pack(">H", packet_id)
    if version == 5:
        body += properties if properties is not None else props()
    for topic_filter, options in filters:
        body += text(topic_filter) + bytes([options])
    return packet(SUBSCRIBE, flags, body)


def ack(kind: int, packet_id: int) -> bytes:
    return packet(kind, 0x02 if kind == PUBREL else 0, struct.pack(">H", packet_id))


PING = packet(PINGREQ, 0, b"")


def disconnect(version: int = 5, reason: int = 0) -> bytes:
    return packet(DISCONNECT, 0, bytes([reason, 0]) if version == 5 else b"")


def parse_properties(data: bytes, offset: int) -> tuple[dict[int, object], int]:
    """The property block at `offset`; returns the properties and the offset after them."""
    length, offset = read_varint(data, offset)
    end, found = offset + length, {}
    while offset < end:
        ident, offset = read_varint(data, offset)
        kind = PROPERTY_TYPES.get(ident)
        if kind == BYTE:
            value, offset = data[offset], offset + 1
        elif kind == TWO:
            value, offset = struct.unpack_from(">H", data, offset)[0], offset + 2
        elif kind == FOUR:
            value, offset = struct.unpack_from(">I", data, offset)[0], offset + 4
        elif kind == VARINT:
            value, offset = read_varint(data, offset)
        elif kind in (STRING, BINARY):
            n = struct.unpack_from(">H", data, offset)[0]
            value, offset = data[offset + 2:offset + 2 + n], offset + 2 + n
        elif kind == PAIR:
            n = struct.unpack_from(">H", data, offset)[0]
            m = struct.unpack_from(">H", data, offset + 2 + n)[0]
            key, val = data[offset + 2:offset + 2 + n], data[offset + 4 + n:offset + 4 + n + m]
            value, offset = (key, val), offset + 4 + n + m
        else:
            raise ValueError(f"unknown property 0x{ident:02x} from the broker")
        found[ident] = value
    return found, end


def read_varint(data: bytes, offset: int) -> tuple[int, int]:
    value, shift = 0, 0
    for i in range(4):
        byte = data[offset + i]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, offset + i + 1
    raise ValueError("variable byte integer longer than 4 bytes from the broker")


@dataclass
class Packet:
    kind: int
    flags: int
    body: bytes

    @property
    def name(self) -> str:
        return NAMES.get(self.kind, f"type {self.kind}")

    def reason(self) -> int | None:
        """The reason/return code of a CONNACK, DISCONNECT or acknowledgement."""
        if self.kind == CONNACK:
            return self.body[1] if len(self.body) > 1 else None
        if self.kind in (DISCONNECT, AUTH):
            return self.body[0] if self.body else 0
        if self.kind in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            return self.body[2] if len(self.body) > 2 else 0
        return None

    def packet_id(self) -> int:
        return struct.unpack_from(">H", self.body, 0)[0]

    def connack_properties(self) -> dict[int, object]:
        return parse_properties(self.body, 2)[0] if len(self.body) > 2 else {}

    def suback_codes(self, version: int) -> list[int]:
        offset = 2
        if version == 5:
            _, offset = parse_properties(self.body, 2)
        return list(self.body[offset:])

    def publish_topic(self) -> bytes:
        n = struct.unpack_from(">H", self.body, 0)[0]
        return self.body[2:2 + n]

    def publish_packet_id(self) -> int | None:
        """The packet identifier of a QoS 1/2 PUBLISH (None at QoS 0)."""
        if not self.flags & 0x06:
            return None
        return struct.unpack_from(">H", self.body, 2 + len(self.publish_topic()))[0]

    def describe(self) -> str:
        code = self.reason()
        if self.kind == DISCONNECT or (self.kind == CONNACK and code is not None):
            return f"{self.name} 0x{code:02x}"
        return self.name


def take(buf: bytearray) -> Packet | None:
    """Removes and returns the first whole packet of `buf` (None while it is incomplete)."""
    if len(buf) < 2:
        return None
    length, shift, i = 0, 0, 1
    while True:
        if i >= len(buf):
            return None
        byte = buf[i]
        length |= (byte & 0x7F) << shift
        shift += 7
        i += 1
        if not byte & 0x80:
            break
        if i > 4:
            raise ValueError("broker sent a remaining length over 4 bytes")
    if len(buf) < i + length:
        return None
    first = buf[0]
    result = Packet(first >> 4, first & 0x0F, bytes(buf[i:i + length]))
    del buf[:i + length]
    return result


class Closed(Exception):
    """The broker closed the connection (FIN or reset)."""


class Timeout(Exception):
    """Nothing arrived in time."""


@dataclass
class Conn:
    """One raw connection; reads whole packets with a deadline."""

    sock: socket.socket
    version: int = 5
    buf: bytearray = field(default_factory=bytearray)
    opened: float = field(default_factory=time.monotonic)

    @classmethod
    def open(cls, host: str, port: int, *, version: int = 5, source: str | None = None,
             tls: ssl.SSLContext | None = None, rcvbuf: int | None = None, timeout: float = 5.0) -> "Conn":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if source:
            sock.bind((source, 0))
        sock.settimeout(timeout)
        sock.connect((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        return cls(sock, version)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError) as e:
            raise Closed(str(e)) from e

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout()
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, TimeoutError):
            raise Timeout() from None
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError) as e:
            raise Closed(str(e)) from e
        if not data:
            raise Closed("EOF")
        self.buf += data

    def read(self, timeout: float = 5.0) -> Packet:
        deadline = time.monotonic() + timeout
        while True:
            parsed = self._take()
            if parsed:
                return parsed
            self._fill(deadline)

    def _take(self) -> Packet | None:
        return take(self.buf)

    def expect(self, kind: int, timeout: float = 5.0, skip: tuple[int, ...] = ()) -> Packet:
        """The next packet, which must be of `kind` (packets in `skip` are passed over)."""
        while True:
            p = self.read(timeout)
            if p.kind in skip:
                continue
            if p.kind != kind:
                raise AssertionError(f"expected {NAMES[kind]}, got {p.describe()}")
            return p

    def handshake(self, client_id: str, *, properties: bytes | None = None, clean: bool = True) -> Packet:
        self.send(connect(self.version, client_id, properties=properties, clean=clean))
        ack_ = self.expect(CONNACK)
        if ack_.reason():
            raise AssertionError(f"CONNACK refused the client: 0x{ack_.reason():02x}")
        return ack_

    def until_closed(self, timeout: float) -> list[Packet]:
        """Every packet until the broker closes; Timeout if it is still open after `timeout`."""
        deadline, seen = time.monotonic() + timeout, []
        while True:
            try:
                seen.append(self.read(max(deadline - time.monotonic(), 0.001)))
            except Closed:
                return seen
            except Timeout:
                raise Timeout(f"still open after {timeout:.1f} s; received "
                              f"{[p.describe() for p in seen] or 'nothing'}") from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
