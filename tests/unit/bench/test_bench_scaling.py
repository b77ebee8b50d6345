"""bench.scaling's nodes and table: workers or builds compared, W7 counted by what it publishes."""

from __future__ import annotations

import argparse

from bench import scaling, workloads


def record(broker: str, workload: str, cpu_s: float, **counts: float) -> dict[str, object]:
    return dict(workload=workload, broker=broker, broker_cpu_s=cpu_s, load_avg=3.0, **counts)


def test_builds_compare_the_pure_checkout_with_the_given_interpreter() -> None:
    args = scaling.parse_args(["--builds", "--warren-python", "/venv/bin/python", "--workers", "1"])
    assert scaling.warren_nodes(args) == [
        ("warren-pure", 1, ""),
        ("warren-compiled", 1, "/venv/bin/python"),
    ]
    assert [name for name, _, _ in scaling.warren_nodes(scaling.parse_args([]))] == [
        "warren-1",
        "warren-2",
    ]


def test_a_workload_without_consumers_counts_its_published_messages() -> None:
    args = argparse.Namespace(workloads=workloads.select("W7"))
    records = [
        record("warren-pure", "W7", 1.0, consumed=0, consumed_per_s=0.0, published=100_000,
               published_per_s=10_000.0),
        record("warren-compiled", "W7", 0.8, consumed=0, consumed_per_s=0.0, published=100_000,
               published_per_s=12_000.0),
    ]  # fmt: skip
    table = scaling.table(records, args, ["warren-pure", "warren-compiled"])
    assert "| W7 msg/s (broker CPU/msg) | 10,000 (10.0 us) | 12,000 (8.0 us) |" in table
    assert "| 1.20x (CPU/msg 0.80x) |" in table
    assert "| W7 load average | 3.0-3.0 |" in table
