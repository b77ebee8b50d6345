"""A three-node cluster of real Warren processes for the cluster tests (`LocalCluster`).

The cluster is shared by the module's tests; each test uses its own queue names. A test
that kills or isolates a node brings it back before it ends (`revived`)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from warren.testing.cluster import LocalCluster

NAMES = ["warren-a", "warren-b", "warren-c"]

if os.environ.get("WARREN_TEST_URL"):
    pytest.skip("cluster tests start their own Warren nodes", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory: Path = tmp_path_factory.mktemp("cluster")
    local = LocalCluster(directory, NAMES)
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
