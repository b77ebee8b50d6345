"""The load generator against a live broker: producers and consumers in their own processes,
consumers reading runs of deliveries at once, counting every message, timing them and
acknowledging them, and the record saying what the load generator's CPU per message was."""

from __future__ import annotations

from typing import Any

import pytest

from bench import loadgen


def run(broker: Any, *options: str) -> dict[str, Any]:
    args = loadgen.parse_args(
        ["--url", broker.url, "--duration", "1.5", "--warmup", "0.5", *options]
    )
    record = loadgen.run(args)
    assert "error" not in record, record
    return record


def test_producers_and_consumers_on_several_queues_count_and_time_every_message(
    broker: Any,
) -> None:
    record = run(broker, "--producers", "2", "--consumers", "2", "--queues", "2")
    assert record["consumed"] > 1000 and record["published"] > 1000
    assert record["latency_samples"] >= record["consumed"] // 2  # the window's, give or take
    assert 0 < record["latency_p50_ms"] <= record["latency_p99_ms"]
    # CPU comes from /proc in clock ticks (10 ms): a role that spent less than one in the
    # window reads 0, so a short run checks only that every figure is there
    for key in ("loadgen_cpu_us_per_msg", "producer_cpu_us_per_msg", "consumer_cpu_us_per_msg"):
        assert record[key] >= 0, key


@pytest.mark.parametrize("prefetch", ["1000", "10"])
def test_confirms_and_manual_acks_keep_flowing(broker: Any, prefetch: str) -> None:
    # prefetch 10: acks every 5, so a consumer that stopped acking would stall at once
    reliable = ("--durable", "--persistent", "--confirm", "1000", "--ack", "manual")
    record = run(broker, *reliable, "--prefetch", prefetch)
    assert record["confirmed"] > 100 and record["nacked"] == 0
    assert record["consumed"] > 100
    assert record["consumed_total"] <= record["published_total"]


def test_the_timeline_shows_each_second_with_the_queues_depth(broker: Any) -> None:
    # 2,000 a second into a queue nobody consumes: its depth grows second by second
    record = run(broker, "--consumers", "0", "--rate", "2000")
    timeline = record["timeline"]
    # seconds from the measured window's start (the run's 0.5 s of warm-up before it)
    assert len(timeline["s"]) >= 2 and timeline["s"] == sorted(timeline["s"])
    assert timeline["s"][0] > -0.5 and timeline["s"][-1] >= 1.4
    assert all(len(values) == len(timeline["s"]) for values in timeline.values())
    assert timeline["consumed_per_s"] == [0] * len(timeline["s"])
    assert timeline["depth"] == sorted(timeline["depth"]) and timeline["depth"][-1] > 1000
    # nothing in flight to a consumer: every message published is in the queue (or on its
    # way, or published since the counters were read: a quarter of a second at most)
    assert all(
        abs(backlog - depth) <= 500
        for backlog, depth in zip(timeline["backlog"], timeline["depth"], strict=True)
    )
