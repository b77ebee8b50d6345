"""A three-node cluster of real Warren processes for the cluster tests (`LocalCluster`).

The cluster is shared by the module's tests; each test uses its own queue names. A test
that kills or isolates a node brings it back before it ends (`revived`). `declare`,
`publish` and `drain` are the few client steps the tests share, `until` their wait.
With `WARREN_TEST_WORKERS=N` every node runs N worker processes (issue 19), as the
integration suite's nodes do (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.conftest import node_workers
from warren.testing.cluster import LocalCluster

NAMES = ["warren-a", "warren-b", "warren-c"]
SOFT_LIMIT = 8
# so that logs are compacted within a test, and bodies are read back from the WAL
SNAPSHOT_ENTRIES = 64
QUORUM = {"x-queue-type": "quorum"}
AVAILABLE_WITHIN_S = 15.0

# Against a broker named by WARREN_TEST_URL there is nothing to run: these tests start
# their own Warren nodes.
collect_ignore_glob = ["test_*.py"] if os.environ.get("WARREN_TEST_URL") else []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory: Path = tmp_path_factory.mktemp("cluster")
    # a low soft limit, so that flow control (connections not read) runs in every test
    extra = ["--quorum-commands-soft-limit", str(SOFT_LIMIT)]
    local = LocalCluster(
        directory,
        NAMES,
        extra=[*extra, "--raft-snapshot-entries", str(SNAPSHOT_ENTRIES)],
        workers=node_workers(),
    )
    try:
        local.start_all()
        yield local
    finally:
        local.stop_all()


@pytest.fixture
def name() -> str:
    return f"qq-{uuid.uuid4().hex[:8]}"


def connect(cluster: LocalCluster, node: str) -> pika.BlockingConnection:
    params = pika.URLParameters(cluster.nodes[node].url)
    params.blocked_connection_timeout = 30
    return pika.BlockingConnection(params)


@contextlib.contextmanager
def revived(cluster: LocalCluster) -> Iterator[None]:
    """Whatever the test did to nodes, they are all up and linked again afterwards."""
    try:
        yield
    finally:
        cluster.heal()
        for node, process in cluster.nodes.items():
            if not process.running:
                cluster.start(node)


def declare(cluster: LocalCluster, node: str, queue: str, **arguments: object) -> None:
    connection = connect(cluster, node)
    try:
        connection.channel().queue_declare(queue, durable=True, arguments={**QUORUM, **arguments})
    finally:
        connection.close()


def publish(cluster: LocalCluster, node: str, queue: str, bodies: list[bytes]) -> None:
    connection = connect(cluster, node)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    finally:
        connection.close()


def drain(cluster: LocalCluster, node: str, queue: str, expected: int) -> list[bytes]:
    """Consume with acks on `node` until `expected` messages came (or the wait ran out)."""
    connection = connect(cluster, node)
    got: list[bytes] = []
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)
        deadline = time.monotonic() + AVAILABLE_WITHIN_S
        for method, _props, body in channel.consume(queue, inactivity_timeout=0.5):
            if method is not None:
                got.append(body)
                channel.basic_ack(method.delivery_tag)
            if len(got) >= expected or time.monotonic() > deadline:
                break
        channel.cancel()
    finally:
        connection.close()
    return got


def until(read: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
    """Read until `done` holds or the availability bound passes; the last value."""
    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = read()
    return value
