"""How RabbitMQ prints field values and reasons inside its error texts.

Theory of operation:
1. RabbitMQ builds reply texts with Erlang's `io_lib:format`: `~s` prints a binary as its
   bytes, `~p` prints any term as Erlang source (`<<"foo">>`, `{value_negative,-1}`,
   `"expected integer, got longstr"`, `true`). Clients match on these texts, so Warren
   prints values the same way. This module owns that rendering and nothing else.
2. Field values arrive as Python values (from `warren.amqp.table`); the Erlang term for each
   is the one `rabbit_binary_parser` would have produced: a longstr is a binary, a bool is
   an atom, a timestamp is an integer, a table is a list of `{Key,Type,Value}` tuples.
3. `wire_type_name` names a wire tag as RabbitMQ does (`signedint`, `longstr`), including
   ``L``, which RabbitMQ reads as a signed 64-bit ``long``.

Sources: rabbit_misc:val/1 and equivalence_fail/4 (rabbit_common), Erlang's io_lib_format.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping

from warren.amqp.table import TYPE_NAMES, Typed

_TAG_NAMES: Mapping[str, str] = {**TYPE_NAMES, "L": "long"}

# The wire tags RabbitMQ accepts where it asks for an integer (rabbit_amqqueue ?INTEGER_ARG_TYPES).
INTEGER_TAGS = frozenset("bBsuIilL")


def wire_type_name(tag: str) -> str:
    """RabbitMQ's name of a wire type tag: ``"I"`` → ``"signedint"``."""
    return _TAG_NAMES.get(tag, tag)


def python_type_name(value: object) -> str:
    """The wire type name RabbitMQ would report for a plain value, as Warren encodes it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, str | bytes | bytearray):
        return "longstr"
    return _PLAIN_TYPE_NAMES.get(type(value), "void" if value is None else "longstr")


_PLAIN_TYPE_NAMES: Mapping[type, str] = {
    float: "double",
    decimal.Decimal: "decimal",
    datetime.datetime: "timestamp",
    dict: "table",
    list: "array",
}


def as_bytes(value: str | bytes | bytearray) -> bytes:
    """A longstr's bytes, whichever way the table decoder handed it over."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def tilde_s(value: str | bytes | bytearray) -> str:
    """``~s`` of a binary: its text, unquoted."""
    if isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", "replace")


def erlang_string(text: str) -> str:
    """``~p`` of an Erlang string (a list of characters): double-quoted, escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def erlang_tuple(*parts: str) -> str:
    """``~p`` of a tuple whose elements are already rendered: ``{value_negative,-1}``."""
    return "{" + ",".join(parts) + "}"


def tilde_p(value: object) -> str:
    """``~p`` of a decoded field value, as the Erlang term RabbitMQ holds for it."""
    if isinstance(value, Typed):
        return tilde_p(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return erlang_float(value)
    if isinstance(value, str | bytes | bytearray):
        return erlang_binary(as_bytes(value))
    return _tilde_p_compound(value)


def _tilde_p_compound(value: object) -> str:
    if value is None:
        return "undefined"
    if isinstance(value, datetime.datetime):
        return str(int(value.timestamp()))
    if isinstance(value, decimal.Decimal):
        return _erlang_decimal(value)
    if isinstance(value, Mapping):
        entries = (
            erlang_tuple(erlang_binary(as_bytes(str(key))), python_type_name(item), tilde_p(item))
            for key, item in value.items()
        )
        return "[" + ",".join(entries) + "]"
    if isinstance(value, list | tuple):
        return "[" + ",".join(erlang_tuple(python_type_name(v), tilde_p(v)) for v in value) + "]"
    return erlang_string(str(value))


def _erlang_decimal(value: decimal.Decimal) -> str:
    """RabbitMQ decodes a decimal as ``{Scale, Unscaled}``."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    scale = max(0, -exponent)
    return erlang_tuple(str(scale), str(unscaled * 10 ** max(0, exponent)))


def erlang_binary(raw: bytes) -> str:
    """``~p`` of a binary: ``<<"text">>`` when printable as Latin-1, else a byte list."""
    if all(_printable_latin1(byte) for byte in raw):
        text = raw.decode("latin-1").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(byte) for byte in raw) + ">>"


def _printable_latin1(byte: int) -> bool:
    return 32 <= byte <= 126 or 160 <= byte <= 255


def erlang_float(value: float) -> str:
    """``~p`` of a float: the shortest round-trip digits, Erlang style (``1.0e20``)."""
    text = repr(value)
    if "e" not in text:
        return text if "." in text else text + ".0"
    mantissa, exponent = text.split("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{int(exponent)}"


def quoted_value(value: object) -> str:
    """rabbit_misc:val/1 of a bare value: ``'~s'`` for a binary, ``'~p'`` otherwise."""
    if isinstance(value, str | bytes | bytearray):
        return f"'{tilde_s(value)}'"
    return f"'{tilde_p(value)}'"


def described_value(value: Typed | None) -> str:
    """rabbit_misc:val/1 of a typed value: ``the value '5000' of type 'signedint'`` or none."""
    if value is None:
        return "none"
    shown = tilde_s(value.value) if isinstance(value.value, str | bytes) else tilde_p(value.value)
    return f"the value '{shown}' of type '{wire_type_name(value.tag)}'"
