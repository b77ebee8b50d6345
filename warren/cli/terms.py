"""How rabbitmqctl's formatters print a queue's arguments, from the plain JSON values of
the HTTP API.

Theory of operation:
1. The HTTP API gives argument values as plain JSON; rabbitmqctl prints them with their
   AMQP wire type, so the type is inferred the way clients such as pika encode a value:
   an integer is ``signedint`` when it fits 32 bits and ``long`` otherwise, a string is
   ``longstr``, an object a ``table``, an array an ``array``, a float a ``double``. (A
   value another client sent as ``long`` although it is small is shown as ``signedint``.)
2. Three renderings, one per formatter: `erlang_table` for pretty_table
   (``{<<"x-max-length">>,signedint,7}`` per argument, run together), `inspect_table` for
   the plain table and csv (``[{"x-max-length",7}]``) and `typed_json` for json
   (``[["x-max-length","signedint",7]]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def wire_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if INT32_MIN <= value <= INT32_MAX else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "void" if value is None else "longstr"


# --- pretty_table: Erlang terms ---


def erlang_table(arguments: Mapping[str, Any]) -> str:
    return "".join(_erlang_field(key, value) for key, value in arguments.items())


def _erlang_field(key: str, value: Any) -> str:
    return "{" + f"{_erlang_binary(key)},{wire_type(value)},{_erlang_value(value)}" + "}"


def _erlang_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _erlang_float(value)
    if isinstance(value, str):
        return _erlang_binary(value)
    if isinstance(value, dict):
        return "[" + ",".join(_erlang_field(k, v) for k, v in value.items()) + "]"
    if isinstance(value, list):
        return "[" + ",".join("{" + f"{wire_type(v)},{_erlang_value(v)}" + "}" for v in value) + "]"
    return "undefined"


def _erlang_binary(text: str) -> str:
    raw = text.encode("utf-8")
    if all(32 <= byte <= 126 or 160 <= byte <= 255 for byte in raw):
        escaped = raw.decode("latin-1").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{escaped}">>'
    return "<<" + ",".join(str(byte) for byte in raw) + ">>"


def _erlang_float(value: float) -> str:
    text = repr(value)
    if "e" not in text:
        return text if "." in text else text + ".0"
    mantissa, exponent = text.split("e")
    return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{int(exponent)}"


# --- table and csv: Elixir's inspect of the argument list ---


def inspect_table(arguments: Mapping[str, Any]) -> str:
    return (
        "["
        + ",".join("{" + f"{_quoted(k)},{_inspect(v)}" + "}" for k, v in arguments.items())
        + "]"
    )


def _inspect(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _erlang_float(value)
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, dict):
        return inspect_table(value)
    if isinstance(value, list):
        return "[" + ",".join(_inspect(item) for item in value) + "]"
    return "undefined"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- json ---


def typed_json(arguments: Mapping[str, Any]) -> list[list[Any]]:
    return [[key, wire_type(value), _typed_value(value)] for key, value in arguments.items()]


def _typed_value(value: Any) -> Any:
    if isinstance(value, dict):
        return typed_json(value)
    if isinstance(value, list):
        return {wire_type(item): _typed_value(item) for item in value}
    return value
