"""mesgd's content-routing WebSockets and REST API on the HTTP listener (docs/content.md,
docs/api.md): refused upgrades (bad and reserved paths, missing or forged credentials),
malformed frames on an admitted connection, a listener too slow to read, and malformed HTTP.
`--content-public-path` names a path the broker admits without a credential."""

from __future__ import annotations

import json
import socket
import threading
import time

from .harness import Failure, Target, case
from .slow_consumers import PAYLOAD, RssWatch, flood_messages
from .ws import CLOSE, Refused, WebSocket

family = case("content")


def upgrade(t: Target, path: str, headers: tuple[str, ...] = ()) -> WebSocket:
    return WebSocket.connect(t.host, t.need("http"), path, headers=headers)


def refused_with(t: Target, path: str, status: int, headers: tuple[str, ...] = ()) -> str:
    try:
        ws = upgrade(t, path, headers)
    except Refused as e:
        if e.status != status:
            raise Failure(f"{path}: {e}, expected {status}") from None
        return f"{path} {e.status}"
    ws.close()
    raise Failure(f"{path}: upgraded, expected {status}")


@family
def bad_paths(t: Target) -> str:
    """Upgrades at paths that do not parse: /a=b=c, /=b, /a*=b, /a=b*, /a=1/a=2, /0=x/kind=y,
    /4294967296=x, /%zz, /%ff, and 65 segments. Each is answered 400, no upgrade."""
    paths = ["/a=b=c", "/=b", "/a*=b", "/a=b*", "/a=1/a=2", "/0=x/kind=y", "/4294967296=x", "/%zz", "/%ff",
             "/" + "/".join(f"k{i}=v" for i in range(65))]
    return "; ".join(refused_with(t, p, 400) for p in paths)[:300]


@family
def reserved_paths(t: Target) -> str:
    """Upgrades at /api/x, /metrics/ws, /console/x, /auth/x, /mqtt/x: reserved for other routes,
    so never a content listener: any answer but 101 (404 where no other route answers)."""
    answers = []
    for path in ["/api/x", "/metrics/ws", "/console/x", "/auth/x", "/mqtt/x"]:
        try:
            upgrade(t, path).close()
        except Refused as e:
            answers.append(f"{path} {e.status}")
            continue
        raise Failure(f"{path}: upgraded to a WebSocket")
    return "; ".join(answers)


@family
def missing_and_forged_credentials(t: Target) -> str:
    """An upgrade at /kind=private with no credential: 401. With "Authorization: Bearer
    not-a-token": 401. With two different Authorization headers: 400."""
    return "; ".join([
        refused_with(t, "/kind=private", 401),
        refused_with(t, "/kind=private", 401, ("Authorization: Bearer not-a-token",)),
        refused_with(t, "/kind=private", 400, ("Authorization: Bearer a", "Authorization: Bearer b")),
    ])


def admitted(t: Target) -> WebSocket:
    return upgrade(t, t.content_public_path)


def closed_with(t: Target, send, code: int) -> str:
    ws = admitted(t)
    try:
        send(ws)
    except OSError:
        pass
    got, reason = ws.close_code()
    ws.close()
    if got != code:
        raise Failure(f"close {got} {reason!r}, expected {code}")
    return f"{code} {reason[:60]!r}"


@family
def malformed_json(t: Target) -> str:
    """On an admitted content connection: a text message '{"hostile":' (truncated JSON). Close
    1007 with the scanner's message."""
    return closed_with(t, lambda ws: ws.send('{"hostile":'), 1007)


@family
def json_scalar(t: Target) -> str:
    """A text message that is the JSON number 42: not a message, close 1007."""
    return closed_with(t, lambda ws: ws.send("42"), 1007)


@family
def invalid_utf8_text(t: Target) -> str:
    """A text frame whose bytes are not UTF-8 (ff fe): close 1007."""
    return closed_with(t, lambda ws: ws.send(b"\xff\xfe", 0x1), 1007)


@family
def binary_frame(t: Target) -> str:
    """A binary frame holding valid JSON: binary frames are refused, close 1003."""
    return closed_with(t, lambda ws: ws.send(b'{"hostile":1}', 0x2), 1003)


@family
def message_too_large(t: Target) -> str:
    """A 70,000-byte JSON text message (over the default 65,536): close 1009."""
    return closed_with(t, lambda ws: ws.send(json.dumps({"hostile": 1, "pad": "x" * 70_000})), 1009)


@family
def slow_listener(t: Target) -> str:
    """A listener on the public path that does not read while a sender writes matching 16 KiB
    messages, three times `--rss-bound-mb` in all (at most 10 s); a second listener reads
    everything. The slow one is disconnected (1008, or without a close frame, which it cannot reach
    behind its unread messages) once its queue is past the cap; the reading one stays and
    receives; RSS stays bounded."""
    watch = RssWatch(t)
    path = t.content_public_path
    slow = upgrade(t, path)
    fast = upgrade(t, path)
    fast_count = [0]

    def read_fast() -> None:
        try:
            while True:
                opcode, _ = fast.recv(2.0)
                if opcode == CLOSE:
                    fast_count.append("closed")
                    return
                fast_count[0] += 1
        except (TimeoutError, ConnectionError, OSError):
            return

    reader = threading.Thread(target=read_fast, daemon=True)
    reader.start()
    sender = upgrade(t, path)
    message = json.dumps({path.strip("/").split("=")[0]: 1, "pad": "m" * (len(PAYLOAD) - 30)})
    started, sent = time.monotonic(), 0
    while sent < flood_messages(t) and time.monotonic() - started < 10:
        sender.send(message)
        sent += 1
    reader.join(15)
    code, reason = slow.close_code(timeout=15)
    slow.close()
    fast.close()
    sender.close()
    memory = watch.finish()
    # A peer that stopped reading may never get the close frame (it sits behind the unread
    # messages): a disconnect without one is as good.
    if code not in (1008, None):
        raise Failure(f"the slow listener got close {code} {reason!r}, expected 1008 or a disconnect")
    if "closed" in fast_count or fast_count[0] < sent:
        raise Failure(f"the reading listener got {fast_count[0]} of {sent} ({fast_count[1:]})")
    return f"{sent} sent; slow listener closed {code} {reason[:40]!r}; reader got all; {memory}"


def http(t: Target, data: bytes, timeout: float = 5.0) -> bytes:
    sock = socket.create_connection((t.host, t.need("http")), timeout=timeout)
    try:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and b"Connection: close" not in data and len(out) > 12:
                head, _, body = out.partition(b"\r\n\r\n")
                length = [int(h.split(b":")[1]) for h in head.split(b"\r\n")
                          if h.lower().startswith(b"content-length:")]
                if length and len(body) >= length[0]:
                    break
        return out
    except (ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        sock.close()


def status(response: bytes) -> int | None:
    try:
        return int(response.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


@family
def http_garbage_request(t: Target) -> str:
    """Not HTTP at all ("\\x16\\x03\\x01 hello\\r\\n\\r\\n") to the HTTP port: a 400 or a close."""
    got = http(t, b"\x16\x03\x01 hello\r\n\r\n")
    if got and status(got) != 400:
        raise Failure(f"answered {got[:60]!r}")
    return f"{status(got) or 'no answer'}, closed"


@family
def http_huge_header(t: Target) -> str:
    """A GET with one 1 MB header: refused (431 or 400) or closed, never served."""
    got = http(t, b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 1_000_000 + b"\r\n\r\n")
    if got and status(got) not in (400, 431):
        raise Failure(f"answered {got[:60]!r}")
    return f"{status(got) or 'no answer'}"


@family
def pattern_compile_malformed_json(t: Target) -> str:
    """POST /api/patterns/compile with a body that is not JSON: 400 with a one-line error."""
    body = b'{"sample": {"kind": '
    got = http(t, b"POST /api/patterns/compile HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    if status(got) != 400:
        raise Failure(f"answered {got[:80]!r}")
    return "400"


@family
def pattern_compile_body_too_large(t: Target) -> str:
    """POST /api/patterns/compile with a 2 MiB body (over its 64 KiB and the API's 1 MiB
    limits): refused with 400 or 413 (or a close), never compiled."""
    head = (b"POST /api/patterns/compile HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2097152\r\nConnection: close\r\n\r\n")
    got = http(t, head + b" " * 2_097_152, timeout=t.connect_timeout + t.slack + 5)
    if got and status(got) not in (400, 413):
        raise Failure(f"answered {got[:80]!r}")
    return f"{status(got) or 'closed'}"
