"""Cases, the target broker they run against, and the line each prints.

A case is a function that takes the `Target` and returns a short description of what the
broker did; it raises `Failure` when the broker got it wrong and `NotApplicable` when the
target lacks what it needs (a listener, a configured limit). After every case that ran, a
healthy paho-mqtt client must still connect and exchange a message at QoS 1.
"""

from __future__ import annotations

import os
import ssl
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable


class Failure(Exception):
    """The broker did something a correct broker must not."""


class NotApplicable(Exception):
    """The target has no listener or limit this case needs."""


@dataclass
class Target:
    host: str
    mqtt: int
    mqtts: int | None = None
    ca: str | None = None
    ws: int | None = None
    mqtt_ws_path: str = "/mqtt"
    http: int | None = None
    relay_tcp: int | None = None
    relay_ws: int | None = None
    pid: int | None = None
    connect_timeout: float = 10.0
    slack: float = 3.0
    max_connections_per_ip: int | None = None
    max_subscriptions: int | None = None
    rss_bound_mb: float = 64.0
    content_public_path: str = "/hostile"
    broker: str = "mesgd"
    counter: int = 0

    def unique(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{os.getpid()}-{self.counter}"

    def need(self, name: str):
        value = getattr(self, name)
        if value is None:
            raise NotApplicable(f"no --{name.replace('_', '-')} given")
        return value

    def tls_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.need("ca"))
        ctx.check_hostname = False
        return ctx

    def rss_kb(self) -> int | None:
        if self.pid is None:
            return None
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def alive(self) -> bool:
        return self.pid is None or os.path.exists(f"/proc/{self.pid}")


@dataclass
class Case:
    name: str
    run: Callable[[Target], str]
    doc: str


CASES: list[Case] = []


def case(family: str):
    """Registers a case as `family.function_name`; its docstring is what it sends and expects."""

    def register(fn: Callable[[Target], str]) -> Callable[[Target], str]:
        CASES.append(Case(f"{family}.{fn.__name__}", fn, (fn.__doc__ or "").strip()))
        return fn

    return register


@dataclass
class Outcome:
    status: str
    detail: str
    elapsed: float


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, outcome: Outcome) -> None:
        self.counts[outcome.status] = self.counts.get(outcome.status, 0) + 1
        line = f"{outcome.status:<5} {name} ({outcome.elapsed:.1f} s): {outcome.detail}"
        self.lines.append(line)
        print(line, flush=True)


def run_case(target: Target, c: Case, expected_failure: str | None,
             healthy: Callable[[Target, str], str]) -> Outcome:
    started = time.monotonic()
    try:
        detail = c.run(target)
        ok = True
    except NotApplicable as e:
        return Outcome("SKIP", str(e), time.monotonic() - started)
    except (Failure, AssertionError) as e:
        detail, ok = str(e) or type(e).__name__, False
    except Exception as e:  # noqa: BLE001 - a crash of the case is reported, not raised
        detail, ok = f"case error: {type(e).__name__}: {e} at {traceback.format_exc(limit=-1).strip()}", False
    try:
        health = healthy(target, c.name)
    except Exception as e:  # noqa: BLE001
        return Outcome("FAIL", f"{detail}; then the healthy client failed: {e}", time.monotonic() - started)
    elapsed = time.monotonic() - started
    if not target.alive():
        return Outcome("FAIL", f"{detail}; the broker process is gone", elapsed)
    if expected_failure:
        if ok:
            return Outcome("XPASS", f"expected to fail ({expected_failure}) but passed: {detail}", elapsed)
        return Outcome("XFAIL", f"{expected_failure} | observed: {detail} | {health}", elapsed)
    return Outcome("PASS" if ok else "FAIL", f"{detail} | {health}", elapsed)
