"""Slow consumers: subscribers that stop reading while a publisher floods. The broker's memory
(RSS, when `--pid` is given) must stay within `--rss-bound-mb` of where it started, and a
healthy client must be served while the stuck subscribers are still connected."""

from __future__ import annotations

import socket
import threading
import time

from . import wire
from .checks import fresh
from .harness import Failure, Target, case
from .healthy import exchange
from .ws import WebSocket

family = case("slow_consumers")
PAYLOAD = b"s" * 16_384
FLOOD_SECONDS = 5.0


def flood_messages(t: Target) -> int:
    """Enough 16 KiB messages to carry three times the RSS bound: a broker that buffered them
    all for the stuck subscriber would be far over it."""
    return int(3 * t.rss_bound_mb * 1024 * 1024 / len(PAYLOAD))


class RssWatch:
    """Samples the broker's RSS every 50 ms in a thread; `finish()` checks the peak growth."""

    def __init__(self, t: Target):
        self.t, self.start, self.peak = t, t.rss_kb(), t.rss_kb()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            now = self.t.rss_kb()
            if now is not None and self.peak is not None:
                self.peak = max(self.peak, now)

    def finish(self) -> str:
        self.stop.set()
        self.thread.join()
        if self.start is None:
            return "RSS not sampled (no --pid)"
        growth = (self.peak - self.start) / 1024
        if growth > self.t.rss_bound_mb:
            raise Failure(f"RSS grew {growth:.0f} MB (from {self.start // 1024} MB), over the "
                          f"{self.t.rss_bound_mb:.0f} MB bound")
        return f"RSS {self.start // 1024} MB, peak +{growth:.0f} MB"


def flood(t: Target, topic: str, qos: int) -> str:
    """Publishes 16 KiB messages to `topic` for FLOOD_SECONDS or flood_messages(t), whichever
    comes first, reading (and dropping) its acknowledgements in a second thread. A broker
    that stops reading from the publisher (back-pressure) makes the sends block: that is
    allowed and reported."""
    pub = fresh(t, 4)
    stop = threading.Event()
    acks = [0]

    def drain() -> None:
        while not stop.is_set():
            try:
                p = pub.read(0.2)
            except wire.Timeout:
                continue
            except (wire.Closed, OSError, ValueError):
                return
            acks[0] += p.kind == wire.PUBACK

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    sent, started, blocked = 0, time.monotonic(), False
    batch = b"".join(wire.publish(topic, PAYLOAD, qos=qos, packet_id=(i % 65535) + 1, version=4)
                     for i in range(16))
    pub.sock.settimeout(0.5)
    while sent < flood_messages(t) and time.monotonic() - started < FLOOD_SECONDS:
        try:
            pub.sock.sendall(batch)
        except (TimeoutError, OSError):
            blocked = True
            continue
        sent += 16
    elapsed = time.monotonic() - started
    stop.set()
    reader.join()
    pub.close()
    note = f"; publisher held back by the broker at times" if blocked else ""
    return (f"{sent} QoS {qos} messages ({sent * len(PAYLOAD) >> 20} MiB) in {elapsed:.1f} s "
            f"({acks[0]} PUBACKs read){note}")


def stuck_subscribers(t: Target, topic: str, qos: int, count: int, transport: str = "tcp") -> list:
    subs = []
    for _ in range(count):
        if transport == "ws":
            subs.append(stuck_websocket_subscriber(t, topic, qos))
            continue
        sub = fresh(t, 5, rcvbuf=4096, tls=transport == "tls")
        sub.send(wire.subscribe(1, [(topic, qos)]))
        if sub.expect(wire.SUBACK).suback_codes(5) != [qos]:
            raise Failure("a stuck subscriber's subscription was refused")
        subs.append(sub)  # and never read from again
    return subs


def stuck_websocket_subscriber(t: Target, topic: str, qos: int) -> WebSocket:
    """An MQTT 5 subscriber over WebSocket; CONNACK and SUBACK are read, then nothing more."""
    ws = WebSocket.connect(t.host, t.need("ws"), t.mqtt_ws_path, protocol="mqtt")
    ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ws.send(wire.connect(5, t.unique("ws-stuck")))
    ws.send(wire.subscribe(1, [(topic, qos)]))
    stream, seen = bytearray(), []
    while wire.SUBACK not in seen:
        stream += ws.recv()[1]
        while (p := wire.take(stream)) is not None:
            if p.kind == wire.CONNACK and p.reason():
                raise Failure(f"the WebSocket subscriber was refused: {p.describe()}")
            if p.kind == wire.SUBACK and p.suback_codes(5) != [qos]:
                raise Failure(f"the WebSocket subscription was refused: {p.suback_codes(5)}")
            seen.append(p.kind)
    return ws


def scenario(t: Target, qos: int, count: int, transport: str = "tcp") -> str:
    topic = f"hostile/slow/{t.unique('q')}"
    watch = RssWatch(t)
    subs = stuck_subscribers(t, topic, qos, count, transport)
    result: dict[str, str] = {}
    flooder = threading.Thread(target=lambda: result.update(flooded=flood(t, topic, qos)), daemon=True)
    try:
        flooder.start()
        time.sleep(0.5)  # into the flood, so that the healthy client competes with it
        during = exchange(t, "a flood to stuck subscribers")
        flooder.join(FLOOD_SECONDS + 10)
        flooded = result.get("flooded", "the flood did not finish")
        memory = watch.finish()
    finally:
        for s in subs:
            s.close()
    return f"{count} stuck subscriber(s); {flooded}; {memory}; during the flood: {during}"


@family
def qos0_subscriber_stops_reading(t: Target) -> str:
    """A subscriber (4 KiB receive buffer) to a topic at QoS 0 never reads; a publisher sends
    16 KiB QoS 0 messages to it, three times `--rss-bound-mb` in all (192 MiB by default), for
    at most 5 s. RSS grows by less than the bound; a healthy client is served during the
    flood."""
    return scenario(t, 0, 1)


@family
def qos1_subscriber_stops_reading(t: Target) -> str:
    """As above at QoS 1: the stuck subscriber never reads nor acknowledges; the publisher's
    QoS 1 messages are still acknowledged or held back, memory stays bounded."""
    return scenario(t, 1, 1)


@family
def many_stuck_subscribers(t: Target) -> str:
    """Eight stuck QoS 1 subscribers to one topic and the same flood: memory bounded, others
    served."""
    return scenario(t, 1, 8)


@family
def tls_subscriber_stops_reading(t: Target) -> str:
    """The QoS 1 flood to a stuck subscriber connected over TLS: memory bounded, others served."""
    t.need("mqtts")
    return scenario(t, 1, 1, "tls")


@family
def websocket_subscriber_stops_reading(t: Target) -> str:
    """The QoS 1 flood to a stuck MQTT-over-WebSocket subscriber: memory bounded, others served."""
    t.need("ws")
    return scenario(t, 1, 1, "ws")
