"""Slowloris: handshakes that never finish. The broker must close each connection within its
handshake deadline (`--connect-timeout`, counted from the TCP accept) plus `--slack`."""

from __future__ import annotations

import base64
import os
import select
import socket
import ssl
import time

from . import wire
from .harness import Failure, Target, case

family = case("slowloris")


def open_socket(t: Target, port: int) -> tuple[socket.socket, float]:
    sock = socket.create_connection((t.host, port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock, time.monotonic()


def closed_by(sock: socket.socket, started: float, t: Target, drip: bytes = b"", every: float = 0.1) -> str:
    """Sends `drip` one byte per `every` s (nothing when empty) until the broker closes the
    socket; fails if it is still open at the deadline plus slack or if it answers anything
    but a close (a TLS alert or an HTTP error status is allowed and reported)."""
    limit = started + t.connect_timeout + t.slack
    answer, sent = b"", 0
    try:
        while True:
            now = time.monotonic()
            if now > limit:
                raise Failure(f"still open {now - started:.1f} s after the accept "
                              f"({sent} of {len(drip)} bytes dripped; deadline {t.connect_timeout} s)")
            readable, _, _ = select.select([sock], [], [], min(every, max(limit - now, 0.01)))
            if readable:
                try:
                    data = sock.recv(4096)
                except (ConnectionResetError, OSError):
                    data = b""
                if not data:
                    break
                answer += data
                continue
            if drip and sent < len(drip):
                try:
                    sock.send(drip[sent:sent + 1])
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += 1
    finally:
        sock.close()
    elapsed = time.monotonic() - started
    said = f"answered {len(answer)} bytes ({answer[:8].hex()}...) then " if answer else ""
    if drip and sent == len(drip):
        raise Failure(f"the whole dripped handshake was accepted ({said}closed after {elapsed:.2f} s)")
    return f"{said}closed {elapsed:.2f} s after the accept ({sent} bytes dripped)"


@family
def connect_dripped(t: Target) -> str:
    """An MQTT 5 CONNECT with a 120-byte client id, one byte every 100 ms (~13 s in all): closed
    by the connect deadline, never answered with a CONNACK."""
    sock, started = open_socket(t, t.mqtt)
    return closed_by(sock, started, t, wire.connect(5, "d" * 120))


@family
def connect_never_sent(t: Target) -> str:
    """A TCP connection to the MQTT port that sends nothing: closed by the connect deadline."""
    sock, started = open_socket(t, t.mqtt)
    return closed_by(sock, started, t)


@family
def connect_half_sent(t: Target) -> str:
    """The first 10 bytes of a CONNECT, then silence: closed by the connect deadline."""
    sock, started = open_socket(t, t.mqtt)
    sock.sendall(wire.connect(4, "half-connect-client")[:10])
    return closed_by(sock, started, t)


def client_hello() -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


@family
def tls_client_hello_unfinished(t: Target) -> str:
    """Half of a real TLS ClientHello to the TLS port, then silence: closed by the deadline."""
    sock, started = open_socket(t, t.need("mqtts"))
    hello = client_hello()
    sock.sendall(hello[:len(hello) // 2])
    return closed_by(sock, started, t)


@family
def tls_client_hello_dripped(t: Target) -> str:
    """A whole TLS ClientHello, one byte every 100 ms: closed by the deadline."""
    sock, started = open_socket(t, t.need("mqtts"))
    return closed_by(sock, started, t, client_hello())


@family
def tls_handshake_never_finished(t: Target) -> str:
    """A whole ClientHello, then never the client's Finished: the server's flight may come, then
    the close by the deadline."""
    sock, started = open_socket(t, t.need("mqtts"))
    sock.sendall(client_hello())
    return closed_by(sock, started, t)


@family
def tls_done_then_no_connect(t: Target) -> str:
    """A completed TLS handshake, then no CONNECT: the deadline counts from the accept, so the
    close comes by then."""
    raw_sock, started = open_socket(t, t.need("mqtts"))
    tls = t.tls_context().wrap_socket(raw_sock, server_hostname="localhost")
    limit = started + t.connect_timeout + t.slack
    tls.settimeout(max(limit - time.monotonic(), 0.01))
    try:
        data = tls.recv(1)
    except (TimeoutError, socket.timeout):
        raise Failure(f"still open {time.monotonic() - started:.1f} s after the accept") from None
    except (ssl.SSLError, OSError):
        data = b""
    finally:
        tls.close()
    if data:
        raise Failure(f"sent {data!r} to a client that sent no CONNECT")
    return f"closed {time.monotonic() - started:.2f} s after the accept"


def upgrade_request(t: Target, path: str, protocol: str | None = "mqtt") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {t.host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if protocol:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@family
def websocket_upgrade_dripped(t: Target) -> str:
    """The MQTT WebSocket upgrade request (`--ws`, `--mqtt-ws-path`), one byte every 100 ms (~20 s):
    closed by the deadline, no 101."""
    sock, started = open_socket(t, t.need("ws"))
    return closed_by(sock, started, t, upgrade_request(t, t.mqtt_ws_path))


@family
def relay_websocket_upgrade_dripped(t: Target) -> str:
    """mesgd's relay WebSocket listener (`--relay-ws`): its upgrade request one byte every
    100 ms: closed by the deadline, no 101."""
    sock, started = open_socket(t, t.need("relay_ws"))
    return closed_by(sock, started, t, upgrade_request(t, "/", protocol=None))


@family
def websocket_upgraded_then_no_connect(t: Target) -> str:
    """A completed MQTT WebSocket upgrade, then no CONNECT: closed by the deadline (a WebSocket
    close frame may come first)."""
    sock, started = open_socket(t, t.need("ws"))
    sock.sendall(upgrade_request(t, t.mqtt_ws_path))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise Failure(f"closed during the upgrade: {head!r}")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        raise Failure(f"upgrade refused: {head.splitlines()[0]!r}")
    return closed_by(sock, started, t)


def any_http(t: Target) -> int:
    """mesgd's HTTP listener (`--http`), else the MQTT WebSocket port: both speak HTTP/1.1."""
    return t.http if t.http is not None else t.need("ws")


@family
def http_headers_never_end(t: Target) -> str:
    """GET /api/v1/status with a Host header and then no blank line: closed by the deadline."""
    sock, started = open_socket(t, any_http(t))
    sock.sendall(f"GET /api/v1/status HTTP/1.1\r\nHost: {t.host}\r\nX-Slow: 1\r\n".encode())
    return closed_by(sock, started, t)


@family
def http_headers_dripped(t: Target) -> str:
    """A GET whose 400 bytes of headers arrive one byte every 100 ms: closed by the deadline
    (an HTTP 408 may come first)."""
    sock, started = open_socket(t, any_http(t))
    request = f"GET / HTTP/1.1\r\nHost: {t.host}\r\n" + "".join(f"X-Drip-{i}: {'v' * 20}\r\n" for i in range(14))
    return closed_by(sock, started, t, request.encode() + b"\r\n")


@family
def http_nothing_sent(t: Target) -> str:
    """A TCP connection to the HTTP port that sends nothing: closed by the deadline."""
    sock, started = open_socket(t, any_http(t))
    return closed_by(sock, started, t)


@family
def http_keep_alive_idle(t: Target) -> str:
    """One complete GET, its response read, then silence on the kept-alive connection: the next
    request's headers have the same deadline, so the idle connection is closed by then."""
    sock, _ = open_socket(t, any_http(t))
    sock.sendall(f"GET /hostile-keep-alive HTTP/1.1\r\nHost: {t.host}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            sock.close()
            return "closed without answering the GET (nothing held open)"
        head += chunk
    if b"connection: close" in head.lower():
        sock.close()
        return "the broker closes after each response (Connection: close)"
    status_line = head.split(b"\r\n")[0].decode(errors="replace")
    idle = closed_by(sock, time.monotonic(), t).replace("after the accept", "after the response")
    return f"answered {status_line!r}, then {idle}"


def body_never_finished(t: Target, path: str) -> str:
    sock, started = open_socket(t, t.need("http"))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {t.host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: 100\r\n\r\n{{\"sample\":".encode())
    return closed_by(sock, started, t)


@family
def http_body_never_finished_compile(t: Target) -> str:
    """POST /api/patterns/compile (no credential needed) announcing a 100-byte body, 10 bytes
    sent, then silence: the connection must not be held past the handshake deadline (a 408 may
    come first)."""
    return body_never_finished(t, "/api/patterns/compile")


@family
def http_body_never_finished_login(t: Target) -> str:
    """POST /auth/login (no credential needed) announcing a 100-byte body, 10 bytes sent, then
    silence: closed by the deadline (a 408 may come first)."""
    return body_never_finished(t, "/auth/login")
