"""A short live fuzz run (`bench.fuzz_live`): random and mutated frames on many connections
while a good client publishes with confirms and consumes and a poller reads the management
API; the node stays up, answers no 541 and every listing with 200, and the good client
loses nothing. The seed is printed; `python -m bench.fuzz_live --seed S` replays
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
    mgmt_url = f"http://guest:guest@127.0.0.1:{server.management_port}"
    report = asyncio.run(run(server.broker.url, 8.0, 6, seed, mgmt_url))
    print(f"fuzz seed {seed}: {report}")
    assert server.process.poll() is None, f"the node died, seed {seed}:\n{server.log()}"
    assert report.connections > 20 and report.confirmed > 0, report
    assert report.lost == 0, f"the good client lost {report.lost} messages, seed {seed}"
    assert "internal error" not in server.log(), f"a bug surfaced, seed {seed}:\n{server.log()}"
    assert report.internal_error_closes == 0, f"541 on the wire, seed {seed}"
    assert report.mgmt_requests > 0 and report.mgmt_failures == 0, f"seed {seed}: {report}"
