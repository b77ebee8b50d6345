"""Limits of a private Warren node, lowered in its config: maximum message size, maximum
connections, and the handshake timeout that drops clients that never finish (or send
their handshake a byte at a time)."""

from __future__ import annotations

import contextlib
import socket
import time

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingConnection

pytestmark = pytest.mark.warren_only


def test_a_message_over_max_message_size_closes_the_channel_with_406(server_factory):
    server = server_factory(max_message_size=1000)
    connection = BlockingConnection(pika.URLParameters(server.broker.url))
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"x" * 1000)
        channel.basic_publish("", queue, b"x" * 1001)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_get(queue)
        assert closed.value.reply_code == 406
        assert closed.value.reply_text == (
            "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000"
        )
        channel = connection.channel()  # the connection lives on
        assert len(channel.basic_get(queue, auto_ack=True)[2]) == 1000
    finally:
        connection.close()


def test_connections_over_connection_max_are_refused(server_factory):
    server = server_factory(connection_max=2)
    parameters = pika.URLParameters(server.broker.url)
    first, second = BlockingConnection(parameters), BlockingConnection(parameters)
    for _ in range(4):  # the node's limit, whichever worker takes the connection
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            BlockingConnection(parameters)
    first.close()
    third = BlockingConnection(parameters)
    assert third.is_open
    second.close()
    third.close()


def closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> bool:
    """Whether the node closes `sock` within `seconds`, writing `trickle` a byte at a time."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    remaining = bytearray(trickle)
    while time.monotonic() < deadline:
        if remaining:
            with contextlib.suppress(OSError):
                sock.send(bytes(remaining[:1]))
            del remaining[:1]
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return True
        if not data:
            return True
    return False


@pytest.mark.parametrize("style", ["silent", "slowloris"])
def test_a_client_that_never_finishes_the_handshake_is_dropped(server_factory, style):
    server = server_factory(handshake_timeout=1000)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        if style == "silent":
            sock.sendall(b"AMQP\x00\x00\x09\x01")  # then nothing
            assert closed_within(sock, 5.0)
        else:  # the header, then a start-ok one byte every 0.2 s
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            assert closed_within(sock, 5.0, trickle=b"\x01\x00\x00" + b"\x00" * 100)
    assert "handshake timeout" in server.log()
