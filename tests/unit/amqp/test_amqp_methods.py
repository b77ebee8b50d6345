"""The method table: every method round-trips, bits pack, bad payloads are AMQP errors."""

from __future__ import annotations

import struct

import pytest
from amqp_strategies import any_method, methods_of
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.amqp import methods as m
from warren.amqp.methods import METHODS, Method, decode_method, encode_method
from warren.errors import HardError, ReplyCode

ALL = sorted(METHODS.values(), key=lambda cls: (cls.CLASS_ID, cls.METHOD_ID))


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.NAME)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_method_round_trips(cls: type[Method], data: st.DataObject) -> None:
    method = data.draw(methods_of(cls))
    payload = encode_method(method)
    assert payload[:4] == struct.pack(">HH", cls.CLASS_ID, cls.METHOD_ID)
    assert decode_method(payload) == method


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.NAME)
def test_defaults_round_trip(cls: type[Method]) -> None:
    method = cls()
    assert decode_method(encode_method(method)) == method


def test_methods_are_slotted_values_like_dataclasses() -> None:
    ack = m.BasicAck(5, multiple=True)
    assert ack == m.BasicAck(delivery_tag=5, multiple=True)
    assert ack != m.BasicAck(5) and ack != m.BasicNack(5, True, True)
    assert m.QueuePurgeOk(3) != m.QueueDeleteOk(3)  # the same fields, another method
    assert repr(ack) == "BasicAck(delivery_tag=5, multiple=True)"
    assert m.BasicAck.__match_args__ == ("delivery_tag", "multiple") == m.BasicAck.FIELDS
    with pytest.raises(AttributeError):
        ack.requeue = True  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        hash(ack)  # mutable, so unhashable, as a dataclass with eq
    match m.QueueDeclare(queue="q", durable=True):
        case m.QueueDeclare(_, "q", False, durable):
            assert durable
        case _:
            pytest.fail("positional patterns take the spec's field order")


def test_one_init_is_compiled_per_list_of_field_names() -> None:
    # Rule 2: the table is imported by every process that speaks AMQP.
    assert m.QueuePurgeOk.__init__.__code__ is m.QueueDeleteOk.__init__.__code__
    assert m.QueuePurgeOk.__init__ is not m.QueueDeleteOk.__init__  # defaults are their own
    assert m.ConnectionTune().frame_max == 0 and m.ChannelFlow().active


def test_spec_names_come_from_class_names() -> None:
    assert m.BasicConsumeOk.NAME == "basic.consume-ok"
    assert m.ConnectionStartOk.NAME == "connection.start-ok"
    assert m.TxSelect.NAME == "tx.select"
    assert m.BasicPublish.HAS_CONTENT and not m.BasicConsume.HAS_CONTENT


def test_consecutive_bits_share_one_octet() -> None:
    payload = encode_method(m.QueueDeclare(queue="q", passive=True, auto_delete=True, nowait=True))
    assert payload == b"\x00\x32\x00\x0a" + b"\x00\x00" + b"\x01q" + bytes([0b11001]) + b"\x00" * 4


def test_bits_after_other_fields_start_a_new_octet() -> None:
    payload = encode_method(m.BasicNack(delivery_tag=7, multiple=False, requeue=True))
    assert payload == b"\x00\x3c\x00\x78" + struct.pack(">Q", 7) + b"\x02"
    qos = encode_method(m.BasicQos(0, 10, True))
    assert qos == b"\x00\x3c\x00\x0a" + bytes(4) + b"\x00\x0a\x01"


def test_known_bytes_of_basic_publish() -> None:
    payload = encode_method(m.BasicPublish(0, "ex", "rk", mandatory=True))
    assert payload == b"\x00\x3c\x00\x28\x00\x00\x02ex\x02rk\x01"


def test_names_of_a_message_keep_bytes_that_are_not_utf8() -> None:
    payload = b"\x00\x3c\x00\x28\x00\x00\x02\xff\xfe\x01\xff\x00"  # basic.publish
    method = decode_method(payload)
    assert isinstance(method, m.BasicPublish)
    assert encode_method(method) == payload


def test_other_names_that_are_not_utf8_are_501() -> None:
    with pytest.raises(HardError) as raised:
        decode_method(b"\x00\x3c\x00\x15\x02\xff\xfe")  # basic.consume-ok
    error = raised.value
    assert (error.code, error.text) == (
        ReplyCode.FRAME_ERROR,
        "FRAME_ERROR - Malformed UTF-8 in shortstr",
    )
    assert (error.class_id, error.method_id) == (0, 0)


def test_shortstr_longer_than_255_bytes_is_refused_on_encode() -> None:
    with pytest.raises(ValueError, match="255"):
        encode_method(m.BasicConsumeOk("x" * 256))


def test_unknown_method_is_540_with_its_ids() -> None:
    with pytest.raises(HardError) as raised:
        decode_method(b"\x00\x3c\x03\xe7")
    assert raised.value.code == ReplyCode.NOT_IMPLEMENTED
    assert (raised.value.class_id, raised.value.method_id) == (60, 999)


@pytest.mark.parametrize(
    ("payload", "octets"), [(b"", ""), (b"\x00", "0"), (b"\x00\x3c\x00", "0,60,0")]
)
def test_payload_shorter_than_ids_is_501_unknown_frame(payload: bytes, octets: str) -> None:
    with pytest.raises(HardError) as raised:
        decode_method(payload)
    text = f"FRAME_ERROR - type 1, all octets = <<{octets}>>: unknown_frame"
    assert (raised.value.code, raised.value.text) == (ReplyCode.FRAME_ERROR, text)


@settings(max_examples=60, deadline=None)
@given(any_method.filter(lambda method: bool(method.SPEC)), st.data())
def test_every_truncation_is_501_naming_the_method(method: Method, data: st.DataObject) -> None:
    payload = encode_method(method)
    cut = data.draw(st.integers(4, len(payload) - 1))
    with pytest.raises(HardError) as raised:
        decode_method(payload[:cut])
    octets = ",".join(str(octet) for octet in payload[4:cut])
    assert raised.value.code == ReplyCode.FRAME_ERROR
    assert raised.value.text == f"FRAME_ERROR - cannot decode <<{octets}>>"
    assert (raised.value.class_id, raised.value.method_id) == (method.CLASS_ID, method.METHOD_ID)


def test_malformed_table_argument_is_501() -> None:
    payload = encode_method(m.QueueDeclare(queue="q"))[:-4] + b"\x00\x00\x00\x03\x01kQ"
    with pytest.raises(HardError) as raised:
        decode_method(payload)
    assert raised.value.code == ReplyCode.FRAME_ERROR
    assert raised.value.text.startswith("FRAME_ERROR - cannot decode <<0,0,1,113,")


def test_timestamp_out_of_range_in_arguments_is_501() -> None:
    table = b"\x00\x00\x00\x0b\x01kT" + b"\xff" * 8
    payload = encode_method(m.BasicConsume(queue="q"))[:-4] + table
    with pytest.raises(HardError) as raised:
        decode_method(payload)
    assert raised.value.code == ReplyCode.FRAME_ERROR


def test_deeply_nested_arguments_are_501() -> None:
    inner = b"\x00\x00\x00\x00"
    for _ in range(4000):
        inner = struct.pack(">I", len(inner) + 1) + b"A" + inner
    table = struct.pack(">I", len(inner) + 3) + b"\x01kA" + inner
    payload = encode_method(m.BasicConsume(queue="q"))[:-4] + table
    with pytest.raises(HardError) as raised:
        decode_method(payload)
    assert raised.value.code == ReplyCode.FRAME_ERROR


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(METHODS)), st.binary(max_size=64))
def test_any_fields_decode_or_raise_501(ids: tuple[int, int], fields: bytes) -> None:
    try:
        method = decode_method(struct.pack(">HH", *ids) + fields)
    except HardError as error:
        assert error.code == ReplyCode.FRAME_ERROR
    else:
        assert ids == (method.CLASS_ID, method.METHOD_ID)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_hard_error(payload: bytes) -> None:
    try:
        decode_method(payload)
    except HardError as error:
        assert error.code in (ReplyCode.FRAME_ERROR, ReplyCode.NOT_IMPLEMENTED)
