"""A minimal RFC 6455 WebSocket client over a plain socket, able to send what a correct client
would not (oversized messages, binary where text is expected, invalid UTF-8)."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time

TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


class Refused(Exception):
    """The upgrade was answered with something other than 101."""

    def __init__(self, status: int, head: bytes):
        super().__init__(f"HTTP {status}: {head.splitlines()[0].decode(errors='replace')}")
        self.status, self.head = status, head


class WebSocket:
    def __init__(self, sock: socket.socket, leftover: bytes, head: bytes):
        self.sock, self.buf, self.head = sock, bytearray(leftover), head

    @classmethod
    def connect(cls, host: str, port: int, path: str, *, protocol: str | None = None,
                headers: tuple[str, ...] = (), timeout: float = 5.0) -> "WebSocket":
        sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", *headers]
        if protocol:
            lines.append(f"Sec-WebSocket-Protocol: {protocol}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                raise Refused(0, head or b"closed without an answer")
            head += chunk
        head, _, leftover = head.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            sock.close()
            raise Refused(status, head)
        return cls(sock, leftover, head)

    def send(self, payload: bytes | str, opcode: int | None = None, fin: bool = True) -> None:
        data = payload.encode() if isinstance(payload, str) else payload
        if opcode is None:
            opcode = TEXT if isinstance(payload, str) else BINARY
        header = bytes([(0x80 if fin else 0) | opcode])
        n = len(data)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = _mask(data, mask)
        self.sock.sendall(header + mask + masked)

    def _need(self, n: int, deadline: float) -> None:
        while len(self.buf) < n:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                raise TimeoutError("no WebSocket frame in time") from None
            except (ConnectionResetError, OSError):
                chunk = b""
            if not chunk:
                raise ConnectionError("closed without a close frame")
            self.buf += chunk

    def recv(self, timeout: float = 5.0) -> tuple[int, bytes]:
        """The next frame (opcode, payload); pings are answered and skipped."""
        deadline = time.monotonic() + timeout
        while True:
            self._need(2, deadline)
            opcode, n = self.buf[0] & 0x0F, self.buf[1] & 0x7F
            offset = 2
            if n == 126:
                self._need(4, deadline)
                n, offset = struct.unpack_from(">H", self.buf, 2)[0], 4
            elif n == 127:
                self._need(10, deadline)
                n, offset = struct.unpack_from(">Q", self.buf, 2)[0], 10
            self._need(offset + n, deadline)
            payload = bytes(self.buf[offset:offset + n])
            del self.buf[:offset + n]
            if opcode == PING:
                self.send(payload, PONG)
                continue
            return opcode, payload

    def close_code(self, timeout: float = 5.0) -> tuple[int | None, str]:
        """Reads until the close frame; returns its code and reason (None: closed without one)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                opcode, payload = self.recv(max(deadline - time.monotonic(), 0.001))
            except ConnectionError:
                return None, "closed without a close frame"
            if opcode == CLOSE:
                if len(payload) >= 2:
                    return struct.unpack(">H", payload[:2])[0], payload[2:].decode(errors="replace")
                return 1005, ""

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _mask(data: bytes, mask: bytes) -> bytes:
    """XOR with the repeated 4-byte mask, as one big-integer operation (fast for large frames)."""
    key = (mask * (len(data) // 4 + 1))[:len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(len(data), "big")
