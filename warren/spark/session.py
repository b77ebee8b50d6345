"""A SparkSession for Warren's pipeline, with the `amqp` data source registered.

Theory of operation:
1. PySpark runs the JVM side of Spark with `java` (from `JAVA_HOME`, else `PATH`); Spark 4
   needs Java 17 or newer. Without it PySpark fails with an obscure gateway error, so
   `require_java` checks first and names the fix. It reads the version from the runtime's
   `release` file (`JAVA_VERSION="17.0.15"`, next to `bin/`); only without one does it run
   `java -version`, which starts a JVM (half a second before Spark starts its own), and a
   `java` that passed is not asked again in the same process.
2. The JVM starts Python workers with `PYSPARK_PYTHON`; it is set to this interpreter so the
   workers see the same packages (pyarrow, warren) as the driver.
3. In local mode the driver binds to 127.0.0.1, so a machine whose host name does not resolve
   (containers, laptops on a train) still works and nothing listens on a public address.
4. Start-up: Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on every Python worker's
   path, and Python compiles what it imports from a zip on every start (it caches no
   bytecode there): 1.8 s of CPU per worker process instead of 0.6 s from site-packages, and
   a job starts several (the streaming source's, each task's). Without `SPARK_HOME`,
   `build_session` points Spark at a copy of pyspark's own home made of symbolic links,
   without `python/lib`, so the workers import the installed pyspark instead. The copy is
   named by pyspark's version, the user and the installation's path, and is remade when a
   link no longer leads anywhere (a virtual environment deleted and made again at the same
   path), so two checkouts on one machine never share one. A `SPARK_HOME` the user set is
   left alone.
5. The driver's JVM (in local mode also the executor) runs with `JAVA_OPTIONS`: C1 only
   (`-XX:TieredStopAtLevel=1`) and the serial collector. A pipeline job lives seconds to
   minutes, and with the defaults the C2 compiler and the parallel GC threads spent as much
   CPU as the job itself, CPU the broker on the same machine then lacks: measured on a
   200,000-message streaming read, the JVM took 14.8 s of CPU to start and 13.9 s for the
   read with the defaults, 8.2 s and 7.8 s with these (docs/pipeline.md, "Start-up").
   `build_session(java_options="")` keeps the JVM's defaults; executors of a cluster keep
   theirs (they live long, where C2 pays).
6. Streaming queries write their checkpoint (offsets, commits) through Hadoop's FileSystem
   API (`CHECKPOINT_FILE_MANAGER`), not Spark's default FileContext one: on a local path
   without Hadoop's native library, FileContext's rename runs `readlink` in a new process
   for every status it takes, about 17 processes the driver's JVM forks per micro-batch
   (and 4 `chmod`s either way), 100-400 ms of each batch's `walCommit` and `commitOffsets`
   on this machine. The FileSystem API renames with one system call, atomically on a local
   file system and on HDFS, which is all a checkpoint needs. A manager the user configured
   is kept.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from warren.spark.source import AmqpDataSource

JAVA_VERSION_MIN = 17
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # rule 5
CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"  # rule 6
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
JAVA_FIX = (
    "install a Java 17 runtime (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; "
    "or set JAVA_HOME to a JDK/JRE 17+)"
)


class JavaMissingError(RuntimeError):
    """Spark cannot start: no suitable Java runtime."""


def _java() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        return str(candidate) if candidate.exists() else None
    return shutil.which("java")


def require_java() -> None:
    """Raise `JavaMissingError`, naming the fix, unless Java 17+ can run."""
    java = _java()
    if java is None:
        raise JavaMissingError(
            f"Spark needs Java {JAVA_VERSION_MIN}+ and none was found: {JAVA_FIX}"
        )
    _check_version(java)


def _release_version(java: str) -> str | None:
    """`JAVA_VERSION="..."` from the `release` file of the runtime `java` belongs to."""
    release = Path(java).resolve().parent.parent / "release"
    try:
        text = release.read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r'^JAVA_VERSION="([^"]*)"', text, re.MULTILINE)
    return None if match is None else f'version "{match.group(1)}"'


@functools.cache  # a JVM start per check; a failed check raises and is not remembered
def _check_version(java: str) -> None:
    said = _release_version(java)
    if said is None:
        ran = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
        said = ran.stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', said)
    if match is None:
        raise JavaMissingError(f"{java} -version said {said.strip()!r}: {JAVA_FIX}")
    major = int(match.group(2) if match.group(1) == "1" else match.group(1))
    if major < JAVA_VERSION_MIN:
        raise JavaMissingError(
            f"{java} is Java {major}; Spark needs {JAVA_VERSION_MIN}+: {JAVA_FIX}"
        )


def spark_home_without_zips() -> Path:
    """Rule 4: pyspark's SPARK_HOME, linked entry by entry, without `python/lib` (made once
    per pyspark installation and user, in the temporary directory)."""
    installed = Path(pyspark.__file__).parent
    entries = [entry for entry in installed.iterdir() if entry.name != "python"]
    where = hashlib.sha256(str(installed).encode()).hexdigest()[:12]
    name = f"warren-spark-home-{pyspark.__version__}-{os.getuid()}-{where}"
    home = Path(tempfile.gettempdir()) / name
    if all((home / entry.name).exists() for entry in entries):  # exists() follows the link
        return home
    building = Path(tempfile.mkdtemp(prefix=name + ".", dir=home.parent))
    for entry in entries:
        (building / entry.name).symlink_to(entry)
    stale = building.with_name(building.name + ".stale")
    with contextlib.suppress(FileNotFoundError):  # a stale copy: set aside, then removed
        home.rename(stale)
    shutil.rmtree(stale, ignore_errors=True)
    try:
        building.rename(home)
    except OSError:  # another process made it first
        shutil.rmtree(building)
    return home


def build_session(
    master: str = "local[2]",
    app_name: str = "warren-pipeline",
    shuffle_partitions: int = 4,
    java_options: str = JAVA_OPTIONS,
) -> SparkSession:
    """A SparkSession (new or the running one) with `format("amqp")` registered and
    checkpoints written through the FileSystem API (rule 6); a new one's driver JVM runs
    with `java_options` (rule 5)."""
    require_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    if "SPARK_HOME" not in os.environ:
        os.environ["SPARK_HOME"] = str(spark_home_without_zips())
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if session.conf.get(CHECKPOINT_FILE_MANAGER_KEY, None) is None:  # rule 6
        session.conf.set(CHECKPOINT_FILE_MANAGER_KEY, CHECKPOINT_FILE_MANAGER)
    session.dataSource.register(AmqpDataSource)
    return session
