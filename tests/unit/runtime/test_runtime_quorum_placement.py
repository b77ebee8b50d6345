"""Where a quorum replica goes in a cluster of nodes of two workers each (issue 19):
`ClusterNode.replica_member` picks, on a node, the worker hosting the fewest replicas
that this worker reaches (this worker, then the lowest, on a tie); `workers_of` and
`member_on` find a node's workers and a queue's member on a node
(`warren.runtime.cluster.node`, module doc 6)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.unit.runtime.cluster_fixtures import QuietLinks, cluster_node
from warren.runtime.cluster.node import ClusterNode

NODES = ["a", "b", "c"]
MEMBERS = [member for node in NODES for member in (node, f"{node}-w1")]


def _worker(tmp_path: Path, name: str, down: frozenset[str] = frozenset()) -> ClusterNode:
    others = [member for member in MEMBERS if member != name]
    nodes_of = {member: member.removesuffix("-w1") for member in MEMBERS}
    return cluster_node(tmp_path, name, MEMBERS, QuietLinks(others, down), nodes_of)


def _hosting(cluster: ClusterNode, *member_lists: list[str]) -> None:
    """Queues whose replicas are on `member_lists` (only their members are read)."""
    for number, members in enumerate(member_lists):
        cluster.queues[f"g{number}"] = SimpleNamespace(members=members)  # type: ignore[assignment]


def test_a_nodes_workers_and_a_queues_member_on_a_node(tmp_path: Path) -> None:
    cluster = _worker(tmp_path, "b-w1")
    assert cluster.node_names() == NODES
    assert cluster.workers_of("a") == ["a", "a-w1"]
    assert cluster.member_on(["a-w1", "b", "c-w1"], "c") == "c-w1"
    assert cluster.member_on(["a-w1", "c-w1"], "b") is None


def test_an_empty_cluster_places_on_this_worker_and_on_the_others_worker_0(
    tmp_path: Path,
) -> None:
    cluster = _worker(tmp_path, "a-w1")
    assert [cluster.replica_member(node) for node in NODES] == ["a-w1", "b", "c"]


def test_a_new_replica_goes_to_the_worker_hosting_the_fewest(tmp_path: Path) -> None:
    cluster = _worker(tmp_path, "a")
    _hosting(cluster, ["a", "b", "c-w1"], ["a", "b-w1", "c"], ["a-w1", "b", "c"])
    # a: 2 against 1; b: 2 against 1; c: 2 against 1
    assert [cluster.replica_member(node) for node in NODES] == ["a-w1", "b-w1", "c-w1"]


def test_a_worker_this_one_does_not_reach_takes_no_replica(tmp_path: Path) -> None:
    cluster = _worker(tmp_path, "a", down=frozenset({"b", "a-w1"}))
    _hosting(cluster, ["a", "b-w1", "c"], ["a", "b-w1", "c-w1"])
    assert cluster.replica_member("b") == "b-w1"  # b (worker 0) hosts fewer, but is down
    assert cluster.replica_member("a") == "a"  # this worker, whatever it hosts
