"""Spark for the pipeline tests: one local SparkSession for the whole session, and AMQP helpers.

Theory of operation:
1. `spark` is session-scoped: starting the JVM costs seconds, so every test shares one
   `local[2]` session with one shuffle partition and no UI, built by `warren.spark`'s own
   `build_session` (so the tests go through the Java check, `PYSPARK_PYTHON` and the
   127.0.0.1 binding that users get). Every JVM the tests start (this one, the process the
   SIGKILL test starts and the standalone cluster's master and workers, which inherit the
   environment) runs with `warren.spark.session.JAVA_OPTIONS`, through `JDK_JAVA_OPTIONS`:
   `build_session` gives them only to the driver it starts, and a JVM that lives a minute
   spends much of it in the C2 JIT compiler and parallel GC threads otherwise.
2. Tests talk to the broker with pika, never through Warren's internals, so the same tests run
   against a real RabbitMQ when `WARREN_TEST_URL` is set (see tests/conftest.py).
3. Every name starts with `unique`; `declare` remembers the queues and exchanges a test made and
   deletes them afterwards.
4. `killable_lander` is `warren-pipeline land` in a process of its own, on an empty queue, for
   the test that SIGKILLs it. Its JVM takes longer to start than most tests run, so
   test_pipeline.py asks for it before its first test and the process starts up while that
   module's other tests run; the SIGKILL test comes last and feeds it. (Started with the
   session instead, its start-up competed with this session's and nothing was gained.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pyspark.sql import DataFrame, SparkSession

from warren.spark import build_session
from warren.spark.session import JAVA_OPTIONS

BODY_BYTES = 128


@pytest.fixture(scope="session")
def spark_environment() -> Iterator[None]:
    """Rule 1: the environment of every JVM started while the Spark tests run."""
    with pytest.MonkeyPatch.context() as patch:
        java_options = os.environ.get("JDK_JAVA_OPTIONS")
        patch.setenv("JDK_JAVA_OPTIONS", f"{java_options or ''} {JAVA_OPTIONS}".strip())
        yield


@pytest.fixture(scope="session")
def spark(spark_environment: None) -> Iterator[SparkSession]:
    session = build_session("local[2]", app_name="warren-tests", shuffle_partitions=1)
    yield session
    session.stop()


class Amqp:
    """A pika channel on the test broker, and the names a test declared on it."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self.connection = self._connect()
        self.channel: BlockingChannel = self.connection.channel()
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def _connect(self) -> pika.BlockingConnection:
        parameters = pika.URLParameters(self.url)
        parameters.heartbeat = 0  # the test sits idle on it while Spark works for minutes
        return pika.BlockingConnection(parameters)

    def queue(self, suffix: str, **arguments: Any) -> str:
        name = f"{self.prefix}.{suffix}"
        self.channel.queue_declare(name, durable=True, arguments=arguments or None)
        self.queues.append(name)
        return name

    def exchange(self, suffix: str, exchange_type: str = "direct") -> str:
        name = f"{self.prefix}.{suffix}"
        self.channel.exchange_declare(name, exchange_type, durable=True)
        self.exchanges.append(name)
        return name

    def publish(
        self, routing_key: str, count: int, exchange: str = "", id_prefix: str = "m"
    ) -> list[str]:
        """`count` messages of BODY_BYTES with message ids `<id_prefix>-<n>`, then a round trip
        so the broker has them all."""
        ids = [f"{id_prefix}-{n}" for n in range(count)]
        for message_id in ids:
            body = message_id.encode().ljust(BODY_BYTES, b".")
            properties = pika.BasicProperties(message_id=message_id, delivery_mode=2)
            self.channel.basic_publish(exchange, routing_key, body, properties)
        self.channel.basic_qos(prefetch_count=0)  # a round trip: the publishes before it are in
        return ids

    def ready(self, queue: str) -> int:
        return int(self.channel.queue_declare(queue, passive=True).method.message_count)

    def close(self) -> None:
        if self.connection.is_closed:
            self.connection = self._connect()
            self.channel = self.connection.channel()
        for queue in self.queues:
            self.channel.queue_delete(queue)
        for exchange in self.exchanges:
            self.channel.exchange_delete(exchange)
        self.connection.close()


def assert_repeats_are_redelivered(landed: DataFrame) -> None:
    """At-least-once after a kill: a message landed more than once was first landed (or never
    landed) without `redelivered`, every other copy with it; a copy the broker never handed
    out before would mean two consumers got one message."""
    fresh = landed.where("NOT redelivered").groupBy("message_id").count().where("count > 1")
    assert fresh.count() == 0, fresh.limit(5).collect()


@pytest.fixture
def amqp(broker: Any, unique: str) -> Iterator[Amqp]:
    client = Amqp(broker.url, unique)
    yield client
    client.close()


@dataclasses.dataclass
class KillableLander:
    """`warren-pipeline land` running in its own process group, and what it works on."""

    amqp: Amqp
    queue: str
    batch_size: int
    out: Path
    checkpoint: Path
    log: Path
    process: subprocess.Popen[bytes]

    def batches_written(self) -> int:
        """Micro-batches its file sink has committed; fails if the process has ended."""
        assert self.process.poll() is None, self.log.read_text(errors="replace")
        metadata = self.out / "_spark_metadata"
        return len(list(metadata.iterdir())) if metadata.exists() else 0

    def kill(self) -> None:
        """SIGKILL to the process group: the CLI, its JVM and Spark's Python workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.fixture(scope="module")
def killable_lander(
    broker: Any, spark_environment: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KillableLander]:
    """Rule 4."""
    amqp = Amqp(broker.url, f"t.killable-lander.{secrets.token_hex(4)}")
    queue = amqp.queue("q")
    directory = tmp_path_factory.mktemp("killable-lander")
    out, checkpoint, log = directory / "out", directory / "checkpoint", directory / "land.log"
    batch_size = 100  # small batches, so it is killed mid-way through the queue
    command = [sys.executable, "-m", "warren.spark.cli", "--uri", broker.url]
    command += ["--batch-size", str(batch_size), "land", "--queue", queue]
    command += ["--out", str(out), "--checkpoint", str(checkpoint)]
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    lander = KillableLander(amqp, queue, batch_size, out, checkpoint, log, process)
    yield lander
    lander.kill()
    amqp.close()
