"""Floods: more connections from one address than allowed, more subscriptions than allowed,
PUBLISH and PINGREQ floods, unacknowledged QoS 2 past the Receive Maximum, and connection
churn. Each is bounded in count and time; the loopback network stands in for other hosts
(Linux routes all of 127.0.0.0/8 to lo, so a client can bind 127.0.0.N as its source)."""

from __future__ import annotations

import socket
import struct
import threading
import time

from . import wire
from .checks import closes, fresh, stays_open
from .harness import Failure, NotApplicable, Target, case
from .healthy import exchange

family = case("floods")
QUOTA_EXCEEDED, RECEIVE_MAXIMUM_EXCEEDED = 0x97, 0x93


@family
def connections_past_per_ip_limit(t: Target) -> str:
    """From 127.0.0.7: `--max-connections-per-ip` + 8 connections, each sending a CONNECT. The
    first N get a CONNACK; the others are closed without one. While they are held, a healthy
    client from 127.0.0.1 is served; after they close, 127.0.0.7 may connect again."""
    limit = t.need("max_connections_per_ip")
    held, refused = [], 0
    try:
        for i in range(limit + 8):
            conn = wire.Conn.open(t.host, t.mqtt, version=4, source="127.0.0.7")
            try:
                conn.send(wire.connect(4, t.unique("per-ip")))
                p = conn.read(t.connect_timeout + t.slack)
            except (wire.Closed, wire.Timeout):
                refused += 1
                conn.close()
                continue
            if p.kind != wire.CONNACK or p.reason():
                raise Failure(f"connection {i}: {p.describe()}")
            held.append(conn)
        if len(held) != limit:
            raise Failure(f"{len(held)} connections admitted from one address, limit {limit} ({refused} refused)")
        during = exchange(t, "a per-address flood")
    finally:
        for c in held:
            c.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            fresh(t, 4, source="127.0.0.7").close()
            break
        except (wire.Closed, wire.Timeout, AssertionError):
            if time.monotonic() > deadline:
                raise Failure("the address was still refused 5 s after its connections closed") from None
            time.sleep(0.1)
    return f"{limit} admitted, {refused} closed unanswered; meanwhile {during}; the address is admitted again"


@family
def subscriptions_past_limit(t: Target) -> str:
    """MQTT 5: `--max-subscriptions` + 20 SUBSCRIBE packets with distinct filters, sent in one
    burst. The first N are granted, every further one refused with 0x97 Quota Exceeded."""
    limit = t.need("max_subscriptions")
    conn = fresh(t, 5)
    conn.send(b"".join(wire.subscribe(i + 1, [(f"hostile/subs/{i}", 1)]) for i in range(limit + 20)))
    codes = [conn.expect(wire.SUBACK).suback_codes(5)[0] for _ in range(limit + 20)]
    stays_open(conn)
    conn.close()
    granted = sum(c == 1 for c in codes)
    if codes[:limit] != [1] * limit or codes[limit:] != [QUOTA_EXCEEDED] * 20:
        raise Failure(f"granted {granted} of {limit + 20}; codes after the limit: {sorted(set(codes[limit:]))}")
    return f"{granted} granted, 20 refused with 0x97"


@family
def one_subscribe_with_many_filters(t: Target) -> str:
    """MQTT 5: one SUBSCRIBE carrying 2,000 filters (about 40 KB). One reason code per filter;
    with `--max-subscriptions` N, exactly N granted and the rest 0x97."""
    conn = fresh(t, 5)
    conn.send(wire.subscribe(1, [(f"hostile/many/{i}", 0) for i in range(2000)]))
    try:
        codes = conn.expect(wire.SUBACK, timeout=10).suback_codes(5)
    except (wire.Closed, wire.Timeout) as e:
        raise Failure(f"no SUBACK: {type(e).__name__} {e}") from None
    stays_open(conn)
    conn.close()
    if len(codes) != 2000:
        raise Failure(f"{len(codes)} reason codes for 2000 filters")
    granted = sum(c == 0 for c in codes)
    if t.max_subscriptions is not None and (granted != t.max_subscriptions or
                                            set(codes[granted:]) != {QUOTA_EXCEEDED}):
        raise Failure(f"{granted} granted (limit {t.max_subscriptions}); others {sorted(set(codes[granted:]))}")
    return f"{granted} of 2000 granted"


@family
def publish_flood_qos1(t: Target) -> str:
    """MQTT 3.1.1: 20,000 QoS 1 PUBLISHes (100 bytes each) written as fast as the broker takes
    them, for at most 5 s, without reading a PUBACK; then the PUBACKs are read. Every one must
    be acknowledged (or the broker held the publisher back), and the connection still answers
    PINGREQ."""
    conn = fresh(t, 4)
    batch_size, total = 500, 20_000
    conn.sock.settimeout(5)
    sent, started = 0, time.monotonic()
    while sent < total and time.monotonic() - started < 5:
        conn.send(b"".join(wire.publish("hostile/flood/p", b"p" * 100, qos=1, packet_id=sent + i + 1, version=4)
                           for i in range(batch_size)))
        sent += batch_size
    acks = 0
    deadline = time.monotonic() + 10
    while acks < sent and time.monotonic() < deadline:
        p = conn.read(max(deadline - time.monotonic(), 0.01))
        acks += p.kind == wire.PUBACK
    stays_open(conn)
    conn.close()
    if acks != sent:
        raise Failure(f"{acks} PUBACKs for {sent} PUBLISHes")
    return f"{sent} PUBLISHes in {time.monotonic() - started:.1f} s, all acknowledged"


@family
def publish_flood_qos0_fanout(t: Target) -> str:
    """MQTT 5: 20 subscribers on one topic that do read; 5,000 QoS 0 PUBLISHes of 512 bytes
    from one client. The subscribers may miss messages under load but must stay connected."""
    topic = f"hostile/fan/{t.unique('f')}"
    subs = []
    for _ in range(20):
        s = fresh(t, 5)
        s.send(wire.subscribe(1, [(topic, 0)]))
        s.expect(wire.SUBACK)
        subs.append(s)
    got = [0] * len(subs)

    def count(k: int) -> None:
        try:
            while True:
                got[k] += subs[k].read(1.0).kind == wire.PUBLISH
        except (wire.Timeout, wire.Closed):
            pass

    readers = [threading.Thread(target=count, args=(k,), daemon=True) for k in range(len(subs))]
    for r in readers:
        r.start()
    pub = fresh(t, 4)
    pub.send(b"".join(wire.publish(topic, b"f" * 512, version=4) for _ in range(5000)))
    stays_open(pub)
    pub.close()
    for r in readers:
        r.join(30)
    for s in subs:
        stays_open(s)
        s.close()
    return f"subscribers received {min(got)}..{max(got)} of 5000; all still connected"


@family
def qos2_past_receive_maximum(t: Target) -> str:
    """MQTT 5: QoS 2 PUBLISHes with distinct packet ids and never a PUBREL, one more than the
    Receive Maximum of the CONNACK (absent = 65,535). [MQTT-3.3.4-9]: the broker answers the
    first ones with PUBREC and the one past the limit with DISCONNECT 0x93."""
    conn = fresh(t, 5, connected=False)
    conn.send(wire.connect(5, t.unique("rm")))
    maximum = conn.expect(wire.CONNACK).connack_properties().get(wire.RECEIVE_MAXIMUM, 65535)
    if maximum > 5000:
        conn.close()
        raise NotApplicable(f"Receive Maximum {maximum} is too large to exceed quickly")
    conn.send(b"".join(wire.publish("hostile/rm", b"x", qos=2, packet_id=i + 1) for i in range(maximum + 1)))
    said = closes(conn, t, disconnect=(RECEIVE_MAXIMUM_EXCEEDED,), other=(wire.PUBREC,))
    if "DISCONNECT" not in said:
        raise Failure(f"{said}: the spec names DISCONNECT 0x93 Receive Maximum exceeded")
    return f"Receive Maximum {maximum}: {said.replace('PUBREC, ', '')}"


@family
def pingreq_flood(t: Target) -> str:
    """MQTT 3.1.1: 50,000 PINGREQs (100 KB) in one write, then read for up to 10 s. The broker
    answers them (or closes this one connection); the healthy client is unaffected."""
    conn = fresh(t, 4)
    conn.sock.settimeout(10)
    conn.send(wire.PING * 50_000)
    answered, started = 0, time.monotonic()
    try:
        while answered < 50_000 and time.monotonic() - started < 10:
            p = conn.read(5)
            answered += p.kind == wire.PINGRESP
    except (wire.Closed, wire.Timeout) as e:
        conn.close()
        return f"{answered} PINGRESPs, then {type(e).__name__}"
    conn.close()
    return f"{answered} PINGRESPs in {time.monotonic() - started:.1f} s"


@family
def connect_disconnect_churn(t: Target) -> str:
    """From 127.0.0.8: 400 connections in turn, each CONNECT, CONNACK, then alternately a
    DISCONNECT or an abrupt close, for at most 20 s. Every one must be admitted: a closed
    connection frees its place once the broker has read the close. This client opens the next
    connection within microseconds of closing the last, before a loaded broker may have read
    the closes (30 or more at once, seen on a two-core machine with other work on it), so a
    refused one is tried again for up to 2 s; it fails if a place stays taken (a connection
    that leaked its place)."""
    started, done, retried = time.monotonic(), 0, 0
    for i in range(400):
        if time.monotonic() - started > 20:
            break
        deadline = time.monotonic() + 2
        while True:
            conn = wire.Conn.open(t.host, t.mqtt, version=5 if i % 2 else 4, source="127.0.0.8")
            try:
                conn.handshake(t.unique("churn"))
                break
            except (wire.Closed, wire.Timeout, AssertionError) as e:
                conn.close()
                if time.monotonic() > deadline:
                    raise Failure(
                        f"connection {i} refused for 2 s after {done} admitted: {type(e).__name__} {e}"
                    ) from None
                retried += 1
                time.sleep(0.01)
        if i % 2:
            conn.send(wire.disconnect(5))
        conn.close()
        done += 1
    return f"{done} connections in {time.monotonic() - started:.1f} s ({retried} refused while closes were read)"


@family
def client_id_takeover_churn(t: Target) -> str:
    """Two connections with one client id take the session from each other 100 times (MQTT 5,
    persistent session). Each takeover closes the previous connection (DISCONNECT 0x8E Session
    taken over, or a close)."""
    client_id = t.unique("takeover")
    previous = None
    for i in range(100):
        conn = wire.Conn.open(t.host, t.mqtt, version=5)
        conn.handshake(client_id, clean=False, properties=wire.props(wire.prop(wire.SESSION_EXPIRY, 60)))
        if previous is not None:
            closes(previous, t, disconnect=(0x8E,), timeout=5)
        previous = conn
    previous.send(wire.disconnect(5))
    previous.close()
    # a clean start ends the persistent session
    last = wire.Conn.open(t.host, t.mqtt, version=5)
    last.handshake(client_id, clean=True)
    last.send(wire.disconnect(5))
    last.close()
    return "100 takeovers, each closing the previous connection"


def per_ip_on(t: Target, port: int, source: str, hello: bytes, answered) -> str:
    """Opens limit + 8 connections from `source` to `port`, each sending `hello`; `answered(sock)`
    says whether the broker answered it. Exactly `limit` must be answered, the rest closed."""
    limit = t.need("max_connections_per_ip")
    held, refused = [], 0
    try:
        for _ in range(limit + 8):
            sock = socket.socket()
            sock.bind((source, 0))
            sock.settimeout(t.connect_timeout + t.slack)
            sock.connect((t.host, port))
            try:
                sock.sendall(hello)
                ok = answered(sock)
            except OSError:
                ok = False
            if ok:
                held.append(sock)
            else:
                refused += 1
                sock.close()
        if len(held) != limit:
            raise Failure(f"{len(held)} connections served from one address, limit {limit} ({refused} refused)")
        during = exchange(t, "a per-address flood")
    finally:
        for s in held:
            s.close()
    return f"{limit} served, {refused} closed unanswered; meanwhile {during}"


@family
def relay_connections_past_per_ip_limit(t: Target) -> str:
    """As connections_past_per_ip_limit on the relay TCP listener from 127.0.0.9: each sends
    a capabilities request; exactly `--max-connections-per-ip` are answered."""
    body = b'{"t":"capabilities"}'

    def answered(sock) -> bool:
        return len(sock.recv(4)) == 4

    return per_ip_on(t, t.need("relay_tcp"), "127.0.0.9", struct.pack(">I", len(body)) + body, answered)


@family
def http_connections_past_per_ip_limit(t: Target) -> str:
    """As connections_past_per_ip_limit on the HTTP listener from 127.0.0.10: each sends a
    keep-alive GET; exactly `--max-connections-per-ip` are answered."""

    def answered(sock) -> bool:
        return sock.recv(12).startswith(b"HTTP/1.1")

    return per_ip_on(t, t.need("http"), "127.0.0.10", b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n\r\n", answered)
