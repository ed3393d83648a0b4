#!/usr/bin/env python3
"""Runs the hostile-input suite against a running broker; one line per case, then a summary.

    python3 tests/hostile/run.py --mqtt 1883 [--mqtts 8883 --ca ca.pem] [--ws 8080]
        [--http 8080]
        [--relay-tcp 7000] [--relay-ws 7001] [--pid PID] [--connect-timeout 10] ...

Exit status 0 when no case FAILed or XPASSed (SKIPs are allowed unless --no-skips).
See README.md for what each case sends and what a correct broker must do.
"""

from __future__ import annotations

import argparse
import sys
import time

from hostile import content, floods, malformed, relay, slow_consumers, slowloris  # noqa: F401 - registers cases
from hostile.expectations import MESGD
from hostile.harness import CASES, Report, Target, run_case
from hostile.healthy import exchange

FAMILIES = ["malformed", "slowloris", "slow_consumers", "floods", "relay", "content"]
CASES.sort(key=lambda c: FAMILIES.index(c.name.split(".")[0]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--mqtt", type=int, required=True, help="MQTT over TCP port")
    p.add_argument("--mqtts", type=int, help="MQTT over TLS port (needs --ca)")
    p.add_argument("--ca", help="PEM CA certificate that the TLS listener's certificate chains to")
    p.add_argument("--ws", type=int, help="MQTT over WebSocket port (path --mqtt-ws-path)")
    p.add_argument("--mqtt-ws-path", default="/mqtt")
    p.add_argument("--http", type=int, help="mesgd's HTTP listener: content routing, the REST API, HTTP slowloris")
    p.add_argument("--relay-tcp", type=int, help="mesgd relay over TCP port")
    p.add_argument("--relay-ws", type=int, help="mesgd relay over WebSocket port")
    p.add_argument("--pid", type=int, help="the broker's process id: RSS is sampled, liveness checked")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="the broker's handshake deadline, s")
    p.add_argument("--slack", type=float, default=3.0, help="seconds allowed past a deadline")
    p.add_argument("--max-connections-per-ip", type=int, help="the broker's per-address connection limit")
    p.add_argument("--max-subscriptions", type=int, help="the broker's per-client subscription limit")
    p.add_argument("--rss-bound-mb", type=float, default=64.0,
                   help="RSS growth allowed during a slow-consumer flood (which carries three times as much)")
    p.add_argument("--content-public-path", default="/hostile", help="a content path admitted without a credential")
    p.add_argument("--broker", choices=["mesgd", "other"], default="mesgd",
                   help="mesgd: known findings are expected failures (XFAIL); other: no expectations")
    p.add_argument("--only", action="append", default=[], help="run only cases whose name contains this")
    p.add_argument("--no-skips", action="store_true", help="a SKIPped case fails the run")
    p.add_argument("--list", action="store_true", help="list the cases and what they send")
    p.add_argument("--markdown", action="store_true", help="the case table of README.md")
    args = p.parse_args()
    if args.markdown:
        print(markdown(), end="")
        return 0
    if args.list:
        for c in CASES:
            print(f"{c.name}\n    {' '.join(c.doc.split())}")
        return 0
    target = Target(host=args.host, mqtt=args.mqtt, mqtts=args.mqtts, ca=args.ca, ws=args.ws, http=args.http,
                    mqtt_ws_path=args.mqtt_ws_path, relay_tcp=args.relay_tcp, relay_ws=args.relay_ws,
                    pid=args.pid, connect_timeout=args.connect_timeout, slack=args.slack,
                    max_connections_per_ip=args.max_connections_per_ip, max_subscriptions=args.max_subscriptions,
                    rss_bound_mb=args.rss_bound_mb, content_public_path=args.content_public_path,
                    broker=args.broker)
    expected = MESGD if args.broker == "mesgd" else {}
    report = Report()
    started = time.monotonic()
    exchange(target, "start")  # the broker must be healthy before anything is blamed on a case
    for c in CASES:
        if args.only and not any(o in c.name for o in args.only):
            continue
        report.add(c.name, run_case(target, c, expected.get(c.name), exchange))
    report.add("final.transports", final(target))
    n = report.counts
    bad = n.get("FAIL", 0) + n.get("XPASS", 0) + (n.get("SKIP", 0) if args.no_skips else 0)
    print(f"hostile: {n.get('PASS', 0)} passed, {bad} failed, {n.get('XFAIL', 0)} expected failures, "
          f"{n.get('SKIP', 0)} skipped in {time.monotonic() - started:.0f} s", flush=True)
    return 1 if bad else 0


def markdown() -> str:
    """One table per family: each case, what it sends and what a correct broker must do."""
    out, family = [], None
    for c in CASES:
        name, _, case_name = c.name.partition(".")
        if name != family:
            family = name
            out += ["", f"### {family}", "", "| case | sends, and what a correct broker must do |", "|---|---|"]
        out.append(f"| `{case_name}` | {' '.join(c.doc.split()).replace('|', '&#124;')} |")
    return "\n".join(out[1:]) + "\n"


def final(target: Target):
    """At the end: the healthy exchange over every transport given, with 3.1.1 and 5.0."""
    from hostile.harness import Outcome
    import paho.mqtt.client as mqtt

    started, done = time.monotonic(), []
    try:
        done.append("tcp/5 " + exchange(target, "the suite"))
        done.append("tcp/3.1.1 " + exchange(target, "the suite", protocol=mqtt.MQTTv311))
        if target.mqtts:
            done.append("tls " + exchange(target, "the suite", tls=True))
        if target.ws:
            done.append("ws " + exchange(target, "the suite", transport="websockets"))
    except Exception as e:  # noqa: BLE001
        return Outcome("FAIL", f"{'; '.join(done)}; then {e}", time.monotonic() - started)
    if not target.alive():
        return Outcome("FAIL", "the broker process is gone", time.monotonic() - started)
    return Outcome("PASS", "; ".join(done), time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
