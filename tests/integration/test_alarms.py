"""Resource alarms on a private Warren node whose watermarks are lowered in its config, so
the alarm is up from the start: a connection that publishes is blocked with RabbitMQ's
``connection.blocked`` and reason, and consumers on other connections keep draining.
(Clearing an alarm is covered in tests/unit/runtime/test_runtime_alarms.py.)"""

from __future__ import annotations

import contextlib

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingConnection

pytestmark = pytest.mark.warren_only


def blocked_reason_after_publishing(server, queue: str) -> str:
    """Publish one message, then wait for connection.blocked; return its reason."""
    connection = BlockingConnection(pika.URLParameters(server.broker.url))
    reasons: list[str] = []
    connection.add_on_connection_blocked_callback(
        lambda _connection, frame: reasons.append(frame.method.reason)
    )
    try:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"first")
        for _ in range(50):
            connection.process_data_events(time_limit=0.1)
            if reasons:
                break
        assert reasons, "no connection.blocked arrived"
        # The node reads this connection no more: a second publish stays in the socket.
        channel.basic_publish("", queue, b"second")
        connection.process_data_events(time_limit=0.5)
        consumer = BlockingConnection(pika.URLParameters(server.broker.url))
        try:
            consuming = consumer.channel()
            bodies = []
            while (got := consuming.basic_get(queue, auto_ack=True))[0] is not None:
                bodies.append(got[2])
            assert bodies == [b"first"]  # consumers drain while publishers are blocked
        finally:
            consumer.close()
        return reasons[0]
    finally:
        # a blocked connection's close would wait for a close-ok the node does not read
        server.stop()
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.process_data_events(time_limit=0.1)
            connection.close()


def test_a_memory_watermark_below_use_blocks_publishers(server_factory):
    server = server_factory(vm_memory_high_watermark="1MiB")
    assert blocked_reason_after_publishing(server, "mem") == "low on memory"
    assert "memory alarm set" in server.log()


def test_a_disk_free_limit_above_free_space_blocks_publishers(server_factory):
    server = server_factory(disk_free_limit="1000000TB")
    assert blocked_reason_after_publishing(server, "disk") == "low on disk"
    assert "disk alarm set" in server.log()


def test_a_consumer_only_connection_is_never_blocked(server_factory):
    server = server_factory(vm_memory_high_watermark="1MiB")
    connection = BlockingConnection(pika.URLParameters(server.broker.url))
    blocked: list[object] = []
    connection.add_on_connection_blocked_callback(lambda *args: blocked.append(args))
    channel = connection.channel()
    channel.queue_declare("idle")
    connection.process_data_events(time_limit=1.0)
    assert channel.basic_get("idle")[0] is None and not blocked
    connection.close()
