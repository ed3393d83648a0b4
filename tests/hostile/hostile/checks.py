"""What a case expects back: a close, preceded at most by the reason codes the spec allows."""

from __future__ import annotations

import time

from . import wire
from .harness import Failure, Target


def fresh(t: Target, version: int = 5, *, source: str | None = None, connected: bool = True,
          tls: bool = False, **kw) -> wire.Conn:
    conn = wire.Conn.open(t.host, t.mqtts if tls else t.mqtt, version=version, source=source,
                          tls=t.tls_context() if tls else None, **kw)
    if connected:
        conn.handshake(t.unique("hostile"))
    return conn


def closes(conn: wire.Conn, t: Target, *, connack: tuple[int, ...] = (), disconnect: tuple[int, ...] = (),
           other: tuple[int, ...] = (), timeout: float | None = None) -> str:
    """The broker must close `conn`. Before the close it may send a CONNACK whose code is in
    `connack`, a DISCONNECT whose code is in `disconnect`, and packets whose type is in `other`;
    anything else is a failure. Returns what came back."""
    started = time.monotonic()
    try:
        seen = conn.until_closed(timeout if timeout is not None else t.connect_timeout + t.slack)
    except wire.Timeout as e:
        raise Failure(str(e)) from None
    finally:
        conn.close()
    for p in seen:
        if p.kind == wire.CONNACK and p.reason() in connack:
            continue
        if p.kind == wire.DISCONNECT and p.reason() in disconnect:
            continue
        if p.kind in other:
            continue
        allowed = [f"CONNACK 0x{c:02x}" for c in connack] + [f"DISCONNECT 0x{c:02x}" for c in disconnect]
        raise Failure(f"got {p.describe()} before the close; allowed: {', '.join(allowed) or 'nothing'}")
    said = ", ".join(p.describe() for p in seen) or "no answer"
    return f"{said}, closed after {1000 * (time.monotonic() - started):.0f} ms"


def stays_open(conn: wire.Conn) -> None:
    """A PINGREQ is answered: the connection still works."""
    conn.send(wire.PING)
    conn.expect(wire.PINGRESP, skip=(wire.PUBLISH, wire.PUBACK, wire.SUBACK))


class Watcher:
    """A subscriber on `filter_`: afterwards, `received()` says what reached it."""

    def __init__(self, t: Target, filter_: str):
        self.conn = fresh(t, 5)
        self.conn.send(wire.subscribe(1, [(filter_, 1)]))
        codes = self.conn.expect(wire.SUBACK).suback_codes(5)
        if codes != [1]:
            raise Failure(f"watcher subscription refused: {codes}")

    def received(self, wait: float = 0.5) -> list[bytes]:
        """Topics delivered to the watcher (waits `wait` s after a PINGREQ round trip)."""
        topics = []
        self.conn.send(wire.PING)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                p = self.conn.read(max(deadline - time.monotonic(), 0.01))
            except wire.Timeout:
                break
            if p.kind == wire.PUBLISH:
                topics.append(p.publish_topic())
                packet_id = p.publish_packet_id()
                if packet_id is not None:
                    self.conn.send(wire.ack(wire.PUBACK, packet_id))
        self.conn.close()
        return topics
