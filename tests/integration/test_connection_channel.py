"""Connection and channel lifecycles: handshake, login, vhosts, open/close, channel.flow.

The handshake details are read on a raw socket (`raw_amqp`), where every octet the server
sends is visible; the rest uses pika.
"""

from __future__ import annotations

import struct

CLOSE_ARGUMENTS = struct.pack(">H", 200) + b"\x03bye" + struct.pack(">HH", 0, 0)


def _start_fields(start: bytes) -> tuple[int, int, list[bytes], bytes]:
    """(version-major, version-minor, mechanisms, locales) of connection.start's arguments."""
    (table_size,) = struct.unpack(">I", start[2:6])
    rest = start[6 + table_size :]
    (mechanisms_size,) = struct.unpack(">I", rest[:4])
    mechanisms = rest[4 : 4 + mechanisms_size]
    locales = rest[8 + mechanisms_size :]
    return start[0], start[1], mechanisms.split(), locales


def test_start_offers_0_9_plain_and_en_us(raw_amqp):
    raw = raw_amqp(handshake=False)
    major, minor, mechanisms, locales = _start_fields(raw.start())
    assert (major, minor, locales) == (0, 9, b"en_US")
    assert b"PLAIN" in mechanisms
    raw.tune()
    raw.open()


def test_tune_proposes_rabbitmq_defaults(raw_amqp):
    raw = raw_amqp(handshake=False)
    raw.start()
    assert raw.tune() == (2047, 131072, 60)  # channel_max, frame_max, heartbeat seconds


def test_capabilities_seen_by_pika(amqp):
    connection = amqp.connect()
    assert connection.publisher_confirms_supported
    assert connection.basic_nack_supported
    assert connection.consumer_cancel_notify_supported
    assert connection.exchange_exchange_bindings_supported


def test_login_refused(raw_amqp):
    raw = raw_amqp(handshake=False)
    raw.start(password="not-the-password")
    text = (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN."
        " For details see the broker logfile."
    )
    assert raw.read_connection_close() == (403, text, 0, 0)


def test_unknown_vhost(raw_amqp):
    raw = raw_amqp(handshake=False)
    raw.start()
    raw.tune()
    raw.open("no-such-vhost", expect_ok=False)
    assert raw.read_connection_close() == (
        530,
        "NOT_ALLOWED - vhost no-such-vhost not found",
        10,
        40,
    )


def test_client_close_is_answered_with_close_ok(raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(0, 10, 50, CLOSE_ARGUMENTS)
    raw.expect_method(0, (10, 51))


def test_pika_connection_close(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    connection.close()
    assert connection.is_closed and channel.is_closed


def test_channel_close_then_reopen_same_number(raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, 20, 40, CLOSE_ARGUMENTS)
    raw.expect_method(1, (20, 41))
    raw.open_channel(1)


def test_second_channel_open_on_an_open_channel(raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, 20, 10, b"\x00")
    assert raw.read_connection_close() == (
        504,
        "CHANNEL_ERROR - second 'channel.open' seen",
        20,
        10,
    )


def test_method_on_a_closed_channel(raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, 20, 40, CLOSE_ARGUMENTS)
    raw.expect_method(1, (20, 41))
    raw.send_method(1, 60, 10, struct.pack(">IH?", 0, 1, False))  # basic.qos
    assert raw.read_connection_close() == (504, "CHANNEL_ERROR - expected 'channel.open'", 60, 10)


def test_heartbeat_frame_from_client_is_accepted(raw_amqp):
    raw = raw_amqp()
    raw.send_frame(8, 0, b"")
    raw.open_channel(1)


def test_channel_flow_active_true(amqp):
    channel = amqp.channel()
    assert channel.flow(True) is True


def test_channel_flow_active_false_is_not_implemented(amqp):
    # RabbitMQ does not let a client stop deliveries with channel.flow: it closes the whole
    # connection with 540 (a hard error), not just the channel.
    channel = amqp.channel()
    assert amqp.attempt(lambda: channel.flow(False)) == {
        "closed": "connection",
        "code": 540,
        "text": "NOT_IMPLEMENTED - active=false",
    }


def test_channel_error_leaves_other_channels_working(amqp):
    connection = amqp.connect()
    survivor = connection.channel()
    queue = amqp.queue("q", survivor)
    got: list[bytes] = []
    survivor.basic_consume(queue, lambda ch, m, p, body: got.append(body), auto_ack=True)
    doomed = connection.channel()
    error = amqp.attempt(lambda: doomed.queue_declare(amqp.name("missing"), passive=True))
    assert error["code"] == 404 and doomed.is_closed
    amqp.publish(survivor, queue, "still here")
    amqp.pump(connection, lambda: bool(got))
    assert got == [b"still here"] and connection.is_open


def test_connection_error_closes_every_channel(amqp):
    connection = amqp.connect()
    first, second = connection.channel(), connection.channel()
    assert amqp.attempt(lambda: first.flow(False))["closed"] == "connection"
    assert connection.is_closed and first.is_closed and second.is_closed


def test_channels_on_one_connection_are_independent(amqp):
    connection = amqp.connect()
    queue = amqp.queue("q", connection.channel())
    publisher, reader = connection.channel(), connection.channel()
    amqp.publish(publisher, queue, "m1")
    publisher.close()  # closing the publisher's channel does not touch the reader's
    amqp.sync(reader)
    assert amqp.bodies(reader, queue) == ["m1"]
