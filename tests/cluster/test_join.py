"""A node joins a running three-node cluster knowing one node only, and is forgotten.

The joiner's name sorts after every other, and the others never had it in their
``cluster_nodes``: they learn of it from its hello and from the metadata group, and keep
its address across their restarts (`LocalCluster`, real processes)."""

from __future__ import annotations

import time
from typing import Any

from tests.cluster.conftest import AVAILABLE_WITHIN_S, NAMES, declare, drain, publish
from warren.testing.cluster import LocalCluster

JOINER = "warren-z"
EVERYONE = [*NAMES, JOINER]


def status(cluster: LocalCluster, node: str) -> Any:
    return cluster.api(node, "/api/warren/cluster")


def wait_all_running(cluster: LocalCluster) -> None:
    """Until every node lists every node running (each linked to each), or time is up."""

    def linked() -> bool:
        try:
            return all(status(cluster, node)["running"] == EVERYONE for node in EVERYONE)
        except OSError:  # a node still starting its management listener
            return False

    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    while not linked() and time.monotonic() < deadline:
        time.sleep(0.2)
    for node in EVERYONE:
        assert status(cluster, node)["running"] == EVERYONE, node


def wait_messages(cluster: LocalCluster, node: str, queue: str, count: int) -> None:
    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    while cluster.queue(node, queue)["messages"] != count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.queue(node, queue)["messages"] == count


def restart(cluster: LocalCluster, node: str) -> None:
    cluster.kill(node)
    cluster.start(node)
    wait_all_running(cluster)


def test_a_node_that_sorts_last_joins_knowing_one_node(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    publish(cluster, "warren-a", name, [b"before"])
    cluster.add_node(JOINER, seeds=["warren-a"])
    try:
        wait_all_running(cluster)
        assert sorted(status(cluster, "warren-c")["metadata"]["voters"]) == EVERYONE
        members = f"/api/warren/quorum/%2F/{name}/members"
        cluster.api("warren-b", members, "POST", {"node": JOINER}, timeout_s=30)
        wait_messages(cluster, JOINER, name, 1)  # the new replica caught up
        assert sorted(cluster.queue("warren-c", name)["members"]) == EVERYONE
        publish(cluster, JOINER, name, [b"from z"])
        assert drain(cluster, JOINER, name, 2) == [b"before", b"from z"]
        wait_messages(cluster, JOINER, name, 0)  # the acks are in: no redelivery below
        # restarted, the joiner knows only warren-a again; warren-b never had it in its
        # cluster_nodes: both find every node from what they kept
        restart(cluster, JOINER)
        restart(cluster, "warren-b")
        publish(cluster, JOINER, name, [b"after restarts"])
        assert drain(cluster, JOINER, name, 1) == [b"after restarts"]
    finally:
        process = cluster.nodes[JOINER].process
        assert process is not None
        process.terminate()
        process.wait(timeout=15)
    # once stopped, forget_cluster_node takes it out of every group on every node
    cluster.api("warren-a", f"/api/warren/cluster/nodes/{JOINER}", "DELETE", timeout_s=30)
    for node in NAMES:
        assert sorted(status(cluster, node)["metadata"]["voters"]) == NAMES
        assert JOINER not in status(cluster, node)["nodes"]
    assert sorted(cluster.queue("warren-a", name)["members"]) == NAMES
    del cluster.nodes[JOINER]
