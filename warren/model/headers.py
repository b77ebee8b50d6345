"""Headers matching: a binding's arguments against a message's headers table.

Theory of operation:
1. ``x-match`` picks the rule: ``all`` (the default, also used for any unrecognised value of
   a binding made before validation existed), ``any``, ``all-with-x``, ``any-with-x``.
2. The binding's other arguments are the pattern. ``x-match`` itself never is; other keys
   starting with ``x-`` are left out unless the rule is a ``-with-x`` one.
3. A pattern entry matches when the header is present and, unless the pattern value is void
   (a presence test), its value equals the header's by Erlang's ``==``: integers of any wire
   width, timestamps and floats compare by number (``1 == 1.0``); booleans are atoms and never
   equal a number; longstr and binary compare by bytes; decimals by scale and digits.
4. ``all`` needs every entry to match (an empty pattern matches every message); ``any``
   needs one (an empty pattern matches none).
5. `validate_x_match` gives the 406 text RabbitMQ sends when a binding's ``x-match`` is bad.

Nested tables compare by value only: their wire types are gone once decoded (RabbitMQ would
also compare the nested types).

Source: rabbit_exchange_type_headers.erl (headers_match/5, validate_binding/2).
"""

from __future__ import annotations

import datetime
import decimal
import enum
from collections.abc import Mapping

from warren.errors import SoftError, precondition_failed
from warren.model.erlang_terms import as_bytes, erlang_binary, python_type_name, tilde_p

X_MATCH = "x-match"


class MatchRule(enum.Enum):
    ALL = "all"
    ANY = "any"
    ALL_WITH_X = "all-with-x"
    ANY_WITH_X = "any-with-x"

    @property
    def needs_all(self) -> bool:
        return self in (MatchRule.ALL, MatchRule.ALL_WITH_X)

    @property
    def with_x(self) -> bool:
        return self in (MatchRule.ALL_WITH_X, MatchRule.ANY_WITH_X)


_RULES: Mapping[str, MatchRule] = {rule.value: rule for rule in MatchRule}


def validate_x_match(arguments: Mapping[str, object]) -> SoftError | None:
    """The error a headers binding with these arguments is refused with, if any."""
    if X_MATCH not in arguments:
        return None
    value = arguments[X_MATCH]
    if isinstance(value, str | bytes):
        if isinstance(value, str) and value in _RULES:
            return None
        return precondition_failed(
            f"Invalid x-match field value {erlang_binary(as_bytes(value))}; "
            "expected all, any, all-with-x, or any-with-x"
        )
    return precondition_failed(
        f"Invalid x-match field type {python_type_name(value)} (value {tilde_p(value)}); "
        "expected longstr"
    )


class HeadersPattern:
    """One binding's arguments, compiled for matching."""

    __slots__ = ("_entries", "_needs_all")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        rule = _rule(arguments.get(X_MATCH))
        self._needs_all = rule.needs_all
        self._entries = tuple(
            (key, value)
            for key, value in arguments.items()
            if key != X_MATCH and (rule.with_x or not key.startswith("x-"))
        )

    def matches(self, headers: Mapping[str, object]) -> bool:
        if self._needs_all:
            return all(_entry_matches(key, value, headers) for key, value in self._entries)
        return any(_entry_matches(key, value, headers) for key, value in self._entries)


def _rule(x_match: object) -> MatchRule:
    """The rule a binding uses; anything unrecognised means ``all`` (RabbitMQ's legacy)."""
    return _RULES.get(x_match, MatchRule.ALL) if isinstance(x_match, str) else MatchRule.ALL


def _entry_matches(key: str, pattern: object, headers: Mapping[str, object]) -> bool:
    if key not in headers:
        return False
    return pattern is None or field_equal(pattern, headers[key])


def field_equal(pattern: object, data: object) -> bool:
    """Erlang's ``==`` between two decoded field values."""
    if isinstance(pattern, bool) or isinstance(data, bool):
        return type(pattern) is type(data) and pattern == data
    pattern_number, data_number = _number(pattern), _number(data)
    if pattern_number is not None or data_number is not None:
        return pattern_number == data_number
    if isinstance(pattern, str | bytes) and isinstance(data, str | bytes):
        return as_bytes(pattern) == as_bytes(data)
    return _compound_equal(pattern, data)


def _number(value: object) -> int | float | None:
    if isinstance(value, int | float):
        return value
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return None


def _compound_equal(pattern: object, data: object) -> bool:
    if isinstance(pattern, decimal.Decimal) and isinstance(data, decimal.Decimal):
        return pattern.as_tuple() == data.as_tuple()
    if isinstance(pattern, list) and isinstance(data, list):
        return len(pattern) == len(data) and all(map(field_equal, pattern, data))
    if isinstance(pattern, Mapping) and isinstance(data, Mapping):
        return pattern.keys() == data.keys() and all(
            field_equal(value, data[key]) for key, value in pattern.items()
        )
    return pattern is None and data is None
