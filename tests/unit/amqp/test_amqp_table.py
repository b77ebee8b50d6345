"""Field tables: round trips, RabbitMQ's type tags, and malformed input."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import struct

import pytest
from amqp_strategies import TYPED_VALUES, keys, plain_tables, same, typed_values
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.amqp.table import (
    MAX_DEPTH,
    TYPE_NAMES,
    TableError,
    Typed,
    decode_table,
    decode_table_typed,
    encode_table,
    encode_value,
    read_table,
    type_name,
)

FAST = settings(max_examples=60, deadline=None)


def table_bytes(entries: bytes) -> bytes:
    return struct.pack(">I", len(entries)) + entries


# --- round trips -------------------------------------------------------------------------


@FAST
@given(plain_tables)
def test_plain_table_round_trips(table: dict[str, object]) -> None:
    assert same(decode_table(encode_table(table)), table)


@FAST
@given(st.dictionaries(keys, typed_values, max_size=6))
def test_typed_table_keeps_every_tag(table: dict[str, Typed]) -> None:
    assert same(decode_table_typed(encode_table(table)), table)


@pytest.mark.parametrize("tag", sorted(TYPED_VALUES))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_each_tag_round_trips_alone(tag: str, data: st.DataObject) -> None:
    value = data.draw(TYPED_VALUES[tag])
    encoded = encode_table({"k": Typed(tag, value)})
    assert encoded[4:7] == b"\x01k" + tag.encode()
    assert same(decode_table_typed(encoded), {"k": Typed(tag, value)})


def test_every_named_tag_has_a_round_trip_strategy() -> None:
    assert set(TYPE_NAMES) == set(TYPED_VALUES)


def test_empty_and_absent_tables_encode_as_four_zero_bytes() -> None:
    assert encode_table({}) == encode_table(None) == b"\x00\x00\x00\x00"
    assert decode_table(b"\x00\x00\x00\x00") == {}


def test_nested_values_decode_plain_even_in_typed_tables() -> None:
    encoded = encode_table({"outer": {"inner": Typed("s", 3)}, "list": [Typed("u", 4)]})
    assert decode_table_typed(encoded) == {
        "outer": Typed("F", {"inner": 3}),
        "list": Typed("A", [4]),
    }


# --- the tags encode_value picks, RabbitMQ's dialect -------------------------------------


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (True, b"t\x01"),
        (False, b"t\x00"),
        (1, b"I\x00\x00\x00\x01"),
        (-(2**31), b"I\x80\x00\x00\x00"),
        (2**31, b"l\x00\x00\x00\x00\x80\x00\x00\x00"),
        (-(2**31) - 1, b"l\xff\xff\xff\xff\x7f\xff\xff\xff"),
        ("é", b"S\x00\x00\x00\x02\xc3\xa9"),
        (b"\xff", b"S\x00\x00\x00\x01\xff"),
        (1.5, b"d" + struct.pack(">d", 1.5)),
        (decimal.Decimal("1.50"), b"D\x02\x00\x00\x00\x96"),
        (decimal.Decimal("-12"), b"D\x00\xff\xff\xff\xf4"),
        (datetime.datetime(1970, 1, 2, tzinfo=datetime.UTC), b"T" + struct.pack(">Q", 86400)),
        (None, b"V"),
        ({}, b"F\x00\x00\x00\x00"),
        ([], b"A\x00\x00\x00\x00"),
        ([1, "a"], b"A\x00\x00\x00\x0bI\x00\x00\x00\x01S\x00\x00\x00\x01a"),
    ],
)
def test_encode_value_picks_rabbitmq_tags(value: object, wire: bytes) -> None:
    assert encode_value(value) == wire


@pytest.mark.parametrize(
    ("typed", "wire"),
    [
        (Typed("s", -2), b"s\xff\xfe"),  # RabbitMQ: signed 16-bit, not the errata's shortstr
        (Typed("u", 65535), b"u\xff\xff"),
        (Typed("b", -1), b"b\xff"),
        (Typed("B", 255), b"B\xff"),
        (Typed("i", 2**32 - 1), b"i\xff\xff\xff\xff"),
        (Typed("I", -1), b"I\xff\xff\xff\xff"),
        (Typed("l", 1), b"l\x00\x00\x00\x00\x00\x00\x00\x01"),
        (Typed("x", b"\x00\x01"), b"x\x00\x00\x00\x02\x00\x01"),
        (Typed("S", "ab"), b"S\x00\x00\x00\x02ab"),
        (Typed("T", 86400), b"T" + struct.pack(">Q", 86400)),
        (Typed("f", 1.5), b"f" + struct.pack(">f", 1.5)),
        (Typed("d", 1.5), b"d" + struct.pack(">d", 1.5)),
        (Typed("t", True), b"t\x01"),
        (Typed("V", None), b"V"),
    ],
)
def test_typed_values_encode_with_exactly_their_tag(typed: Typed, wire: bytes) -> None:
    assert encode_value(typed) == wire


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (b"s\xff\xfe", Typed("s", -2)),
        (b"u\xff\xfe", Typed("u", 65534)),
        (b"x\x00\x00\x00\x01\xff", Typed("x", b"\xff")),
        (b"S\x00\x00\x00\x01\xff", Typed("S", b"\xff")),
        (b"S\x00\x00\x00\x01a", Typed("S", "a")),
        (b"i\xff\xff\xff\xff", Typed("i", 2**32 - 1)),
        (b"t\x02", Typed("t", True)),
    ],
)
def test_decode_reads_rabbitmq_tags(entry: bytes, expected: Typed) -> None:
    assert same(decode_table_typed(table_bytes(b"\x01k" + entry)), {"k": expected})


@pytest.mark.parametrize(
    ("tag", "name"),
    [("S", "longstr"), ("I", "signedint"), ("l", "long"), ("s", "short"), ("t", "bool")],
)
def test_type_name_uses_rabbitmq_names(tag: str, name: str) -> None:
    assert type_name(Typed(tag, None)) == name


# --- malformed input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00\x00",
        b"\x00\x00\x00\x05\x01k",  # longer than the data
        table_bytes(b"\x01k"),  # a key without a value
        table_bytes(b"\x01kQ"),  # unknown tag
        table_bytes(b"\x01kI\x00\x00"),  # truncated int
        table_bytes(b"\x01kS\x00\x00\x00\x09ab"),  # string longer than its table
        table_bytes(b"\x01kA\x00\x00\x00\x09"),  # array longer than its frame
        table_bytes(b"\x01kF\x00\x00\x00\x01"),  # nested table longer than its frame
        table_bytes(b"\x01kI\x00\x00\x00\x01") + b"\x00",  # trailing bytes
    ],
)
def test_malformed_tables_raise_table_error(data: bytes) -> None:
    with pytest.raises(TableError):
        decode_table(data)


def test_value_overrunning_its_table_is_refused() -> None:
    # The table says 4 bytes but its long value needs 8: the reader must not take the bytes
    # of whatever field follows the table in a method frame.
    data = struct.pack(">I", 4) + b"\x01kl\x00" + b"\x00" * 8
    with pytest.raises(TableError):
        read_table(memoryview(data), 0)


def test_timestamp_beyond_datetime_range_is_a_table_error() -> None:
    data = table_bytes(b"\x01kT" + b"\xff" * 8)
    with pytest.raises(TableError):
        decode_table(data)


def nested(tag: bytes, depth: int) -> bytes:
    """A table whose one value nests tables (or arrays) until `depth` containers, the
    top-level table included."""
    inner = b"\x00\x00\x00\x00"
    for _ in range(depth - 2):
        item = (b"\x00F" if tag == b"F" else b"A") + inner  # a table entry or an array item
        inner = struct.pack(">I", len(item)) + item
    return table_bytes(b"\x01k" + tag + inner)


@pytest.mark.parametrize("tag", [b"F", b"A"])
def test_deeply_nested_values_are_a_table_error(tag: bytes) -> None:
    # Nesting costs five or six bytes a level, so one frame of the default frame_max (128 KiB)
    # nests twenty thousand deep: far past Python's recursion limit, and compiled by mypyc
    # past the C stack.
    data = nested(tag, 20000)
    assert len(data) < 131072 - 8
    with pytest.raises(TableError, match="nested deeper than 100"):
        decode_table(data)


@pytest.mark.parametrize("tag", [b"F", b"A"])
def test_nesting_stops_at_max_depth(tag: bytes) -> None:
    assert MAX_DEPTH == 100
    value = decode_table(nested(tag, MAX_DEPTH))["k"]
    for _ in range(MAX_DEPTH - 2):
        assert value
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
    assert value in ({}, [])
    for decode in (decode_table, decode_table_typed):
        with pytest.raises(TableError, match="nested deeper than 100"):
            decode(nested(tag, MAX_DEPTH + 1))
    with pytest.raises(TableError):
        read_table(memoryview(nested(tag, MAX_DEPTH + 1)), 0)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_table_error(data: bytes) -> None:
    with contextlib.suppress(TableError):
        decode_table(data)


@settings(max_examples=60, deadline=None)
@given(plain_tables, st.data())
def test_mutated_tables_decode_or_raise_table_error(
    table: dict[str, object], data: st.DataObject
) -> None:
    encoded = bytearray(encode_table(table))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    with contextlib.suppress(TableError):
        decode_table_typed(bytes(encoded))
