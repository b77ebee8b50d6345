"""`warren-pipeline` as an operator meets it: its help, a broker that is down (one line,
before Spark starts), and Ctrl-C on `land` (a quiet stop, status 130, what was landed).

The commands run as processes, as from a shell; they speak AMQP only, so these pass against
a real RabbitMQ too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from warren.runtime.ports import unused_port
from warren.spark import cli

COMMAND = [sys.executable, "-m", "warren.spark.cli"]
WAIT_S = 300.0  # a Spark process starting on a loaded 2-core machine takes minutes


def test_help_lists_the_commands() -> None:
    done = subprocess.run([*COMMAND, "--help"], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert "{dlq-report,dlq-replay,land}" in done.stdout
    assert "default amqp://guest:guest@127.0.0.1:5672/%2F" in " ".join(done.stdout.split())


def test_a_queue_pattern_lists_queues_beside_the_broker_by_default() -> None:
    assert cli.default_management_url("amqp://ops%40x:s%2Fcret@mq.example:5673/prod") == (
        "http://ops%40x:s%2Fcret@mq.example:15672"
    )
    assert cli.default_management_url("amqp://127.0.0.1") == "http://guest:guest@127.0.0.1:15672"


def test_a_queue_and_a_queue_pattern_exclude_each_other(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["land", "--queue", "a", "--queue-pattern", "a.*", "--out", "o"])
    assert "not allowed with argument --queue" in capsys.readouterr().err


def test_a_broker_that_is_down_is_one_line_before_spark_starts(tmp_path: Path) -> None:
    port = unused_port()  # nothing listens there
    uri = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    command = [*COMMAND, "--uri", uri, "land", "--queue", "q", "--out", str(tmp_path)]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "300"}
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"warren-pipeline: no broker at 127.0.0.1:{port} (Connection refused): start one"
        " (make run), or point --uri or WARREN_AMQP_URI at yours\n",
    )


@pytest.mark.timeout(900)
def test_ctrl_c_on_land_stops_quietly_and_says_what_was_landed(
    spark_environment: None, amqp: Any, tmp_path: Path
) -> None:
    queue = amqp.queue("q")
    amqp.publish(queue, 1_000)
    out = tmp_path / "out"
    command = [*COMMAND, "--uri", amqp.url, "--batch-size", "100", "land", "--queue", queue]
    command += ["--out", str(out)]
    log = tmp_path / "land.log"
    with log.open("wb") as log_file:
        # a session of its own: Ctrl-C in a shell signals the whole foreground group
        process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "COLUMNS": "300"},
        )
    try:
        metadata = out / "_spark_metadata"
        deadline = time.monotonic() + WAIT_S
        while not (metadata.exists() and any(metadata.iterdir())):
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "no batch landed"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = log.read_text(errors="replace")
    assert status == 130, text
    assert "Traceback" not in text and "Exception" not in text, text
    last = text.strip().splitlines()[-1]
    match = re.fullmatch(
        rf"warren-pipeline land: landing {re.escape(queue)} into {re.escape(str(out))}:"
        r" stopped by Ctrl-C after (\d+) messages",
        last,
    )
    assert match is not None, text
    assert int(match.group(1)) >= 100
