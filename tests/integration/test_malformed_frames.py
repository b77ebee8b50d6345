"""Malformed input on a raw socket: what the server answers, and that nobody else notices.

Every test first opens a well-behaved pika connection (the bystander) with one message
queued, then misbehaves on a raw connection and checks RabbitMQ's exact reaction. Afterwards
the bystander must still publish and consume, and the queued message must still be there.

RabbitMQ 3.10.8 words framing errors with Erlang terms (`<<0,20,0,10,0>>`); the texts are
deterministic for a given input, so they are asserted as they are.
"""

from __future__ import annotations

import struct

import pytest

METHOD, HEADER, BODY = 1, 2, 3


def test_bad_frame_end(bystander, raw_amqp):
    raw = raw_amqp()
    channel_open = struct.pack(">HH", 20, 10) + raw.shortstr("")
    raw.send_frame(METHOD, 1, channel_open, frame_end=0x00)
    text = "FRAME_ERROR - type 1, all octets = <<0,20,0,10,0>>: {invalid_frame_end_marker,0}"
    assert raw.read_connection_close() == (501, text, 0, 0)
    bystander.assert_unharmed()


@pytest.mark.parametrize(
    ("channel", "class_id", "method_id"),
    [(0, 99, 99), (0, 10, 99), (1, 60, 999), (1, 99, 1)],
    ids=["unknown-class-ch0", "unknown-connection-method", "unknown-basic-method", "unknown-class"],
)
def test_unknown_method_drops_connection(bystander, raw_amqp, channel, class_id, method_id):
    # RabbitMQ 3.10.8 sends no 540 here: its reader process exits on the unknown method id
    # ({unknown_method_id,{60,999}} in its log) and the socket closes without any frame.
    raw = raw_amqp()
    if channel:
        raw.open_channel(channel)
    raw.send_method(channel, class_id, method_id)
    assert raw.read_until_closed() == b""
    bystander.assert_unharmed()


def _frame_too_large(frame_type: int, payload_size: int, frame_max: int) -> str:
    limit = frame_max - 8  # what RabbitMQ reports as the limit: frame_max less 8 octets
    return (
        f"FRAME_ERROR - type {frame_type}, all octets = <<>>: "
        f"{{frame_too_large,{payload_size},{limit}}}"
    )


def test_body_frame_larger_than_frame_max(bystander, raw_amqp):
    # RabbitMQ tolerates 8 octets of slack (its FRAME_SIZE_FUDGE): it refuses a frame only
    # once the payload alone is larger than frame_max, though the text names frame_max - 8.
    raw = raw_amqp()
    raw.open_channel(1)
    body_size = raw.frame_max + 1
    raw.publish(1, bystander.queue, b"x" * body_size)
    text = _frame_too_large(BODY, body_size, raw.frame_max)
    assert raw.read_connection_close() == (501, text, 0, 0)
    bystander.assert_unharmed()


def test_method_frame_larger_than_frame_max(bystander, raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    arguments = struct.pack(">H", 0) + raw.shortstr("x") + b"\x00" * raw.frame_max
    raw.send_method(1, 50, 10, arguments)
    text = _frame_too_large(METHOD, 4 + len(arguments), raw.frame_max)
    assert raw.read_connection_close() == (501, text, 0, 0)
    bystander.assert_unharmed()


@pytest.mark.parametrize("slack", [8, 0], ids=["frame-of-frame_max", "payload-of-frame_max"])
def test_frame_up_to_the_limit_is_accepted(amqp, bystander, raw_amqp, slack):
    queue = amqp.queue("big", bystander.channel)
    raw = raw_amqp()
    raw.open_channel(1)
    body = b"x" * (raw.frame_max - slack)
    raw.publish(1, queue, body)
    raw.send_method(1, 20, 40, struct.pack(">H", 200) + raw.shortstr("") + struct.pack(">HH", 0, 0))
    raw.expect_method(1, (20, 41))  # channel.close-ok: the publish was taken
    method, _, got = bystander.channel.basic_get(queue, auto_ack=True)
    assert (method.message_count, len(got)) == (0, len(body))
    bystander.assert_unharmed()


def test_method_on_unopened_channel(bystander, raw_amqp):
    raw = raw_amqp()
    arguments = struct.pack(">H", 0) + raw.shortstr("xyz") + b"\x02" + struct.pack(">I", 0)
    raw.send_method(5, 50, 10, arguments)  # queue.declare on channel 5, never opened
    assert raw.read_connection_close() == (504, "CHANNEL_ERROR - expected 'channel.open'", 50, 10)
    bystander.assert_unharmed()


@pytest.mark.parametrize(
    ("frame_type", "payload"),
    [(BODY, b"hello"), (HEADER, struct.pack(">HHQH", 60, 0, 5, 0))],
    ids=["body", "content-header"],
)
def test_content_without_method(bystander, raw_amqp, frame_type, payload):
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_frame(frame_type, 1, payload)
    text = "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
    assert raw.read_connection_close() == (505, text, 0, 0)
    bystander.assert_unharmed()


def test_content_on_channel_zero(bystander, raw_amqp):
    raw = raw_amqp()
    raw.send_frame(BODY, 0, b"hello")
    text = 'UNEXPECTED_FRAME - type 3, all octets = <<"hello">>'
    assert raw.read_connection_close() == (505, text, 0, 0)
    bystander.assert_unharmed()


@pytest.mark.parametrize("cut_bytes", [3, 20], ids=["in-body-frame", "in-header-frame"])
def test_disconnect_mid_frame(bystander, raw_amqp, cut_bytes):
    raw = raw_amqp()
    raw.open_channel(1)
    frames = raw.publish_frames(1, "", bystander.queue, b"lost")
    raw.send(frames[:-cut_bytes])
    raw.close()
    again = raw_amqp()  # the listener still accepts and completes handshakes
    again.open_channel(1)
    bystander.assert_unharmed()  # and the half-sent message was not enqueued


@pytest.mark.parametrize(
    "header",
    [b"AMQP\x00\x00\x08\x00", b"AMQP\x01\x01\x00\x0a", b"GET / HTTP/1.1\r\n\r\n"],
    ids=["amqp-0-8", "amqp-1-0", "http"],
)
def test_wrong_protocol_header(bystander, raw_amqp, header):
    raw = raw_amqp(handshake=False)
    raw.send(header)
    assert raw.read_until_closed() == b"AMQP\x00\x00\x09\x01"
    bystander.assert_unharmed()


@pytest.mark.parametrize(
    "properties",
    [b"\x80\x00", b"\x80\x00\x05ab", b"\x10\x00\x02\x00"],
    ids=["flag-without-value", "short-string-cut", "trailing-byte"],
)
def test_malformed_content_properties_never_reach_a_consumer(amqp, bystander, raw_amqp, properties):
    # RabbitMQ 3.10.8's property parser crashes on these and closes with 541
    # INTERNAL_ERROR; Warren names the fault (502 SYNTAX_ERROR). Either way the connection
    # goes and no consumer is handed bytes it cannot parse.
    raw = raw_amqp()
    raw.open_channel(1)
    publish = struct.pack(">H", 0) + raw.shortstr("") + raw.shortstr(bystander.queue) + b"\x00"
    raw.send_method(1, 60, 40, publish)
    raw.send_frame(HEADER, 1, struct.pack(">HHQ", 60, 0, 4) + properties)
    raw.send_frame(BODY, 1, b"evil")
    code, text, class_id, method_id = raw.read_connection_close()
    if amqp.broker.is_rabbitmq:
        assert (code, text, class_id, method_id) == (541, "INTERNAL_ERROR", 0, 0)
    else:
        assert code == 502
        assert text.startswith("SYNTAX_ERROR - malformed content header properties")
    bystander.assert_unharmed()


def nested_table(depth: int) -> bytes:
    """``{"k": {"k": … {}}}``: `depth` tables, the outermost included."""
    table = struct.pack(">I", 0)
    for _ in range(depth - 1):
        entry = b"\x01kF" + table  # the key as a shortstr, then the value's tag
        table = struct.pack(">I", len(entry)) + entry
    return table


def declare_exclusive(raw, queue: str, arguments: bytes) -> None:
    raw.open_channel(1)
    flags = 0b1100  # exclusive, auto-delete: the queue goes with the raw connection
    raw.send_method(
        1, 50, 10, struct.pack(">H", 0) + raw.shortstr(queue) + bytes([flags]) + arguments
    )


def test_arguments_nested_to_warrens_limit_are_accepted(amqp, bystander, raw_amqp):
    # Warren decodes tables and arrays nested up to 100 deep (warren.amqp.table.MAX_DEPTH);
    # RabbitMQ sets no limit, so both accept this.
    raw = raw_amqp()
    declare_exclusive(raw, amqp.name("nested"), nested_table(100))
    raw.expect_method(1, (50, 11))
    bystander.assert_unharmed()


@pytest.mark.warren_only  # RabbitMQ's parser recurses on a growable Erlang stack: no limit
def test_arguments_nested_deeper_than_the_limit_close_the_connection(amqp, bystander, raw_amqp):
    # One 128 KiB frame could nest tables twenty thousand deep; past 100 Warren refuses the
    # method as fields it cannot decode, as RabbitMQ words any table it cannot parse.
    raw = raw_amqp()
    arguments = nested_table(101)
    declare_exclusive(raw, amqp.name("nested"), arguments)
    code, text, class_id, method_id = raw.read_connection_close()
    assert (code, class_id, method_id) == (501, 50, 10)
    assert text.startswith("FRAME_ERROR - cannot decode <<0,0,")
    bystander.assert_unharmed()


@pytest.mark.warren_only  # RabbitMQ takes the message, however deep its headers nest
def test_headers_nested_deeper_than_the_limit_never_reach_a_consumer(bystander, raw_amqp):
    raw = raw_amqp()
    raw.open_channel(1)
    publish = struct.pack(">H", 0) + raw.shortstr("") + raw.shortstr(bystander.queue) + b"\x00"
    raw.send_method(1, 60, 40, publish)
    headers_flag = 0x2000
    properties = struct.pack(">H", headers_flag) + nested_table(101)
    raw.send_frame(HEADER, 1, struct.pack(">HHQ", 60, 0, 4) + properties)
    raw.send_frame(BODY, 1, b"deep")
    code, text, _, _ = raw.read_connection_close()
    assert code == 502
    assert text == (
        "SYNTAX_ERROR - malformed content header properties: "
        "field tables and arrays nested deeper than 100"
    )
    bystander.assert_unharmed()
