"""The dead-letter report: a Parquet summary, a PNG chart, one self-contained HTML page and a
table on the terminal.

The summary is small (one row per origin, reason and time window), so it is collected to the
driver and drawn on a bare matplotlib `Figure` (no pyplot, no display needed); the HTML embeds
the chart as a data URI, so the page is one file that can be mailed or attached to a ticket.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib import ticker
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from warren.spark.jobs import SUMMARY_KEYS

COLUMNS = (*SUMMARY_KEYS, "window_start", "count")
NONE_SHOWN = "(none)"  # a dead letter without x-death has no origin
HOUR = datetime.timedelta(hours=1)  # a window's length when a row does not say


def _cell(value: Any) -> str:
    if value is None:
        return NONE_SHOWN
    if hasattr(value, "isoformat"):
        return str(value.isoformat(sep=" ", timespec="minutes"))
    return str(value)


def totals_by_reason(rows: list[dict[str, Any]]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for row in rows:
        totals[_cell(row["reason"])] += row["count"]
    return dict(sorted(totals.items()))


def print_table(console: Console, rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column, justify="right" if column == "count" else "left")
    for row in rows:
        table.add_row(*(_cell(row[column]) for column in COLUMNS))
    console.print(table)


def chart_png(rows: list[dict[str, Any]], title: str) -> bytes:
    buffer = io.BytesIO()
    draw(rows, title).savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def draw(rows: list[dict[str, Any]], title: str) -> Figure:
    """Dead letters over time: one stacked bar per time window (starting with it), one
    colour per reason, on a date axis; the count axis has whole-number ticks only."""
    reasons = sorted({_cell(row["reason"]) for row in rows})
    starts = sorted({row["window_start"] for row in rows})
    ends = {row["window_start"]: row.get("window_end") for row in rows}
    width = [  # nine tenths of the window, so neighbouring windows stay apart
        0.9 * ((ends[start] or start + HOUR) - start) for start in starts
    ]
    figure = Figure(figsize=(8, 4.5))
    axes = figure.subplots()
    # the concise date axis: times, with the date once below them
    with matplotlib.rc_context({"date.converter": "concise"}):
        bottoms = [0] * len(starts)
        for reason in reasons:
            heights = [
                sum(
                    row["count"]
                    for row in rows
                    if row["window_start"] == start and _cell(row["reason"]) == reason
                )
                for start in starts
            ]
            axes.bar(starts, heights, width=width, bottom=bottoms, align="edge", label=reason)
            bottoms = [bottom + height for bottom, height in zip(bottoms, heights, strict=True)]
    axes.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    axes.set_title(title)
    axes.set_xlabel("time window (UTC)" if starts and starts[0].tzinfo else "time window")
    axes.set_ylabel("messages dead-lettered")
    if reasons:
        axes.legend(title="reason", loc="upper left", bbox_to_anchor=(1, 1))  # off the bars
    figure.tight_layout()
    return figure


def html_page(rows: list[dict[str, Any]], title: str, png: bytes) -> str:
    header = "".join(f"<th>{html.escape(column)}</th>" for column in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row[c]))}</td>" for c in COLUMNS) + "</tr>"
        for row in rows
    )
    totals = "".join(
        f"<li>{html.escape(reason)}: {count}</li>"
        for reason, count in totals_by_reason(rows).items()
    )
    image = base64.b64encode(png).decode()
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><ul>{totals}</ul>"
        f"<img alt='dead letters by reason over time' src='data:image/png;base64,{image}'>"
        f"<table><tr>{header}</tr>{body}</table></body></html>"
    )


def write_report(out: Path, rows: list[dict[str, Any]], title: str) -> Path:
    """report.png and report.html under `out`; returns the HTML's path."""
    png = chart_png(rows, title)
    (out / "report.png").write_bytes(png)
    page = out / "report.html"
    page.write_text(html_page(rows, title, png), encoding="utf-8")
    return page
