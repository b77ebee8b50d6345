"""Resource alarms on a private Warren node whose watermarks are lowered in its config, so
the alarm is up from the start: a connection that publishes is blocked with RabbitMQ's
``connection.blocked`` and reason, and consumers on other connections keep draining.
The memory alarm clears once the queues drained, though the process keeps its memory."""

from __future__ import annotations

import base64
import contextlib
import json
import time
import urllib.request

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingConnection

from tests.conftest import node_workers

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


def _get(server, path: str):
    request = urllib.request.Request(f"{server.broker.management_url}/api/{path}")
    token = base64.b64encode(b"guest:guest").decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def _node(server) -> dict:
    return _get(server, "nodes")[0]


def _alarm_settled(server) -> dict:
    """The node once its memory alarm agrees with its memory: the worker that answers
    checks the node's memory twice a second, as the one that blocked or unblocked did."""
    deadline = time.monotonic() + 2
    node = _node(server)
    while (node["mem_used"] > node["mem_limit"]) != node["mem_alarm"]:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
        node = _node(server)
    return node


class Publisher:
    """A publisher with confirms on pika's SelectConnection, which keeps at most `window`
    messages unconfirmed, so what waits unread when the node stops reading is small and
    the test never hangs. (A BlockingConnection's publish returns only once the socket took
    it all; were the socket's buffers full as the node blocked, a node reading slower than
    the client writes on a busy machine, it waited for ever. And megabytes left in the
    socket, read once unblocked, could raise the alarm again.) Its I/O runs only inside
    `run_until`."""

    def __init__(self, url: str, window: int) -> None:
        self.window = window
        self.events: list[str] = []
        self.unconfirmed: set[int] = set()
        self.published = 0
        self.channel = None
        self.connection = pika.SelectConnection(
            pika.URLParameters(url), on_open_callback=self._opened
        )
        assert self.run_until(lambda: self.channel is not None), "the publisher did not open"

    def _opened(self, connection) -> None:
        connection.add_on_connection_blocked_callback(lambda *_: self.events.append("blocked"))
        connection.add_on_connection_unblocked_callback(lambda *_: self.events.append("unblocked"))
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel) -> None:
        channel.confirm_delivery(
            self._confirmed, callback=lambda _: setattr(self, "channel", channel)
        )

    def _confirmed(self, frame) -> None:
        tag = frame.method.delivery_tag
        if frame.method.multiple:
            self.unconfirmed = {each for each in self.unconfirmed if each > tag}
        else:
            self.unconfirmed.discard(tag)

    def run_until(self, done, timeout: float = 10.0) -> bool:
        ioloop = self.connection.ioloop
        deadline = time.monotonic() + timeout

        def check() -> None:
            if done() or time.monotonic() > deadline:
                ioloop.stop()
            else:
                ioloop.call_later(0.01, check)

        ioloop.call_later(0, check)
        ioloop.start()
        return bool(done())

    def publish(self, queue: str, body: bytes) -> None:
        self.channel.basic_publish("", queue, body)
        self.published += 1
        self.unconfirmed.add(self.published)

    def publish_until_blocked(self, queue: str, body: bytes, most: int) -> None:
        """Publish `body`, at most `window` unconfirmed, until connection.blocked arrives
        (or `most` went)."""

        def more() -> None:
            while not self.events and self.published < most and len(self.unconfirmed) < self.window:
                self.publish(queue, body)
            if not self.events:
                self.connection.ioloop.call_later(0.001, more)

        more()
        self.run_until(lambda: self.events, timeout=60)

    def close(self) -> None:
        self.connection.close()
        assert self.run_until(lambda: self.connection.is_closed)
        self.connection.ioloop.close()  # and the socket pair that wakes it


def test_the_memory_alarm_clears_once_the_queues_drained(server_factory):
    """Publish until the watermark (64MiB a worker: the node's memory is all its workers')
    blocks the publisher, drain the queue from another connection: the publisher is
    unblocked and the node reports the alarm cleared."""
    watermark_mib = 64 * node_workers()
    # paging only at the watermark, else queues page the bodies out before the alarm
    server = server_factory(
        vm_memory_high_watermark=f"{watermark_mib}MiB", vm_memory_high_watermark_paging_ratio="1.0"
    )
    assert _node(server)["mem_limit"] == watermark_mib * 1024**2
    assert _node(server)["mem_alarm"] is False
    publisher = Publisher(server.broker.url, window=32)
    declared: list[object] = []
    publisher.channel.queue_declare("big", callback=declared.append)
    assert publisher.run_until(lambda: declared)
    publisher.publish_until_blocked("big", bytes(64 * 1024), most=4000)
    assert publisher.events == ["blocked"]
    assert _alarm_settled(server)["mem_alarm"] is True
    health = _get(server, "healthchecks/node")
    assert health["status"] == "failed"
    assert health["reason"].startswith("resource alarm(s) in effect:[{{resource_limit,memory,")
    consumer = BlockingConnection(pika.URLParameters(server.broker.url))
    consuming = consumer.channel()
    while consuming.basic_get("big", auto_ack=True)[0] is not None:
        pass
    # As the drain frees memory the alarm may clear and rise again while the node reads the
    # publishes that waited in the socket; once it read them all the publisher is unblocked.
    assert publisher.run_until(
        lambda: not publisher.unconfirmed and publisher.events[-1] == "unblocked"
    ), publisher.events
    assert publisher.events == ["blocked", "unblocked"] * (len(publisher.events) // 2)
    node = _alarm_settled(server)
    assert node["mem_alarm"] is False and node["mem_used"] < node["mem_limit"]
    publisher.publish("big", b"after")  # the node reads the publisher again
    assert publisher.run_until(lambda: not publisher.unconfirmed)
    bodies = []
    while (got := consuming.basic_get("big", auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies[-1] == b"after"  # behind the publishes that waited in the socket
    consumer.close()
    publisher.close()
