"""The healthy client: paho-mqtt 2.x connects, subscribes at QoS 1, publishes at QoS 1 and must
receive its own message, acknowledged, within a bounded time."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as mqtt

from .harness import Failure, Target

DEADLINE = 10.0


def exchange(target: Target, tag: str, *, protocol: int = mqtt.MQTTv5, transport: str = "tcp",
             tls: bool = False) -> str:
    """One QoS 1 round trip through the broker; returns how long it took."""
    started = time.monotonic()
    client_id = target.unique("healthy")
    topic = f"hostile/healthy/{client_id}"
    payload = f"still fine after {tag}".encode()
    connected, subscribed, received = threading.Event(), threading.Event(), threading.Event()
    state: dict[str, object] = {}

    def on_connect(_c, _u, _flags, reason_code, _props):
        state["connack"] = reason_code
        connected.set()

    def on_subscribe(_c, _u, _mid, reason_codes, _props):
        state["suback"] = reason_codes
        subscribed.set()

    def on_message(_c, _u, message):
        if message.topic == topic:
            state["message"] = message
            received.set()

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
                         transport=transport)
    client.on_connect, client.on_subscribe, client.on_message = on_connect, on_subscribe, on_message
    port = target.mqtt
    if transport == "websockets":
        client.ws_set_options(path=target.mqtt_ws_path)
        port = target.need("ws")
    if tls:
        client.tls_set_context(target.tls_context())
        port = target.need("mqtts")
    try:
        if protocol == mqtt.MQTTv5:
            client.connect(target.host, port, keepalive=30, clean_start=True)
        else:
            client.connect(target.host, port, keepalive=30)
        client.loop_start()
        if not connected.wait(DEADLINE):
            raise Failure(f"healthy client: no CONNACK within {DEADLINE} s")
        if state["connack"].is_failure:
            raise Failure(f"healthy client refused: {state['connack']}")
        client.subscribe(topic, qos=1)
        if not subscribed.wait(DEADLINE):
            raise Failure("healthy client: no SUBACK")
        granted = state["suback"][0]
        if granted.is_failure or granted.value != 1:
            raise Failure(f"healthy client: subscription granted {granted}, not QoS 1")
        info = client.publish(topic, payload, qos=1)
        info.wait_for_publish(DEADLINE)
        if not info.is_published():
            raise Failure("healthy client: its QoS 1 PUBLISH was not acknowledged")
        if not received.wait(DEADLINE):
            raise Failure("healthy client: its own QoS 1 message did not arrive")
        message = state["message"]
        if message.qos != 1 or message.payload != payload:
            raise Failure(f"healthy client: got QoS {message.qos} payload {message.payload!r}")
    finally:
        client.disconnect()
        client.loop_stop()
    return f"healthy in {1000 * (time.monotonic() - started):.0f} ms"
