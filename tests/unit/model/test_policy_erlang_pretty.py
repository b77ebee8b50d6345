"""Erlang's ~p layout: every expected text below was printed by `io_lib:format("~p", …)` of
Erlang/OTP 25 (the runtime of the RabbitMQ 3.10.8 the golden files come from)."""

from __future__ import annotations

import pytest

from warren.model.erlang_pretty import Atom, Charlist, flat_term, pretty


def b(count: int) -> str:
    return "b" * count


def test_leaves_print_as_erlang_terms() -> None:
    assert flat_term("x") == '<<"x">>'
    assert flat_term(None) == "null"
    assert flat_term(True) == "true"
    assert flat_term(-1) == "-1"
    assert flat_term(1.5) == "1.5"
    assert flat_term(Charlist('say "hi"')) == '"say \\"hi\\""'
    assert flat_term(Atom("none")) == "none"
    assert flat_term({"a": [1, 2.5, None, True]}) == '#{<<"a">> => [1,2.5,null,true]}'
    assert flat_term([("k", "v"), ("n", 1)]) == '[{<<"k">>,<<"v">>},{<<"n">>,1}]'


@pytest.mark.parametrize(
    ("term", "column", "expected"),
    [
        ((b(68), 0), 0, '{<<"' + b(68) + '">>,0}'),
        ((b(69), 0), 0, '{<<"' + b(69) + '">>,\n 0}'),
        ([(b(67), 1), ("c", [1, 2])], 0, '[{<<"' + b(67) + '">>,1},\n {<<"c">>,[1,2]}]'),
        (
            [(b(68), 1), ("c", [1, 2])],
            0,
            '[{<<"' + b(68) + '">>,\n  1},\n {<<"c">>,[1,2]}]',
        ),
        (
            list(range(1, 41)),
            0,
            "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,\n"
            " 29,30,31,32,33,34,35,36,37,38,39,40]",
        ),
        (
            {"a": 1, b(56): [1, 2, 3]},
            3,
            '#{<<"a">> => 1,\n     <<"' + b(56) + '">> =>\n         [1,2,3]}',
        ),
        (
            {"a": list(range(1, 31)), "b": 2},
            0,
            '#{<<"a">> =>\n'
            "      [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,\n"
            "       27,28,29,30],\n"
            '  <<"b">> => 2}',
        ),
        (
            (Charlist("unmatched parentheses"), 0),
            53,
            '{"unmatched parentheses",\n' + " " * 54 + "0}",
        ),
        ((Charlist("missing )"), 1), 53, '{"missing )",1}'),
        (
            [(b(14), [(b(10), list(range(1, 15)))])],
            0,
            '[{<<"'
            + b(14)
            + '">>,\n  [{<<"'
            + b(10)
            + '">>,[1,2,3,4,5,6,7,8,9,10,11,12,13,14]}]}]',
        ),
    ],
)
def test_layout_matches_erl(term: object, column: int, expected: str) -> None:
    assert pretty(term, column) == expected


def test_text_after_the_term_does_not_change_its_layout() -> None:
    # io_lib:format("~p are not recognised policy settings", [[{B66, 1}]]) stays on one line.
    assert "\n" not in pretty([(b(66), 1)])
    assert pretty([(b(67), 1)]) == '[{<<"' + b(67) + '">>,\n  1}]'
