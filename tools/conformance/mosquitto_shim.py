#!/usr/bin/env python3
"""Runs one test of Mosquitto's broker suite (mosquitto/test/broker/*.py) against mesgd.

    MESGD=path/to/mesgd python3 mosquitto_shim.py 02-subpub-qos1.py     (in mosquitto/test/broker)

The test runs unchanged; only three things of its harness (mosq_test) are replaced:

- start_broker starts mesgd instead of Mosquitto, on the test's port, with the test's
  Mosquitto config translated where it has a mesgd equivalent (listener, allow_anonymous,
  persistence, max_inflight_messages, max_keepalive, ...). A test that needs anything else (a
  plugin, a password or ACL file, TLS, a bridge, a Mosquitto command line) exits 77: skipped.
- A 5.0 CONNACK is compared on its flags and reason code only: the properties a broker
  announces (Receive Maximum, Topic Alias Maximum, ...) are its own choice, and Mosquitto's
  suite expects Mosquitto's.
- A 5.0 DISCONNECT is compared on its reason code only (mesgd adds a Reason String).

Everything else is compared byte for byte, as the suite does for Mosquitto. Helper scripts that
a test starts (./<name>.py) run through this shim too.
"""
import os
import runpy
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# The tests' own directory (mosq_test_helper) and its parent (mosq_test), as when run directly.
sys.path[:0] = [os.getcwd(), os.path.abspath("..")]
import mosq_test  # noqa: E402  (Mosquitto's harness, found next to the tests)

MESGD = os.environ["MESGD"]

# Mosquitto options with a mesgd equivalent: option -> (section, key, converter), or None for
# options that need nothing (the listener and persistence are handled apart).
TRANSLATED = {
    "port": None,
    "listener": None,
    "allow_anonymous": None,
    "persistence": None,
    "persistence_file": None,
    "persistence_location": None,
    "autosave_interval": None,
    "per_listener_settings": None,
    "log_type": None,
    "log_dest": None,
    "sys_interval": None,
    "max_inflight_messages": ("limits", "max_inflight", lambda v: int(v) or 65535),
    "max_keepalive": ("limits", "max_keep_alive", int),
    "max_connections": ("limits", "max_connections", int),
    "max_inflight_bytes": ("limits", "max_inflight_bytes", int),
    "max_queued_messages": ("limits", "max_queued_messages", int),
    "max_packet_size": ("limits", "max_packet_size", int),
    "retain_available": ("mqtt", "retain_available", str),
    "max_qos": ("mqtt", "max_qos", int),
}

# State directories of the brokers that persist, by test file, so that a restart finds them.
STATE_DIRS = {}


class Setup:
    def __init__(self):
        self.ports = []
        self.anonymous = "true"
        self.persist = False
        self.sections = {"limits": {}, "mqtt": {}}


def translate(conf_file):
    """The mesgd setup for a Mosquitto config file, or exits 77 if it has no equivalent."""
    setup = Setup()
    setup.anonymous = "false"  # Mosquitto 2's default once a config file is used, as mesgd's
    for line in open(conf_file):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        option, _, value = line.partition(" ")
        value = value.strip()
        if option not in TRANSLATED:
            print("SKIP: Mosquitto option", option)
            sys.exit(77)
        if option in ("port", "listener"):
            setup.ports.append(int(value.split()[0]))
        elif option == "allow_anonymous":
            setup.anonymous = value
        elif option == "persistence":
            setup.persist = value == "true"
        elif TRANSLATED[option] is not None:
            section, key, convert = TRANSLATED[option]
            setup.sections[section][key] = convert(value)
    return setup


def start_broker(filename, cmd=None, port=0, use_conf=False, expect_fail=False, nolog=False):
    if cmd is not None:
        print("SKIP: needs a Mosquitto command line")
        sys.exit(77)
    setup = translate(filename.replace(".py", ".conf")) if use_conf else Setup()
    if not setup.ports:
        setup.ports = [port or 1888]
    # Mosquitto keeps nothing across a restart unless told to ("persistence true").
    state = tempfile.mkdtemp(prefix="mesgd-mosquitto-suite-")
    if setup.persist:
        state = STATE_DIRS.setdefault(filename, state)
    config = os.path.join(state, "mesgd.toml")
    with open(config, "w") as f:
        f.write(f'[storage]\ndir = "{state}/data"\n')
        for i, p in enumerate(setup.ports):
            f.write(f'[[listeners]]\nname = "mqtt{i}"\nkind = "mqtt"\nbind = "127.0.0.1:{p}"\n')
        f.write(f"[auth]\nallow_anonymous = {setup.anonymous}\n")
        for section, keys in setup.sections.items():
            if keys:
                f.write(f"[{section}]\n")
                for key, value in keys.items():
                    f.write(f"{key} = {value}\n")
    broker = subprocess.Popen([MESGD, "--config", config, "serve"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", setup.ports[0])).close()
            return broker
        except OSError:
            if broker.poll() is not None:
                break
            time.sleep(0.05)
    if expect_fail:
        return broker
    print("FAIL: mesgd did not start:", broker.communicate()[1].decode()[-2000:])
    raise IOError


def read_packet(sock):
    """One whole MQTT packet, by its own remaining length."""
    packet = sock.recv(1)
    if not packet:
        return packet
    remaining, multiplier = 0, 1
    while True:
        byte = sock.recv(1)
        if not byte:
            return packet
        packet += byte
        remaining += (byte[0] & 127) * multiplier
        multiplier *= 128
        if byte[0] & 128 == 0:
            break
    body = b""
    while len(body) < remaining:
        chunk = sock.recv(remaining - len(body))
        if not chunk:
            break
        body += chunk
    return packet + body


original_expect_packet = mosq_test.expect_packet


def expect_packet(sock, name, expected):
    compared = None
    if expected[:1] == b"\x20" and len(expected) > 4:  # a 5.0 CONNACK: flags and reason code
        compared = slice(2, 4)
    elif expected[:1] == b"\xe0" and len(expected) >= 3:  # a 5.0 DISCONNECT: reason code
        compared = slice(2, 3)
    if compared is not None:
        got = read_packet(sock)
        if got[:1] == expected[:1] and got[compared] == expected[compared]:
            return True
        mosq_test.packet_matches(name, got, expected)
        raise mosq_test.TestError
    return original_expect_packet(sock, name, expected)


def unlink(path, *args, **kwargs):
    # A test removing its Mosquitto database file asks for an empty state at the next start.
    if str(path).endswith(".db") and not args and not kwargs:
        for state in STATE_DIRS.values():
            shutil.rmtree(os.path.join(state, "data"), ignore_errors=True)
    try:
        return original_unlink(path, *args, **kwargs)
    except FileNotFoundError:
        pass


def exists(path):
    # Tests look for their database file before removing it; mesgd's state is elsewhere.
    return True if str(path).endswith(".db") else original_exists(path)


class Popen(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs):
        if isinstance(args, list) and args and str(args[0]).startswith("./") and str(args[0]).endswith(".py"):
            args = [sys.executable, os.path.abspath(__file__), args[0][2:]] + list(args[1:])
        super().__init__(args, *rest, **kwargs)


original_unlink = os.unlink
original_exists = os.path.exists
mosq_test.start_broker = start_broker
mosq_test.expect_packet = expect_packet
os.unlink = os.remove = unlink
os.path.exists = exists
subprocess.Popen = Popen

if __name__ == "__main__":
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
