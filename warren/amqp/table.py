"""AMQP field tables and field values, in RabbitMQ's dialect of the 0-9-1 type tags.

Theory of operation:
1. `decode_table` turns a field table into a dict of plain Python values; `encode_table`
   turns such a dict back into bytes. Long strings decode to `str` when they are valid
   UTF-8 and to `bytes` otherwise; both encode as longstr (``S``). A `str` holding lone
   surrogates (a message's routing key that was not UTF-8, quoted in ``x-death``) encodes
   back to the bytes it came from (`surrogateescape`).
2. Where the wire type matters (queue and exchange arguments are compared by type in
   RabbitMQ's error texts; `x-death` headers must carry ``l`` counts and ``T`` times),
   a value is wrapped in `Typed(tag, value)`: `decode_table_typed` wraps the top level,
   and `encode_table` writes a `Typed` value with exactly its tag.
3. The tags are RabbitMQ's (rabbit_binary_parser), not the spec's errata: ``s`` is a
   signed 16-bit short, ``u`` unsigned short, ``x`` byte array.
4. Malformed input raises `TableError`; callers turn it into the right AMQP error.
5. Tables and arrays nest at most `MAX_DEPTH` deep, the top-level table included. RabbitMQ
   sets no limit (its parser recurses on the Erlang process's growable stack), but one
   frame of the default frame_max nests twenty thousand deep at five bytes a level: the
   decoder refuses such a table before it recurses past what Python's stack (or, compiled
   by mypyc, the C stack) holds, and what it returns stays shallow enough for every
   recursive reader after it (the encoder, the management API's JSON, `erlang_pretty`).

We measured pamqp's table codec against this module: see docs/performance.md. pamqp
loses the wire type of integers, which RabbitMQ's argument-equivalence texts need.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple, TypeAlias

FieldValue: TypeAlias = object
FieldTable: TypeAlias = dict[str, FieldValue]

# Far beyond what clients send (``x-death`` is three deep: headers, array, table).
MAX_DEPTH: Final = 100


class TableError(ValueError):
    """A field table that does not parse."""


class Typed(NamedTuple):
    """A field value with its wire type tag kept, e.g. ``Typed("l", 1)``."""

    tag: str
    value: FieldValue


# RabbitMQ's names of the wire types, as its error texts print them.
TYPE_NAMES: Mapping[str, str] = {
    "S": "longstr",
    "I": "signedint",
    "i": "unsignedint",
    "l": "long",
    "b": "byte",
    "B": "unsignedbyte",
    "s": "short",
    "u": "unsignedshort",
    "t": "bool",
    "F": "table",
    "A": "array",
    "T": "timestamp",
    "d": "double",
    "f": "float",
    "D": "decimal",
    "V": "void",
    "x": "binary",
}

_UINT32 = struct.Struct(">I")
_INTS: Mapping[str, struct.Struct] = {
    "b": struct.Struct(">b"),
    "B": struct.Struct(">B"),
    "s": struct.Struct(">h"),
    "u": struct.Struct(">H"),
    "I": struct.Struct(">i"),
    "i": struct.Struct(">I"),
    "l": struct.Struct(">q"),
    "L": struct.Struct(">Q"),
}
_FLOAT = struct.Struct(">f")
_DOUBLE = struct.Struct(">d")
_TIMESTAMP = struct.Struct(">Q")
_DECIMAL = struct.Struct(">Bi")


def decode_table(data: bytes) -> FieldTable:
    """Decode a whole field table (its four-byte length included)."""
    table, end = _table(memoryview(data), 0, typed=False, depth=1)
    if end != len(data):
        raise TableError("trailing bytes after field table")
    return table


def decode_table_typed(data: bytes) -> dict[str, Typed]:
    """Decode a field table keeping each top-level value's wire tag."""
    table, end = _table(memoryview(data), 0, typed=True, depth=1)
    if end != len(data):
        raise TableError("trailing bytes after field table")
    return table  # type: ignore[return-value]


def read_table(view: memoryview, offset: int) -> tuple[FieldTable, int]:
    """Decode the table at `offset`; return it and the offset after it."""
    return _table(view, offset, typed=False, depth=1)


def _table(view: memoryview, offset: int, typed: bool, depth: int) -> tuple[FieldTable, int]:
    """The table at `offset`, itself `depth` deep (the top-level table is 1)."""
    try:
        (size,) = _UINT32.unpack_from(view, offset)
    except struct.error as error:
        raise TableError("truncated field table") from error
    offset += 4
    end = offset + size
    if end > len(view):
        raise TableError("field table longer than its frame")
    table: FieldTable = {}
    while offset < end:
        key_size = view[offset]
        key = bytes(view[offset + 1 : offset + 1 + key_size]).decode("utf-8", "replace")
        offset += 1 + key_size
        if offset >= end:
            raise TableError("field table entry without a value")
        tag = chr(view[offset])
        value, offset = _value(view, offset + 1, tag, end, depth)
        table[key] = Typed(tag, value) if typed else value
    if offset != end:
        raise TableError("field table overruns its length")
    return table, end


def _value(view: memoryview, offset: int, tag: str, end: int, depth: int) -> tuple[FieldValue, int]:
    """The value after `tag` in a table or array `depth` deep."""
    try:
        return _value_unchecked(view, offset, tag, end, depth)
    except (struct.error, IndexError) as error:
        raise TableError(f"truncated field value of type {tag!r}") from error


def _value_unchecked(
    view: memoryview, offset: int, tag: str, end: int, depth: int
) -> tuple[FieldValue, int]:
    if tag == "S" or tag == "x":
        (size,) = _UINT32.unpack_from(view, offset)
        offset += 4
        if offset + size > end:
            raise TableError("string longer than its table")
        raw = bytes(view[offset : offset + size])
        return (_text(raw) if tag == "S" else raw), offset + size
    integer = _INTS.get(tag)
    if integer is not None:
        return integer.unpack_from(view, offset)[0], offset + integer.size
    if tag == "t":
        return view[offset] != 0, offset + 1
    if tag == "F" or tag == "A":
        if depth == MAX_DEPTH:
            raise TableError(f"field tables and arrays nested deeper than {MAX_DEPTH}")
        if tag == "F":
            return _table(view, offset, typed=False, depth=depth + 1)
        return _array(view, offset, depth + 1)
    if tag == "T":
        (seconds,) = _TIMESTAMP.unpack_from(view, offset)
        try:
            return datetime.datetime.fromtimestamp(seconds, datetime.UTC), offset + 8
        except (OverflowError, OSError, ValueError) as error:
            raise TableError(f"timestamp {seconds} out of range") from error
    if tag == "d":
        return _DOUBLE.unpack_from(view, offset)[0], offset + 8
    if tag == "f":
        return _FLOAT.unpack_from(view, offset)[0], offset + 4
    if tag == "D":
        places, unscaled = _DECIMAL.unpack_from(view, offset)
        return decimal.Decimal(unscaled).scaleb(-places), offset + 5
    if tag == "V":
        return None, offset
    raise TableError(f"unknown field type {tag!r}")


def _array(view: memoryview, offset: int, depth: int) -> tuple[list[FieldValue], int]:
    (size,) = _UINT32.unpack_from(view, offset)
    offset += 4
    end = offset + size
    if end > len(view):
        raise TableError("field array longer than its frame")
    items: list[FieldValue] = []
    while offset < end:
        value, offset = _value(view, offset + 1, chr(view[offset]), end, depth)
        items.append(value)
    if offset != end:
        raise TableError("field array overruns its length")
    return items, end


def _text(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def encode_table(table: Mapping[str, FieldValue] | None) -> bytes:
    """Encode a field table, its four-byte length first."""
    if not table:
        return b"\x00\x00\x00\x00"
    parts: list[bytes] = []
    for key, value in table.items():
        raw_key = key.encode("utf-8")
        if len(raw_key) > 255:
            raise TableError(f"field name longer than 255 bytes: {key[:32]!r}")
        parts.append(bytes((len(raw_key),)))
        parts.append(raw_key)
        parts.append(encode_value(value))
    body = b"".join(parts)
    return _UINT32.pack(len(body)) + body


def encode_value(value: FieldValue) -> bytes:
    """Encode one field value with its tag, choosing the tag RabbitMQ would."""
    if isinstance(value, Typed):
        return value.tag.encode() + _encode_as(value.tag, value.value)
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        tag = "I" if -(2**31) <= value < 2**31 else "l"
        return tag.encode() + _INTS[tag].pack(value)
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogateescape")  # the bytes of a message's names
        return b"S" + _UINT32.pack(len(raw)) + raw
    if isinstance(value, bytes | bytearray):
        return b"S" + _UINT32.pack(len(value)) + bytes(value)
    if isinstance(value, float):
        return b"d" + _DOUBLE.pack(value)
    if isinstance(value, decimal.Decimal):
        return b"D" + _encode_as("D", value)
    if isinstance(value, datetime.datetime):
        return b"T" + _encode_as("T", value)
    if isinstance(value, Mapping):
        return b"F" + encode_table(value)
    if isinstance(value, Sequence):
        return b"A" + _encode_array(value)
    if value is None:
        return b"V"
    raise TableError(f"cannot encode a field value of type {type(value).__name__}")


def _encode_as(tag: str, value: FieldValue) -> bytes:
    integer = _INTS.get(tag)
    if integer is not None:
        assert isinstance(value, int)
        return integer.pack(value)
    if tag == "S" or tag == "x":
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)  # type: ignore[call-overload]
        return _UINT32.pack(len(raw)) + raw
    if tag == "T":
        if isinstance(value, datetime.datetime):
            value = int(value.timestamp())
        assert isinstance(value, int)
        return _TIMESTAMP.pack(value)
    if tag == "D":
        assert isinstance(value, decimal.Decimal)
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return _DECIMAL.pack(max(0, -exponent), unscaled * 10 ** max(0, exponent))
    if tag == "F":
        assert isinstance(value, Mapping)
        return encode_table(value)
    if tag == "A":
        assert isinstance(value, Sequence)
        return _encode_array(value)
    if tag == "f":  # encode_value would write a float as an eight-byte double
        assert isinstance(value, float | int)
        return _FLOAT.pack(value)
    return encode_value(value)[1:]


def _encode_array(values: Sequence[FieldValue]) -> bytes:
    body = b"".join(encode_value(item) for item in values)
    return _UINT32.pack(len(body)) + body


def type_name(value: Typed) -> str:
    """RabbitMQ's name of a typed value's wire type (``signedint``, ``longstr`` …)."""
    return TYPE_NAMES.get(value.tag, value.tag)
