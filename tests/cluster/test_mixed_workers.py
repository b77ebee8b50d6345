"""A cluster of nodes that run different numbers of worker processes (issue 19): a
1-worker, a 2-worker and a 3-worker node form one cluster from ``cluster_nodes`` that
names nodes only. Each learns the others' workers as they join the metadata group (of
which each node's worker 0 is the only voter), classic queues homed on any worker of any
node serve connections on every node, a quorum queue gets one replica a node, and a
worker killed alone blocks no declare and catches up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import NAMES, connect, declare, drain, publish, until
from warren.testing.cluster import LocalCluster

WORKERS = dict(zip(NAMES, (1, 2, 3), strict=True))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory: Path = tmp_path_factory.mktemp("mixed")
    local = LocalCluster(directory, NAMES, workers=WORKERS)
    try:
        local.start_all()
        yield local
    finally:
        local.stop_all()


def _status(cluster: LocalCluster, node: str) -> dict[str, Any]:
    return dict(cluster.api(node, "/api/warren/cluster") or {})


def _metadata(cluster: LocalCluster, node: str) -> tuple[list[str], list[str], list[str]]:
    status = _status(cluster, node)
    metadata = status["metadata"]
    return sorted(status["running"]), sorted(metadata["voters"]), metadata["learners"]


def test_the_nodes_form_one_cluster_of_three_voters(mixed: LocalCluster) -> None:
    expected = (NAMES, NAMES, [])
    for node in NAMES:
        assert until(lambda node=node: _metadata(mixed, node), expected.__eq__) == expected
        assert sorted(item["name"] for item in mixed.api(node, "/api/nodes")) == NAMES


def test_classic_queues_on_every_worker_serve_every_node(mixed: LocalCluster) -> None:
    """Queues declared on each node land on its workers (a new queue goes to the worker
    homing the fewest); published on one node, consumed on another."""
    stamp = time.monotonic_ns()
    queues = [f"mixed-{node}-{number}-{stamp}" for node in NAMES for number in range(3)]
    for index, queue in enumerate(queues):
        connection = connect(mixed, NAMES[index // 3])
        connection.channel().queue_declare(queue, durable=True)
        connection.close()
    homes = {mixed.queue("warren-a", queue)["node"] for queue in queues}
    assert homes == set(NAMES)  # named as their nodes
    for index, queue in enumerate(queues):
        publish(mixed, NAMES[index % 3], queue, [queue.encode()])
    for index, queue in enumerate(queues):
        assert drain(mixed, NAMES[(index + 1) % 3], queue, 1) == [queue.encode()]
    connection = connect(mixed, "warren-a")
    for queue in queues:
        connection.channel().queue_delete(queue)
    connection.close()


def test_a_quorum_queue_has_one_replica_a_node(mixed: LocalCluster) -> None:
    queue = f"mixed-qq-{time.monotonic_ns()}"
    declare(mixed, "warren-c", queue, **{"x-quorum-initial-group-size": 3})
    state = until(lambda: mixed.queue("warren-b", queue), lambda state: state.get("leader"))
    assert sorted(state["members"]) == NAMES
    publish(mixed, "warren-a", queue, [b"one", b"two"])
    assert drain(mixed, "warren-b", queue, 2) == [b"one", b"two"]
    connection = connect(mixed, "warren-a")
    connection.channel().queue_delete(queue)
    connection.close()


def test_a_killed_worker_blocks_no_declare_and_catches_up(mixed: LocalCluster) -> None:
    """Worker 2 of the 3-worker node, killed (its supervisor restarts it), is a learner:
    an exchange is declared at once, and every node has it."""
    mixed.kill_worker("warren-c", 2)
    exchange = f"mixed-x-{time.monotonic_ns()}"
    connection = connect(mixed, "warren-b")
    channel = connection.channel()
    started = time.monotonic()
    channel.exchange_declare(exchange, "fanout", durable=True)
    assert time.monotonic() - started < 5.0
    connection.close()

    def everywhere() -> bool:
        try:
            return all(
                mixed.api(node, f"/api/exchanges/%2F/{exchange}") is not None for node in NAMES
            )
        except OSError:
            return False

    assert until(everywhere, bool)
    assert _metadata(mixed, "warren-c") == (NAMES, NAMES, [])
    connection = connect(mixed, "warren-a")
    connection.channel().exchange_delete(exchange)
    connection.close()
