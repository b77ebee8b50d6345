"""Data directories written by an earlier Warren are recovered by this one with nothing lost.

`tests/fixtures/legacy-data.tar.gz` holds a single node's and a 3-node cluster's data
directories written by the commit named in `tests/fixtures/legacy-data.json`
(`tests/fixtures/make_fixture.py`): durable classic queues with persistent messages mostly
read back from the log, a quorum queue whose group took a snapshot and has entries after
it, a metadata group with a snapshot, dead-lettered messages with x-death, and the
definitions of a vhost. Each test starts the current code on a copy and must find every
definition and every message (properties, headers, body) that the writing node handed out.
A change of the on-disk format keeps these passing by reading the old data (issue #20).

`tests/fixtures/legacy-workers.tar.gz` holds the same cluster's data with 2 worker
processes a node, written when a node's quorum replicas all lived on its worker 0 (before
they spread over the workers, issue 19): read by the current code, the old replicas stay
where they were and serve, and new queues spread.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.conftest import STARTED_LINE, start_warren
from tests.fixtures import legacy_data
from warren.testing.cluster import LocalCluster

FIXTURES = Path(__file__).parents[1] / "fixtures"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "legacy-data.json").read_text())
WORKERS_EXPECTED: dict[str, Any] = json.loads((FIXTURES / "legacy-workers.json").read_text())

pytestmark = pytest.mark.warren_only  # Warren's own data directories


def unpack(archive: str, directory: Path) -> Path:
    with tarfile.open(FIXTURES / archive) as opened:
        opened.extractall(directory, filter="data")
    return directory


@pytest.fixture
def unpacked(tmp_path: Path) -> Path:
    return unpack("legacy-data.tar.gz", tmp_path)


def returned_once(message: dict[str, Any]) -> dict[str, Any]:
    """`message` as a quorum queue hands it out again: the writing node's observation
    returned it, which counts as a delivery (``x-delivery-count``)."""
    headers = dict(message["properties"]["headers"])
    headers["x-delivery-count"] = headers.get("x-delivery-count", 0) + 1
    return {**message, "properties": {**message["properties"], "headers": headers}}


def assert_same(observed: dict[str, Any], expected: dict[str, Any]) -> None:
    assert observed["definitions"] == expected["definitions"]
    assert sorted(observed["messages"]) == sorted(expected["messages"])
    for queue, messages in expected["messages"].items():
        if queue == legacy_data.QUORUM:
            messages = [returned_once(message) for message in messages]
        assert observed["messages"][queue] == messages, queue


def test_single_node_recovers_everything(unpacked: Path) -> None:
    """The data directory of a node of one process, started with no worker count: a node
    keeps its number of workers (one process, whatever the cores), and refuses another."""
    data_dir = unpacked / "single"
    server = start_warren(data_dir, **legacy_data.NODE_SETTINGS, workers=None)
    try:
        api = legacy_data.http_api(server.management_port)
        assert api("GET", "/api/warren/environment", None)["settings"]["workers"] == 1
        observed = legacy_data.observe(api, server.port)
    finally:
        server.stop()
    assert server.log().count(STARTED_LINE) == 1
    assert_same(observed, EXPECTED["single"])
    # before, --workers 2 started two empty workers beside the one process's data
    refused = subprocess.run(
        [sys.executable, "-m", "warren", "--data-dir", str(data_dir), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=legacy_data.WAIT_S,
        check=False,
    )
    assert (refused.returncode, refused.stderr) == (
        1,
        f"warren-server: bad workers = 2: the data directory {data_dir} was made for 1 worker"
        " (one process), and changing a node's number of workers is not supported yet; leave"
        " workers out (the node keeps 1), or use another --data-dir\n",
    )
    assert not (data_dir / "workers").exists()


@pytest.mark.parametrize("entry", ["a", "c"])
def test_cluster_recovers_everything(unpacked: Path, entry: str) -> None:
    """Read through the node that wrote it, and through one whose log held only replicas,
    once it is linked with the others: a node keeps only its own classic queues and hears
    the others' from their homes when its links come up (docs/cluster.md)."""
    cluster = LocalCluster(unpacked / "cluster", ["a", "b", "c"], extra=legacy_data.NODE_FLAGS)
    try:
        cluster.start_all()
        node = cluster.nodes[entry]
        api = legacy_data.http_api(node.management_port)
        legacy_data.until(lambda: _linked(api("GET", "/api/warren/cluster", None)))
        observed = legacy_data.observe(api, node.port)
    finally:
        cluster.stop_all()
    assert_same(observed, EXPECTED["cluster"])


def _linked(status: dict[str, Any]) -> None:
    if status["running"] != status["nodes"]:
        raise AssertionError(f"linked with {status['running']} of {status['nodes']}")


def test_cluster_of_two_worker_nodes_keeps_its_replicas_and_spreads_new_ones(
    tmp_path: Path,
) -> None:
    directory = unpack("legacy-workers.tar.gz", tmp_path) / "cluster"
    cluster = LocalCluster(directory, ["a", "b", "c"], extra=legacy_data.NODE_FLAGS, workers=2)
    try:
        cluster.start_all()
        node = cluster.nodes["a"]
        api = legacy_data.http_api(node.management_port)
        legacy_data.until(lambda: _linked(api("GET", "/api/warren/cluster", None)))
        observed = legacy_data.observe(api, node.port)
        old = api("GET", f"/api/warren/quorum/{legacy_data.VHOST}/{legacy_data.QUORUM}", None)
        # a replica of the old layout is its node's worker 0, named after the node
        assert [(row["node"], row["member"]) for row in old] == [(n, n) for n in "abc"]
        connection = pika.BlockingConnection(pika.URLParameters(node.url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("spread", durable=True, arguments={"x-queue-type": "quorum"})
        channel.basic_publish("", "spread", b"new", pika.BasicProperties(delivery_mode=2))
        connection.close()
        new = api("GET", "/api/warren/quorum/%2F/spread", None)
        # each node's worker 0 holds a replica (the old queue's): the new one's go to worker 1
        assert [(row["node"], row["member"]) for row in new] == [(n, f"{n}-w1") for n in "abc"]
        assert legacy_data.until(lambda: _got(node.url, "spread")) == b"new"
    finally:
        cluster.stop_all()
    assert_same(observed, WORKERS_EXPECTED["cluster"])


def _got(url: str, queue: str) -> bytes:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        _method, _properties, body = connection.channel().basic_get(queue, auto_ack=True)
    finally:
        connection.close()
    if body is None:
        raise AssertionError(f"{queue} is empty")
    return bytes(body)
