"""A short live fuzz run (`bench.fuzz_live`): random and mutated frames on many connections
while a good client publishes with confirms and consumes; the node stays up and the good
client loses nothing. The seed is printed; `python -m bench.fuzz_live --seed S` replays
the fuzzing side of it against a fresh node."""

from __future__ import annotations

import asyncio
import random

import pytest

from bench.fuzz_live import run

pytestmark = pytest.mark.warren_only


def test_the_node_survives_bad_frames_and_the_good_client_loses_nothing(server_factory):
    server = server_factory()
    seed = random.randrange(2**32)
    report = asyncio.run(run(server.broker.url, duration_s=8.0, fuzzers=6, seed=seed))
    print(f"fuzz seed {seed}: {report}")
    assert server.process.poll() is None, f"the node died, seed {seed}:\n{server.log()}"
    assert report.connections > 20 and report.confirmed > 0, report
    assert report.lost == 0, f"the good client lost {report.lost} messages, seed {seed}"
    assert "internal error" not in server.log(), f"a bug surfaced, seed {seed}:\n{server.log()}"
