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
