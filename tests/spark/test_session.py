"""The Java check before Spark starts, and the SPARK_HOME made of links, without starting a
JVM."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from warren.spark.session import JavaMissingError, _check_version, spark_home_without_zips


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


def test_the_spark_home_is_made_once_and_remade_when_its_links_lead_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A home left by a deleted virtual environment (CI's clone of yesterday) is replaced, not
    handed to Spark, whose spark-submit would then be missing."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    home = spark_home_without_zips()
    assert (home / "bin" / "spark-submit").is_file() and not (home / "python").exists()
    made = home.stat().st_ino
    assert spark_home_without_zips() == home and home.stat().st_ino == made  # made once
    (home / "bin").unlink()
    (home / "bin").symlink_to(tmp_path / "gone" / "bin")
    assert spark_home_without_zips() == home
    assert (home / "bin" / "spark-submit").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == [home.name]  # nothing left over
