"""A private Warren node stopped (SIGTERM) or killed (SIGKILL) and started again on its data.

What survives is what RabbitMQ promises for classic queues: durable queues, and the
persistent messages in them that were confirmed. Transient messages and non-durable queues
are gone. These tests need a node of their own, so they only run against Warren.
"""

from __future__ import annotations

import struct
import time

import pika
import pika.exceptions
import pytest

from tests.conftest import STOP_GRACE_S
from tests.integration.conftest import RawAmqp, connected

pytestmark = pytest.mark.warren_only


def publish(channel, queue: str, body: str, delivery_mode: int) -> None:
    properties = pika.BasicProperties(delivery_mode=delivery_mode)
    channel.basic_publish("", queue, body.encode(), properties)


def prepare(server) -> None:
    """A durable queue with two persistent and one transient message; a non-durable queue."""
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("durable", durable=True)
        channel.queue_declare("transient", durable=False)
        channel.confirm_delivery()
        publish(channel, "durable", "p1", delivery_mode=2)
        publish(channel, "durable", "t1", delivery_mode=1)
        publish(channel, "durable", "p2", delivery_mode=2)
        publish(channel, "transient", "p3", delivery_mode=2)


def remaining(connection, queue: str) -> list[str]:
    channel = connection.channel()
    found = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        found.append(got[2].decode())
    return found


@pytest.mark.parametrize("shutdown", ["stop", "kill"])
def test_durable_state_survives_a_restart(server_factory, shutdown):
    server = server_factory()
    prepare(server)
    getattr(server, shutdown)()
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        assert remaining(connection, "durable") == ["p1", "p2"]
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
            channel.queue_declare("transient", passive=True)
    assert missing.value.reply_code == 404


def test_clients_see_the_connection_drop_when_the_node_dies(server_factory):
    server = server_factory()
    with connected(server) as connection:
        channel = connection.channel()
        server.kill()
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            channel.queue_declare("after-death")


def test_a_node_stops_at_once_while_a_closed_client_keeps_its_socket(server_factory):
    # After close-ok a connection lingers until the client closes its socket (at most 30 s,
    # RabbitMQ's closing timeout); a node told to stop must not wait for it.
    server = server_factory()
    raw = RawAmqp(server.broker.url)
    raw.handshake()
    raw.send_method(0, 10, 50, struct.pack(">H", 200) + raw.shortstr("bye") + b"\x00" * 4)
    raw.expect_method(0, (10, 51))
    started = time.monotonic()
    server.process.terminate()
    assert server.process.wait(timeout=STOP_GRACE_S) == 0
    assert time.monotonic() - started < 5
    raw.close()
