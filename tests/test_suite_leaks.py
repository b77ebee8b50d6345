"""The suite pins an unclosed socket on the test that dropped it (tests/conftest.py, rule 6).

A pytest session of its own, with the suite's conftest as a plugin and warnings as errors as
in pyproject.toml, runs a test that drops a socket pair in a reference cycle (as a pika
connection and its ioloop are), then a test that collects garbage, as any later test may: the
first must fail in its own teardown and the second pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DROPPING = """
import gc
import socket


def test_drops_a_socket_pair():
    pair = list(socket.socketpair())
    pair.append(pair)  # a cycle: only the collector finalises it


def test_collects_garbage_later():
    gc.collect()
"""
REPOSITORY = Path(__file__).resolve().parent.parent


def test_a_dropped_socket_fails_the_test_that_dropped_it(tmp_path: Path) -> None:
    (tmp_path / "test_dropping.py").write_text(DROPPING)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's configuration
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]
    command += ["-W", "error", "-rA", str(tmp_path)]
    run = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True)
    report = run.stdout
    assert "ERROR at teardown of test_drops_a_socket_pair" in report, report
    assert "ResourceWarning: unclosed <socket.socket" in report, report
    assert "PASSED test_dropping.py::test_collects_garbage_later" in report, report
