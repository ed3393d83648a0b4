"""mesgd's JSON relay (docs/relay.md) over TCP (4-byte big-endian length + JSON) and WebSocket
(one JSON object per message): malformed frames, unknown types, oversized frames and floods
past the rate buckets. A refused frame gets an `error` and the connection goes on, except where
the protocol says it closes (a frame too large, a flood far over the budget)."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

from .harness import Failure, Target, case
from .ws import CLOSE, WebSocket

family = case("relay")

INVALID_FRAMES = [
    b'{"t":', b"", b"[1]", b'"send"', b"42", b"\xff\xfe{}", b'{"t":"send"} trailing',
    b'{"t":"x","s":"\\ud800"}', b"[" * 100 + b"]" * 100, b'{"t":"send",}', b"{'t':'send'}",
]
UNKNOWN_TYPES = [b'{"t":"frobnicate"}', b'{"t":5}', b"{}", b'{"t":"send","t":"send"}', b'{"t":null}']


class RelayTcp:
    def __init__(self, t: Target):
        self.sock = socket.create_connection((t.host, t.need("relay_tcp")), timeout=5)
        self.buf = b""

    def send(self, body: bytes) -> None:
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the relay closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, timeout: float = 5.0) -> dict:
        self.sock.settimeout(timeout)
        n = struct.unpack(">I", self._exact(4))[0]
        return json.loads(self._exact(n))

    def closed(self, timeout: float = 5.0) -> bool:
        """Reads (and drops) until the relay closes the connection."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except (TimeoutError, socket.timeout):
            return False
        except OSError:
            pass
        return True

    def close(self) -> None:
        self.sock.close()


def expect_error(got: dict, msg: str, what: bytes) -> None:
    if got.get("t") != "error" or got.get("msg") != msg:
        raise Failure(f"{what[:40]!r}: expected error {msg!r}, got {got}")


def capabilities(conn) -> dict:
    conn.send(b'{"t":"capabilities"}')
    got = conn.recv()
    if got.get("t") != "capabilities":
        raise Failure(f"capabilities answered with {got}")
    return got


@family
def tcp_invalid_json(t: Target) -> str:
    """Over relay TCP, one frame each: truncated JSON, an empty body, an array, a string, a
    number, non-UTF-8 bytes, trailing text, a lone-surrogate escape, 100 levels of nesting, a
    trailing comma, single quotes. Each gets error "invalid json" and the connection goes on
    (capabilities still answered)."""
    conn = RelayTcp(t)
    for frame in INVALID_FRAMES:
        conn.send(frame)
        expect_error(conn.recv(), "invalid json", frame)
    capabilities(conn)
    conn.close()
    return f"{len(INVALID_FRAMES)} frames refused with invalid json; connection kept"


@family
def tcp_unknown_types(t: Target) -> str:
    """Over relay TCP: {"t":"frobnicate"}, {"t":5}, {}, a repeated "t", {"t":null}: each
    error "unknown message type", the connection goes on."""
    conn = RelayTcp(t)
    for frame in UNKNOWN_TYPES:
        conn.send(frame)
        expect_error(conn.recv(), "unknown message type", frame)
    capabilities(conn)
    conn.close()
    return f"{len(UNKNOWN_TYPES)} frames refused; connection kept"


@family
def tcp_invalid_fields(t: Target) -> str:
    """Over relay TCP, before registering: a send gets "register first"; a register with an
    empty or 257-character address gets "invalid address"; after registering, a send with a
    numeric "to" gets "invalid field: to" and an ack without "id" "invalid field: id"."""
    conn = RelayTcp(t)
    conn.send(b'{"t":"send","to":"x","ct":"y"}')
    expect_error(conn.recv(), "register first", b"send")
    for addr in ["", "a" * 257]:
        frame = json.dumps({"t": "register", "addr": addr}).encode()
        conn.send(frame)
        expect_error(conn.recv(), "invalid address", frame)
    addr = t.unique("relay")
    conn.send(json.dumps({"t": "register", "addr": addr}).encode())
    if conn.recv().get("t") != "registered":
        raise Failure("register refused")
    conn.send(b'{"t":"send","to":5,"ct":"y"}')
    expect_error(conn.recv(), "invalid field: to", b"send to 5")
    conn.send(b'{"t":"ack","to":"x"}')
    expect_error(conn.recv(), "invalid field: id", b"ack without id")
    conn.close()
    return "each refused with its error; connection kept"


@family
def tcp_frame_too_large(t: Target) -> str:
    """Over relay TCP: a length header of 65,537 (one past the 64 KiB limit) and no body. The
    relay answers error "frame too large" with fatal true and closes, before any body."""
    conn = RelayTcp(t)
    conn.sock.sendall(struct.pack(">I", 65_537))
    got = conn.recv()
    if got.get("msg") != "frame too large" or got.get("fatal") is not True:
        raise Failure(f"got {got}")
    if not conn.closed():
        raise Failure("not closed after a fatal error")
    conn.close()
    return "error frame too large (fatal), closed"


@family
def tcp_length_4_gib(t: Target) -> str:
    """Over relay TCP: a length header of ff ff ff ff: "frame too large", closed."""
    conn = RelayTcp(t)
    conn.sock.sendall(b"\xff\xff\xff\xff" + b"{" * 100)
    got = conn.recv()
    if got.get("msg") != "frame too large":
        raise Failure(f"got {got}")
    if not conn.closed():
        raise Failure("not closed")
    conn.close()
    return "frame too large, closed"


@family
def tcp_truncated_frame(t: Target) -> str:
    """Over relay TCP: a header announcing 100 bytes, 10 sent, then FIN: the relay closes."""
    conn = RelayTcp(t)
    conn.sock.sendall(struct.pack(">I", 100) + b'{"t":"capa')
    conn.sock.shutdown(socket.SHUT_WR)
    if not conn.closed():
        raise Failure("still open after the peer's FIN")
    conn.close()
    return "closed"


def flood_frames(t: Target, conn, frame: bytes, count: int, seconds: float,
                 wait_close: float = 5.0) -> tuple[int, int, bool, str]:
    """Writes `frame` up to `count` times for at most `seconds` while a thread reads the answers;
    returns (sent, rate-limit errors seen, closed by the relay, the last error text)."""
    seen = {"limited": 0, "closed": False, "last": ""}
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                got = conn.recv(0.5)
            except (TimeoutError, socket.timeout):
                continue
            except (ConnectionError, OSError, ValueError):
                seen["closed"] = True
                return
            if got.get("t") == "error":
                seen["last"] = got.get("msg", "")
                seen["limited"] += got.get("msg") == "rate limit exceeded"

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    started, sent = time.monotonic(), 0
    batch = 200
    try:
        while sent < count and time.monotonic() - started < seconds and not seen["closed"]:
            conn.send_many(frame, batch)
            sent += batch
    except OSError:
        pass
    deadline = time.monotonic() + wait_close
    while not seen["closed"] and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join()
    return sent, seen["limited"], seen["closed"], seen["last"]


class RelayTcpFlood(RelayTcp):
    def send_many(self, body: bytes, n: int) -> None:
        self.sock.sendall((struct.pack(">I", len(body)) + body) * n)


@family
def tcp_message_rate_flood(t: Target) -> str:
    """Over relay TCP: `capabilities` requests as fast as the relay reads them, up to three
    times the abuse budget (burst x abuse_multiple from the capabilities reply; at most 60,000)
    for at most 10 s. The relay must answer "rate limit exceeded" and then disconnect the flood
    (docs/relay.md: 20 times over the budget)."""
    conn = RelayTcpFlood(t)
    caps = capabilities(conn)
    budget = caps.get("rate_message_burst", 1000) * caps.get("abuse_multiple", 20)
    sent, limited, closed, last = flood_frames(t, conn, b'{"t":"capabilities"}', min(3 * budget, 60_000), 10)
    conn.close()
    if not limited:
        raise Failure(f"{sent} requests sent, no rate limit exceeded (last error {last!r})")
    if not closed:
        raise Failure(f"{sent} requests, {limited} refused, but the flood was never disconnected")
    return f"{sent} requests sent, {limited} refused as over the rate, then disconnected"


@family
def tcp_byte_rate_flood(t: Target) -> str:
    """Over relay TCP: 60 KB `capabilities` frames (the padding is an ignored member) past the
    byte burst, at most 200 frames (12 MB) in 10 s: "rate limit exceeded" (the byte bucket),
    the relay stays healthy."""
    conn = RelayTcpFlood(t)
    frame = json.dumps({"t": "capabilities", "pad": "b" * 60_000}).encode()
    sent, limited, closed, last = flood_frames(t, conn, frame, 200, 10, wait_close=0.5)
    conn.close()
    if not limited:
        raise Failure(f"{sent} frames of {len(frame)} bytes, no rate limit (last error {last!r})")
    return f"{sent} frames of 60 KB; {limited} refused as over the byte rate; {'disconnected' if closed else 'kept'}"


def relay_ws(t: Target) -> WebSocket:
    return WebSocket.connect(t.host, t.need("relay_ws"), "/")


def ws_json(ws: WebSocket) -> dict:
    opcode, payload = ws.recv()
    if opcode == CLOSE:
        raise Failure(f"closed: {payload[:2].hex()} {payload[2:]!r}")
    return json.loads(payload)


@family
def ws_invalid_json(t: Target) -> str:
    """Over relay WebSocket: the malformed frames of tcp_invalid_json (those that are UTF-8) as
    text messages, and the unknown types. Each gets its error, the connection goes on."""
    ws = relay_ws(t)
    frames = [f for f in INVALID_FRAMES if _utf8(f)]
    for frame in frames:
        ws.send(frame.decode())
        expect_error(ws_json(ws), "invalid json", frame)
    for frame in UNKNOWN_TYPES:
        ws.send(frame.decode())
        expect_error(ws_json(ws), "unknown message type", frame)
    ws.send('{"t":"capabilities"}')
    if ws_json(ws).get("t") != "capabilities":
        raise Failure("capabilities not answered")
    ws.close()
    return f"{len(frames) + len(UNKNOWN_TYPES)} messages refused; connection kept"


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


@family
def ws_message_too_large(t: Target) -> str:
    """Over relay WebSocket: a 65,537-byte text message. Close 1009 "frame too large"."""
    ws = relay_ws(t)
    head, tail = '{"t":"capabilities","pad":"', '"}'
    message = head + "x" * (65_537 - len(head) - len(tail)) + tail
    assert len(message) == 65_537
    ws.send(message)
    code, reason = ws.close_code()
    ws.close()
    if code != 1009:
        raise Failure(f"close {code} {reason!r}, expected 1009")
    return f"close {code} {reason!r}"


@family
def ws_fragmented_too_large(t: Target) -> str:
    """Over relay WebSocket: a message in 40 continuation fragments of 2 KiB (80 KiB in all):
    the reassembled size is over the limit, close 1009."""
    ws = relay_ws(t)
    ws.send("[" + "1," * 1000, 0x1, fin=False)
    try:
        for _ in range(39):
            ws.send("1," * 1024, 0x0, fin=False)
        ws.send("1]", 0x0, fin=True)
    except OSError:
        pass
    code, reason = ws.close_code()
    ws.close()
    if code != 1009:
        raise Failure(f"close {code} {reason!r}, expected 1009")
    return f"close {code} {reason!r}"


class WsFlood:
    def __init__(self, ws: WebSocket):
        self.ws = ws

    def send_many(self, body: bytes, n: int) -> None:
        for _ in range(n):
            self.ws.send(body.decode())

    def recv(self, timeout: float) -> dict:
        opcode, payload = self.ws.recv(timeout)
        if opcode == CLOSE:
            raise ConnectionError("closed")
        return json.loads(payload)


@family
def ws_message_rate_flood(t: Target) -> str:
    """Over relay WebSocket: capabilities requests past the abuse budget (as tcp_message_rate_flood):
    "rate limit exceeded", then the connection is closed."""
    ws = relay_ws(t)
    ws.send('{"t":"capabilities"}')
    caps = ws_json(ws)
    budget = caps.get("rate_message_burst", 1000) * caps.get("abuse_multiple", 20)
    sent, limited, closed, last = flood_frames(t, WsFlood(ws), b'{"t":"capabilities"}', min(3 * budget, 60_000), 10)
    ws.close()
    if not limited or not closed:
        raise Failure(f"{sent} sent, {limited} refused, {'closed' if closed else 'never closed'} (last {last!r})")
    return f"{sent} requests sent, {limited} refused, then closed"
