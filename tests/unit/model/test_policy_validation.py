"""Policy validation: every expected text was returned by RabbitMQ 3.10.8's HTTP API (PUT
/api/policies/%2F/p) for the same input, with the HTML escaping of &lt; and &gt; undone."""

from __future__ import annotations

from typing import Any

import pytest

from warren.model.policy import PolicyError, make_policy
from warren.model.policy_validation import validate_definition, validate_pattern


def reasons(
    definition: Any,
    *,
    pattern: Any = "^zz",
    priority: Any = 0,
    apply_to: Any = "all",
    operator: bool = False,
) -> str:
    with pytest.raises(PolicyError) as caught:
        make_policy(
            "/",
            "p",
            pattern=pattern,
            definition=definition,
            priority=priority,
            apply_to=apply_to,
            operator=operator,
        )
    text = caught.value.text
    assert text.startswith("Validation failed\n\n") and text.endswith("\n")
    return text.removeprefix("Validation failed\n\n").removesuffix("\n")


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ({"max-length": -1}, "-1 is not a valid maximum length"),
        ({"max-length": "5"}, '<<"5">> is not a valid maximum length'),
        ({"max-length": 1.5}, "1.5 is not a valid maximum length"),
        ({"max-length": True}, "true is not a valid maximum length"),
        ({"max-length": None}, "null is not a valid maximum length"),
        ({"dead-letter-exchange": 5}, "5 is not a valid dead letter exchange name"),
        ({"overflow": "x"}, '<<"x">> is not a valid overflow value'),
        ({"alternate-exchange": ["a"]}, '[<<"a">>] is not a valid alternate exchange name'),
        ({"max-age": "0D"}, '<<"0D">> is not a valid max age'),
        ({"delivery-limit": -1}, "-1 is not a valid delivery limit"),
        ({"queue-version": 3}, "3 is not a valid queue-version value"),
        (
            {"dead-letter-exchange": {"a": [1, 2.5, None, True]}},
            '#{<<"a">> => [1,2.5,null,true]} is not a valid dead letter exchange name',
        ),
        # Keys are visited in sorted order: expires first.
        ({"max-length": 1, "message-ttl": -1, "expires": 0}, "0 is not a valid queue expiry"),
        ({}, "no policy provided"),
        (
            {"foo": 1, "bar": "x"},
            '[{<<"bar">>,<<"x">>},{<<"foo">>,1}] are not recognised policy settings',
        ),
        # Validator modules run queue-master-locator, rabbit_policies, then mirroring.
        (
            {"ha-mode": "bogus", "max-length": -1, "queue-master-locator": "x"},
            '<<"x">> invalid queue-master-locator value',
        ),
        ({"ha-mode": "bogus", "max-length": -1}, "-1 is not a valid maximum length"),
        ({"ha-mode": "bogus", "zzz": -1}, '<<"bogus">> is not a valid ha-mode value'),
        ({"ha-mode": "all", "ha-params": 1}, 'ha-mode="all" does not take parameters'),
        (
            {"ha-mode": "exactly", "ha-params": "2"},
            'ha-mode="exactly" takes an integer, <<"2">> given',
        ),
        (
            {"ha-sync-mode": "automatic"},
            "ha-mode must be specified to specify ha-params, ha-sync-mode or "
            "ha-promote-on-shutdown",
        ),
        ({"queue-master-locator": 5}, "5 invalid queue-master-locator value"),
    ],
)
def test_definition_texts(definition: dict[str, Any], expected: str) -> None:
    assert reasons(definition) == expected


def test_long_values_wrap_as_erlang_does() -> None:
    definition = {
        "aaaaaaaaaaaaaaaaaaaaa": "bbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        "cccccccccccccccccccccc": "dddddddddddddddddddddddd",
        "eeeeeeeeeeeeeeeeeeeeeeeeee": [1, 2, 3],
    }
    assert reasons(definition) == (
        '[{<<"aaaaaaaaaaaaaaaaaaaaa">>,<<"bbbbbbbbbbbbbbbbbbbbbbbbbbbb">>},\n'
        ' {<<"cccccccccccccccccccccc">>,<<"dddddddddddddddddddddddd">>},\n'
        ' {<<"eeeeeeeeeeeeeeeeeeeeeeeeee">>,[1,2,3]}] are not recognised policy settings'
    )


def test_operator_policies_take_only_the_numeric_limits() -> None:
    assert (
        reasons({"overflow": "reject-publish"}, operator=True)
        == '[{<<"overflow">>,<<"reject-publish">>}] are not recognised policy settings'
    )
    assert reasons({"max-length": -1}, operator=True) == "-1 is not a valid maximum length"
    for key in ("expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit"):
        assert validate_definition({key: 5}, operator=True) is None


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("(", '{"missing )",1}'),
        (")", '{"unmatched parentheses",\n' + " " * 54 + "0}"),
        ("[", '{"missing terminating ] for character class",\n' + " " * 54 + "1}"),
        ("*", '{"nothing to repeat",0}'),
        ("+a", '{"nothing to repeat",0}'),
        ("a**", '{"nothing to repeat",2}'),
        ("a{2,1}", '{"numbers out of order in {} quantifier",\n' + " " * 54 + "5}"),
        ("[z-a]", '{"range out of order in character class",\n' + " " * 54 + "3}"),
        ("(?<=a+)b", '{"lookbehind assertion is not fixed length",\n' + " " * 54 + "6}"),
    ],
)
def test_pattern_texts_are_pcre_ones(pattern: str, expected: str) -> None:
    assert validate_pattern(pattern) == (
        "pattern should be regular expression but is invalid: " + expected
    )


def test_all_four_parts_are_reported_definition_first() -> None:
    text = reasons({"max-length": -1}, pattern="(", priority="x", apply_to="y")
    assert text.split("\n") == [
        "-1 is not a valid maximum length",
        "apply-to 'y' unrecognised; should be 'queues', 'exchanges' or 'all'",
        'pattern should be regular expression but is invalid: {"missing )",1}',
        'priority should be a number, actually was <<"x">>',
    ]


def test_priority_apply_to_and_pattern_types() -> None:
    assert (
        reasons({"max-length": 1}, priority=None)
        == "priority should be a number, actually was null"
    )
    assert reasons({"max-length": 1}, apply_to=None) == (
        "apply-to 'null' unrecognised; should be 'queues', 'exchanges' or 'all'"
    )
    assert reasons({"max-length": 1}, pattern=5) == "pattern should be a binary but was 5"
    assert (
        make_policy("/", "p", pattern="x", definition={"max-length": 1}, priority=1.5).priority
        == 1.5
    )


def test_a_definition_that_is_not_an_object_is_refused_not_a_crash() -> None:
    # RabbitMQ 3.10.8 answers HTTP 500 (badmap); Warren uses rabbit_policy's own text.
    assert reasons([1]) == "definition must be a dictionary: [1]"
    assert reasons("x") == 'definition must be a dictionary: <<"x">>'
    assert reasons([]) == "no policy provided"
