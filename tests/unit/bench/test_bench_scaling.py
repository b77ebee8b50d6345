"""bench.scaling's nodes and table: workers or builds compared, W7 counted by what it publishes."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from bench import run, scaling, workloads
from bench.brokers import Broker


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


def test_the_table_shows_the_load_generators_cpu_per_message() -> None:
    args = argparse.Namespace(workloads=workloads.select("W4"))
    records = [
        record("warren-1", "W4", 1.0, consumed=100_000, consumed_per_s=10_000.0,
               loadgen_cpu_us_per_msg=2.5),
        record("warren-2", "W4", 1.0, consumed=100_000, consumed_per_s=16_000.0,
               loadgen_cpu_us_per_msg=2.0),
    ]  # fmt: skip
    table = scaling.table(records, args, ["warren-1", "warren-2"])
    assert "| W4 loadgen CPU/msg | 2.50 us | 2.00 us |" in table


def test_load_generator_trees_take_turns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    assert scaling.parse_args([]).trees == [""]
    args = scaling.parse_args(["--loadgen-trees", "/tmp/before,.", "--only", "W4", "--reps", "2"])
    assert args.trees == ["/tmp/before", "."]
    ran: list[tuple[str, int, str]] = []

    def run_one(
        workload: workloads.Workload, broker: Broker, rep: int, _args: object, tree: str
    ) -> dict[str, object]:
        ran.append((broker.name, rep, tree))
        return {"workload": workload.name, "broker": broker.name, "rep": rep, "loadgen": tree}

    monkeypatch.setattr(run, "run_one", run_one)
    monkeypatch.setattr(run, "wait_for_idle", lambda *_: 0.0)
    targets = [Broker("warren-1", "amqp://"), Broker("rabbitmq", "amqp://")]
    scaling.session(args, targets, tmp_path / "out.jsonl", lambda _: None, trees=args.trees)
    assert ran == [
        ("warren-1", 1, "/tmp/before"),
        ("warren-1", 1, "."),
        ("rabbitmq", 1, "/tmp/before"),
        ("rabbitmq", 1, "."),
        ("warren-1", 2, "."),
        ("warren-1", 2, "/tmp/before"),
        ("rabbitmq", 2, "."),
        ("rabbitmq", 2, "/tmp/before"),
    ]


def test_the_verdict_checks_issue_19s_targets_on_the_medians() -> None:
    def runs(
        broker: str, workload: str, rates: list[float], **more: float
    ) -> list[dict[str, object]]:
        return [
            record(
                broker, workload, 1.0, consumed=1, consumed_per_s=r, loadgen_cpu_pct=40.0, **more
            )
            for r in rates
        ]

    records = [
        *runs("warren-1", "W4", [90.0, 100.0, 110.0]),
        *runs("warren-2", "W4", [160.0, 175.0, 300.0]),
        *runs("rabbitmq", "W4", [50.0, 60.0, 70.0]),
        *runs("warren-2", "W5", [1000.0], latency_p99_ms=0.6),
        *runs("rabbitmq", "W5", [1000.0], latency_p99_ms=0.5),
    ]
    verdict = scaling.verdict(records, ["warren-1", "warren-2", "rabbitmq"]).splitlines()
    assert verdict == [
        "W4 msg/s warren-2 / rabbitmq: 2.92x (target >= 1.5x): met",
        "W5 p99 warren-2 / rabbitmq: 1.20x (target <= 1.0x): NOT MET",
        "W4 msg/s warren-2 / warren-1: 1.75x (target >= 1.7x): met",
        "load generator against warren-1: at most 40 % of a core",
        "load generator against warren-2: at most 40 % of a core",
        "load generator against rabbitmq: at most 40 % of a core",
    ]


def test_the_table_shows_a_latency_workloads_p99() -> None:
    args = argparse.Namespace(workloads=workloads.select("W5"))
    records = [
        record("warren-1", "W5", 0.1, consumed=6000, consumed_per_s=1000.0, latency_p99_ms=0.5),
        record("warren-2", "W5", 0.1, consumed=6000, consumed_per_s=1000.0, latency_p99_ms=0.4),
        record("rabbitmq", "W5", 0.2, consumed=6000, consumed_per_s=1000.0, latency_p99_ms=0.8),
    ]
    table = scaling.table(records, args, ["warren-1", "warren-2", "rabbitmq"])
    assert "| W5 latency p99 | 0.500 ms | 0.400 ms | 0.800 ms | 0.80x | 0.50x |" in table


def test_a_run_line_shows_its_slowest_and_fastest_second_and_deepest_queue() -> None:
    timeline = {
        "s": [-1.0, 1.0, 2.0, 3.0],
        "consumed_per_s": [5_000, 90_000, 102_000, 79_000],
        "depth": [40_000, 0, 12, 3],
    }
    done = record("warren-1", "W1", 1.0, rep=1, consumed=100_000, consumed_per_s=90_000.0)
    assert "per second 79,000-102,000, depth up to 12" in scaling.line(
        dict(done, timeline=timeline)
    )
    assert "per second" not in scaling.line(done)
