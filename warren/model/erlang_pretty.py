"""Erlang's ``~p`` layout for JSON-decoded terms, as RabbitMQ's policy error texts print them.

Theory of operation:
1. RabbitMQ validates a policy after decoding its JSON into Erlang terms: a string becomes a
   binary (``<<"x">>``), true/false/null become atoms, an array a list and an object a map.
   Its error texts print those terms with ``~p`` (``-1 is not a valid maximum length``,
   ``[{<<"foo">>,1}] are not recognised policy settings``), and ``~p`` breaks a term that
   does not fit into 80 columns across lines. Clients see these texts in HTTP 400 reasons
   and rabbitmqctl errors, so Warren lays them out the same way. This module owns that
   layout and nothing else; `warren.model.erlang_terms` renders the leaves.
2. Terms are Python values: ``str`` (a binary), ``bool``/``None`` (the atoms
   true/false/null), ``int``, ``float``, ``list``, ``dict`` (a map), ``tuple`` (a tuple),
   `Charlist` (an Erlang string, printed in double quotes) and `Atom`.
3. Layout, as measured against ``io_lib_pretty`` of Erlang/OTP 25: a term is printed flat
   when it, and the closing brackets that follow it on its line, end before column 79.
   Otherwise a tuple, or a list holding any compound term, puts one element per line,
   indented one past its opening bracket; a list of atomic terms fills each line; a map
   puts one ``K => V`` per line, and a value that does not fit goes on its own line,
   indented four past its key. `tests/unit/model/test_policy_erlang_pretty.py` holds
   layouts taken from ``erl``.

Source: Erlang/OTP stdlib io_lib_pretty (behaviour checked with ``erl -eval``).
"""

from __future__ import annotations

from dataclasses import dataclass

from warren.model.erlang_terms import erlang_binary, erlang_float, erlang_string

LINE_LENGTH = 79  # a line may end before column 79 (io_lib_format's 80, less one)
MAP_VALUE_INDENT = 4


@dataclass(frozen=True, slots=True)
class Charlist:
    """An Erlang string (a list of characters): ``~p`` prints it double-quoted."""

    text: str


@dataclass(frozen=True, slots=True)
class Atom:
    name: str


def pretty(term: object, column: int = 0, trailing: int = 0) -> str:
    """``~p`` of `term` when it starts at `column` of its line and `trailing` closing
    brackets of enclosing terms follow it on the same line."""
    flat = flat_term(term)
    if column + len(flat) + trailing < LINE_LENGTH or not _is_compound(term):
        return flat
    if isinstance(term, tuple):
        return _vertical("{", list(term), "}", column, trailing)
    if isinstance(term, list):
        if any(_is_compound(item) for item in term):
            return _vertical("[", term, "]", column, trailing)
        return _filled(term, column, trailing)
    assert isinstance(term, dict)
    return _map(term, column, trailing)


def flat_term(term: object) -> str:
    """``~p`` of `term` on one line."""
    if isinstance(term, bool):
        return "true" if term else "false"
    if term is None:
        return "null"
    if isinstance(term, int):
        return str(term)
    if isinstance(term, float):
        return erlang_float(term)
    if isinstance(term, str):
        return erlang_binary(term.encode("utf-8"))
    return _flat_compound(term)


def _flat_compound(term: object) -> str:
    if isinstance(term, Charlist):
        return erlang_string(term.text)
    if isinstance(term, Atom):
        return term.name
    if isinstance(term, tuple):
        return "{" + ",".join(flat_term(item) for item in term) + "}"
    if isinstance(term, list):
        return "[" + ",".join(flat_term(item) for item in term) + "]"
    if isinstance(term, dict):
        return "#{" + ",".join(_flat_entry(key, value) for key, value in term.items()) + "}"
    raise TypeError(f"not an Erlang term of JSON: {term!r}")


def _flat_entry(key: object, value: object) -> str:
    return f"{flat_term(key)} => {flat_term(value)}"


def _is_compound(term: object) -> bool:
    return isinstance(term, tuple | list | dict) and bool(term)


def _vertical(opening: str, items: list[object], closing: str, column: int, trailing: int) -> str:
    inner = column + len(opening)
    last = len(items) - 1
    parts = [pretty(item, inner, trailing + 1 if i == last else 0) for i, item in enumerate(items)]
    return opening + (",\n" + " " * inner).join(parts) + closing


def _filled(items: list[object], column: int, trailing: int) -> str:
    """Atomic elements, as many to a line as fit, each with its comma or closing bracket."""
    inner = column + 1
    out = "["
    line_end = inner
    last = len(items) - 1
    for index, item in enumerate(items):
        text = flat_term(item) + ("]" if index == last else ",")
        needed = len(text) + (trailing if index == last else 0)
        if index and line_end + needed >= LINE_LENGTH:
            out += "\n" + " " * inner
            line_end = inner
        out += text
        line_end += len(text)
    return out


def _map(term: dict[object, object], column: int, trailing: int) -> str:
    inner = column + 2
    last = len(term) - 1
    entries = [
        _map_entry(key, value, inner, trailing + 1 if i == last else 0)
        for i, (key, value) in enumerate(term.items())
    ]
    return "#{" + (",\n" + " " * inner).join(entries) + "}"


def _map_entry(key: object, value: object, column: int, trailing: int) -> str:
    flat = _flat_entry(key, value)
    if column + len(flat) + trailing < LINE_LENGTH:
        return flat
    value_column = column + MAP_VALUE_INDENT
    head = pretty(key, column) + " =>"
    return head + "\n" + " " * value_column + pretty(value, value_column, trailing)
