"""The dead-letter report's chart: reasons over time on a date axis, whole-number counts.

The chart is drawn from the collected summary rows alone, so these need no Spark session:
`draw` is the figure `chart_png` renders, inspected before it becomes a PNG.
"""

from __future__ import annotations

import datetime
from typing import Any

from matplotlib import dates

from warren.spark import report

HOUR = datetime.timedelta(hours=1)
START = datetime.datetime(2026, 11, 26, 9, 0)


def row(reason: str, hours: int, count: int, queue: str = "orders") -> dict[str, Any]:
    start = START + hours * HOUR
    return {
        "queue": queue,
        "reason": reason,
        "exchange": "",
        "routing_key": queue,
        "window_start": start,
        "window_end": start + HOUR,
        "count": count,
    }


ROWS = [
    row("expired", 0, 3),
    row("expired", 2, 1),
    row("rejected", 0, 2, queue="payments"),
    row("rejected", 1, 5),
    row("maxlen", 2, 1),
]


def test_bars_stack_reasons_per_time_window_on_a_date_axis() -> None:
    axes = report.draw(ROWS, "Dead letters in dlq").axes[0]
    bars = {
        container.get_label(): [(round(bar.get_x(), 6), bar.get_height()) for bar in container]
        for container in axes.containers
    }
    at = [round(dates.date2num(START + n * HOUR), 6) for n in range(3)]
    # both queues' rejections in the first window add up; a window without a reason is 0
    assert bars == {
        "expired": [(at[0], 3), (at[1], 0), (at[2], 1)],
        "maxlen": [(at[0], 0), (at[1], 0), (at[2], 1)],
        "rejected": [(at[0], 2), (at[1], 5), (at[2], 0)],
    }
    assert all(round(bar.get_width() * 24, 6) == 0.9 for c in axes.containers for bar in c)
    assert isinstance(axes.xaxis.get_major_formatter(), dates.ConciseDateFormatter)


def test_count_ticks_are_whole_numbers() -> None:
    figure = report.draw([row("expired", 0, 3), row("rejected", 1, 1)], "few")
    figure.canvas.draw()
    ticks = figure.axes[0].get_yticks()
    assert len(ticks) > 1
    assert all(float(tick).is_integer() for tick in ticks)


def test_an_empty_summary_still_draws() -> None:
    assert report.chart_png([], "nothing").startswith(b"\x89PNG")
