"""Values printed the way RabbitMQ's Erlang formatting prints them in reply texts."""

from __future__ import annotations

import datetime
import decimal

import pytest

from warren.amqp.table import Typed
from warren.model.erlang_terms import (
    described_value,
    erlang_float,
    erlang_string,
    python_type_name,
    quoted_value,
    tilde_p,
    wire_type_name,
)


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        (1, "1"),
        (-5, "-5"),
        (True, "true"),
        (False, "false"),
        (None, "undefined"),
        ("foo", '<<"foo">>'),
        ('a"b', '<<"a\\"b">>'),
        (b"\x00\x01", "<<0,1>>"),
        (1.5, "1.5"),
        (decimal.Decimal("1.5"), "{1,15}"),
        (datetime.datetime.fromtimestamp(7, datetime.UTC), "7"),
        ([1, "a"], '[{signedint,1},{longstr,<<"a">>}]'),
        ({"k": 1}, '[{<<"k">>,signedint,1}]'),
        (Typed("l", 3), "3"),
    ],
)
def test_tilde_p(value: object, printed: str) -> None:
    assert tilde_p(value) == printed


@pytest.mark.parametrize(
    ("value", "printed"),
    [(10.0, "10.0"), (0.1, "0.1"), (1e20, "1.0e20"), (1.5e-7, "1.5e-7"), (-2.0, "-2.0")],
)
def test_erlang_float(value: float, printed: str) -> None:
    assert erlang_float(value) == printed


def test_erlang_string_escapes() -> None:
    assert erlang_string('say "hi" \\') == '"say \\"hi\\" \\\\"'


def test_quoted_value_shows_binaries_bare() -> None:
    assert quoted_value("direct") == "'direct'"
    assert quoted_value(b"raw") == "'raw'"
    assert quoted_value(10) == "'10'"
    assert quoted_value(False) == "'false'"


def test_described_value() -> None:
    assert described_value(None) == "none"
    assert described_value(Typed("I", 5000)) == "the value '5000' of type 'signedint'"
    assert described_value(Typed("S", "x")) == "the value 'x' of type 'longstr'"
    assert described_value(Typed("V", None)) == "the value 'undefined' of type 'void'"


def test_type_names() -> None:
    assert wire_type_name("I") == "signedint"
    assert wire_type_name("L") == "long"
    assert wire_type_name("x") == "binary"
    assert python_type_name(1) == "signedint"
    assert python_type_name(2**40) == "long"
    assert python_type_name(True) == "bool"
    assert python_type_name(1.0) == "double"
    assert python_type_name(None) == "void"
    assert python_type_name({}) == "table"
    assert python_type_name([]) == "array"
