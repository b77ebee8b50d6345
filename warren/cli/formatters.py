"""rabbitmqctl's output formatters: table, pretty_table, csv and json.

Theory of operation:
1. A formatter gets column names and rows of cell values that the command has already
   rendered for it (text for the tabular ones, JSON values for json) and returns the
   whole output, without a final newline.
2. ``table`` is tab-separated with a header row (left out by ``--silent`` and
   ``--no-table-headers``); an empty result is an empty line. ``pretty_table`` draws box
   lines around every cell, a rule under the header and between rows, each column as
   wide as its widest cell plus one space either side; it always shows the header, as
   rabbitmqctl's does under ``--silent``. Width counts East Asian wide characters as two.
3. ``json`` writes one object per line between ``[`` and ``]``, later lines starting with
   a comma, exactly as rabbitmqctl's JSON formatter streams them.
"""

from __future__ import annotations

import enum
import json
import unicodedata
from collections.abc import Sequence
from typing import Any


class Formatter(enum.Enum):
    TABLE = "table"
    PRETTY_TABLE = "pretty_table"
    JSON = "json"
    CSV = "csv"

    @classmethod
    def named(cls, name: str) -> Formatter:
        """`tsv` is accepted as another name for the (tab-separated) table."""
        return cls.TABLE if name == "tsv" else cls(name)


FORMATTER_NAMES = ("table", "tsv", "pretty_table", "json", "csv")


def text(value: Any) -> str:
    """A JSON value as a table cell: booleans in lower case, null as nothing."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return compact_json(value)
    return str(value)


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, header: bool) -> str:
    if not rows:
        return ""
    lines = ["\t".join(columns)] if header else []
    lines.extend("\t".join(row) for row in rows)
    return "\n".join(lines)


def csv(columns: Sequence[str], rows: Sequence[Sequence[str]], *, header: bool) -> str:
    lines = [_csv_line(columns)] if header else []
    lines.extend(_csv_line(row) for row in rows)
    return "\n".join(lines)


def _csv_line(cells: Sequence[str]) -> str:
    return ",".join('"' + cell.replace('"', '""') + '"' for cell in cells)


def json_lines(objects: Sequence[dict[str, Any]], *, empty: str = "[\n]") -> str:
    if not objects:
        return empty
    return "[\n" + "\n,".join(compact_json(item) for item in objects) + "\n]"


def pretty_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [width(column) for column in columns]
    for row in rows:
        widths = [max(current, width(cell)) for current, cell in zip(widths, row, strict=True)]
    lines = [_rule("┌", "┬", "┐", widths), _cells(columns, widths)]
    for row in rows:
        lines += [_rule("├", "┼", "┤", widths), _cells(row, widths)]
    lines.append(_rule("└", "┴", "┘", widths))
    return "\n".join(lines)


def _rule(left: str, middle: str, right: str, widths: Sequence[int]) -> str:
    return left + middle.join("─" * (size + 2) for size in widths) + right


def _cells(cells: Sequence[str], widths: Sequence[int]) -> str:
    padded = (
        " " + cell + " " * (size - width(cell)) + " "
        for cell, size in zip(cells, widths, strict=True)
    )
    return "│" + "│".join(padded) + "│"


def width(cell: str) -> int:
    """Terminal columns of `cell`: wide characters take two, combining marks none."""
    total = 0
    for char in cell:
        if unicodedata.combining(char):
            continue
        total += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return total
