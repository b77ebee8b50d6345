"""The load generator's second-by-second view of a run (`bench.loadgen.Timeline`) and its
workers' allocator setting (`bench.workers.keep_freed_memory`)."""

from __future__ import annotations

import ctypes

import pytest

from bench import loadgen, workers
from bench.workers import CONSUMED, PUBLISHED


class Fleet:
    def __init__(self) -> None:
        self.counts = {PUBLISHED: 0, CONSUMED: 0}

    def total(self, index: int) -> int:
        return self.counts[index]


class Probe:
    def __init__(self) -> None:
        self.queued = 0

    def depth(self) -> int:
        return self.queued


def test_each_interval_has_its_rates_depth_backlog_and_broker_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([10.0, 11.0, 11.5, 12.0, 14.0])
    monkeypatch.setattr(loadgen.time, "monotonic", lambda: next(clock))
    cpu = iter([1.0, 1.5, 2.5])
    monkeypatch.setattr(loadgen.stats, "tree_cpu_seconds", lambda pid: next(cpu))
    fleet, probe = Fleet(), Probe()
    timeline = loadgen.Timeline(fleet, 4242, probe)  # type: ignore[arg-type]
    timeline.sample()  # 10.0
    fleet.counts = {PUBLISHED: 1000, CONSUMED: 600}
    probe.queued = 300
    timeline.measured_from = 11.0
    timeline.sample()  # 11.0
    timeline.sample()  # 11.5: not due, nothing read
    fleet.counts = {PUBLISHED: 3000, CONSUMED: 2600}
    probe.queued = 100
    timeline.sample(closing=True)  # 12.0
    assert timeline.results() == {
        "s": [0.0, 1.0],
        "published_per_s": [1000, 2000],
        "consumed_per_s": [600, 2000],
        "depth": [300, 100],
        "backlog": [400, 400],
        "broker_cpu_pct": [50.0, 100.0],
    }


def test_workers_keep_freed_memory_on_glibc() -> None:
    try:
        ctypes.CDLL(None).mallopt  # noqa: B018
    except AttributeError:
        pytest.skip("not glibc")
    assert workers.keep_freed_memory()
