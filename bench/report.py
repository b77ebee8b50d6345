"""Turning benchmark records into results: medians, the rich tables and the PNG chart.

Owns the aggregation of run records (one dict per `bench.loadgen` run, tagged with
`workload`, `broker` and `rep`) into per-workload medians, the Warren/RabbitMQ ratio, the
comparison and CPU tables, and the matplotlib bar chart (Agg backend, no display needed).
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.workloads import METRICS, Metric, Workload

BROKERS = ("warren", "rabbitmq")
LABELS = {"warren": "Warren", "rabbitmq": "RabbitMQ"}
CPU_COLUMNS = {
    "loadgen_cpu_pct": "loadgen",
    "loadgen_max_process_cpu_pct": "busiest worker",
    "broker_cpu_pct": "broker",
    "other_cpu_pct": "other",
}
COLOURS = {"warren": "#2e86c1", "rabbitmq": "#ff6600"}


def median(records: Iterable[dict[str, Any]], workload: str, broker: str, key: str) -> float | None:
    values = [
        r[key]
        for r in records
        if r.get("workload") == workload
        and r.get("broker") == broker
        and "error" not in r
        and isinstance(r.get(key), int | float)
    ]
    return statistics.median(values) if values else None


def fmt(value: float | None, metric: Metric) -> str:
    if value is None:
        return "—"
    if metric.unit == "ms":
        return f"{value:.3f}"
    return f"{value:,.0f}"


def ratio(warren: float | None, rabbitmq: float | None) -> str:
    if warren is None or not rabbitmq:
        return "—"
    return f"{warren / rabbitmq:.2f}x"


def comparison_table(records: list[dict[str, Any]], workloads: list[Workload]) -> Table:
    table = Table(title="Medians (Warren/RabbitMQ: >1 is better for msg/s, <1 for ms and B)")
    for column in ("Workload", "Metric", "Warren", "RabbitMQ", "Warren/RabbitMQ"):
        table.add_column(column, justify="left" if column in ("Workload", "Metric") else "right")
    for workload in workloads:
        for n, key in enumerate(workload.metrics):
            metric = METRICS[key]
            warren, rabbit = (median(records, workload.name, b, key) for b in BROKERS)
            table.add_row(
                workload.name if n == 0 else "",
                f"{metric.label} ({metric.unit})",
                fmt(warren, metric),
                fmt(rabbit, metric),
                ratio(warren, rabbit),
                end_section=n == len(workload.metrics) - 1,
            )
    return table


def cpu_table(records: list[dict[str, Any]], workloads: list[Workload]) -> Table:
    table = Table(title="CPU (median % of one core; the machine's total is cores x 100 %)")
    table.add_column("Workload")
    present = [b for b in BROKERS if any(r.get("broker") == b for r in records)]
    for broker in present:
        label = LABELS[broker]
        for column in CPU_COLUMNS.values():
            table.add_column(f"{label}: {column}", justify="right")
    for workload in workloads:
        cells = [workload.name]
        for broker in present:
            for key in CPU_COLUMNS:
                value = median(records, workload.name, broker, key)
                cells.append("—" if value is None else f"{value:.0f} %")
        table.add_row(*cells)
    return table


def node_cpu_table(records: list[dict[str, Any]], workloads: list[Workload]) -> Table:
    """CPU per published message of every node of a cluster (median per node, driven first)."""
    table = Table(title="CPU per message by node (median us; the load generator's node first)")
    for column in ("Workload", "Broker", "per node", "all nodes"):
        table.add_column(column, justify="left" if column in ("Workload", "Broker") else "right")
    for workload in workloads:
        for broker in BROKERS:
            runs = [
                r["node_cpu_us_per_msg"]
                for r in records
                if r.get("workload") == workload.name
                and r.get("broker") == broker
                and "node_cpu_us_per_msg" in r
            ]
            if runs:
                nodes = [statistics.median(values) for values in zip(*runs, strict=True)]
                total = median(records, workload.name, broker, "cluster_cpu_us_per_msg")
                per_node = " / ".join(f"{us:.0f}" for us in nodes)
                table.add_row(workload.name, LABELS[broker], per_node, f"{total or 0:.0f}")
    return table


def _panels(workloads: list[Workload]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Chart panels by unit: (unit, [(workload, metric key), ...])."""
    panels: dict[str, list[tuple[str, str]]] = {}
    for workload in workloads:
        for key in workload.metrics:
            panels.setdefault(METRICS[key].unit, []).append((workload.name, key))
    return list(panels.items())


def chart(records: list[dict[str, Any]], workloads: list[Workload], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(workloads)
    widths = [max(3, len(bars)) for _, bars in panels]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(1.1 * sum(widths) + 2, 4.5), width_ratios=widths, squeeze=False
    )
    for ax, (unit, bars) in zip(axes[0], panels, strict=True):
        _panel(ax, records, unit, bars)
    fig.suptitle("Warren vs RabbitMQ (medians, 128 B messages)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, records: list[dict[str, Any]], unit: str, bars: list[tuple[str, str]]) -> None:
    positions = range(len(bars))
    for offset, broker in ((-0.2, "warren"), (0.2, "rabbitmq")):
        heights = [median(records, w, broker, key) or 0 for w, key in bars]
        xs = [p + offset for p in positions]
        ax.bar(xs, heights, 0.4, label=LABELS[broker], color=COLOURS[broker])
    ax.set_xticks(list(positions))
    labels = [f"{w}\n" + textwrap.fill(METRICS[key].label, 14) for w, key in bars]
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel(unit)
    ax.legend(fontsize=8)
