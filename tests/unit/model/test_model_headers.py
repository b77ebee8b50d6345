"""Headers matching and x-match validation, as checked on RabbitMQ 3.10.8."""

from __future__ import annotations

import datetime
import decimal

import pytest

from warren.model.headers import HeadersPattern, field_equal, validate_x_match

STAMP = datetime.datetime.fromtimestamp(1, datetime.UTC)


def matches(arguments: dict[str, object], headers: dict[str, object]) -> bool:
    return HeadersPattern(arguments).matches(headers)


@pytest.mark.parametrize(
    ("arguments", "headers", "expected"),
    [
        ({}, {}, True),  # all of nothing
        ({"x-match": "any"}, {"a": 1}, False),  # any of nothing
        ({"a": 1, "b": 2}, {"b": 2, "a": 1, "c": 3}, True),
        ({"a": 1, "b": 2}, {"a": 1}, False),
        ({"a": 1, "b": 2, "x-match": "any"}, {"b": 2}, True),
        ({"a": 1, "b": 2, "x-match": "any"}, {"b": 3}, False),
        ({"x-match": "all", "x-foo": "1"}, {}, True),  # x- keys are not part of the pattern
        ({"x-match": "any", "x-foo": "1"}, {"x-foo": "1"}, False),
        ({"x-match": "all-with-x", "x-foo": "1"}, {"x-foo": "1"}, True),
        ({"x-match": "all-with-x", "x-foo": "1"}, {}, False),
        ({"x-match": "any-with-x", "x-match2": "1"}, {"x-match2": "1"}, True),
        ({"x-match": "any-with-x"}, {"x-match": "any-with-x"}, False),  # never x-match itself
        ({"x-match": "all-with-x"}, {}, True),
        ({"a": None}, {"a": 5}, True),  # void: presence
        ({"a": None}, {"b": 5}, False),
        ({"a": None}, {"a": None}, True),
        ({"a": 1}, {"a": None}, False),
        ({"x-match": 7, "a": 1}, {"a": 1}, True),  # an unvalidated x-match means all
    ],
)
def test_match_rules(
    arguments: dict[str, object], headers: dict[str, object], expected: bool
) -> None:
    assert matches(arguments, headers) is expected


@pytest.mark.parametrize(
    ("pattern", "data", "expected"),
    [
        (1, 1, True),  # signedint against long: both integers
        (1, 1.0, True),  # Erlang's == compares numbers by value
        (1, True, False),  # a bool is an atom
        (True, 1, False),
        (True, True, True),
        (1, "1", False),
        (1, STAMP, True),  # a timestamp is an integer
        (1, decimal.Decimal(1), False),  # a decimal is a tuple
        (decimal.Decimal("1.0"), decimal.Decimal("1.0"), True),
        (decimal.Decimal("1.0"), decimal.Decimal("1"), False),  # other scale
        ("x", b"x", True),  # longstr against binary: bytes
        ("é", "é".encode(), True),
        ([1, "a"], [1, "a"], True),
        ([1], [1, 2], False),
        ({"k": 1}, {"k": 1}, True),
        ({"k": 1}, {"k": 2}, False),
        (None, None, True),
    ],
)
def test_field_equal_is_erlangs_double_equals(
    pattern: object, data: object, expected: bool
) -> None:
    assert field_equal(pattern, data) is expected


@pytest.mark.parametrize("mode", ["all", "any", "all-with-x", "any-with-x"])
def test_x_match_values_accepted(mode: str) -> None:
    assert validate_x_match({"x-match": mode}) is None


def test_x_match_may_be_absent() -> None:
    assert validate_x_match({"a": 1}) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (
            "foo",
            'PRECONDITION_FAILED - Invalid x-match field value <<"foo">>; '
            "expected all, any, all-with-x, or any-with-x",
        ),
        (
            "ALL",
            'PRECONDITION_FAILED - Invalid x-match field value <<"ALL">>; '
            "expected all, any, all-with-x, or any-with-x",
        ),
        (
            1,
            "PRECONDITION_FAILED - Invalid x-match field type signedint (value 1); "
            "expected longstr",
        ),
        (
            True,
            "PRECONDITION_FAILED - Invalid x-match field type bool (value true); expected longstr",
        ),
    ],
)
def test_x_match_refusals(value: object, text: str) -> None:
    error = validate_x_match({"x-match": value})
    assert error is not None
    assert (error.code, error.text) == (406, text)
