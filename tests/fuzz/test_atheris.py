"""A short seeded atheris run over the AMQP codec (tests/fuzz/atheris_amqp.py) in the suite;
it fails with atheris's crash report if any input escapes the protocol's error rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).with_name("atheris_amqp.py")
RUNS = 20_000


def test_atheris_finds_no_input_that_escapes_the_protocol_error_rule(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            f"-runs={RUNS}",
            "-seed=1",
            "-max_len=512",
            "-len_control=0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"Done {RUNS} runs" in result.stderr
