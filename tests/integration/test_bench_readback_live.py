"""`bench.readback` end to end on a node it starts from this checkout: every message queued
is drained once, and the record carries the broker's CPU per message."""

from __future__ import annotations

import argparse
import os

from bench import readback


def test_a_drain_counts_every_message_and_the_broker_cpu() -> None:
    args = argparse.Namespace(messages=3000, prefetch=500, profile="")
    tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for resident in (False, True):
        record = readback.run(tree, args, resident)
        assert record["messages"] == 3000 and record["resident"] is resident
        # /proc counts CPU in 10 ms ticks: a short drain may read 0
        assert record["broker_cpu_us_per_msg"] >= 0 and record["drain_msg_s"] > 0
