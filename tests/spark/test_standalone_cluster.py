"""`warren-pipeline land` and `dlq-replay` on a real Spark standalone cluster.

A master and two workers (one core each) run on loopback from the installed pyspark's own
`spark-class` (nothing is downloaded); the jobs run as `warren-pipeline --master
spark://...` in processes of their own, so their tasks run in the workers' executors. Every
message must land, or be replayed, exactly once, as in local mode. Starting three JVMs and
two drivers takes a few minutes on a busy 2-core machine: `make spark-cluster-test` runs
this file alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark.conftest import assert_repeats_are_redelivered
from warren.runtime.ports import unused_port
from warren.spark.session import spark_home_without_zips

pytestmark = pytest.mark.timeout(900)
START_S = 180.0
MESSAGES, DEAD, KILLED_RUN = 500, 40, 3_000


@dataclasses.dataclass
class Cluster:
    master: str  # spark://127.0.0.1:port
    workers: list[int]  # their process ids

    def executors(self) -> list[int]:
        """The executors' JVMs: the workers' children, whichever of a worker JVM's threads
        started them (`/proc/PID/task/TID/children` lists one thread's children only)."""
        children = []
        for worker in self.workers:
            for thread in Path(f"/proc/{worker}/task").iterdir():
                children += [int(pid) for pid in (thread / "children").read_text().split()]
        return children


def alive_workers(web_port: int) -> int:
    status = f"http://127.0.0.1:{web_port}/json/"
    with (
        contextlib.suppress(OSError, ValueError),
        urllib.request.urlopen(status, timeout=2) as answer,
    ):
        return int(json.load(answer).get("aliveworkers", 0))
    return 0


@pytest.fixture(scope="module")
def cluster_env(
    spark_environment: None, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The environment of the cluster's JVMs and of the jobs' drivers: loopback only."""
    logs = tmp_path_factory.mktemp("spark-cluster-logs")
    return os.environ | {
        "SPARK_HOME": str(spark_home_without_zips()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(logs),
        "PYSPARK_PYTHON": sys.executable,
    }


@pytest.fixture(scope="module")
def cluster(
    cluster_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A standalone master and two one-core workers."""
    spark_class = str(Path(cluster_env["SPARK_HOME"]) / "bin" / "spark-class")
    port, web_port = unused_port(), unused_port()
    url = f"spark://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("spark-cluster") / "cluster.log"
    deploy = "org.apache.spark.deploy"
    commands = [
        [spark_class, f"{deploy}.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    ]
    commands[0] += ["--webui-port", str(web_port)]
    for _ in range(2):
        worker = [spark_class, f"{deploy}.worker.Worker", "--host", "127.0.0.1", "--cores", "1"]
        worker += ["--memory", "1g", "--webui-port", str(unused_port())]
        commands.append([*worker, "--work-dir", str(tmp_path_factory.mktemp("spark-worker")), url])
    processes: list[subprocess.Popen[bytes]] = []
    with log_path.open("wb") as log:  # closed however the start fails
        try:
            for command in commands:
                processes.append(
                    subprocess.Popen(
                        command,
                        env=cluster_env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            deadline = time.monotonic() + START_S
            while alive_workers(web_port) < 2:
                assert time.monotonic() < deadline, "the standalone cluster did not come up"
                assert all(process.poll() is None for process in processes), "a cluster JVM died"
                time.sleep(0.5)
            yield Cluster(url, [process.pid for process in processes[1:]])
        finally:
            for process in processes:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                process.wait()


def pipeline(master: str, uri: str, *arguments: str) -> list[str]:
    """The command line of `warren-pipeline` on the cluster."""
    return [sys.executable, "-m", "warren.spark.cli", "--uri", uri, "--master", master, *arguments]


def run(env: dict[str, str], command: list[str]) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_land_on_a_standalone_cluster(
    spark: SparkSession, amqp, cluster: Cluster, cluster_env: dict[str, str], tmp_path: Path
):
    queue = amqp.queue("q")
    ids = amqp.publish(queue, MESSAGES)
    out = tmp_path / "out"
    land = ["land", "--queue", queue, "--out", str(out), "--available-now"]
    run(cluster_env, pipeline(cluster.master, amqp.url, *land))
    landed = spark.read.parquet(str(out)).select("message_id", "queue").collect()
    assert sorted(row.message_id for row in landed) == sorted(ids)
    assert {row.queue for row in landed} == {queue}
    assert amqp.ready(queue) == 0


def test_dlq_replay_on_a_standalone_cluster(
    amqp, cluster: Cluster, cluster_env: dict[str, str], tmp_path: Path
):
    dlx = amqp.exchange("dlx", "fanout")
    dlq = amqp.queue("dlq")
    amqp.channel.queue_bind(dlq, dlx)
    origin = amqp.queue("origin", **{"x-dead-letter-exchange": dlx})
    ids = amqp.publish(origin, DEAD)
    for _ in range(DEAD):
        method, _properties, _body = amqp.channel.basic_get(origin)
        amqp.channel.basic_reject(method.delivery_tag, requeue=False)
    deadline = time.monotonic() + 10
    while amqp.ready(dlq) < DEAD:
        assert time.monotonic() < deadline, "the dead letters did not arrive"
        time.sleep(0.1)

    checkpoint = str(tmp_path / "replay")
    replay = ["dlq-replay", "--queue", dlq, "--checkpoint", checkpoint]
    run(cluster_env, pipeline(cluster.master, amqp.url, *replay))

    assert amqp.ready(dlq) == 0
    replayed = []
    while (got := amqp.channel.basic_get(origin, auto_ack=True))[0] is not None:
        replayed.append(got[1].message_id)
    assert sorted(replayed) == sorted(ids)


def test_land_on_a_cluster_survives_an_executor_killed(
    spark: SparkSession, amqp, cluster: Cluster, cluster_env: dict[str, str], tmp_path: Path
):
    queue = amqp.queue("q")
    ids = amqp.publish(queue, KILLED_RUN)
    out, log = tmp_path / "out", tmp_path / "land.log"
    land = ["--batch-size", "100", "land", "--queue", queue, "--out", str(out), "--available-now"]
    with log.open("wb") as output:
        job = subprocess.Popen(
            pipeline(cluster.master, amqp.url, *land),
            env=cluster_env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    metadata = out / "_spark_metadata"
    deadline = time.monotonic() + START_S
    while not metadata.exists() or len(list(metadata.iterdir())) < 2:
        assert job.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "no two batches landed"
        time.sleep(0.2)
    consumers = amqp.channel.queue_declare(queue, passive=True).method.consumer_count
    assert consumers == 2  # N > 1: the cluster's two cores, two consumers and tasks
    executors = cluster.executors()
    assert executors, "no executor running"
    os.kill(executors[0], signal.SIGKILL)  # its tasks fail; Spark runs them again elsewhere

    assert job.wait(timeout=600) == 0, log.read_text(errors="replace")[-3000:]
    landed = spark.read.parquet(str(out))
    # two consumers and two tasks per batch (two one-core workers): a retried task carries
    # the same rows, so each message lands once
    assert sorted(row.message_id for row in landed.select("message_id").collect()) == sorted(ids)
    assert_repeats_are_redelivered(landed)
    assert amqp.ready(queue) == 0
