"""Protocol corners where client suites and random input found Warren unlike RabbitMQ 3.10.8.

Each test does what a client library (or a fuzzer) did and checks RabbitMQ's reaction, and
that a well-behaved bystander connection notices nothing. Raw sockets are used where the
order or the bytes of the server's frames matter; pika where ordinary client behaviour does.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from bench.wire import PROTOCOL_HEADER, frame, longstr, method_frame, shortstr

FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
CONNECTION_CLOSE = (10, 50)
QUEUE_DECLARE, QUEUE_DELETE, QUEUE_DELETE_OK = (50, 10), (50, 40), (50, 41)
BASIC_CONSUME, BASIC_CANCEL = (60, 20), (60, 30)
CHANNEL_CLOSE, CHANNEL_CLOSE_OK = (20, 40), (20, 41)
NO_TABLE = struct.pack(">I", 0)


def close_arguments(code: int = 200, text: bytes = b"") -> bytes:
    return struct.pack(">H", code) + bytes((len(text),)) + text + struct.pack(">HH", 0, 0)


def parse_close(payload: bytes) -> tuple[int, bytes, int, int]:
    """A close's arguments, with the reply text as the bytes on the wire."""
    (code,) = struct.unpack(">H", payload[4:6])
    end = 7 + payload[6]
    class_id, method_id = struct.unpack(">HH", payload[end : end + 4])
    return code, payload[7:end], class_id, method_id


def frames_until_quiet(raw, quiet_s: float = 0.5) -> list:
    """Every frame the server sends until it is silent for `quiet_s` or closes the socket."""
    raw.sock.settimeout(quiet_s)
    frames = []
    try:
        while True:
            frames.append(raw.read_frame())
    except (TimeoutError, EOFError, ConnectionResetError):
        return frames
    finally:
        raw.sock.settimeout(5.0)


def publish_arguments(routing_key: bytes, exchange: bytes = b"", bits: int = 0) -> bytes:
    exchange_str = bytes((len(exchange),)) + exchange
    return (
        struct.pack(">H", 0)
        + exchange_str
        + bytes((len(routing_key),))
        + routing_key
        + bytes((bits,))
    )


def content(channel: int, body: bytes) -> bytes:
    header = struct.pack(">HHQH", 60, 0, len(body), 0)
    return frame(FRAME_HEADER, channel, header) + frame(FRAME_BODY, channel, body)


# --- basic.publish ----------------------------------------------------------------------------


def test_publish_immediate_closes_the_connection(amqp, bystander, raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    queue = amqp.queue("immediate", bystander.channel)
    raw.send_method(1, 60, 40, publish_arguments(queue.encode(), bits=2))
    raw.send(content(1, b"now"))
    assert raw.read_connection_close() == (540, "NOT_IMPLEMENTED - immediate=true", 60, 40)
    assert amqp.passive_count(bystander.channel, queue) == (0, 0)  # and it was not enqueued
    bystander.assert_unharmed()


# --- settlements for a queue that is gone -----------------------------------------------------


def _consume_one(amqp, connection, queue: str):
    """A channel of `connection` consuming `queue` with manual acks, once it got a message."""
    channel = connection.channel()
    got: list[int] = []
    channel.basic_consume(queue, lambda ch, method, props, body: got.append(method.delivery_tag))
    amqp.pump(connection, lambda: bool(got))
    return channel, got


@pytest.mark.parametrize("settle", ["reject", "nack", "recover"])
def test_requeue_for_a_deleted_queue_is_ignored(amqp, bystander, settle):
    queue = amqp.queue("gone")
    amqp.fill(queue, 2)
    connection = amqp.connect()
    channel, tags = _consume_one(amqp, connection, queue)
    amqp.channel().queue_delete(queue)
    amqp.settle(connection)
    if settle == "reject":
        channel.basic_reject(tags[0], requeue=True)
    elif settle == "nack":
        channel.basic_nack(tags[0], multiple=True, requeue=True)
    else:
        channel.basic_recover(requeue=True)
    amqp.sync(channel)  # the channel and its connection are still open
    assert channel.is_open
    bystander.assert_unharmed()


def test_channel_close_after_a_queue_was_deleted_requeues_the_others(amqp, bystander):
    deleted, kept = amqp.queue("deleted"), amqp.queue("kept")
    amqp.fill(deleted, 1)
    amqp.fill(kept, 3)
    connection = amqp.connect()
    channel = connection.channel()
    got: list[str] = []
    for queue in (deleted, kept):
        channel.basic_consume(queue, lambda ch, method, props, body: got.append(body))
    amqp.pump(connection, lambda: len(got) == 4)
    amqp.channel().queue_delete(deleted)
    amqp.settle(connection)
    channel.close()
    assert connection.is_open
    other = connection.channel()
    assert amqp.await_count(other, kept, 3) == {"message_count": 3, "consumer_count": 0}
    bystander.assert_unharmed()


# --- queue.delete and the server's basic.cancel --------------------------------------------


def _handshake_with_cancel_notify(raw) -> None:
    """A raw handshake that announces consumer_cancel_notify, as every client library does."""
    flag = shortstr("consumer_cancel_notify") + b"t\x01"
    capabilities = shortstr("capabilities") + b"F" + struct.pack(">I", len(flag)) + flag
    properties = struct.pack(">I", len(capabilities)) + capabilities
    raw.send(PROTOCOL_HEADER)
    raw.expect_method(0, (10, 10))
    response = longstr(b"\x00guest\x00guest")
    raw.send_method(0, 10, 11, properties + shortstr("PLAIN") + response + shortstr("en_US"))
    raw.tune()
    raw.open()


def test_queue_delete_ok_comes_before_the_cancel_of_its_consumer(amqp, raw_amqp):
    raw = raw_amqp(handshake=False)
    _handshake_with_cancel_notify(raw)
    raw.open_channel(1)
    queue = amqp.name("consumed")
    declare = struct.pack(">H", 0) + shortstr(queue) + b"\x00" + NO_TABLE
    raw.send_method(1, *QUEUE_DECLARE, declare)
    raw.expect_method(1, (50, 11))
    consume = struct.pack(">H", 0) + shortstr(queue) + shortstr("ctag") + b"\x00" + NO_TABLE
    raw.send_method(1, *BASIC_CONSUME, consume)
    raw.expect_method(1, (60, 21))
    raw.send_method(1, *QUEUE_DELETE, struct.pack(">H", 0) + shortstr(queue) + b"\x00")
    frames = frames_until_quiet(raw)
    assert [each.method for each in frames] == [QUEUE_DELETE_OK, BASIC_CANCEL]
    assert frames[1].payload[4:] == shortstr("ctag") + b"\x01"  # nowait


# --- connection.close with frames still in flight ---------------------------------------------


def test_close_ok_then_the_socket_waits_for_the_client(amqp, bystander, raw_amqp):
    # amqplib publishes a few messages and closes at once: its writes go on after the
    # close and its close callback waits for close-ok, then for the socket's end.
    raw = raw_amqp()
    raw.open_channel(1)
    queue = amqp.queue("inflight", bystander.channel)
    publish = method_frame(1, (60, 40), publish_arguments(b"x"))
    publish += content(1, b"m")
    close = method_frame(0, CONNECTION_CLOSE, close_arguments())
    raw.send(raw.publish_frames(1, "", queue, b"before") + close + publish * 50)
    raw.expect_method(0, (10, 51))
    raw.sock.settimeout(0.3)
    for _ in range(3):
        raw.send(publish * 20)  # no reset: the server still reads, and discards
        time.sleep(0.1)
    with pytest.raises(socket.timeout):
        raw.sock.recv(1)  # nothing more, and no end of the stream either
    assert amqp.bodies(bystander.channel, queue) == ["before"]
    bystander.assert_unharmed()


# --- channel_max ------------------------------------------------------------------------------


def test_channel_max_limits_open_channels_not_their_numbers(bystander, raw_amqp):
    raw = raw_amqp(handshake=False)
    raw.start()
    tune = raw.expect_method(0, (10, 30)).payload
    frame_max = struct.unpack(">I", tune[6:10])[0]
    raw.send_method(0, 10, 31, struct.pack(">HIH", 2, frame_max, 0))
    raw.open()
    raw.open_channel(65535)
    raw.open_channel(7)
    raw.send_method(7, *CHANNEL_CLOSE, close_arguments())
    raw.expect_method(7, CHANNEL_CLOSE_OK)
    raw.open_channel(9)  # two open again
    raw.send_method(3, 20, 10, shortstr(""))
    text = "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    assert raw.read_connection_close() == (530, text, 0, 0)
    bystander.assert_unharmed()


# --- malformed method frames ------------------------------------------------------------------


def test_truncated_method_is_a_frame_error(bystander, raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, *QUEUE_DECLARE, b"\x00")
    assert raw.read_connection_close() == (501, "FRAME_ERROR - cannot decode <<0>>", 50, 10)
    bystander.assert_unharmed()


@pytest.mark.parametrize(
    ("class_id", "method_id", "arguments"),
    [(60, 10, b"\x00\x00\x00\x00\x00\x0a\x00\x07"), (60, 40, b"\x00\x00\x00\x01q\x00\x07")],
    ids=["basic.qos", "basic.publish"],
)
def test_method_with_trailing_octets_is_a_frame_error(
    bystander, raw_amqp, class_id, method_id, arguments
):
    # RabbitMQ decodes a method's fields by matching the whole payload, so octets after the
    # last field do not parse: the same 501 as a field cut short, naming every octet.
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, class_id, method_id, arguments)
    octets = ",".join(str(octet) for octet in arguments)
    text = f"FRAME_ERROR - cannot decode <<{octets}>>"
    assert raw.read_connection_close() == (501, text, class_id, method_id)
    bystander.assert_unharmed()


def test_method_frame_without_method_id(bystander, raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_frame(FRAME_METHOD, 1, b"\x00\x32")
    text = "FRAME_ERROR - type 1, all octets = <<0,50>>: unknown_frame"
    assert raw.read_connection_close() == (501, text, 0, 0)
    bystander.assert_unharmed()


def test_one_oversized_frame_gets_one_close(bystander, raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    body = b"x" * (raw.frame_max + 1)
    raw.send(method_frame(1, (60, 40), publish_arguments(b"q")))
    raw.send(frame(FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, len(body), 0)))
    raw.send(frame(FRAME_BODY, 1, body[: len(body) // 2]))
    raw.send(body[len(body) // 2 :] + b"\xce")
    frames = frames_until_quiet(raw)
    assert [each.method for each in frames] == [CONNECTION_CLOSE]
    bystander.assert_unharmed()


# --- names that are not UTF-8 -----------------------------------------------------------------

NOT_UTF8 = b"n\xff\xfe"


@pytest.mark.parametrize(
    ("method", "arguments"),
    [
        (QUEUE_DECLARE, struct.pack(">H", 0) + b"\x03" + NOT_UTF8 + b"\x00" + NO_TABLE),
        (QUEUE_DECLARE, struct.pack(">H", 0) + b"\x03" + NOT_UTF8 + b"\x01" + NO_TABLE),
        (
            (40, 10),
            struct.pack(">H", 0) + b"\x03" + NOT_UTF8 + shortstr("direct") + b"\x00" + NO_TABLE,
        ),
        (
            BASIC_CONSUME,
            struct.pack(">H", 0)
            + shortstr("amq.rabbitmq.reply-to")
            + b"\x03"
            + NOT_UTF8
            + b"\x02"
            + NO_TABLE,
        ),
        (CHANNEL_CLOSE, close_arguments(200, NOT_UTF8)),
    ],
    ids=["queue.declare", "queue.declare-passive", "exchange.declare", "consumer-tag", "close"],
)
def test_a_name_that_is_not_utf8_is_a_frame_error(bystander, mgmt, raw_amqp, method, arguments):
    # RabbitMQ checks the shortstrs of every method it decodes but basic.publish: no queue,
    # exchange or consumer gets such a name, so the management API never meets one
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, *method, arguments)
    text = "FRAME_ERROR - Malformed UTF-8 in shortstr"
    assert raw.read_connection_close() == (501, text, 0, 0)
    for listing in ("/api/queues", "/api/exchanges", "/api/consumers"):
        status, reply = mgmt.request("GET", listing)
        assert status == 200, reply
    bystander.assert_unharmed()


def test_publish_quotes_an_exchange_name_that_is_not_utf8(bystander, raw_amqp):
    # basic.publish's names are not checked: the 404 quotes the bytes as they came
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, 60, 40, publish_arguments(b"q", exchange=NOT_UTF8))
    raw.send(content(1, b"lost"))
    close = raw.expect_method(1, CHANNEL_CLOSE)
    text = b"NOT_FOUND - no exchange '" + NOT_UTF8 + b"' in vhost '/'"
    assert parse_close(close.payload) == (404, text, 60, 40)
    bystander.assert_unharmed()


def test_routing_key_that_is_not_utf8_travels_as_bytes(amqp, bystander, mgmt, raw_amqp):
    exchange = amqp.exchange("fan", "fanout", bystander.channel)
    queue = amqp.queue("fanned", bystander.channel, durable=True)
    bystander.channel.queue_bind(queue, exchange)
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, 60, 40, publish_arguments(NOT_UTF8, exchange=exchange.encode()))
    raw.send(content(1, b"odd"))
    raw.send_method(1, 60, 70, struct.pack(">H", 0) + shortstr(queue) + b"\x01")  # get, no-ack
    get_ok = raw.expect_method(1, (60, 71)).payload
    assert shortstr(exchange) + b"\x03" + NOT_UTF8 in get_ok
    status, queues = mgmt.request("GET", "/api/queues")
    assert status == 200, queues
    bystander.assert_unharmed()


def test_dead_lettering_keeps_a_routing_key_that_is_not_utf8(amqp, bystander, raw_amqp):
    # x-death quotes the routing keys: as the bytes that came
    exchange = amqp.exchange("fan-dl", "fanout", bystander.channel)
    dead = amqp.queue("dead", bystander.channel)
    arguments = {"x-message-ttl": 0, "x-dead-letter-exchange": ""}
    arguments["x-dead-letter-routing-key"] = dead
    queue = amqp.queue("expiring", bystander.channel, arguments=arguments)
    bystander.channel.queue_bind(queue, exchange)
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, 60, 40, publish_arguments(NOT_UTF8, exchange=exchange.encode()))
    raw.send(content(1, b"odd"))
    get = struct.pack(">H", 0) + shortstr(dead) + b"\x01"
    for _ in range(100):
        raw.send_method(1, 60, 70, get)  # basic.get, no-ack
        reply = raw.read_frame()
        if reply.method == (60, 71):
            break
        time.sleep(0.02)
    else:
        raise AssertionError("nothing was dead-lettered")
    header = raw.read_frame().payload
    assert b"routing-keys" in header and NOT_UTF8 in header
    raw.read_frame()  # the body
    bystander.assert_unharmed()
