"""The Java check before Spark starts, without starting a JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from warren.spark.session import JavaMissingError, _check_version


def runtime(directory: Path, version: str) -> str:
    """A Java runtime's layout: bin/java (never run) and the release file naming its version."""
    (directory / "bin").mkdir()
    java = directory / "bin" / "java"
    java.write_text("#!/bin/sh\nexit 1\n")
    (directory / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return str(java)


def test_the_release_file_answers_without_running_java(tmp_path: Path):
    _check_version(runtime(tmp_path, "17.0.15"))  # bin/java would fail if it were run


def test_an_old_java_is_named_with_the_fix(tmp_path: Path):
    with pytest.raises(JavaMissingError, match=r"is Java 11; Spark needs 17\+: install"):
        _check_version(runtime(tmp_path, "11.0.2"))
