"""Basic properties and content framing: round trips, and the unrolled deliver/get-ok."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from amqp_strategies import properties, same, shortstrs
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.amqp import methods as m
from warren.amqp.content import (
    EMPTY_PROPERTIES,
    BasicProperties,
    Message,
    confirm_frame,
    content_frames,
    decode_properties,
    deliver_frames,
    delivery_mode,
    encode_properties,
    get_ok_frames,
    method_frame,
    parse_content_header,
    property_flags,
    shortstr,
)
from warren.amqp.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_MIN_SIZE,
    NEED_DATA,
    Frame,
    FrameDecoder,
)
from warren.amqp.methods import decode_method, encode_method
from warren.errors import HardError, ReplyCode

PROPERTY_NAMES = [field.name for field in dataclasses.fields(BasicProperties)]


def split_frames(data: bytes, frame_max: int) -> list[Frame]:
    decoder = FrameDecoder(frame_max)
    decoder.feed(data)
    out: list[Frame] = []
    while True:
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            assert decoder.buffered == 0
            return out
        assert isinstance(frame, tuple)
        out.append(frame)


# --- properties --------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(properties)
def test_properties_round_trip(props: BasicProperties) -> None:
    decoded = decode_properties(encode_properties(props))
    for name in PROPERTY_NAMES:
        assert same(getattr(decoded, name), getattr(props, name)), name


@settings(max_examples=25, deadline=None)
@given(properties)
def test_property_flags_mark_exactly_the_present_properties(props: BasicProperties) -> None:
    flags = property_flags(encode_properties(props))
    for index, name in enumerate(PROPERTY_NAMES):
        present = getattr(props, name) is not None
        assert bool(flags & (1 << (15 - index))) == present, name
    assert flags & 0b11 == 0


@settings(max_examples=50, deadline=None)
@given(properties)
def test_delivery_mode_is_read_without_decoding(props: BasicProperties) -> None:
    assert delivery_mode(encode_properties(props)) == props.delivery_mode


@given(st.binary(max_size=40))
def test_delivery_mode_of_any_bytes_is_a_value_or_none(raw: bytes) -> None:
    assert delivery_mode(raw) is None or 0 <= delivery_mode(raw) <= 255  # type: ignore[operator]


def test_no_properties_is_two_zero_bytes() -> None:
    assert encode_properties(BasicProperties()) == EMPTY_PROPERTIES == b"\x00\x00"
    assert decode_properties(EMPTY_PROPERTIES) == BasicProperties()


def test_known_bytes_of_two_properties() -> None:
    raw = encode_properties(BasicProperties(content_type="text/plain", delivery_mode=2))
    assert raw == b"\x90\x00" + b"\x0atext/plain" + b"\x02"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x80",
        b"\x80\x00",  # content_type flagged, absent
        b"\x80\x00\x05ab",  # content_type shorter than its length
        b"\x20\x00\x00\x00\x00\x05\x01kQ",  # headers with a malformed table
        b"\x00\x40" + b"\x00" * 7,  # timestamp of seven bytes
        b"\x00\x01",  # a continuation flag word announced, and missing (basic has 14 flags)
        b"\x10\x03\x02\x00\x00",  # the two flag bits basic does not define
    ],
)
def test_malformed_properties_are_502(raw: bytes) -> None:
    with pytest.raises(HardError) as raised:
        decode_properties(raw)
    assert raised.value.code == ReplyCode.SYNTAX_ERROR


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=80))
def test_any_properties_bytes_decode_or_raise_502(raw: bytes) -> None:
    try:
        decode_properties(raw)
    except HardError as error:
        assert error.code == ReplyCode.SYNTAX_ERROR


def test_message_decodes_its_properties_lazily_and_once() -> None:
    raw = encode_properties(BasicProperties(message_id="m1"))
    message = Message("ex", "rk", raw, b"body")
    assert message.properties.message_id == "m1"
    assert message.properties is message.properties
    assert message.route == shortstr("ex") + shortstr("rk")


# --- content frames ----------------------------------------------------------------------


def test_parse_content_header() -> None:
    payload = struct.pack(">HHQ", 60, 0, 12) + b"\x10\x00\x02"
    assert parse_content_header(payload) == (60, 12, b"\x10\x00\x02")
    with pytest.raises(HardError) as raised:
        parse_content_header(payload[:13])
    assert raised.value.code == ReplyCode.SYNTAX_ERROR


@settings(max_examples=100, deadline=None)
@given(
    st.binary(max_size=3 * FRAME_MIN_SIZE),
    st.integers(FRAME_MIN_SIZE, FRAME_MIN_SIZE + 100),
    st.integers(1, 65535),
)
def test_content_frames_split_the_body_within_frame_max(
    body: bytes, frame_max: int, channel: int
) -> None:
    method_payload = encode_method(m.BasicPublish(0, "ex", "rk"))
    data = content_frames(channel, method_payload, b"\x00\x00", body, frame_max)
    frames = split_frames(data, frame_max)
    assert frames[0] == (FRAME_METHOD, channel, method_payload)
    assert frames[1] == (FRAME_HEADER, channel, struct.pack(">HHQ", 60, 0, len(body)) + b"\0\0")
    bodies = frames[2:]
    assert all(kind == FRAME_BODY and number == channel for kind, number, _ in bodies)
    assert all(0 < len(piece) <= frame_max - 8 for _, _, piece in bodies)
    assert len(bodies) == -(-len(body) // (frame_max - 8))
    assert b"".join(piece for _, _, piece in bodies) == body


def test_empty_body_has_no_body_frame() -> None:
    data = content_frames(1, encode_method(m.BasicPublish()), b"\x00\x00", b"", 4096)
    assert [kind for kind, _, _ in split_frames(data, 4096)] == [FRAME_METHOD, FRAME_HEADER]


def test_body_of_exactly_one_frame() -> None:
    data = content_frames(1, encode_method(m.BasicPublish()), b"\x00\x00", bytes(4088), 4096)
    assert [kind for kind, _, _ in split_frames(data, 4096)] == [1, 2, 3]


@settings(max_examples=30, deadline=None)
@given(
    channel=st.integers(1, 65535),
    consumer_tag=shortstrs,
    delivery_tag=st.integers(0, 2**64 - 1),
    redelivered=st.booleans(),
    exchange=shortstrs,
    routing_key=shortstrs,
    props=properties,
    body=st.binary(max_size=6000),
)
def test_deliver_frames_match_the_method_table(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    props: BasicProperties,
    body: bytes,
) -> None:
    raw = encode_properties(props)
    message = Message(exchange, routing_key, raw, body)
    data = deliver_frames(
        channel, shortstr(consumer_tag), delivery_tag, redelivered, message, FRAME_MIN_SIZE
    )
    frames = split_frames(data, FRAME_MIN_SIZE)
    expected = m.BasicDeliver(consumer_tag, delivery_tag, redelivered, exchange, routing_key)
    assert frames[0][:2] == (FRAME_METHOD, channel)
    assert frames[0][2] == encode_method(expected)
    assert decode_method(frames[0][2]) == expected
    assert parse_content_header(frames[1][2]) == (60, len(body), raw)
    assert b"".join(payload for _, _, payload in frames[2:]) == body


@given(
    channel=st.integers(0, 65535),
    delivery_tag=st.integers(0, 2**64 - 1),
    multiple=st.booleans(),
    requeue=st.booleans(),
)
def test_confirm_frames_match_the_method_table(
    channel: int, delivery_tag: int, multiple: bool, requeue: bool
) -> None:
    for confirm in (
        m.BasicAck(delivery_tag, multiple),
        m.BasicNack(delivery_tag, multiple, requeue),
    ):
        data = confirm_frame(channel, confirm)
        assert data == method_frame(channel, confirm)
        assert split_frames(data, FRAME_MIN_SIZE) == [
            (FRAME_METHOD, channel, encode_method(confirm))
        ]


@settings(max_examples=100, deadline=None)
@given(
    delivery_tag=st.integers(0, 2**64 - 1),
    redelivered=st.booleans(),
    exchange=shortstrs,
    routing_key=shortstrs,
    remaining=st.integers(0, 2**32 - 1),
    body=st.binary(max_size=200),
)
def test_get_ok_frames_match_the_method_table(
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    remaining: int,
    body: bytes,
) -> None:
    message = Message(exchange, routing_key, b"\x00\x00", body)
    data = get_ok_frames(3, delivery_tag, redelivered, message, remaining, FRAME_MIN_SIZE)
    frames = split_frames(data, FRAME_MIN_SIZE)
    expected = m.BasicGetOk(delivery_tag, redelivered, exchange, routing_key, remaining)
    assert frames[0] == (FRAME_METHOD, 3, encode_method(expected))
    assert parse_content_header(frames[1][2]) == (60, len(body), b"\x00\x00")
    assert b"".join(payload for _, _, payload in frames[2:]) == body


def test_an_empty_headers_table_decodes_to_its_own_empty_dict() -> None:
    # aio-pika's properties: headers {}, delivery-mode 2, priority 0 (the empty table is
    # read without the table reader); each decode owns its dict
    raw = b"\x38\x00" + b"\x00\x00\x00\x00" + b"\x02\x00"
    first, second = decode_properties(raw), decode_properties(raw)
    assert first == BasicProperties(headers={}, delivery_mode=2, priority=0)
    assert first.headers is not second.headers
    assert encode_properties(first) == raw
    with pytest.raises(HardError) as raised:
        decode_properties(b"\x38\x00\x00\x00\x00")  # the table's length cut short
    assert raised.value.code == ReplyCode.SYNTAX_ERROR


def test_message_is_persistent_from_raw_or_decoded_properties() -> None:
    for raw, persistent in ((b"\x10\x00\x02", True), (b"\x10\x00\x01", False), (b"\0\0", False)):
        assert Message("", "q", raw, b"").persistent is persistent
        decoded = Message("", "q", raw, b"")
        decoded.properties  # noqa: B018
        assert decoded.persistent is persistent
