"""What a quorum queue does with a consumer's unacknowledged messages when the consumer is
cancelled, then its channel closes, as RabbitMQ 3.10.8 does it (rabbit_fifo): basic.cancel
leaves them checked out to the cancelled consumer (its channel may still acknowledge them,
and no other consumer gets them); the channel's close returns them, and their next
delivery is redelivered with ``x-delivery-count`` 1.

`cancel_then_close` runs the scenario with the consumer on one connection and the
declare, the publishes and a second consumer on another: both on one broker
(`test_golden_quorum.py`, against RabbitMQ too) or on two nodes of a Warren cluster
(`tests/cluster`), where the queue's replicated host serves it.
"""

from __future__ import annotations

import time
from typing import Any

import pika

QUORUM = {"x-queue-type": "quorum"}
BODIES = (b"one", b"two", b"three")
WAIT_S = 10.0
HELD_S = 1.0  # how long a second consumer is watched while the cancelled one holds all


def cancel_then_close(consumer_url: str, other_url: str, queue: str) -> dict[str, Any]:
    """The scenario; what each step observed."""
    consuming = pika.BlockingConnection(pika.URLParameters(consumer_url))
    other = pika.BlockingConnection(pika.URLParameters(other_url))
    try:
        setup = other.channel()
        setup.queue_declare(queue, durable=True, arguments=QUORUM)
        setup.confirm_delivery()
        for body in BODIES:
            setup.basic_publish("", queue, body)
        channel = consuming.channel()
        channel.basic_qos(prefetch_count=10)
        got: list[tuple[int, bytes]] = []
        tag = channel.basic_consume(
            queue, lambda _ch, method, _props, body: got.append((method.delivery_tag, body))
        )
        _pump(consuming, lambda: len(got) == len(BODIES))
        channel.basic_cancel(tag)
        later: list[tuple[bytes, bool, object]] = []
        watcher = other.channel()
        watcher.basic_consume(
            queue, lambda _ch, delivery, props, body: _took(later, delivery, props, body)
        )
        other.process_data_events(HELD_S)
        while_cancelled = list(later)
        channel.basic_ack(got[0][0])  # after the cancel, on the consumer's channel
        channel.basic_qos(prefetch_count=10)  # a round trip: the ack did not close it
        consuming.close()
        _pump(other, lambda: len(later) == len(BODIES) - 1)
        watcher.basic_ack(0, multiple=True)
        ready = setup.queue_declare(queue, passive=True).method.message_count
        setup.queue_delete(queue)
        return {
            "delivered": [body for _tag, body in got],
            "while_cancelled": while_cancelled,
            "after_close": later,
            "ready_after": ready,
        }
    finally:
        for connection in (consuming, other):
            if connection.is_open:
                connection.close()


EXPECTED = {
    "delivered": list(BODIES),
    "while_cancelled": [],
    "after_close": [(body, True, 1) for body in BODIES[1:]],  # acked: not returned
    "ready_after": 0,
}


def _took(into: list[tuple[bytes, bool, object]], delivery: Any, props: Any, body: bytes) -> None:
    headers = props.headers or {}
    into.append((body, delivery.redelivered, headers.get("x-delivery-count")))


def _pump(connection: pika.BlockingConnection, done: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done() and time.monotonic() < deadline:
        connection.process_data_events(0.1)
