"""A node joins a running three-node cluster knowing one node only, and is forgotten.

The joiner's name sorts after every other, and the others never had it in their
``cluster_nodes``: they learn of it from its hello and from the metadata group, and keep
its address across their restarts (`LocalCluster`, real processes)."""

from __future__ import annotations

from typing import Any

from tests.cluster.conftest import NAMES, declare, drain, publish, until
from warren.testing.cluster import LocalCluster

JOINER = "warren-z"
EVERYONE = [*NAMES, JOINER]


def status(cluster: LocalCluster, node: str) -> Any:
    return cluster.api(node, "/api/warren/cluster")


def wait_all_running(cluster: LocalCluster) -> None:
    """Until every node lists every node running (each linked to each), or time is up."""

    def running() -> list[Any]:
        try:
            return [status(cluster, node)["running"] for node in EVERYONE]
        except OSError:  # a node still starting its management listener
            return []

    linked = [EVERYONE] * len(EVERYONE)
    assert until(running, lambda seen: seen == linked) == linked


def messages(cluster: LocalCluster, node: str, queue: str) -> object:
    """The messages of the node's replica of the queue (None before it has the queue)."""
    try:
        return cluster.queue(node, queue)["messages"]
    except OSError:
        return None


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
        assert until(lambda: messages(cluster, JOINER, name), lambda n: n == 1) == 1
        assert sorted(cluster.queue("warren-c", name)["members"]) == EVERYONE
        publish(cluster, JOINER, name, [b"from z"])
        assert drain(cluster, JOINER, name, 2) == [b"before", b"from z"]
        # the acks are in: nothing comes back after the restarts below
        assert until(lambda: messages(cluster, JOINER, name), lambda n: n == 0) == 0
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

    def views() -> list[tuple[list[str], bool]]:
        found = [status(cluster, node) for node in NAMES]
        return [(sorted(each["metadata"]["voters"]), JOINER in each["nodes"]) for each in found]

    forgotten = [(NAMES, False)] * len(NAMES)
    assert until(views, lambda seen: seen == forgotten) == forgotten
    assert sorted(cluster.queue("warren-a", name)["members"]) == NAMES
    del cluster.nodes[JOINER]
