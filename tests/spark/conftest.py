"""Spark for the pipeline tests: one local SparkSession for the whole session, and AMQP helpers.

Theory of operation:
1. `spark` is session-scoped: starting the JVM costs seconds, so every test shares one
   `local[2]` session with two shuffle partitions and no UI, built by `warren.spark`'s own
   `build_session` (so the tests go through the Java check, `PYSPARK_PYTHON` and the
   127.0.0.1 binding that users get).
2. Tests talk to the broker with pika, never through Warren's internals, so the same tests run
   against a real RabbitMQ when `WARREN_TEST_URL` is set (see tests/conftest.py).
3. Every name starts with `unique`; `declare` remembers the queues and exchanges a test made and
   deletes them afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pyspark.sql import SparkSession

from warren.spark import build_session

BODY_BYTES = 128


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", app_name="warren-tests", shuffle_partitions=2)
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


@pytest.fixture
def amqp(broker: Any, unique: str) -> Iterator[Amqp]:
    client = Amqp(broker.url, unique)
    yield client
    client.close()
